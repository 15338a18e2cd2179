"""The short-sequence C kernels (zeros/ops/csrc/quadratic.c via native.py) that quadratic.py
runs for d <= NATIVE_MAX_D, and the torch path they replace there (with tril(QKᵀ) saved or
recomputed for the backward): all equal to the naive
weights forward and backward at awkward lengths, fp64/fp32, split over threads, and the clean
fallback when no kernels can be built."""
import pytest
import torch

from helpers import grads, make_inputs, rel_err
from zeros.ops import naive_zeros, native, quadratic, zeros_attention
from zeros.ops.quadratic import quadratic_zeros

needs_native = pytest.mark.skipif(native.kernels() is None, reason="no C compiler here")
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}


def _check(inputs):
    tol = TOL[inputs[0].dtype]
    ref_in = [None if x is None else x.detach().double().requires_grad_() for x in inputs]
    ref = naive_zeros(*ref_in, causal=True)
    out = quadratic_zeros(*inputs)
    assert out.dtype == inputs[0].dtype and rel_err(out, ref) < tol
    for g, g_ref in zip(grads(out, inputs), grads(ref, ref_in)):
        assert rel_err(g, g_ref) < 10 * tol


@pytest.fixture(params=["native", "torch", "torch_recompute"])
def path(request, monkeypatch):
    """The C loops; the torch path keeping tril(QKᵀ) for the backward; recomputing it."""
    if request.param == "native" and native.kernels() is None:
        pytest.skip("no C compiler here")
    if request.param.startswith("torch"):
        monkeypatch.setattr(quadratic, "NATIVE_MAX_D", 0)
    if request.param == "torch_recompute":
        monkeypatch.setattr(quadratic, "SAVE_QK_MAX", 0)
    return request.param


@pytest.mark.parametrize("T", [1, 2, 7, 11, 33])
@pytest.mark.parametrize("d", [1, 2, 4, 8])
@pytest.mark.parametrize("use_g0", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_quadratic_paths_match_naive(path, T, d, use_g0, dtype):
    _check(make_inputs(B=2, T=T, H=3, d=d, dtype=dtype, g0=use_g0, requires_grad=True, seed=T))


@needs_native
def test_native_gradcheck():
    inputs = make_inputs(B=1, T=6, H=2, d=3, g0=True, requires_grad=True)
    assert quadratic._native(inputs[0])
    assert torch.autograd.gradcheck(quadratic_zeros, tuple(inputs), eps=1e-6, atol=1e-8)


@needs_native
def test_native_split_over_threads_equals_one_thread():
    inputs = make_inputs(B=64, T=11, H=8, d=4, dtype=torch.float32, g0=True, requires_grad=True)
    n = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = [quadratic_zeros(*inputs), *grads(quadratic_zeros(*inputs), inputs)]
        torch.set_num_threads(4)
        assert len(native._split(64 * 8)) == 4
        four = [quadratic_zeros(*inputs), *grads(quadratic_zeros(*inputs), inputs)]
    finally:
        torch.set_num_threads(n)
    for a, b in zip(one, four):
        assert torch.equal(a, b)


@pytest.mark.parametrize("T", [11, 30])
def test_auto_bf16_inputs_on_the_native_shapes(path, T):
    inputs = make_inputs(B=2, T=T, H=2, d=4, dtype=torch.float32, g0=True)
    ref = zeros_attention(*inputs, backend="naive")
    bf = [x.bfloat16().requires_grad_() for x in inputs]
    out = zeros_attention(*bf, backend="auto")
    assert out.dtype == torch.bfloat16 and rel_err(out, ref) < 5e-2
    out.float().sum().backward()
    assert all(x.grad.dtype == torch.bfloat16 and torch.isfinite(x.grad).all() for x in bf)


def test_native_off_falls_back_to_torch(monkeypatch):
    monkeypatch.setenv("ZEROS_NATIVE", "0")
    assert native._build() is None
    monkeypatch.setattr(native, "_LIB", [None])
    inputs = make_inputs(B=1, T=5, H=2, d=4, dtype=torch.float64, requires_grad=True)
    assert not quadratic._native(inputs[0])
    _check(inputs)


def test_failed_build_warns_and_falls_back(monkeypatch, tmp_path):
    monkeypatch.delenv("ZEROS_NATIVE", raising=False)  # a run with the kernels switched off
    monkeypatch.setenv("ZEROS_NATIVE_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", "false")  # a "compiler" that always fails
    monkeypatch.setattr(native, "_compiler", lambda: "false")
    with pytest.warns(UserWarning, match="torch path"):
        assert native._build() is None
