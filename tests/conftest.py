"""Session-wide test set-up, loaded before any test module is collected.

Without a GPU the Triton kernels can only run under the interpreter, and Triton decides that
when a kernel is defined: TRITON_INTERPRET must be set before ANY module (lightning,
torchmetrics, fla, kernels) imports triton, so it is set here rather than in tests/kernels.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


import pytest  # noqa: E402


@pytest.fixture(params=["native", "torch"])
def rope_path(request, monkeypatch):
    """A test twice: through the C RoPE + norm kernels (zeros/ops/csrc/rope.c) and the torch
    passes. Test files that want every test both ways mark `pytest.mark.usefixtures("rope_path")`."""
    from zeros.ops import native
    if request.param == "native" and native.kernels() is None:
        pytest.skip("no C compiler here")
    if request.param == "torch":
        monkeypatch.setattr(native, "rope_supported", lambda x: False)
    return request.param
