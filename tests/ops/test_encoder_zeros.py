"""The encoder pass (zeros/ops/encoder.py, what `auto` runs for causal=False) with its
hand-written backward: gradcheck, awkward lengths against naive in the auto-selection tests
(test_quadratic_zeros.py), and gradients when only some inputs need them."""
import pytest
import torch

from helpers import make_inputs, rel_err
from zeros.ops import naive_zeros
from zeros.ops.encoder import encoder_zeros


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
