"""CPU path selection for `backend="auto"`: by (T, d, causal) and, for the quadratic path,
by the logits' spread (its exactness condition, quadratic.py). Every path is the same maths
(tests/ops compare each with the naive weights); only the cost differs:
  quadratic  masked [T, T] blocks per head, no d x d states: cost ~ T²·d per head.
  chunk      [C, C] blocks + [3d, d] boundary states: cost ~ T·(C·d + 3d²) per head, plus a
             scan over T/C chunks. Small d wants small C: the [C, C] buffers are what is
             paid for (memory traffic), the d x d states are tiny.
Thresholds measured on 2 CPU cores, fp32, fwd+bwd, at the paper's shapes (docs/bench.md):
T=11 d=4 and T=64 d=128 are 3-6x faster quadratic; T=128 d=8 is 1.5x faster as chunks of 16;
T>=512 d=64 is fastest as chunks of 64.
Shapes: q, k, v [B, T, H, d]; s, g1, gh, g0 [B, T, H]; inputs validated and cast.
"""
from __future__ import annotations

from .chunk import chunk_size_for, chunk_zeros
from .quadratic import quadratic_zeros

QUAD_MIN_T = 32  # below this every d is faster quadratic


def use_quadratic(T: int, d: int) -> bool:
    """Quadratic while T²·d (its cost) stays below the chunk path's T·3d² states + overhead."""
    return T <= max(QUAD_MIN_T, 2 * d)


def cpu_zeros(q, k, v, s, g1, gh, g0=None, causal=True):
    """`backend="auto"` on CPU. Returns o [B, T, H, d]."""
    T, d = q.shape[1], q.shape[-1]
    if not causal:
        return chunk_zeros(q, k, v, s, g1, gh, g0, causal=False)  # one linear pass
    if use_quadratic(T, d):  # the op itself takes the chunk path where quadratic_ok(s) fails
        return quadratic_zeros(q, k, v, s, g1, gh, g0)
    return chunk_zeros(q, k, v, s, g1, gh, g0, causal=True, chunk_size=chunk_size_for(d))
