"""Small pieces shared by the baseline mixers: causal depthwise conv, per-head norm, FFT conv."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class ShortConv(nn.Module):
    """Causal depthwise conv over time: x [B, T, C] -> [B, T, C] (y_t sees x_{t-k+1..t})."""

    def __init__(self, channels: int, kernel_size: int = 4, activation: bool = True):
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, kernel_size, groups=channels,
                              padding=kernel_size - 1)
        self.activation = activation

    def forward(self, x):
        T = x.shape[1]
        y = self.conv(x.transpose(1, 2))[..., :T].transpose(1, 2)  # [B, T, C]
        return F.silu(y) if self.activation else y


class HeadRMSNorm(nn.Module):
    """RMSNorm over the last dim of [B, T, H, d] with one weight per channel of d."""

    def __init__(self, head_dim: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(head_dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight).to(x.dtype)


def fft_causal_conv(u: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """y_t = Σ_{s≤t} k_s u_{t-s}: u [B, C, T], k [C, T] -> [B, C, T] (zero-padded FFT, O(T log T))."""
    T = u.shape[-1]
    n = 2 * T
    y = torch.fft.irfft(torch.fft.rfft(u.float(), n=n) * torch.fft.rfft(k.float(), n=n), n=n)
    return y[..., :T].to(u.dtype)


def shift_right(x: torch.Tensor) -> torch.Tensor:
    """x [B, T, C] -> x_{t-1} (zeros at t=0): RWKV's token shift."""
    return F.pad(x, (0, 0, 1, -1))
