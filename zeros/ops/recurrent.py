"""ZeroS one token at a time: the decoding path, and a loop over it for testing (docs/spec.md §2).

`step_update` folds one token into the `ZeroSState`; `step_readout` turns a state into the
row output o_t = q_t (α_t F + β_t G + γ_t H). Shapes: q_t, k_t, v_t [B, H, d]; s_t, gates [B, H].
"""
from __future__ import annotations

import torch

from .library import RecomputeOp
from .state import ZeroSState, empty_state_like


def step_update(state: ZeroSState | None, k_t, v_t, s_t) -> ZeroSState:
    """Add token (k_t, v_t, s_t) to the prefix sums, rescaling E and F to the new running max."""
    if state is None:
        state = empty_state_like(s_t, k_t.shape[-1])
    m_new = torch.maximum(state.m, s_t.detach())  # [B, H]
    r_old, e_t = torch.exp(state.m - m_new), torch.exp(s_t - m_new)  # both <= 1
    kv = k_t[..., :, None] * v_t[..., None, :]  # [B, H, d, d] k_tᵀ v_t
    s_lin = s_t - state.shift  # [B, H]
    return ZeroSState(
        t=state.t + 1, shift=state.shift, m=m_new,
        E=state.E * r_old + e_t,
        P=state.P + s_lin,
        F=state.F * r_old[..., None, None] + e_t[..., None, None] * kv,
        G=state.G + s_lin[..., None, None] * kv,
        H=state.H + kv,
    )


def step_readout(state: ZeroSState, q_t, g1_t, gh_t, g0_t=None, n=None):
    """o_t for a row that sums over the n positions in `state` (n = state.t by default)."""
    n = float(state.t if n is None else n)
    alpha = gh_t / state.E  # [B, H]
    beta = (g1_t - gh_t) / n
    gamma = -(beta * state.P + gh_t) / n
    if g0_t is not None:
        gamma = gamma + g0_t / n
    M = (alpha[..., None, None] * state.F + beta[..., None, None] * state.G
         + gamma[..., None, None] * state.H)  # [B, H, d, d]
    return (q_t[..., None, :] @ M).squeeze(-2)  # [B, H, d]


def _step(shift, m, E, P, F, G, H, q_t, k_t, v_t, s_t, g1_t, gh_t, g0_t, t):
    """`recurrent_step` on the state's tensors: (o_t, m, E, P, F, G, H) of the new state."""
    st = step_update(ZeroSState(t, shift, m, E, P, F, G, H), k_t, v_t, s_t)
    return step_readout(st, q_t, g1_t, gh_t, g0_t), st.m, st.E, st.P, st.F, st.G, st.H


# zeros::step: the decoding step as one custom op under torch.compile (its backward recomputes
# the O(d²) step with torch.func.vjp); the running max m is not differentiated (it is detached)
STEP_OP = RecomputeOp(
    "step", _step, "(Tensor shift, Tensor m, Tensor E, Tensor P, Tensor F, Tensor G, Tensor H, "
    "Tensor q_t, Tensor k_t, Tensor v_t, Tensor s_t, Tensor g1_t, Tensor gh_t, Tensor? g0_t, "
    "int t) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)", nondiff_out=(1,))


def recurrent_step(state, q_t, k_t, v_t, s_t, g1_t, gh_t, g0_t=None):
    """One causal decoding step: returns (o_t [B, H, d], new state)."""
    if state is None:
        state = empty_state_like(s_t, k_t.shape[-1])
    o, *new = STEP_OP(state.shift, state.m, state.E, state.P, state.F, state.G, state.H,
                      q_t, k_t, v_t, s_t, g1_t, gh_t, g0_t, state.t)
    return o, ZeroSState(state.t + 1, state.shift, *new)


def recurrent_zeros(q, k, v, s, g1, gh, g0=None, causal=True, initial_state=None,
                    output_final_state=False):
    """Loop of single steps over [B, T, H, d] inputs. Encoder: fold every token, then read
    each row out of the whole-sequence state with n = N."""
    T = q.shape[1]
    g0_at = (lambda t: None) if g0 is None else (lambda t: g0[:, t])
    state = initial_state
    if causal:
        outs = []
        for t in range(T):
            o_t, state = recurrent_step(state, q[:, t], k[:, t], v[:, t], s[:, t], g1[:, t],
                                        gh[:, t], g0_at(t))
            outs.append(o_t)
    else:
        if initial_state is not None or output_final_state:
            raise ValueError("encoder (causal=False) ZeroS has no recurrent state; use causal=True")
        for t in range(T):
            state = step_update(state, k[:, t], v[:, t], s[:, t])
        outs = [step_readout(state, q[:, t], g1[:, t], gh[:, t], g0_at(t)) for t in range(T)]
    o = torch.stack(outs, dim=1)  # [B, T, H, d]
    return (o, state) if output_final_state else o
