"""Helpers of the framework tests: compose configs in-process, run the CLI in a subprocess with
no network and no W&B login, on one thread (the CI cores are shared)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"


def compose(overrides: list[str]):
    from hydra import compose as hcompose
    from hydra import initialize_config_dir
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return hcompose("train", overrides=overrides, return_hydra_config=False)


def offline_env(root: Path) -> dict:
    """Environment with no W&B login, no network, results under `root`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(WANDB_MODE="offline", WANDB_SILENT="true", HOME=str(root / "home"),
               ZEROS_ROOT=str(root), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               HF_HUB_OFFLINE="1", NO_PROXY="*", HTTPS_PROXY="http://127.0.0.1:9",
               HTTP_PROXY="http://127.0.0.1:9", PYTHONHASHSEED="0")
    (root / "home").mkdir(parents=True, exist_ok=True)
    return env


# a sitecustomize that sleeps before every training step from `from_step` on, so that a test can
# stop a real `python -m tasks.train` process mid-run (after a checkpoint)
_SLOW_STEPS = """
import time
import lightning
import pathlib
class _Slow(lightning.Callback):
    def on_train_batch_start(self, trainer, *a):
        if trainer.global_step >= {from_step}:
            pathlib.Path({marker!r}).touch()  # the slow steps have begun
            time.sleep({sleep_s})
_real = lightning.Trainer
lightning.Trainer = lambda *a, callbacks=(), **k: _real(*a, callbacks=[*callbacks, _Slow()], **k)
"""


def slowed_env(root: Path, from_step: int, sleep_s: float) -> dict:
    """offline_env(root) whose Python processes sleep `sleep_s` before each step >= from_step;
    the first such step touches root/hook/slowed (slowed_marker)."""
    hook = root / "hook"
    hook.mkdir(parents=True, exist_ok=True)
    (hook / "sitecustomize.py").write_text(_SLOW_STEPS.format(
        from_step=from_step, sleep_s=sleep_s, marker=str(slowed_marker(root))))
    return {**offline_env(root), "PYTHONPATH": f"{hook}:{REPO}"}


def slowed_marker(root: Path) -> Path:
    return root / "hook" / "slowed"


def run_cli(args: list[str], root: Path, timeout: int = 240, module: str = "tasks.train"):
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=offline_env(root),
                          capture_output=True, text=True, timeout=timeout)


# tiny, fast settings for every subprocess run of the toy task
TINY = ["trainer.max_steps=3", "task.datamodule.num_train=64", "task.datamodule.num_val=32",
        "task.datamodule.num_test=32", "backbone.d_model=32", "backbone.n_heads=2"]


def squash(md: str) -> str:
    """A Markdown table without its column padding ('| M1    | 60.0 |' -> '| M1 | 60.0 |'): a
    test reads the cells, not the widths pandas/tabulate pad them to."""
    return re.sub(r" {2,}", " ", md)
