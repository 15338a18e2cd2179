"""The convergence rule's measures, read from a run's validation history (no training code here:
the callback that applies the rule during training is callbacks.Convergence).

A run ends at the first of: `threshold` (task.stop_at reached by task.stop_monitor, else
task.monitor), `plateau` (task.converge: the metric gained no more than `tolerance` over the last
`window` validations; task.patience is the same rule with tolerance 0, Lightning's early
stopping) and `cap` (trainer.max_steps / max_epochs, the schedule's horizon); `diverged` when
the metric is not finite. Its result JSON records `stop_reason` and `last_quarter`: the gain of
the metric's best-so-far over the last quarter of the run's steps.

Gains are in one unit for every table: points for an accuracy (mode max; stored as a fraction,
so x 100) and percent of the earlier value for a loss, perplexity or MSE (mode min). A cell is
unconverged ("rising", marked ↑ in tables, never "holds" in a verdict) when a run behind it
ended at its cap with a last-quarter gain above `rising_gain` (conf/claims.yaml).
"""
from __future__ import annotations

import functools
import math

import yaml

from .store import CONF

CLAIMS = CONF / "claims.yaml"
REASONS = ("threshold", "plateau", "cap", "diverged")


def finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def gain(old: float, new: float, mode: str) -> float:
    """How much `new` improves on `old`: points (x 100) for mode max, percent of |old| for min."""
    if mode == "max":
        return (new - old) * 100.0
    return (old - new) / abs(old) * 100.0 if old else (0.0 if new == old else math.inf)


def reached(value, stop_at, mode: str) -> bool:
    """task.stop_at: reached at or beyond it (Lightning's stopping_threshold does the same)."""
    return finite(value) and (value >= stop_at if mode == "max" else value <= stop_at)


def last_quarter(history: list[dict], metric: str, mode: str) -> float | None:
    """The gain of the best-so-far of `metric` from the last validation at or before 3/4 of the
    last validated step to the end; None when fewer than two validations have it."""
    rows = [(r.get("step", i), r[metric]) for i, r in enumerate(history or [])
            if finite(r.get(metric))]
    if len(rows) < 2:
        return None
    cut = 0.75 * rows[-1][0]
    early = [v for s, v in rows if s <= cut] or [rows[0][1]]
    pick = max if mode == "max" else min
    return gain(pick(early), pick(v for _, v in rows), mode)


def plateaued(values: list[float], mode: str, window: int, tolerance: float) -> bool:
    """The last `window` values gained no more than `tolerance` on the best before them
    (tolerance 0: no strict improvement, i.e. Lightning's EarlyStopping with patience=window)."""
    if not window or len(values) <= window:
        return False
    pick = max if mode == "max" else min
    return gain(pick(values[:-window]), pick(values[-window:]), mode) <= tolerance


def stop_reason(d: dict) -> str:
    """A result JSON's stop_reason; for one written before the key existed, inferred from its
    config and history: stop_at reached -> threshold, ended before its cap -> plateau, else cap."""
    if d.get("stop_reason") in REASONS:
        return d["stop_reason"]
    cfg = d.get("config") or {}
    task, trainer = cfg.get("task") or {}, cfg.get("trainer") or {}
    metric = task.get("stop_monitor") or d.get("monitor")
    mode = task.get("stop_mode") or d.get("monitor_mode") or "max"
    if task.get("stop_at") is not None and any(
            reached(r.get(metric), task["stop_at"], mode) for r in d.get("history") or []):
        return "threshold"
    steps, epochs = trainer.get("max_steps"), trainer.get("max_epochs")
    if finite(steps) and steps > 0:
        return "plateau" if (d.get("global_step") or 0) < steps else "cap"
    if finite(epochs) and epochs > 0:
        return "plateau" if (d.get("epochs") or 0) < epochs else "cap"
    return "cap"


def history_metric(metric: str) -> str | None:
    """The validation metric a table metric is followed by in the history (test/acc -> val/acc);
    None for what has no curve (params)."""
    if not isinstance(metric, str) or "/" not in metric:
        return None
    stage, name = metric.split("/", 1)
    return f"val/{name}" if stage in ("test", "val") else None


@functools.cache  # read once
def rising_gain() -> float:
    return float(yaml.safe_load(CLAIMS.read_text())["rising_gain"])


def rising(d: dict, metric: str, mode: str) -> bool:
    """A run (result JSON or runs_frame row with `history`, `stop_reason`/`config`) that hit its
    cap while `metric` (a table metric: its validation curve is read) still rose."""
    key = history_metric(metric)
    if key is None or stop_reason(d) != "cap":
        return False
    g = last_quarter(d.get("history") or [], key, mode)
    return g is not None and g > rising_gain()


def mark(cell) -> str:
    """The suffix of an unconverged cell (a table row with a `rising` flag)."""
    return " ↑" if cell.get("rising") in (True,) else ""


def rising_note(long) -> list[str]:
    """The note under a table with a marked cell (none: no line)."""
    if "rising" not in long or not long["rising"].eq(True).any():
        return []
    return ["", f"↑ unconverged: a run behind the cell ended at its step cap still gaining more than "
                f"{rising_gain():g} points (accuracy) or {rising_gain():g}% (loss, perplexity, MSE) "
                "over its last quarter of steps: the table states no ordering from it."]
