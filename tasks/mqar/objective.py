"""MQAR's objective: cross-entropy on the query positions; metric `acc` = zoology's accuracy (mean
over an example's queries, then over examples) and `acc_micro`."""
from __future__ import annotations

import torch
from torchmetrics import Metric

from tasks.common.objective import StepOutput, TokenClassification
from tasks.synthetic_common.objective import per_example_accuracy


class ExampleMeanAccuracy(Metric):
    """zoology's MQAR accuracy: per example mean over labelled positions, then mean over examples."""
    full_state_update = False

    def __init__(self):
        super().__init__()
        self.add_state("total", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, preds, target):
        acc = per_example_accuracy(preds, target)  # [B]
        acc = acc[~torch.isnan(acc)]
        self.total += acc.sum()
        self.count += acc.numel()

    def compute(self):
        return (self.total / self.count.clamp(min=1)).float()


class MQARObjective(TokenClassification):
    def __init__(self, vocab_size: int = 8192):
        super().__init__(num_classes=vocab_size)

    def metrics(self):
        from torchmetrics.classification import MulticlassAccuracy
        return {"acc": ExampleMeanAccuracy(),
                "acc_micro": MulticlassAccuracy(self.num_classes, average="micro",
                                                ignore_index=-100)}

    def step(self, model, batch, stage):
        out = super().step(model, batch, stage)
        if stage == "train":
            return out
        B = batch["target"].shape[0]
        preds = out.preds.argmax(-1).view(B, -1)  # [B, T] ids: keeps metric memory small
        return StepOutput(out.loss, preds, batch["target"])
