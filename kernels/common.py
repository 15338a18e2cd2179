"""Helpers shared by the ZeroS Triton kernels: layouts, block sizes, precision, row coefficients.

Layouts (every kernel): q, k, v, do are [B, T, H, D] contiguous, so row t of head h in batch b
starts at element ((b·T + t)·H + h)·D and consecutive rows are H·D apart. Per-position scalars
(s, the gates) are [B, T, H] float32 contiguous. Kernel-side row statistics (Z, P, Du, ...) are
[B·H, T] float32 and chunk-boundary states are [B·H, NT, D, D] float32.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

# Triton reads TRITON_INTERPRET when a kernel is decorated; this module is imported first by every
# kernel module, so this flag is what the kernels were built with.
INTERPRET = triton.knobs.runtime.interpret if hasattr(triton, "knobs") else \
    os.environ.get("TRITON_INTERPRET", "0") == "1"

HEAD_DIMS = (16, 32, 64, 128)
DEFAULT_CHUNK = 64


def launch(kernel, like: torch.Tensor):
    """`kernel` for `kernel[grid](...)`: wrapped by torch.library.wrap_triton when `like` is a
    traced tensor (a FakeTensor / FunctionalTensor: dynamo or AOTAutograd tracing the
    triton_op, which then records the launch as a graph node Inductor compiles), the kernel itself
    on real tensors (eager, or the op's real impl: no higher-order-op dispatch, ~1 ms per launch).
    wrap_triton hands an interpreted kernel (TRITON_INTERPRET=1) back unchanged."""
    if type(like) is torch.Tensor or not hasattr(torch.library, "wrap_triton"):
        return kernel
    return torch.library.wrap_triton(kernel)


def check_device(x: torch.Tensor) -> None:
    """Triton kernels need CUDA tensors, or CPU tensors under the Triton interpreter."""
    if x.is_cuda or (INTERPRET and x.device.type == "cpu"):
        return
    raise RuntimeError(
        f"the ZeroS Triton kernels got {x.device.type} tensors: they run on CUDA, or on CPU only "
        "when TRITON_INTERPRET=1 is set before `kernels` is imported; on CPU use "
        "backend='chunk' instead")


def check_head_dim(d: int) -> None:
    if d not in HEAD_DIMS:
        raise ValueError(f"the ZeroS Triton kernels support head dims {HEAD_DIMS} (narrower "
                         f"ones are padded by zeros_attention_triton), got d={d}: use "
                         "backend='chunk' for d > 128")


def kernel_width(d: int) -> int | None:
    """The narrowest kernel head dim >= d (d is zero-padded to it), None above 128."""
    return next((w for w in HEAD_DIMS if w >= d), None)


def block_v(d: int) -> int:
    """Width of the value block one program owns (the grid tiles the value dim)."""
    return min(d, 64)


def num_warps(d: int, heavy: bool = True) -> int:
    """Warps per program of the chunk kernels. Chosen from ptxas register/spill reports for sm_90
    (kernels/compile_check.py), never timed. `heavy`: the parallel per-chunk kernels, which hold
    several C×C fp32 tiles and spill with four warps at every d; scans need eight from d = 64."""
    return 8 if heavy or d >= 64 else 4


def dot_precision(dtype: torch.dtype) -> str:
    """Precision of fp32 tile products. 16-bit inputs: products of two input-dtype tiles run on
    tensor cores in that dtype anyway; fp32 tiles (the d×d states) use 'tf32'. fp32 inputs
    follow torch's matmul setting: 'ieee' (exact, slow FMA path) under the default "highest",
    'tf32' after torch.set_float32_matmul_precision("high") or ("medium")."""
    if dtype != torch.float32:
        return "tf32"
    return "ieee" if torch.get_float32_matmul_precision() == "highest" else "tf32"


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """Dtype the kernels load q, k, v in: 16-bit stays 16-bit, everything else runs in fp32."""
    return x.dtype if x.dtype in (torch.bfloat16, torch.float16) else torch.float32


# Reductions through tl.reduce with tl.sum's / tl.max's own combine functions, instead of tl.sum
# and tl.max: those are @jit functions of triton.language, and if triton was imported before
# TRITON_INTERPRET=1 was set (another test imported it first) the interpreter cannot call them,
# while it maps these combine functions to numpy by identity. Compiled code is the same.
# (triton's private names, checked: triton 3.8.0; guarded by test_framework_private_apis.py)
_SUM_COMBINE = tl.standard._sum_combine
_MAX_COMBINE = tl.standard._elementwise_max


@triton.jit
def rsum(x, axis: tl.constexpr):
    return tl.reduce(x, axis, _SUM_COMBINE)


@triton.jit
def rmax(x, axis: tl.constexpr):
    return tl.reduce(x, axis, _MAX_COMBINE)


@triton.jit
def head_offsets(i_bh, T, H: tl.constexpr, D: tl.constexpr):
    """Where sequence (b, h) = divmod(i_bh, H) starts: element (b, 0, h, 0) of a [B, T, H, D]
    tensor and element (b, 0, h) of a [B, T, H] one (position t adds t·H·D, resp. t·H)."""
    i_b, i_h = (i_bh // H).to(tl.int64), i_bh % H
    return (i_b * T * H + i_h) * D, i_b * T * H + i_h


@triton.jit
def state_offsets(i_bh, i_c, NT, i_v, D: tl.constexpr, BV: tl.constexpr):
    """[D, BV] block (value block i_v) of chunk i_c's d×d state in a [B·H, NT, D, D] tensor."""
    o_k = tl.arange(0, D)
    o_v = i_v * BV + tl.arange(0, BV)
    return i_bh.to(tl.int64) * NT * D * D + i_c * D * D + o_k[:, None] * D + o_v[None, :]


@triton.jit
def row_coefs(b_a, b_g, b_g0, b_P, b_n, HAS_G0: tl.constexpr):
    """β_t = (σ¹_t − σʰ_t)/n_t and γ_t = −(β_t P_t + σʰ_t)/n_t (+ σ⁰_t/n_t), docs/spec.md §2."""
    b_beta = (b_g - b_a) / b_n
    b_gamma = -(b_beta * b_P + b_a) / b_n
    if HAS_G0:
        b_gamma += b_g0 / b_n
    return b_beta, b_gamma
