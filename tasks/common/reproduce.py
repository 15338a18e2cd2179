"""`make reproduce-<table>`: run every experiment file of a table as a Hydra multirun (finished
runs are skipped, killed ones resume from their last checkpoint), then regenerate the table.

    python -m tasks.common.reproduce table1 --profile smoke [extra overrides ...]
    python -m tasks.common.reproduce ablation --only 'mad_*'     # a subset of the files (glob)
    python -m tasks.common.reproduce toy --force                 # rerun finished runs too

It first expands the sweeps (Hydra's BasicSweeper rules, tasks/common/provenance.py) to say how
many runs there are and how many are finished, then shows one progress bar over the runs (each
child's `result:` / `skip` line advances it). Only results/runs/ counts as finished: the
committed reference results (results/reference/) never stop a user's run.
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import subprocess
import sys
from pathlib import Path

from . import tables
from .errors import ConfigError
from .validate import check_device

ROOT = Path(__file__).resolve().parents[2]


def table_names() -> list[str]:
    return sorted(p.name for p in (ROOT / "conf" / "experiment").iterdir() if p.is_dir())


def experiment_files(table: str) -> list[str]:
    d = ROOT / "conf" / "experiment" / table
    return sorted(f"{table}/{p.stem}" for p in d.glob("*.yaml")) if d.is_dir() else []


def profiles() -> list[str]:
    return sorted(p.stem for p in (ROOT / "conf" / "profile").glob("*.yaml"))


def missing_reason(table: str) -> str | None:
    if not experiment_files(table):
        return f"unknown table {table!r}: use one of {', '.join(table_names())} (conf/experiment/)"
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("table")
    ap.add_argument("--profile", default="smoke", choices=profiles())
    ap.add_argument("--force", action="store_true",
                    help="rerun finished runs too (skip_existing=false, resume=false)")
    ap.add_argument("--only", action="append", default=[], metavar="GLOB",
                    help="run only the experiment files whose name matches (repeatable), e.g. 'mad_*'")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run")
    a = ap.parse_intermixed_args(argv)
    reason = missing_reason(a.table)
    if reason:
        print(f"error: {reason}", file=sys.stderr)
        return 2
    try:  # before any experiment file is composed: a paper grid takes minutes to compose
        check_device(a.overrides, a.profile)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from tqdm import tqdm
    files = experiment_files(a.table)
    if a.only:
        files = [f for f in files if any(fnmatch.fnmatch(f.split("/", 1)[1], g) for g in a.only)]
        if not files:
            names = ", ".join(f.split("/", 1)[1] for f in experiment_files(a.table))
            print(f"error: --only {' '.join(a.only)} matches no file of conf/experiment/{a.table}/ "
                  f"({names})", file=sys.stderr)
            return 2
    try:
        total = plan(a.table, a.profile, files, a.overrides, a.force)
    except Exception as e:  # noqa: BLE001  (a bad override: Hydra's own message, one line)
        print(f"error: cannot compose {a.table} with {' '.join(a.overrides) or 'no overrides'}: "
              f"{(str(e).strip().splitlines() or [type(e).__name__])[0]}", file=sys.stderr)
        return 2
    again = ["skip_existing=false", "resume=false"] if a.force else ["resume=true"]
    failed = []
    bar = tqdm(total=total, desc=f"{a.table} [{a.profile}]", unit="run", file=sys.stderr)
    for exp in files:
        cmd = [sys.executable, "-m", "tasks.train", "-m", f"experiment={exp}",
               f"profile={a.profile}", *again, *a.overrides]
        bar.write("+ " + " ".join(cmd), file=sys.stdout)
        rc = _run_child(cmd, bar)
        if rc:  # go on: the other files' runs still count (e.g. MAD rows without WikiText data)
            print(f"error: {exp} failed (exit {rc}); the other files go on", file=sys.stderr)
            failed.append(exp)
    bar.close()
    # results go where the runs put them (paths.root_dir defaults to $ZEROS_ROOT or the repo)
    results = Path(os.environ.get("ZEROS_ROOT", ROOT)) / "results"
    info = tables.make(a.table, a.profile, results)  # no runs: make() said so in one line
    if info["runs"]:
        print(f"{a.table} [{a.profile}]: {info.get('table') or info.get('figure')} "
              f"({info['runs']} runs)")
    if failed:
        print(f"error: {len(failed)} of {len(files)} experiment files failed ({', '.join(failed)}); "
              "the table above holds the rest. Fix the cause named above each failure and rerun "
              "the same command: finished runs are skipped (`make status TABLE=...` lists them)",
              file=sys.stderr)
        return 1
    return 0


def plan(table: str, profile: str, files: list[str], overrides: list[str], force: bool) -> int:
    """Print '<table> [<profile>]: N runs (k finished, m to train)'; return N. Composing one job
    takes ~0.45 s, so above status.MAX_LISTED jobs (a paper grid) only N is printed."""
    from .provenance import composer, job_paths, sweep_jobs
    from .status import MAX_LISTED, is_finished
    with composer() as compose:
        jobs = [j for exp in files for j in sweep_jobs(exp, profile, overrides, compose)]
        if len(jobs) > MAX_LISTED:
            print(f"{table} [{profile}]: {len(jobs)} runs (more than {MAX_LISTED}: finished runs "
                  "are found as the sweep goes)", flush=True)
            return len(jobs)
        done = sum(is_finished(job_paths(j, compose)[1]) for j in jobs)
    todo = len(jobs) if force else len(jobs) - done  # --force trains the finished ones again
    print(f"{table} [{profile}]: {len(jobs)} runs ({done} finished, {todo} to train)", flush=True)
    return len(jobs)


def _run_child(cmd: list[str], bar) -> int:
    """Run one multirun, echo its stdout above the bar; each run's last line advances the bar."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # lines as they happen, not at exit
    with subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True,
                          bufsize=1) as proc:
        for line in proc.stdout:
            bar.write(line.rstrip("\n"), file=sys.stdout)
            if line.startswith(("result: ", "skip (")):  # runner.run's one closing line per run
                bar.update(1)
        return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
