"""Accuracies used by the synthetic benchmarks; all ignore positions whose target is -100.

- `ClassAccuracy`: streaming macro (torchmetrics MulticlassAccuracy, average='macro') and micro
  accuracy over a whole evaluation set.
- `BatchMeanMacroAccuracy`: MAD's reported accuracy as mad-lab computes it: the macro accuracy of
  each evaluation batch, averaged over the batches (weighted by batch size, as Lightning reduces
  a per-step tensor logged with on_epoch=True). `PooledAccuracy` is the whole-set macro (or micro).
- `BatchMeanPerplexity`: mad-lab's checkpoint monitor (test/Perplexity_epoch), reduced the same way.
- `per_example_accuracy`: MQAR's metric (mean over an example's labelled positions, then over
  examples).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torchmetrics import Metric
from torchmetrics.classification import MulticlassAccuracy

from tasks.common.objective import IGNORE


class ClassAccuracy:
    """Accumulates per-class counts over batches; `macro()` and `micro()` at the end.

    macro = mean over classes of recall tp/(tp+fn), where (exactly as torchmetrics' macro average)
    a class counts when it occurs in the targets *or* the predictions: a class only ever predicted
    scores 0 and still lowers the mean; classes never seen at all are left out.
    micro = correct / scored positions.

    >>> acc = ClassAccuracy(3)
    >>> acc.update(torch.tensor([0, 0, 1, 2]), torch.tensor([0, 1, 1, -100]))
    >>> round(acc.macro(), 4), round(acc.micro(), 4)
    (0.75, 0.6667)
    """

    def __init__(self, num_classes: int):
        self.num_classes = num_classes
        self.tp = torch.zeros(num_classes, dtype=torch.long)
        self.support = torch.zeros(num_classes, dtype=torch.long)  # tp + fn
        self.predicted = torch.zeros(num_classes, dtype=torch.long)  # tp + fp

    def update(self, preds: torch.Tensor, targets: torch.Tensor) -> None:
        """preds: predicted class ids (any shape) or logits [..., C]; targets: ids, -100 ignored."""
        if preds.dim() == targets.dim() + 1:
            preds = preds.argmax(-1)
        preds, targets = preds.reshape(-1).cpu(), targets.reshape(-1).cpu()
        keep = targets != IGNORE
        preds, targets = preds[keep], targets[keep]
        C = self.num_classes
        self.tp += torch.bincount(targets[preds == targets], minlength=C)[:C]
        self.support += torch.bincount(targets, minlength=C)[:C]
        self.predicted += torch.bincount(preds.clamp(0, C - 1), minlength=C)[:C]

    def macro(self) -> float:
        seen = (self.support + self.predicted) > 0
        if not seen.any():
            return 0.0
        recall = self.tp[seen].double() / self.support[seen].clamp(min=1).double()
        return float(recall.mean())

    def micro(self) -> float:
        total = int(self.support.sum())
        return float(self.tp.sum()) / total if total else 0.0


def per_example_accuracy(preds: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """MQAR accuracy of each example: preds/targets [B, T] (preds may be logits [B, T, V]).

    Returns [B] = mean over labelled positions of (pred == target); examples without labels
    give NaN (they do not occur in MQAR, every example has num_kv_pairs queries).
    """
    if preds.dim() == targets.dim() + 1:
        preds = preds.argmax(-1)
    scored = targets != IGNORE
    correct = ((preds == targets) & scored).sum(-1).double()
    return correct / scored.sum(-1).double()


class _BatchMean(Metric):
    """sum_b B_b * value(batch b) / sum_b B_b: how Lightning reduces a per-batch tensor that is
    logged with on_epoch=True (mad-lab logs its metrics' per-batch values that way)."""
    full_state_update = False

    def __init__(self):
        super().__init__()
        self.add_state("weighted", default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("batches", default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")

    def batch_value(self, preds: torch.Tensor, target: torch.Tensor) -> float:
        raise NotImplementedError

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        size = target.shape[0] if target.dim() > 1 else 1  # sequences in the batch
        self.weighted += self.batch_value(preds.detach(), target) * size
        self.batches += size

    def compute(self) -> torch.Tensor:
        return (self.weighted / self.batches.clamp(min=1)).float()


class BatchMeanPerplexity(_BatchMean):
    """mad-lab's test/Perplexity_epoch: exp(mean NLL over the batch's scored tokens), averaged
    over batches. update(logits [B, T, V], target [B, T])."""

    def batch_value(self, preds, target):
        nll = F.cross_entropy(preds.flatten(0, -2).double(), target.flatten(), ignore_index=IGNORE)
        return float(torch.exp(nll))


class BatchMeanMacroAccuracy(_BatchMean):
    """mad-lab's epoch accuracy: mean over batches of each batch's macro accuracy.

    mad-lab logs `MulticlassAccuracy(average='macro')(batch)` per step with on_epoch=True, so the
    epoch value is sum_b B_b * macro_b / sum_b B_b (B_b = sequences in batch b); a class absent
    from one batch does not count in that batch's mean, so this differs from the pooled macro
    (memorization V2048: 0.882 against 0.902 on the same predictions).
    update(preds [B, T, V] logits or [B, T] ids, target [B, T] with -100 unscored).
    """

    def __init__(self, num_classes: int):
        super().__init__()
        self.num_classes = num_classes

    def batch_value(self, preds, target):
        acc = ClassAccuracy(self.num_classes)
        acc.update(preds, target)
        return acc.macro()


class PooledAccuracy(MulticlassAccuracy):
    """torchmetrics accuracy over the whole evaluation set (`average` macro or micro), taking
    [B, T, V] logits or [B, T] ids as mad-lab's Accuracy does (flatten, argmax)."""

    def __init__(self, num_classes: int, average: str = "macro"):
        super().__init__(num_classes=num_classes, average=average, ignore_index=IGNORE)

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        if preds.dim() == target.dim() + 1:
            preds = preds.argmax(-1)
        super().update(preds.reshape(-1), target.reshape(-1))
