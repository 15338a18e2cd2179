"""RegBench automata, strings and metrics against seq_icl's protocol facts."""
import itertools

import numpy as np
import torch

from tasks.regbench.automata import DFA, minimize, sample_dfa
from tasks.regbench.data import IGNORE, SEP, VOCAB, generate_split, make_batch, sample_example
from tasks.regbench.objective import RegBenchAccuracy, l1_to_dfa, validity


def _language(dfa_delta, letters, max_len):
    d = DFA(np.asarray(dfa_delta))
    return {w for n in range(max_len + 1) for w in itertools.product(letters, repeat=n)
            if d.accepts(w)}


def test_minimize_merges_equivalent_states_and_keeps_language():
    # 0 -a-> 1, 0 -b-> 2, 1 -c-> 3, 2 -c-> 3, 3 -a-> 0 ; 1 and 2 are equivalent; 4 unreachable
    delta = np.full((5, 18), -1)
    delta[0, 0], delta[0, 1], delta[1, 2], delta[2, 2], delta[3, 0], delta[4, 5] = 1, 2, 3, 3, 0, 0
    m = minimize(delta)
    assert m.n_states == 3
    assert _language(delta, range(4), 6) == _language(m.delta, range(4), 6)


def test_sampled_automata_protocol():
    for seed in range(30):
        rng = np.random.default_rng(seed)
        d = sample_dfa(rng)
        assert 1 <= d.n_states <= 12
        edges = (d.delta >= 0).sum(1)
        assert edges.min() >= 1 and edges.max() <= 3  # every state keeps 1..3 edges
        # minimal: a second minimisation changes nothing; letters used ⊆ 18
        np.testing.assert_array_equal(minimize(d.delta).delta, d.delta)
        # every pair of states is distinguishable: some word is a path from one and not the other
        for p in range(d.n_states):
            for q in range(p + 1, d.n_states):
                assert _distinguishable(d, p, q)


def _distinguishable(d, p, q):
    seen, todo = {(p, q)}, [(p, q)]
    while todo:
        a, b = todo.pop()
        for letter in range(18):
            x, y = d.step(a, letter), d.step(b, letter)
            if (x < 0) != (y < 0):
                return True
            if x >= 0 and (x, y) not in seen:
                seen.add((x, y))
                todo.append((x, y))
    return False


def _walk(d, s, w):
    for a in w:
        s = d.step(s, a)
        if s < 0:
            return False
    return True


def test_no_self_loops_before_minimisation_and_raw_ranges():
    # the raw sampler: 4..12 states, 4..18 letters, 1..3 edges, no self loops; minimize's input
    import tasks.regbench.automata as A
    seen = []
    orig = A.minimize
    A.minimize = lambda delta: seen.append(np.array(delta)) or orig(delta)
    try:
        for seed in range(50):
            A.sample_dfa(np.random.default_rng(seed))
    finally:
        A.minimize = orig
    for delta in seen:
        n = delta.shape[0]
        assert 4 <= n <= 12
        assert all(delta[s, delta[s] >= 0].tolist().count(s) == 0 for s in range(n))
        e = (delta >= 0).sum(1)
        assert e.min() >= 1 and e.max() <= 3
        assert 1 <= (delta >= 0).any(0).sum() <= 18


def test_examples_are_accepted_and_split_facts():
    d = generate_split("test", n=20, seed=0)
    lens = d["lengths"]
    for i in range(20):
        tok = d["tokens"][i, :lens[i]].astype(int)
        assert tok.min() >= 1 and tok.max() <= SEP and (d["tokens"][i, lens[i]:] == 0).all()
        dfa = DFA(d["delta"][i][(d["delta"][i] >= 0).any(1) | (np.arange(12) == 0)].astype(int))
        strings = np.split(tok, np.flatnonzero(tok == SEP))
        strings = [s[s != SEP] for s in strings]
        assert 10 <= len(strings) <= 19
        for s in strings:
            assert 1 <= len(s) <= 49 and dfa.accepts(s - 1)  # the automaton accepts every string
    assert 250 < lens.mean() < 500  # seq_icl: about 375 tokens
    a, b = generate_split("test", 5, 0), generate_split("test", 5, 0)
    np.testing.assert_array_equal(a["tokens"], b["tokens"])
    v = generate_split("val", 5, 0)
    assert not np.array_equal(a["delta"], v["delta"])


def test_oracle_scores_100_and_metric_rejects_invalid():
    d = generate_split("test", n=8, seed=0)
    b = make_batch(d["tokens"], d["states"], d["lengths"], d["delta"])
    assert ((b["target"] == SEP)).sum() == 0 and (b["target"] != IGNORE).any()
    # oracle: put all mass on valid next letters
    oracle = torch.where(b["valid"], 5.0, -5.0)
    correct, total = validity(oracle, b["target"], b["valid"])
    assert correct == total > 0
    # the real next token is always valid where scored
    c2, t2 = validity(b["target"].clamp(min=0), b["target"], b["valid"])
    assert c2 == t2
    # predicting the separator or pad is never right
    c3, _ = validity(torch.full_like(b["target"], SEP), b["target"], b["valid"])
    assert c3 == 0
    m = RegBenchAccuracy()
    m.update(oracle, (b["target"], b["valid"]))
    assert float(m.compute()) == 1.0
    # L1: the automaton's own uniform law has distance 0
    p = b["valid"].float() / b["valid"].float().sum(-1, keepdim=True).clamp(min=1)
    dist, n = l1_to_dfa(torch.log(p.clamp(min=1e-30)), b["valid"], b["input"])
    assert n > 0 and dist / n < 1e-6
    unif = l1_to_dfa(torch.zeros(*b["input"].shape, VOCAB), b["valid"], b["input"])
    assert unif[0] / unif[1] > 0.5


def test_sample_example_states_track_the_string():
    dfa = sample_dfa(np.random.default_rng(5))
    tok, st = sample_example(dfa, np.random.default_rng(6))
    cur = []
    for t, s in zip(tok, st):
        cur = [] if t == SEP else cur + [t - 1]
        assert dfa.run(cur) == s


def test_in_context_ngram_predicts_the_most_frequent_continuation_with_backoff():
    """Hand-worked: a b a b | a b a (a=1, b=2). The 1-gram always says a (ties: smallest id);
    the 2-gram says b after a once 'a b' was seen, backs off to the 1-gram for a new context."""
    from tasks.regbench.ngram import ngram_predictions
    seq = [1, 2, 1, 2, SEP, 1, 2, 1]
    assert ngram_predictions(seq, 1).tolist() == [1, 1, 1, 1, 1, 1, 1]
    assert ngram_predictions(seq, 2).tolist() == [1, 1, 2, 1, 1, 2, 1]


def test_task_heuristic_is_the_measured_in_context_unigram():
    """conf/task/regbench.yaml's heuristic is what tasks.regbench.ngram measures on the test set."""
    from pathlib import Path

    import yaml
    from tasks.regbench.ngram import ngram_accuracy
    conf = Path(__file__).resolve().parents[2] / "conf" / "task" / "regbench.yaml"
    h = yaml.safe_load(conf.read_text())["heuristic"]
    assert abs(ngram_accuracy(generate_split("test", 500, 0), 1) - h["value"]) < 5e-4
    assert "unigram" in h["label"]


def test_fig2_draws_reported_extras_and_heuristic(tmp_path, monkeypatch):
    """The hook plots the reported test accuracy, the spec's extra snapshot (dashed) and the
    task's heuristic (a horizontal line at its value)."""
    import pandas as pd
    from tasks.regbench import report
    drawn = []
    monkeypatch.setattr(report, "_save", lambda fig, out: drawn.append(fig) or out)
    df = pd.DataFrame([dict(row="ZeroS", setting=f"N{n}", lr=5e-4, **{
        "reported:test/acc": 0.6, "best:val/acc": 0.7, "heuristic": 0.473,
        "heuristic_label": "in-context unigram", "heuristic_metric": "acc"}) for n in (2500, 5000)])
    spec = {"name": "fig2", "metric": "test/acc", "source": "reported",
            "extras": [{"source": "best", "metric": "val/acc", "label": "best val epoch"}]}
    report.fig2(df, spec, tmp_path)
    lines = {ln.get_label(): ln for ln in drawn[0].axes[0].lines}
    assert list(lines["ZeroS"].get_ydata()) == [0.6, 0.6]
    assert list(lines["ZeroS (best val epoch)"].get_ydata()) == [0.7, 0.7]
    assert set(lines["in-context unigram (0.473)"].get_ydata()) == {0.473}
