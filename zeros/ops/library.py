"""The ZeroS ops as torch.library custom ops, so torch.compile traces a layer as ONE graph.

Each op is a pair of plain functions, `fwd(*inputs) -> (out, *aux)` and
`bwd(grad_out, *inputs, *aux) -> grads`, plus a `fake` that returns fwd's outputs as empty
tensors of the right shapes, dtypes and strides (FakeTensors at trace time; nothing is
computed). `differentiable_op` registers both as custom ops (`zeros::<name>`, `zeros::<name>_bwd`)
with the fake (meta) impls and `register_autograd`; dynamo then sees one opaque node per op
instead of tracing ctypes calls, in-place `out=` writes and data-dependent branches (the graph
breaks of issue 29). aux are what the backward needs from the forward (boundary states, a saved
tril(QKᵀ)); they are outputs, marked non-differentiable. Ops never mutate or alias inputs.
Eager calls (nothing is being compiled) run the same fwd/bwd as a plain autograd.Function: the
custom-op dispatch costs ~0.25 ms per op call and its backward on CPU (measured at d_model 32,
T 16: a 1.5x slower layer), so dynamo alone sees the custom ops (`torch.compiler.is_compiling`).
A torch without `torch.library.custom_op`/`register_autograd` (< 2.4) gets one warning and
that autograd.Function everywhere: identical numbers, only torch.compile breaks graphs.
Optional tensor inputs (g0) are passed as None; a None gradient output travels as an empty
tensor (a custom op returns tensors only) and is turned back into None here.
"""
from __future__ import annotations

import warnings

import torch

AVAILABLE = all(hasattr(torch.library, n) for n in ("custom_op", "register_autograd",
                                                    "register_fake"))
if not AVAILABLE:
    warnings.warn(f"torch {torch.__version__} lacks torch.library.custom_op/register_autograd "
                  "(torch >= 2.4): ZeroS runs as eager autograd Functions, torch.compile breaks "
                  "its graphs")


def none_to_empty(x, like):
    return like.new_empty(0) if x is None else x


def empty_to_none(x):
    return None if x is None or x.numel() == 0 and x.dim() == 1 else x


def _function(op):
    """op's fwd/bwd as an autograd.Function (eager, or torch without torch.library custom ops).
    Inputs in the op's order (tensors first, as the engine and tests/gpu/fake_cuda.py expect)."""
    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            outs = op.fwd(*args)
            ctx.n_in = len(args)
            ctx.mark_non_differentiable(*outs[1:])
            ctx.save_for_backward(*[a if isinstance(a, torch.Tensor) else None for a in args],
                                  *outs[op.first:])
            ctx.consts = [None if isinstance(a, torch.Tensor) else a for a in args]
            return outs

        @staticmethod
        def backward(ctx, g, *_):
            saved = ctx.saved_tensors
            ins = [c if t is None and c is not None else t
                   for t, c in zip(saved[:ctx.n_in], ctx.consts)]
            grads = op.bwd(g.contiguous(), *ins, *saved[ctx.n_in:])
            return (*[empty_to_none(x) for x in grads], *[None] * (ctx.n_in - len(grads)))
    Fn.__name__ = Fn.__qualname__ = f"ZeroS_{op.name}"
    return Fn


class DifferentiableOp:
    """`op(*inputs)` -> (out, *aux). The first `n_diff` inputs get gradients (bwd returns them in
    order, an empty tensor for an input that was None); the rest are constants.
    bwd(grad, *inputs, *aux), or bwd(grad, *inputs, out, *aux) with save_out."""

    def __init__(self, name, fwd, bwd, fake, schema, n_diff, bwd_fake=None, save_out=False,
                 triton=False):
        self.fwd, self.bwd, self.n_diff = fwd, bwd, n_diff
        self.entry_hook = None  # f(name, args) called before each call (tests/gpu/fake_cuda.py)
        # True: the fake impls run the real fwd/bwd (the fake-CUDA dry-run records the Triton
        # launches they would make; its launches are recorded, not run)
        self.trace_real = False
        self.name = name
        self.function = _function(self)
        self.first = 0 if save_out else 1  # which outputs the backward gets: out too, or aux
        if not AVAILABLE:
            self.op = None
            return
        lib = torch.library
        # triton=True (compiled Triton kernels, launched through torch.library.wrap_triton):
        # a triton_op, whose fake impl is fwd/bwd itself (a wrapped launch is a no-op on fake
        # tensors) and which AOTAutograd decomposes, so Inductor sees the kernels; under the
        # Triton interpreter (kernels are numpy code, not JIT functions) an opaque custom_op
        triton = triton and hasattr(lib, "triton_op")
        self.is_triton_op = triton
        if triton:
            self.op = lib.triton_op(f"zeros::{name}", fwd, mutates_args=(), schema=schema)
        else:
            self.op = lib.custom_op(f"zeros::{name}", fwd, mutates_args=(), schema=schema)
            self.op.register_fake(lambda *a: (fwd if self.trace_real else fake)(*a))
        args, outs = schema.split(" -> ")
        n_out = outs.count("Tensor")
        aux = ", ".join(f"Tensor a{i}" for i in range(n_out - self.first))
        names = [a.strip().split(" ")[-1] for a in args.strip("()").split(",")]
        rets = "Tensor" if n_diff == 1 else f"({', '.join(['Tensor'] * n_diff)})"
        bwd_schema = f"(Tensor grad, {args.strip('()')}{', ' if aux else ''}{aux}) -> {rets}"
        one = (lambda f: lambda *a: f(*a)[0]) if n_diff == 1 else (lambda f: f)
        if triton:
            self.bwd_op = lib.triton_op(f"zeros::{name}_bwd", one(bwd), mutates_args=(),
                                        schema=bwd_schema)
        else:
            self.bwd_op = lib.custom_op(f"zeros::{name}_bwd", one(bwd), mutates_args=(),
                                        schema=bwd_schema)
            bfake = bwd_fake or _grads_like(n_diff)
            self.bwd_op.register_fake(one(lambda *a: (bwd if self.trace_real else bfake)(*a)))
        n_in = len(names)

        def setup_context(ctx, inputs, output):
            ctx.mark_non_differentiable(*output[1:])
            ctx.save_for_backward(*[x if isinstance(x, torch.Tensor) else None for x in inputs],
                                  *output[self.first:])
            ctx.consts = [None if isinstance(x, torch.Tensor) else x for x in inputs]

        def backward(ctx, g, *_):
            saved = ctx.saved_tensors
            ins = [c if t is None and c is not None else t
                   for t, c in zip(saved[:n_in], ctx.consts)]
            grads = self.bwd_op(g.contiguous(), *ins, *saved[n_in:])
            grads = (grads,) if n_diff == 1 else grads
            return (*[empty_to_none(x) for x in grads], *[None] * (n_in - n_diff))

        self.op.register_autograd(backward, setup_context=setup_context)

    def __call__(self, *args):
        if self.entry_hook is not None:
            self.entry_hook(self.name, args)
        if self.op is None or not _compiling():  # eager: no custom-op dispatch overhead
            return self.function.apply(*args)
        return self.op(*args)


def _compiling() -> bool:
    fn = getattr(torch.compiler, "is_compiling", None)
    return bool(fn and fn())


def _grads_like(n_diff):
    """Fake of a bwd op: one gradient per differentiable input, shaped like it (empty if None)."""
    def fake(grad, *args):
        return tuple(torch.empty_like(x) if x is not None else grad.new_empty(0)
                     for x in args[:n_diff])
    return fake


class RecomputeOp:
    """A pure-torch function as a custom op `zeros::<name>` whose backward (`zeros::<name>_bwd`)
    recomputes it with torch.func.vjp: for functions cheap next to their inputs' producers
    (the decoding step: O(d²) per head) or whose pieces have no hand-written backward
    (ZeroS-SM: SDPA + linear terms). Compiled graphs see one node each way; its cost is one
    recomputed forward in the backward. Eager calls run `impl` directly with plain autograd
    (no dispatch, no recompute), as DifferentiableOp does.
    impl(*args) -> a tensor or a tuple of tensors; the outputs at `nondiff_out` get no
    gradient. The fake (meta) impl is `impl` itself (pure torch runs on FakeTensors)."""

    def __init__(self, name, impl, schema, nondiff_out=()):
        self.name, self.impl = name, impl
        self.op = None
        if not AVAILABLE:
            return
        lib = torch.library
        self.op = lib.custom_op(f"zeros::{name}", impl, mutates_args=(), schema=schema)
        self.op.register_fake(impl)
        args = schema.split(" -> ")[0].strip()[1:-1]
        self.bwd_op = lib.custom_op(f"zeros::{name}_bwd", self._bwd, mutates_args=(),
                                    schema=f"(Tensor[] grads, {args}) -> Tensor[]")
        self.bwd_op.register_fake(_recompute_fake)

        def setup_context(ctx, inputs, output):
            if nondiff_out:
                ctx.mark_non_differentiable(*[output[i] for i in nondiff_out])
            ctx.save_for_backward(*[x if isinstance(x, torch.Tensor) else None for x in inputs])
            ctx.consts = [None if isinstance(x, torch.Tensor) else x for x in inputs]

        def backward(ctx, *grads):
            ins = [c if t is None and c is not None else t
                   for t, c in zip(ctx.saved_tensors, ctx.consts)]
            empty = ins[0].new_empty(0)
            gs = self.bwd_op([empty if g is None else g for g in grads], *ins)
            gs = iter(gs)
            return tuple(empty_to_none(next(gs)) if isinstance(x, torch.Tensor) else None
                         for x in ins)

        self.op.register_autograd(backward, setup_context=setup_context)

    def _bwd(self, grads, *args):
        # torch.func.vjp, not enable_grad + autograd.grad: a custom op's impl runs below the
        # autograd dispatch key, where grad mode records nothing; functorch's transform does
        pos = [i for i, x in enumerate(args) if isinstance(x, torch.Tensor)
               and x.is_floating_point()]

        def f(*wrt):
            xs = list(args)
            for i, x in zip(pos, wrt):
                xs[i] = x
            outs = self.impl(*xs)
            return (outs,) if isinstance(outs, torch.Tensor) else tuple(outs)
        outs, vjp = torch.func.vjp(f, *[args[i] for i in pos])
        got = iter(vjp(tuple(g if g.numel() else torch.zeros_like(o)
                             for o, g in zip(outs, grads))))
        return [_materialized(next(got), x) if i in pos else x.new_empty(0)
                for i, x in enumerate(args) if isinstance(x, torch.Tensor)]

    def __call__(self, *args):
        if self.op is None or not _compiling():
            return self.impl(*args)
        return self.op(*args)


def _recompute_fake(grads, *args):
    """Fake of a RecomputeOp backward: one gradient per tensor input, shaped like it."""
    return [x.new_empty(x.shape) if x.is_floating_point() else x.new_empty(0)
            for x in args if isinstance(x, torch.Tensor)]


def _materialized(g, like):
    """vjp hands an input that no output depends on a storage-less zero tensor; an op's output
    needs real storage."""
    try:
        g.data_ptr()
        return g.contiguous()  # the fake's layout: vjp's gradients may come transposed
    except RuntimeError:
        return like.new_zeros(like.shape)
