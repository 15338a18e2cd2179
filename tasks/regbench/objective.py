"""RegBench's objective (cross-entropy on letter targets) and metrics (seq_icl `train.py::_get_dfa_accuracy` and the model-vs-DFA L1 distance).

- accuracy: at every position whose next token is a letter (target != -100), the greedy
  prediction is right when the current string plus that token is still a path of the automaton
  (a separator or pad prediction is wrong). Summed over all scored positions of the set (micro);
  seq_icl logs the per-batch ratio averaged over batches, which weights batches equally.
- l1: mean over non-pad input positions of sum_v |softmax(logits)_v - p_dfa(v)|, with p_dfa
  uniform over the letters the automaton allows next (at a string's end too, as seq_icl).
"""
from __future__ import annotations

import torch
from torchmetrics import Metric

from tasks.common.objective import IGNORE, StepOutput, TokenClassification

from .data import VOCAB


def validity(logits: torch.Tensor, target: torch.Tensor, valid: torch.Tensor):
    """(correct, scored) counts. logits [B, T, V] or predicted ids [B, T]; valid [B, T, V] bool."""
    pred = logits.argmax(-1) if logits.dim() == 3 else logits
    scored = target != IGNORE
    ok = valid.gather(-1, pred[..., None].long())[..., 0] & scored
    return int(ok.sum()), int(scored.sum())


def l1_to_dfa(logits: torch.Tensor, valid: torch.Tensor, input_ids: torch.Tensor, pad: int = 0):
    """(sum of L1 distances, positions) over positions whose input is not pad."""
    p_model = torch.softmax(logits.float(), dim=-1)  # [B, T, V]
    p_dfa = valid.float() / valid.float().sum(-1, keepdim=True).clamp(min=1)
    live = input_ids != pad
    dist = (p_model - p_dfa).abs().sum(-1)[live]
    return float(dist.sum()), int(live.sum())


class RegBenchAccuracy(Metric):
    """update(logits [B, T, V], (target [B, T], valid [B, T, V])) -> correct / scored."""
    full_state_update = False

    def __init__(self):
        super().__init__()
        self.add_state("correct", torch.tensor(0.0), dist_reduce_fx="sum")
        self.add_state("total", torch.tensor(0.0), dist_reduce_fx="sum")

    def update(self, preds, target):
        tgt, valid = target[0], target[1]
        c, n = validity(preds, tgt, valid)
        self.correct += c
        self.total += n

    def compute(self):
        return self.correct / self.total.clamp(min=1)


class DFADistance(Metric):
    """update(logits [B, T, V], (target, valid, input)) -> mean L1 to the automaton's next-token law."""
    full_state_update = False

    def __init__(self):
        super().__init__()
        self.add_state("dist", torch.tensor(0.0), dist_reduce_fx="sum")
        self.add_state("total", torch.tensor(0.0), dist_reduce_fx="sum")

    def update(self, preds, target):
        _, valid, inputs = target
        d, n = l1_to_dfa(preds, valid, inputs)
        self.dist += d
        self.total += n

    def compute(self):
        return self.dist / self.total.clamp(min=1)


class RegBenchObjective(TokenClassification):
    def __init__(self):
        super().__init__(num_classes=VOCAB)

    def metrics(self):
        return {"acc": RegBenchAccuracy(), "l1": DFADistance()}

    def step(self, model, batch, stage):
        logits = model(batch["input"])  # [B, T, V]
        out = super().step(lambda x: logits, batch, stage)
        return StepOutput(out.loss, logits.detach(),
                          (batch["target"], batch["valid"], batch["input"]))
