"""Hand-written backward of causal chunked ZeroS (the maths of `_ChunkZeroS`).

Forward, per row t of chunk c (weights W_{ti} = α_t X_{ti} + β_t s̃_i + γ_t, X_{ti} = e^{s_i-m_t}):
    o_t = Σ_{i≤t in c} W_{ti} (q_t·k_i) v_i + q_t (a'_t F_c + β_t G_c + γ_t H_c),  a'_t = α_t e^{M_c-m_t}
    α_t = σʰ_t/Ê_t,  Ê_t = E_c e^{M_c-m_t} + Σ_i X_{ti},  β_t = (σ¹_t-σʰ_t)/t,
    γ_t = -(β_t P_t + σʰ_t)/t + σ⁰_t/t,  P_t = P_c + Σ_{i≤t in c} s̃_i
with (E, P, F, G, H)_c the prefix before chunk c (M_c its running max). The backward goes in
three steps: (1) inside each chunk, as for attention with an explicit weight matrix;
(2) the row scalars α, β, γ back to the gates and to the logits through Ê and P;
(3) the gradients of the boundary states flow to earlier chunks through suffix sums, the E/F ones
rescaled by e^{M_end(c') - M_c} <= 1 so nothing overflows. The running maxima are constants
(the output does not depend on them), as in FlashAttention.
"""
from __future__ import annotations

import torch

from .chunk import row_coefficients


def chunk_backward(do, qc, kc, vc, sc, slc, a, g, g0c, valid, cm, b, M_final):
    """Gradients for (qc, kc, vc, sc, slc, a, g, g0c) of `chunk_output`; do [B, H, n, C, d]."""
    r = row_coefficients(sc, slc, a, g, g0c, valid, cm, b, 0)
    X, tril, alpha, beta, gamma = r["X"], r["tril"], r["alpha"], r["beta"], r["gamma"]
    a_prev = alpha * r["resc"]

    # (1) intra-chunk: A = (QK ⊙ W), o = A v
    W = (alpha[..., None] * X + beta[..., None] * slc[..., None, :]
         + gamma[..., None]).masked_fill(~tril, 0.0)  # [B, H, n, C, C]
    QK = qc @ kc.transpose(-1, -2)
    dA = (do @ vc.transpose(-1, -2)).masked_fill(~tril, 0.0)  # do_t·v_i
    dv = (QK * W).transpose(-1, -2) @ do
    dQK, dW = dA * W, dA * QK
    dq = dQK @ kc
    dk = dQK.transpose(-1, -2) @ qc
    dalpha = (dW * X).sum(-1)
    dbeta = (dW * slc[..., None, :]).sum(-1)
    dgamma = dW.sum(-1)
    dslc = (dW * beta[..., None]).sum(-2)
    dX = dW * alpha[..., None]

    # (1b) rows reading the boundary state: o += q (a' F + β G + γ H)
    S_prev, d = b["S_prev"], qc.shape[-1]  # [B, H, n, d, 3d]: F | G | H before each chunk
    St = torch.cat([S_prev[..., j * d:(j + 1) * d].transpose(-1, -2) for j in range(3)], -1)
    P = (do @ St).unflatten(-1, (3, d))  # [B, H, n, C, 3, d]: do_t Fᵀ, do_t Gᵀ, do_t Hᵀ
    d_coef = (P * qc[..., None, :]).sum(-1)  # [B, H, n, C, 3]: q_t S_j do_tᵀ
    dalpha = dalpha + d_coef[..., 0] * r["resc"]
    dbeta = dbeta + d_coef[..., 1]
    dgamma = dgamma + d_coef[..., 2]
    coef = torch.stack([a_prev, beta, gamma], -1)  # [B, H, n, C, 3]
    dq = dq + (coef[..., None] * P).sum(-2)
    do3 = (coef[..., None] * do[..., None, :]).flatten(-2)  # [B, H, n, C, 3d] a'do | βdo | γdo
    dS = qc.transpose(-1, -2) @ do3  # [B, H, n, d, 3d] gradient of each boundary F | G | H

    # (2) row scalars -> gates, logits (via Ê_t and P_t), and the boundary E, P
    E_row, t_row = r["E_row"], r["t_row"]
    dE_row = -dalpha * alpha / E_row
    dbeta_tot = dbeta - dgamma * r["P_row"] / t_row
    dP_row = -dgamma * beta / t_row
    da = dalpha / E_row - dbeta_tot / t_row - dgamma / t_row
    dg = dbeta_tot / t_row
    dg0 = None if g0c is None else dgamma / t_row
    dsc = ((dX + dE_row[..., None]) * X).sum(-2)  # through e^{s_i - m_t} in W and in Ê_t
    dE_prev = (dE_row * r["resc"]).sum(-1)  # [B, H, n]
    dslc = dslc + torch.flip(torch.cumsum(torch.flip(dP_row, [-1]), -1), [-1])
    dP_prev = dP_row.sum(-1)  # [B, H, n]

    # (3) boundary-state gradients to the chunks before them
    M_end = torch.cat([b["M_prev"][:, :, 1:], M_final[:, :, None]], 2)  # max after chunk c'
    M_loc = cm[..., -1]
    n = M_end.shape[2]
    R_all, RE_all = torch.zeros_like(dS), torch.zeros_like(dE_prev)  # last chunk: nothing after
    for c in range(n - 2, -1, -1):  # R(c') = Σ_{c>c'} dS_c, the F part rescaled to M_end(c')
        shrink = torch.exp(M_end[:, :, c] - M_end[:, :, c + 1])  # <= 1, for E and F only
        R_all[:, :, c] = R_all[:, :, c + 1] + dS[:, :, c + 1]
        R_all[:, :, c, :, :d] = R_all[:, :, c + 1, :, :d] * shrink[..., None, None] \
            + dS[:, :, c + 1, :, :d]
        RE_all[..., c] = RE_all[..., c + 1] * shrink + dE_prev[..., c + 1]
    loc = torch.exp(M_loc - M_end)  # [B, H, n] e^{M_loc - M_end} <= 1
    RF, RG, RH = R_all[..., :d] * loc[..., None, None], R_all[..., d:2 * d], R_all[..., 2 * d:]
    RE = RE_all * loc  # grads of Σ_i e_i k_iᵀ v_i, Σ_i e_i with e_i = e^{s_i-M_loc}
    RP = torch.flip(torch.cumsum(torch.flip(dP_prev, [-1]), -1), [-1]) - dP_prev  # Σ_{c>c'}
    e_loc = torch.exp(sc.masked_fill(~valid, float("-inf")) - M_loc[..., None])  # [B,H,n,C]
    kR = (kc @ torch.cat([RF, RG, RH], -1)).unflatten(-1, (3, -1))  # [B, H, n, C, 3, d]
    vR = (vc @ torch.cat([RF, RG, RH], -2).transpose(-1, -2)).unflatten(-1, (3, -1))
    w = torch.stack([e_loc, slc, torch.ones_like(slc)], -1)[..., None]  # [B, H, n, C, 3, 1]
    dv = dv + (w * kR).sum(-2)
    dk = dk + (w * vR).sum(-2)
    dsc = dsc + e_loc * ((kR[..., 0, :] * vc).sum(-1) + RE[..., None])
    dslc = dslc + (kR[..., 1, :] * vc).sum(-1) + RP[..., None]
    dsc = dsc.masked_fill(~valid, 0.0)
    return dq, dk, dv, dsc, dslc, da, dg, dg0
