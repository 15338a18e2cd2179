"""The one LightningModule every task trains through: model + objective + optimizer/scheduler."""
from __future__ import annotations

import math
from typing import Any, Callable

import lightning as L
import torch
import torch.nn as nn
from torchmetrics import MeanMetric

from .errors import ConfigError
from .objective import Objective


def make_lr_lambda(cfg: dict, total_steps: int, base_lr: float) -> Callable[[int], float]:
    """Multiplier of the base lr at scheduler step s (0-based) for cfg {name, warmup_steps,
    warmup_init_lr, min_lr, min_lr_ratio}. A step is an optimizer update, or an epoch with `interval: epoch`
    (DeiT/timm step their schedule once per epoch). Warmup is linear from warmup_init_lr at s=0
    to the base lr at s=warmup_steps, as fairseq's and timm's schedulers define it. The cosine
    floor is min_lr_ratio x lr when min_lr_ratio is set (seq_icl: 0.1, so it follows the lr of a
    sweep), else the fixed min_lr."""
    name, warm = cfg.get("name", "constant"), int(cfg.get("warmup_steps", 0) or 0)
    init = float(cfg.get("warmup_init_lr", 0.0) or 0.0) / base_lr
    total = max(total_steps, 1)

    def warmup(step):  # None after the warmup; 0.0 at s=0 from warmup_init_lr=0 is a value
        return init + (1 - init) * step / warm if warm and step < warm else None

    def after(rest):  # the warmup while it lasts, then rest(s)
        return lambda s: w if (w := warmup(s)) is not None else rest(s)

    if name == "constant":
        return after(lambda s: 1.0)
    if name == "cosine":
        ratio = cfg.get("min_lr_ratio")
        if ratio is not None and not (isinstance(ratio, (int, float)) and 0 <= ratio <= 1):
            raise ConfigError(f"scheduler.min_lr_ratio={ratio!r}: use a fraction of the lr in "
                              "[0, 1] (e.g. 0.1), or null to use scheduler.min_lr")
        floor = float(ratio) if ratio is not None else float(cfg.get("min_lr", 0.0) or 0.0) / base_lr

        def cosine(s):
            p = min(1.0, (s - warm) / max(1, total - warm))
            return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p))
        return after(cosine)
    if name == "inverse_sqrt":  # fairseq: lr * sqrt(warmup / update) after the warmup
        return after(lambda s: math.sqrt(max(warm, 1) / max(s, 1)))
    raise ConfigError(f"unknown scheduler {name!r}: use scheduler=cosine|constant|inverse_sqrt|onecycle")


def weight_decay_groups(model: nn.Module, decay: str = "matrices") -> list[dict]:
    """AdamW parameter groups. 'matrices': decay only params with >= 2 dims, minus the names in
    model.no_weight_decay() (timm's convention: pos_embed, cls_token); 'all': decay every
    parameter (fairseq and the authors' time-series code)."""
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if decay == "all":
        return [{"params": [p for _, p in params]}]
    skip = set(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else set()
    keep = [p for n, p in params if p.ndim >= 2 and n not in skip]
    rest = [p for n, p in params if not (p.ndim >= 2 and n not in skip)]
    return [{"params": keep}, {"params": rest, "weight_decay": 0.0}]


class TaskModule(L.LightningModule):
    def __init__(self, model: nn.Module, objective: Objective, optimizer: Callable,
                 scheduler: dict, monitor: str = "val/loss", decay: str = "matrices"):
        super().__init__()
        if decay not in ("matrices", "all"):
            raise ConfigError(f"unknown optimizer.decay {decay!r}: use matrices (no decay on 1-d "
                              "params and model.no_weight_decay()) or all (fairseq-style)")
        self.decay = decay
        self.model, self.objective = model, objective
        self.optimizer_factory, self.scheduler_cfg, self.monitor = optimizer, dict(scheduler), monitor
        self.val_metrics = nn.ModuleDict(objective.metrics())
        self.test_metrics = nn.ModuleDict({k: m.clone() for k, m in self.val_metrics.items()})
        # val/test loss: the batch-size-weighted mean as Lightning computes it, but summed over
        # DDP ranks exactly (Lightning's sync_dist "mean" divides the integer batch count by the
        # world size in place, truncating it: lightning/fabric/utilities/distributed.py:221-222,
        # 2.6.6); nan_strategy=disable: a NaN loss stays NaN, as before
        self.eval_loss = nn.ModuleDict({s: MeanMetric(nan_strategy="disable") for s in ("val", "test")})
        # training tokens consumed so far (a buffer: it is checkpointed, so resume keeps counting)
        self.register_buffer("tokens_seen", torch.zeros((), dtype=torch.float64))

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        out = self.objective.step(self.model, batch, "train")
        if not torch.isfinite(out.loss):
            raise FloatingPointError(f"non-finite training loss at step {self.global_step}: "
                                     "lower optimizer.lr or use precision=32-true")
        self.log("train/loss", out.loss, prog_bar=True, batch_size=batch_size(batch))
        if out.tokens is not None:  # summed over ranks: the token budget of the whole run
            self.tokens_seen += out.tokens * self.trainer.world_size
            self.log("train/tokens", self.tokens_seen, reduce_fx="max")
        return out.loss

    def _eval_step(self, batch, stage, metrics: nn.ModuleDict):
        out = self.objective.step(self.model, batch, stage)
        loss = self.eval_loss[stage]
        loss.update(out.loss.detach(), weight=batch_size(batch))
        self.log(f"{stage}/loss", loss, on_step=False, on_epoch=True)
        for name, m in metrics.items():
            m.update(out.preds, out.target)
            self.log(f"{stage}/{name}", m, on_step=False, on_epoch=True)

    def validation_step(self, batch, batch_idx):
        self._eval_step(batch, "val", self.val_metrics)

    def test_step(self, batch, batch_idx):
        self._eval_step(batch, "test", self.test_metrics)

    def configure_optimizers(self):
        opt = self.optimizer_factory(weight_decay_groups(self.model, self.decay))
        interval = self.scheduler_cfg.get("interval", "step")
        if interval not in ("step", "epoch"):
            raise ConfigError(f"scheduler.interval={interval!r}: use step or epoch")
        total = int(self.trainer.estimated_stepping_batches if interval == "step"
                    else self.trainer.max_epochs)
        if self.scheduler_cfg.get("name") == "onecycle":
            sched = torch.optim.lr_scheduler.OneCycleLR(
                opt, max_lr=[g["lr"] for g in opt.param_groups], total_steps=max(total, 2),
                pct_start=float(self.scheduler_cfg.get("pct_start", 0.3)),
                div_factor=float(self.scheduler_cfg.get("div_factor", 25.0)),
                final_div_factor=float(self.scheduler_cfg.get("final_div_factor", 1e4)),
                anneal_strategy=self.scheduler_cfg.get("anneal_strategy", "cos"))
        else:
            fn = make_lr_lambda(self.scheduler_cfg, total, opt.param_groups[0]["lr"])
            sched = torch.optim.lr_scheduler.LambdaLR(opt, fn)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": interval}}


def batch_size(batch: Any) -> int:
    if isinstance(batch, dict):
        batch = next(iter(batch.values()))
    if isinstance(batch, (list, tuple)):
        batch = batch[0]
    return int(batch.shape[0]) if hasattr(batch, "shape") else 1
