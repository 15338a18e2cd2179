"""RegBench plugged into the experiment framework (tasks/INTERFACE.md).

Datamodule: `num_train` automata for training, 500 validation and 500 test automata (seq_icl's
split of the 1000 held out), cached on disk; batches are trimmed to their longest example.
Objective: cross-entropy on letter targets; metrics `acc` (the greedy next token is a valid
continuation of the current string, seq_icl's dfa_accuracy) and `l1` (distance between the
model's and the automaton's next-token distributions).
"""
from __future__ import annotations

import lightning as L
import numpy as np
from torch.utils.data import DataLoader, Dataset

from tasks.common.errors import ConfigError
from tasks.common.objective import StepOutput, TokenClassification
from tasks.synthetic_common.cache import cached_arrays
from tasks.synthetic_common.models import RegBenchModel

from .data import NUM_HELD_OUT, VOCAB, generate_split, make_batch
from .metric import DFADistance, RegBenchAccuracy


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


class RegBenchObjective(TokenClassification):
    def __init__(self):
        super().__init__(num_classes=VOCAB)

    def metrics(self):
        return {"acc": RegBenchAccuracy(), "l1": DFADistance()}

    def step(self, model, batch, stage):
        logits = model(batch["input"])  # [B, T, V]
        out = super().step(lambda x: logits, batch, stage)
        return StepOutput(out.loss, logits.detach(),
                          (batch["target"], batch["valid"], batch["input"]))


def build_regbench_model(mixer, *, vocab_size: int = VOCAB, d_model: int = 128, n_layers: int = 4,
                         n_heads: int = 2, causal: bool = True, **_generic):
    """Pre-LN [mixer, GELU MLP 4x] x n_layers around `mixer` (a MixerSpec)."""
    factory = lambda d: mixer(d, n_heads, causal=causal)
    return RegBenchModel(vocab_size, factory, d_model=d_model, n_layers=n_layers)
