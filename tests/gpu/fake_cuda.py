"""Run models on fake CUDA tensors without a GPU, and record every Triton launch they would make.

`fake_cuda()` is a context in which:
- tensors are torch FakeTensors (shapes, dtypes and strides, no data); the model and batch are
  put on device "cuda", so every `x.is_cuda` branch of zeros/ and fla takes its GPU path;
- a Triton launch `kernel[grid](...)` is recorded (kernel, argument dtypes, constexprs, warps)
  instead of run: Autotuner picks its first config (one config per kernel is compiled later by
  compile_recorded.py) and Heuristics compute their values as usual;
- the kernel entry Functions (`ENTRY_FUNCTIONS`: the ZeroS Triton Function, fla's chunk
  Functions) assert the dtypes, layouts and head dims their kernels accept.

Backward: torch's autograd engine cannot run on fake CUDA tensors without a CUDA driver (it
asks the driver for the device's primary context), so `fake_backward` walks the autograd graph
itself, the way the engine does: topological order, gradients summed per input, cast to the
dtype the input was recorded with, None gradients materialised as zeros for custom Functions.
"""
from __future__ import annotations

import contextlib
import importlib
import inspect
from collections import defaultdict

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

TRITON_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32",
                 torch.float64: "fp64", torch.int8: "i8", torch.int16: "i16", torch.int32: "i32",
                 torch.int64: "i64", torch.uint8: "u8", torch.bool: "i1"}
LOW = (torch.bfloat16, torch.float16)
# (module, class, head dims the kernels accept, fp32 allowed). fla's chunk kernels tile the key
# and value dims with tl.dot, which needs every tile dim >= 16 on NVIDIA GPUs (their forward pads
# K to a 16-wide block, the backward does not); wider dims are split into blocks.
FLA_DIMS = range(16, 1 << 16)
ENTRY_FUNCTIONS = [
    ("kernels.zeros_triton", "TRITON_OP", (16, 32, 64, 128), True),  # a DifferentiableOp
    ("fla.ops.gla.chunk", "ChunkGLAFunction", FLA_DIMS, True),
    ("fla.ops.simple_gla.chunk", "ChunkSimpleGLAFunction", FLA_DIMS, True),
    ("fla.ops.delta_rule.chunk", "ChunkDeltaRuleFunction", FLA_DIMS, False),
    ("fla.ops.rwkv6.chunk", "ChunkRWKV6Function", FLA_DIMS, True),
]


class KernelEntryError(AssertionError):
    """A kernel entry got inputs its kernels do not accept."""


class Recorder:
    """Collects launches and entry calls of one fake run."""

    def __init__(self):
        self.launches: list[dict] = []
        self.entries: list[dict] = []
        self.label = ""


_REC: list[Recorder] = []


def _json(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def _arg_type(v):
    if isinstance(v, torch.Tensor):
        return "*" + TRITON_DTYPES.get(v.dtype, str(v.dtype))
    if isinstance(v, bool):
        return "i1"
    if isinstance(v, int):
        return "i32" if -2 ** 31 <= v < 2 ** 31 else "i64"
    if isinstance(v, float):
        return "fp32"
    return f"unsupported:{type(v).__name__}"


def _record_launch(self, *args, grid=None, warmup=False, **kwargs):
    fn = self.fn
    params = inspect.signature(fn).parameters
    bound = dict(zip(params, args))
    opts = {}
    for k, v in kwargs.items():
        (bound if k in params else opts)[k] = v
    for n, p in params.items():
        if n not in bound and p.default is not inspect.Parameter.empty:
            bound[n] = p.default
    sig, consts = {}, {}
    for n, p in params.items():
        v = bound.get(n)
        if "constexpr" in str(p.annotation) or v is None:
            consts[n] = _json(v)
        else:
            sig[n] = _arg_type(v)
    rec = dict(kernel=f"{fn.__module__}:{fn.__name__}", sig=sig, consts=consts,
               num_warps=int(opts.get("num_warps", 4)), num_stages=int(opts.get("num_stages", 3)))
    if _REC:
        _REC[-1].launches.append(dict(rec, label=_REC[-1].label))
    return None


def _autotune_first(self, *args, **kwargs):
    """Autotuner.run with its first (pruned) config: benchmarking needs a GPU."""
    configs = self.configs
    prune = getattr(self, "early_config_prune", None)
    if prune is not None and len(configs) > 1:
        with contextlib.suppress(Exception):
            configs = prune(configs, dict(zip(self.arg_names, args)), **kwargs) or configs
    return self.fn.run(*args, **kwargs, **configs[0].all_kwargs())


def _check_entry(name, dims, fp32_ok, args):
    """The dtype/layout/dim contract of a kernel entry; raises KernelEntryError (one line)."""
    t4 = [a for a in args if isinstance(a, torch.Tensor) and a.dim() == 4]
    if len(t4) < 3:
        return
    q, k, v = t4[:3]
    where = f"{name}(q {tuple(q.shape)} {q.dtype}, k {k.dtype}, v {tuple(v.shape)} {v.dtype})"
    if not (q.dtype == k.dtype == v.dtype):
        raise KernelEntryError(f"{where}: q, k, v must share one dtype (tl.dot needs equal operand "
                               "dtypes): cast them to the compute dtype before the kernel")
    if q.dtype not in LOW and not (fp32_ok and q.dtype == torch.float32):
        raise KernelEntryError(f"{where}: the kernel takes bf16/fp16 only: use bf16-mixed or a "
                               "torch path for fp32")
    amp = torch.is_autocast_enabled("cuda")
    if amp and q.dtype != torch.get_autocast_dtype("cuda"):
        raise KernelEntryError(f"{where}: under {torch.get_autocast_dtype('cuda')} autocast the "
                               f"kernel runs its {q.dtype} path: hand it the autocast dtype")
    for nm, x in (("K", q.shape[-1]), ("V", v.shape[-1])):
        if x not in dims:
            raise KernelEntryError(f"{where}: head dim {nm}={x} outside the kernel's "
                                   f"{min(dims)}..{max(dims)}: pad or take another path")
    if q.shape[:3] != k.shape[:3] or q.shape[:3] != v.shape[:3]:
        raise KernelEntryError(f"{where}: q, k, v must be [B, T, H, D] with equal B, T, H")


def _entry_hook(name, dims, fp32_ok):
    def hook(_op, args):
        _check_entry(name, dims, fp32_ok, args)
        if _REC:
            _REC[-1].entries.append(dict(entry=name, label=_REC[-1].label, dtypes=[
                str(a.dtype) for a in args if isinstance(a, torch.Tensor)]))
    return hook


@contextlib.contextmanager
def _patched_entries():
    saved = []
    for mod_name, cls_name, dims, fp32_ok in ENTRY_FUNCTIONS:
        try:
            cls = getattr(importlib.import_module(mod_name), cls_name)
        except (ImportError, AttributeError):
            continue  # an optional kernel package that is not installed
        if hasattr(cls, "entry_hook"):  # a zeros custom op (zeros/ops/library.py)
            cls.entry_hook = _entry_hook(cls_name, dims, fp32_ok)
            cls.trace_real = True  # its fake impl runs the real code: launches get recorded
            saved.append((cls, None))
            continue
        orig = cls.__dict__.get("apply")  # None: inherited from torch.autograd.Function
        real = orig.__func__ if orig is not None else \
            (lambda c, *a, _cls=cls, **k: super(_cls, c).apply(*a, **k))

        def apply(c, *args, _real=real, _name=cls_name, _dims=dims, _fp32=fp32_ok, **kw):
            _check_entry(_name, _dims, _fp32, args)
            if _REC:
                _REC[-1].entries.append(dict(entry=_name, label=_REC[-1].label, dtypes=[
                    str(a.dtype) for a in args if isinstance(a, torch.Tensor)]))
            return _real(c, *args, **kw)
        cls.apply = classmethod(apply)
        saved.append((cls, orig))
    try:
        yield
    finally:
        for cls, orig in saved:
            if hasattr(cls, "entry_hook"):
                cls.entry_hook, cls.trace_real = None, False
            elif orig is None:
                del cls.apply
            else:
                cls.apply = orig


@contextlib.contextmanager
def _patched_triton():
    from triton.runtime import autotuner, jit
    targets = [(jit.JITFunction, "run", _record_launch), (autotuner.Autotuner, "run", _autotune_first)]
    try:
        from triton.runtime.interpreter import InterpretedFunction
        targets.append((InterpretedFunction, "run", _record_launch))
    except ImportError:
        pass
    saved = [(cls, name, cls.__dict__[name]) for cls, name, _ in targets]
    for cls, name, fn in targets:
        setattr(cls, name, fn)
    try:
        yield
    finally:
        for cls, name, fn in saved:
            setattr(cls, name, fn)


class _NoDevice(contextlib.nullcontext):
    """torch.cuda.device(i) without a driver: fla's input_guard enters it around every op."""

    def __init__(self, device=None):
        super().__init__()


@contextlib.contextmanager
def _patched_torch_cuda():
    saved = torch.cuda.device, torch.cuda.current_device
    torch.cuda.device, torch.cuda.current_device = _NoDevice, lambda: 0
    try:
        yield
    finally:
        torch.cuda.device, torch.cuda.current_device = saved


@contextlib.contextmanager
def fake_cuda(recorder: Recorder):
    """Fake CUDA tensors by default, Triton launches recorded, kernel entries checked."""
    _REC.append(recorder)
    try:
        # no torch.device("cuda") default: a real GPU run has none either, so a tensor created
        # without device= lands on the CPU and a device mismatch fails here as it would there
        # a ShapeEnv lets data-dependent shapes through (MQAR scores only its labelled
        # positions: x[mask] has a size only the data knows; a GPU run computes it, so must we)
        with _patched_triton(), _patched_entries(), _patched_torch_cuda(), \
                FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv()):
            yield
    finally:
        _REC.remove(recorder)


@contextlib.contextmanager
def cuda_autocast(dtype=torch.bfloat16):
    """torch.autocast("cuda") refuses to turn on without a CUDA device; set the state directly."""
    prev = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    torch.set_autocast_enabled("cuda", True)
    torch.set_autocast_dtype("cuda", dtype)
    torch.autocast_increment_nesting()
    try:
        yield
    finally:
        if torch.autocast_decrement_nesting() == 0:
            torch.clear_autocast_cache()
        torch.set_autocast_enabled("cuda", prev[0])
        torch.set_autocast_dtype("cuda", prev[1])


def to_fake_cuda(module: torch.nn.Module) -> torch.nn.Module:
    """Swap every parameter and buffer of a CPU-built module for a fake CUDA copy (call inside
    `fake_cuda`); tied parameters stay tied."""
    memo = {}
    for mod in module.modules():
        for name, p in list(mod._parameters.items()):
            if p is not None:
                if id(p) not in memo:
                    memo[id(p)] = torch.nn.Parameter(torch.empty_like(p, device="cuda"),
                                                     requires_grad=p.requires_grad)
                mod._parameters[name] = memo[id(p)]
        for name, b in list(mod._buffers.items()):
            if b is not None:
                mod._buffers[name] = torch.zeros_like(b, device="cuda")
    return module


def _is_custom(node) -> bool:
    return hasattr(node, "_forward_cls")


def fake_backward(loss: torch.Tensor) -> None:
    """loss.backward() for fake CUDA tensors: accumulates .grad of the leaves (see module doc).
    Like the engine (create_graph=False), backward functions run with grad mode off."""
    with torch.no_grad():
        _walk_graph(loss)


def _walk_graph(loss: torch.Tensor) -> None:
    root = loss.grad_fn
    if root is None:
        raise RuntimeError("the loss does not require grad")
    deps = defaultdict(int)
    seen, stack = {root}, [root]
    while stack:
        node = stack.pop()
        for nxt, _ in node.next_functions:
            if nxt is not None:
                deps[nxt] += 1
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
    buffers = defaultdict(dict)
    buffers[root][0] = torch.ones_like(loss)
    ready = [root]
    while ready:
        node = ready.pop()
        meta = node._input_metadata
        grads = [buffers[node].get(i) for i in range(len(meta))]
        del buffers[node]
        if type(node).__name__ == "AccumulateGrad":
            var = node.variable
            var.grad = grads[0] if var.grad is None else var.grad + grads[0]
            continue
        if _is_custom(node):
            # ctx.set_materialize_grads(True) is the default: None arrives as zeros
            grads = [torch.zeros(m.shape, dtype=m.dtype, device=m.device) if g is None else g
                     for g, m in zip(grads, meta)]
            outs = node.apply(*grads)
        else:
            outs = node(*grads)
        outs = outs if isinstance(outs, tuple) else (outs,)
        for (nxt, nr), g in zip(node.next_functions, outs):
            if nxt is None:
                continue
            if g is not None:
                want = nxt._input_metadata[nr]
                if tuple(g.shape) != tuple(want.shape):  # broadcast input: sum, as the engine
                    try:
                        g = g.sum_to_size(tuple(want.shape))
                    except RuntimeError:
                        g = None
                if g is None or tuple(g.shape) != tuple(want.shape):
                    raise RuntimeError(f"{type(node).__name__} returned a gradient that does "
                                       f"not fit an input of shape {tuple(want.shape)}")
                if g.dtype != want.dtype:  # the engine casts too (validate_outputs)
                    g = g.to(want.dtype)
                buf = buffers[nxt]
                buf[nr] = g if buf.get(nr) is None else buf[nr] + g
            deps[nxt] -= 1
            if deps[nxt] == 0:
                ready.append(nxt)
