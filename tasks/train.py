"""The single training entry point: `python -m tasks.train key=value ...` (console: zeros-train).

Composes conf/train.yaml, checks the config (one-line errors), skips a run whose result JSON
exists, then trains with Lightning (checkpoints, resume=true, seeds, bf16 autocast on GPU / fp32
on CPU), tests the best checkpoint and writes results/runs/<table>/<run_id>.json.
"""
from __future__ import annotations

import os
import sys

from tasks.common import interrupt

if __name__ == "__main__":  # first: a Ctrl-C / SIGTERM while hydra, torch... load is one line too
    interrupt.install("before the run started: nothing was written")

# No network by default: W&B logs offline and stays quiet unless wandb.mode=online is asked for.
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("WANDB_CONSOLE", "off")
os.environ.setdefault("WANDB_DISABLE_GIT", "true")
os.environ.setdefault("WANDB_DISABLE_CODE", "true")
os.environ.setdefault("HYDRA_FULL_ERROR", "0")

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from tasks.common.errors import ConfigError  # noqa: E402
from tasks.common.store import CONF, searchpath_overrides  # noqa: E402
from tasks.common.validate import (check_before_run, check_composes, check_device,  # noqa: E402
                                   check_overrides)


def _one_line_error(e: Exception) -> None:
    stop = interrupt.stop_behind(e)  # an error a stop caused mid-compose is that stop: 130 / 143
    if stop is not None:
        raise stop
    print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
    sys.exit(2)


@hydra.main(config_path=str(CONF), config_name="train", version_base="1.3")
def _hydra_main(cfg: DictConfig):
    try:
        check_before_run(cfg)  # values, data folders, W&B: before the run id, data or model
        from tasks.common.progress import setup_logging
        setup_logging()
        from tasks.common.runner import run
        return run(cfg)
    except ConfigError as e:
        _one_line_error(e)


def main() -> None:
    if __name__ != "__main__":  # the zeros-train console script
        interrupt.install("before the run started: nothing was written")
    sys.argv += searchpath_overrides()  # $ZEROS_CONF_PATH: a task's own conf/ folder (argv end)
    try:
        check_overrides(sys.argv[1:])
        check_device(sys.argv[1:])
        check_composes(sys.argv[1:])  # typo'd keys, parse errors: one line instead of Hydra's
    except ConfigError as e:
        _one_line_error(e)
    _hydra_main()


if __name__ == "__main__":
    main()
