"""Domain baselines of Table 4, written from their papers. Each maps x [B, L, C] -> [B, H, C].

- DLinear (Zeng et al., AAAI 2023): moving-average trend/seasonal decomposition (kernel 25,
  series padded by repeating its end values), one Linear(L -> H) per component shared across
  channels, outputs summed.
- PatchTST (Nie et al., ICLR 2023): channel-independent; RevIN instance normalisation; the series
  padded at the end by repeating its last value `stride` times, cut into patches (16, stride 8);
  a linear patch embedding + learned position embedding; a post-norm Transformer encoder with
  BatchNorm; a flatten head Linear(d_model * n_patches -> H).
- iTransformer (Liu et al., ICLR 2024): the "inverted" Transformer; each variate's whole
  (normalised) lookback window is one token (Linear(L -> d_model)); a post-norm encoder with
  LayerNorm attends across variates; Linear(d_model -> H) per token. (The paper also appends
  time-stamp covariates as extra tokens; this data pipeline carries none, so they are absent.)
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class MovingAverage(nn.Module):
    def __init__(self, kernel: int):
        super().__init__()
        self.kernel = kernel

    def forward(self, x):  # [B, L, C]
        front = x[:, :1].expand(-1, (self.kernel - 1) // 2, -1)
        back = x[:, -1:].expand(-1, self.kernel // 2, -1)
        padded = torch.cat([front, x, back], dim=1)  # [B, L + k - 1, C]
        return F.avg_pool1d(padded.transpose(1, 2), self.kernel, stride=1).transpose(1, 2)


class DLinear(nn.Module):
    def __init__(self, lookback: int, horizon: int, n_channels: int, kernel: int = 25):
        super().__init__()
        self.trend = MovingAverage(kernel)
        self.linear_seasonal = nn.Linear(lookback, horizon)
        self.linear_trend = nn.Linear(lookback, horizon)

    def forward(self, x):  # [B, L, C]
        trend = self.trend(x)  # [B, L, C]
        seasonal = x - trend
        out = self.linear_seasonal(seasonal.transpose(1, 2)) + \
            self.linear_trend(trend.transpose(1, 2))  # [B, C, H]
        return out.transpose(1, 2)  # [B, H, C]


class EncoderLayer(nn.Module):
    """Post-norm Transformer encoder layer (bidirectional MHA + GELU FFN)."""

    def __init__(self, d_model, n_heads, d_ff, dropout, norm: str):
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Dropout(dropout),
                                nn.Linear(d_ff, d_model))
        self.drop = nn.Dropout(dropout)
        self.batch_norm = norm == "batch"
        make = (lambda: nn.BatchNorm1d(d_model)) if self.batch_norm else (lambda: nn.LayerNorm(d_model))
        self.norm_attn, self.norm_ff = make(), make()

    def _norm(self, norm, x):  # [B, T, D]
        return norm(x.transpose(1, 2)).transpose(1, 2) if self.batch_norm else norm(x)

    def forward(self, x):  # [B, T, D]
        x = self._norm(self.norm_attn, x + self.drop(self.attn(x, x, x, need_weights=False)[0]))
        return self._norm(self.norm_ff, x + self.drop(self.ff(x)))


class RevIN(nn.Module):
    """Reversible instance normalisation with a per-channel affine map (PatchTST's default)."""

    def __init__(self, n_channels: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(n_channels))
        self.bias = nn.Parameter(torch.zeros(n_channels))

    def normalise(self, x):  # [B, L, C]
        self.mean = x.mean(dim=1, keepdim=True).detach()  # [B, 1, C]
        self.std = torch.sqrt(x.var(dim=1, keepdim=True, unbiased=False) + self.eps).detach()
        return (x - self.mean) / self.std * self.weight + self.bias

    def denormalise(self, y):  # [B, H, C]
        y = (y - self.bias) / (self.weight + self.eps * self.eps)
        return y * self.std + self.mean


class PatchTST(nn.Module):
    def __init__(self, lookback: int, horizon: int, n_channels: int, *, patch_len: int = 16,
                 stride: int = 8, d_model: int = 128, n_heads: int = 8, n_layers: int = 3,
                 d_ff: int = 256, dropout: float = 0.2, head_dropout: float = 0.0):
        super().__init__()
        self.patch_len, self.stride = patch_len, stride
        self.n_patches = (lookback - patch_len) // stride + 1 + 1  # +1 from the end padding
        self.revin = RevIN(n_channels)
        self.embed = nn.Linear(patch_len, d_model)
        self.pos_emb = nn.Parameter(torch.empty(self.n_patches, d_model).uniform_(-0.02, 0.02))
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(EncoderLayer(d_model, n_heads, d_ff, dropout, "batch")
                                    for _ in range(n_layers))
        self.head = nn.Sequential(nn.Flatten(-2), nn.Dropout(head_dropout),
                                  nn.Linear(d_model * self.n_patches, horizon))

    def forward(self, x):  # [B, L, C]
        B, L, C = x.shape
        z = self.revin.normalise(x).transpose(1, 2)  # [B, C, L]
        z = torch.cat([z, z[..., -1:].expand(-1, -1, self.stride)], dim=-1)  # [B, C, L+S]
        patches = z.unfold(-1, self.patch_len, self.stride)  # [B, C, P, patch_len]
        h = self.drop(self.embed(patches.reshape(B * C, self.n_patches, -1)) + self.pos_emb)
        for layer in self.layers:
            h = layer(h)  # [B*C, P, D]
        out = self.head(h).view(B, C, -1).transpose(1, 2)  # [B, H, C]
        return self.revin.denormalise(out)


class ITransformer(nn.Module):
    def __init__(self, lookback: int, horizon: int, n_channels: int, *, d_model: int = 128,
                 n_heads: int = 8, n_layers: int = 3, d_ff: int = 256, dropout: float = 0.1):
        super().__init__()
        self.embed = nn.Linear(lookback, d_model)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(EncoderLayer(d_model, n_heads, d_ff, dropout, "layer")
                                    for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.project = nn.Linear(d_model, horizon)

    def forward(self, x):  # [B, L, C]
        mean = x.mean(dim=1, keepdim=True).detach()  # [B, 1, C]
        std = torch.sqrt(x.var(dim=1, keepdim=True, unbiased=False) + 1e-5).detach()
        tokens = self.drop(self.embed(((x - mean) / std).transpose(1, 2)))  # [B, C, D]
        for layer in self.layers:
            tokens = layer(tokens)
        out = self.project(self.norm(tokens)).transpose(1, 2)  # [B, H, C]
        return out * std + mean
