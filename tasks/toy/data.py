"""A tiny built-in task for the framework's own tests and smoke runs: associative recall.

Sequence: n (key, value) pairs, keys from [0, V/2), values from [V/2, V), then one query key;
the model must output that key's value at the last position (every other target is -100).
Generated in memory from a seed; `data_path` optionally loads a saved `{"input","target"}`
tensor file as the training set (exercises the framework's missing-data-path check).
"""
from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from tasks.common.errors import ConfigError
from tasks.common.objective import IGNORE, random_tokens


def make_recall(n: int, seq_len: int, vocab_size: int, seed: int):
    """input [n, seq_len] int64, target [n, seq_len] with only the last position scored."""
    if seq_len % 2 == 0 or seq_len < 3:
        raise ConfigError(f"toy recall needs an odd seq_len >= 3 (pairs + query), got {seq_len}: "
                          "set task.datamodule.seq_len=2k+1")
    g = torch.Generator().manual_seed(seed)
    half, pairs = vocab_size // 2, seq_len // 2
    keys = torch.stack([torch.randperm(half, generator=g)[:pairs] for _ in range(n)])  # [n, pairs]
    vals = torch.randint(half, vocab_size, (n, pairs), generator=g)  # [n, pairs]
    seq = torch.stack([keys, vals], dim=-1).reshape(n, 2 * pairs)  # k0 v0 k1 v1 ...
    which = torch.randint(0, pairs, (n,), generator=g)
    query = keys.gather(1, which[:, None])  # [n, 1]
    inp = torch.cat([seq, query], dim=1)  # [n, seq_len]
    target = torch.full_like(inp, IGNORE)
    target[:, -1] = vals.gather(1, which[:, None])[:, 0]
    return inp, target


class _DictDataset(TensorDataset):
    def __getitem__(self, i):
        x, y = super().__getitem__(i)
        return {"input": x, "target": y}


class ToyRecallDataModule(L.LightningDataModule):
    def __init__(self, vocab_size: int = 16, seq_len: int = 9, num_train: int = 512,
                 num_val: int = 128, num_test: int = 128, batch_size: int = 32, seed: int = 1234,
                 data_path: str | None = None, num_workers: int = 0):
        super().__init__()
        if vocab_size // 2 < seq_len // 2:
            raise ConfigError(f"toy recall needs vocab_size/2 >= number of pairs ({seq_len // 2}): "
                              "raise task.vocab_size or lower task.datamodule.seq_len")
        self.vocab_size, self.seq_len, self.batch_size = vocab_size, seq_len, batch_size
        self.sizes = {"train": num_train, "val": num_val, "test": num_test}
        self.seed, self.data_path, self.num_workers = seed, data_path, num_workers
        self.sets: dict[str, _DictDataset] = {}

    def example_batch(self, batch_size: int, device="cpu") -> dict:
        """Random ids of a training batch's shape (the training benchmark, the dry-run)."""
        return random_tokens(batch_size, self.seq_len, self.vocab_size, device)

    def check(self):
        if self.data_path is not None and not Path(self.data_path).is_file():
            raise ConfigError(f"data file {self.data_path} not found: create it or set "
                              "task.datamodule.data_path=null (generate in memory)")

    def setup(self, stage=None):
        for i, split in enumerate(("train", "val", "test")):
            if split in self.sets:
                continue
            if split == "train" and self.data_path is not None:
                d = torch.load(self.data_path)
                inp, tgt = d["input"], d["target"]
            else:
                inp, tgt = make_recall(self.sizes[split], self.seq_len, self.vocab_size, self.seed + i)
            self.sets[split] = _DictDataset(inp, tgt)

    def _loader(self, split, shuffle):
        return DataLoader(self.sets[split], batch_size=self.batch_size, shuffle=shuffle,
                          num_workers=self.num_workers, drop_last=False)

    def train_dataloader(self):
        return self._loader("train", True)

    def val_dataloader(self):
        return self._loader("val", False)

    def test_dataloader(self):
        return self._loader("test", False)
