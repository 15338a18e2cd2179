"""Hand-written backward of causal chunked ZeroS (the maths of `CHUNK_OP`, chunk.py).

Forward, per row t of chunk c (weights W_{ti} = α_t X_{ti} + β_t s̃_i + γ_t, X_{ti} = e^{s_i-m_t}):
    o_t = Σ_{i≤t in c} W_{ti} (q_t·k_i) v_i + [a'_t q_t | β_t q_t | γ_t q_t] S_c,  a'_t = α_t e^{M_c-m_t}
    α_t = σʰ_t/Ê_t,  Ê_t = E_c e^{M_c-m_t} + Σ_i X_{ti},  β_t = (σ¹_t-σʰ_t)/t,
    γ_t = -(β_t P_t + σʰ_t)/t + σ⁰_t/t,  P_t = P_c + Σ_{i≤t in c} s̃_i
with (E, P, S = F ; G ; H)_c the prefix before chunk c (M_c its running max). The backward goes
in three steps: (1) inside each chunk, as for attention with an explicit weight matrix, plus
the rows' reads of S_c; (2) the row scalars α, β, γ back to the gates and to the logits through
Ê and P; (3) the gradients of the boundary states flow to earlier chunks through suffix sums,
the E/F ones rescaled by e^{M_end(c') - M_end(c)} <= 1 so nothing overflows. The running maxima
are constants (the output does not depend on them), as in FlashAttention.
Speed: every matmul reads contiguous (or plainly transposed) blocks, the three states are read
and written by single 3d-wide matmuls, and reductions over [C, C] blocks are vector-matrix
products, so the backward is a few large matmuls and a handful of elementwise passes.
"""
from __future__ import annotations

import torch

from .chunk_blocks import (bmm_add, chunk_weights, f_row_scale, key_coefficients,
                           row_coefficients, weighted_copies)


def _suffix(x, dim, inclusive=False):
    """Σ over the entries after each one along dim (reverse cumsum; exclusive by default)."""
    out = torch.flip(torch.cumsum(torch.flip(x, [dim]), dim), [dim])
    return out if inclusive else out - x


def _combine(parts, w):
    """Σ_j w[..., j, None] * parts[..., j, :]: parts [..., 3, d], w [..., 3] -> [..., d]."""
    out = parts[..., 0, :] * w[..., 0:1]
    for j in range(1, parts.shape[-2]):
        out.addcmul_(parts[..., j, :], w[..., j:j + 1])
    return out


def chunk_backward(do, qc, kc, vc, sc, slc, a, g, g0c, valid, cm, b):
    """Gradients for (qc, kc, vc, sc, slc, a, g, g0c) of `chunk_output`; do [B, H, n, C, d]
    contiguous."""
    r = row_coefficients(sc, slc, a, g, g0c, valid, cm, b, 0)
    X, alpha, beta, coef = r["X"], r["alpha"], r["beta"], r["coef"]
    d = qc.shape[-1]

    # (1) intra-chunk: A = QK ⊙ W, o = A v. Four [C, C] buffers, reused in place.
    W = chunk_weights(r, slc)  # [B, H, n, C, C]
    QK = qc @ kc.transpose(-1, -2)
    buf = QK * W  # A
    dv = buf.transpose(-1, -2) @ do
    dW = (do @ vc.transpose(-1, -2)).tril_()  # dA_ti = do_t·v_i for i <= t
    dQK = torch.mul(dW, W, out=buf)
    dq = dQK @ kc
    dk = dQK.transpose(-1, -2) @ qc
    dW.mul_(QK)  # dW = dA ⊙ QK
    Y = torch.mul(dW, X, out=QK)
    dalpha = Y.sum(-1)
    dgamma = dW.sum(-1)
    dbeta = (dW @ slc[..., None]).squeeze(-1)  # Σ_i dW_ti s̃_i
    dslc = (beta[..., None, :] @ dW).squeeze(-2)  # Σ_t β_t dW_ti

    # (1b) rows reading the boundary state: o += [a'q | βq | γq] S. Two [C, 3d] buffers.
    S = b["S_prev"]  # [B, H, n, 3d, d]
    dqs = do @ S.transpose(-1, -2)  # [B, H, n, C, 3d]: do_t S_jᵀ
    dqs3 = dqs.unflatten(-1, (3, d))
    d_coef = (dqs3 @ qc[..., None]).squeeze(-1)  # [B, H, n, C, 3]: q_t S_j do_tᵀ
    dq += _combine(dqs3, coef)
    qs = weighted_copies(qc, coef)
    dS = qs.transpose(-1, -2) @ do  # [B, H, n, 3d, d] grad of each S_c
    dalpha = dalpha + d_coef[..., 0] * r["resc"]
    dbeta = dbeta + d_coef[..., 1]
    dgamma = dgamma + d_coef[..., 2]

    # (2) row scalars -> gates, logits (via Ê_t and P_t), and the boundary E, P
    E_row, t_row = r["E_row"], r["t_row"]
    dE_row = -dalpha * alpha / E_row
    dbeta_tot = dbeta - dgamma * r["P_row"] / t_row
    dP_row = -dgamma * beta / t_row
    da = dalpha / E_row - dbeta_tot / t_row - dgamma / t_row
    dg = dbeta_tot / t_row
    dg0 = None if g0c is None else dgamma / t_row
    # through e^{s_i - m_t} in W (α_t dW_ti X_ti) and in Ê_t (dÊ_t X_ti), summed over rows t
    dsc = (alpha[..., None, :] @ Y).squeeze(-2) + (dE_row[..., None, :] @ X).squeeze(-2)
    dE_prev = (dE_row * r["resc"]).sum(-1)  # [B, H, n]
    dslc = dslc + _suffix(dP_row, -1, inclusive=True)
    dP_prev = dP_row.sum(-1)  # [B, H, n]

    # (3) boundary-state gradients to the chunks before them: R_c = Σ_{c'>c} dS_{c'}
    n = dS.shape[2]
    R, RE = torch.empty_like(dS), torch.empty_like(dE_prev)  # [B, H, n, 3d, d], [B, H, n]
    M_loc, M_end = cm[..., -1], b["M_end"]
    # E and F rows: rescaled from M_end(c+1) to M_end(c) per step, then to M_loc(c) when read
    shrink = torch.exp(M_end[..., :-1] - M_end[..., 1:])  # [B, H, n-1] <= 1
    loc = torch.exp(M_loc - M_end)  # [B, H, n] <= 1
    s_step, s_loc = f_row_scale(shrink, d), f_row_scale(loc, d)  # [B, H, ·, 3d, 1]
    acc, acc_E = torch.zeros_like(dS[:, :, 0]), torch.zeros_like(dE_prev[..., 0])
    for c in range(n - 1, -1, -1):
        if c < n - 1:
            acc = torch.addcmul(dS[:, :, c + 1], acc, s_step[:, :, c])
            acc_E = acc_E * shrink[..., c] + dE_prev[..., c + 1]
        torch.mul(acc, s_loc[:, :, c], out=R[:, :, c])
        RE[..., c] = acc_E * loc[..., c]
    RP = _suffix(dP_prev, -1)  # [B, H, n]
    w3 = key_coefficients(sc, slc, valid, M_loc)  # [B, H, n, C, 3]: (e_i, s̃_i, 1)
    dkw = torch.matmul(vc, R.transpose(-1, -2), out=dqs).unflatten(-1, (3, d))  # v_i R_jᵀ
    dk += _combine(dkw, w3)
    kdot = (dkw[..., :2, :] @ kc[..., None]).squeeze(-1)  # [B, H, n, C, 2]: k_i R_j v_iᵀ
    dv = bmm_add(dv, weighted_copies(kc, w3, out=qs), R)  # + [e k | s̃ k | k] R
    dsc = (dsc + w3[..., 0] * (kdot[..., 0] + RE[..., None])).masked_fill(~valid, 0.0)
    dslc = dslc + kdot[..., 1] + RP[..., None]
    return dq, dk, dv, dsc, dslc, da, dg, dg0
