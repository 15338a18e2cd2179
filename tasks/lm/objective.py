"""The LM objective (conf/task/lm_*.yaml): next-token cross-entropy; val/test metrics `ppl` =
exp(mean token NLL) over every token exactly once and `tokens` (the count N)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
import torchmetrics

from tasks.common.objective import IGNORE, Objective, StepOutput


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
        nll = F.cross_entropy(logits.flatten(0, 1).float(), target, ignore_index=IGNORE,
                              reduction="none")  # [B·L], 0 where unscored
        mask = target != IGNORE
        loss = nll.sum() / mask.sum().clamp(min=1)
        tokens = mask.sum() if stage == "train" else None  # the token budget counts these
        return StepOutput(loss, nll.detach(), mask, tokens=tokens)
