"""The callback that turns a finished run into results/runs/<table>/<run_id>.json."""
from __future__ import annotations

import math
import time
from datetime import datetime, timezone
from pathlib import Path

import lightning as L
import torch

from .backbone import count_parameters
from .runinfo import write_json_atomic


def _scalars(metrics: dict, prefixes=("val/", "test/", "train/")) -> dict:
    out = {}
    for k, v in metrics.items():
        if k.startswith(prefixes):
            v = v.item() if torch.is_tensor(v) else v
            if isinstance(v, (int, float)):
                out[k] = float(v)
    return out


class ResultWriter(L.Callback):
    """Collects the validation history, the best validation snapshot (by `monitor`) and the test
    metrics; `write()` (called by tasks.train when everything finished) saves the JSON. The
    history and best survive resume (callback state is stored in the checkpoint)."""

    def __init__(self, path: Path, meta: dict, monitor: str, mode: str):
        self.path, self.meta, self.monitor, self.mode = Path(path), meta, monitor, mode
        self.history: list[dict] = []
        self.best: dict = {}
        self.test: dict = {}
        self.wall_prev = 0.0  # wall time of earlier (killed) attempts of this run
        self.t0 = time.time()
        self.frozen = False  # set before test: testing a checkpoint must not rewind the history

    def state_dict(self):
        return {"history": self.history, "best": self.best,
                "wall_prev": self.wall_prev + time.time() - self.t0}

    def load_state_dict(self, state):
        if self.frozen:
            return
        self.history, self.best = state["history"], state["best"]
        self.wall_prev, self.t0 = state["wall_prev"], time.time()

    def _better(self, new, old):
        if old is None or (isinstance(old, float) and math.isnan(old)):
            return True
        return new > old if self.mode == "max" else new < old

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            return
        row = {"step": trainer.global_step, "epoch": trainer.current_epoch,
               **_scalars(trainer.callback_metrics, ("val/", "train/"))}
        self.history.append(row)
        if self.monitor in row and self._better(row[self.monitor], self.best.get(self.monitor)):
            self.best = {k: v for k, v in row.items()}

    def on_test_end(self, trainer, pl_module):
        self.test = _scalars(trainer.callback_metrics, ("test/",))

    def write(self, trainer, model: torch.nn.Module, config: dict, extra: dict) -> dict:
        final = dict(self.history[-1]) if self.history else {}
        final.update(self.test)
        best = {**self.best, **self.test}  # test runs on the best checkpoint
        payload = {
            **self.meta, **extra, "monitor": self.monitor, "monitor_mode": self.mode,
            "metrics": {"final": final, "best": best}, "history": self.history,
            "params": count_parameters(model),
            "wall_time_s": round(self.wall_prev + time.time() - self.t0, 3),
            "global_step": trainer.global_step, "epochs": trainer.current_epoch,
            "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "config": config,
        }
        write_json_atomic(self.path, payload)
        return payload
