"""RegBench data (seq_icl's `icl_dfa`): one random automaton per example, 10-19 strings from it.

Tokens: 0 = pad, letters 1..18, 19 = separator. An example is its automaton's strings (each a
uniform random walk of 1..49 letters from the start state) joined by the separator; the model
reads ids[:-1] and predicts ids[1:]; targets equal to the separator (and pads) are -100, so only
letters are scored — exactly the positions the RegBench accuracy looks at.

Splits: the 1000 held-out automata (test = first 500, val = last 500, as seq_icl) come from their
own stream; training automata from another stream, skipping duplicates and held-out automata, so
the training set of size N is the first N of the stream and every size sees the same test set.

Example:
>>> d = generate_split("test", n=1, seed=0)
>>> int(d["lengths"][0]) > 0, set(d["tokens"][0, : d["lengths"][0]]) <= set(range(1, 20))
(True, True)
"""
from __future__ import annotations

from functools import lru_cache

import lightning as L
import numpy as np
from torch.utils.data import DataLoader, Dataset

from tasks.common.errors import ConfigError
from tasks.common.objective import IGNORE, random_tokens
from tasks.synthetic_common.cache import cached_arrays

from .automata import DFA, N_LETTERS, sample_dfa

PAD, SEP, VOCAB = 0, N_LETTERS + 1, N_LETTERS + 2
MAX_STATES = 12
TRAIN_SIZES = (2500, 5000, 10000, 20000, 40000)
NUM_HELD_OUT = 1000


def sample_example(dfa: DFA, rng: np.random.Generator, min_strings: int = 10,
                   max_strings: int = 19, max_len: int = 49) -> tuple[list[int], list[int]]:
    """(token ids, dfa state after each token's current string) for one example.

    state[i] = state reached by the letters of the current string up to and including token i
    (0 right after a separator). It is what the validity metric needs at input position i.
    """
    tokens, states = [], []
    for j in range(int(rng.integers(min_strings, max_strings + 1))):
        if j:
            tokens.append(SEP)
            states.append(0)
        s = 0
        for a in dfa.sample_string(rng, int(rng.integers(1, max_len + 1))):
            s = dfa.step(s, a)
            tokens.append(a + 1)
            states.append(s)
    return tokens, states


def _automata(rng: np.random.Generator, n: int, exclude: set[bytes]) -> list[DFA]:
    out, seen = [], set(exclude)
    for _ in range(100 * n + 1000):
        dfa = sample_dfa(rng)
        if dfa.key() in seen:
            continue
        seen.add(dfa.key())
        out.append(dfa)
        if len(out) == n:
            return out
    raise RuntimeError(f"could not draw {n} distinct automata; lower the training-set size")


@lru_cache(maxsize=4)
def held_out_automata(seed: int) -> list[DFA]:
    return _automata(np.random.default_rng([seed, 1]), NUM_HELD_OUT, set())


def generate_split(split: str, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Arrays of one split: tokens [n, Lmax] (PAD after `lengths`), states [n, Lmax] (int8),
    lengths [n], delta [n, 12, 18] (-1 = no edge / no such state). Pure in (split, n, seed)."""
    held = held_out_automata(seed)
    if split == "train":
        dfas = _automata(np.random.default_rng([seed, 2]), n, {d.key() for d in held})
        rng = np.random.default_rng([seed, 3])
    elif split in ("test", "val"):
        half = NUM_HELD_OUT // 2
        if n > half:
            raise ValueError(f"the {split} split holds {half} automata, asked for {n}")
        dfas = held[:half][:n] if split == "test" else held[half:][:n]
        rng = np.random.default_rng([seed, 4 if split == "test" else 5])
    else:
        raise ValueError(f"split must be train, val or test, got {split!r}")
    examples = [sample_example(d, rng) for d in dfas]
    lmax = max(len(t) for t, _ in examples)
    tokens = np.zeros((len(dfas), lmax), dtype=np.int8)
    states = np.zeros((len(dfas), lmax), dtype=np.int8)
    delta = np.full((len(dfas), MAX_STATES, N_LETTERS), -1, dtype=np.int8)
    for i, ((tok, st), d) in enumerate(zip(examples, dfas)):
        tokens[i, :len(tok)], states[i, :len(st)] = tok, st
        delta[i, :d.n_states] = d.delta
    return {"tokens": tokens, "states": states, "delta": delta,
            "lengths": np.array([len(t) for t, _ in examples], dtype=np.int64)}


def valid_next_mask(states: np.ndarray | "torch.Tensor", delta) -> "torch.Tensor":
    """[B, T, VOCAB] bool: token v is a valid continuation at each position (letters only)."""
    import torch
    states = torch.as_tensor(np.asarray(states), dtype=torch.long)  # [B, T]
    delta = torch.as_tensor(np.asarray(delta), dtype=torch.long)  # [B, S, 18]
    rows = delta.gather(1, states.clamp(min=0)[..., None].expand(-1, -1, delta.shape[-1]))
    mask = torch.zeros(*states.shape, VOCAB, dtype=torch.bool)
    mask[..., 1:1 + N_LETTERS] = rows >= 0  # [B, T, 18]
    return mask


def make_batch(tokens: np.ndarray, states: np.ndarray, lengths: np.ndarray, delta: np.ndarray):
    """Collate examples into {'input', 'target', 'valid'} trimmed to the longest example.

    input [B, T] = ids[:-1] (PAD-filled), target [B, T] = ids[1:] with separators and pads -100,
    valid [B, T, VOCAB] = which next tokens the automaton allows after input position t.
    """
    import torch
    T = int(lengths.max()) - 1
    ids = torch.as_tensor(tokens[:, :T + 1].astype(np.int64))  # [B, T+1]
    inp = ids[:, :-1].clone()
    tgt = ids[:, 1:].clone()
    pos = torch.arange(T)[None]
    tgt[(tgt == SEP) | (pos >= torch.as_tensor(lengths)[:, None] - 1)] = IGNORE
    return {"input": inp, "target": tgt, "valid": valid_next_mask(states[:, :T], delta)}


# ---- the framework's datamodule (conf/task/regbench.yaml): `num_train` automata for training,
# 500 validation and 500 test automata (seq_icl's split of the 1000 held out), cached on disk;
# batches are trimmed to their longest example.
class _Examples(Dataset):
    def __init__(self, arrays):
        self.a = arrays

    def __len__(self):
        return len(self.a["lengths"])

    def __getitem__(self, i):
        return i


class RegBenchDataModule(L.LightningDataModule):
    def __init__(self, num_train: int = 2500, num_val: int = 500, num_test: int = 500,
                 batch_size: int = 32, seed: int = 0, data_path: str | None = None,
                 num_workers: int = 0):
        super().__init__()
        half = NUM_HELD_OUT // 2
        if num_val > half or num_test > half or num_train < 1:
            raise ConfigError(f"RegBench holds {half} validation and {half} test automata and "
                              f"needs num_train >= 1: fix task.datamodule.num_val/num_test/num_train")
        self.sizes = {"train": num_train, "val": num_val, "test": num_test}
        self.batch_size, self.seed, self.data_path = batch_size, seed, data_path
        self.num_workers = num_workers
        self.sets: dict[str, _Examples] = {}

    def _split(self, split):
        if split not in self.sets:
            n = self.sizes[split]
            arrays = cached_arrays("regbench", {"n": n}, self.seed, split,
                                   lambda: generate_split(split, n, self.seed),
                                   directory=self.data_path)
            self.sets[split] = _Examples(arrays)
        return self.sets[split]

    def setup(self, stage=None):
        for split in ("train", "val", "test"):
            self._split(split)

    def example_batch(self, batch_size: int, device="cpu") -> dict:
        """Random ids of a training batch's shape, no data read (the training benchmark, the
        dry-run): the generator's strings fit in 512 tokens; real batches are trimmed to the longest."""
        import torch
        return {**random_tokens(batch_size, 512, VOCAB, device),
                "valid": torch.ones(batch_size, 512, VOCAB, dtype=torch.bool, device=device)}

    def _loader(self, split, shuffle):
        ds = self._split(split)
        a = ds.a

        def collate(idx):
            idx = np.asarray(idx)
            return make_batch(a["tokens"][idx], a["states"][idx], a["lengths"][idx],
                              a["delta"][idx])
        return DataLoader(ds, batch_size=self.batch_size, shuffle=shuffle, collate_fn=collate,
                          num_workers=self.num_workers)

    def train_dataloader(self):
        return self._loader("train", True)

    def val_dataloader(self):
        return self._loader("val", False)

    def test_dataloader(self):
        return self._loader("test", False)
