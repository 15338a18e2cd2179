"""zoology's multi-query associative recall (MQAR) generator, re-written from the protocol.

Layout of one example (V = vocab 8192, n = num_kv_pairs, L = input_seq_len):
  context: k_1 v_1 ... k_n v_n (n distinct keys from [1, V/2), n distinct values from [V/2, V))
  then L - 2n query slots holding 0 except at even offsets 2*gap_i, where key k_i is repeated;
  the gaps are n distinct draws from {0..(L-2n)/2 - 1} with p(g) ∝ (g+1)^(a-1), a = 0.01, so
  queries cluster right after the context. The label (the value) sits AT the query position,
  every other label is -100. Requires V > L and 4n <= L.
`random_non_queries=True` replaces the 0 fillers by uniform tokens from [0, V) (zoology's class
default); the Figure-2 configs of zoology, which the paper's Figure 3 follows, set it False.

Example (V=16, n=2, L=10):
>>> d = multiquery_ar(num_examples=1, vocab_size=16, input_seq_len=10, num_kv_pairs=2, seed=0)
>>> d["inputs"][0].tolist(), d["targets"][0].tolist()
([4, 9, 2, 14, 2, 0, 4, 0, 0, 0], [-100, -100, -100, -100, 14, -100, 9, -100, -100, -100])
"""
from __future__ import annotations

import numpy as np

from tasks.common.errors import ConfigError
from tasks.common.objective import IGNORE
from tasks.synthetic_common.cache import split_seed
from tasks.synthetic_common.data import TrainTestDataModule

# (input_seq_len, num_kv_pairs, batch_size) of the figure
FIG3_GRID = ((64, 4, 512), (128, 8, 512), (256, 16, 256), (512, 64, 128))
FIG3_D_MODELS = (64, 128, 256, 512)
FIG3_LRS = tuple(float(x) for x in np.logspace(-4, -2, 4))


def gap_distribution(space: int, power_a: float = 0.01) -> np.ndarray:
    """p over gaps 0..space-1 with p(g) ∝ (g+1)^(power_a-1)."""
    p = power_a * np.arange(1, space + 1) ** (power_a - 1)
    return p / p.sum()


def _distinct_rows(rng: np.random.Generator, n_rows: int, low: int, high: int, k: int,
                   logp: np.ndarray | None = None, chunk: int = 4096) -> np.ndarray:
    """[n_rows, k] draws without replacement from [low, high) (Gumbel top-k = successive sampling
    proportional to exp(logp); uniform when logp is None). Chunked to bound memory."""
    if logp is None:  # uniform: draw with replacement, redraw rows holding a duplicate
        out = rng.integers(low, high, size=(n_rows, k))
        bad = np.arange(n_rows)
        while len(bad):
            out[bad] = rng.integers(low, high, size=(len(bad), k))
            srt = np.sort(out[bad], axis=1)
            bad = bad[(srt[:, 1:] == srt[:, :-1]).any(axis=1)]
        return out
    out = np.empty((n_rows, k), dtype=np.int64)
    for s in range(0, n_rows, chunk):
        m = min(chunk, n_rows - s)
        scores = rng.gumbel(size=(m, high - low))
        if logp is not None:
            scores += logp
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        # order the k winners by score: the order of successive draws
        order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1)
        out[s:s + m] = np.take_along_axis(top, order, axis=1) + low
    return out


def multiquery_ar(num_examples: int, vocab_size: int = 8192, input_seq_len: int = 64,
                  num_kv_pairs: int = 4, seed: int = 0, power_a: float = 0.01,
                  random_non_queries: bool = False) -> dict[str, np.ndarray]:
    """{'inputs': [N, L], 'targets': [N, L]} int64; a pure function of its arguments."""
    L, n, V = input_seq_len, num_kv_pairs, vocab_size
    if L % 2:
        raise ValueError(f"input_seq_len must be even, got {L}")
    if V <= L:
        raise ValueError(f"MQAR needs vocab_size > input_seq_len ({V} <= {L})")
    if 4 * n > L:
        raise ValueError(f"MQAR needs 4 * num_kv_pairs <= input_seq_len ({4 * n} > {L})")
    rng = np.random.default_rng(seed)
    half = V // 2
    keys = _distinct_rows(rng, num_examples, 1, half, n)  # [N, n]
    values = _distinct_rows(rng, num_examples, half, V, n)  # [N, n]
    context = 2 * n
    space = (L - context) // 2
    gaps = _distinct_rows(rng, num_examples, 0, space, n, np.log(gap_distribution(space, power_a)))

    tokens = np.zeros((num_examples, L + 1), dtype=np.int64)
    tokens[:, 0:context:2], tokens[:, 1:context:2] = keys, values
    rows = np.arange(num_examples)[:, None]
    tokens[rows, context + 2 * gaps] = keys
    labels = np.full((num_examples, L + 1), IGNORE, dtype=np.int64)
    labels[rows, context + 2 * gaps + 1] = values
    inputs, targets = tokens[:, :-1], labels[:, 1:]  # label of query position p = value
    if random_non_queries:
        filler = inputs == 0
        inputs[filler] = rng.integers(0, V, size=int(filler.sum()))
    return {"inputs": inputs, "targets": targets}


class MQARDataModule(TrainTestDataModule):
    """Train and test from different seeds, cached on disk; the test set doubles as validation
    (zoology evaluates and early-stops on it)."""
    name = "mqar"

    def __init__(self, seq_len: int = 64, num_kv_pairs: int = 4, vocab_size: int = 8192,
                 num_train: int = 100_000, num_test: int = 3_000, batch_size: int = 512,
                 power_a: float = 0.01, random_non_queries: bool = False, seed: int = 0,
                 data_path: str | None = None, num_workers: int = 0, shuffle: bool = False):
        super().__init__(batch_size, seed, data_path, num_workers, shuffle=shuffle)
        if vocab_size <= seq_len or 4 * num_kv_pairs > seq_len or seq_len % 2:
            raise ConfigError(f"MQAR needs an even seq_len < vocab_size and 4*num_kv_pairs <= "
                              f"seq_len (got L={seq_len}, pairs={num_kv_pairs}, V={vocab_size}): "
                              "fix task.datamodule.seq_len / num_kv_pairs")
        self.cfg = dict(vocab_size=vocab_size, input_seq_len=seq_len, num_kv_pairs=num_kv_pairs,
                        power_a=power_a, random_non_queries=random_non_queries)
        self.sizes = {"train": num_train, "test": num_test}

    def cache_key(self, split):
        return dict(self.cfg, num_examples=self.sizes[split])

    def vocab_and_length(self):
        return self.cfg["vocab_size"], self.cfg["input_seq_len"]

    def generate(self, split):
        return multiquery_ar(seed=split_seed(self.seed, split), **self.cache_key(split))
