"""Wide logits (a ramp from -10 to 120, docs/spec.md §6): the kernels carry E and F relative to the
running max, so no early row underflows; a global-max shortcut would fail this test."""
import pytest
import torch

from kernels_testlib import as_reference, grads, make_inputs, max_err
from kernels.common import INTERPRET
from kernels.zeros_triton import zeros_attention_triton
from zeros.ops import chunk_zeros, naive_zeros

if not (INTERPRET or torch.cuda.is_available()):
    pytest.skip("kernels were imported without TRITON_INTERPRET=1 and there is no GPU",
                allow_module_level=True)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def ramp_inputs(T, H=2, d=16, seed=3):
    inputs = make_inputs(B=1, T=T, H=H, d=d, seed=seed, device=DEVICE)
    s = torch.linspace(-10, 120, T, device=DEVICE).view(1, T, 1).expand(1, T, H).contiguous()
    inputs[3] = s.requires_grad_()
    return inputs


def check_ramp(T, with_grads):
    """Reference: float64 naive up to T = 512, float64 chunk path (itself tested against naive
    on this ramp in tests/ops) beyond, where T×T weights get slow."""
    inputs = ramp_inputs(T)
    ref_in = as_reference(inputs)
    ref = (naive_zeros if T <= 512 else chunk_zeros)(*ref_in, causal=True)
    out = zeros_attention_triton(*inputs, causal=True)
    assert torch.isfinite(out).all()
    assert max_err(out, ref) < 1e-5
    row_err = (out.detach().cpu().double() - ref.detach()).abs().amax(-1)  # [1, T, H]
    assert row_err.max() < 1e-5  # every row, including the first ones, is exact
    if with_grads:
        for g, g_ref in zip(grads(out, inputs), grads(ref, ref_in)):
            assert torch.isfinite(g).all()
            assert max_err(g, g_ref) < 2e-5


def test_ramp_forward_T4096():
    """The operator issue's length: 64 chunks, logits rising by 8 per chunk."""
    check_ramp(4096, with_grads=False)


def test_ramp_forward_and_grads_T512():
    check_ramp(512, with_grads=True)


@pytest.mark.slow
def test_ramp_forward_and_grads_T2048():
    check_ramp(2048, with_grads=True)


def test_ramp_encoder_forward():
    inputs = ramp_inputs(1024)
    ref = naive_zeros(*as_reference(inputs), causal=False)
    assert max_err(zeros_attention_triton(*inputs, causal=False), ref) < 1e-5
