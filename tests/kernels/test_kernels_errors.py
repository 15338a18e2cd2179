"""Clear errors for what the kernels do not support."""
import pytest
import torch

import kernels.common as common
from kernels_testlib import make_inputs
from kernels.zeros_triton import zeros_attention_triton


def test_unsupported_head_dim():
    xs = make_inputs(T=4, d=160)  # above 128 (narrower widths are padded)
    with pytest.raises(ValueError, match="head dims"):
        zeros_attention_triton(*xs)


def test_bad_chunk_size():
    xs = make_inputs(T=4)
    with pytest.raises(ValueError, match="power of two"):
        zeros_attention_triton(*xs, chunk_size=48)


def test_cpu_without_interpreter(monkeypatch):
    monkeypatch.setattr(common, "INTERPRET", False)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        common.check_device(torch.zeros(1))
