"""naive_zeros / naive_zeros_sm against a scalar float64 transcription of docs/spec.md §2-§4."""
import math

import pytest
import torch

from helpers import make_inputs
from zeros.ops import naive_zeros, naive_zeros_sm, zeros_weights


def spec_weight(s_list, t, i, n, g1, gh, g0):
    """r_{t,i} written straight from docs/spec.md §2 with python floats (rows sum over n positions)."""
    seen = s_list[:n]
    Z = sum(math.exp(x) for x in seen)
    p = math.exp(s_list[i]) / Z
    s_bar = sum(seen) / n
    delta = s_list[i] - s_bar
    eps = p - 1.0 / n - delta / n
    r = g1 * delta / n + gh * eps
    return r + (g0 / n if g0 is not None else 0.0)


def spec_zeros(q, k, v, s, g1, gh, g0, causal):
    B, T, H, d = q.shape
    out = torch.zeros(B, T, H, d, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            s_list = [float(x) for x in s[b, :, h]]
            for t in range(T):
                n = t + 1 if causal else T
                z = None if g0 is None else float(g0[b, t, h])
                for i in range(n):
                    r = spec_weight(s_list, t, i, n, float(g1[b, t, h]), float(gh[b, t, h]), z)
                    cos = float(q[b, t, h] @ k[b, i, h])
                    out[b, t, h] += r * cos * v[b, i, h]
    return out


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("use_g0", [False, True])
def test_naive_zeros_matches_spec(causal, use_g0):
    q, k, v, s, g1, gh, g0 = make_inputs(B=1, T=6, H=2, d=3, g0=use_g0)
    ref = spec_zeros(q, k, v, s, g1, gh, g0, causal)
    out = naive_zeros(q, k, v, s, g1, gh, g0, causal=causal)
    assert torch.allclose(out, ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("causal", [True, False])
def test_naive_zeros_sm_matches_spec(causal):
    q, k, v, _, g1, gh, g0 = make_inputs(B=1, T=5, H=1, d=4, g0=True)
    q, k = 2.0 * q, 1.5 * k  # ZeroS-SM takes raw (not unit) q, k
    scale = 0.7
    ref = torch.zeros_like(v)
    T = q.shape[1]
    for t in range(T):
        n = t + 1 if causal else T
        logits = [scale * float(q[0, t, 0] @ k[0, i, 0]) for i in range(T)]
        for i in range(n):
            # row t has its own logit vector: rebuild s_list so spec_weight sees row t's logits
            r = spec_weight(logits, t, i, n, float(g1[0, t, 0]), float(gh[0, t, 0]),
                            float(g0[0, t, 0]))
            ref[0, t, 0] += r * v[0, i, 0]
    out = naive_zeros_sm(q, k, v, g1, gh, g0, causal=causal, scale=scale)
    assert torch.allclose(out, ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("causal", [True, False])
def test_zero_sum_row_by_row(causal):
    """Without g0 every row of r sums to 0 (and has entries of both signs)."""
    _, _, _, s, g1, gh, _ = make_inputs(B=2, T=40, H=3, s_scale=5.0)
    B, T, H = s.shape
    logits = s.transpose(1, 2)[:, :, None, :].expand(B, H, T, T)
    r = zeros_weights(logits, g1.transpose(1, 2), gh.transpose(1, 2), None, causal)
    assert r.sum(-1).abs().max() < 1e-12
    assert (r[:, :, 5:] > 0).any() and (r[:, :, 5:] < 0).any()
    if causal:
        assert (r.triu(1) == 0).all()


def test_naive_sees_a_wrong_first_order_term():
    """The defect of the authors' explicit path (docs/spec.md §6: probabilities instead of logits in the
    first-order term) is detected by the docs/spec.md comparison: the test can fail."""
    q, k, v, s, g1, gh, _ = make_inputs(B=1, T=6, H=1, d=3)
    ref = spec_zeros(q, k, v, s, g1, gh, None, True)
    p = torch.softmax(s[0, :, 0].masked_fill(torch.ones(6, 6).triu(1).bool(), -math.inf), -1)
    wrong = naive_zeros(q, k, v, s, g1, gh, None, causal=True)
    assert torch.allclose(wrong, ref, atol=1e-12)
    # replace logits by probabilities in the first-order term: visibly different
    s_prob = torch.log(p.diagonal()).view(1, 6, 1)
    assert not torch.allclose(naive_zeros(q, k, v, s_prob, g1, gh, None, causal=True), ref,
                              atol=1e-3)
