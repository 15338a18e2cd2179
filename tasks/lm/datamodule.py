"""The LM task for the experiment framework (tasks/INTERFACE.md): datamodule + objective.

conf/task/lm_*.yaml instantiates `LMDataModule(data=..., tokenizer=..., seq_len=...)` and
`LMObjective()`. Batches are {"input": [B, L], "target": [B, L]} blocks from tasks.lm.data:
training uses full non-overlapping blocks (shuffled each epoch, as fairseq does); validation and
test use every block of the split, the short last one padded with target -100, so the `ppl`
metric = exp(Σ NLL / N) counts every token exactly once and `tokens` reports N.
"""
from __future__ import annotations

import os
from pathlib import Path

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
import torchmetrics
from torch.utils.data import DataLoader, Dataset

from tasks.common.errors import ConfigError
from tasks.common.objective import Objective, StepOutput

from .data import block_pair, block_ranges, build_token_cache
from .tokenizer import tokenizer_from_cfg


class BlockDataset(Dataset):
    def __init__(self, tokens: np.ndarray, block: int, eos_id: int, full_only: bool):
        self.tokens, self.block, self.eos_id = tokens, block, eos_id
        self.ranges = block_ranges(len(tokens), block)
        if full_only:
            self.ranges = [r for r in self.ranges if r[1] - r[0] == block]

    def __len__(self):
        return len(self.ranges)

    def __getitem__(self, i):
        s, e = self.ranges[i]
        x, y = block_pair(self.tokens, s, e, self.eos_id)  # [L] each
        pad = self.block - (e - s)
        if pad:  # the split's short last block: padded positions are not scored
            x, y = F.pad(x, (0, pad), value=self.eos_id), F.pad(y, (0, pad), value=-100)
        return {"input": x, "target": y}


class LMDataModule(L.LightningDataModule):
    def __init__(self, data: dict, tokenizer: dict, seq_len: int = 512, batch_size: int = 16,
                 eval_block: int | None = None, eval_batch_size: int | None = None,
                 vocab_size: int | None = None, num_workers: int = 0):
        super().__init__()
        self.data_cfg, self.tok_cfg = data, tokenizer
        self.seq_len, self.batch_size = seq_len, batch_size
        self.eval_block = eval_block or seq_len
        self.eval_batch_size = eval_batch_size or batch_size
        self.vocab_size, self.num_workers = vocab_size, num_workers
        self.sets: dict[str, Dataset] = {}

    def check(self):
        """Cheap checks before training (no hub access): local files and tokenizer path."""
        d = self.data_cfg
        if d.get("source", "local") == "local":
            if not d.get("path"):
                raise ConfigError("the LM smoke profile has no default data: set "
                                  "task.datamodule.data.path=DIR with the text files "
                                  "(e.g. a WikiText-2 raw folder with valid.txt and test.txt)")
            for split, name in (d.get("files") or {}).items():
                f = Path(os.path.expanduser(str(d["path"]))) / str(name)
                if name and not f.is_file():
                    raise ConfigError(f"missing {split} text file {f}: fix "
                                      f"task.datamodule.data.path / data.files.{split}")
        tp = self.tok_cfg.get("path")
        if tp and not Path(os.path.expanduser(str(tp))).exists():
            raise ConfigError(f"tokenizer path {tp} does not exist: set "
                              "task.datamodule.tokenizer.path to the GPT-2 tokenizer folder")

    def setup(self, stage=None):
        if self.sets:
            return
        cache = build_token_cache(self.data_cfg, tokenizer_from_cfg(self.tok_cfg))
        if self.vocab_size is not None and cache.vocab_size > self.vocab_size:
            raise ConfigError(f"task.vocab_size={self.vocab_size} < the tokenizer's "
                              f"{cache.vocab_size}: raise task.vocab_size")
        self.eos_id = cache.eos_id
        self.sets["train"] = BlockDataset(cache.tokens("train"), self.seq_len, cache.eos_id, True)
        for split, name in (("val", "valid"), ("test", "test")):
            if cache.has(name):
                self.sets[split] = BlockDataset(cache.tokens(name), self.eval_block,
                                                cache.eos_id, False)

    def _loader(self, split, shuffle, bs):
        if split not in self.sets:
            raise ConfigError(f"the LM data has no {split} split: configure it in "
                              "task.datamodule.data (files / hf.splits / holdout)")
        return DataLoader(self.sets[split], batch_size=bs, shuffle=shuffle, drop_last=shuffle,
                          num_workers=self.num_workers)

    def train_dataloader(self):
        return self._loader("train", True, self.batch_size)

    def val_dataloader(self):
        return self._loader("val", False, self.eval_batch_size)

    def test_dataloader(self):
        return self._loader("test", False, self.eval_batch_size)


class _NLLSum(torchmetrics.Metric):
    """Sums token NLLs and counts tokens; subclasses turn them into ppl or a count."""
    full_state_update = False

    def __init__(self):
        super().__init__()
        self.add_state("nll", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, preds, target):  # preds: token NLLs [N]; target: scored mask [N]
        self.nll += (preds.double() * target).sum()
        self.count += target.sum().long()


class Perplexity(_NLLSum):
    def compute(self):
        return torch.exp(self.nll / self.count.clamp(min=1))


class TokenCount(_NLLSum):
    def compute(self):
        return self.count.double()


class LMObjective(Objective):
    """Next-token cross-entropy; val/test metrics ppl = exp(mean token NLL) and the token count."""

    def metrics(self):
        return {"ppl": Perplexity(), "tokens": TokenCount()}

    def step(self, model, batch, stage):
        logits = model(batch["input"])  # [B, L, V]
        target = batch["target"].flatten()  # [B·L]
        nll = F.cross_entropy(logits.flatten(0, 1).float(), target, ignore_index=-100,
                              reduction="none")  # [B·L], 0 where unscored
        mask = target != -100
        loss = nll.sum() / mask.sum().clamp(min=1)
        tokens = mask.sum() if stage == "train" else None  # the token budget counts these
        return StepOutput(loss, nll.detach(), mask, tokens=tokens)
