"""What a person watching a run sees: Lightning's bar on a terminal, else one line per
validation and every tenth of the steps (run, step/total, the monitored metric, train loss,
elapsed, ETA); the run dir and the
Hydra output dir once at the start; the table's metric and the result path at the end.

Also the logging set-up that makes every event ONE line: the `lightning` package installs its
own stderr handler *and* lets records propagate to the root logger, where Hydra's job_logging
has a console handler, so each Lightning message came out twice (`INFO: ...` on stderr and
`[time][lightning...][INFO] - ...` on stdout). We drop Lightning's handler and keep Hydra's
(console + the .log file in the Hydra output dir), and filter the messages that say nothing about
this run (accelerator inventory, the litlogger advert, checkpoint-loading chatter).
"""
from __future__ import annotations

import logging
import math
import sys
import time
import warnings
from pathlib import Path

import lightning as L

log = logging.getLogger("tasks.train")

# Lightning INFO messages that carry no information about the run (substring match)
_NOISE = ("GPU available:", "TPU available:", "HPU available:", "💡 Tip:", "LOCAL_RANK:",
          "Loaded model weights from the checkpoint", "`Trainer.fit` stopped:",
          "checkpoints/best.ckpt", "to estimate number of stepping batches",
          "Restoring states from the checkpoint", "Restored all states from the checkpoint")
# (a resume is said once, by resume.LosslessResume: `resume: continuing from <ckpt> at step N`)
# warnings from library internals or about settings the smoke profile uses on purpose
_NOISY_WARNINGS = (r".*isinstance\(treespec, LeafSpec\)", r".*smaller than the logging interval",
                   r"Checkpoint directory .* exists and is not empty")  # a resume: expected


class _DropNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not any(n in msg for n in _NOISE)


def setup_logging() -> None:
    """Called once per process after Hydra configured logging (tasks.train). Idempotent."""
    root_has_handlers = logging.getLogger().hasHandlers()
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        lg = logging.getLogger(name)
        if root_has_handlers:  # Hydra's handlers print it: Lightning's own would print it again
            for h in list(lg.handlers):
                if type(h) is logging.StreamHandler:
                    lg.removeHandler(h)
            lg.propagate = True
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        lg = logging.getLogger(name)
        if not any(isinstance(f, _DropNoise) for f in lg.filters):
            lg.addFilter(_DropNoise())
    for pattern in _NOISY_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern)


def short_id(run_id: str, limit: int = 48) -> str:
    """'ZeroS__toy_recall__default__lr0.001_wd0_s0__smoke-f29d180d' -> 'ZeroS__toy_recall__
    default-f29d180d': the row/column/setting and the hash; the rest is in the result JSON."""
    head, _, digest = run_id.rpartition("-")
    if not head or len(digest) != 8:
        head, digest = run_id, ""
    head = head.split("__lr")[0]
    short = f"{head}-{digest}" if digest else head
    return short if len(short) <= limit else short[: limit - 9] + "…" + short[-8:]


def _clock(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _fmt(v) -> str:
    try:
        return f"{float(v):.4g}"
    except (TypeError, ValueError):
        return str(v)


def use_bar(setting) -> bool:
    """trainer.enable_progress_bar: true/false forces it; null = a bar on a terminal only: both
    streams (rich draws on stdout, tqdm on stderr; under the reproduce driver or `> log` stdout
    is a pipe or file, where the redraws would be residue on every line)."""
    if setting is not None:
        return bool(setting)
    return bool(sys.stdout.isatty() and sys.stderr.isatty())


def bar_callbacks(bar: bool) -> list:
    """The terminal bar: Lightning's rich bar (its default where rich is installed) less its
    'Epoch 1/-2' under a step budget (max_epochs=-1); [] = Lightning's default (tqdm) or no bar."""
    try:
        import rich  # noqa: F401
    except ImportError:
        return []
    return [_StepBudgetBar()] if bar else []


class _StepBudgetBar(L.pytorch.callbacks.RichProgressBar):
    # overrides a private method: RichProgressBar has no public hook for the epoch text
    # (checked: lightning 2.6.6; guarded by tests/framework/test_framework_private_apis.py)
    def _get_train_description(self, current_epoch: int) -> str:
        text = super()._get_train_description(current_epoch)
        m = self.trainer.max_epochs
        if m is not None and m < 0:  # no epoch total: "Epoch 1/-2" -> "Epoch 1"
            text = text.replace(f"Epoch {current_epoch}/{m - 1}", f"Epoch {current_epoch}", 1)
        return text


class ProgressLines(L.Callback):
    """One line per validation when there is no progress bar; start and end lines always."""

    def __init__(self, run_id: str, run_dir: Path, monitor: str, lines: bool = True,
                 tenths: int = 10):
        self.run_id, self.short, self.run_dir = run_id, short_id(run_id), Path(run_dir)
        self.monitor, self.lines = monitor, lines
        self.t0, self.step0 = time.time(), 0
        self.tenths, self.last_line = tenths, -1  # also a line every total/tenths steps

    def on_fit_start(self, trainer, pl_module):
        if not trainer.is_global_zero:  # under DDP one set of lines, rank 0's
            return
        from hydra.core.hydra_config import HydraConfig
        hydra_dir = HydraConfig.get().runtime.output_dir if HydraConfig.initialized() else None
        where = f"; Hydra output {hydra_dir}" if hydra_dir else ""
        log.info("run %s: run dir %s%s", self.run_id, self.run_dir, where)

    def on_train_start(self, trainer, pl_module):
        self.t0, self.step0 = time.time(), trainer.global_step  # a resume counts from here

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        # a run validating only at its end (Table 1 smoke: 192 steps, one validation) said
        # nothing until then: a line every tenth of the steps too, unless a validation line came
        # within that tenth (checked at the next step's start, after a validation at this one)
        total = trainer.estimated_stepping_batches
        if not self.lines or not math.isfinite(total) or self.tenths <= 0:
            return
        every = max(1, int(total) // self.tenths)
        step = trainer.global_step
        if step > self.step0 and step % every == 0 and step - self.last_line >= every:
            self._line(trainer)

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking or not self.lines or trainer.state.fn != "fit" \
                or not trainer.is_global_zero:
            return
        self._line(trainer)

    def _line(self, trainer) -> None:
        step, m = trainer.global_step, trainer.callback_metrics
        self.last_line = step
        total = trainer.estimated_stepping_batches
        elapsed = time.time() - self.t0
        done = step - self.step0
        eta = elapsed / done * (total - step) if done > 0 and math.isfinite(total) else math.inf
        of = f"/{int(total)}" if math.isfinite(total) else ""
        log.info(" | ".join([f"[{self.short}] step {step}{of}", f"epoch {trainer.current_epoch}",
                             *(f"{k}={_fmt(m[k])}" for k in (self.monitor, "train/loss") if k in m),
                             f"elapsed {_clock(elapsed)}, eta {_clock(eta)}"]))

    def finished(self, payload: dict) -> None:
        """The table's metric (task.monitor in the reported snapshot, and its test twin) and
        where the result went; called by the runner after the JSON is written."""
        final = payload["metrics"]["final"]
        # the snapshot the run reports: best by task.monitor, or the last one (task.report=last)
        rep = payload["metrics"].get("reported", payload["metrics"]["best"])
        test_key = "test/" + self.monitor.split("/", 1)[-1]
        parts = [f"done {self.short}: {self.monitor}={_fmt(rep.get(self.monitor))} "
                 f"({payload.get('report', 'best')})"]
        if test_key in rep:
            parts.append(f"{test_key}={_fmt(rep[test_key])}")
        from .wandb_log import table_metric
        source, metric = table_metric(payload)  # the cell's own metric, when it is another one
        if metric not in (self.monitor, test_key) and metric != "params":
            parts.append(f"table {metric}={_fmt(payload['metrics'].get(source, {}).get(metric))}")
        if "train/loss" in final:
            parts.append(f"train/loss={_fmt(final['train/loss'])}")
        parts.append(f"{payload.get('global_step')} steps in {_clock(payload.get('wall_time_s', 0))}")
        log.info(" | ".join(parts))  # the runner prints `result: <path>` right after
