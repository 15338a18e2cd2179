"""The per-chunk pieces shared by chunked ZeroS's forward (chunk.py) and its hand-written
backward (chunk_bwd.py): row coefficients, the explicit [C, C] weights, the stacked-state helpers.
Their own module so that chunk.py imports its backward and the backward imports these, one way.
Shapes as in chunk.py: head-major chunks [B, H, n, C, d] and [B, H, n, C].
"""
from __future__ import annotations

import torch


def recording() -> bool:
    """Functional ops (no `out=`, no in-place) while autograd records or dynamo traces: the
    in-place fast paths below write into views, which neither can follow."""
    return torch.is_grad_enabled() or torch.compiler.is_compiling()


def weighted_copies(x, w, out=None):
    """[w_0 x | w_1 x | w_2 x] per row: x [..., d], w [..., 3] -> [..., 3d]. With q and the row
    coefficients (a', β, γ) it reads F ; G ; H in one matmul; with k and (e, s̃, 1) one matmul
    with v builds a chunk's F, G, H increments stacked as rows (the layout of S_prev).
    out: a buffer of that shape to reuse (no-grad callers only)."""
    if out is None:
        return (w[..., None] * x[..., None, :]).flatten(-2)
    torch.mul(w[..., None], x[..., None, :], out=out.unflatten(-1, (-1, x.shape[-1])))
    return out


def key_coefficients(sc, slc, valid, M_loc):
    """(e_i, s̃_i, 1) per position, [B, H, n, C, 3]: the weights of k_iᵀv_i in F, G, H, with
    e_i = e^{s_i - M_loc} relative to the chunk's max (0 on padding)."""
    e_loc = torch.exp(sc.masked_fill(~valid, float("-inf")) - M_loc[..., None])  # [B,H,n,C]
    return torch.stack([e_loc, slc, torch.ones_like(slc)], -1)


def f_row_scale(x, d):
    """[B, H, m] -> [B, H, m, 3d, 1]: x on the d rows of F in a stacked F ; G ; H state, 1 on
    the rows of G and H (they hold no exponentials, so no running-max rescale applies)."""
    one = x.new_ones(x.shape + (2 * d,))
    return torch.cat([x[..., None].expand(*x.shape, d), one], -1)[..., None]


def row_coefficients(sc, slc, a, g, g0c, valid, cm, b, t0):
    """Per-row quantities of chunked ZeroS (all [B, H, n, C] unless noted):
    X [B, H, n, C, C] = e^{s_i - m_t} for i <= t in the chunk, resc = e^{M_prev - m_t},
    E_row = Ê_t, t_row, P_row, the coefficients alpha, beta, gamma, and
    coef [B, H, n, C, 3] = (alpha·resc, beta, gamma), the weights of F, G, H for row t."""
    n, C = sc.shape[-2:]
    tril = torch.ones(C, C, dtype=torch.bool, device=sc.device).tril()
    m_row = torch.maximum(b["M_prev"][..., None], cm)  # running max of row t
    mask = tril & valid[:, None, :]  # [n, C, C]
    if recording():  # e^{-inf} = 0 keeps the masked entries' gradients finite
        X = torch.exp(torch.where(mask, sc[..., None, :], float("-inf")) - m_row[..., None])
    else:  # same values in one buffer (masked entries may pass through inf before the fill)
        X = (sc[..., None, :] - m_row[..., None]).exp_().masked_fill_(~mask, 0.0)
    resc = torch.exp(b["M_prev"][..., None] - m_row)  # <= 1
    E_row = b["E_prev"][..., None] * resc + X.sum(-1)
    t_row = (t0 + torch.arange(1, n * C + 1, device=sc.device, dtype=sc.dtype)).view(n, C)
    P_row = b["P_prev"][..., None] + torch.cumsum(slc, -1)
    alpha = a / E_row  # σʰ_t / Ê_t
    beta = (g - a) / t_row
    gamma = -(beta * P_row + a) / t_row
    if g0c is not None:
        gamma = gamma + g0c / t_row
    coef = torch.stack([alpha * resc, beta, gamma], -1)
    return dict(X=X, resc=resc, E_row=E_row, t_row=t_row, P_row=P_row,
                alpha=alpha, beta=beta, gamma=gamma, coef=coef)


def chunk_weights(r, slc):
    """W [B, H, n, C, C]: W_ti = α_t X_ti + β_t s̃_i + γ_t for i <= t, else 0."""
    W = torch.addcmul(r["gamma"][..., None], r["beta"][..., None], slc[..., None, :])
    if recording():
        return torch.addcmul(W.tril(), r["alpha"][..., None], r["X"])
    return W.tril_().addcmul_(r["alpha"][..., None], r["X"])


def bmm_add(out, x, y):
    """out + x @ y over any leading dims (one fused baddbmm; all three contiguous); in place
    when no autograd graph is being recorded."""
    o3, x3, y3 = out.flatten(0, -3), x.flatten(0, -3), y.flatten(0, -3)
    if recording():
        return torch.baddbmm(o3, x3, y3).view(out.shape)
    return o3.baddbmm_(x3, y3).view(out.shape)
