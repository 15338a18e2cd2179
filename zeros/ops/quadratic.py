"""Quadratic (masked [T, T]) causal ZeroS for short sequences: the rank-3 form of the weights.

For row t the weights are r_{t,i} = α_t e^{s_i - m_t} + β_t s̃_i + γ_t (α_t = σʰ_t/Ê_t,
Ê_t = Σ_{i≤t} e^{s_i - m_t}, s̃ = s - c, see chunk.py). The first term only enters through the
ratio e^{s_i - m_t}/Ê_t, which does not depend on the reference max, so with ONE reference
M = max_i s_i per head and e_i = e^{s_i - M}, S_t = Σ_{i≤t} e_i:
    o_t = (σʰ_t/S_t) Y⁰_t + β_t Y¹_t + γ_t Y²_t,   Y = tril(Q Kᵀ) [e v | s̃ v | v]   ([T, 3d])
i.e. one masked [T, T] product and one [T, T] x [T, 3d] matmul: no [T, T] exponentials, no
d x d states. Exactness: S_t >= e_1 = e^{s_1 - M}, so every row's largest term stays a normal
float as long as M - s_1 <= MAX_SPREAD (e^{-60} ~ 1e-26, eleven decades above fp32's smallest
normal). `quadratic_ok` checks that per call; where it fails (logits spread over [-10, 120]),
the caller falls back to the chunk path, which carries every row relative to its running max.
The backward is written by hand (recomputes tril(QKᵀ), saves Y): the same maths as the
forward above, step by step in `_torch_bwd`; both
are one torch.library custom op (`QUAD_OP`, library.py).
For head dims up to NATIVE_MAX_D the same forward and backward run as plain C loops per head
(csrc/quadratic.c via native.py, compiled on first use; the torch path where no compiler is
found): at T = 11, d = 4 each of the torch path's nine batched matmuls costs ~1 us per head,
the loops ~3 us per head for all of it (4x faster fwd+bwd, docs/bench.md); from d = 16 on the
batched matmuls win.
Public shapes: q, k, v [B, T, H, d]; s, g1, gh, g0 [B, T, H]; inputs validated and cast.
Inside: heads flattened, [B·H, T, ·].
"""
from __future__ import annotations

import torch

from . import native
from .library import DifferentiableOp, none_to_empty

MAX_SPREAD = 60.0
SAVE_QK_MAX = 1 << 22  # floats of tril(QKᵀ) saved for the backward (16 MiB in fp32)
NATIVE_MAX_D = 8  # measured: d = 4 4x faster native, d = 16 even, d >= 32 2-3x slower


def _native(q) -> bool:
    return q.shape[-1] <= NATIVE_MAX_D and native.supported(q)


def _heads(x):
    """[B, T, H, ...] -> [B·H, T, ...] contiguous (batched matmuls read it without copies)."""
    B, T, H = x.shape[:3]
    return x.transpose(1, 2).reshape(B * H, T, *x.shape[3:])


def quadratic_ok(s) -> bool:
    """True when one reference max per head keeps every row exact (s [B, T, H]): M - s_1 is
    the farthest any row's running max lies below the reference."""
    spread = (s.detach().amax(1) - s.detach()[:, 0]).max()
    return bool(spread <= MAX_SPREAD)


def _row_scalars(s, a, g, g0):
    """e [N, T], s̃ [N, T], the row coefficients (σʰ/S, β, γ) [N, T, 3] and the pieces the
    backward needs."""
    T = s.shape[1]
    st = s - s[:, :1]  # s̃: shifted by the first logit (G-like sums stay small)
    e = torch.exp(s - s.amax(1, keepdim=True))  # <= 1, >= e^{-MAX_SPREAD} at i = 1
    S = torch.cumsum(e, 1)
    P = torch.cumsum(st, 1)
    t = torch.arange(1, T + 1, device=s.device, dtype=s.dtype)
    c1 = a / S
    beta = (g - a) / t
    gamma = -(beta * P + a) / t
    if g0 is not None:
        gamma = gamma + g0 / t
    return e, st, torch.stack([c1, beta, gamma], -1), dict(S=S, P=P, t=t, c1=c1, beta=beta)


def _group(N, T):
    """Heads per block: [G, T, T] buffers of ~2^20 floats stay in cache and are reused."""
    return max(1, min(N, (1 << 20) // (T * T)))


def _weights(coef, R, mask, out):
    """W_ti = c1_t e_i + β_t s̃_i + γ_t for i <= t, else 0, into `out` [G, T, T]: two addcmuls
    (a K=3 batched matmul is several times slower on CPU) and a multiply by the float causal
    mask (batched tril_ is ~8x slower than that multiply at T = 11)."""
    torch.mul(coef[..., 0, None], R[:, None, 0], out=out)
    out.addcmul_(coef[..., 1, None], R[:, None, 1])
    return out.add_(coef[..., 2, None]).mul_(mask)


def _mask(T, like):
    return torch.ones(T, T, dtype=like.dtype, device=like.device).tril_()


def _save_qk(N, T, q) -> bool:
    """tril(QKᵀ) of every head kept for the backward when small (MQAR: 1 MiB): one batched
    matmul fewer there (~10% of the op at T = 64, d = 128); recomputed otherwise."""
    return not _native(q) and N * T * T <= SAVE_QK_MAX


def _quad_fwd(q, k, v, s, a, g, g0):
    """(o [N, T, d], tril(QKᵀ) [N, T, T] or [0]). W_ti = [c1_t, β_t, γ_t] · [e_i, s̃_i, 1] (a
    rank-3 product), A = tril(QKᵀ ⊙ W), o = A v. Heads in blocks of `_group` with reused
    [G, T, T] buffers. Logits spread beyond MAX_SPREAD: the chunk path (`_via_chunks`)."""
    N, T, d = q.shape
    QK = q.new_empty(N, T, T) if _save_qk(N, T, q) else q.new_empty(0)
    if not quadratic_ok(s):  # data-dependent, so decided here, inside the op
        o = _via_chunks(q, k, v, s, a, g, g0)
        return o, QK.zero_(), _path(q, 1)  # QK unused (defined values)
    if _native(q):
        return native.quad_forward(q, k, v, s, a, g, g0), QK, _path(q, 0)
    e, st, coef, _ = _row_scalars(s, a, g, g0)
    R = torch.stack([e, st, torch.ones_like(e)], 1)  # [N, 3, T]
    o = q.new_empty(N, T, d)
    G = _group(N, T)
    mask = _mask(T, q)
    A, W = q.new_empty(G, T, T), q.new_empty(G, T, T)
    for i in range(0, N, G):
        j = min(N, i + G)
        Ab, Wb = (A if QK.dim() == 1 else QK[i:])[: j - i], W[: j - i]
        torch.bmm(q[i:j], k[i:j].transpose(1, 2), out=Ab).mul_(mask)
        _weights(coef[i:j], R[i:j], mask, Wb)  # masked W: A = QKᵀ ⊙ W is lower triangular
        torch.bmm(Wb.mul_(Ab), v[i:j], out=o[i:j])
    return o, QK, _path(q, 0)


def _path(q, via_chunks):
    """[1] int8: 1 where the forward took the chunk path (the backward follows it)."""
    return torch.full((1,), via_chunks, dtype=torch.int8, device=q.device)


def _quad_fake(q, k, v, s, a, g, g0):
    N, T, d = q.shape
    QK = q.new_empty(N, T, T) if _save_qk(N, T, q) else q.new_empty(0)
    return q.new_empty(N, T, d), QK, q.new_empty(1, dtype=torch.int8)


def _via_chunks(q, k, v, s, a, g, g0, do=None):
    """The chunk path on [N, T, ·] heads (as B = N, H = 1): o, or with `do` the 7 gradients."""
    from .chunk import CHUNK_OP, chunk_layout, chunk_size_for, unchunk
    T = q.shape[1]
    x4 = [None if x is None else x[:, :, None] for x in (q, k, v, s, g, a, g0)]
    qc, kc, vc, sc, ac, gc, g0c, valid = chunk_layout(*x4, min(T, chunk_size_for(q.shape[-1])))
    shift = sc[:, :, 0, 0].clone()
    slc = torch.where(valid, sc - shift[..., None, None], 0.0)
    args = (qc, kc, vc, sc, slc, ac, gc, g0c, valid, shift)
    outs = CHUNK_OP.fwd(*args)
    if do is None:
        return unchunk(outs[0], T)[:, :, 0]
    dq, dk, dv, dsc, dslc, da, dg, dg0 = CHUNK_OP.bwd(_chunked_like(do, outs[0]), *args, *outs[1:])
    dsc = dsc + torch.where(valid, dslc, 0.0)  # s̃ = s - c on valid positions (c a constant)
    out = [unchunk(x, T)[:, :, 0] for x in (dq, dk, dv, dsc, da, dg)]
    out.append(unchunk(dg0, T)[:, :, 0] if g0 is not None else None)
    return tuple(out)


def _chunked_like(do, o):
    """do [N, T, d] in the layout of the chunk op's o [N, 1, n, C, d] (zero-padded)."""
    N, _, n, C, d = o.shape
    return torch.nn.functional.pad(do, (0, 0, 0, n * C - do.shape[1])).view(N, 1, n, C, d)


def _quad_bwd(do, q, k, v, s, a, g, g0, QK, path):
    """The 7 gradients of `_quad_fwd` (an empty tensor for g0 = None)."""
    if path.item():
        grads = _via_chunks(q, k, v, s, a, g, g0, do)
    elif _native(q):
        grads = native.quad_backward(q, k, v, s, a, g, g0, do)
    else:
        grads = _torch_bwd(do, q, k, v, s, a, g, g0, None if QK.dim() == 1 else QK)
    return tuple(none_to_empty(x, do) for x in grads)


def _torch_bwd(do, q, k, v, s, a, g, g0, QK):
    N, T, d = q.shape
    e, st, coef, r = _row_scalars(s, a, g, g0)
    R = torch.stack([e, st, torch.ones_like(e)], 1)  # [N, 3, T]
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    dcoef, dR = coef.new_empty(N, T, 3), R.new_empty(N, 3, T)
    G = _group(N, T)
    A, W, D = (q.new_empty(G, T, T) for _ in range(3))
    mask = _mask(T, q)
    for i in range(0, N, G):
        j = min(N, i + G)
        Ab, Wb, Db = A[: j - i], W[: j - i], D[: j - i]
        if QK is None:
            QKb = torch.bmm(q[i:j], k[i:j].transpose(1, 2), out=Ab).mul_(mask)  # tril(QKᵀ)
        else:
            QKb = QK[i:j]
        _weights(coef[i:j], R[i:j], mask, Wb)  # masked
        torch.mul(QKb, Wb, out=Db)  # the forward's A
        torch.bmm(Db.transpose(1, 2), do[i:j], out=dv[i:j])
        torch.bmm(do[i:j], v[i:j].transpose(1, 2), out=Db)  # dA (both factors below masked)
        torch.mul(QKb, Db, out=Ab)  # dW = dA ⊙ QKᵀ (Ab is QKb itself when recomputed)
        Db.mul_(Wb)  # d(QKᵀ) = dA ⊙ W
        torch.bmm(Db, k[i:j], out=dq[i:j])
        torch.bmm(Db.transpose(1, 2), q[i:j], out=dk[i:j])
        torch.bmm(Ab, R[i:j].transpose(1, 2), out=dcoef[i:j])  # Σ_i dW_ti [e_i, s̃_i, 1]
        torch.bmm(coef[i:j].transpose(1, 2), Ab, out=dR[i:j])  # Σ_t [c1_t, β_t, γ_t] dW_ti
    de, dst = dR[:, 0], dR[:, 1]
    # row scalars: c1 = σʰ/S, β = (σ¹-σʰ)/t, γ = -(βP + σʰ)/t + σ⁰/t
    dc1, dbeta, dgamma = dcoef.unbind(-1)
    t, S, P, c1, beta = r["t"], r["S"], r["P"], r["c1"], r["beta"]
    dS = -dc1 * c1 / S
    dbeta = dbeta - dgamma * P / t
    dP = -dgamma * beta / t
    da = dc1 / S - dbeta / t - dgamma / t
    dg = dbeta / t
    dg0 = None if g0 is None else dgamma / t
    # S_t = Σ_{i≤t} e_i and P_t = Σ_{i≤t} s̃_i: suffix sums back to position i;
    # e_i = e^{s_i - M} (M a constant: the output does not depend on it), s̃ = s - c likewise
    ds = (de + _suffix_incl(dS)) * e + dst + _suffix_incl(dP)
    return dq, dk, dv, ds, da, dg, dg0


QUAD_OP = DifferentiableOp(
    "quadratic", _quad_fwd, _quad_bwd, _quad_fake,
    "(Tensor q, Tensor k, Tensor v, Tensor s, Tensor a, Tensor g, Tensor? g0) "
    "-> (Tensor, Tensor, Tensor)",
    7)


def _suffix_incl(x):
    """Σ_{t >= i} x_t along dim 1. A flipped cumsum, not total - prefix: early rows' terms can
    be e^{60} times the late ones' (1/S_t), and the difference would cancel them away."""
    return torch.flip(torch.cumsum(torch.flip(x, [1]), 1), [1])


def quadratic_zeros(q, k, v, s, g1, gh, g0=None):
    """Causal ZeroS through one masked [T, T] block per head (the chunk path inside the op where
    `quadratic_ok(s)` fails).
    Returns o [B, T, H, d]."""
    B, T, H, d = q.shape
    args = [_heads(x) for x in (q, k, v, s, gh, g1)] + [None if g0 is None else _heads(g0)]
    o = QUAD_OP(*args)[0]  # [B·H, T, d]
    return o.view(B, H, T, d).transpose(1, 2)
