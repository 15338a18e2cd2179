"""Loss and metrics of the image classification task (DeiT recipe).

Train: timm Mixup (mixup α 0.8, cutmix α 1.0, prob 1, switch 0.5, per batch) with label smoothing
0.1 folded into the soft targets, then soft-target cross-entropy. Val/test: plain cross-entropy
and torchmetrics top-1 / top-5 accuracy (micro: the fraction of images, as ImageNet reports).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torchmetrics.classification import MulticlassAccuracy

from tasks.common.objective import Objective, StepOutput


class VisionObjective(Objective):
    def __init__(self, num_classes: int = 1000, mixup: float = 0.8, cutmix: float = 1.0,
                 mixup_prob: float = 1.0, switch_prob: float = 0.5, mixup_mode: str = "batch",
                 smoothing: float = 0.1):
        super().__init__()
        self.num_classes, self.smoothing = num_classes, smoothing
        self.mixup_fn = None
        if mixup > 0 or cutmix > 0:
            from timm.data import Mixup
            self.mixup_fn = Mixup(mixup_alpha=mixup, cutmix_alpha=cutmix, prob=mixup_prob,
                                  switch_prob=switch_prob, mode=mixup_mode,
                                  label_smoothing=smoothing, num_classes=num_classes)

    def metrics(self) -> dict:
        top5 = min(5, self.num_classes)  # logged as val/acc1, val/acc5 (conf/table/table3.yaml)
        return {"acc1": MulticlassAccuracy(self.num_classes, top_k=1, average="micro"),
                f"acc{top5}": MulticlassAccuracy(self.num_classes, top_k=top5, average="micro")}

    def train_loss(self, model, images, labels) -> torch.Tensor:
        if self.mixup_fn is not None:
            if images.shape[0] % 2:
                raise ValueError(f"mixup needs an even batch, got {images.shape[0]}: use an even "
                                 "batch_size with drop_last")
            images, soft = self.mixup_fn(images, labels)  # soft [B, C], smoothing included
            logits = model(images)  # [B, C]
            return torch.sum(-soft * F.log_softmax(logits.float(), dim=-1), dim=-1).mean()
        return F.cross_entropy(model(images).float(), labels, label_smoothing=self.smoothing)

    def step(self, model, batch, stage: str) -> StepOutput:
        images, labels = batch  # [B, 3, S, S], [B]
        if stage == "train":
            return StepOutput(loss=self.train_loss(model, images, labels))
        logits = model(images).float()  # [B, C]
        return StepOutput(loss=F.cross_entropy(logits, labels), preds=logits, target=labels)
