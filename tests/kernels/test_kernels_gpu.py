"""Compiled kernels on CUDA (skipped without a GPU): bf16/fp16 inputs, long sequences, decode.
The interpreter's bf16 is unreliable, so 16-bit inputs are only tested here."""
import pytest
import torch

from kernels_testlib import as_reference, grads, make_inputs, max_err
from zeros.ops import naive_zeros, zeros_attention

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def renormed(inputs, dtype):
    """Cast to a 16-bit dtype and re-normalise q, k there (the op expects unit norm)."""
    out = [None if x is None else x.detach().to(dtype) for x in inputs]
    out[0], out[1] = (torch.nn.functional.normalize(x, dim=-1) for x in out[:2])
    return [None if x is None else x.requires_grad_() for x in out]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("d", [32, 64, 128])
def test_16bit_close_to_fp32_chunk(dtype, causal, d):
    inputs = make_inputs(B=2, T=1000, H=4, d=d, g0=True, device="cuda")
    low = renormed(inputs, dtype)
    ref_in = [None if x is None else x.detach().float().requires_grad_() for x in low]
    ref = zeros_attention(*ref_in, causal=causal, backend="chunk")
    out = zeros_attention(*low, causal=causal, backend="triton")
    assert out.dtype == dtype and torch.isfinite(out).all()
    assert max_err(out, ref) < 3e-2
    for g, g_ref in zip(grads(out, low), grads(ref, ref_in)):
        assert torch.isfinite(g).all() and max_err(g, g_ref) < 5e-2


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("T", [1, 17, 130, 1000])
def test_fp32_compiled_matches_naive(causal, T):
    inputs = make_inputs(B=2, T=T, H=2, d=64, g0=True, device="cuda", seed=T)
    ref_in = as_reference(inputs)
    ref = naive_zeros(*ref_in, causal=causal)
    out = zeros_attention(*inputs, causal=causal, backend="triton")
    assert max_err(out, ref) < 1e-4
    for g, g_ref in zip(grads(out, inputs), grads(ref, ref_in)):
        assert max_err(g, g_ref) < 1e-4


def test_auto_picks_triton_on_cuda():
    inputs = make_inputs(T=50, device="cuda")
    assert torch.equal(zeros_attention(*inputs, backend="auto"),
                       zeros_attention(*inputs, backend="triton"))


def test_long_bf16_ramp_is_finite_and_close():
    T = 16384
    inputs = make_inputs(B=1, T=T, H=2, d=64, device="cuda")
    ramp = torch.linspace(-10, 120, T, device="cuda").view(1, T, 1)
    inputs[3] = ramp.expand(1, T, 2).contiguous()
    low = renormed(inputs, torch.bfloat16)
    ref = zeros_attention(*[x.detach().float() for x in low], backend="chunk")
    out = zeros_attention(*low, backend="triton")
    assert torch.isfinite(out).all() and max_err(out, ref) < 3e-2


def test_step_kernel_bf16():
    from kernels.zeros_triton import zeros_step_triton
    from zeros.ops.recurrent import recurrent_step
    xs = [x.detach() for x in renormed(make_inputs(B=4, T=8, H=2, d=64, device="cuda"),
                                       torch.bfloat16)[:6]]
    st_k = st_r = None
    for t in range(8):
        o_k, st_k = zeros_step_triton(st_k, *(x[:, t] for x in xs))
        o_r, st_r = recurrent_step(st_r, *(x[:, t].float() for x in xs))
        assert o_k.dtype == torch.bfloat16 and max_err(o_k, o_r) < 2e-2


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("d", [4, 8, 22])
def test_padded_head_dims_bf16_close_to_fp32_chunk(d, causal):
    """Head dims below/between the kernel widths (time series d = 4, MAD d = 8, solar d = 22)
    go through the zero-padded kernels: bf16 forward and gradients vs the fp32 chunk path."""
    inputs = make_inputs(B=2, T=300, H=4, d=d, g0=True, device="cuda")
    low = renormed(inputs, torch.bfloat16)
    ref_in = [None if x is None else x.detach().float().requires_grad_() for x in low]
    ref = zeros_attention(*ref_in, causal=causal, backend="chunk")
    out = zeros_attention(*low, causal=causal)  # auto: triton on CUDA
    assert out.dtype == torch.bfloat16 and out.shape == ref.shape
    assert max_err(out, ref) < 3e-2
    for g, g_ref in zip(grads(out, low), grads(ref, ref_in)):
        assert max_err(g, g_ref) < 5e-2
