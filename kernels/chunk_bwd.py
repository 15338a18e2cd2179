"""Causal ZeroS backward in three hand-written Triton kernels (derivation in docs/kernels.md).

With the row log-normaliser Z_t = log Σ_{j≤t} e^{s_j} saved by the forward, the weights are
W_{t,i} = σʰ_t e^{s_i − Z_t} + β_t (s_i − c) + γ_t, and with dW_{t,i} = (q_t·k_i)(do_t·v_i):
  dq_t = Σ_i W_{t,i} (do_t·v_i) k_i,   dk_i = Σ_t W_{t,i} (do_t·v_i) q_t,
  dv_i = Σ_t W_{t,i} (q_t·k_i) do_t,
  ds_i = Σ_{t≥i} (σʰ_t e^{s_i−Z_t} + β_t) dW_{t,i} − e^{s_i} Σ_{t≥i} σʰ_t e^{−Z_t} Du_t
         − Σ_{t≥i} β_t DH_t / t
with the row sums Du_t = Σ_i e^{s_i−Z_t} dW_{t,i}, DG_t = Σ_i (s_i − c) dW_{t,i},
DH_t = Σ_i dW_{t,i}.
1. `_bwd_dq_kernel` (parallel over chunks): dq and Du, DG, DH, reading the forward's saved chunk
   boundary states (F, G, H); nothing per step is stored.
2. `_bwd_suffix_kernel` (reverse scan over chunks): suffix states
   dF = Σ σʰ_t e^{Zref − Z_t} q_tᵀdo_t, dG = Σ β_t q_tᵀdo_t, dH = Σ γ_t q_tᵀdo_t and the scalar
   dE = Σ σʰ_t e^{Zref − Z_t} Du_t over the rows after each chunk, relative to Zref = Z at the
   chunk's last row. Z is non-decreasing in t,
   so every factor e^{Zref − Z_t} and e^{s_i − Zref} is ≤ 1: no running max is needed here.
3. `_bwd_dkv_kernel` (parallel over chunks): dk, dv and ds from the chunk's C×C terms plus the
   suffix states.
The gate gradients and the last (scalar, reverse cumulative) term of ds are O(T) torch ops.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import (block_v, dot_precision, head_offsets, launch, num_warps, row_coefs,
                     rsum, state_offsets)


@triton.jit
def _load_rows(q, k, v, do, s, a, g, g0, Zr, Pr, i_c, i_v, T,
               H: tl.constexpr, D: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
               HAS_G0: tl.constexpr):
    """Everything one chunk's backward reads, with the row coefficients β, γ recomputed."""
    i_bh = tl.program_id(2)
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, D)
    o_v = i_v * BV + tl.arange(0, BV)
    base, s_base = head_offsets(i_bh, T, H, D)
    rows = i_c * BT + o_t
    valid = rows < T
    p_k = base + rows[:, None] * H * D + o_k[None, :]
    p_v = base + rows[:, None] * H * D + o_v[None, :]
    b_q = tl.load(q + p_k, mask=valid[:, None], other=0.)
    b_k = tl.load(k + p_k, mask=valid[:, None], other=0.)
    b_v = tl.load(v + p_v, mask=valid[:, None], other=0.)
    b_do = tl.load(do + p_v, mask=valid[:, None], other=0.)
    b_s = tl.load(s + s_base + rows * H, mask=valid, other=float("-inf"))
    b_a = tl.load(a + s_base + rows * H, mask=valid, other=0.)
    b_g = tl.load(g + s_base + rows * H, mask=valid, other=0.)
    if HAS_G0:
        b_g0 = tl.load(g0 + s_base + rows * H, mask=valid, other=0.)
    else:
        b_g0 = b_a
    row_base = i_bh.to(tl.int64) * T
    b_Z = tl.load(Zr + row_base + rows, mask=valid, other=0.)
    b_P = tl.load(Pr + row_base + rows, mask=valid, other=0.)
    c = tl.load(s + s_base)
    b_sl = tl.where(valid, b_s - c, 0.)
    n_row = (rows + 1).to(tl.float32)
    b_beta, b_gamma = row_coefs(b_a, b_g, b_g0, b_P, n_row, HAS_G0)
    return b_q, b_k, b_v, b_do, b_s, b_sl, b_a, b_beta, b_gamma, b_Z, valid, rows, p_k, p_v


@triton.jit
def _bwd_dq_kernel(q, k, v, do, s, a, g, g0, Zr, Pr, F_in, G_in, H_in, scal_in, dq, Dsum, T, NT,
                   H: tl.constexpr, D: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
                   HAS_G0: tl.constexpr, PREC: tl.constexpr):
    i_v, i_c, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    (b_q, b_k, b_v, b_do, b_s, b_sl, b_a, b_beta, b_gamma, b_Z, valid, rows, p_k, p_v) = _load_rows(
        q, k, v, do, s, a, g, g0, Zr, Pr, i_c, i_v, T, H, D, BT, BV, HAS_G0)
    o_t = tl.arange(0, BT)
    tri = o_t[:, None] >= o_t[None, :]
    b_PX = tl.exp(tl.where(tri, b_s[None, :] - b_Z[:, None], float("-inf")))  # [BT, BT] p_{t,i}
    b_lin = tl.where(tri, b_beta[:, None] * b_sl[None, :] + b_gamma[:, None], 0.)
    b_W = b_a[:, None] * b_PX + b_lin
    b_dA = tl.dot(b_do, tl.trans(b_v), input_precision=PREC)  # [BT, BT] do_t·v_i (this V block)
    b_dW = tl.where(tri, tl.dot(b_q, tl.trans(b_k), input_precision=PREC) * b_dA, 0.)
    b_dq = tl.dot((b_W * b_dA).to(b_k.dtype), b_k, input_precision=PREC)  # [BT, D]
    b_Du = rsum(b_PX * b_dW, 1)
    b_DG = rsum(b_sl[None, :] * b_dW, 1)
    b_DH = rsum(b_dW, 1)

    st = state_offsets(i_bh, i_c, NT, i_v, D, BV)
    M0 = tl.load(scal_in + (i_bh.to(tl.int64) * NT + i_c) * 3)
    a_prev = tl.exp(M0 - b_Z)  # [BT] weight of the chunk-start F (relative to M0) in row t
    b_q32, b_do32 = b_q.to(tl.float32), b_do.to(tl.float32)
    b_F = tl.load(F_in + st)  # [D, BV]
    b_Du += a_prev * rsum(tl.dot(b_q32, b_F, input_precision=PREC) * b_do32, 1)
    b_dq += (b_a * a_prev)[:, None] * tl.dot(b_do32, tl.trans(b_F), input_precision=PREC)
    b_G = tl.load(G_in + st)
    b_DG += rsum(tl.dot(b_q32, b_G, input_precision=PREC) * b_do32, 1)
    b_dq += b_beta[:, None] * tl.dot(b_do32, tl.trans(b_G), input_precision=PREC)
    b_H = tl.load(H_in + st)
    b_DH += rsum(tl.dot(b_q32, b_H, input_precision=PREC) * b_do32, 1)
    b_dq += b_gamma[:, None] * tl.dot(b_do32, tl.trans(b_H), input_precision=PREC)

    # partial sums over value blocks: [NV, B, T, H, D] and [NV, 3, B·H, T]
    nv_off = i_v.to(tl.int64) * tl.num_programs(2) * T * D
    tl.store(dq + nv_off + p_k, b_dq, mask=valid[:, None])
    row = i_bh.to(tl.int64) * T + rows
    plane = tl.num_programs(2).to(tl.int64) * T
    d_off = i_v.to(tl.int64) * 3 * plane
    tl.store(Dsum + d_off + row, b_Du, mask=valid)
    tl.store(Dsum + d_off + plane + row, b_DG, mask=valid)
    tl.store(Dsum + d_off + 2 * plane + row, b_DH, mask=valid)


@triton.jit
def _bwd_suffix_kernel(q, do, a, g, g0, Zr, Pr, Du, dF_out, dG_out, dH_out, dE_out, T, NT,
                       H: tl.constexpr, D: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
                       HAS_G0: tl.constexpr, PREC: tl.constexpr):
    i_v, i_bh = tl.program_id(0), tl.program_id(1)
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, D)
    o_v = i_v * BV + tl.arange(0, BV)
    base, s_base = head_offsets(i_bh, T, H, D)
    row_base = i_bh.to(tl.int64) * T
    b_dF = tl.full([D, BV], 0.0, tl.float32)
    b_dG = tl.full([D, BV], 0.0, tl.float32)
    b_dH = tl.full([D, BV], 0.0, tl.float32)
    b_dE = tl.full([], 0.0, tl.float32)
    st_base = i_bh.to(tl.int64) * NT * D * D
    for j in range(NT):
        i_c = NT - 1 - j
        # the state over the rows after chunk i_c, relative to Z at its last row
        st = st_base + i_c * D * D + o_k[:, None] * D + o_v[None, :]
        tl.store(dF_out + st, b_dF)
        tl.store(dG_out + st, b_dG)
        tl.store(dH_out + st, b_dH)
        if i_v == 0:
            tl.store(dE_out + i_bh.to(tl.int64) * NT + i_c, b_dE)
        if i_c > 0:  # fold chunk i_c in, relative to Zref of chunk i_c − 1
            rows = i_c * BT + o_t
            valid = rows < T
            z_ref = tl.load(Zr + row_base + i_c * BT - 1)
            z_old = tl.load(Zr + row_base + tl.minimum(i_c * BT + BT - 1, T - 1))
            r_old = tl.exp(z_ref - z_old)  # <= 1 (Z is non-decreasing)
            b_q = tl.load(q + base + rows[:, None] * H * D + o_k[None, :], mask=valid[:, None],
                          other=0.)
            b_do = tl.load(do + base + rows[:, None] * H * D + o_v[None, :], mask=valid[:, None],
                           other=0.)
            b_a = tl.load(a + s_base + rows * H, mask=valid, other=0.)
            b_g = tl.load(g + s_base + rows * H, mask=valid, other=0.)
            if HAS_G0:
                b_g0 = tl.load(g0 + s_base + rows * H, mask=valid, other=0.)
            else:
                b_g0 = b_a
            b_Z = tl.load(Zr + row_base + rows, mask=valid, other=float("inf"))
            b_P = tl.load(Pr + row_base + rows, mask=valid, other=0.)
            b_Du = tl.load(Du + row_base + rows, mask=valid, other=0.)
            b_beta, b_gamma = row_coefs(b_a, b_g, b_g0, b_P, (rows + 1).to(tl.float32), HAS_G0)
            b_w = b_a * tl.exp(z_ref - b_Z)  # [BT] <= σʰ_t, 0 on padding rows
            b_qt = tl.trans(b_q)  # [D, BT]
            b_dF = b_dF * r_old + tl.dot(b_qt, (b_do * b_w[:, None]).to(b_q.dtype),
                                         input_precision=PREC)
            b_dG += tl.dot(b_qt, (b_do * b_beta[:, None]).to(b_q.dtype), input_precision=PREC)
            b_dH += tl.dot(b_qt, (b_do * b_gamma[:, None]).to(b_q.dtype), input_precision=PREC)
            b_dE = b_dE * r_old + rsum(b_w * b_Du, 0)


@triton.jit
def _bwd_dkv_kernel(q, k, v, do, s, a, g, g0, Zr, Pr, Du, dF_in, dG_in, dH_in, dE_in, dk, dv, ds,
                    T, NT, H: tl.constexpr, D: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
                    HAS_G0: tl.constexpr, PREC: tl.constexpr):
    i_v, i_c, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    (b_q, b_k, b_v, b_do, b_s, b_sl, b_a, b_beta, b_gamma, b_Z, valid, rows, p_k, p_v) = _load_rows(
        q, k, v, do, s, a, g, g0, Zr, Pr, i_c, i_v, T, H, D, BT, BV, HAS_G0)
    o_t = tl.arange(0, BT)
    tri = o_t[:, None] >= o_t[None, :]  # [t, i]
    row_base = i_bh.to(tl.int64) * T
    b_Du = tl.load(Du + row_base + rows, mask=valid, other=0.)
    b_PA = b_a[:, None] * tl.exp(tl.where(tri, b_s[None, :] - b_Z[:, None], float("-inf")))
    b_W = b_PA + tl.where(tri, b_beta[:, None] * b_sl[None, :] + b_gamma[:, None], 0.)
    b_qk = tl.dot(b_q, tl.trans(b_k), input_precision=PREC)  # [t, i]
    b_dA = tl.dot(b_do, tl.trans(b_v), input_precision=PREC)  # [t, i] this V block
    b_dv = tl.dot(tl.trans(b_W * b_qk).to(b_do.dtype), b_do, input_precision=PREC)  # [BT, BV]
    b_dk = tl.dot(tl.trans(b_W * b_dA).to(b_q.dtype), b_q, input_precision=PREC)  # [BT, D]
    b_ds = rsum(tl.where(tri, (b_PA + b_beta[:, None]) * b_qk * b_dA, 0.), 0)  # [BT] over t
    first_v = (i_v == 0).to(tl.float32)  # scalar terms are added by one value block only
    b_ds -= first_v * rsum(b_PA * b_Du[:, None], 0)

    # rows after this chunk, through the suffix states (zero for the last chunk)
    st = state_offsets(i_bh, i_c, NT, i_v, D, BV)
    z_ref = tl.load(Zr + row_base + tl.minimum(i_c * BT + BT - 1, T - 1))
    b_e = tl.exp(b_s - z_ref)  # [BT] e^{s_i − Zref} <= 1, 0 on padding
    b_k32, b_v32 = b_k.to(tl.float32), b_v.to(tl.float32)
    b_dF = tl.load(dF_in + st)  # [D, BV]
    b_kdF = tl.dot(b_k32, b_dF, input_precision=PREC)  # [BT, BV]
    b_dv += b_e[:, None] * b_kdF
    b_dk += b_e[:, None] * tl.dot(b_v32, tl.trans(b_dF), input_precision=PREC)
    b_ds += b_e * rsum(b_kdF * b_v32, 1)
    b_dG = tl.load(dG_in + st)
    b_kdG = tl.dot(b_k32, b_dG, input_precision=PREC)
    b_dv += b_sl[:, None] * b_kdG
    b_dk += b_sl[:, None] * tl.dot(b_v32, tl.trans(b_dG), input_precision=PREC)
    b_ds += rsum(b_kdG * b_v32, 1)
    b_dH = tl.load(dH_in + st)
    b_dv += tl.dot(b_k32, b_dH, input_precision=PREC)
    b_dk += tl.dot(b_v32, tl.trans(b_dH), input_precision=PREC)
    b_ds -= first_v * b_e * tl.load(dE_in + i_bh.to(tl.int64) * NT + i_c)

    tl.store(dv + p_v, b_dv.to(dv.dtype.element_ty), mask=valid[:, None])
    nv_off = i_v.to(tl.int64) * tl.num_programs(2) * T * D
    tl.store(dk + nv_off + p_k, b_dk, mask=valid[:, None])
    tl.store(ds + i_v.to(tl.int64) * tl.num_programs(2) * T + row_base + rows, b_ds, mask=valid)


def chunk_bwd(q, k, v, s, a, g, g0, do, states, rows, chunk_size):
    """Gradients of the causal forward. Inputs as in `chunk_fwd`, do [B, T, H, D] contiguous;
    `states` = (F, G, H, scal) from `chunk_states` (saved or recomputed), `rows` = (Z, P).
    Returns dq, dk, dv (fp32 [B, T, H, D]) and ds, dg1, dgh, dg0 (fp32 [B, T, H]; dg0 None when
    g0 is None)."""
    Fs, Gs, Hs, scal = states
    Z, P = rows
    B, T, H, D = q.shape
    BT, BV = chunk_size, block_v(D)
    NT, NV = triton.cdiv(T, BT), triton.cdiv(D, BV)
    f32 = dict(dtype=torch.float32, device=q.device)
    prec = dot_precision(q.dtype)
    g0_ptr = s if g0 is None else g0
    kw = dict(H=H, D=D, BT=BT, BV=BV, HAS_G0=g0 is not None, PREC=prec)

    dq = torch.empty(NV, B, T, H, D, **f32)
    Dsum = torch.empty(NV, 3, B * H, T, **f32)
    launch(_bwd_dq_kernel, q)[(NV, NT, B * H)](q, k, v, do, s, a, g, g0_ptr, Z, P, Fs, Gs, Hs,
                                               scal, dq, Dsum, T, NT, **kw,
                                               num_warps=num_warps(D, True))
    dq = dq.sum(0)
    Du, DG, DH = Dsum.sum(0).view(3, B, H, T).unbind(0)  # [B, H, T] each

    # gate gradients and the O(T) scalar term of ds, in torch
    n = torch.arange(1, T + 1, **f32)  # [T]
    a_h, g_h, P_h = a.transpose(1, 2), g.transpose(1, 2), P.view(B, H, T)  # [B, H, T]
    beta = (g_h - a_h) / n
    dgh = Du - DG / n + (P_h / n - 1) / n * DH
    dg1 = DG / n - P_h / n ** 2 * DH
    dg0 = None if g0 is None else (DH / n).transpose(1, 2)
    ds_tail = -(beta * DH / n).flip(-1).cumsum(-1).flip(-1)  # −Σ_{t≥i} β_t DH_t / t

    dF, dG, dH = (torch.empty(B * H, NT, D, D, **f32) for _ in range(3))
    dE = torch.empty(B * H, NT, **f32)
    Du_flat = Du.reshape(B * H, T).contiguous()
    launch(_bwd_suffix_kernel, q)[(NV, B * H)](q, do, a, g, g0_ptr, Z, P, Du_flat, dF, dG, dH,
                                               dE, T, NT, **kw, num_warps=num_warps(D, False))
    dk = torch.empty(NV, B, T, H, D, **f32)
    dv = torch.empty(B, T, H, D, **f32)
    ds = torch.empty(NV, B * H, T, **f32)
    launch(_bwd_dkv_kernel, q)[(NV, NT, B * H)](q, k, v, do, s, a, g, g0_ptr, Z, P, Du_flat, dF,
                                                dG, dH, dE, dk, dv, ds, T, NT, **kw,
                                                num_warps=num_warps(D, True))
    ds = ds.sum(0).view(B, H, T) + ds_tail
    return (dq, dk.sum(0), dv, ds.transpose(1, 2), dg1.transpose(1, 2), dgh.transpose(1, 2), dg0)
