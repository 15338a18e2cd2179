"""Chunked causal linear attention, o_t = Σ_{i≤t} (q_t·k_i) v_i, with activations linear in T.

Used by ZeroS-SM's fast path (its first-order term) and by the LinAttn baseline.
Shapes: q, k, v [B, H, T, d] (head-major, as the callers already hold them).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

DEFAULT_CHUNK = 64


def chunk_linear_attn(q, k, v, chunk_size: int = DEFAULT_CHUNK):
    B, H, T, d = q.shape
    dv = v.shape[-1]
    C = min(chunk_size, T)  # a short sequence is one chunk: padding T=11 to 64 costs 5x
    n = -(-T // C)
    pad = n * C - T
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
    qc, kc, vc = (x.reshape(B, H, n, C, x.shape[-1]) for x in (q, k, v))  # [B, H, n, C, ·]
    tril = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    intra = ((qc @ kc.transpose(-1, -2)).masked_fill(~tril, 0.0)) @ vc  # [B, H, n, C, dv]
    dS = kc.transpose(-1, -2) @ vc  # [B, H, n, d, dv] per-chunk Σ k_iᵀ v_i
    S_prev = torch.cumsum(dS, 2) - dS  # exclusive prefix over chunks
    o = intra + qc @ S_prev  # [B, H, n, C, dv]
    return o.reshape(B, H, n * C, dv)[:, :, :T]
