"""The encoder pass (zeros/ops/encoder.py, what `auto` runs for causal=False) with its
hand-written backward: gradcheck, awkward lengths against naive in the auto-selection tests
(test_quadratic_zeros.py), and gradients when only some inputs need them."""
import pytest
import torch

from helpers import grads, make_inputs, rel_err
from zeros.ops import native, naive_zeros
from zeros.ops.encoder import encoder_zeros
from zeros.ops.select import cpu_zeros


@pytest.fixture(autouse=True, params=["native", "torch"])
def fold_path(request, monkeypatch):
    """Every test here twice: the gradient fold in C (csrc/encoder.c) and in torch passes."""
    if request.param == "native" and native.kernels() is None:
        pytest.skip("no C compiler here")
    if request.param == "torch":
        monkeypatch.setattr(native, "fold_supported", lambda g3, x: False)
    return request.param


@pytest.mark.parametrize("T", [1, 2, 13, 197])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_encoder_matches_naive_fwd_bwd(T, dtype):
    inputs = make_inputs(B=2, T=T, H=3, d=8, dtype=dtype, g0=True, requires_grad=True, seed=T)
    ref_in = [x.detach().double().requires_grad_() for x in inputs]
    out, ref = cpu_zeros(*inputs, causal=False), naive_zeros(*ref_in, causal=False)
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    assert rel_err(out, ref) < tol
    for g, g_ref in zip(grads(out, inputs), grads(ref, ref_in)):
        assert rel_err(g, g_ref) < 10 * tol


@pytest.mark.parametrize("use_g0", [False, True])
def test_encoder_zeros_gradcheck(use_g0):
    inputs = make_inputs(B=1, T=6, H=2, d=3, g0=use_g0, requires_grad=True)
    fn = lambda *x: encoder_zeros(*x[:6], x[6] if use_g0 else None)  # noqa: E731
    assert torch.autograd.gradcheck(fn, tuple(x for x in inputs if x is not None), eps=1e-6,
                                    atol=1e-8)


@pytest.mark.parametrize("which", [0, 1, 2, 3])
def test_encoder_zeros_one_input_needing_grad(which):
    """Only q, only k, only v or only s requires grad: the skipped branches of the backward
    must not change the one that is computed."""
    inputs = make_inputs(B=2, T=13, H=2, d=4, dtype=torch.float64, g0=True)
    x = inputs[which].clone().requires_grad_()
    args = list(inputs)
    args[which] = x
    w = torch.randn(2, 13, 2, 4, dtype=torch.float64)
    (encoder_zeros(*args) * w).sum().backward()
    x_ref = inputs[which].clone().requires_grad_()
    args[which] = x_ref
    (naive_zeros(*args, causal=False) * w).sum().backward()
    assert rel_err(x.grad, x_ref.grad) < 1e-10
