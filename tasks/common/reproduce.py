"""`make reproduce-<table>`: run every experiment file of a table as a Hydra multirun (finished
runs are skipped, killed ones resume from their last checkpoint), then regenerate the table.

    python -m tasks.common.reproduce table1 --profile smoke [extra overrides ...]
    python -m tasks.common.reproduce ablation --only 'mad_*'     # a subset of the files (glob)
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


def missing_reason(table: str) -> str | None:
    if not experiment_files(table):
        return f"unknown table {table!r}: use one of {', '.join(table_names())} (conf/experiment/)"
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("table")
    ap.add_argument("--profile", default="smoke", choices=["smoke", "paper"])
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
    failed = []
    for exp in tqdm(files, desc=f"{a.table} [{a.profile}]", unit="experiment", file=sys.stderr):
        cmd = [sys.executable, "-m", "tasks.train", "-m", f"experiment={exp}",
               f"profile={a.profile}", "resume=true", *a.overrides]
        print("+", " ".join(cmd), flush=True)
        rc = subprocess.call(cmd, cwd=ROOT)
        if rc:  # go on: the other files' runs still count (e.g. MAD rows without WikiText data)
            print(f"error: {exp} failed (exit {rc}); the other files go on", file=sys.stderr)
            failed.append(exp)
    # results go where the runs put them (paths.root_dir defaults to $ZEROS_ROOT or the repo)
    results = Path(os.environ.get("ZEROS_ROOT", ROOT)) / "results"
    print(tables.make(a.table, a.profile, results))
    if failed:
        print(f"error: {len(failed)} of {len(files)} experiment files failed ({', '.join(failed)}); "
              "the table above holds the rest. Fix the cause named above each failure and rerun "
              "the same command: finished runs are skipped", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
