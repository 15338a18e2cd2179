"""Lossless resume: a killed run continued with resume=true trains exactly as if never stopped.

Lightning alone loses three things on resume, each handled here:
- the data order: a shuffled DataLoader draws a fresh permutation and starts the epoch over;
  `ResumableSampler` draws the permutation from (seed, epoch) and starts at the batch where the
  checkpoint was taken (`LosslessResume` keeps epoch/batches in the checkpoint and restores them);
- the random streams (dropout, ...): `LosslessResume` stores and restores the RNG states;
- the curve: CSVLogger deletes csv/metrics.csv on start; `ResumableCSVLogger` keeps the rows of
  the earlier attempt up to the resumed step (later ones are redone) and appends; it also flushes
  the rows at every checkpoint, so a SIGKILL loses nothing the checkpoint has.
Plus `step_checkpoint`: last.ckpt every N optimizer steps, so a step-based run killed between
validations does not restart from step 0.

Limits (docs/framework.md, "Resume"): exact on one process; under DDP the loader is left to
Lightning's DistributedSampler (permutation from (seed, epoch), but a mid-epoch resume restarts the
epoch); random augmentations inside DataLoader workers restart their streams.
"""
from __future__ import annotations

import csv
import logging
import os
import random
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_only
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, Sampler

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


def step_checkpoint(dirpath: Path, every: int | None):
    """A ModelCheckpoint that only (re)writes last.ckpt every `every` steps (save_top_k=0: it never
    touches best.ckpt, which the monitored callback owns). None when `every` is None."""
    if not every:
        return None
    return L.pytorch.callbacks.ModelCheckpoint(
        dirpath=str(dirpath), every_n_train_steps=every, save_top_k=0, save_last=True,
        enable_version_counter=False)  # both callbacks write the same last.ckpt, not last-v1


class ResumableSampler(Sampler[int]):
    """A shuffle whose permutation depends only on (seed, epoch), starting at `start` samples into
    the epoch for the one epoch that is being resumed. len() is always the full dataset, as
    Lightning counts the batches of the resumed epoch from the restored progress."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed, self.epoch = n, int(seed), 0
        self._resume: tuple[int, int] | None = None  # (epoch, first sample) of a resumed epoch
        # the loader's generator: creating an iterator draws the workers' base seed from it;
        # reseeded per epoch, so that seed depends on (seed, epoch), not on when the run resumed
        self.loader_generator = torch.Generator().manual_seed(self._epoch_seed(0))

    def _epoch_seed(self, epoch: int) -> int:
        return self.seed * 1_000_003 + epoch

    def set_epoch(self, epoch: int) -> None:  # Lightning calls this at every epoch start
        self.epoch = int(epoch)
        self.loader_generator.manual_seed(self._epoch_seed(self.epoch))

    def resume_at(self, epoch: int, start: int) -> None:
        self.set_epoch(epoch)
        self._resume = (int(epoch), int(start))

    def permutation(self, epoch: int) -> torch.Tensor:
        return torch.randperm(self.n, generator=torch.Generator().manual_seed(self._epoch_seed(epoch)))

    def __iter__(self):
        start = 0
        if self._resume is not None:
            if self._resume[0] == self.epoch:
                start = self._resume[1]
            self._resume = None  # only the first pass after a resume is shortened
        yield from self.permutation(self.epoch)[start:].tolist()

    def __len__(self) -> int:
        return self.n


class _ResumableLoader(DataLoader):
    """Tells Lightning the loader is resumable (no "dataloader is not resumable" warning on a
    mid-epoch resume); the position itself lives in LosslessResume's checkpoint state."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


def _is_plain_shuffle(dl) -> bool:
    bs = dl.batch_sampler
    return (type(dl) is DataLoader and type(bs) is BatchSampler and type(dl.sampler) is RandomSampler
            and not dl.sampler.replacement and dl.sampler._num_samples is None)


def resumable_loader(dl, seed: int):
    """The same DataLoader with its RandomSampler replaced by a ResumableSampler; anything else
    (no shuffle, a custom sampler or DataLoader subclass, an iterable) is returned unchanged."""
    if not isinstance(dl, DataLoader) or not _is_plain_shuffle(dl):
        return dl
    sampler = ResumableSampler(len(dl.dataset), seed)
    kw = dict(batch_size=dl.batch_size, num_workers=dl.num_workers, collate_fn=dl.collate_fn,
              pin_memory=dl.pin_memory, drop_last=dl.drop_last, timeout=dl.timeout,
              worker_init_fn=dl.worker_init_fn, multiprocessing_context=dl.multiprocessing_context,
              persistent_workers=dl.persistent_workers, pin_memory_device=dl.pin_memory_device)
    if dl.num_workers > 0:
        kw["prefetch_factor"] = dl.prefetch_factor
    # an own generator: creating an iterator then draws from it, not from the global RNG (a resumed
    # run creates its iterator at another point of the global stream than an uninterrupted one)
    return _ResumableLoader(dl.dataset, sampler=sampler, generator=sampler.loader_generator, **kw)


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
    """Keeps in the checkpoint what Lightning does not: the position in the shuffled data (epoch,
    batches consumed) and the RNG states; on resume it hands the position to the sampler and
    cuts metrics.csv back to the resumed step. `wrap(datamodule)` installs the sampler."""

    def __init__(self, seed: int):
        self.seed = int(seed)
        self.epoch, self.consumed = 0, 0
        self.sampler: ResumableSampler | None = None
        self._loaded: dict | None = None
        self._world_size = 1

    def setup(self, trainer, pl_module, stage):  # before Lightning asks for the train loader
        self._world_size = trainer.world_size

    def wrap(self, dm) -> None:
        original = dm.train_dataloader

        def train_dataloader():
            if self._world_size > 1:  # Lightning's DistributedSampler (seed, epoch) stays
                return original()
            dl = resumable_loader(original(), self.seed)
            if isinstance(getattr(dl, "sampler", None), ResumableSampler):
                self.sampler = dl.sampler
                if self._loaded is not None:
                    self._apply(dl)
                    self._loaded = None  # a reload (reload_dataloaders_every_n_epochs) starts fresh
            return dl

        dm.train_dataloader = train_dataloader

    def _apply(self, dl) -> None:
        epoch, consumed = self._loaded["epoch"], self._loaded["consumed"]
        if consumed >= len(dl):  # saved on the last batch: the next epoch starts from its top
            epoch, consumed = epoch + 1, 0
        self.sampler.resume_at(epoch, consumed * dl.batch_size)
        self.epoch, self.consumed = epoch, consumed

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        # runs before ModelCheckpoint's hook (Lightning orders checkpoint callbacks last)
        self.epoch, self.consumed = trainer.current_epoch, batch_idx + 1

    def on_train_epoch_end(self, trainer, pl_module):
        self.epoch, self.consumed = trainer.current_epoch + 1, 0

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
        return {"epoch": self.epoch, "consumed": self.consumed, "rng": _rng_states()}

    def load_state_dict(self, state):
        self._loaded = {"epoch": state["epoch"], "consumed": state["consumed"]}
        _set_rng(state["rng"])


class _KeepingWriter(ExperimentWriter):
    """Lightning's writer, except that an existing metrics.csv is continued, not deleted."""

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
