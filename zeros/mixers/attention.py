"""Attention-type mixers: ZeroS, ZeroS-SM, softmax (SDPA + RoPE) and linear attention (LinAttn)."""
from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F

from ..layer import ZeroSAttention, ZeroSSMAttention
from ..ops import chunk_linear_attn
from ..rope import apply_rope
from .registry import register


# The ZeroS layers (docs/spec.md §5) as they are; kwargs pass through (rope, use_norm, zero_order, ...).
register("zeros", encoder=True)(ZeroSAttention)
register("zeros_sm", encoder=True)(ZeroSSMAttention)


class _HeadsBase(nn.Module):
    def __init__(self, d_model, n_heads, causal, bias, dropout):
        super().__init__()
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.causal = causal
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)
        self.drop = nn.Dropout(dropout)

    def _qkv(self, x):
        B, T, _ = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim).unbind(2)  # [B, T, H, d]
        return q, k, v


@register("softmax", encoder=True)
class SoftmaxAttention(_HeadsBase):
    """Multi-head softmax attention (PyTorch SDPA) with RoPE: the Transformer rows."""

    def __init__(self, d_model, n_heads, *, causal=True, rope=True, bias=True, dropout=0.0,
                 attn_dropout=0.0, rope_base=10000.0):
        super().__init__(d_model, n_heads, causal, bias, dropout)
        if rope and self.head_dim % 2:
            raise ValueError(f"rope=True needs an even head dim, got {self.head_dim}: change "
                             "d_model/n_heads or set rope=False")
        self.rope, self.rope_base, self.attn_dropout = rope, rope_base, attn_dropout

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self._qkv(x)  # [B, T, H, d]
        if self.rope:
            q, k = apply_rope(q, base=self.rope_base), apply_rope(k, base=self.rope_base)
        o = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=self.causal,
            dropout_p=self.attn_dropout if self.training else 0.0)  # [B, H, T, d]
        return self.drop(self.out(o.transpose(1, 2).reshape(B, T, D)))


class _Hadamard(nn.Module):
    """Learned Hadamard feature map φ(x) = (x A₁ᵀ + b₁) ⊙ (x A₂ᵀ + b₂) on the head dim, one map
    shared by every head (mad-lab's `feature_map: elementwise_product`)."""

    def __init__(self, head_dim):
        super().__init__()
        self.layer1, self.layer2 = nn.Linear(head_dim, head_dim), nn.Linear(head_dim, head_dim)

    def forward(self, x):
        return self.layer1(x) * self.layer2(x)


FEATURE_MAPS = ("elu", "hadamard")


@register("linear_attn", encoder=True)
class LinearAttention(_HeadsBase):
    """Linear Transformer (Katharopoulos et al. 2020): φ(x) = elu(x) + 1,
    o_t = φ(q_t) Σ_{i≤t} φ(k_i)ᵀ v_i / (φ(q_t) · Σ_{i≤t} φ(k_i) + eps); the paper's LinAttn row.

    feature_map="hadamard": mad-lab's linear attention (its MAD LinAttn row): φ learned, one
    `_Hadamard` map for q and one for k (not tied). The denominator is not kept positive there
    (φ can be negative); mad-lab adds only eps (1e-12) and so do we."""

    def __init__(self, d_model, n_heads, *, causal=True, bias=True, dropout=0.0, eps=1e-6,
                 normalize=True, feature_map="elu"):
        super().__init__(d_model, n_heads, causal, bias, dropout)
        if feature_map not in FEATURE_MAPS:
            raise ValueError(f"feature_map={feature_map!r}: use one of {', '.join(FEATURE_MAPS)}")
        self.eps, self.normalize, self.feature_map = eps, normalize, feature_map
        if feature_map == "hadamard":
            self.phi_q, self.phi_k = _Hadamard(self.head_dim), _Hadamard(self.head_dim)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = (t.transpose(1, 2) for t in self._qkv(x))  # [B, H, T, d]
        if self.feature_map == "hadamard":
            q, k = self.phi_q(q), self.phi_k(k)
        else:
            q, k = F.elu(q) + 1, F.elu(k) + 1
        if self.causal:
            o = chunk_linear_attn(q, k, v)  # [B, H, T, d]
            den = (q * k.cumsum(2)).sum(-1, keepdim=True)  # [B, H, T, 1]
        else:
            o = q @ (k.transpose(-1, -2) @ v)  # [B, H, T, d]
            den = q @ k.sum(2, keepdim=True).transpose(-1, -2)  # [B, H, T, 1]
        if self.normalize:
            o = o / (den + self.eps)
        return self.drop(self.out(o.transpose(1, 2).reshape(B, T, D)))
