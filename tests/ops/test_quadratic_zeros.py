"""quadratic_zeros (rank-3 masked [T, T] path) and cpu_zeros (backend="auto" on CPU): equal to
the naive weights forward and backward, exact in float32 at wide logit ranges."""
import pytest
import torch

from helpers import grads, make_inputs, rel_err
from zeros.ops import naive_zeros, zeros_attention
from zeros.ops.quadratic import MAX_SPREAD, quadratic_ok, quadratic_zeros
from zeros.ops.select import chunk_size_for, cpu_zeros, use_quadratic

TOL = {torch.float64: 1e-10, torch.float32: 1e-5}


def _check(fn, inputs, causal=True, tol=None):
    """fn(*inputs) vs float64 naive: output and every gradient."""
    tol = tol or TOL[inputs[0].dtype]
    ref_in = [None if x is None else x.detach().double().requires_grad_() for x in inputs]
    ref = naive_zeros(*ref_in, causal=causal)
    out = fn(*inputs)
    assert out.dtype == inputs[0].dtype and out.shape == ref.shape
    assert rel_err(out, ref) < tol
    for g, g_ref in zip(grads(out, inputs), grads(ref, ref_in)):
        assert rel_err(g, g_ref) < 10 * tol


@pytest.mark.parametrize("T", [1, 2, 7, 11, 63, 65, 197])
@pytest.mark.parametrize("use_g0", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_quadratic_zeros_matches_naive(T, use_g0, dtype):
    inputs = make_inputs(B=2, T=T, H=2, d=4, dtype=dtype, g0=use_g0, requires_grad=True, seed=T)
    _check(quadratic_zeros, inputs)


def test_quadratic_zeros_gradcheck():
    inputs = make_inputs(B=1, T=9, H=2, d=3, g0=True, requires_grad=True)
    assert torch.autograd.gradcheck(quadratic_zeros, tuple(inputs), eps=1e-6, atol=1e-8)


def test_quadratic_zeros_exact_at_the_spread_limit():
    """Logits rising by MAX_SPREAD - 1 from the first position: the one-reference form is
    still exact in float32 (the first rows' terms are ~e^{-59} relative to the reference)."""
    inputs = make_inputs(B=1, T=50, H=2, d=8, dtype=torch.float32, requires_grad=True, seed=4)
    s = torch.linspace(0, MAX_SPREAD - 1, 50).view(1, 50, 1).repeat(1, 1, 2)
    inputs[3] = s.requires_grad_()
    assert quadratic_ok(s)
    _check(quadratic_zeros, inputs)


@pytest.mark.parametrize("T", [20, 128])
def test_cpu_zeros_falls_back_on_wide_logits(T):
    """Logits on a ramp from -10 to 120: outside the quadratic path's condition, so auto takes
    the running-max chunk path and stays exact in float32 (forward and backward)."""
    inputs = make_inputs(B=1, T=T, H=1, d=8, dtype=torch.float32, requires_grad=True, seed=3)
    inputs[3] = torch.linspace(-10, 120, T).view(1, T, 1).requires_grad_()
    assert use_quadratic(T, 8) == (T <= 32) and not quadratic_ok(inputs[3])
    _check(lambda *x: zeros_attention(*x, backend="auto"), inputs)


@pytest.mark.parametrize("T,d", [(11, 4), (40, 32), (128, 8), (197, 8), (70, 4)])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_cpu_zeros_matches_naive(T, d, causal, dtype):
    """Each path auto can pick (quadratic, in C for d <= 8 where a compiler exists; chunks of 16
    for d <= 8; the encoder pass)."""
    inputs = make_inputs(B=2, T=T, H=2, d=d, dtype=dtype, g0=True, requires_grad=True, seed=T)
    _check(lambda *x: cpu_zeros(*x, causal=causal), inputs, causal)


@pytest.mark.parametrize("T", [11, 130])
def test_auto_bf16_inputs_close_to_fp32(T):
    inputs = make_inputs(B=2, T=T, H=2, d=8, dtype=torch.float32, g0=True)
    ref = zeros_attention(*inputs, backend="naive")
    bf = [x.bfloat16() for x in inputs]
    bf[0], bf[1] = (torch.nn.functional.normalize(x, dim=-1) for x in bf[:2])
    out = zeros_attention(*bf, backend="auto")
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    assert rel_err(out, ref) < 5e-2


def test_use_quadratic_and_chunk_size_for():
    """The selection at the paper's shapes (docs/bench.md): T=11 d=4 and T=64 d=128 quadratic,
    T=128 d=8 and T=512 d=64 chunked, with chunks matched to d."""
    assert use_quadratic(11, 4) and use_quadratic(64, 128)
    assert not use_quadratic(128, 8) and not use_quadratic(512, 64)
    assert chunk_size_for(4) == chunk_size_for(8) == 16 and chunk_size_for(64) == 64
    from zeros.ops import native, quadratic
    if native.kernels() is not None:  # Table 4's d = 4 runs the C loops, MQAR's d = 128 bmm
        assert quadratic._native(torch.zeros(1, 11, 4)) and not quadratic._native(torch.zeros(1, 64, 128))


@pytest.mark.parametrize("T", [1, 11, 65])
@pytest.mark.parametrize("chunk_size", [16, 64])
def test_chunk_linear_attn_matches_explicit(T, chunk_size):
    """The linear term of ZeroS-SM and LinAttn: chunks capped at T, sized by d."""
    from zeros.ops import chunk_linear_attn
    q, k, v = (torch.randn(2, 3, T, 4, dtype=torch.float64) for _ in range(3))
    ref = ((q @ k.transpose(-1, -2)).tril() @ v)
    assert rel_err(chunk_linear_attn(q, k, v, chunk_size=chunk_size), ref) < 1e-12
