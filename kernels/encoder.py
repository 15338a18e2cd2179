"""Non-causal (encoder) ZeroS forward and backward (docs/spec.md §3) from two Triton kernels.

Every row reads the same whole-sequence sums (t -> N), so the operator is
  o_t = q_t (α_t F + β_t G + γ_t H),  F = Σ_i w1_i k_iᵀv_i, G = Σ_i w2_i k_iᵀv_i, H = Σ_i k_iᵀv_i
with w1 = e^{s − max s} (one max is exact here: every row divides by the same E = Σ w1),
w2 = s − mean(s) (a shift: outputs do not depend on it), α = σʰ/E, β = (σ¹ − σʰ)/N,
γ = −(β P + σʰ)/N (+ σ⁰/N), P = Σ w2. Two kernels cover the forward and the backward:
- `_outer_sum_kernel`: per chunk, the three weighted outer-product sums Σ w_j,i x_iᵀ y_i;
- `_rows_apply_kernel`: out_t = Σ_j c_j,t x_t S_j for three d×d matrices S_j (any strides, so Sᵀ
  is free), optionally with the row dots y_t·(x_t S_j).
Backward (dW_{t,i} = (q_t·k_i)(do_t·v_i)): dq_t = do_t (α_t F + β_t G + γ_t H)ᵀ;
dF, dG, dH = Σ_t (α_t, β_t, γ_t) q_tᵀdo_t; dv_i = k_i (w1_i dF + w2_i dG + dH);
dk_i = (w1_i dF + w2_i dG + dH) v_i;
ds_i = w1_i (k_i·dF v_i − Σ_t α_t Du_t) + k_i·dG v_i − Σ_t β_t DH_t / N with Du_t = do_t·(q_t F)/E,
DH_t = do_t·(q_t H); the gate gradients use the same row dots as the causal backward.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import block_v, dot_precision, head_offsets, launch, num_warps, rsum


@triton.jit
def _outer_sum_kernel(X, Y, w, out, T, NT, H: tl.constexpr, D: tl.constexpr, BT: tl.constexpr,
                      BV: tl.constexpr, PREC: tl.constexpr):
    i_v, i_c, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, D)
    o_v = i_v * BV + tl.arange(0, BV)
    base, _ = head_offsets(i_bh, T, H, D)
    rows = i_c * BT + o_t
    valid = rows < T
    b_x = tl.load(X + base + rows[:, None] * H * D + o_k[None, :], mask=valid[:, None], other=0.)
    b_y = tl.load(Y + base + rows[:, None] * H * D + o_v[None, :], mask=valid[:, None], other=0.)
    plane = tl.num_programs(2).to(tl.int64) * T  # w is [3, B·H, T]
    p_w = i_bh.to(tl.int64) * T + rows
    b_xt = tl.trans(b_x)  # [D, BT]
    # out is [B·H, NT, 3, D, D]: one partial sum per chunk, summed in torch (deterministic)
    p_o = ((i_bh.to(tl.int64) * NT + i_c) * 3) * D * D + o_k[:, None] * D + o_v[None, :]
    for j in tl.static_range(3):
        b_w = tl.load(w + j * plane + p_w, mask=valid, other=0.)
        b_S = tl.dot(b_xt, (b_y * b_w[:, None]).to(b_x.dtype), input_precision=PREC)
        tl.store(out + p_o + j * D * D, b_S)


@triton.jit
def _rows_apply_kernel(X, S, cf, Y, out, dots, T, stride_r, stride_c,
                       H: tl.constexpr, D: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
                       HAS_Y: tl.constexpr, PREC: tl.constexpr):
    i_v, i_c, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, D)
    o_v = i_v * BV + tl.arange(0, BV)
    base, _ = head_offsets(i_bh, T, H, D)
    rows = i_c * BT + o_t
    valid = rows < T
    b_x = tl.load(X + base + rows[:, None] * H * D + o_k[None, :], mask=valid[:, None],
                  other=0.).to(tl.float32)
    plane = tl.num_programs(2).to(tl.int64) * T  # cf and dots rows are [., B·H, T]
    p_row = i_bh.to(tl.int64) * T + rows
    p_S = i_bh.to(tl.int64) * 3 * D * D + o_k[:, None] * stride_r + o_v[None, :] * stride_c
    if HAS_Y:
        b_y = tl.load(Y + base + rows[:, None] * H * D + o_v[None, :], mask=valid[:, None],
                      other=0.).to(tl.float32)
    b_o = tl.full([BT, BV], 0.0, tl.float32)
    for j in tl.static_range(3):
        b_xS = tl.dot(b_x, tl.load(S + p_S + j * D * D), input_precision=PREC)  # [BT, BV]
        b_o += tl.load(cf + j * plane + p_row, mask=valid, other=0.)[:, None] * b_xS
        if HAS_Y:
            tl.store(dots + (i_v * 3 + j) * plane + p_row, rsum(b_xS * b_y, 1), mask=valid)
    tl.store(out + base + rows[:, None] * H * D + o_v[None, :], b_o.to(out.dtype.element_ty),
             mask=valid[:, None])


def _outer_sum(x, y, w, chunk_size):
    """Σ_i w_j,i x_iᵀ y_i for j = 0..2. x, y [B, T, H, D]; w [3, B·H, T] fp32 -> [B·H, 3, D, D]."""
    B, T, H, D = x.shape
    BV = block_v(D)
    NT, NV = triton.cdiv(T, chunk_size), triton.cdiv(D, BV)
    out = torch.empty(B * H, NT, 3, D, D, dtype=torch.float32, device=x.device)
    launch(_outer_sum_kernel, x)[(NV, NT, B * H)](x, y, w, out, T, NT, H=H, D=D, BT=chunk_size,
                                                  BV=BV, PREC=dot_precision(x.dtype),
                                                  num_warps=num_warps(D, False))
    return out.sum(1)


def _rows_apply(x, S, cf, chunk_size, y=None, transpose=False, out_dtype=None):
    """out_t = Σ_j cf_j,t x_t S_j (S_jᵀ if transpose) and, with y, the dots y_t·(x_t S_j).
    x, y [B, T, H, D]; S [B·H, 3, D, D] fp32 contiguous; cf [3, B·H, T] fp32."""
    B, T, H, D = x.shape
    BV = block_v(D)
    NT, NV = triton.cdiv(T, chunk_size), triton.cdiv(D, BV)
    out = torch.empty(B, T, H, D, dtype=out_dtype or torch.float32, device=x.device)
    # without y the kernel stores no dots: a 1-element placeholder, not `out` again (an aliased
    # argument would make the traced kernel's functional form copy one buffer twice)
    dots = torch.empty(NV, 3, B * H, T, dtype=torch.float32, device=x.device) if y is not None \
        else x.new_empty(1, dtype=torch.float32)
    sr, sc = (1, D) if transpose else (D, 1)
    launch(_rows_apply_kernel, x)[(NV, NT, B * H)](x, S, cf, x if y is None else y, out, dots, T,
                                                   sr, sc, H=H, D=D, BT=chunk_size, BV=BV,
                                                   HAS_Y=y is not None, PREC=dot_precision(x.dtype),
                                                   num_warps=num_warps(D, False))
    return out, (dots.sum(0) if y is not None else None)


def encoder_fwd(q, k, v, s, a, g, g0, chunk_size):
    """q, k, v [B, N, H, D] contiguous; s, a (σʰ), g (σ¹), g0 [B, N, H] fp32. Returns o (q's
    dtype) and the tensors the backward needs."""
    B, N, H, D = q.shape
    sh = s.transpose(1, 2)  # [B, H, N]
    w1 = torch.exp(sh - sh.amax(-1, keepdim=True))  # [B, H, N] <= 1
    w2 = sh - sh.mean(-1, keepdim=True)
    wk = torch.stack([w1, w2, torch.ones_like(w1)]).reshape(3, B * H, N).contiguous()
    S = _outer_sum(k, v, wk, chunk_size).contiguous()  # [B·H, 3, D, D]: F, G, H
    E, P = w1.sum(-1, keepdim=True), w2.sum(-1, keepdim=True)  # [B, H, 1]
    a_h, g_h = a.transpose(1, 2), g.transpose(1, 2)  # [B, H, N]
    alpha, beta = a_h / E, (g_h - a_h) / N
    gamma = -(beta * P + a_h) / N
    if g0 is not None:
        gamma = gamma + g0.transpose(1, 2) / N
    cq = torch.stack([alpha, beta, gamma]).reshape(3, B * H, N).contiguous()
    o, _ = _rows_apply(q, S, cq, chunk_size, out_dtype=q.dtype)
    return o, (S, wk, cq, E, P)


def encoder_bwd(q, k, v, s, a, g, g0, do, saved, chunk_size):
    """Gradients of `encoder_fwd`: dq, dk, dv fp32 [B, N, H, D]; ds, dg1, dgh, dg0 fp32
    [B, N, H]."""
    S, wk, cq, E, P = saved
    B, N, H, D = q.shape
    dq, dots_q = _rows_apply(do, S, cq, chunk_size, y=q, transpose=True)
    Du, DG, DH = (x.view(B, H, N) for x in dots_q)  # do_t·(q_t F), ·G, ·H
    Du = Du / E
    dgh = Du - DG / N + (P / N - 1) / N * DH
    dg1 = DG / N - P / N ** 2 * DH
    dg0 = None if g0 is None else (DH / N).transpose(1, 2)
    dS = _outer_sum(q, do, cq, chunk_size).contiguous()  # dF, dG, dH [B·H, 3, D, D]
    dv, _ = _rows_apply(k, dS, wk, chunk_size)
    dk, dots_k = _rows_apply(v, dS, wk, chunk_size, y=k, transpose=True)
    alpha, beta = cq[0].view(B, H, N), cq[1].view(B, H, N)
    w1 = wk[0].view(B, H, N)
    ds = (w1 * (dots_k[0].view(B, H, N) - (alpha * Du).sum(-1, keepdim=True))
          + dots_k[1].view(B, H, N) - (beta * DH).sum(-1, keepdim=True) / N)
    return dq, dk, dv, ds.transpose(1, 2), dg1.transpose(1, 2), dgh.transpose(1, 2), dg0
