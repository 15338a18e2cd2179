"""The datamodule shape MAD and MQAR share: a train and a test split, each generated once from
(config, seed), cached on disk by `cached_arrays`, and streamed. The test set doubles as the
validation set, as in mad-lab and zoology (both early-stop and report on it)."""
from __future__ import annotations

import lightning as L
from torch.utils.data import DataLoader, Dataset

from tasks.common.objective import random_tokens

from .cache import ArrayDataset, cached_arrays


class TrainTestDataModule(L.LightningDataModule):
    """Subclasses set `name` (the cache folder) and define `cache_key(split)` (a dict of
    everything the split depends on besides the seed) and `generate(split)` (dict of arrays).
    `eval_batch_size` (None: batch_size) batches the test split: a per-batch metric (MAD's)
    depends on the batch, so a profile that trains with smaller batches can keep the protocol's.
    `shuffle=False` walks the training set in its stored order every epoch (zoology's loader)."""
    name = "synthetic"

    def __init__(self, batch_size: int, seed: int, data_path: str | None, num_workers: int,
                 eval_batch_size: int | None = None, shuffle: bool = True):
        super().__init__()
        self.shuffle = shuffle
        self.batch_size, self.seed, self.data_path = batch_size, seed, data_path
        self.eval_batch_size = eval_batch_size or batch_size
        self.num_workers = num_workers
        self.sets: dict[str, Dataset] = {}

    def cache_key(self, split: str) -> dict:
        raise NotImplementedError

    def generate(self, split: str) -> dict:
        raise NotImplementedError

    def vocab_and_length(self) -> tuple[int, int]:
        raise NotImplementedError

    def example_batch(self, batch_size: int, device="cpu") -> dict:
        """Random token ids of a training batch's shape (input, target [B, T]), no data read:
        what the training benchmark and the fake-CUDA dry-run feed a model."""
        V, T = self.vocab_and_length()
        return random_tokens(batch_size, T, V, device)

    def _split(self, split: str) -> Dataset:
        if split not in self.sets:
            arrays = cached_arrays(self.name, self.cache_key(split), self.seed, split,
                                   lambda: self.generate(split), directory=self.data_path)
            self.sets[split] = ArrayDataset(arrays)
        return self.sets[split]

    def setup(self, stage=None):
        self._split("train")
        self._split("test")

    def train_dataloader(self):
        return DataLoader(self._split("train"), batch_size=self.batch_size, shuffle=self.shuffle,
                          num_workers=self.num_workers)

    def val_dataloader(self):
        return DataLoader(self._split("test"), batch_size=self.eval_batch_size, shuffle=False,
                          num_workers=self.num_workers)

    test_dataloader = val_dataloader
