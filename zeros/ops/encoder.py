"""Non-causal (encoder) ZeroS: every row reads the same whole-sequence sums, so it is one
linear pass with no chunking, O(N·d²) per head (docs/spec.md §3).

o_t = α_t q_t F + β_t q_t G + γ_t q_t H with F, G, H = Σ_i (e_i, s̃_i, 1) k_iᵀ v_i: a rank-3
product on both sides. `RANK3_OP` (a torch.library custom op, library.py) computes it as two matmuls over 3d-wide stacked copies
([e k | s̃ k | k]ᵀ v, then [α q | β q | γ q] against it) with a hand-written backward: four
matmuls and two weighted sums, instead of autograd's pass per mul, cat and transpose.
Shapes: q, k, v [B, T, H, d]; s, g1, gh, g0 [B, T, H]; inputs already validated and cast.
"""
from __future__ import annotations

import torch

from . import native
from .library import DifferentiableOp


def _copies(x, w):
    """[w_0 x | w_1 x | w_2 x]: x [..., d], w [..., 3] -> [..., 3d] (contiguous)."""
    return (w[..., None] * x[..., None, :]).flatten(-2)


def _fold(g3, w, x):
    """The two gradients of `_copies` from g3 [..., 3d]: Σ_j w_j g3_j [..., d] (wrt x) and
    g3_j · x [..., 3] (wrt w). One C pass where native.py has its kernels (csrc/encoder.c)."""
    if native.fold_supported(g3, x):
        return native.fold3(g3, w, x)
    gv = g3.unflatten(-1, (3, -1))  # [..., 3, d]
    dx = torch.mul(gv[..., 0, :], w[..., 0:1])
    dx.addcmul_(gv[..., 1, :], w[..., 1:2]).addcmul_(gv[..., 2, :], w[..., 2:3])
    dw = (gv * x[..., None, :]).sum(-1)
    return dx, dw


def _rank3_fwd(q, k, v, wq, wk):
    """o = [wq ⊙ q] @ ([wk ⊙ k]ᵀ v) on [B, H, N, ·]: q, k, v [.., N, d], wq, wk [.., N, 3].
    Returns (o, kw, qw, S), the last three kept for the backward."""
    kw, qw = _copies(k, wk), _copies(q, wq)  # [B, H, N, 3d]
    S = kw.transpose(-1, -2) @ v.contiguous()  # [B, H, 3d, d]: F ; G ; H stacked
    return qw @ S, kw, qw, S


def _rank3_bwd(do, q, k, v, wq, wk, kw, qw, S):
    dS = qw.transpose(-1, -2) @ do  # [B, H, 3d, d]
    dq, dwq = _fold(do @ S.transpose(-1, -2), wq, q)
    dk, dwk = _fold(v.contiguous() @ dS.transpose(-1, -2), wk, k)
    return dq, dk, kw @ dS, dwq.contiguous(), dwk.contiguous()


def _rank3_bwd_fake(do, q, k, v, wq, wk, kw, qw, S):
    return tuple(do.new_empty(x.shape) for x in (q, k, v, wq, wk))


RANK3_OP = DifferentiableOp(  # pure torch forward: it is its own fake
    "rank3_linear", _rank3_fwd, _rank3_bwd, _rank3_fwd,
    "(Tensor q, Tensor k, Tensor v, Tensor wq, Tensor wk) -> (Tensor, Tensor, Tensor, Tensor)",
    5, bwd_fake=_rank3_bwd_fake)


def encoder_zeros(q, k, v, s, g1, gh, g0=None):
    """Non-causal ZeroS: t -> N in every formula; gates stay per row. Returns [B, T, H, d]."""
    N = q.shape[1]
    qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v))  # [B, H, N, d] views
    sh = s.transpose(1, 2)  # [B, H, N]
    m = sh.amax(-1, keepdim=True).detach()  # one max suffices: every row has the same sums
    e = torch.exp(sh - m)  # [B, H, N]
    st = sh - sh.mean(-1, keepdim=True).detach()  # centred logits for the first-order term
    E, P = e.sum(-1, keepdim=True), st.sum(-1, keepdim=True)  # [B, H, 1]
    a, g = gh.transpose(1, 2), g1.transpose(1, 2)  # [B, H, N]
    alpha = a / E
    beta = (g - a) / N
    gamma = -(beta * P + a) / N
    if g0 is not None:
        gamma = gamma + g0.transpose(1, 2) / N
    wq = torch.stack([alpha, beta, gamma], -1)  # [B, H, N, 3]
    wk = torch.stack([e, st, torch.ones_like(st)], -1)
    return RANK3_OP(qh, kh, vh, wq, wk)[0].transpose(1, 2)  # [B, N, H, d]
