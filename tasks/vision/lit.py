"""LightningModule for the standalone Table 3 runner: DeiT's optimiser and schedule.

AdamW (eps 1e-8) with weight decay on matrices only: timm's create_optimizer_v2 leaves biases,
norms (1-D parameters) and the model's no_weight_decay() set (pos_embed, cls_token) undecayed,
as DeiT does. LR: linear warmup from warmup_lr over warmup_epochs, then cosine to min_lr,
updated every optimizer step (DeiT steps timm's scheduler once per epoch; per step is the same
curve without the staircase).
"""
from __future__ import annotations

import math

import lightning as L
import torch
import torch.nn as nn


def warmup_cosine(step: int, total: int, warmup: int, lr: float, warmup_lr: float,
                  min_lr: float) -> float:
    """The learning rate at optimizer step `step` (0-based) of `total`."""
    if step < warmup:
        return warmup_lr + (lr - warmup_lr) * step / max(1, warmup)
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * t))


class VisionClassifier(L.LightningModule):
    def __init__(self, model: nn.Module, objective, lr: float = 1e-3, weight_decay: float = 0.05,
                 warmup_epochs: float = 5, warmup_lr: float = 1e-6, min_lr: float = 1e-5):
        super().__init__()
        self.model, self.objective = model, objective
        self.lr, self.weight_decay = lr, weight_decay
        self.warmup_epochs, self.warmup_lr, self.min_lr = warmup_epochs, warmup_lr, min_lr
        self.val_metrics = nn.ModuleDict(objective.metrics())
        self.history: list[dict] = []

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        loss = self.objective.step(self.model, batch, "train").loss
        self.log("train/loss", loss, prog_bar=True, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        out = self.objective.step(self.model, batch, "val")
        n = out.target.shape[0]
        self._val_loss_sum += float(out.loss) * n
        self._val_count += n
        for metric in self.val_metrics.values():
            metric.update(out.preds, out.target)

    def on_validation_epoch_start(self):
        self._val_loss_sum, self._val_count = 0.0, 0

    def on_validation_epoch_end(self):
        # computed and reset here (not logged as Metric objects) so the history below sees this
        # epoch's values, not the previous epoch's
        vals = {f"val/{k}": float(m.compute()) for k, m in self.val_metrics.items()}
        vals["val/loss"] = self._val_loss_sum / max(1, self._val_count)
        for m in self.val_metrics.values():
            m.reset()
        self.log_dict(vals)
        if not self.trainer.sanity_checking:
            self.history.append({"epoch": self.current_epoch, "step": self.global_step, **vals})

    def configure_optimizers(self):
        from timm.optim import create_optimizer_v2
        opt = create_optimizer_v2(self.model, "adamw", lr=self.lr, weight_decay=self.weight_decay,
                                  eps=1e-8)
        total = max(1, int(self.trainer.estimated_stepping_batches))
        epochs = max(1, self.trainer.max_epochs or 1)
        warmup = int(round(self.warmup_epochs * total / epochs))
        base = self.lr

        def factor(step):  # LambdaLR multiplies each group's initial lr (= self.lr)
            return warmup_cosine(step, total, warmup, base, self.warmup_lr, self.min_lr) / base

        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
