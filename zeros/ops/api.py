"""Public ZeroS operators: input checks, dtype policy and backend dispatch.

Dtype policy: the torch backends compute in float32 (float64 inputs stay float64); the Triton
kernels read q, k, v in one compute dtype (the autocast dtype under CUDA autocast: bf16 tiles,
fp32 accumulation) and logits/gates in fp32. Every backend returns the dtype of q.
Unit norm: ZeroS reads q_t·k_i as cos θ, so q and k must be L2-normalised; the op
does not renormalise (that would hide a caller's bug and cost a pass). It checks the norms on
CPU tensors; on CUDA the check would force a host sync per layer, so it runs there only after
`set_unit_norm_check("always")`. `set_unit_norm_check("never")` turns it off everywhere.
"""
from __future__ import annotations

import torch

from .chunk import chunk_zeros
from .naive import naive_zeros, naive_zeros_sm
from .recurrent import recurrent_step, recurrent_zeros
from .select import chunk_size_for, cpu_zeros
from .sm import fast_zeros_sm
from .state import ZeroSState

BACKENDS = ("auto", "naive", "chunk", "recurrent", "triton")
SM_BACKENDS = ("auto", "naive", "fast")
_NORM_CHECK = {"mode": "cpu"}


def set_unit_norm_check(mode: str) -> None:
    """'cpu' (default): check on CPU tensors only; 'always'; 'never'."""
    if mode not in ("cpu", "always", "never"):
        raise ValueError(f"unit-norm check mode must be 'cpu', 'always' or 'never', got {mode!r}")
    _NORM_CHECK["mode"] = mode


def _check_float(name, x):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} has dtype {x.dtype}; ZeroS needs floating-point inputs "
                        "(float32, float64, bfloat16 or float16): cast it with .float()")


def _check_inputs(q, k, v, per_pos: dict, qkv_ndim=4):
    """Exact shapes, float dtypes, one device. No broadcasting is ever applied."""
    for name, x in (("q", q), ("k", k), ("v", v), *per_pos.items()):
        if x is not None:
            _check_float(name, x)
    shape = "(B, T, H, d)" if qkv_ndim == 4 else "(B, H, d)"
    if q.dim() != qkv_ndim:
        raise ValueError(f"q must have shape {shape}, got {tuple(q.shape)}")
    for name, x in (("k", k), ("v", v)):
        if x.shape != q.shape:
            raise ValueError(f"{name} has shape {tuple(x.shape)} but q has {tuple(q.shape)}: "
                             f"q, k and v must all be {shape}")
    want = tuple(q.shape[:-1])
    for name, x in per_pos.items():
        if x is not None and tuple(x.shape) != want:
            raise ValueError(f"{name} has shape {tuple(x.shape)} but must be {want} "
                             f"(one value per {'(batch, position, head)' if qkv_ndim == 4 else '(batch, head)'}); "
                             "it is not broadcast")
    if q.shape[-1] < 1 or (qkv_ndim == 4 and q.shape[1] < 1):
        raise ValueError(f"empty input of shape {tuple(q.shape)}: need T >= 1 and d >= 1")
    devices = {x.device for x in (q, k, v, *per_pos.values()) if x is not None}
    if len(devices) > 1:
        raise ValueError(f"inputs are on several devices {sorted(map(str, devices))}: move them to one")


def _check_unit_norm(q, k):
    mode = _NORM_CHECK["mode"]
    if mode == "never" or (mode == "cpu" and q.is_cuda) or torch.compiler.is_compiling():
        return
    tol = 1e-3 if q.dtype in (torch.float32, torch.float64) else 3e-2
    for name, x in (("q", q), ("k", k)):
        err = (x.detach().float().norm(dim=-1) - 1).abs().max().item()
        if err > tol:
            raise ValueError(f"{name} is not unit-norm (max |‖{name}‖-1| = {err:.3g} > {tol}): "
                             "ZeroS uses q·k as cos θ; L2-normalise q and k (after RoPE) first, "
                             "e.g. torch.nn.functional.normalize(x, dim=-1)")


def _acc_dtype(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _to_acc(*xs):
    """Cast every tensor (None stays None) to the accumulation dtype chosen by the first."""
    acc = _acc_dtype(xs[0])
    return [None if x is None else x.to(acc) for x in xs]


def _kernel_dtype(q, k, v):
    """q, k, v in one dtype for the Triton kernels (their tile products need equal operand
    dtypes): the autocast dtype under CUDA autocast, so bf16-mixed runs the bf16 kernels with
    fp32 accumulation, else the promoted dtype of the three."""
    if torch.is_autocast_enabled("cuda"):
        dt = torch.get_autocast_dtype("cuda")
    else:
        dt = torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype)
    return q.to(dt), k.to(dt), v.to(dt)


def _triton_impl():
    try:
        from kernels.zeros_triton import zeros_attention_triton
    except ImportError as err:
        raise RuntimeError(f"backend='triton' is unavailable ({err}); use backend='chunk' "
                           "(the torch path) or install triton on a CUDA machine") from err
    return zeros_attention_triton


def _resolve_backend(backend, x):
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {BACKENDS}")
    if backend != "auto":
        return backend
    if x.is_cuda:  # Triton for every head dim up to 128 (narrower ones padded), else torch
        try:
            _triton_impl()
        except RuntimeError:
            return "chunk"
        from kernels.zeros_triton import triton_fits
        return "triton" if triton_fits(*x.shape) else "chunk"
    return "cpu_auto"  # select.py: quadratic or chunk (size by d), by (T, d, causal, logits)


def zeros_attention(q, k, v, s, g1, gh, g0=None, *, causal=True, backend="auto",
                    assume_unit_norm=False):
    """ZeroS (docs/spec.md §2/§3). q, k, v: [B, T, H, d] with q, k unit-norm; s, g1, gh, g0: [B, T, H]
    logits and already-activated gates. Returns [B, T, H, d] in q's dtype.
    assume_unit_norm=True skips the unit-norm check (two norm passes and a host sync): for
    callers that have just normalised q and k themselves (the layers)."""
    _check_inputs(q, k, v, {"s": s, "g1": g1, "gh": gh, "g0": g0})
    backend = _resolve_backend(backend, q)
    if not assume_unit_norm:
        _check_unit_norm(q, k)
    if backend == "triton":
        qc, kc, vc = _kernel_dtype(q, k, v)
        return _triton_impl()(qc, kc, vc, s, g1, gh, g0, causal=causal).to(q.dtype)
    args = _to_acc(q, k, v, s, g1, gh, g0)
    fn = {"naive": naive_zeros, "chunk": chunk_zeros, "recurrent": recurrent_zeros,
          "cpu_auto": cpu_zeros}[backend]
    if q.is_cuda and torch.is_autocast_enabled("cuda"):  # the torch paths are fp32 paths:
        with torch.autocast("cuda", enabled=False):  # autocast would mix bf16 into their matmuls
            return fn(*args, causal=causal).to(q.dtype)
    return fn(*args, causal=causal).to(q.dtype)


def zeros_step(state, q_t, k_t, v_t, s_t, g1_t, gh_t, g0_t=None):
    """One decoding step. q_t, k_t, v_t: [B, H, d]; s_t and gates: [B, H]; state: a
    `ZeroSState` or None to start a sequence. Returns (o_t [B, H, d], new state)."""
    _check_inputs(q_t, k_t, v_t, {"s_t": s_t, "g1_t": g1_t, "gh_t": gh_t, "g0_t": g0_t}, 3)
    _check_unit_norm(q_t, k_t)
    if state is not None:
        if not isinstance(state, ZeroSState):
            raise TypeError(f"state must be a ZeroSState or None, got {type(state).__name__}")
        state.check(*q_t.shape)
    if q_t.is_cuda:  # fused decoding kernel when it is available (kernels/step.py)
        try:
            from kernels.common import HEAD_DIMS
            from kernels.zeros_triton import zeros_step_triton
        except ImportError:
            zeros_step_triton = None
        # the step kernel takes the kernel widths only; a d x d step is cheap in torch anyway
        if zeros_step_triton is not None and q_t.shape[-1] in HEAD_DIMS:
            return zeros_step_triton(state, q_t, k_t, v_t, s_t, g1_t, gh_t, g0_t)
    o, state = recurrent_step(state, *_to_acc(q_t, k_t, v_t, s_t, g1_t, gh_t, g0_t))
    return o.to(q_t.dtype), state


def zeros_sm_attention(q, k, v, g1, gh, g0=None, *, causal=True, scale=None, backend="auto"):
    """ZeroS-SM (docs/spec.md §4) on raw q, k: [B, T, H, d]; gates [B, T, H]. Backends: 'naive'
    (explicit T×T weights), 'fast' (SDPA + linear terms, O(T) memory), 'auto' (= fast)."""
    _check_inputs(q, k, v, {"g1": g1, "gh": gh, "g0": g0})
    if backend not in SM_BACKENDS:
        raise ValueError(f"unknown ZeroS-SM backend {backend!r}; choose one of {SM_BACKENDS}")
    if backend == "naive":
        return naive_zeros_sm(*_to_acc(q, k, v, g1, gh, g0), causal=causal, scale=scale).to(q.dtype)
    return fast_zeros_sm(q, k, v, g1, gh, g0, causal=causal, scale=scale).to(q.dtype)


def zeros_prefill(q, k, v, s, g1, gh, g0=None, *, initial_state=None):
    """Causal ZeroS over a block of T tokens that continues `initial_state` (None = a new
    sequence). Returns (o [B, T, H, d], final `ZeroSState`): prompt-then-decode in O(T)."""
    _check_inputs(q, k, v, {"s": s, "g1": g1, "gh": gh, "g0": g0})
    _check_unit_norm(q, k)
    if initial_state is not None:
        if not isinstance(initial_state, ZeroSState):
            raise TypeError(f"initial_state must be a ZeroSState or None, got "
                            f"{type(initial_state).__name__}")
        B, _, H, d = q.shape
        initial_state.check(B, H, d)
    o, state = chunk_zeros(*_to_acc(q, k, v, s, g1, gh, g0), causal=True, initial_state=initial_state,
                           output_final_state=True, chunk_size=chunk_size_for(q.shape[-1]))
    return o.to(q.dtype), state
