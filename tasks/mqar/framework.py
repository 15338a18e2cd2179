"""MQAR plugged into the experiment framework (tasks/INTERFACE.md).

Datamodule: zoology's generator (tasks/mqar/data.py), train and test from different seeds,
cached on disk; the test set doubles as validation (zoology evaluates and early-stops on it).
Objective: cross-entropy on the query positions; metric `acc` = zoology's accuracy (mean over an
example's queries, then over examples) and `acc_micro`.
"""
from __future__ import annotations

import torch
from torchmetrics import Metric

from tasks.common.errors import ConfigError
from tasks.common.objective import StepOutput, TokenClassification
from tasks.synthetic_common.cache import split_seed
from tasks.synthetic_common.datamodule import TrainTestDataModule
from tasks.synthetic_common.metrics import per_example_accuracy
from tasks.synthetic_common.models import MQARModel

from .data import multiquery_ar


class MQARDataModule(TrainTestDataModule):
    name = "mqar"

    def __init__(self, seq_len: int = 64, num_kv_pairs: int = 4, vocab_size: int = 8192,
                 num_train: int = 100_000, num_test: int = 3_000, batch_size: int = 512,
                 power_a: float = 0.01, random_non_queries: bool = False, seed: int = 0,
                 data_path: str | None = None, num_workers: int = 0):
        super().__init__(batch_size, seed, data_path, num_workers)
        if vocab_size <= seq_len or 4 * num_kv_pairs > seq_len or seq_len % 2:
            raise ConfigError(f"MQAR needs an even seq_len < vocab_size and 4*num_kv_pairs <= "
                              f"seq_len (got L={seq_len}, pairs={num_kv_pairs}, V={vocab_size}): "
                              "fix task.datamodule.seq_len / num_kv_pairs")
        self.cfg = dict(vocab_size=vocab_size, input_seq_len=seq_len, num_kv_pairs=num_kv_pairs,
                        power_a=power_a, random_non_queries=random_non_queries)
        self.sizes = {"train": num_train, "test": num_test}

    def cache_key(self, split):
        return dict(self.cfg, num_examples=self.sizes[split])

    def generate(self, split):
        return multiquery_ar(seed=split_seed(self.seed, split), **self.cache_key(split))


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


def build_mqar_model(mixer, *, vocab_size: int = 8192, d_model: int = 128, n_layers: int = 2,
                     n_heads: int = 1, max_positions: int = 0, causal: bool = True, **_generic):
    """zoology's 2-block model without MLP around `mixer` (a MixerSpec). `_generic` swallows the
    generic SequenceBackbone keys of conf/backbone/*.yaml."""
    factory = lambda d: mixer(d, n_heads, causal=causal)
    return MQARModel(vocab_size, factory, d_model=d_model, n_layers=n_layers,
                     max_positions=max_positions)
