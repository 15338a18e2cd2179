"""Accuracies used by the synthetic benchmarks; all ignore positions whose target is -100.

- `ClassAccuracy`: streaming macro (MAD's metric: torchmetrics MulticlassAccuracy, average='macro')
  and micro accuracy over a whole evaluation set.
- `per_example_accuracy`: MQAR's metric (mean over an example's labelled positions, then over
  examples).
"""
from __future__ import annotations

import torch

IGNORE = -100


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
