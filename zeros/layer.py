"""The ZeroS attention layers (docs/spec.md §5): drop-in replacements for multi-head attention.

x [B, T, D] -> [B, T, D], D = H·d. `ZeroSAttention` is the linear-time layer (deviation logits,
RoPE, unit-norm q/k, the ZeroS operator, per-head LayerNorm); `ZeroSSMAttention` applies the
same reweighting to softmax logits (ZeroS-SM, docs/spec.md §4). Ablation switches (paper's ablation):
  zero_order=True   keep the 0th-order term, gated by σ⁰ = tanh(·)
  reweight=False    plain softmax weights σʰ·p_{t,i} instead of the zero-sum reweighting
                    (exact: g1 = gh = g0 = σʰ makes r = σʰ p, see `_gate_values`)
  gates=False       σ¹ = σʰ = σ⁰ = 1
  use_norm=False    no per-head LayerNorm
RoPE style: rope_style="standard" (default, the rotation of zeros/rope.py, fused with the unit
norm) | "authors" (the released layer's non-rotation, zeros/rope_authors.py; unfused, slower).
Both layers take `state=` / `return_state=True` for prompt-then-decode.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .ops import (ZeroSState, zeros_attention, zeros_prefill, zeros_sm_attention, zeros_step,
                  zeros_weights)
from .rope import apply_rope, rope_normalize
from .rope_authors import apply_rope_authors, check_rope_style, unit_norm


@dataclass
class ZeroSLayerState:
    op: ZeroSState  # the operator's prefix sums
    u_sum: torch.Tensor  # [B, H, d] Σ u_j for the running mean ū of the deviation logits
    t: int  # tokens consumed (RoPE offset)


@dataclass
class ZeroSSMLayerState:
    k: torch.Tensor  # [B, t, H, d] keys after RoPE (ZeroS-SM is quadratic: a KV cache)
    v: torch.Tensor  # [B, t, H, d]
    t: int


class _ZeroSBase(nn.Module):
    def __init__(self, d_model, n_heads, n_proj, *, causal, rope, use_norm, zero_order, reweight,
                 gates, bias, dropout, backend, rope_base, rope_style):
        super().__init__()
        if n_heads < 1 or d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}: pick "
                             "n_heads that divides d_model")
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        if rope and self.head_dim % 2:
            raise ValueError(f"rope=True needs an even head dim, got {self.head_dim} "
                             f"(d_model={d_model}, n_heads={n_heads}): change them or set rope=False")
        self.causal, self.rope, self.use_norm = causal, rope, use_norm
        self.zero_order, self.reweight, self.gates = zero_order, reweight, gates
        self.backend, self.rope_base = backend, rope_base
        self.rope_style = check_rope_style(rope_style)
        hooks = (type(self)._rope is _ZeroSBase._rope, type(self)._rope_qk is _ZeroSBase._rope_qk)
        if rope and rope_style == "authors" and not all(hooks):  # e.g. tasks/vision's 2-D RoPE
            raise ValueError(f"rope_style='authors' is the authors' 1-D RoPE, but "
                             f"{type(self).__name__} brings its own RoPE: use "
                             "rope_style='standard'")
        self.proj = nn.Linear(d_model, n_proj * d_model, bias=bias)
        # σ¹, σʰ (+ σ⁰ with the zero-order term); unused gates get no parameters
        n_gates = 2 + int(zero_order)
        self.gate = nn.Linear(d_model, n_gates * n_heads, bias=bias) if gates else None
        self.out = nn.Linear(d_model, d_model, bias=bias)
        self.drop = nn.Dropout(dropout)

    def _project(self, x, n):
        """The n projections and the gate logits in ONE matmul (weights concatenated: a copy of
        D x (n·D + gates) floats, far below the activations'), split ONCE along features (the
        backward is one concatenation; selecting pieces of a [B, T, n, H, d] view would build a
        zero-filled full-size gradient per piece). Returns qk [B, T, 2, H, d], the n-2 others
        [B, T, H, d] each (v, u) and the raw gates [B, T, n_gates, H] (None without gates).
        Same parameters as separate Linears."""
        B, T, D = x.shape
        H, d = self.n_heads, self.head_dim
        if self.gate is None:
            y, sizes = self.proj(x), [2 * D] + [D] * (n - 2)
        else:
            w = torch.cat([self.proj.weight, self.gate.weight])
            b = None if self.proj.bias is None else torch.cat([self.proj.bias, self.gate.bias])
            y, sizes = F.linear(x, w, b), [2 * D] + [D] * (n - 2) + [self.gate.out_features]
        parts = y.split(sizes, -1)
        qk, rest = parts[0].view(B, T, 2, H, d), [p.view(B, T, H, d) for p in parts[1:n - 1]]
        raw = parts[n - 1].view(B, T, -1, H) if self.gate is not None else None
        return qk, rest, raw

    def _split(self, x, n):
        """n×[B, T, H, d]: the projections alone (the spec's step-by-step form)."""
        qk, rest, _ = self._project(x, n)
        return (*qk.unbind(2), *rest)

    def _gate_values(self, x, raw=None):
        """(g1, gh, g0) [B, T, H], already activated; g0 None when no zero-order term is used.
        raw: the gate logits [B, T, n_gates, H] when `_project` already computed them."""
        B, T, _ = x.shape
        if self.gate is not None:
            raw = self.gate(x).view(B, T, -1, self.n_heads) if raw is None else raw
            g1, gh = torch.sigmoid(raw[:, :, :2]).unbind(2)  # one pass for both
            g0 = torch.tanh(raw[:, :, 2]) if self.zero_order else None
        else:
            g1 = gh = x.new_ones(B, T, self.n_heads)
            g0 = x.new_ones(B, T, self.n_heads) if self.zero_order else None
        if not self.reweight:  # r = σ¹δ/t + σʰε + g0/t with σ¹ = σʰ = g0 = σ gives r = σ·p
            g1, g0 = gh, gh if g0 is None else gh + g0
        return g1, gh, g0

    def _finish(self, o):
        """Per-head LayerNorm (no affine) -> merge heads -> output projection -> dropout."""
        B, T, H, d = o.shape
        if self.use_norm:
            o = F.layer_norm(o, (d,))
        return self.drop(self.out(o.reshape(B, T, H * d)))

    def _rope(self, q, k, offset):
        if not self.rope:
            return q, k
        rot = apply_rope_authors if self.rope_style == "authors" else apply_rope
        return rot(q, offset, self.rope_base), rot(k, offset, self.rope_base)

    def _rope_qk(self, qk, offset, normalize):
        """q, k [B, T, H, d] from the stacked qk [B, T, 2, H, d]: RoPE (+ unit norm) in one fused
        call (zeros/rope.py). A subclass that replaces the `_rope` hook (tasks/vision's 2-D
        RoPE) keeps its hook, then q and k are normalised one by one (stacking them would copy
        both: measured slower at Table 3's shape)."""
        own_hook = type(self)._rope is _ZeroSBase._rope
        if own_hook and (self.rope_style == "standard" or not self.rope):
            return rope_normalize(qk, offset, self.rope_base, rope=self.rope,
                                  normalize=normalize).unbind(2)
        # the unfused path: a replaced hook, or the authors' RoPE (not a rotation, so the fused
        # op's R-orthogonal backward does not apply; plain autograd, slower)
        q, k = self._rope(*qk.unbind(2), offset)
        if not normalize:
            return q, k
        return unit_norm(q), unit_norm(k)

    def _check_x(self, x, state, return_state):
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"expected x of shape (B, T, {self.d_model}), got {tuple(x.shape)}")
        if (state is not None or return_state) and not self.causal:
            raise ValueError("state/return_state need causal=True: an encoder row reads the "
                             "whole sequence, so there is nothing to carry")


class ZeroSAttention(_ZeroSBase):
    """ZeroS linear attention layer, [B, T, D] -> [B, T, D]."""

    def __init__(self, d_model, n_heads, *, causal=True, rope=True, use_norm=True,
                 zero_order=False, reweight=True, gates=True, bias=True, dropout=0.0,
                 backend="auto", rope_base=10000.0, rope_style="standard"):
        super().__init__(d_model, n_heads, 4, causal=causal, rope=rope, use_norm=use_norm,
                         zero_order=zero_order, reweight=reweight, gates=gates, bias=bias,
                         dropout=dropout, backend=backend, rope_base=rope_base,
                         rope_style=rope_style)
        self.mu = nn.Parameter(torch.zeros(n_heads, self.head_dim))  # prior mean of u
        self.tau = nn.Parameter(torch.zeros(n_heads))  # log prior weight e^τ

    def deviation_logits(self, u, u_sum0=None, t0=0):
        """s_i = -(u_i·ū_i)/√d, ū_i = (e^τ μ + Σ_{j≤i} u_j)/(e^τ + i) (encoder: all j, N).
        u [B, T, H, d] -> s [B, T, H] and the new Σ u_j [B, H, d]."""
        T = u.shape[1]
        # fp32 whatever the autocast dtype: a bf16 running sum of u and a bf16 position count
        # (integers above 256 are rounded) would bias ū; s is [B, T, H], small
        acc = torch.float64 if u.dtype == torch.float64 else torch.float32
        u = u.to(acc)
        w = self.tau.exp().to(acc)  # [H]
        if self.causal:
            u_cum = u.cumsum(1) + (0 if u_sum0 is None else u_sum0[:, None])  # [B, T, H, d]
            cnt = (t0 + torch.arange(1, T + 1, device=u.device))[:, None].to(acc)  # [T, 1] exact
        else:
            u_cum = u.sum(1, keepdim=True)  # [B, 1, H, d]
            cnt = torch.full((1, 1), float(T), device=u.device, dtype=acc)
        # s = -u·(e^τ μ + Σu)/(√d (e^τ + i)): the division is per (position, head), applied to
        # the [B, T, H] dot products, not to the [B, T, H, d] mean
        dot = (u * (u_cum + w[:, None] * self.mu.to(acc))).sum(-1)  # [B, T, H]
        s = dot * (-1.0 / (math.sqrt(self.head_dim) * (w + cnt)))  # [T|1, H] scale
        return s, u_cum[:, -1]

    def forward(self, x, state: ZeroSLayerState | None = None, return_state: bool = False):
        self._check_x(x, state, return_state)
        B, T, _ = x.shape
        t0 = 0 if state is None else state.t
        qk, (v, u), raw = self._project(x, 4)  # [B, T, 2, H, d], [B, T, H, d] x2
        s, u_sum = self.deviation_logits(u, None if state is None else state.u_sum, t0)
        # RoPE + unit norm in fp32, then q, k go on in v's (the compute) dtype: under bf16
        # autocast an fp32 q, k would send the kernels down their fp32 path
        q, k = self._rope_qk(qk, t0, normalize=True)
        g1, gh, g0 = self._gate_values(x, raw)
        if state is None and not return_state:
            o = zeros_attention(q, k, v, s, g1, gh, g0, causal=self.causal, backend=self.backend,
                                assume_unit_norm=True)
            return self._finish(o)
        if T == 1 and state is not None:
            o_t, op = zeros_step(state.op, q[:, 0], k[:, 0], v[:, 0], s[:, 0], g1[:, 0],
                                 gh[:, 0], None if g0 is None else g0[:, 0])
            o = o_t[:, None]
        else:
            o, op = zeros_prefill(q, k, v, s, g1, gh, g0,
                                  initial_state=None if state is None else state.op)
        return self._finish(o), ZeroSLayerState(op, u_sum, t0 + T)


class ZeroSSMAttention(_ZeroSBase):
    """ZeroS-SM: zero-sum reweighting of softmax attention logits, [B, T, D] -> [B, T, D]."""

    def __init__(self, d_model, n_heads, *, causal=True, rope=True, use_norm=True,
                 zero_order=False, reweight=True, gates=True, bias=True, dropout=0.0,
                 backend="auto", rope_base=10000.0, scale=None, rope_style="standard"):
        super().__init__(d_model, n_heads, 3, causal=causal, rope=rope, use_norm=use_norm,
                         zero_order=zero_order, reweight=reweight, gates=gates, bias=bias,
                         dropout=dropout, backend=backend, rope_base=rope_base,
                         rope_style=rope_style)
        self.scale = scale

    def forward(self, x, state: ZeroSSMLayerState | None = None, return_state: bool = False):
        self._check_x(x, state, return_state)
        B, T, _ = x.shape
        t0 = 0 if state is None else state.t
        qk, (v,), raw = self._project(x, 3)  # [B, T, 2, H, d], [B, T, H, d]
        q, k = self._rope_qk(qk, t0, normalize=False)
        g1, gh, g0 = self._gate_values(x, raw)
        if state is None and not return_state:
            o = zeros_sm_attention(q, k, v, g1, gh, g0, causal=self.causal, scale=self.scale,
                                   backend=self.backend)
            return self._finish(o)
        K = k if state is None else torch.cat([state.k, k], 1)  # [B, t0+T, H, d]
        V = v if state is None else torch.cat([state.v, v], 1)
        o = self._cached_rows(q, K, V, g1, gh, g0, t0)
        return self._finish(o), ZeroSSMLayerState(K, V, t0 + T)

    def _cached_rows(self, q, K, V, g1, gh, g0, t0):
        """Rows t0..t0+T-1 against a KV cache, with explicit weights (decoding: T is small)."""
        T, Tk, d = q.shape[1], K.shape[1], q.shape[-1]
        scale = d ** -0.5 if self.scale is None else self.scale
        acc = torch.float64 if q.dtype == torch.float64 else torch.float32
        qh, kh, vh = (x.transpose(1, 2).to(acc) for x in (q, K, V))  # [B, H, ·, d]
        rows = torch.arange(t0, t0 + T, device=q.device)[:, None]
        mask = torch.arange(Tk, device=q.device)[None, :] <= rows  # [T, Tk]
        w = zeros_weights(scale * qh @ kh.transpose(-1, -2), *(
            None if g is None else g.transpose(1, 2).to(acc) for g in (g1, gh, g0)), mask=mask)
        return (w @ vh).transpose(1, 2).to(q.dtype)  # [B, T, H, d]
