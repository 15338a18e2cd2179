"""State-space baselines: Mamba (selective scan, chunked pure torch) and Mamba-2 (SSD, computed as
a scalar-decay gated linear attention with fla's simple-GLA op)."""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import ShortConv
from .fla_based import simple_gla_op
from .registry import register


def selective_scan(u, dA, Bm, Cm, chunk: int = 16):
    """h_t = e^{dA_t} ⊙ h_{t-1} + u_t B_t, y_t = h_t C_t, per channel (Mamba's S6).

    u [B, T, Di], dA [B, T, Di, N] (log decay ≤ 0), Bm, Cm [B, T, N] -> y [B, T, Di].
    Chunked: inside a chunk the pairwise decays e^{L_t - L_i} (i ≤ t, so exponent ≤ 0: stable)
    are formed explicitly; the state is carried between chunks. Works on CPU and CUDA."""
    Bsz, T, Di = u.shape
    N = Bm.shape[-1]
    h = u.new_zeros(Bsz, Di, N, dtype=torch.float32)
    ys = []
    for s in range(0, T, chunk):
        a = dA[:, s:s + chunk].float()  # [B, c, Di, N]
        c = a.shape[1]
        L = a.cumsum(1)  # [B, c, Di, N] cumulative log decay inside the chunk
        b = u[:, s:s + chunk, :, None].float() * Bm[:, s:s + chunk, None, :].float()  # [B, c, Di, N]
        mask = torch.ones(c, c, dtype=torch.bool, device=u.device).tril()[None, :, :, None, None]
        diff = L[:, :, None] - L[:, None, :]  # [B, c(t), c(i), Di, N]
        w = torch.where(mask, diff, torch.full_like(diff, -float("inf"))).exp()
        hs = (w * b[:, None]).sum(2) + L.exp() * h[:, None]  # [B, c, Di, N]
        ys.append((hs * Cm[:, s:s + chunk, None, :].float()).sum(-1))  # [B, c, Di]
        h = hs[:, -1]
    return torch.cat(ys, 1).to(u.dtype)


def _dt_bias(n: int, dt_min=1e-3, dt_max=1e-1) -> torch.Tensor:
    # softplus^{-1} of dt drawn log-uniformly in [dt_min, dt_max] (Mamba's dt init)
    dt = torch.exp(torch.rand(n) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
    return dt + torch.log(-torch.expm1(-dt))


@register("mamba")
class Mamba(nn.Module):
    """Mamba block (Gu & Dao 2023): in-proj -> causal depthwise conv -> selective SSM -> silu(z)
    gate -> out-proj. n_heads is unused."""

    def __init__(self, d_model, n_heads, *, causal=True, d_state=16, expand=2, d_conv=4,
                 dt_rank=None, bias=False, dropout=0.0):
        super().__init__()
        self.drop = nn.Dropout(dropout)  # on the output, as the attention mixers do
        di = expand * d_model
        self.d_inner, self.d_state = di, d_state
        self.dt_rank = dt_rank or math.ceil(d_model / 16)
        self.in_proj = nn.Linear(d_model, 2 * di, bias=bias)
        self.conv = ShortConv(di, d_conv)
        self.x_proj = nn.Linear(di, self.dt_rank + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, di, bias=True)
        with torch.no_grad():
            self.dt_proj.bias.copy_(_dt_bias(di))
        # Mamba's dt init must survive a model-wide "zero every Linear bias" init: mad-lab's
        # LanguageModel and zoology's Mamba branch skip biases marked so (as mamba_ssm marks it)
        self.dt_proj.bias._no_reinit = True
        self.A_log = nn.Parameter(torch.log(torch.arange(1, d_state + 1).float()).repeat(di, 1))
        self.D = nn.Parameter(torch.ones(di))
        self.out_proj = nn.Linear(di, d_model, bias=bias)

    def forward(self, x):
        xi, z = self.in_proj(x).chunk(2, dim=-1)  # [B, T, Di]
        xi = self.conv(xi)
        dt, Bm, Cm = self.x_proj(xi).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        dt = F.softplus(self.dt_proj(dt))  # [B, T, Di]
        dA = dt[..., None] * -torch.exp(self.A_log)  # [B, T, Di, N]
        y = selective_scan(dt * xi, dA, Bm, Cm) + self.D * xi  # [B, T, Di]
        return self.drop(self.out_proj(y * F.silu(z)))


@register("mamba2")
class Mamba2(nn.Module):
    """Mamba-2 (Dao & Gu 2024): one scalar decay per head (SSD), B/C shared over heads (1 group),
    conv over [x, B, C], gated RMSNorm. Heads = n_heads over d_inner = expand·D."""

    def __init__(self, d_model, n_heads, *, causal=True, d_state=16, expand=2, d_conv=4,
                 bias=False, dropout=0.0):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        di = expand * d_model
        self.d_inner, self.d_state, self.n_heads = di, d_state, n_heads
        self.head_dim = di // n_heads
        self.in_proj = nn.Linear(d_model, 2 * di + 2 * d_state + n_heads, bias=bias)
        self.conv = ShortConv(di + 2 * d_state, d_conv)
        self.dt_bias = nn.Parameter(_dt_bias(n_heads))
        self.A_log = nn.Parameter(torch.log(torch.empty(n_heads).uniform_(1, 16)))
        self.D = nn.Parameter(torch.ones(n_heads))
        self.norm = nn.RMSNorm(di)
        self.out_proj = nn.Linear(di, d_model, bias=bias)

    def forward(self, x):
        B, T, _ = x.shape
        z, xbc, dt = self.in_proj(x).split([self.d_inner, self.d_inner + 2 * self.d_state,
                                            self.n_heads], dim=-1)
        xs, Bm, Cm = self.conv(xbc).split([self.d_inner, self.d_state, self.d_state], dim=-1)
        dt = F.softplus(dt + self.dt_bias)  # [B, T, H]
        g = dt * -torch.exp(self.A_log)  # [B, T, H] log decay
        xs = xs.view(B, T, self.n_heads, self.head_dim)  # [B, T, H, P]
        q = Cm[:, :, None, :].expand(B, T, self.n_heads, self.d_state)  # [B, T, H, N]
        k = Bm[:, :, None, :].expand(B, T, self.n_heads, self.d_state)
        y = simple_gla_op(q.contiguous(), k.contiguous(), (xs * dt[..., None]).contiguous(), g,
                          scale=1.0)  # [B, T, H, P]
        y = (y + self.D[:, None] * xs).reshape(B, T, self.d_inner)
        return self.drop(self.out_proj(self.norm(y * F.silu(z))))
