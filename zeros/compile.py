"""torch.compile a whole model in place, with eager as the fallback (the `compile` config key).

`compile_or_eager(model)` compiles the module's call (nn.Module.compile's mechanism: the
module, its parameters and its state_dict keys stay as they are, so checkpoints load either way).
Every ZeroS op is a torch.library custom op (zeros/ops/library.py), so a model with ZeroS
layers traces as one graph per shape; a new input shape recompiles (dynamo's guards; after
one recompile a varying dim is made dynamic), it does not crash. Where compiling fails at run
time (no C++ compiler for inductor, a torch without some feature, a dynamo error) the first
failure prints ONE warning naming the cause and the model runs eager from then on: the call
is redone eagerly, so a failure never turns into a wrong result (an error of the model itself
is raised again by the eager call).
"""
from __future__ import annotations

import warnings

import torch


def _compile_errors() -> tuple:
    errs = []
    try:
        from torch._dynamo.exc import TorchDynamoException
        errs.append(TorchDynamoException)
    except ImportError:
        pass
    try:
        from torch._inductor.exc import InductorError
        errs.append(InductorError)
    except ImportError:
        pass
    return tuple(errs) or (RuntimeError,)


def _cause(err: BaseException) -> str:
    """The innermost exception, one line (BackendCompilerFailed wraps the backend's own)."""
    while getattr(err, "inner_exception", None) or err.__cause__:
        err = getattr(err, "inner_exception", None) or err.__cause__
    lines = [x for x in str(err).strip().splitlines() if x.strip()]
    return f"{type(err).__name__}: {lines[0][:200] if lines else ''}"


# nn.Module.compile's own mechanism, through nn.Module's private `_call_impl` /
# `_compiled_call_impl` (no public API compiles in place with an eager fallback), and torch's
# private exception modules (torch._dynamo.exc, torch._inductor.exc). Checked: torch 2.14.1;
# guarded by tests/framework/test_framework_private_apis.py.
def compile_or_eager(model: torch.nn.Module, backend: str = "inductor", **kwargs):
    """Compile `model` in place (returns it). backend: any torch.compile backend
    ("inductor", "aot_eager", ...)."""
    name = type(model).__name__
    if not hasattr(torch, "compile") or not hasattr(model, "_compiled_call_impl"):
        warnings.warn(f"compile: torch {torch.__version__} cannot compile modules in place; "
                      f"running {name} eager")
        return model
    compiled = torch.compile(model._call_impl, backend=backend, **kwargs)
    errors = _compile_errors()

    def call(*args, **kw):
        try:
            return compiled(*args, **kw)
        except errors as err:
            warnings.warn(f"compile: torch.compile failed ({_cause(err)}); running {name} eager")
            model._compiled_call_impl = None  # nn.Module.__call__ goes eager from now on
            return model._call_impl(*args, **kw)

    model._compiled_call_impl = call
    return model


def compile_setting(value) -> str | None:
    """The `compile` config key: false/null (off), true (inductor) or a backend name."""
    if value is None or value is False:
        return None
    if value is True:
        return "inductor"
    if isinstance(value, str) and value:
        return value
    raise ValueError(f"compile={value!r}: set compile to false, true or a torch.compile backend "
                     "name such as inductor or aot_eager")
