"""Recurrent linear-attention baselines on flash-linear-attention (fla) ops: GLA, DeltaNet, HGRN,
HGRN2, RetNet, RWKV-6. Our own thin layers (projections, gates, norms) call fla's chunked Triton
kernels on CUDA and fla's pure-torch `naive` references on CPU (fla's Triton layers do not run on
CPU). fla is imported lazily: importing it costs seconds. All ops take [B, T, H, K] tensors."""
from __future__ import annotations

import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..rope import apply_rope
from .common import HeadRMSNorm, ShortConv, shift_right
from .registry import register

# fla warns once on import that Triton cannot run on CPU: expected here, we use its naive path
warnings.filterwarnings("ignore", message="Triton is not supported on current platform")


# fla's chunk kernels tile the key and value dims with tl.dot, which needs tiles >= 16 wide on
# NVIDIA GPUs (the backward of chunk_gla at K = 4 does not compile); below that the fused
# recurrent kernels (elementwise updates of the K x V state, no tl.dot over K or V) run instead.
MIN_CHUNK_DIM = 16


def _cuda(x: torch.Tensor) -> bool:
    return x.is_cuda


def _kernel_dtype(*xs: torch.Tensor) -> torch.dtype:
    """One dtype for the kernel's q, k, v, as fla's own layers hand them over: the autocast dtype
    under CUDA autocast (fp32 elementwise results such as exp/softplus/normalize are cast down,
    the kernels accumulate in fp32 anyway), else the inputs' promoted dtype."""
    if torch.is_autocast_enabled("cuda"):
        return torch.get_autocast_dtype("cuda")
    dt = xs[0].dtype
    for x in xs[1:]:
        dt = torch.promote_types(dt, x.dtype)
    return dt


def _same_dtype(*xs):
    dt = _kernel_dtype(*xs)
    return [x.to(dt) for x in xs]


def _chunk_ok(q, v) -> bool:
    return min(q.shape[-1], v.shape[-1]) >= MIN_CHUNK_DIM


# dynamo cannot trace fla's GLA autograd Functions (torch 2.10-2.14, fla-core 0.4: "an
# intermediate tensor 'v_2' created inside a higher-order op subgraph aliases an input or output"),
# so under torch.compile the kernel call runs eagerly between two graphs (a graph break, not a
# crash); the other fla ops trace (the compiled dry-run, docs/operator.md). Wrapped at the first
# CUDA call, not at import: torch.compiler.disable imports dynamo (~3 s) and `import zeros` must not
_EAGER: dict = {}


def _eager(fn):
    if fn not in _EAGER:
        _EAGER[fn] = torch.compiler.disable(fn)
    return _EAGER[fn]


def _gla_kernel(q, k, v, gk, scale):
    q, k, v = _same_dtype(q, k, v)
    if _chunk_ok(q, v):
        from fla.ops.gla import chunk_gla
        return chunk_gla(q, k, v, gk, scale=scale)[0]
    from fla.ops.gla import fused_recurrent_gla
    return fused_recurrent_gla(q, k, v, gk=gk, scale=scale)[0]


def gla_op(q, k, v, gk, scale):
    """o_t = Σ_i (q_t ⊙ Π_{i<j≤t} e^{gk_j}) · k_i v_i; gk = per-channel log decay [B, T, H, K]."""
    if _cuda(q):
        return _eager(_gla_kernel)(q, k, v, gk, scale)
    from fla.ops.gla.naive import naive_recurrent_gla
    K = q.shape[-1]
    return naive_recurrent_gla(q * (scale * K ** 0.5), k, v, gk)[0]  # naive fixes scale=K^-0.5


def simple_gla_op(q, k, v, g, scale):
    """GLA with one scalar log decay per head and step, g [B, T, H] (Mamba-2's SSD form)."""
    if _cuda(q):
        q, k, v = _same_dtype(q, k, v)
        if _chunk_ok(q, v):
            from fla.ops.simple_gla import chunk_simple_gla
            return chunk_simple_gla(q, k, v, g=g, scale=scale)[0]
        from fla.ops.simple_gla import fused_recurrent_simple_gla
        return fused_recurrent_simple_gla(q, k, v, g=g, scale=scale)[0]
    from fla.ops.simple_gla.naive import naive_recurrent_simple_gla
    return naive_recurrent_simple_gla(q, k, v, g, scale=scale)[0]


def delta_op(q, k, v, beta, scale):
    """Delta rule S_t = S_{t-1} + β_t k_t (v_t - S_{t-1}ᵀ k_t)ᵀ, o_t = S_tᵀ q_t; beta [B, T, H].
    On CUDA: fla's chunk kernel in bf16/fp16; it refuses fp32 (precision=32-true) and small head
    dims, where the fused recurrent kernel (fp32-capable) runs instead."""
    if _cuda(q):
        q, k, v = _same_dtype(q, k, v)
        if _chunk_ok(q, v) and q.dtype != torch.float32:
            from fla.ops.delta_rule import chunk_delta_rule
            return chunk_delta_rule(q, k, v, beta, scale=scale)[0]
        from fla.ops.delta_rule import fused_recurrent_delta_rule
        return fused_recurrent_delta_rule(q, k, v, beta.to(q.dtype), scale=scale)[0]
    from fla.ops.delta_rule.naive import delta_rule_recurrence
    K = q.shape[-1]
    o, _ = delta_rule_recurrence(*(t.transpose(1, 2) for t in (q * (scale * K ** 0.5), k, v)),
                                 beta.transpose(1, 2), output_final_state=False)
    return o.transpose(1, 2)


def hgrn_op(x, g):
    """h_t = e^{g_t} ⊙ h_{t-1} + x_t, x, g [B, T, D]."""
    if _cuda(x):
        from fla.ops.hgrn import chunk_hgrn
        return chunk_hgrn(*_same_dtype(x, g))[0]
    from fla.ops.hgrn.naive import naive_recurrent_hgrn
    return naive_recurrent_hgrn(x, g)[0]


def retention_op(q, k, v):
    """RetNet retention with fla's fixed per-head decays γ_h = 1 - 2^(-5-h), scale K^-0.5."""
    if _cuda(q):
        q, k, v = _same_dtype(q, k, v)
        if _chunk_ok(q, v):
            from fla.ops.retention import chunk_retention
            return chunk_retention(q, k, v)[0]
        from fla.ops.retention import fused_recurrent_retention
        return fused_recurrent_retention(q, k, v)[0]
    from fla.ops.retention.naive import naive_retention
    return naive_retention(*(t.transpose(1, 2) for t in (q, k, v))).transpose(1, 2)


def rwkv6_op(r, k, v, w, u, scale):
    """RWKV-6: o_t = r_t (S_{t-1} + diag(u) k_t v_tᵀ), S_t = diag(e^{w_t}) S_{t-1} + k_t v_tᵀ."""
    if _cuda(r):
        r, k, v = _same_dtype(r, k, v)
        if _chunk_ok(r, v):
            from fla.ops.rwkv6 import chunk_rwkv6
            return chunk_rwkv6(r, k, v, w, u, scale=scale)[0]
        from fla.ops.rwkv6 import fused_recurrent_rwkv6
        return fused_recurrent_rwkv6(r, k, v, w, u, scale=scale)[0]
    from fla.ops.rwkv6.recurrent_naive import naive_recurrent_rwkv6
    o, _ = naive_recurrent_rwkv6(*(t.transpose(1, 2) for t in (r, k, v, w)), u, scale=scale)
    return o.transpose(1, 2)


class _Heads(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.drop = nn.Dropout(dropout)  # on the output, as the attention mixers do

    def heads(self, x, d=None):  # [B, T, H*d] -> [B, T, H, d]
        return x.view(*x.shape[:2], self.n_heads, d or self.head_dim)


@register("gla")
class GLA(_Heads):
    """Gated linear attention (Yang et al. 2024): data-dependent per-channel decay
    gk = logsigmoid(low-rank(x)) / normalizer, key dim expand_k·D, per-head RMSNorm, swish gate."""

    def __init__(self, d_model, n_heads, *, causal=True, expand_k=0.5, gate_low_rank=16,
                 gate_logit_normalizer=16.0, bias=False, dropout=0.0):
        super().__init__(d_model, n_heads, dropout)
        self.key_dim = int(d_model * expand_k)
        if self.key_dim % n_heads:
            raise ValueError(f"GLA key dim {self.key_dim} (d_model*expand_k) is not divisible by "
                             f"n_heads={n_heads}: change mixer.kwargs.expand_k")
        self.q = nn.Linear(d_model, self.key_dim, bias=bias)
        self.k = nn.Linear(d_model, self.key_dim, bias=bias)
        self.v = nn.Linear(d_model, d_model, bias=bias)
        self.g = nn.Linear(d_model, d_model, bias=bias)
        self.gk = nn.Sequential(nn.Linear(d_model, gate_low_rank, bias=False),
                                nn.Linear(gate_low_rank, self.key_dim, bias=True))
        self.norm = HeadRMSNorm(self.head_dim)
        self.out = nn.Linear(d_model, d_model, bias=bias)
        self.normalizer = gate_logit_normalizer

    def forward(self, x):
        dk = self.key_dim // self.n_heads
        q, k = self.heads(self.q(x), dk), self.heads(self.k(x), dk)  # [B, T, H, dk]
        v = self.heads(self.v(x))  # [B, T, H, d]
        gk = self.heads(F.logsigmoid(self.gk(x)) / self.normalizer, dk)  # [B, T, H, dk]
        o = self.norm(gla_op(q, k, v, gk, scale=dk ** -0.5))  # [B, T, H, d]
        return self.drop(self.out(o.reshape(x.shape) * F.silu(self.g(x))))


@register("deltanet")
class DeltaNet(_Heads):
    """DeltaNet (Yang et al. 2024): silu + short conv on q/k/v, L2-normalised q/k, β = sigmoid."""

    def __init__(self, d_model, n_heads, *, causal=True, conv_size=4, use_short_conv=True,
                 bias=False, dropout=0.0):
        super().__init__(d_model, n_heads, dropout)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.beta = nn.Linear(d_model, n_heads, bias=True)
        self.conv = ShortConv(3 * d_model, conv_size) if use_short_conv else None
        self.norm = HeadRMSNorm(self.head_dim)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x):
        qkv = self.qkv(x)
        qkv = self.conv(qkv) if self.conv is not None else F.silu(qkv)
        q, k, v = (self.heads(t) for t in qkv.chunk(3, dim=-1))  # [B, T, H, d]
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        beta = torch.sigmoid(self.beta(x))  # [B, T, H]
        o = self.norm(delta_op(q, k, v, beta, scale=self.head_dim ** -0.5))
        return self.drop(self.out(o.reshape(x.shape)))


@register("hgrn")
class HGRN(nn.Module):
    """HGRN (Qin et al. 2023), real-valued as in fla: f = lb + (1-lb)·sigmoid, input (1-f)·silu(i),
    h_t = f_t h_{t-1} + i_t, output RMSNorm(h)·silu(g). n_heads is unused (element-wise recurrence)."""

    def __init__(self, d_model, n_heads, *, causal=True, lower_bound=0.0, bias=False,
                 dropout=0.0):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.norm = nn.RMSNorm(d_model)
        self.out = nn.Linear(d_model, d_model, bias=bias)
        self.lower_bound = lower_bound

    def forward(self, x):
        i, f, g = self.proj(x).chunk(3, dim=-1)  # [B, T, D] each
        lb = self.lower_bound
        f = lb + (1 - lb) * torch.sigmoid(f)
        h = hgrn_op(F.silu(i) * (1 - f), torch.log(f.clamp_min(1e-6)))  # [B, T, D]
        return self.drop(self.out(self.norm(h) * F.silu(g)))


@register("hgrn2")
class HGRN2(_Heads):
    """HGRN2 (Qin et al. 2024): state expansion through GLA with k = 1 - f, gk = log f, q = silu;
    scale 1, per-head RMSNorm, output gate."""

    def __init__(self, d_model, n_heads, *, causal=True, lower_bound=0.0, bias=False,
                 dropout=0.0):
        super().__init__(d_model, n_heads, dropout)
        self.qfi = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.g = nn.Linear(d_model, d_model, bias=bias)
        self.norm = HeadRMSNorm(self.head_dim)
        self.out = nn.Linear(d_model, d_model, bias=bias)
        self.lower_bound = lower_bound

    def forward(self, x, lower_bound=None):
        """lower_bound: this layer's learned bound [D] from HGRN's LM (tasks/lm/model.py
        `lower_bounds`), in place of the fixed constructor value."""
        q, f, i = (self.heads(t) for t in self.qfi(x).chunk(3, dim=-1))  # [B, T, H, d]
        lb = self.lower_bound if lower_bound is None else lower_bound.view(self.n_heads, -1)
        gk = torch.log(lb + (1 - lb) * torch.sigmoid(f.float()) + 1e-12).to(f.dtype)  # log f
        o = self.norm(gla_op(F.silu(q), 1 - gk.exp(), i, gk, scale=1.0))
        return self.drop(self.out(o.reshape(x.shape) * F.silu(self.g(x))))


@register("retnet")
class RetNet(_Heads):
    """Multi-scale retention (Sun et al. 2023): RoPE on q/k (in place of xPos), fixed per-head
    decays, per-head norm, swish gate."""

    def __init__(self, d_model, n_heads, *, causal=True, bias=False, dropout=0.0):
        super().__init__(d_model, n_heads, dropout)
        if self.head_dim % 2:
            raise ValueError(f"retnet needs an even head dim for RoPE, got {self.head_dim}: "
                             "change d_model/n_heads")
        self.qkvg = nn.Linear(d_model, 4 * d_model, bias=bias)
        self.norm = HeadRMSNorm(self.head_dim)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x):
        q, k, v, g = self.qkvg(x).chunk(4, dim=-1)
        q, k, v = apply_rope(self.heads(q)), apply_rope(self.heads(k)), self.heads(v)  # [B, T, H, d]
        o = self.norm(retention_op(q, k, v))
        return self.drop(self.out(o.reshape(x.shape) * F.silu(g)))


@register("rwkv6")
class RWKV6(_Heads):
    """RWKV-6 time mixing (Peng et al. 2024), simplified token shift (static per-channel mix for
    r/k/v/g, a data-dependent low-rank decay w), bonus u, per-head norm, silu gate."""

    def __init__(self, d_model, n_heads, *, causal=True, decay_low_rank=32, bias=False,
                 dropout=0.0):
        super().__init__(d_model, n_heads, dropout)
        self.mix = nn.Parameter(torch.full((5, d_model), 0.5))  # r, k, v, g, w token-shift mixes
        self.rkvg = nn.ModuleList(nn.Linear(d_model, d_model, bias=bias) for _ in range(4))
        self.w0 = nn.Parameter(torch.linspace(-6.0, -0.5, d_model))  # log(-log decay) base
        self.w_lora = nn.Sequential(nn.Linear(d_model, decay_low_rank, bias=False), nn.Tanh(),
                                    nn.Linear(decay_low_rank, d_model, bias=False))
        self.u = nn.Parameter(torch.zeros(n_heads, self.head_dim))
        self.norm = HeadRMSNorm(self.head_dim)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x):
        dx = shift_right(x) - x  # [B, T, D]
        xr, xk, xv, xg, xw = (x + dx * self.mix[i] for i in range(5))
        r, k, v = (self.heads(lin(t)) for lin, t in zip(self.rkvg[:3], (xr, xk, xv)))  # [B, T, H, d]
        g = F.silu(self.rkvg[3](xg))
        w = self.heads(-torch.exp(self.w0 + self.w_lora(xw)))  # log decay < 0, [B, T, H, d]
        o = self.norm(rwkv6_op(r, k, v, w, self.u, scale=1.0))
        return self.drop(self.out(o.reshape(x.shape) * g))
