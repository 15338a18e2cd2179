"""MAD's objective (conf/task/mad.yaml): cross-entropy over scored positions and mad-lab's metrics."""
from __future__ import annotations

import torch.nn.functional as F

from tasks.common.objective import IGNORE, StepOutput, TokenClassification
from tasks.synthetic_common.objective import (BatchMeanMacroAccuracy, BatchMeanPerplexity,
                                              PooledAccuracy)

from .settings import resolve_setting


class MADObjective(TokenClassification):
    """Cross-entropy over scored positions. Metrics (each logged as val/<name>, test/<name>):
    - `acc`: mad-lab's reported accuracy, the mean of per-batch macro accuracies;
    - `acc_pooled`: one macro accuracy over the whole test set (this suite's metric before);
    - `acc_micro`: correct / scored positions;
    - `ppl`: perplexity of each batch averaged over batches: what mad-lab's best checkpoint
      minimises (test/Perplexity_epoch, reduced as Lightning reduces its per-step values).
    Preds keep their [B, T, V] shape so that the per-batch metric sees one batch per update.
    """

    def __init__(self, mad_task: str, setting: str = "baseline"):
        super().__init__(num_classes=resolve_setting(mad_task, setting)["vocab_size"])

    def metrics(self):
        C = self.num_classes
        return {"acc": BatchMeanMacroAccuracy(C), "acc_pooled": PooledAccuracy(C, "macro"),
                "acc_micro": PooledAccuracy(C, "micro"), "ppl": BatchMeanPerplexity()}

    def step(self, model, batch, stage):
        logits = model(batch["input"])  # [B, T, V]
        target = batch["target"]  # [B, T]
        loss = F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(), ignore_index=IGNORE)
        return StepOutput(loss, logits.detach().float(), target)
