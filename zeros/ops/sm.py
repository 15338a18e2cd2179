"""ZeroS-SM fast path (docs/spec.md §4): one fused softmax attention plus linear-time terms.

o_t = σʰ_t·softmax_attn_t + β_t·scale·q_t Σ_{i≤t} k_iᵀv_i − (β_t t s̄_t + σʰ_t)/t · Σ_{i≤t} v_i
with β_t = (σ¹_t − σʰ_t)/t and s̄_t = scale·q_t·(Σ_{i≤t} k_i)/t; (+ σ⁰_t/t Σ v_i with g0).
Nothing of size T×T is built: SDPA is flash/memory-efficient, the rest is O(T·d²).
Shapes: q, k, v [B, T, H, d]; gates [B, T, H].
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .library import RecomputeOp
from .linear import chunk_linear_attn
from .select import chunk_size_for


def fast_zeros_sm(q, k, v, g1, gh, g0=None, causal=True, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    return SM_OP(q, k, v, g1, gh, g0, bool(causal), scale)


def _fast_zeros_sm(q, k, v, g1, gh, g0, causal, scale):
    B, T, H, d = q.shape
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v))  # [B, H, T, d]
    # softmax part in the input dtype: the fused kernels accumulate in fp32 themselves
    soft = F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal, scale=scale).to(acc)
    qa, ka, va = (x.to(acc) for x in (qh, kh, vh))
    a, g = gh.transpose(1, 2).to(acc), g1.transpose(1, 2).to(acc)  # [B, H, T]
    if causal:
        n = torch.arange(1, T + 1, device=q.device, dtype=acc)  # [T]
        # [B, H, T, d] Σ_{i≤t} (q_t·k_i) v_i; chunks matched to d (small d: [C, C] traffic)
        lin = chunk_linear_attn(qa, ka, va, chunk_size=chunk_size_for(d))
        k_sum, v_sum = ka.cumsum(2), va.cumsum(2)  # [B, H, T, d]
    else:
        n = torch.full((T,), float(T), device=q.device, dtype=acc)
        kv = ka.transpose(-1, -2) @ va  # [B, H, d, d]
        lin = qa @ kv
        k_sum, v_sum = ka.sum(2, keepdim=True), va.sum(2, keepdim=True)
    s_bar = scale * (qa * k_sum).sum(-1) / n  # [B, H, T] mean logit of row t
    beta = (g - a) / n
    gamma = -((g - a) * s_bar + a) / n
    if g0 is not None:
        gamma = gamma + g0.transpose(1, 2).to(acc) / n
    o = a[..., None] * soft + (beta * scale)[..., None] * lin + gamma[..., None] * v_sum
    return o.transpose(1, 2)  # [B, T, H, d]


# zeros::sm: ZeroS-SM as one custom op under torch.compile; its backward recomputes the forward
# with torch.func.vjp (SDPA and the chunked linear terms have no hand-written backward here)
SM_OP = RecomputeOp("sm", _fast_zeros_sm, "(Tensor q, Tensor k, Tensor v, Tensor g1, Tensor gh, "
                    "Tensor? g0, bool causal, float scale) -> Tensor")
