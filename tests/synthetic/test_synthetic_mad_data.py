"""MAD generators against the protocol facts (docs/protocols.md, mad-lab instances.py)."""
import numpy as np
import pytest

from tasks.mad import data as D
from tasks.mad.settings import BASELINES, TASKS, all_settings, setting_name, task_settings
from tasks.synthetic_common.cache import cached_arrays

IGN = -100


def rng(s=0):
    return np.random.default_rng(s)


@pytest.mark.parametrize("seed", range(5))
def test_recall_layout_and_test_targets(seed):
    V, L = 16, 128
    x, y = D.in_context_recall(rng(seed), V, L, is_training=False)
    assert x.shape == y.shape == (L - 1,)
    tokens = np.concatenate([x, [y[-1]]])  # the full sequence: the probe value is the last target
    keys, vals = tokens[0::2], tokens[1::2]
    assert keys.min() >= 0 and keys.max() < V // 2 and vals.min() >= V // 2 and vals.max() < V
    # one key -> value map per sequence
    assert all(len(set(vals[keys == k])) == 1 for k in set(keys))
    # probe: a key seen before, its value is the last scored target
    assert keys[-1] in set(keys[:-1]) and y[-1] == vals[-1]
    # scored = input position of a key already seen, target = its value; all else -100
    for i in range(L - 1):
        if i % 2 == 0 and keys[i // 2] in set(keys[: i // 2]):
            assert y[i] == vals[i // 2]
        else:
            assert y[i] == IGN


def test_recall_train_targets_are_next_tokens():
    x, y = D.in_context_recall(rng(3), 16, 64, is_training=True)
    np.testing.assert_array_equal(x[1:], y[:-1])
    assert (y != IGN).all()


def test_noisy_recall_noise_tokens_and_real_pair():
    V, L, noise = 32, 128, 16
    for seed in range(20):
        x, y = D.in_context_recall(rng(seed), V, L, False, noise_vocab_size=noise, frac_noise=0.8)
        pairs = np.concatenate([x, [y[-1]]]).reshape(-1, 2)
        is_noise = pairs.min(1) >= V - noise
        # a slot is either two noise tokens (last 16 ids) or a real (key, value) pair
        assert ((pairs >= V - noise).all(1) | (pairs < V - noise).all(1)).all()
        assert (~is_noise[:-1]).sum() >= 1  # at least one real pair before the probe
        assert not is_noise[-1]
        assert (y[0:L - 2:2][is_noise[:-1]] == IGN).all()  # noise slots never scored
    # frac_noise ~ fraction of noise slots
    x, y = D.in_context_recall(rng(0), V, 1024, False, noise, 0.4)
    frac = (np.concatenate([x, [0]]).reshape(-1, 2).min(1) >= V - noise).mean()
    assert 0.3 < frac < 0.5


def test_fuzzy_recall_pad_motifs_and_probe():
    V, L = 16, 128
    pad = V - 1
    for seed in range(10):
        x, y = D.fuzzy_in_context_recall(rng(seed), V, L, is_training=False)
        assert x.shape == y.shape == (L,)
        n_pad = int((x == pad).sum())
        assert n_pad >= 1 and (x[:n_pad] == pad).all() and (y[:n_pad] == IGN).all()
        body = x[n_pad:]
        assert body.max() < pad
        # test: the probe key has 3 tokens and the sequence ends key(3) + value[:-1]
        scored = np.flatnonzero(y != IGN)
        last_val = y[scored[-1]]
        assert last_val >= (V - 1) // 2  # values live in the upper half
        # the probe (key, value) also appears earlier in the context
        seq = np.concatenate([x, [y[-1]]])
        n_val = 1
        while seq[-1 - n_val] >= (V - 1) // 2:
            n_val += 1
        probe = seq[-(3 + n_val):]
        assert (probe[:3] < (V - 1) // 2).all()
        hay = seq[n_pad:-(3 + n_val)].tolist()
        assert any(hay[i:i + len(probe)] == probe.tolist() for i in range(len(hay)))


def test_fuzzy_recall_train_keys_vary_in_size():
    sizes = set()
    for seed in range(5):
        x, _ = D.fuzzy_in_context_recall(rng(seed), 16, 128, is_training=True)
        runs = np.diff(np.flatnonzero(np.diff((x < 7).astype(int)) != 0))
        sizes |= set(runs.tolist())
    assert {1, 2, 3} <= sizes


def test_selective_copying_layout():
    V, L, n = 16, 256, 16
    copy, blank = V - 1, V - 2
    for seed in range(5):
        x, y = D.selective_copying(rng(seed), V, L, n)
        assert x.shape == y.shape == (L,)
        assert x[L - n - 1] == copy and (x[L - n:] == blank).all()
        content = x[: L - n - 1][x[: L - n - 1] != blank]
        assert len(content) == n and content.max() < V - 2
        np.testing.assert_array_equal(y[-n:], content)  # only the last n scored, in order
        assert (y[:-n] == IGN).all()
        assert x[L - n - 2] != blank  # mad-lab quirk: last content token precedes the copy token


def test_compression_and_memorization():
    x, y = D.compression(rng(0), 16, 32)
    assert x[-1] == 15 and x[:-1].max() < 15 and (x == y).all()
    V, L = 256, 32
    kv = D.memorization_map(V)
    assert len(kv) == 127 and kv.min() >= 127 and kv.max() < 255 and len(set(kv)) == 127
    np.testing.assert_array_equal(kv, D.memorization_map(V))  # fixed map (fixed seed)
    x, y = D.memorization(rng(1), V, L)
    assert (x[1::2] == V - 1).all() and (y[0::2] == IGN).all()
    np.testing.assert_array_equal(y[1::2], kv[x[0::2]])


def test_settings_count_and_grid():
    s = all_settings()
    assert len(s) == 66 and len({setting_name(x) for x in s}) == 66
    assert [len(task_settings(t)) for t in TASKS] == [11, 11, 14, 13, 11, 6]
    for t in TASKS:  # each variation changes exactly one baseline variable
        base = task_settings(t)[0]
        for v in task_settings(t)[1:]:
            diff = {k for k in base if k != "varied" and base[k] != v[k]}
            assert diff == {v["varied"]}
    assert BASELINES["noisy-in-context-recall"]["vocab_size"] == 32


@pytest.mark.parametrize("setting", [s for s in all_settings() if s["varied"] is None],
                         ids=lambda s: s["task"])
def test_generate_split_deterministic_and_split_dependent(setting, tmp_path):
    a = D.generate_split(setting, "test", seed=0, n=8)
    b = D.generate_split(setting, "test", seed=0, n=8)
    c = D.generate_split(setting, "train", seed=0, n=8)
    d = D.generate_split(setting, "test", seed=1, n=8)
    np.testing.assert_array_equal(a["inputs"], b["inputs"])
    assert not np.array_equal(a["inputs"], c["inputs"])
    assert not np.array_equal(a["inputs"], d["inputs"])
    assert a["inputs"].max() < setting["vocab_size"] and a["inputs"].min() >= 0
    # cache: the second call reads the file instead of generating
    calls = []
    gen = lambda: calls.append(1) or D.generate_split(setting, "test", 0, 8)
    e = cached_arrays("mad", setting, 0, "test", gen, directory=tmp_path)
    f = cached_arrays("mad", setting, 0, "test", gen, directory=tmp_path)
    assert len(calls) == 1
    np.testing.assert_array_equal(e["targets"], f["targets"])


@pytest.mark.parametrize("module", ["tasks.mad.data", "tasks.mqar.data", "tasks.regbench.automata",
                                    "tasks.regbench.data", "tasks.synthetic_common.objective"])
def test_docstring_examples(module):
    import doctest
    import importlib
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted >= 1 and result.failed == 0
