"""Public entry points of the ZeroS Triton kernels.

`zeros_attention_triton(q, k, v, s, g1, gh, g0=None, causal=True)` is what
`zeros.ops.zeros_attention(..., backend="triton")` calls: q, k, v [B, T, H, d] (q, k unit norm),
s, g1, gh, g0 [B, T, H]. Returns [B, T, H, d] in q's dtype, differentiable w.r.t. every input
through `TRITON_OP` (zeros/ops/library.py): with compiled kernels a torch.library.triton_op
whose launches go through wrap_triton (kernels/common.py `launch`), so AOTAutograd decomposes
it and Inductor sees every kernel; with interpreted ones (TRITON_INTERPRET=1, CPU) an opaque
custom op with a fake impl. Autograd is registered either way; the backward is hand-written
Triton (kernels/chunk_bwd.py, kernels/encoder.py). q, k, v are read in their own dtype when it
is bf16/fp16 (fp32 otherwise, so fp64 inputs are computed in fp32); logits and gates are fp32; all sums accumulate in fp32.
`zeros_step_triton` (kernels/step.py) is the fused decoding step.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from zeros.ops.library import DifferentiableOp

from .chunk_bwd import chunk_bwd
from .chunk_fwd import chunk_fwd, chunk_states
from .common import (DEFAULT_CHUNK, INTERPRET, check_device, check_head_dim, compute_dtype,
                     kernel_width)
from .encoder import encoder_bwd, encoder_fwd
from .step import zeros_step_triton

__all__ = ["TRITON_OP", "triton_fits", "zeros_attention_triton", "zeros_step_triton"]


def _scalar(x):
    return None if x is None else x.detach().to(torch.float32).contiguous()


N_AUX = 6  # the op's fixed output count after o (unused slots are empty tensors)


def _triton_fwd(q, k, v, s, g1, gh, g0, causal, chunk_size, recompute_states):
    """o and what the backward reads: causal (Z, P) + the chunk-boundary states (F, G, H,
    scalars) only when `recompute_states` is False (3·d²/C fp32 numbers per token and head:
    four times a bf16 q, k, v at d = C = 64); encoder (S, wk, cq, E, P). By default the
    backward recomputes the states with one extra pass of the state kernel."""
    dt = compute_dtype(q)
    qc, kc, vc = (x.detach().to(dt).contiguous() for x in (q, k, v))  # [B, T, H, d]
    sc, g1c, ghc, g0c = (_scalar(x) for x in (s, g1, gh, g0))  # [B, T, H] fp32
    if causal:
        o, states, rows = chunk_fwd(qc, kc, vc, sc, ghc, g1c, g0c, chunk_size)
        aux = (*rows, *(() if recompute_states else states))
    else:
        o, aux = encoder_fwd(qc, kc, vc, sc, ghc, g1c, g0c, chunk_size)
    aux = [x.contiguous() for x in aux]
    return (o.to(q.dtype), *aux, *(q.new_empty(0, dtype=torch.float32)
                                   for _ in range(N_AUX - len(aux))))


def _triton_fake(q, k, v, s, g1, gh, g0, causal, chunk_size, recompute_states):
    B, T, H, D = q.shape
    f32 = lambda *shape: q.new_empty(shape, dtype=torch.float32)  # noqa: E731
    NT = -(-T // chunk_size)
    if causal:
        aux = [f32(B * H, T), f32(B * H, T)]
        if not recompute_states:
            aux += [f32(B * H, NT, D, D) for _ in range(3)] + [f32(B * H, NT, 3)]
    else:
        aux = [f32(B * H, 3, D, D), f32(3, B * H, T), f32(3, B * H, T), f32(B, H, 1),
               f32(B, H, 1)]
    return (q.new_empty(q.shape), *aux, *(f32(0) for _ in range(N_AUX - len(aux))))


def _triton_bwd(do, q, k, v, s, g1, gh, g0, causal, chunk_size, recompute_states, *aux):
    dt = compute_dtype(q)
    qc, kc, vc = (x.detach().to(dt).contiguous() for x in (q, k, v))
    sc, g1c, ghc, g0c = (_scalar(x) for x in (s, g1, gh, g0))
    do = do.to(dt).contiguous()  # [B, T, H, d]
    if causal:
        rows, states = aux[:2], [x for x in aux[2:] if x.numel()]
        if not states:
            states = chunk_states(kc, vc, sc, chunk_size)
        grads = chunk_bwd(qc, kc, vc, sc, ghc, g1c, g0c, do, states, rows, chunk_size)
    else:
        grads = encoder_bwd(qc, kc, vc, sc, ghc, g1c, g0c, do, aux[:5], chunk_size)
    return tuple(do.new_empty(0) if x is None else x.to(t.dtype).contiguous()
                 for x, t in zip(grads, (q, k, v, s, g1, gh, g0)))


TRITON_OP = DifferentiableOp(
    "triton", _triton_fwd, _triton_bwd, _triton_fake,
    "(Tensor q, Tensor k, Tensor v, Tensor s, Tensor g1, Tensor gh, Tensor? g0, bool causal, "
    "int chunk_size, bool recompute_states) -> (Tensor" + ", Tensor" * N_AUX + ")", 7,
    triton=not INTERPRET)  # compiled kernels: a triton_op that Inductor sees into


def triton_fits(B: int, T: int, H: int, d: int) -> bool:
    """Whether `zeros_attention_triton` takes [B, T, H, d] (after padding d to the kernel width);
    `backend="auto"` sends the rest to the torch chunk path."""
    D = kernel_width(d)
    return D is not None and T * H * D < 2 ** 31


def zeros_attention_triton(q, k, v, s, g1, gh, g0=None, causal=True, chunk_size=DEFAULT_CHUNK,
                           recompute_states=True):
    """ZeroS (docs/spec.md §2 causal / §3 encoder) with Triton kernels. Shapes: q, k, v [B, T, H, d] with
    d <= 128; s, g1, gh, g0 [B, T, H]. A head dim between the kernels' widths (16, 32, 64, 128)
    is zero-padded to the next one: q·k and the unit norm are unchanged and the padded output
    columns are zero, so it is exact (at d = 4..8 the kernels are latency-bound, the padding
    costs little; docs/kernels.md). `chunk_size` (a power of two >= 16) is the block of rows
    whose C×C weights are built explicitly. `recompute_states=False` keeps the chunk-boundary
    states from the forward for the backward (less time, more memory).
    Returns [B, T, H, d] in q's dtype."""
    check_device(q)
    B, T, H, d = q.shape
    D = kernel_width(d)
    if D is None:
        check_head_dim(d)  # raises: names backend='chunk'
    if T * H * D >= 2 ** 31:
        raise ValueError(f"T·H·d = {T * H * D} >= 2^31 overflows the kernels' int32 row offsets: "
                         "split the sequence (zeros_prefill carries the state) or use "
                         "backend='chunk'")
    if chunk_size < 16 or chunk_size & (chunk_size - 1):
        raise ValueError(f"chunk_size must be a power of two >= 16, got {chunk_size}")
    if D != d:
        q, k, v = (F.pad(x, (0, D - d)) for x in (q, k, v))
    o = TRITON_OP(q, k, v, s, g1, gh, g0, bool(causal), int(chunk_size),
                  bool(recompute_states))[0]
    return o if D == d else o[..., :d]
