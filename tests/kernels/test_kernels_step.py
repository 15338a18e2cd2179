"""The fused decoding step equals zeros.ops.recurrent.recurrent_step, batch >= 1."""
import pytest
import torch

from kernels_testlib import make_inputs, max_err
from kernels.common import INTERPRET
from kernels.zeros_triton import zeros_step_triton
from zeros.ops import zeros_prefill
from zeros.ops.recurrent import recurrent_step

if not (INTERPRET or torch.cuda.is_available()):
    pytest.skip("kernels were imported without TRITON_INTERPRET=1 and there is no GPU",
                allow_module_level=True)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def detached(xs):
    return [None if x is None else x.detach() for x in xs]


@pytest.mark.parametrize("use_g0", [False, True])
@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("d", [16, 32])
def test_steps_match_recurrent(use_g0, inplace, d):
    T = 12
    xs = detached(make_inputs(B=3, T=T, H=2, d=d, g0=use_g0, seed=d, device=DEVICE))
    xs[3] = xs[3] + torch.arange(T, device=DEVICE).view(1, T, 1) * 4.0  # rising logits: rescales
    at = lambda x, t: None if x is None else x[:, t]  # noqa: E731
    st_k = st_r = None
    for t in range(T):
        o_k, st_k = zeros_step_triton(st_k, *(at(x, t) for x in xs), inplace=inplace)
        o_r, st_r = recurrent_step(st_r, *(at(x, t) for x in xs))
        assert max_err(o_k, o_r) < 1e-5, f"step {t}"
    assert st_k.t == st_r.t == T
    for name in ("shift", "m", "E", "P", "F", "G", "H"):
        assert max_err(getattr(st_k, name), getattr(st_r, name)) < 1e-5, name


def test_decode_after_prefill():
    """Prompt through the chunk path, then decode with the kernel: same as decoding throughout."""
    xs = detached(make_inputs(B=2, T=20, H=2, d=16, seed=4, device=DEVICE))
    _, state = zeros_prefill(*(x[:, :15] for x in xs[:6]))
    st_r = state
    for t in range(15, 20):
        o_k, state = zeros_step_triton(state, *(x[:, t] for x in xs[:6]))
        o_r, st_r = recurrent_step(st_r, *(x[:, t] for x in xs[:6]))
        assert max_err(o_k, o_r) < 1e-5


def test_grad_falls_back_to_torch():
    xs = make_inputs(B=1, T=1, H=2, d=16, device=DEVICE)
    o, _ = zeros_step_triton(None, *(x[:, 0] for x in xs[:6]))
    assert o.requires_grad  # computed by recurrent_step, so gradients flow
    o.sum().backward()
    assert xs[2].grad is not None
