"""In-context n-gram baselines of RegBench (seq_icl's `ngram.py` idea, written from it): the
line a model must cross. At every input position, count the n-grams of the letters seen so far
in this example (each string start-padded, separators end a string), predict the most frequent
next letter after the current string's last n-1 letters, backing off to shorter contexts; score
the prediction with the RegBench validity metric. No training, no parameters.

    python -m tasks.regbench.ngram [--split test] [--n 1 2 3]

The measured values (500 test automata, seed 0) sit in conf/task/regbench.yaml, whose `heuristic`
is the 1-gram (the most frequent letter so far).
"""
from __future__ import annotations

import argparse
from collections import Counter, defaultdict

import numpy as np
import torch

from .data import SEP, generate_split, make_batch
from .objective import validity


def ngram_predictions(tokens, n: int) -> np.ndarray:
    """Greedy next-token prediction after each of tokens[:-1] (ties: the smallest id; nothing
    seen yet: 0 = pad, always wrong). tokens: one example's ids without padding."""
    counts = [defaultdict(Counter) for _ in range(n)]  # counts[k][k letters before][next letter]
    preds = np.zeros(max(len(tokens) - 1, 0), dtype=np.int64)
    cur: list = []
    for t in range(len(tokens) - 1):
        tok = int(tokens[t])
        if tok == SEP:
            cur = []
        else:
            hist = [None] * (n - 1) + cur  # None = string start
            for k in range(n):
                counts[k][tuple(hist[len(hist) - k:]) if k else ()][tok] += 1
            cur = cur + [tok]
        hist = [None] * (n - 1) + cur
        for k in range(n - 1, -1, -1):
            c = counts[k].get(tuple(hist[len(hist) - k:]) if k else ())
            if c:
                preds[t] = max(sorted(c), key=c.__getitem__)
                break
    return preds


def ngram_accuracy(arrays: dict, n: int) -> float:
    """RegBench accuracy (valid greedy letter, micro over scored positions) of the n-gram."""
    ok = total = 0
    for i in range(len(arrays["lengths"])):
        sl = slice(i, i + 1)
        b = make_batch(arrays["tokens"][sl], arrays["states"][sl], arrays["lengths"][sl],
                       arrays["delta"][sl])
        pred = ngram_predictions(arrays["tokens"][i, :int(arrays["lengths"][i])], n)
        c, m = validity(torch.as_tensor(pred)[None], b["target"], b["valid"])
        ok, total = ok + c, total + m
    return ok / max(total, 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", default="test", choices=["test", "val"])
    ap.add_argument("--n", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    arrays = generate_split(a.split, 500, a.seed)
    for n in a.n:
        print(f"{n}-gram {a.split}: {100 * ngram_accuracy(arrays, n):.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
