"""Causal ZeroS forward in two Triton kernels (docs/spec.md §2), fla-style.

1. `_fwd_states_kernel`: one program per (value block, batch·head) walks the chunks in order and
   stores, at every chunk boundary, the prefix state before that chunk: the running max M, E =
   Σ e^{s_i − M}, P = Σ (s_i − c), and the d×d F = Σ e^{s_i − M} k_iᵀv_i, G = Σ (s_i − c) k_iᵀv_i,
   H = Σ k_iᵀv_i. E and F are rescaled to the running max at every chunk (never a global max);
   c = s at t = 1 is the fixed logit shift of `zeros.ops.state`.
2. `_fwd_out_kernel`: one program per (value block, chunk, batch·head) builds the chunk's C×C
   weights W_{t,i} = α_t e^{s_i − m_t} + β_t (s_i − c) + γ_t (m_t = running max of row t) and
   o_t = Σ_i W_{t,i} (q_t·k_i) v_i + q_t (α_t e^{M − m_t} F + β_t G + γ_t H). It also stores the
   row's log-normaliser Z_t = m_t + log E_t and P_t, which the backward reuses.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import (block_v, dot_precision, head_offsets, launch, num_warps, rmax,
                     row_coefs, rsum, state_offsets)


@triton.jit
def _fwd_states_kernel(k, v, s, F_out, G_out, H_out, scal_out, T, NT,
                       H: tl.constexpr, D: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
                       PREC: tl.constexpr):
    i_v, i_bh = tl.program_id(0), tl.program_id(1)
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, D)
    o_v = i_v * BV + tl.arange(0, BV)
    base, s_base = head_offsets(i_bh, T, H, D)
    c = tl.load(s + s_base)  # logit shift: the first logit of the sequence
    b_m = c
    b_E = tl.full([], 0.0, tl.float32)
    b_P = tl.full([], 0.0, tl.float32)
    b_F = tl.full([D, BV], 0.0, tl.float32)
    b_G = tl.full([D, BV], 0.0, tl.float32)
    b_H = tl.full([D, BV], 0.0, tl.float32)
    st_base = i_bh.to(tl.int64) * NT * D * D
    for i_c in range(NT):
        # store the state *before* chunk i_c
        st = st_base + i_c * D * D + o_k[:, None] * D + o_v[None, :]
        tl.store(F_out + st, b_F)
        tl.store(G_out + st, b_G)
        tl.store(H_out + st, b_H)
        if i_v == 0:
            sc = (i_bh.to(tl.int64) * NT + i_c) * 3
            tl.store(scal_out + sc, b_m)
            tl.store(scal_out + sc + 1, b_E)
            tl.store(scal_out + sc + 2, b_P)
        rows = i_c * BT + o_t
        valid = rows < T
        p_row = base + rows[:, None] * H * D
        b_k = tl.load(k + p_row + o_k[None, :], mask=valid[:, None], other=0.)  # [BT, D]
        b_v = tl.load(v + p_row + o_v[None, :], mask=valid[:, None], other=0.)  # [BT, BV]
        b_s = tl.load(s + s_base + rows * H, mask=valid, other=float("-inf"))  # [BT]
        m_new = tl.maximum(b_m, rmax(b_s, 0))
        r_old = tl.exp(b_m - m_new)  # <= 1
        b_e = tl.exp(b_s - m_new)  # [BT] <= 1, 0 on padding rows
        b_sl = tl.where(valid, b_s - c, 0.)  # [BT] shifted logits for P and G
        b_E = b_E * r_old + rsum(b_e, 0)
        b_P += rsum(b_sl, 0)
        b_kt = tl.trans(b_k)  # [D, BT]
        b_F = b_F * r_old + tl.dot(b_kt, (b_v * b_e[:, None]).to(b_k.dtype), input_precision=PREC)
        b_G += tl.dot(b_kt, (b_v * b_sl[:, None]).to(b_k.dtype), input_precision=PREC)
        b_H += tl.dot(b_kt, b_v, input_precision=PREC)
        b_m = m_new


@triton.jit
def _fwd_out_kernel(q, k, v, s, a, g, g0, F_in, G_in, H_in, scal_in, o, Z_out, P_out, T, NT,
                    H: tl.constexpr, D: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
                    HAS_G0: tl.constexpr, PREC: tl.constexpr):
    i_v, i_c, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, D)
    o_v = i_v * BV + tl.arange(0, BV)
    base, s_base = head_offsets(i_bh, T, H, D)
    rows = i_c * BT + o_t
    valid = rows < T
    tri = o_t[:, None] >= o_t[None, :]  # [BT, BT] i <= t
    c = tl.load(s + s_base)
    sc = (i_bh.to(tl.int64) * NT + i_c) * 3
    M0 = tl.load(scal_in + sc)
    E0 = tl.load(scal_in + sc + 1)
    P0 = tl.load(scal_in + sc + 2)

    b_q = tl.load(q + base + rows[:, None] * H * D + o_k[None, :], mask=valid[:, None], other=0.)
    b_k = tl.load(k + base + rows[:, None] * H * D + o_k[None, :], mask=valid[:, None], other=0.)
    b_v = tl.load(v + base + rows[:, None] * H * D + o_v[None, :], mask=valid[:, None], other=0.)
    b_s = tl.load(s + s_base + rows * H, mask=valid, other=float("-inf"))  # [BT]
    b_a = tl.load(a + s_base + rows * H, mask=valid, other=0.)
    b_g = tl.load(g + s_base + rows * H, mask=valid, other=0.)
    if HAS_G0:
        b_g0 = tl.load(g0 + s_base + rows * H, mask=valid, other=0.)
    else:
        b_g0 = b_a
    b_sl = tl.where(valid, b_s - c, 0.)  # [BT]

    # running max of each row, then its normaliser E_t relative to that max
    m_row = tl.maximum(M0, rmax(tl.where(tri, b_s[None, :], float("-inf")), 1))  # [BT]
    b_X = tl.exp(tl.where(tri, b_s[None, :] - m_row[:, None], float("-inf")))  # [BT, BT]
    r_prev = tl.exp(M0 - m_row)  # [BT] rescale of the prefix E0, F0 to row t's max
    E_row = E0 * r_prev + rsum(b_X, 1)  # [BT] >= 1
    P_row = P0 + rsum(tl.where(tri, b_sl[None, :], 0.), 1)  # [BT]
    n_row = (rows + 1).to(tl.float32)
    b_alpha = b_a / E_row
    b_beta, b_gamma = row_coefs(b_a, b_g, b_g0, P_row, n_row, HAS_G0)

    b_lin = tl.where(tri, b_beta[:, None] * b_sl[None, :] + b_gamma[:, None], 0.)  # [BT, BT]
    b_W = b_alpha[:, None] * b_X + b_lin
    b_A = tl.dot(b_q, tl.trans(b_k), input_precision=PREC) * b_W  # [BT, BT]
    b_o = tl.dot(b_A.to(b_v.dtype), b_v, input_precision=PREC)  # [BT, BV]
    st = state_offsets(i_bh, i_c, NT, i_v, D, BV)
    b_q32 = b_q.to(tl.float32)
    b_o += (b_alpha * r_prev)[:, None] * tl.dot(b_q32, tl.load(F_in + st), input_precision=PREC)
    b_o += b_beta[:, None] * tl.dot(b_q32, tl.load(G_in + st), input_precision=PREC)
    b_o += b_gamma[:, None] * tl.dot(b_q32, tl.load(H_in + st), input_precision=PREC)
    tl.store(o + base + rows[:, None] * H * D + o_v[None, :], b_o.to(o.dtype.element_ty),
             mask=valid[:, None])
    if i_v == 0:
        row_base = i_bh.to(tl.int64) * T
        tl.store(Z_out + row_base + rows, m_row + tl.log(E_row), mask=valid)
        tl.store(P_out + row_base + rows, P_row, mask=valid)


def chunk_states(k, v, s, chunk_size):
    """The chunk-boundary prefix states: F, G, H [B·H, NT, D, D] and (M, E, P) [B·H, NT, 3], all
    fp32. k, v [B, T, H, D] contiguous; s [B, T, H] fp32 contiguous."""
    B, T, H, D = k.shape
    BT, BV = chunk_size, block_v(D)
    NT, NV = triton.cdiv(T, BT), triton.cdiv(D, BV)
    f32 = dict(dtype=torch.float32, device=k.device)
    Fs, Gs, Hs = (torch.empty(B * H, NT, D, D, **f32) for _ in range(3))
    scal = torch.empty(B * H, NT, 3, **f32)
    launch(_fwd_states_kernel, k)[(NV, B * H)](k, v, s, Fs, Gs, Hs, scal, T, NT, H=H, D=D, BT=BT,
                                               BV=BV, PREC=dot_precision(k.dtype),
                                               num_warps=num_warps(D, False))
    return Fs, Gs, Hs, scal


def chunk_fwd(q, k, v, s, a, g, g0, chunk_size):
    """Both forward kernels. q, k, v: [B, T, H, D] contiguous (16-bit or fp32); s, a (σʰ), g (σ¹),
    g0 (σ⁰ or None): [B, T, H] fp32 contiguous. Returns o [B, T, H, D] (q's dtype), the states of
    `chunk_states` and the row statistics Z (log-normaliser), P [B·H, T] the backward reads."""
    B, T, H, D = q.shape
    BT, BV = chunk_size, block_v(D)
    NT, NV = triton.cdiv(T, BT), triton.cdiv(D, BV)
    states = chunk_states(k, v, s, chunk_size)
    o = torch.empty_like(q)
    Z, P = (torch.empty(B * H, T, dtype=torch.float32, device=q.device) for _ in range(2))
    launch(_fwd_out_kernel, q)[(NV, NT, B * H)](q, k, v, s, a, g, s if g0 is None else g0,
                                                *states, o, Z, P, T, NT, H=H, D=D, BT=BT, BV=BV,
                                                HAS_G0=g0 is not None, PREC=dot_precision(q.dtype),
                                                num_warps=num_warps(D, True))
    return o, states, (Z, P)
