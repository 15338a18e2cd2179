"""W&B as the dashboard of a table: one W&B run per run id, grouped by table, tagged so that a
table view is a filter, with the table's metric in the summary (docs/framework.md "W&B
dashboards"). Offline by default; `make wandb-sync` uploads the offline runs.

    python -m tasks.common.wandb_log sync [DIR]     # what `make wandb-sync` calls
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from .errors import fail
from .store import conf_file, table_name, zeros_root

SUMMARY_KEY = "table_metric"  # the value a table cell is built from (best validation of monitor)


def wandb_id(run_id: str) -> str:
    """The W&B run id of a run id: deterministic, so a resumed run (resume="allow") continues
    the same W&B run instead of creating a second one."""
    return hashlib.sha1(run_id.encode()).hexdigest()[:16]


def tags(cfg: DictConfig) -> list[str]:
    m = cfg.meta
    return [f"table:{table_name(cfg)}", f"task:{cfg.task.name}", f"mixer:{cfg.mixer.name}",
            f"row:{m.row}", f"column:{m.column}", f"setting:{m.setting}",
            f"profile:{cfg.profile.name}", f"seed:{cfg.seed}"]


def make_logger(cfg: DictConfig, rdir: Path, run_id: str):
    """Lightning's WandbLogger (it creates the W&B run lazily, on rank 0 only) or None."""
    if not cfg.logger.get("wandb") or cfg.wandb.mode == "disabled":
        return None
    import lightning as L
    import wandb
    os.environ["WANDB_MODE"] = str(cfg.wandb.mode)
    logger = L.pytorch.loggers.WandbLogger(
        project=cfg.wandb.project, entity=cfg.wandb.entity, group=table_name(cfg),
        job_type=cfg.wandb.get("job_type") or cfg.profile.name, name=run_id, id=wandb_id(run_id),
        tags=tags(cfg), save_dir=str(rdir), offline=cfg.wandb.mode == "offline",
        config=OmegaConf.to_container(cfg, resolve=True),
        settings=wandb.Settings(silent=True, console="off", disable_git=True, save_code=False))
    # Lightning always passes anonymous=None, which wandb >= 0.19 answers with a deprecation
    # warning on every run; the setting has no effect, so it is not passed at all. No public way:
    # WandbLogger's private init dict (checked: lightning 2.6.6, wandb 0.31.0; guarded by
    # tests/framework/test_framework_private_apis.py)
    logger._wandb_init.pop("anonymous", None)
    return logger


def table_metric(payload: dict) -> tuple[str, str]:
    """(source, metric) of this run's cell in conf/table/<table>.yaml (its column's metric, else
    the table's), e.g. ('reported', 'test/acc'); ('reported', task.monitor) for ad-hoc runs."""
    # the snapshot the run reports (task.report); JSONs from before task.report only have best
    reported = "reported" if "reported" in payload.get("metrics", {}) else "best"
    spec_file = conf_file(f"table/{payload.get('table')}.yaml")
    if not spec_file.is_file():
        return reported, payload["monitor"]
    spec = OmegaConf.to_container(OmegaConf.load(spec_file), resolve=False)
    cols = [c for c in spec.get("columns") or []  # a column is a name or {key, metric, ...}
            if isinstance(c, dict) and c.get("key") in (payload.get("column"), "*")]
    col = cols[0] if cols else {}
    source = col.get("source", spec.get("source", reported))
    return (reported if source == "reported" else source,
            col.get("metric", spec.get("metric", payload["monitor"])))


def summarize(payload: dict) -> dict:
    """Summary keys of a finished run: the table's metric under a stable key (what the table
    cell is built from, before best-over-grid and averaging), the best/test metrics (prefixed
    best/ so the last logged value does not overwrite them), size and steps."""
    source, metric = table_metric(payload)
    value = payload.get("params") if metric == "params" else \
        payload["metrics"].get(source, {}).get(metric)
    best = payload["metrics"]["best"]
    out = {SUMMARY_KEY: value, f"{SUMMARY_KEY}_name": f"{source}:{metric}",
           "monitor": payload["monitor"], "monitor_best": best.get(payload["monitor"]),
           "global_step": payload.get("global_step"), "params": payload.get("params"),
           "wall_time_s": payload.get("wall_time_s"), "run_id": payload.get("run_id"),
           "table": payload.get("table")}
    out.update({f"best/{k}": v for k, v in best.items() if k != "step"})
    return out


def finish(trainer, payload: dict | None) -> None:
    """Write the summary (rank 0, when the run produced a result) and close the W&B run."""
    import lightning as L
    for lg in trainer.loggers:
        if isinstance(lg, L.pytorch.loggers.WandbLogger):
            import wandb
            if payload is not None and trainer.is_global_zero:
                lg.experiment.summary.update(summarize(payload))
            wandb.finish()
            # finish() only *asks* wandb-core to close the run (inform_finish is sent without
            # waiting): the offline .wandb file is written when the service gets to it, which on
            # a busy machine is after this process has read it (a 7-byte header only). teardown()
            # joins the service, so the file is complete when finish returns; the next run in
            # this process (a multirun) starts a fresh service.
            wandb.teardown()


def offline_runs(root: Path) -> list[Path]:
    """offline-run-* folders under `root` that `wandb sync` has not uploaded yet."""
    return sorted(p for p in Path(root).rglob("offline-run-*")
                  if p.is_dir() and not any(p.glob("*.wandb.synced")))


def sync_main(argv: list[str]) -> int:
    from .validate import _wandb_key, unreachable, wandb_host
    root = Path(argv[0]) if argv else zeros_root() / "outputs"
    runs = offline_runs(root)
    if not runs:
        print(f"no unsynced offline W&B runs under {root} (runs log offline with logger=default)")
        return 0
    host, port = wandb_host()
    if not _wandb_key(OmegaConf.create({"wandb": {}}), host):
        return fail(f"{len(runs)} offline W&B runs to sync but no W&B API key: run `wandb login` "
                    "(or set WANDB_API_KEY), then make wandb-sync again")
    reason = unreachable(host, port)  # wandb sync would retry for minutes
    if reason:
        return fail(f"{host}:{port} is unreachable ({reason}): the {len(runs)} offline runs stay "
                    "under outputs/; run make wandb-sync again when online")
    wandb_cli = Path(sys.executable).with_name("wandb")
    print(f"syncing {len(runs)} offline W&B runs under {root}")
    return subprocess.call([str(wandb_cli), "sync", *map(str, runs)])


if __name__ == "__main__":
    if sys.argv[1:2] != ["sync"]:
        print("error: usage: python -m tasks.common.wandb_log sync [DIR]", file=sys.stderr)
        sys.exit(2)
    sys.exit(sync_main(sys.argv[2:]))
