"""The loss/metrics contract of a task (see tasks/INTERFACE.md §2) and two reusable objectives."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
import torchmetrics
from torchmetrics.classification import MulticlassAccuracy

IGNORE = -100  # the target of an unscored position: torch's cross_entropy ignore_index default


def random_tokens(batch_size: int, seq_len: int, vocab_size: int, device="cpu") -> dict:
    """{input, target}: random token ids [B, T] of a token task's training batch, no data read
    (a datamodule's `example_batch`: the training benchmark, the fake-CUDA dry-run)."""
    return {k: torch.randint(0, int(vocab_size), (batch_size, int(seq_len)), device=device)
            for k in ("input", "target")}


@dataclass
class StepOutput:
    loss: torch.Tensor  # scalar
    preds: Any = None  # passed to every metric's update(preds, target)
    target: Any = None
    tokens: Any = None  # scored tokens in the batch: an LM logs its token budget (train/tokens)


class Objective:
    """Subclass: `metrics()` returns fresh torchmetrics; `step()` computes the loss."""

    def metrics(self) -> dict[str, torchmetrics.Metric]:
        return {}

    def step(self, model: torch.nn.Module, batch: Any, stage: str) -> StepOutput:
        raise NotImplementedError


class TokenClassification(Objective):
    """Next-token style: batch = {"input": [B, T] ids, "target": [B, T] ids, IGNORE = unscored};
    loss = cross-entropy; metrics: macro accuracy over scored positions (MAD's torchmetrics
    setting) and micro accuracy."""

    def __init__(self, num_classes: int, ignore_index: int = IGNORE):
        self.num_classes, self.ignore_index = num_classes, ignore_index

    def metrics(self):
        kw = dict(num_classes=self.num_classes, ignore_index=self.ignore_index)
        return {"acc": MulticlassAccuracy(average="macro", **kw),
                "acc_micro": MulticlassAccuracy(average="micro", **kw)}

    def step(self, model, batch, stage):
        logits = model(batch["input"])  # [B, T, V]
        target = batch["target"]  # [B, T]
        loss = F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(),
                               ignore_index=self.ignore_index)
        return StepOutput(loss, logits.flatten(0, 1).detach(), target.flatten())
