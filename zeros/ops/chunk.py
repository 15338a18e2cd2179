"""Chunked ZeroS in plain torch: O(T·C) work per head, activations linear in T (SPEC §2-§3).

Causal: the sequence is cut into chunks of C positions. Inside a chunk the weights
r_{t,i} = σʰ_t e^{s_i - m_t}/Ê_t + β_t (s_i - c) + γ_t are a small [C, C] matrix; across chunks
the prefix enters through the state (E, P, F, G, H) of `ZeroSState`. E and F are always kept
relative to the running max m_t of the row that reads them, never a global max, so no row
underflows (the defect of SPEC §6). Encoder: every row reads the same whole-sequence sums,
so the operator is a single pass with no chunking.
Shapes: q, k, v [B, T, H, d]; s, g1, gh, g0 [B, T, H]; inputs already validated and cast.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .state import ZeroSState, empty_state_like

DEFAULT_CHUNK = 64


def _pad_time(x: torch.Tensor, T_pad: int) -> torch.Tensor:
    """Zero-pad dim 2 (time, in [B, H, T, ...] layout) up to T_pad."""
    extra = T_pad - x.shape[2]
    if extra == 0:
        return x
    pad = [0, 0] * (x.dim() - 3) + [0, extra]
    return F.pad(x, pad)


def encoder_zeros(q, k, v, s, g1, gh, g0=None):
    """Non-causal ZeroS: t -> N in every formula; gates stay per row. Returns [B, T, H, d]."""
    N = q.shape[1]
    qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v))  # [B, H, N, d]
    sh = s.transpose(1, 2)  # [B, H, N]
    m = sh.amax(-1, keepdim=True).detach()  # one max suffices: every row has the same sums
    e = torch.exp(sh - m)  # [B, H, N]
    st = sh - sh.mean(-1, keepdim=True).detach()  # centred logits for the first-order term
    E = e.sum(-1, keepdim=True)  # [B, H, 1]
    P = st.sum(-1, keepdim=True)  # [B, H, 1]
    kv = torch.cat([kh * e[..., None], kh * st[..., None], kh], dim=-1)  # [B, H, N, 3d]
    FGH = kv.transpose(-1, -2) @ vh  # [B, H, 3d, d]: F, G, H stacked
    a, g = gh.transpose(1, 2), g1.transpose(1, 2)  # [B, H, N]
    alpha = a / E  # [B, H, N]
    beta = (g - a) / N
    gamma = -(beta * P + a) / N
    if g0 is not None:
        gamma = gamma + g0.transpose(1, 2) / N
    qs = torch.cat([qh * alpha[..., None], qh * beta[..., None], qh * gamma[..., None]], -1)
    return (qs @ FGH).transpose(1, 2)  # [B, N, H, d]


def chunk_zeros(q, k, v, s, g1, gh, g0=None, causal=True, chunk_size=DEFAULT_CHUNK,
                initial_state: ZeroSState | None = None, output_final_state: bool = False):
    """Chunked ZeroS. Returns o [B, T, H, d] and, if asked, the final `ZeroSState` (causal)."""
    if not causal:
        if initial_state is not None or output_final_state:
            raise ValueError("encoder (causal=False) ZeroS has no recurrent state: every row "
                             "reads the whole sequence; use causal=True for prompt-then-decode")
        return encoder_zeros(q, k, v, s, g1, gh, g0)
    B, T, H, d = q.shape
    C = chunk_size
    n = -(-T // C)
    Tp = n * C
    qh, kh, vh = (_pad_time(x.transpose(1, 2), Tp) for x in (q, k, v))  # [B, H, Tp, d]
    sh, ah, bh = (_pad_time(x.transpose(1, 2), Tp) for x in (s, gh, g1))  # [B, H, Tp]
    st0 = initial_state if initial_state is not None else empty_state_like(sh[..., 0], d)
    valid = torch.arange(Tp, device=q.device) < T  # [Tp] padding rows are dropped at the end

    # --- logits: shifted copy for the linear terms, running max for the exponentials -----
    s_lin = torch.where(valid, sh - st0.shift[..., None], 0.0)  # [B, H, Tp] s_i - c
    s_max = torch.where(valid, sh.detach(), float("-inf")).view(B, H, n, C)
    cm = torch.cummax(s_max, dim=-1).values  # [B, H, n, C] max within the chunk up to t
    M_loc = cm[..., -1]  # [B, H, n] chunk max

    # --- chunk-level state scan (only E and F need the running-max rescale) ---------------
    qc, kc, vc = (x.view(B, H, n, C, d) for x in (qh, kh, vh))
    e_loc = torch.exp(torch.where(valid, sh, float("-inf")).view(B, H, n, C) - M_loc[..., None])
    dE = e_loc.sum(-1)  # [B, H, n]
    dF = (kc * e_loc[..., None]).transpose(-1, -2) @ vc  # [B, H, n, d, d]
    slc = s_lin.view(B, H, n, C)
    dG = (kc * slc[..., None]).transpose(-1, -2) @ vc  # [B, H, n, d, d]
    dH = kc.transpose(-1, -2) @ vc  # [B, H, n, d, d]
    M, E, Fs = st0.m, st0.E, st0.F
    M_prev, E_prev, F_prev = [], [], []
    for c in range(n):  # n = T/C small steps on [B, H, d, d]; exact rescale at every step
        M_prev.append(M), E_prev.append(E), F_prev.append(Fs)
        M_new = torch.maximum(M, M_loc[:, :, c])
        r_old, r_new = torch.exp(M - M_new), torch.exp(M_loc[:, :, c] - M_new)
        E = E * r_old + dE[:, :, c] * r_new
        Fs = Fs * r_old[..., None, None] + dF[:, :, c] * r_new[..., None, None]
        M = M_new
    M_prev, E_prev, F_prev = (torch.stack(x, 2) for x in (M_prev, E_prev, F_prev))
    G_prev = st0.G[:, :, None] + torch.cumsum(dG, 2) - dG  # exclusive prefix [B, H, n, d, d]
    H_prev = st0.H[:, :, None] + torch.cumsum(dH, 2) - dH
    P_prev = st0.P[..., None] + torch.cumsum(slc.sum(-1), 2) - slc.sum(-1)  # [B, H, n]

    # --- per-row coefficients -------------------------------------------------------------
    m_row = torch.maximum(M_prev[..., None], cm)  # [B, H, n, C] running max of row t
    tril = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    x_in = torch.where(tril & valid.view(n, 1, C), sh.view(B, H, n, 1, C), -torch.inf)
    X = torch.exp(x_in - m_row[..., None])  # [B, H, n, C, C] e^{s_i - m_t}, i <= t
    E_row = E_prev[..., None] * torch.exp(M_prev[..., None] - m_row) + X.sum(-1)  # [B,H,n,C]
    t_row = (st0.t + torch.arange(1, Tp + 1, device=q.device, dtype=q.dtype)).view(n, C)
    P_row = P_prev[..., None] + torch.cumsum(slc, -1)  # [B, H, n, C]
    a, g = ah.view(B, H, n, C), bh.view(B, H, n, C)
    alpha = a / E_row  # σʰ_t / Ê_t
    beta = (g - a) / t_row
    gamma = -(beta * P_row + a) / t_row
    if g0 is not None:
        gamma = gamma + _pad_time(g0.transpose(1, 2), Tp).view(B, H, n, C) / t_row

    # --- intra-chunk: explicit [C, C] weights; inter-chunk: q against the prefix state ----
    W = alpha[..., None] * X + beta[..., None] * slc[..., None, :] + gamma[..., None]
    A = (qc @ kc.transpose(-1, -2)) * W.masked_fill(~tril, 0.0)  # [B, H, n, C, C]
    o = A @ vc  # [B, H, n, C, d]
    a_prev = alpha * torch.exp(M_prev[..., None] - m_row)  # weight of the rescaled prefix F
    state = torch.cat([F_prev, G_prev, H_prev], dim=-2)  # [B, H, n, 3d, d]
    qs = torch.cat([qc * a_prev[..., None], qc * beta[..., None], qc * gamma[..., None]], -1)
    o = o + qs @ state  # [B, H, n, C, d]
    o = o.reshape(B, H, Tp, d)[:, :, :T].transpose(1, 2)  # [B, T, H, d]
    if not output_final_state:
        return o
    final = ZeroSState(st0.t + T, st0.shift, M, E, P_prev[..., -1] + slc[:, :, -1].sum(-1),
                       Fs, G_prev[:, :, -1] + dG[:, :, -1], H_prev[:, :, -1] + dH[:, :, -1])
    return o, final
