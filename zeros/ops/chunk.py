"""Chunked ZeroS in plain torch: O(T·C) work per head, activations linear in T (SPEC §2-§3).

Causal: the sequence is cut into chunks of C positions. Inside a chunk the weights
r_{t,i} = α_t e^{s_i - m_t} + β_t (s_i - c) + γ_t (α_t = σʰ_t/Ê_t) form a small [C, C] matrix;
across chunks the prefix enters through chunk-boundary states (E, P, F, G, H of `ZeroSState`).
E and F are always relative to the running max m_t of the row that reads them, never a global
max, so no row underflows (the defect of SPEC §6). The backward is written by hand
(`_ChunkZeroS`, with the maths in chunk_bwd.py): it saves only the inputs and the boundary states
and recomputes the [C, C] blocks, so training memory stays O(T·d).
Encoder: every row reads the same whole-sequence sums, so it is one pass with no chunking.
Public shapes: q, k, v [B, T, H, d]; s, g1, gh, g0 [B, T, H]; inputs already validated and cast.
Inside: head-major chunks, [B, H, n, C, d] and [B, H, n, C].
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .state import ZeroSState, empty_state_like

DEFAULT_CHUNK = 64


def encoder_zeros(q, k, v, s, g1, gh, g0=None):
    """Non-causal ZeroS: t -> N in every formula; gates stay per row. Returns [B, T, H, d]."""
    N = q.shape[1]
    qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v))  # [B, H, N, d]
    sh = s.transpose(1, 2)  # [B, H, N]
    m = sh.amax(-1, keepdim=True).detach()  # one max suffices: every row has the same sums
    e = torch.exp(sh - m)  # [B, H, N]
    st = sh - sh.mean(-1, keepdim=True).detach()  # centred logits for the first-order term
    E, P = e.sum(-1, keepdim=True), st.sum(-1, keepdim=True)  # [B, H, 1]
    kv = torch.cat([kh * e[..., None], kh * st[..., None], kh], dim=-1)  # [B, H, N, 3d]
    FGH = kv.transpose(-1, -2) @ vh  # [B, H, 3d, d]: F, G, H stacked
    a, g = gh.transpose(1, 2), g1.transpose(1, 2)  # [B, H, N]
    alpha = a / E
    beta = (g - a) / N
    gamma = -(beta * P + a) / N
    if g0 is not None:
        gamma = gamma + g0.transpose(1, 2) / N
    qs = torch.cat([qh * alpha[..., None], qh * beta[..., None], qh * gamma[..., None]], -1)
    return (qs @ FGH).transpose(1, 2)  # [B, N, H, d]


def scan_states(kc, vc, sc, slc, valid, st0: ZeroSState):
    """Chunk-boundary states. Returns (cm, boundary dict, final ZeroSState pieces).

    cm [B, H, n, C]: max of the logits within the chunk up to t. Boundary states are the prefix
    BEFORE each chunk: M_prev, E_prev, P_prev [B, H, n] and S_prev [B, H, n, d, 3d], the
    states F | G | H side by side (one matmul reads all three)."""
    s_max = sc.detach().masked_fill(~valid, float("-inf"))
    cm = torch.cummax(s_max, dim=-1).values  # [B, H, n, C]
    M_loc = cm[..., -1]  # [B, H, n] chunk max
    e_loc = torch.exp(sc.masked_fill(~valid, float("-inf")) - M_loc[..., None])  # [B,H,n,C]
    dE = e_loc.sum(-1)  # [B, H, n]
    # per-chunk k_iᵀ [e_i v_i | s̃_i v_i | v_i]: the F, G, H increments side by side
    vw = torch.cat([vc * e_loc[..., None], vc * slc[..., None], vc], -1)  # [B, H, n, C, 3d]
    dS = kc.transpose(-1, -2) @ vw  # [B, H, n, d, 3d]
    dP = slc.sum(-1)  # [B, H, n]
    n, d = kc.shape[2], kc.shape[-1]
    M, E, Fr, GH = st0.m, st0.E, st0.F, torch.cat([st0.G, st0.H], -1)  # running prefix
    M_prev, E_prev = kc.new_empty(M.shape + (n,)), kc.new_empty(M.shape + (n,))
    S_prev = kc.new_empty(kc.shape[:3] + (d, 3 * d))  # [B, H, n, d, 3d]: F | G | H
    for c in range(n):  # n = T/C small steps on [B, H, d, ·]; exact rescale of E, F each step
        M_prev[..., c], E_prev[..., c] = M, E
        S_prev[:, :, c, :, :d], S_prev[:, :, c, :, d:] = Fr, GH
        M_new = torch.maximum(M, M_loc[:, :, c])
        r_old, r_new = torch.exp(M - M_new), torch.exp(M_loc[:, :, c] - M_new)
        E = E * r_old + dE[:, :, c] * r_new
        Fr = Fr * r_old[..., None, None] + dS[:, :, c, :, :d] * r_new[..., None, None]
        GH = GH + dS[:, :, c, :, d:]  # G and H need no rescale
        M = M_new
    bound = dict(M_prev=M_prev, E_prev=E_prev, S_prev=S_prev,
                 P_prev=st0.P[..., None] + torch.cumsum(dP, -1) - dP)
    final = dict(m=M, E=E, F=Fr, G=GH[..., :d], H=GH[..., d:],
                 P=bound["P_prev"][..., -1] + dP[..., -1])
    return cm, bound, final


def row_coefficients(sc, slc, a, g, g0c, valid, cm, b, t0):
    """Per-row quantities of chunked ZeroS (all [B, H, n, C] unless noted):
    X [B, H, n, C, C] = e^{s_i - m_t} for i <= t in the chunk, resc = e^{M_prev - m_t},
    E_row = Ê_t, t_row, P_row, and the coefficients alpha, beta, gamma."""
    n, C = sc.shape[-2:]
    tril = torch.ones(C, C, dtype=torch.bool, device=sc.device).tril()
    m_row = torch.maximum(b["M_prev"][..., None], cm)  # running max of row t
    x_in = torch.where(tril & valid[:, None, :], sc[..., None, :], float("-inf"))
    X = torch.exp(x_in - m_row[..., None])  # [B, H, n, C, C]
    resc = torch.exp(b["M_prev"][..., None] - m_row)  # <= 1
    E_row = b["E_prev"][..., None] * resc + X.sum(-1)
    t_row = (t0 + torch.arange(1, n * C + 1, device=sc.device, dtype=sc.dtype)).view(n, C)
    P_row = b["P_prev"][..., None] + torch.cumsum(slc, -1)
    alpha = a / E_row  # σʰ_t / Ê_t
    beta = (g - a) / t_row
    gamma = -(beta * P_row + a) / t_row
    if g0c is not None:
        gamma = gamma + g0c / t_row
    return dict(tril=tril, X=X, resc=resc, E_row=E_row, t_row=t_row, P_row=P_row,
                alpha=alpha, beta=beta, gamma=gamma)


def chunk_output(qc, kc, vc, slc, r, b):
    """o [B, H, n, C, d]: intra-chunk explicit weights + q against the boundary state."""
    W = (r["alpha"][..., None] * r["X"] + r["beta"][..., None] * slc[..., None, :]
         + r["gamma"][..., None]).masked_fill(~r["tril"], 0.0)  # [B, H, n, C, C]
    o = ((qc @ kc.transpose(-1, -2)) * W) @ vc
    qS = (qc @ b["S_prev"]).unflatten(-1, (3, -1))  # [B, H, n, C, 3, d]
    coef = torch.stack([r["alpha"] * r["resc"], r["beta"], r["gamma"]], -1)  # [B, H, n, C, 3]
    return o + (coef[..., None] * qS).sum(-2)


def _forward(qc, kc, vc, sc, slc, a, g, g0c, valid, st0):
    cm, b, final = scan_states(kc, vc, sc, slc, valid, st0)
    r = row_coefficients(sc, slc, a, g, g0c, valid, cm, b, st0.t)
    return chunk_output(qc, kc, vc, slc, r, b), cm, b, final


class _ChunkZeroS(torch.autograd.Function):
    """Causal chunked ZeroS from a fresh state with the hand-written backward of chunk_bwd.py."""

    @staticmethod
    def forward(ctx, qc, kc, vc, sc, slc, a, g, g0c, valid, shift):
        st0 = empty_state_like(shift, qc.shape[-1])  # its shift is (a copy of) `shift`
        o, cm, b, final = _forward(qc, kc, vc, sc, slc, a, g, g0c, valid, st0)
        ctx.save_for_backward(qc, kc, vc, sc, slc, a, g, g0c, valid, cm, *b.values(), final["m"])
        ctx.keys = list(b)
        return o

    @staticmethod
    def backward(ctx, do):
        from .chunk_bwd import chunk_backward
        qc, kc, vc, sc, slc, a, g, g0c, valid, cm, *rest = ctx.saved_tensors
        b = dict(zip(ctx.keys, rest[:-1]))
        grads = chunk_backward(do, qc, kc, vc, sc, slc, a, g, g0c, valid, cm, b, rest[-1])
        return (*grads, None, None)


def chunk_zeros(q, k, v, s, g1, gh, g0=None, causal=True, chunk_size=DEFAULT_CHUNK,
                initial_state: ZeroSState | None = None, output_final_state: bool = False):
    """Chunked ZeroS. Returns o [B, T, H, d] and, if asked, the final `ZeroSState` (causal)."""
    if not causal:
        if initial_state is not None or output_final_state:
            raise ValueError("encoder (causal=False) ZeroS has no recurrent state: every row "
                             "reads the whole sequence; use causal=True for prompt-then-decode")
        return encoder_zeros(q, k, v, s, g1, gh, g0)
    B, T, H, d = q.shape
    chunk_size = min(chunk_size, T)  # a short sequence is one chunk, with no padding
    n = -(-T // chunk_size)
    extra = n * chunk_size - T

    def chunked(x):  # [B, T, H, ...] -> [B, H, n, C, ...], zero-padded at the end
        x = x.transpose(1, 2)
        x = F.pad(x, [0, 0] * (x.dim() - 3) + [0, extra]) if extra else x
        # contiguous: batched matmuls over (B, H, n) would otherwise copy every block
        return x.reshape(B, H, n, chunk_size, *x.shape[3:]).contiguous()

    qc, kc, vc, sc, a, g = (chunked(x) for x in (q, k, v, s, gh, g1))
    g0c = None if g0 is None else chunked(g0)
    valid = (torch.arange(n * chunk_size, device=q.device) < T).view(n, chunk_size)
    st0 = initial_state if initial_state is not None else empty_state_like(sc[:, :, 0, 0], d)
    slc = torch.where(valid, sc - st0.shift[..., None, None], 0.0)  # s_i - c, 0 on padding
    if initial_state is None and not output_final_state:
        o = _ChunkZeroS.apply(qc, kc, vc, sc, slc, a, g, g0c, valid, st0.shift)
        final = None
    else:  # carrying a state: plain autograd through the same forward code
        o, _, _, final = _forward(qc, kc, vc, sc, slc, a, g, g0c, valid, st0)
    o = o.reshape(B, H, n * chunk_size, d)[:, :, :T].transpose(1, 2)  # [B, T, H, d]
    if not output_final_state:
        return o
    return o, ZeroSState(st0.t + T, st0.shift, **final)
