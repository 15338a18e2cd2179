"""The callback that turns a finished run into results/runs/<table>/<run_id>.json."""
from __future__ import annotations

import math
import time
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerFn

from .backbone import count_parameters
from .convergence import finite, last_quarter, plateaued, reached
from .errors import ConfigError
from .store import now, write_json_atomic


def _scalars(metrics: dict, prefixes=("val/", "test/", "train/")) -> dict:
    out = {}
    for k, v in metrics.items():
        if k.startswith(prefixes):
            v = v.item() if torch.is_tensor(v) else v
            if isinstance(v, (int, float)):
                out[k] = float(v)
    return out


def pick_row(history: list[dict], metric: str, pick: str) -> dict:
    """The first validation row with the max (min) of `metric`; {} when no row has it."""
    rows = [r for r in history if isinstance(r.get(metric), float) and not math.isnan(r[metric])]
    if not rows:
        return {}
    key = (lambda r: r[metric]) if pick == "max" else (lambda r: -r[metric])
    return dict(max(rows, key=key))  # max() keeps the first of equal rows


class ResultWriter(L.Callback):
    """Collects the validation history, the best validation snapshot (by `monitor`) and the test
    metrics; `write()` (called by tasks.train when everything finished) saves the JSON. The
    history and best survive resume (callback state is stored in the checkpoint).
    report: which snapshot the run reports ('best' or 'last'); the test pass ran on its weights.
    extras: {name: {metric, pick}}: more labelled snapshots picked from the history."""

    def __init__(self, path: Path, meta: dict, monitor: str, mode: str, report: str = "best",
                 extras: dict | None = None):
        self.path, self.meta, self.monitor, self.mode = Path(path), meta, monitor, mode
        self.report, self.extras = report, dict(extras or {})
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
        last = dict(self.history[-1]) if self.history else {}
        # report=best: the test (of best.ckpt) sits in both snapshots, as before; report=last:
        # the test ran on the last weights, only the last snapshot carries it
        on_best = self.report == "best"
        final, best = {**last, **self.test}, {**self.best, **(self.test if on_best else {})}
        reported = best if on_best else final
        metrics = {"final": final, "best": best, "reported": dict(reported)}
        for name, e in self.extras.items():
            metrics[name] = pick_row(self.history, e["metric"], e.get("pick", "max"))
        payload = {
            **self.meta, **extra, "monitor": self.monitor, "monitor_mode": self.mode,
            "report": self.report, "metrics": metrics, "history": self.history,
            "params": count_parameters(model),
            "wall_time_s": round(self.wall_prev + time.time() - self.t0, 3),
            "global_step": trainer.global_step, "epochs": trainer.current_epoch,
            "finished_at": now(),
            "config": config,
        }
        write_json_atomic(self.path, payload)
        return payload


class Convergence(L.Callback):
    """The one convergence rule (tasks/common/convergence.py): after each validation, stop at
    `threshold` (task.stop_at) or `plateau` (task.converge {window, tolerance}, else
    task.patience with tolerance 0), or `diverged` (a non-finite metric, as Lightning's
    EarlyStopping); a run that ends otherwise ended at its `cap`. The values survive resume."""

    def __init__(self, metric: str, mode: str, stop_at=None, window=None, tolerance=0.0):
        self.metric, self.mode, self.stop_at = metric, mode, stop_at
        self.window, self.tolerance = (int(window) if window else None), float(tolerance or 0)
        self.values: list[float] = []
        self.reason: str | None = None

    @classmethod
    def from_task(cls, t) -> "Convergence":
        conv = t.get("converge") or {}
        return cls(conv.get("metric") or t.get("stop_monitor") or t.monitor,
                   t.get("stop_mode") or t.monitor_mode, t.get("stop_at"),
                   conv.get("window") or t.get("patience"), conv.get("tolerance", 0.0))

    def state_dict(self):
        return {"values": self.values, "reason": self.reason}

    def load_state_dict(self, state):
        self.values, self.reason = list(state.get("values", [])), state.get("reason")

    def decide(self, value) -> str | None:
        """The reason to stop after this validation's value, or None (tested without Lightning)."""
        if not finite(value):
            return "diverged"
        self.values.append(float(value))
        if self.stop_at is not None and reached(value, self.stop_at, self.mode):
            return "threshold"
        if plateaued(self.values, self.mode, self.window, self.tolerance):
            return "plateau"
        return None

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING or self.reason:
            return  # (not a validate() after fit)
        if self.metric not in trainer.callback_metrics:
            if self.stop_at is None and not self.window:
                return  # nothing to decide: the run ends at its cap
            known = ", ".join(sorted(k for k in trainer.callback_metrics if k.startswith("val/")))
            raise ConfigError(f"task.stop_monitor / task.monitor / task.converge.metric "
                              f"{self.metric} is not logged: use one of {known}")
        v = trainer.callback_metrics[self.metric]
        reason = self.decide(v.item() if torch.is_tensor(v) else v)
        if trainer.strategy.reduce_boolean_decision(reason is not None, all=False):
            self.reason = reason or "plateau"  # another rank decided: the same rule stopped it
            trainer.should_stop = True

    def summary(self, history: list[dict]) -> dict:
        """The result JSON's keys: why the run ended and the last-quarter gain of its metric."""
        return {"stop_reason": self.reason or "cap",
                "last_quarter": {"metric": self.metric, "gain": last_quarter(
                    history, self.metric, self.mode), "unit": "points" if self.mode == "max"
                    else "percent"}}
