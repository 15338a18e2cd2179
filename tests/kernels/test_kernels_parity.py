"""Triton kernels (interpreted on CPU) against the naive float64 ground truth: forward and all
seven gradients, causal and encoder, with and without the zero-order gate."""
import pytest
import torch

from kernels_testlib import NAMES, as_reference, grads, make_inputs, max_err
from kernels.common import INTERPRET
from kernels.zeros_triton import zeros_attention_triton
from zeros.ops import naive_zeros, zeros_attention

if not (INTERPRET or torch.cuda.is_available()):
    pytest.skip("kernels were imported without TRITON_INTERPRET=1 and there is no GPU",
                allow_module_level=True)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# fp32 kernels vs float64 truth: observed errors are ~1e-7 (forward) and ~5e-7 (gradients)
TOL_FWD, TOL_GRAD = 1e-5, 2e-5


def check_against_naive(T, d, causal, use_g0, chunk_size=64, B=2, H=2, seed=0, recompute=True):
    inputs = make_inputs(B=B, T=T, H=H, d=d, g0=use_g0, seed=seed, device=DEVICE)
    ref_in = as_reference(inputs)
    ref = naive_zeros(*ref_in, causal=causal)
    out = zeros_attention_triton(*inputs, causal=causal, chunk_size=chunk_size,
                                 recompute_states=recompute)
    assert out.dtype == torch.float32 and out.shape == ref.shape
    assert max_err(out, ref) < TOL_FWD, "forward"
    names = [n for n, x in zip(NAMES, inputs) if x is not None]
    for name, g, g_ref in zip(names, grads(out, inputs), grads(ref, ref_in)):
        assert g.shape == g_ref.shape and g.dtype == torch.float32
        assert max_err(g, g_ref) < TOL_GRAD, f"d{name}"


@pytest.mark.parametrize("T", [1, 17, 64, 130])
@pytest.mark.parametrize("d", [16, 32])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("use_g0", [False, True])
def test_forward_and_grads_match_naive(T, d, causal, use_g0):
    check_against_naive(T, d, causal, use_g0, seed=T + d)


@pytest.mark.parametrize("causal,recompute", [(True, True), (True, False), (False, True)])
def test_many_small_chunks(causal, recompute):
    """chunk_size 16 at T = 130: nine chunks, a ragged last one, the state crosses 8 borders;
    the backward either recomputes the chunk-boundary states or reads the forward's."""
    check_against_naive(130, 16, causal, True, chunk_size=16, B=1, H=3, seed=5,
                        recompute=recompute)


@pytest.mark.parametrize("d", [64, 128])
def test_wide_heads(d):
    check_against_naive(70, d, True, False, B=1, H=1, seed=d)


@pytest.mark.parametrize("d,causal", [(4, True), (8, False), (22, True), (8, True)])
def test_zeros_attention_triton_padded_head_dims(d, causal):
    """Head dims between the kernel widths (MAD d = 8, time series d = 4, solar d = 22) are
    zero-padded inside zeros_attention_triton: forward and all gradients at the true d."""
    check_against_naive(37, d, causal, True, chunk_size=16, B=1, H=2, seed=d)


def test_auto_picks_triton_for_every_cuda_head_dim_up_to_128():
    from kernels.zeros_triton import triton_fits
    assert all(triton_fits(2, 128, 16, d) for d in (1, 4, 8, 22, 64, 100, 128))
    assert not triton_fits(2, 128, 16, 160)  # wider: the torch chunk path
    assert not triton_fits(1, 2 ** 24, 16, 8)  # T·H·d >= 2^31: int32 offsets would overflow


def test_dispatcher_reaches_kernels():
    """zeros_attention(backend='triton') is this module, and agrees with the chunk backend."""
    inputs = make_inputs(T=40, g0=True, device=DEVICE)
    out = zeros_attention(*inputs, backend="triton")
    chunk = zeros_attention(*inputs, backend="chunk")
    assert max_err(out, chunk) < TOL_FWD
    assert torch.equal(out, zeros_attention_triton(*inputs))


def test_float64_inputs_keep_their_dtype():
    inputs = [None if x is None else x.detach().double().requires_grad_()
              for x in make_inputs(T=20, device=DEVICE)]
    out = zeros_attention_triton(*inputs)
    assert out.dtype == torch.float64
    assert max_err(out, naive_zeros(*as_reference(inputs))) < TOL_FWD
    assert all(g.dtype == torch.float64 for g in grads(out, inputs))


def test_tolerance_detects_a_small_error():
    """The tolerances can fail: a 1e-3 change of one logit, or a 1e-4 relative change of the
    output, is flagged by the same comparisons the tests use."""
    inputs = make_inputs(T=64, d=16, g0=True, device=DEVICE)
    ref_in = as_reference(inputs)
    ref = naive_zeros(*ref_in)
    bumped = [None if x is None else x.detach().clone() for x in inputs]
    bumped[3][0, 10, 1] += 1e-3  # s
    out = zeros_attention_triton(*bumped)
    assert max_err(out, ref) > TOL_FWD
    assert max_err(zeros_attention_triton(*inputs) * (1 + 1e-4), ref) > TOL_FWD
    good = zeros_attention_triton(*inputs)
    assert max_err(good, ref) < TOL_FWD
    gs, g_ref = grads(good, inputs)[3], grads(ref, ref_in)[3]
    wrong = gs.clone()
    wrong[0, 10, 1] += 1e-4 * g_ref.abs().max()
    assert max_err(wrong, g_ref) > TOL_GRAD
