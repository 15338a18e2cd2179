"""Run identity (deterministic id -> resumable sweeps), git facts, atomic JSON writes."""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

# config parts that define WHAT is trained (hashed into the run id); paths/loggers/devices do not
_IDENTITY_KEYS = ("task", "backbone", "mixer", "optimizer", "scheduler", "seed", "meta", "profile")
_VOLATILE = re.compile(r"(path|_dir|dir$|num_workers)")


def _strip_volatile(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip_volatile(v) for k, v in obj.items() if not _VOLATILE.search(str(k))}
    if isinstance(obj, list):
        return [_strip_volatile(v) for v in obj]
    return obj


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "-", text).strip("-")


def table_name(cfg: DictConfig) -> str:
    return str(cfg.meta.table) if cfg.meta.get("table") else "adhoc"


def make_run_id(cfg: DictConfig) -> str:
    if cfg.get("run_id"):
        return slug(str(cfg.run_id))
    ident = {k: OmegaConf.to_container(cfg[k], resolve=True) if isinstance(cfg[k], DictConfig)
             else cfg[k] for k in _IDENTITY_KEYS if k in cfg}
    ident["steps"] = [cfg.trainer.get("max_steps"), cfg.trainer.get("max_epochs")]
    digest = hashlib.sha1(json.dumps(_strip_volatile(ident), sort_keys=True, default=str)
                          .encode()).hexdigest()[:8]
    m, o = cfg.meta, cfg.optimizer
    readable = (f"{m.row}__{m.column}__{m.setting}__lr{float(o.lr):g}_wd{float(o.weight_decay):g}"
                f"_s{cfg.seed}__{cfg.profile.name}")
    return f"{slug(readable)}-{digest}"


def result_path(cfg: DictConfig, run_id: str) -> Path:
    return Path(cfg.paths.results_dir) / "runs" / table_name(cfg) / f"{run_id}.json"


def run_dir(cfg: DictConfig, run_id: str) -> Path:
    return Path(cfg.paths.log_dir) / "runs" / table_name(cfg) / run_id


def git_info(cwd: str | Path = ".") -> dict:
    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    commit = git("rev-parse", "HEAD") or None
    return {"git_commit": commit, "git_dirty": bool(git("status", "--porcelain")) if commit else None}


def write_json_atomic(path: Path, payload: dict) -> None:
    """Write to a temp file in results/runs/ (same filesystem), fsync, then rename: a crash
    leaves either no file or the whole file, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent.parent / f"{path.stem}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=1, sort_keys=True, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
