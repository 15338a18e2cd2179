"""`make reproduce-<table>`: run every experiment file of a table as a Hydra multirun (finished
runs are skipped, killed ones resume from their last checkpoint), then regenerate the table.

    python -m tasks.common.reproduce table1 --profile smoke [extra overrides ...]
    python -m tasks.common.reproduce ablation --only 'mad_*'     # a subset of the files (glob)
    python -m tasks.common.reproduce toy --force                 # rerun finished runs too
    python -m tasks.common.reproduce fig3 --profile cpu --jobs 2  # 2 runs at once, 1 thread each

It first expands the sweeps (Hydra's BasicSweeper rules, tasks/common/provenance.py) to say how
many runs there are and how many are finished, then shows one progress bar over the runs (each
child's `result:` / `skip` line advances it). With `--jobs N` (N > 1) the driver starts the runs
itself, N at a time, each with cpu_count / N torch threads (on 2 cores two 1-thread runs finish
a table ~2x sooner than one 2-thread run at a time; two 2-thread runs oversubscribe and each gets
~5x slower). Where the profile sets `expected_minutes` (profile=cpu) it prints the expected wall
time first. Only results/runs/ counts as finished: the
committed reference results (results/reference/) never stop a user's run.
"""
from __future__ import annotations

import sys

from . import interrupt

if __name__ == "__main__":  # before the imports below: a Ctrl-C while they load is one line too
    interrupt.install("before any run started: nothing was written")

import argparse  # noqa: E402
import fnmatch  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
from pathlib import Path  # noqa: E402

from . import tables  # noqa: E402
from .errors import ConfigError  # noqa: E402
from .validate import check_device  # noqa: E402

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
    ap.add_argument("--jobs", type=int, default=1, metavar="N",
                    help="runs at once (default 1: one Hydra multirun per file); N > 1 starts the "
                         "runs itself, N at a time with cpu_count/N threads each (make JOBS=N)")
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
    if a.jobs < 1:
        print(f"error: --jobs {a.jobs}: use a positive number of runs at once, e.g. --jobs 2",
              file=sys.stderr)
        return 2
    try:
        total, jobs = plan_jobs(a.table, a.profile, files, a.overrides, a.force, a.jobs)
    except ConfigError as e:  # e.g. a table without rows at this profile
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001  (a bad override: Hydra's own message, one line)
        print(f"error: cannot compose {a.table} with {' '.join(a.overrides) or 'no overrides'}: "
              f"{(str(e).strip().splitlines() or [type(e).__name__])[0]}", file=sys.stderr)
        return 2
    again = ["skip_existing=false", "resume=false"] if a.force else ["resume=true"]
    parallel = a.jobs > 1 and jobs is not None  # the driver starts only the runs to train
    # the bar on a terminal only: in a log file its redraws are residue (the `result:` lines say it)
    bar = tqdm(total=total, initial=total - len(jobs) if parallel else 0,
               desc=f"{a.table} [{a.profile}]", unit="run", file=sys.stderr,
               disable=not sys.stderr.isatty())
    if parallel:
        failed = _run_parallel(jobs, again, a.jobs, bar)
        bar.close()
        return _finish(a.table, a.profile, failed, len(jobs), "runs")
    failed = []
    for exp in files:
        cmd = [sys.executable, "-m", "tasks.train", "-m", f"experiment={exp}",
               f"profile={a.profile}", *again, *a.overrides]
        bar.write("+ " + " ".join(cmd), file=sys.stdout)
        rc = _run_child(cmd, bar)
        if rc:  # go on: the other files' runs still count (e.g. MAD rows without WikiText data)
            print(f"error: {exp} failed (exit {rc}); the other files go on", file=sys.stderr)
            failed.append(exp)
    bar.close()
    return _finish(a.table, a.profile, failed, len(files), "experiment files")


def _finish(table: str, profile: str, failed: list[str], of: int, what: str) -> int:
    # results go where the runs put them (paths.root_dir defaults to $ZEROS_ROOT or the repo)
    results = Path(os.environ.get("ZEROS_ROOT", ROOT)) / "results"
    info = tables.make(table, profile, results)  # no runs: make() said so in one line
    if info["runs"]:
        print(f"{table} [{profile}]: {info.get('table') or info.get('figure')} "
              f"({info['runs']} runs)")
    if failed:
        print(f"error: {len(failed)} of {of} {what} failed ({', '.join(failed)}); "
              "the table above holds the rest. Fix the cause named above each failure and rerun "
              "the same command: finished runs are skipped (`make status TABLE=...` lists them)",
              file=sys.stderr)
        return 1
    return 0


def plan_jobs(table: str, profile: str, files: list[str], overrides: list[str], force: bool,
              parallel: int = 1) -> tuple[int, list[list[str]] | None]:
    """Print '<table> [<profile>]: N runs (k finished, m to train)' and, where the profile sets
    `expected_minutes`, the expected wall time at `parallel` runs at once. Return N and the
    override lists of the runs to train. Composing one job takes ~0.45 s, so above
    status.MAX_LISTED jobs (a paper grid) only N is printed and the list is None."""
    from .provenance import composer, job_info, sweep_jobs
    from .status import MAX_LISTED, is_finished
    with composer() as compose:
        jobs = [j for exp in files for j in sweep_jobs(exp, profile, overrides, compose)]
        if len(jobs) > MAX_LISTED:
            print(f"{table} [{profile}]: {len(jobs)} runs (more than {MAX_LISTED}: finished runs "
                  "are found as the sweep goes)", flush=True)
            return len(jobs), None
        infos = [job_info(j, compose) for j in jobs]
    finished = [is_finished(info[1]) for info in infos]
    todo = [(j, info[3]) for j, info, f in zip(jobs, infos, finished) if force or not f]
    again = f"all {len(todo)} trained again from step 0 (FORCE=1)" if force else \
        f"{len(todo)} to train"  # not "2 finished, 2 to train"
    print(f"{table} [{profile}]: {len(jobs)} runs ({sum(finished)} finished, {again})"
          f"{expected_line(todo, parallel)}", flush=True)
    return len(jobs), [j for j, _ in todo]


def expected_line(todo: list[tuple[list[str], float | None]], parallel: int) -> str:
    """'; expected ~47 min (94 run-minutes, 2 at once)' from the runs' expected_minutes."""
    minutes = [m for _, m in todo if m is not None]
    if not todo or not minutes:
        return ""
    unknown = len(todo) - len(minutes)
    wall = _makespan(sorted(minutes, reverse=True), parallel)
    return (f"; expected ~{wall:.0f} min ({sum(minutes):.0f} run-minutes at 1 thread, "
            f"{parallel} at once)" + (f", {unknown} runs without an estimate" if unknown else ""))


def _makespan(minutes: list[float], parallel: int) -> float:
    """Wall time of running the jobs longest first on `parallel` workers (the driver's order)."""
    lanes = [0.0] * max(1, parallel)
    for m in minutes:
        lanes[lanes.index(min(lanes))] += m
    return max(lanes)


def _run_parallel(jobs: list[list[str]], again: list[str], parallel: int, bar) -> list[str]:
    """Each job as its own `tasks.train` run, `parallel` at a time, cpu_count/parallel threads
    each; lines are prefixed with the job's number. Returns the failed jobs' override strings."""
    from concurrent.futures import ThreadPoolExecutor
    threads = str(max(1, (os.cpu_count() or 1) // parallel))
    env = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    failed = []

    def one(i_job):
        i, job = i_job
        # a run dir per job: two runs started in the same second must not share Hydra's dir
        cmd = [sys.executable, "-m", "tasks.train", *job, *again,
               f"hydra.run.dir=${{paths.log_dir}}/hydra/${{now:%Y-%m-%d_%H-%M-%S}}_{i}"]
        bar.write(f"[{i}] + " + " ".join(cmd), file=sys.stdout)
        if _run_child(cmd, bar, prefix=f"[{i}] ", env=env):
            failed.append(" ".join(job))
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        list(pool.map(one, enumerate(jobs, 1)))
    return failed


def _run_child(cmd: list[str], bar, prefix: str = "", env: dict | None = None) -> int:
    """Run one multirun, echo its stdout above the bar; each run's last line advances the bar."""
    env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}  # lines as they happen
    # own session: a Ctrl-C of the terminal reaches the driver only, which passes it on once
    with subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True, bufsize=1,
                          start_new_session=True) as proc, \
            interrupt.child(proc, lambda line: bar.write(prefix + line.rstrip("\n"),
                                                         file=sys.stdout)):
        for line in proc.stdout:
            bar.write(prefix + line.rstrip("\n"), file=sys.stdout)
            if line.startswith(("result: ", "skip (")):  # runner.run's one closing line per run
                bar.update(1)
        return proc.wait()


def stoppable(argv=None) -> int:
    """main(), stopped by Ctrl-C / SIGTERM at any moment: the live runs get the signal and print
    where they resume from (tasks/common/interrupt.py), the driver one line, exit 130 / 143; no
    table is rebuilt and no finished run is touched."""
    try:
        return main(argv)
    except (KeyboardInterrupt, interrupt.Terminated) as e:
        what, code = interrupt.how(e)
        print(f"error: {what}: no table rebuilt, finished runs untouched; rerun the same command "
              "to continue (stopped runs resume from their last checkpoint)", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(stoppable())
