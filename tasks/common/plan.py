"""`make plan TABLE=<t> PROFILE=<p> [LAUNCHER=... GPUS=G RUNS_PER_GPU=K]`: a table's job list
(every run with its id, result path, run dir and state) and its expected wall time per layout.

    python -m tasks.common.plan table1 --profile paper --gpus 8 --runs-per-gpu 8 [--list]

Planning is fast because it composes once per experiment file and distinct config-group choice
(`mixer=...`, `experiment=...`: those change the defaults list and must be composed), then
derives each sweep point by applying its plain overrides (`optimizer.lr=...`) to that composed
config with OmegaConf.update, as Hydra applies command-line overrides after composing. Only
Hydra's public API (compose, the override parser) is used. tests/framework/test_framework_plan.py
checks the derived run ids against a full compose per job.
"""
from __future__ import annotations

import functools
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from .errors import ConfigError, NoRows, cli_parser, fail
from .plan_nodes import NodeCache, parse_cache as _parse_cache
from .store import CONF

ESTIMATES = CONF / "estimates.yaml"
_EST = OmegaConf.to_container(OmegaConf.load(ESTIMATES)) if ESTIMATES.exists() else {}


@dataclass
class Job:
    overrides: list[str]          # `python -m tasks.train <overrides>` trains this run
    run_id: str
    result: Path
    rdir: Path
    task: str
    cpu_minutes: float | None     # profile=cpu: measured minutes at 1 thread (cpu_minutes)
    gpu_minutes: float | None     # estimate: steps x conf/estimates.yaml step_ms
    state: str = "missing"        # finished | running | failed | missing (status.job_state)
    detail: str = ""
    adhoc: bool = False           # off the table's protocol (provenance.classify): no table reads it


def expand_file(experiment: str, profile: str, extra: list[str], compose
                ) -> tuple[list[tuple], int]:
    """(work chunks of one experiment file, its number of grid points). A chunk is the sweep
    points of one config-group choice (at most CHUNK of them), derived by `derive`."""
    from .provenance import OVERRIDES as parser, chooses_group, group_names, sweep_jobs
    points = sweep_jobs(experiment, profile, extra, compose)
    if not points:
        return [], 0
    first = compose(points[0])  # a bad override fails here, before any chunk
    groups = group_names()
    _check_of(OmegaConf.select(first, "task.datamodule._target_"))  # imported before any fork
    extra_keys = {parser.parse_override(t).get_key_element() for t in extra}
    parsed: dict[str, tuple] = {}  # override text -> (is composed, key, value): texts repeat
    by_group: dict[tuple, list] = {}
    for i, point in enumerate(points):
        fixed, plain = [], []
        for text in point:
            if text not in parsed:
                ov = parser.parse_override(text)
                group = chooses_group(ov, groups)  # part of what is composed
                parsed[text] = (group, ov.key_or_group, None if group else ov.value())
            group, key, value = parsed[text]
            if group:
                fixed.append(text)
            else:
                plain.append((key, value, text))
        by_group.setdefault(tuple(fixed), []).append((i, point, plain))
    chunks = [(gkey, pts[i:i + CHUNK], extra_keys) for gkey, pts in by_group.items()
              for i in range(0, len(pts), CHUNK)]
    return chunks, len(points)


CHUNK = 1000  # points per work chunk (a chunk composes once; Table 1: one per mixer)


def derive(chunk, compose) -> list[tuple[int, Job]]:
    """The jobs of one chunk: compose its group choices once, then per point apply the plain
    overrides in place (each point of a group sets the same keys) and compute the run id from
    the top-level nodes, each resolved once per distinct value of the overrides it depends on."""
    from .provenance import classify
    from .store import make_run_id, result_path, run_dir, run_id_of
    gkey, points, extra_keys = chunk
    cfg = compose(list(gkey), hydra=True)
    nodes = NodeCache(cfg, [key for key, _, _ in points[0][2]] if points else [])
    kinds, jobs, now = {}, [], {}
    for i, point, plain in points:
        for key, value, text in plain:
            if now.get(key) != text:  # the grid's last keys change fastest: set only those
                OmegaConf.update(cfg, key, value, merge=True)
                now[key] = text
        texts = [text for _, _, text in plain]
        if not in_protocol_dm(nodes.resolve(cfg, texts, ["task"])["task"].get("datamodule") or {}):
            continue  # (the other nodes of a point off the protocol are never resolved)
        r = nodes.resolve(cfg, texts)
        # the point's kind only varies with what the command line itself sweeps
        kkey = tuple(t for k, _, t in plain if k in extra_keys)
        if kkey not in kinds:
            cfg.hydra.overrides.task = list(point)  # what classify compares with the grid
            kinds[kkey] = classify(cfg)["kind"]
        rid = make_run_id(cfg) if r.get("run_id") else run_id_of(r)
        adhoc = kinds[kkey] == "adhoc"
        jobs.append((i, Job(list(point), rid, result_path(r, rid, adhoc), run_dir(r, rid),
                            str(r["task"]["name"]), cpu_minutes(r), gpu_minutes(r), adhoc=adhoc)))
    return jobs


def _worker_init():
    """A pool process: its own Hydra and composer (the parent's Hydra is not ours to share)."""
    global _compose, _composer_cm
    from hydra.core.global_hydra import GlobalHydra

    from .provenance import composer
    GlobalHydra.instance().clear()
    # Hydra initialised for the worker's life (the pool ends it). The context manager is kept:
    # garbage-collected, its generator would close and clear Hydra before the first compose
    _composer_cm = composer()
    _compose = _composer_cm.__enter__()


def _worker(chunk) -> list[tuple[int, Job]]:
    return derive(chunk, _compose)


def in_protocol_dm(dm: dict) -> bool:
    """False for a Cartesian sweep point the protocol does not have: the datamodule class may say
    so with a static `in_protocol(**its kwargs)` (MAD: a setting id of another task), the same
    rule by which the run itself is skipped (errors.NotInProtocol). dm: the resolved node."""
    check = _check_of(dm.get("_target_"))
    return check is None or bool(check[0](**{n: dm[n] for n in check[1] if n in dm}))


@functools.cache
def _check_of(target):
    """(the datamodule class's static in_protocol, its argument names), or None."""
    import inspect

    import hydra.utils
    try:
        fn = getattr(hydra.utils.get_class(target), "in_protocol", None)
        return None if fn is None else (fn, [
            p.name for p in inspect.signature(fn).parameters.values()
            if p.kind == p.POSITIONAL_OR_KEYWORD])
    except Exception:  # noqa: BLE001  (a missing optional dependency: the run will say so)
        return None


def cpu_minutes(r) -> float | None:
    """One run's wall minutes at 1 thread at profile=cpu, MEASURED on the 2-core machine
    (conf/estimates.yaml, the task's `cpu`: a number, or a table keyed by the resolved values of
    its `by` keys, e.g. the MAD task); None where nothing was measured (an ad-hoc setting, another
    profile). `expected_minutes=` on the command line wins. r: the resolved top-level nodes
    (NodeCache.resolve) or a composed config."""
    if r.get("expected_minutes") is not None:
        return float(r["expected_minutes"])
    est = _EST.get(str(r["task"]["name"]), {}).get("cpu")
    if est is None or str(r["profile"]["name"]) != "cpu":
        return None
    minutes = est["minutes"]
    for key in est.get("by", []):
        value = functools.reduce(lambda node, part: node[part], key.split("."), r)
        minutes = minutes.get(str(value)) if isinstance(minutes, dict) else None
    return None if minutes is None or isinstance(minutes, dict) else float(minutes)


def gpu_minutes(r: dict) -> float | None:
    """One run's estimated GPU minutes: steps x the task's assumed step time (conf/estimates.yaml).
    r: the resolved top-level nodes (NodeCache.resolve)."""
    est = _EST.get(str(r["task"]["name"]))
    if not est:
        return None
    t = r["trainer"]
    if int(t.get("max_steps") or -1) > 0:
        batches = int(t["max_steps"]) * int(t.get("accumulate_grad_batches") or 1)
    else:
        dm = r["task"].get("datamodule") or {}
        n, b = dm.get("num_train"), dm.get("batch_size")
        per_epoch = math.ceil(n / b) if isinstance(n, int) and isinstance(b, int) and b else \
            est.get("epoch_batches")
        if per_epoch is None or int(t.get("max_epochs") or -1) <= 0:
            return None
        batches = int(t["max_epochs"]) * per_epoch
    return batches * float(est["step_ms"]) / 60000


def plan(table: str, profile: str, files: list[str], extra: list[str],
         procs: int | None = None) -> tuple[list[Job], int]:
    """(every protocol job of the table's files with its state, the number of grid points).
    Large grids are derived by `procs` processes (default: the CPU count). A bad override or a
    table without rows at the profile: ConfigError, one line (`make plan|status|reproduce-*`)."""
    from .validate import check_overrides, hydra_error_line
    check_overrides(extra)  # `mixer=nope`: the choices, not Hydra's search path
    try:
        return _plan(profile, files, extra, procs)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001  (a key or value Hydra cannot compose: its reason)
        raise ConfigError(f"cannot compose {table} with {' '.join(extra) or 'no overrides'}: "
                          f"{hydra_error_line(e)}") from None


def _plan(profile: str, files: list[str], extra: list[str], procs: int | None
          ) -> tuple[list[Job], int]:
    from .provenance import composer
    from .state import job_state
    chunks, points = [], 0
    with composer() as compose, _parse_cache():
        skipped = []
        for f, exp in enumerate(files):
            try:
                cs, n = expand_file(exp, profile, extra, compose)
            except NoRows as e:  # a file without rows at this profile: the table's others run
                skipped.append(e)
                continue
            chunks += [(f, c) for c in cs]
            points += n
        if skipped and len(skipped) == len(files):
            raise skipped[0]
        procs = procs or int(os.environ.get("ZEROS_PLAN_PROCS", 0)) or os.cpu_count() or 1
        serial = len(chunks) == 1 or points < 2 * CHUNK or procs == 1
        done = [derive(c, compose) for _, c in chunks] if serial else None
    if not serial:
        import multiprocessing as mp
        with _parse_cache(), mp.get_context("fork").Pool(min(procs, len(chunks)),
                                                         _worker_init) as pool:
            done = pool.map(_worker, [c for _, c in chunks], chunksize=1)
    # Hydra's sweep order: by (file, point), each pair once (no two Jobs are ever compared)
    jobs = [j for *_, j in sorted((f, i, j) for (f, _), js in zip(chunks, done) for i, j in js)]
    for j in jobs:
        j.state, j.detail = job_state(j.result, j.rdir)
    return jobs, points


# ---- expected wall time per layout (estimates) ----
def makespan(minutes: list[float], lanes: int) -> float:
    """Wall time of running the jobs longest first on `lanes` workers (the driver's order)."""
    free = [0.0] * max(1, lanes)
    for m in sorted(minutes, reverse=True):
        free[free.index(min(free))] += m
    return max(free) if minutes else 0.0


def expected_line(todo: list[tuple[list[str], float | None]], parallel: int) -> str:
    """'; expected at most ~47 min (94 run-minutes ..., 2 at once; ...)' from the runs'
    cpu_minutes (mostly measured to the step cap: conf/estimates.yaml)."""
    minutes = [m for _, m in todo if m is not None]
    if not todo or not minutes:
        return ""
    unknown = len(todo) - len(minutes)
    return (f"; expected at most ~{makespan(minutes, parallel):.0f} min ({sum(minutes):.0f} "
            f"run-minutes at 1 thread, {parallel} at once; a run that meets its threshold or "
            f"plateaus ends sooner)"
            + (f", {unknown} runs without an estimate" if unknown else ""))


def gpu_wall(jobs: list[Job], gpus: int, runs_per_gpu: int | None) -> tuple[float, float, int]:
    """(wall minutes, GPU-minutes, jobs without an estimate) of the jobs on `gpus` GPUs with
    `runs_per_gpu` runs each (None: each task's default); tasks run one after another."""
    by_task: dict[str, list[float]] = {}
    for j in jobs:
        if j.gpu_minutes is not None:
            by_task.setdefault(j.task, []).append(j.gpu_minutes)
    wall = total = 0.0
    for task, minutes in by_task.items():
        est = _EST.get(task, {})
        per_run = int(est.get("gpus_per_run") or 0)
        if per_run:  # whole GPUs (DDP): a run over gpus_per_run GPUs, step time / that
            lanes = max(1, gpus // per_run)
            minutes = [m / per_run for m in minutes]
        else:
            lanes = gpus * (runs_per_gpu or int(est.get("runs_per_gpu") or 1))
        wall += makespan(minutes, lanes)
        total += sum(minutes) * (per_run or 1)
    return wall, total, sum(j.gpu_minutes is None for j in jobs)


def _hours(minutes: float) -> str:
    if minutes < 1:
        return f"{minutes * 60:.0f} s"
    return f"{minutes:.0f} min" if minutes < 90 else f"{minutes / 60:.1f} h"


def summary(table: str, profile: str, jobs: list[Job], points: int, force: bool = False) -> str:
    """'<table> [<profile>]: N runs (...): k finished, r running, f failed, m to train'."""
    n = {s: sum(j.state == s for j in jobs) for s in ("finished", "running", "failed", "missing")}
    todo = len(jobs) - (0 if force else n["finished"] + n["running"])
    grid = f" of {points} grid points" if points != len(jobs) else ""
    again = (f"; FORCE=1: all {todo} trained again from step 0" if force  # not "2 finished, 2 to train"
             else f", {todo} to train")
    return (f"{table} [{profile}]: {len(jobs)} runs{grid}: {n['finished']} finished, "
            f"{n['running']} running, {n['failed']} failed{again}")


def layout_lines(jobs: list[Job], gpus: int, k: int | None) -> list[str]:
    todo = [j for j in jobs if j.state not in ("finished", "running")]
    kname = str(k) if k else "K"
    out = []
    for g, kk, name in ((1, 1, "1 GPU x 1"), (1, k, f"1 GPU x {kname}"), (8, k, f"8 GPUs x {kname}"),
                        (gpus, k, f"{gpus} GPU{'s' if gpus > 1 else ''} x {kname} (asked)")):
        wall, total, unknown = gpu_wall(todo, g, kk)
        if not total:
            return []
        out.append(f"  {name:>22}: ~{_hours(wall)} wall ({total / 60:.1f} GPU-hours)"
                   + (f"; {unknown} runs without an estimate" if unknown else ""))
    ks = sorted({f"{t} {e.get('runs_per_gpu', 1)}" for t, e in _EST.items()
                 if t in {j.task for j in todo}})
    return [f"expected wall of the {len(todo)} runs to train, an ESTIMATE (assumed H200 step "
            f"times x steps, conf/estimates.yaml; an upper bound where early stopping ends runs "
            f"sooner; K = runs per GPU: {', '.join(ks)}):"] + out


def main(argv=None) -> int:
    from .launch import layout_error
    from .protocol import experiment_files, missing_reason
    ap = cli_parser(__doc__)
    ap.add_argument("table")
    ap.add_argument("--profile", default="smoke")
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--runs-per-gpu", type=int, default=None)
    ap.add_argument("--launcher", default="local")
    ap.add_argument("--list", action="store_true", help="print every run: state, run id, detail")
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_intermixed_args(argv)
    reason = missing_reason(a.table, a.profile) or layout_error(a.launcher, a.gpus, a.runs_per_gpu,
                                                                submit_only=True)
    if reason:
        return fail(reason)
    t0 = time.time()
    try:
        jobs, points = plan(a.table, a.profile, experiment_files(a.table), a.overrides)
    except ConfigError as e:
        return fail(e)
    if a.list:
        for j in jobs:
            print(f"{j.state:9s} {j.run_id}  {j.detail}".rstrip())
    print(f"{summary(a.table, a.profile, jobs, points)} (planned in {time.time() - t0:.1f} s)")
    cpu = expected_line([(j.overrides, j.cpu_minutes) for j in jobs
                         if j.state not in ("finished", "running")], max(1, a.runs_per_gpu or 1))
    if cpu:
        print("CPU" + cpu.lstrip(";"))
    for line in layout_lines(jobs, a.gpus, a.runs_per_gpu):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
