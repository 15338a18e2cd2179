"""Fused ZeroS decoding step: fold one token into the `ZeroSState` and read the row out.

Same semantics as `zeros.ops.recurrent.recurrent_step` (docs/spec.md §2): m' = max(m, s_t),
E' = E e^{m−m'} + e^{s_t−m'}, P' = P + (s_t − c), F' = F e^{m−m'} + e^{s_t−m'} k_tᵀv_t,
G' = G + (s_t − c) k_tᵀv_t, H' = H + k_tᵀv_t, then o_t = q_t (α F' + β G' + γ H') with n = t + 1.
One program per (value block, batch·head) reads its d×BV slice of F, G, H once and writes it
once, which is the whole cost of a decoding step (memory bound, O(H·d²) per sequence).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import block_v, check_device, check_head_dim, launch, rsum


@triton.jit
def _step_kernel(q, k, v, s, g1, gh, g0, shift, m, E, P, F, G, Hs, o, m_out, E_out, P_out,
                 F_out, G_out, H_out, n, D: tl.constexpr, BV: tl.constexpr,
                 HAS_G0: tl.constexpr):
    i_v, i_bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    o_k = tl.arange(0, D)
    o_v = i_v * BV + tl.arange(0, BV)
    b_q = tl.load(q + i_bh * D + o_k).to(tl.float32)  # [D]
    b_k = tl.load(k + i_bh * D + o_k).to(tl.float32)
    b_v = tl.load(v + i_bh * D + o_v).to(tl.float32)  # [BV]
    b_s = tl.load(s + i_bh).to(tl.float32)
    b_g1 = tl.load(g1 + i_bh).to(tl.float32)
    b_gh = tl.load(gh + i_bh).to(tl.float32)
    b_m = tl.load(m + i_bh)
    m_new = tl.maximum(b_m, b_s)
    r_old = tl.exp(b_m - m_new)
    b_e = tl.exp(b_s - m_new)
    b_sl = b_s - tl.load(shift + i_bh)
    E_new = tl.load(E + i_bh) * r_old + b_e
    P_new = tl.load(P + i_bh) + b_sl
    b_kv = b_k[:, None] * b_v[None, :]  # [D, BV] k_tᵀ v_t
    p_st = i_bh * D * D + o_k[:, None] * D + o_v[None, :]
    b_F = tl.load(F + p_st) * r_old + b_e * b_kv
    b_G = tl.load(G + p_st) + b_sl * b_kv
    b_H = tl.load(Hs + p_st) + b_kv
    b_beta = (b_g1 - b_gh) / n
    b_gamma = -(b_beta * P_new + b_gh) / n
    if HAS_G0:
        b_gamma += tl.load(g0 + i_bh).to(tl.float32) / n
    b_M = (b_gh / E_new) * b_F + b_beta * b_G + b_gamma * b_H  # [D, BV]
    tl.store(o + i_bh * D + o_v, rsum(b_q[:, None] * b_M, 0).to(o.dtype.element_ty))
    tl.store(F_out + p_st, b_F)
    tl.store(G_out + p_st, b_G)
    tl.store(H_out + p_st, b_H)
    if i_v == 0:  # scalars go to fresh buffers: other programs still read the old ones
        tl.store(m_out + i_bh, m_new)
        tl.store(E_out + i_bh, E_new)
        tl.store(P_out + i_bh, P_new)


def zeros_step_triton(state, q_t, k_t, v_t, s_t, g1_t, gh_t, g0_t=None, *, inplace=False):
    """One causal decoding step, batch >= 1. q_t, k_t, v_t [B, H, d]; s_t and gates [B, H];
    state a `zeros.ops.ZeroSState` or None to start a sequence. Returns (o_t [B, H, d] in q_t's
    dtype, new fp32 state). `inplace=True` overwrites the state's F, G, H (no d×d copies); the
    old state object must then not be reused. No autograd: when gradients are needed it runs
    the torch `recurrent_step` instead (same numbers)."""
    from zeros.ops.recurrent import recurrent_step
    from zeros.ops.state import ZeroSState, empty_state_like

    inputs = (q_t, k_t, v_t, s_t, g1_t, gh_t, g0_t)
    if torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in inputs):
        return recurrent_step(state, *inputs)
    check_device(q_t)
    B, H, d = q_t.shape
    check_head_dim(d)
    f32 = torch.float32
    if state is None:
        state = empty_state_like(s_t.detach().to(f32), d)
    state.check(B, H, d)
    if state.F.dtype != f32:
        state = ZeroSState(state.t, *(x.to(f32) for x in (state.shift, state.m, state.E, state.P,
                                                          state.F, state.G, state.H)))
    q_c, k_c, v_c, s_c, g1_c, gh_c = (x.contiguous() for x in inputs[:6])
    g0_c = None if g0_t is None else g0_t.contiguous()
    sh, m, E, P, F, G, Hs = (x.contiguous() for x in (state.shift, state.m, state.E, state.P,
                                                      state.F, state.G, state.H))
    o = torch.empty_like(q_c)
    m2, E2, P2 = (torch.empty_like(x) for x in (m, E, P))
    F2, G2, H2 = (F, G, Hs) if inplace else (torch.empty_like(x) for x in (F, G, Hs))
    BV = block_v(d)
    launch(_step_kernel, q_c)[(triton.cdiv(d, BV), B * H)](
        q_c, k_c, v_c, s_c, g1_c, gh_c, s_c if g0_c is None else g0_c, sh, m, E, P, F, G, Hs,
        o, m2, E2, P2, F2, G2, H2, float(state.t + 1), D=d, BV=BV, HAS_G0=g0_t is not None)
    return o, ZeroSState(state.t + 1, sh, m2, E2, P2, F2, G2, H2)
