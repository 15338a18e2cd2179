"""Helpers of the identity/provenance/status tests: a config exactly as a Hydra job sees it
(HydraConfig set, its overrides and sweeper params known, no `hydra` node), in-process."""
from __future__ import annotations

import json
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import open_dict

from tasks.common.provenance import composer

# toy-task sizes that keep an in-process run under a second (they make the run ad hoc)
TINY = ["trainer.max_steps=3", "task.datamodule.num_train=64", "task.datamodule.num_val=32",
        "task.datamodule.num_test=32", "backbone.d_model=32", "backbone.n_heads=2"]


def job_config(overrides: list[str], out_dir: Path | None = None):
    """compose(overrides) as the Hydra job of that command line: HydraConfig set (what
    runner.run reads for provenance), the hydra node removed from the job's config."""
    with composer() as compose:
        cfg = compose(overrides, hydra=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(out_dir or Path("/tmp"))
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


def clear_hydra() -> None:
    HydraConfig.instance().cfg = None


def fake_result(path: Path, profile="smoke", row="ZeroS", acc=0.5, **extra) -> Path:
    """A minimal finished-run JSON of the toy table."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "run_id": path.stem, "table": "toy", "row": row, "column": "toy_recall",
        "setting": "V16_L9", "seed": 0, "lr": 3e-3, "weight_decay": 0.0, "profile": profile,
        "global_step": 50, "git_commit": "abcdef1234", "git_dirty": False,
        "metrics": {"best": {"test/acc_micro": acc, "val/acc_micro": acc}, "final": {}},
        "history": [], **extra}))
    return path
