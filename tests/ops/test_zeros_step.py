"""zeros_step / zeros_prefill: decoding equals the parallel causal output."""
import pytest
import torch

from helpers import make_inputs, rel_err
from zeros.ops import ZeroSState, zeros_attention, zeros_prefill, zeros_step


@pytest.mark.parametrize("use_g0", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_step_by_step_equals_parallel(use_g0, dtype):
    q, k, v, s, g1, gh, g0 = make_inputs(B=3, T=70, H=2, d=8, dtype=dtype, g0=use_g0,
                                         s_scale=20.0)
    ref = zeros_attention(q, k, v, s, g1, gh, g0, causal=True, backend="naive")
    state, outs = None, []
    for t in range(q.shape[1]):
        o_t, state = zeros_step(state, q[:, t], k[:, t], v[:, t], s[:, t], g1[:, t], gh[:, t],
                                None if g0 is None else g0[:, t])
        outs.append(o_t)
    assert isinstance(state, ZeroSState) and state.t == 70 and state.F.shape == (3, 2, 8, 8)
    assert rel_err(torch.stack(outs, 1), ref) < (1e-10 if dtype == torch.float64 else 1e-5)


@pytest.mark.parametrize("grad_mode", [True, False])
def test_prefill_then_steps_equals_parallel(grad_mode):
    """grad_mode=False takes the chunk forward's in-place (no autograd graph) branches."""
    q, k, v, s, g1, gh, g0 = make_inputs(B=2, T=150, H=2, d=8, g0=True, s_scale=10.0)
    ref = zeros_attention(q, k, v, s, g1, gh, g0, causal=True, backend="naive")
    torch.set_grad_enabled(grad_mode)  # restored below; a failing assert leaves the test anyway
    try:
        _prefill_then_steps(q, k, v, s, g1, gh, g0, ref)
        par = zeros_attention(q, k, v, s, g1, gh, g0, causal=True, backend="chunk")
        assert rel_err(par, ref) < 1e-10
    finally:
        torch.set_grad_enabled(True)


def _prefill_then_steps(q, k, v, s, g1, gh, g0, ref):
    o1, st = zeros_prefill(q[:, :70], k[:, :70], v[:, :70], s[:, :70], g1[:, :70], gh[:, :70],
                           g0[:, :70])
    o2, st = zeros_prefill(q[:, 70:140], k[:, 70:140], v[:, 70:140], s[:, 70:140],
                           g1[:, 70:140], gh[:, 70:140], g0[:, 70:140], initial_state=st)
    outs = [o1, o2]
    for t in range(140, 150):
        o_t, st = zeros_step(st, q[:, t], k[:, t], v[:, t], s[:, t], g1[:, t], gh[:, t], g0[:, t])
        outs.append(o_t[:, None])
    assert st.t == 150
    assert rel_err(torch.cat(outs, 1), ref) < 1e-10


def test_state_memory_is_independent_of_length():
    q, k, v, s, g1, gh, _ = make_inputs(B=1, T=300, H=2, d=4)
    _, st_short = zeros_prefill(q[:, :10], k[:, :10], v[:, :10], s[:, :10], g1[:, :10], gh[:, :10])
    _, st_long = zeros_prefill(q, k, v, s, g1, gh)
    size = lambda st: sum(x.numel() for x in vars(st).values() if torch.is_tensor(x))
    assert size(st_short) == size(st_long) == 4 * (1 * 2) + 3 * (1 * 2 * 4 * 4)  # O(H·d²)


def test_step_rejects_a_state_of_another_batch():
    q, k, v, s, g1, gh, _ = make_inputs(B=2, T=3, H=2, d=4)
    _, st = zeros_step(None, q[:, 0], k[:, 0], v[:, 0], s[:, 0], g1[:, 0], gh[:, 0])
    with pytest.raises(ValueError, match="ZeroSState.shift has shape"):
        zeros_step(st, q[:1, 1], k[:1, 1], v[:1, 1], s[:1, 1], g1[:1, 1], gh[:1, 1])
    with pytest.raises(TypeError, match="ZeroSState or None"):
        zeros_step({"t": 1}, q[:, 1], k[:, 1], v[:, 1], s[:, 1], g1[:, 1], gh[:, 1])


def test_prefill_gradients_match_naive():
    """The state-carrying path (plain autograd through the chunk forward) has exact gradients."""
    from helpers import grads
    inputs = make_inputs(B=2, T=130, H=2, d=8, g0=True, requires_grad=True)
    ref_in = [x.detach().clone().requires_grad_() for x in inputs]
    o, _ = zeros_prefill(*inputs)
    ref = zeros_attention(*ref_in, causal=True, backend="naive")
    assert rel_err(o, ref) < 1e-10
    for g, g_ref in zip(grads(o, inputs), grads(ref, ref_in)):
        assert rel_err(g, g_ref) < 1e-9
