"""MQAR generator against zoology's protocol facts."""
import numpy as np
import pytest

from tasks.mqar.data import FIG3_GRID, FIG3_LRS, gap_distribution, multiquery_ar

IGN = -100


def test_layout_labels_only_at_queries():
    V, L, n = 8192, 64, 4
    d = multiquery_ar(200, V, L, n, seed=0)
    x, y = d["inputs"], d["targets"]
    assert x.shape == y.shape == (200, L)
    keys, vals = x[:, 0:2 * n:2], x[:, 1:2 * n:2]
    assert keys.min() >= 1 and keys.max() < V // 2 and vals.min() >= V // 2 and vals.max() < V
    assert all(len(set(r)) == n for r in keys) and all(len(set(r)) == n for r in vals)
    assert (y[:, :2 * n] == IGN).all()
    for i in range(200):
        scored = np.flatnonzero(y[i] != IGN)
        assert len(scored) == n and ((scored - 2 * n) % 2 == 0).all()
        value_of = dict(zip(keys[i], vals[i]))
        for p in scored:  # the label sits at the query position: the key is the input there
            assert y[i, p] == value_of[x[i, p]]
        q = x[i, 2 * n:]
        assert sorted(q[q != 0]) == sorted(keys[i])  # each key queried exactly once, rest 0


def test_gap_distribution_is_power_law():
    V, L, n = 8192, 256, 16
    space = (L - 2 * n) // 2
    p = gap_distribution(space)
    np.testing.assert_allclose(p[0] / p[9], 10 ** 0.99, rtol=1e-9)  # p(i) ∝ i^-0.99
    # single-pair draws follow p exactly; check the empirical histogram
    d = multiquery_ar(20000, V, L, 1, seed=1)
    gap = (np.argmax(d["targets"] != IGN, axis=1) - 2) // 2
    hist = np.bincount(gap, minlength=space) / len(gap)
    np.testing.assert_allclose(hist[:3], p[:3], atol=0.015)
    # with many pairs the queries still cluster early (successive draws without replacement)
    d = multiquery_ar(2000, V, L, n, seed=2)
    pos = np.nonzero(d["targets"] != IGN)[1]
    assert np.median(pos) < 2 * n + (L - 2 * n) / 2


def test_random_non_queries_and_determinism():
    a = multiquery_ar(50, 8192, 64, 4, seed=3)
    b = multiquery_ar(50, 8192, 64, 4, seed=3)
    c = multiquery_ar(50, 8192, 64, 4, seed=4)
    np.testing.assert_array_equal(a["inputs"], b["inputs"])
    assert not np.array_equal(a["inputs"], c["inputs"])
    r = multiquery_ar(50, 8192, 64, 4, seed=3, random_non_queries=True)
    assert (r["inputs"][:, 8:] != 0).mean() > 0.9
    np.testing.assert_array_equal(r["targets"], a["targets"])


def test_constraints_and_grid():
    with pytest.raises(ValueError, match="4 \\* num_kv_pairs"):
        multiquery_ar(1, 8192, 64, 17)
    with pytest.raises(ValueError, match="vocab_size > input_seq_len"):
        multiquery_ar(1, 64, 64, 4)
    assert [g[:2] for g in FIG3_GRID] == [(64, 4), (128, 8), (256, 16), (512, 64)]
    np.testing.assert_allclose(FIG3_LRS, [1e-4, 10 ** (-4 + 2 / 3), 10 ** (-4 + 4 / 3), 1e-2])
