"""Exact evaluation under DDP: every validation/test example scored exactly once, in the same
batches as one process, so a W-process run reports the single-process metrics (to float rounding).

Lightning gives each rank a DistributedSampler that pads the set to a multiple of W with repeated
examples (its warning: "replicates some samples to make sure all devices have same batch size"),
so a padded example counts twice in every metric. Here rank r of W instead gets the
single-process batches r, r+W, r+2W, ... of the eval loader (`BatchAlignedSampler`): no example
repeated, and every batch the one a single process sees, so even a per-batch quantity (the
logged mean loss, weighted by batch size) sums to the same total. The ranks then differ by at
most one batch, which is safe in evaluation: DDP syncs nothing in a forward pass under no_grad,
and the metrics sync once at the epoch end (torchmetrics sums their states over the ranks;
Lightning's `self.log(..., sync_dist=True)` means sync sum-of-values and sum-of-batch-sizes
alike, so their ratio is the global weighted mean).

An integer `trainer.limit_val_batches` / `limit_test_batches` keeps its single-process meaning
(the first L batches of the set, split over the ranks), not L batches per rank. A float limit
is left to Lightning (per rank: about the same fraction). Iterable datasets have no sampler:
Lightning does not split them either, so each rank scores the whole set (means are right,
counts W times too large), and so is a shuffled eval loader (each rank would draw its own
order); no task of this suite has either.
"""
from __future__ import annotations

from lightning.pytorch.utilities.model_helpers import is_overridden
from torch.utils.data import DataLoader, DistributedSampler, SequentialSampler

from .errors import ConfigError


def single_process_batches(indices: list[int], batch_size: int, drop_last: bool,
                           limit: int | None = None) -> list[list[int]]:
    """The batches one process would draw from `indices` (the eval loader's sampler order)."""
    batches = [indices[i:i + batch_size] for i in range(0, len(indices), batch_size)]
    if drop_last and batches and len(batches[-1]) < batch_size:
        batches.pop()
    return batches if limit is None else batches[:limit]


class BatchAlignedSampler(DistributedSampler):
    """Rank r of W: the indices of the single-process batches r, r+W, ... in order. The loader
    batches them by the same batch_size, so each of its batches is a single-process batch (only
    the set's last batch may be short, and it is the last one of whichever rank has it). A
    DistributedSampler subclass, so Lightning leaves it in place instead of injecting its own."""

    def __init__(self, base, batch_size: int, drop_last: bool, num_replicas: int, rank: int,
                 limit: int | None = None, what: str = "eval"):
        super().__init__(base, num_replicas=num_replicas, rank=rank, shuffle=False)
        self.base, self.batch_size, self.drop_last, self.limit = base, batch_size, drop_last, limit
        n = len(self._batches())
        if n < num_replicas:  # a rank with no batch would wait forever in the epoch-end sync
            raise ConfigError(
                f"the {what} set has {n} batch(es) of {batch_size}, fewer than the {num_replicas} "
                "DDP processes: lower its batch size or trainer.devices (or raise its limit)")
        self.num_samples = sum(len(b) for b in self._batches()[rank::num_replicas])
        self.total_size = sum(len(b) for b in self._batches())

    def _batches(self) -> list[list[int]]:
        return single_process_batches(list(iter(self.base)), self.batch_size, self.drop_last,
                                      self.limit)

    def __iter__(self):
        for batch in self._batches()[self.rank::self.num_replicas]:
            yield from batch

    def __len__(self) -> int:
        return self.num_samples


def loader_kwargs(dl: DataLoader, **over) -> dict:
    """What a copy of DataLoader `dl` over another sampler keeps (this module, resume.py)."""
    kw = dict(batch_size=dl.batch_size, num_workers=dl.num_workers, collate_fn=dl.collate_fn,
              pin_memory=dl.pin_memory, drop_last=dl.drop_last, timeout=dl.timeout,
              worker_init_fn=dl.worker_init_fn, multiprocessing_context=dl.multiprocessing_context,
              persistent_workers=dl.persistent_workers, pin_memory_device=dl.pin_memory_device)
    if dl.num_workers > 0:
        kw["prefetch_factor"] = dl.prefetch_factor
    return {**kw, **over}


def exact_loader(dl, world_size: int, rank: int, limit=None, what: str = "eval"):
    """The eval DataLoader `dl` with a BatchAlignedSampler; anything else (a list of loaders, an
    iterable dataset, a custom or shuffling sampler (each rank would draw its own order), a
    custom batch sampler, one process) is returned unchanged, to Lightning's own sampler."""
    if world_size <= 1 or not isinstance(dl, DataLoader) or dl.batch_size is None \
            or type(dl.sampler) is not SequentialSampler:
        return dl
    limit = int(limit) if isinstance(limit, int) and not isinstance(limit, bool) else None
    sampler = BatchAlignedSampler(dl.sampler, dl.batch_size, dl.drop_last, world_size, rank,
                                  limit, what)
    return DataLoader(dl.dataset, sampler=sampler, **loader_kwargs(dl, drop_last=False))


def wrap(dm) -> None:
    """Replace the datamodule's val/test loaders by exact ones when its trainer runs > 1 process
    (dm.trainer is set by the time Lightning asks for a loader)."""
    import lightning as L
    for stage, limit_attr in (("val", "limit_val_batches"), ("test", "limit_test_batches")):
        if not is_overridden(f"{stage}_dataloader", dm, L.LightningDataModule):
            continue  # (a wrapper would make Lightning believe the datamodule has that loader)
        original = getattr(dm, f"{stage}_dataloader")

        def loader(original=original, stage=stage, limit_attr=limit_attr):
            dl = original()
            trainer = getattr(dm, "trainer", None)
            if trainer is None or trainer.world_size <= 1:
                return dl
            return exact_loader(dl, trainer.world_size, trainer.global_rank,
                                getattr(trainer, limit_attr, None), stage)

        setattr(dm, f"{stage}_dataloader", loader)
