"""Lossless resume: a killed run continued with resume=true trains exactly as if never stopped.

Lightning alone loses three things on resume, each handled here:
- the data order: a shuffled DataLoader draws a fresh permutation and starts the epoch over, an
  unshuffled one (MQAR, as zoology) starts the epoch over too, so a resumed epoch repeats its
  first batches and never sees its last ones; `resumable_loader` makes either a torchdata
  StatefulDataLoader, whose state_dict (batches consumed, the shuffle generator) Lightning keeps
  in the checkpoint's fit-loop state and loads on resume;
- the random streams (dropout, ...): `LosslessResume` stores and restores the RNG states;
- the curve: CSVLogger deletes csv/metrics.csv on start; `ResumableCSVLogger` keeps the rows of
  the earlier attempt up to the resumed step (later ones are redone) and appends; it also flushes
  the rows at every checkpoint, so a SIGKILL loses nothing the checkpoint has.
Plus `StepCheckpoint`: last.ckpt every N optimizer steps, so a step-based run killed between
validations does not restart from step 0.

Limits (docs/runs.md, "Resume"): exact on one process; under DDP the loader is left to
Lightning's DistributedSampler (permutation from (seed, epoch), but a mid-epoch resume restarts the
epoch); random augmentations inside DataLoader workers restart their streams in the resumed epoch
(the workers' base seeds depend on (seed, epoch)).
"""
from __future__ import annotations

import csv
import logging
import os
import random
import warnings
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Checkpoint, ModelCheckpoint
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_only
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import RandomSampler as StatefulRandomSampler

from . import interrupt
from .ddp_eval import loader_kwargs

log = logging.getLogger("tasks.train")


def checkpoint_every(cfg) -> int | None:
    """`checkpoint_every_n_steps` (train.yaml): null = a tenth of max_steps, capped at 500 (so a
    smoke run of 50 steps saves every 5, a paper run at most every 500: a checkpoint of a large
    model costs seconds); 0 = off; max_steps=-1 (epoch-based) and null = off."""
    n = cfg.get("checkpoint_every_n_steps")
    max_steps = int(cfg.trainer.get("max_steps") or -1)
    if n is None:
        return min(500, max(1, max_steps // 10)) if max_steps > 0 else None
    n = int(n)
    return n if n > 0 else None


class StepCheckpoint(Checkpoint):
    """last.ckpt every `every` optimizer steps. At a step where a validation follows (MQAR: a
    checkpoint every 500 steps, a validation every 250) it writes again after that validation:
    Lightning's ModelCheckpoint(every_n_train_steps) saves before it, so a run resumed from
    there lost that validation from the callbacks' state (the convergence rule's values, the
    result's history: found 2026-12-04 on a resumed Figure 3 run). A Checkpoint subclass, so
    Lightning runs its hooks after every other callback's."""

    def __init__(self, path: Path, every: int):
        self.path, self.every, self.saved_at = str(path), int(every), -1

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step % self.every == 0 and trainer.global_step != self.saved_at:
            self._save(trainer)

    def on_train_batch_start(self, trainer, *args):
        self._covered(trainer)

    def on_validation_start(self, trainer, pl_module):
        self._covered(trainer)

    def on_train_end(self, trainer, pl_module):
        self._covered(trainer)

    def on_exception(self, trainer, pl_module, exception):
        interrupt.release_stops(raise_pending=False)

    def _covered(self, trainer):
        """The row of the checkpoint's last batch is logged by now (Lightning logs it after
        on_train_batch_end): write it to disk (a SIGKILL keeps it), then let a held stop go."""
        if interrupt.holding():
            if trainer.is_global_zero:
                for lg in trainer.loggers:
                    lg.save()
            interrupt.release_stops()

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking and trainer.state.fn == TrainerFn.FITTING \
                and trainer.global_step == self.saved_at:
            self._save(trainer)  # the same step, now with its validation

    def _save(self, trainer):
        # as ModelCheckpoint saves: the full state, then the loggers hear of it (the CSV logger
        # flushes its rows); the last batch's row comes after this hook: _covered
        interrupt.hold_stops()
        trainer.save_checkpoint(self.path, weights_only=False)
        self.saved_at = trainer.global_step
        if trainer.is_global_zero:
            for lg in trainer.loggers:
                lg.after_save_checkpoint(self)


class MovableCheckpoint(ModelCheckpoint):
    """Lightning's ModelCheckpoint, resumable from a run dir that moved (`make carry` and `make
    rekey` rename it; a copy to another worktree or machine). A run resumes only from its own
    checkpoints/last.ckpt, so the files the state names moved with it; Lightning's own load
    drops best_model_score when the stored dirpath differs, and the next validation then
    replaced best.ckpt whatever its score (found 2026-12-06 on a Table 1 run extended to a
    raised cap: the reported test runs on best.ckpt). Here the stored paths are re-rooted."""

    @property
    def state_key(self) -> str:  # ModelCheckpoint's: checkpoints of either class load into both
        key = super().state_key
        return "ModelCheckpoint" + key[len(type(self).__qualname__):]

    def load_state_dict(self, state_dict: dict) -> None:
        old = state_dict.get("dirpath")
        if old and self.dirpath and old != self.dirpath:
            def move(p):  # a path inside the old dir -> the same name inside the new one
                inside = isinstance(p, str) and p.startswith(old.rstrip("/") + "/")
                return self.dirpath.rstrip("/") + p[len(old.rstrip("/")):] if inside else p
            state_dict = {**state_dict, "dirpath": self.dirpath,
                          **{k: move(state_dict[k]) for k in
                             ("best_model_path", "kth_best_model_path", "last_model_path")
                             if k in state_dict},
                          "best_k_models": {move(k): v for k, v in
                                            (state_dict.get("best_k_models") or {}).items()}}
        super().load_state_dict(state_dict)


def _epoch_seed(seed: int, epoch: int) -> int:
    return int(seed) * 1_000_003 + int(epoch)


def _plain_order(dl) -> str | None:
    """"shuffle" / "sequential" for a DataLoader built with shuffle=True / False and nothing
    custom (sampler, batch sampler, subclass); else None."""
    if type(dl) is not DataLoader or type(dl.batch_sampler) is not BatchSampler:
        return None
    s = dl.sampler
    if type(s) is SequentialSampler:
        return "sequential"
    if type(s) is RandomSampler and not s.replacement and s.num_samples == len(dl.dataset):
        return "shuffle"
    return None


def resumable_loader(dl, seed: int):
    """The same DataLoader as a torchdata StatefulDataLoader, whose state_dict (the position in
    the epoch and the shuffle generator) Lightning saves in the checkpoint and loads on resume;
    anything else (a custom sampler or DataLoader subclass, an iterable) is returned unchanged."""
    order = _plain_order(dl)
    if order is None:
        return dl
    # Two generators, not StatefulDataLoader(shuffle=True, generator=g): torchdata 0.11.0 saves
    # the sampler generator's state before the epoch's permutation, and DataLoader then draws the
    # workers' base seed from that same generator; resumed, the loader is one draw short and every
    # epoch after the resumed one is shuffled differently (the identity test failed at steps 12-19).
    sampler = (StatefulRandomSampler(dl.dataset, generator=torch.Generator().manual_seed(int(seed)))
               if order == "shuffle" else SequentialSampler(dl.dataset))  # position: batches yielded
    # the loader's own generator (workers' base seeds), reseeded per epoch by LosslessResume: not
    # the global RNG, which a resumed run would draw from at another point of its stream
    loader_gen = torch.Generator().manual_seed(_epoch_seed(seed, 0))
    with warnings.catch_warnings():  # torchdata 0.11.0 calls torch.set_vital (deprecated, 2.14)
        warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
        return StatefulDataLoader(dl.dataset, sampler=sampler, generator=loader_gen,
                                  **loader_kwargs(dl))


def _rng_states() -> dict:
    """torch/CUDA/python/numpy RNG states as types torch.load(weights_only=True) accepts (Lightning
    loads checkpoints that way: a numpy array in the state would refuse the resume)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    out = {"torch": torch.get_rng_state(), "python": random.getstate(),
           "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss]}
    if torch.cuda.is_available():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def _set_rng(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, g = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, g))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class LosslessResume(L.Callback):
    """Keeps in the checkpoint what Lightning does not: the RNG states; on resume it cuts
    metrics.csv back to the resumed step. `wrap(datamodule)` makes the shuffled train loader a
    StatefulDataLoader (its position Lightning saves and restores itself)."""

    def __init__(self, seed: int):
        self.seed = int(seed)
        self.loader = None
        self._world_size = 1

    def setup(self, trainer, pl_module, stage):  # before Lightning asks for the train loader
        self._world_size = trainer.world_size

    def wrap(self, dm) -> None:
        original = dm.train_dataloader

        def train_dataloader():
            if self._world_size > 1:  # Lightning's DistributedSampler (seed, epoch) stays
                return original()
            self.loader = resumable_loader(original(), self.seed)
            return self.loader

        dm.train_dataloader = train_dataloader

    def on_train_epoch_start(self, trainer, pl_module):
        # before the epoch's iterator is created (not called for a resumed mid-epoch: that
        # iterator's base seed comes from the loader's state): worker seeds depend on (seed, epoch)
        if isinstance(self.loader, StatefulDataLoader):
            self.loader.generator.manual_seed(_epoch_seed(self.seed, trainer.current_epoch))

    def on_train_start(self, trainer, pl_module):
        if trainer.ckpt_path:  # resumed: the global step is restored by now
            for lg in trainer.loggers:
                if isinstance(lg, ResumableCSVLogger):
                    lg.cut_after(trainer.global_step)

    def on_load_checkpoint(self, trainer, pl_module, checkpoint):
        if trainer.state.fn == "fit":  # (not the test's load of best.ckpt)
            log.info("resume: continuing from %s at step %s", trainer.ckpt_path,
                     checkpoint.get("global_step", "?"))

    def state_dict(self):
        return {"rng": _rng_states()}

    def load_state_dict(self, state):
        if "consumed" in state:  # written by resume.py before torchdata carried the position
            log.warning("resume: this checkpoint predates the StatefulDataLoader: the rest of "
                        "epoch %s is drawn in a new order (weights and RNG states are restored)",
                        state["epoch"])
        _set_rng(state["rng"])


class _KeepingWriter(ExperimentWriter):
    """Lightning's writer, except that an existing metrics.csv is continued, not deleted.
    Lightning has no public switch for that: this overrides the writer's private
    `_check_log_dir_exists` and ResumableCSVLogger sets CSVLogger's private `_experiment`, as
    CSVLogger.experiment does (checked: lightning 2.6.6; guarded by
    tests/framework/test_framework_private_apis.py)."""

    def __init__(self, log_dir: str, keep: bool):
        self._keep = keep
        super().__init__(log_dir)

    def _check_log_dir_exists(self) -> None:
        path = Path(self.metrics_file_path)
        if not self._keep or not path.is_file():
            return super()._check_log_dir_exists()
        with path.open(newline="") as f:
            self.metrics_keys = list(csv.DictReader(f).fieldnames or [])


class ResumableCSVLogger(L.pytorch.loggers.CSVLogger):
    """CSVLogger that continues csv/metrics.csv when `keep` (resuming) and writes its buffered rows
    to disk at every checkpoint."""

    def __init__(self, *args, keep: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self._keep = keep

    @property
    @rank_zero_experiment
    def experiment(self):
        if self._experiment is None:
            os.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _KeepingWriter(log_dir=self.log_dir, keep=self._keep)
        return self._experiment

    @rank_zero_only
    def cut_after(self, step: int) -> None:
        """Drop the earlier attempt's rows logged at `step` or later: the resumed run logs them
        again (train rows of the step-th batch carry step-1, validation rows carry the step)."""
        path = Path(self.log_dir) / ExperimentWriter.NAME_METRICS_FILE
        if not path.is_file():
            return
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            keys, rows = reader.fieldnames, [r for r in reader if int(r["step"]) < step]
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)
        log.info("resume: kept %d rows of %s (steps < %d)", len(rows), path, step)

    def after_save_checkpoint(self, checkpoint_callback) -> None:
        super().after_save_checkpoint(checkpoint_callback)
        self.save()
