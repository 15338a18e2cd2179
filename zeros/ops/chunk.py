"""Chunked ZeroS in plain torch: O(T·C) work per head, activations linear in T (docs/spec.md §2-§3).

Causal: the sequence is cut into chunks of C positions. Inside a chunk the weights
r_{t,i} = α_t e^{s_i - m_t} + β_t (s_i - c) + γ_t (α_t = σʰ_t/Ê_t) form a small [C, C] matrix;
across chunks the prefix enters through chunk-boundary states (E, P, F, G, H of `ZeroSState`).
E and F are always relative to the running max m_t of the row that reads them, never a global
max, so no row underflows (the defect of docs/spec.md §6). The backward is written by hand
(`CHUNK_OP`, a torch.library custom op, library.py; the maths in chunk_bwd.py, the pieces both
share in chunk_blocks.py): it saves only
the inputs and the boundary states and recomputes the [C, C] blocks, so training memory stays
O(T·d).
Encoder (causal=False): one linear pass, zeros/ops/encoder.py.
Public shapes: q, k, v [B, T, H, d]; s, g1, gh, g0 [B, T, H]; inputs already validated and cast.
Inside: head-major chunks, [B, H, n, C, d] and [B, H, n, C].
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .chunk_blocks import (bmm_add, chunk_weights, f_row_scale, key_coefficients, recording,
                           row_coefficients, weighted_copies)
from .chunk_bwd import chunk_backward
from .encoder import encoder_zeros
from .library import DifferentiableOp, none_to_empty
from .state import ZeroSState, empty_state_like

DEFAULT_CHUNK = 64


def chunk_size_for(d: int) -> int:
    """[C, C] blocks matched to the head dim: C = 2d within [16, 64] (small d wants small C:
    the [C, C] buffers are what is paid for; measured in docs/bench.md, used by select.py)."""
    return max(16, min(64, 2 * d))


def scan_states(kc, vc, sc, slc, valid, st0: ZeroSState):
    """Chunk-boundary states. Returns (cm, boundary dict, final ZeroSState pieces).

    cm [B, H, n, C]: max of the logits within the chunk up to t. Boundary states are the prefix
    BEFORE each chunk: M_prev, E_prev, P_prev [B, H, n] and S_prev [B, H, n, 3d, d], the states
    F ; G ; H stacked as rows, so one matmul of [a'q | βq | γq] (3d wide) reads all three;
    M_end [B, H, n] is the running max after each chunk."""
    s_max = sc.detach().masked_fill(~valid, float("-inf"))
    cm = torch.cummax(s_max, dim=-1).values  # [B, H, n, C]
    M_loc = cm[..., -1]  # [B, H, n] chunk max
    w3 = key_coefficients(sc, slc, valid, M_loc)  # [B, H, n, C, 3]
    dE = w3[..., 0].sum(-1)  # [B, H, n]
    dS = weighted_copies(kc, w3).transpose(-1, -2) @ vc  # [B, H, n, 3d, d] increments
    dP = slc.sum(-1)  # [B, H, n]
    n, d = kc.shape[2], kc.shape[-1]
    # E and F are relative to the running max: an exact rescale at every chunk boundary
    M_prev = torch.cummax(torch.cat([st0.m[..., None], M_loc[..., :-1]], -1), -1).values
    M_end = torch.maximum(M_prev, M_loc)  # running max after each chunk
    r_old, r_new = torch.exp(M_prev - M_end), torch.exp(M_loc - M_end)  # <= 1
    s_old, s_new = f_row_scale(r_old, d), f_row_scale(r_new, d)  # [B, H, n, 3d, 1]
    S_prev, E_prev = torch.empty_like(dS), kc.new_empty(M_prev.shape)
    E, S = st0.E, torch.cat([st0.F, st0.G, st0.H], -2)  # [B, H], [B, H, 3d, d]
    grad = recording()
    for c in range(n):  # n = T/C small steps on [B, H, 3d, d]
        E_prev[..., c] = E
        E = E * r_old[..., c] + dE[..., c] * r_new[..., c]
        if grad:  # differentiable (the state-carrying path)
            S_prev[:, :, c] = S
            S = torch.addcmul(S * s_old[:, :, c], dS[:, :, c], s_new[:, :, c])
        else:  # each step written straight into the next slot: no copies, no temporaries
            if c == 0:
                S_prev[:, :, 0] = S
            S = S_prev[:, :, c + 1] if c + 1 < n else torch.empty_like(S)
            torch.mul(S_prev[:, :, c], s_old[:, :, c], out=S).addcmul_(dS[:, :, c], s_new[:, :, c])
    bound = dict(M_prev=M_prev, M_end=M_end, E_prev=E_prev, S_prev=S_prev,
                 P_prev=st0.P[..., None] + torch.cumsum(dP, -1) - dP)
    final = dict(m=M_end[..., -1], E=E, F=S[..., :d, :], G=S[..., d:2 * d, :], H=S[..., 2 * d:, :],
                 P=bound["P_prev"][..., -1] + dP[..., -1])
    return cm, bound, final


def chunk_output(qc, kc, vc, slc, r, b):
    """o [B, H, n, C, d]: intra-chunk explicit weights + q against the boundary state."""
    A, W = qc @ kc.transpose(-1, -2), chunk_weights(r, slc)  # [B, H, n, C, C]
    A = A * W if recording() else A.mul_(W)
    return bmm_add(weighted_copies(qc, r["coef"]) @ b["S_prev"], A, vc)


def _forward(qc, kc, vc, sc, slc, a, g, g0c, valid, st0):
    cm, b, final = scan_states(kc, vc, sc, slc, valid, st0)
    r = row_coefficients(sc, slc, a, g, g0c, valid, cm, b, st0.t)
    return chunk_output(qc, kc, vc, slc, r, b), cm, b, final


_BOUND = ("M_prev", "M_end", "E_prev", "S_prev", "P_prev")  # scan_states' boundary dict


def _chunk_fwd(qc, kc, vc, sc, slc, a, g, g0c, valid, shift):
    """Causal chunked ZeroS from a fresh state: (o, cm, *boundary states). The backward
    (chunk_bwd.py) reuses cm and the boundary states and recomputes the [C, C] blocks, so
    training memory stays O(T·d)."""
    st0 = empty_state_like(shift, qc.shape[-1])  # its shift is (a copy of) `shift`
    o, cm, b, _ = _forward(qc, kc, vc, sc, slc, a, g, g0c, valid, st0)
    return (o, cm, *(b[k] for k in _BOUND))


def _chunk_bwd(do, qc, kc, vc, sc, slc, a, g, g0c, valid, shift, cm, *bound):
    grads = chunk_backward(do, qc, kc, vc, sc, slc, a, g, g0c, valid, cm, dict(zip(_BOUND, bound)))
    return tuple(none_to_empty(x, do) for x in grads)


CHUNK_OP = DifferentiableOp(
    "chunk", _chunk_fwd, _chunk_bwd, _chunk_fwd,  # pure torch: the fwd itself is the fake
    "(Tensor qc, Tensor kc, Tensor vc, Tensor sc, Tensor slc, Tensor a, Tensor g, Tensor? g0c, "
    "Tensor valid, Tensor shift) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)", 8)


def chunk_layout(q, k, v, s, g1, gh, g0, chunk_size):
    """[B, T, H, ...] inputs -> the op's head-major chunks [B, H, n, C, ...] (zero-padded at the
    end): (qc, kc, vc, sc, a, g, g0c, valid [n, C] bool)."""
    B, T, H, d = q.shape
    n = -(-T // chunk_size)
    extra = n * chunk_size - T

    def chunked(x):
        x = x.transpose(1, 2)
        x = F.pad(x, [0, 0] * (x.dim() - 3) + [0, extra]) if extra else x
        # contiguous: batched matmuls over (B, H, n) would otherwise copy every block
        return x.reshape(B, H, n, chunk_size, *x.shape[3:]).contiguous()

    qc, kc, vc, sc, a, g = (chunked(x) for x in (q, k, v, s, gh, g1))
    g0c = None if g0 is None else chunked(g0)
    valid = (torch.arange(n * chunk_size, device=q.device) < T).view(n, chunk_size)
    return qc, kc, vc, sc, a, g, g0c, valid


def unchunk(x, T):
    """[B, H, n, C, ...] -> [B, T, H, ...]: the inverse of chunk_layout (padding dropped)."""
    B, H, n, C = x.shape[:4]
    return x.reshape(B, H, n * C, *x.shape[4:])[:, :, :T].transpose(1, 2)


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
    qc, kc, vc, sc, a, g, g0c, valid = chunk_layout(q, k, v, s, g1, gh, g0, chunk_size)
    st0 = initial_state if initial_state is not None else empty_state_like(sc[:, :, 0, 0], d)
    slc = torch.where(valid, sc - st0.shift[..., None, None], 0.0)  # s_i - c, 0 on padding
    if initial_state is None and not output_final_state:
        o = CHUNK_OP(qc, kc, vc, sc, slc, a, g, g0c, valid, st0.shift)[0]
        final = None
    else:  # carrying a state: plain autograd through the same forward code
        o, _, _, final = _forward(qc, kc, vc, sc, slc, a, g, g0c, valid, st0)
    o = unchunk(o, T)  # [B, T, H, d]
    if not output_final_state:
        return o
    return o, ZeroSState(st0.t + T, st0.shift, **final)
