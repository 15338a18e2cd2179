"""zeros_sm_attention: the SDPA + linear-terms fast path equals the explicit weights."""
import pytest
import torch

from helpers import grads, make_inputs, rel_err
from zeros.ops import zeros_sm_attention

TOL = {torch.float64: 1e-10, torch.float32: 1e-5}


@pytest.mark.parametrize("T", [1, 7, 63, 64, 65, 500])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("use_g0", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fast_matches_naive(T, causal, use_g0, dtype):
    q, k, v, _, g1, gh, g0 = make_inputs(B=2, T=T, H=2, d=8, dtype=dtype, g0=use_g0, seed=T)
    q, k = (3 * x.detach() for x in (q, k))  # raw logits with a real spread
    inputs = [None if x is None else x.detach().requires_grad_() for x in (q, k, v, g1, gh, g0)]
    ref_in = [None if x is None else x.detach().double().requires_grad_() for x in inputs]
    ref = zeros_sm_attention(*ref_in, causal=causal, backend="naive")
    out = zeros_sm_attention(*inputs, causal=causal, backend="fast")
    assert out.dtype == dtype and out.shape == ref.shape
    assert rel_err(out, ref) < TOL[dtype]
    for g, g_ref in zip(grads(out, inputs), grads(ref, ref_in)):
        assert rel_err(g, g_ref) < 10 * TOL[dtype]


def test_sm_gradcheck_fast():
    q, k, v, _, g1, gh, g0 = make_inputs(B=1, T=9, H=1, d=4, g0=True, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda *xs: zeros_sm_attention(*xs, causal=True, backend="fast"), (q, k, v, g1, gh, g0))


def test_sm_zero_sum_without_g0():
    """With σ¹ = σʰ = 1 and no g0, ZeroS-SM's rows sum to zero: constant values give zero."""
    q, k, _, _, g1, gh, _ = make_inputs(B=1, T=20, H=2, d=4)
    v = torch.ones(1, 20, 2, 4, dtype=torch.float64)
    out = zeros_sm_attention(q, k, v, g1, gh, causal=True)
    assert out.abs().max() < 1e-12
