"""`make reproduce-<table>`: plan the table's job list (tasks/common/plan.py: every run with its
id and state), run the runs to train on a launcher (tasks/common/launch.py), then regenerate
the table.

    python -m tasks.common.reproduce table1 --profile smoke [extra overrides ...]
    python -m tasks.common.reproduce ablation --only 'mad_*'     # a subset of the files (glob)
    python -m tasks.common.reproduce toy --force                 # rerun finished runs too
    python -m tasks.common.reproduce fig3 --profile cpu --jobs 2  # 2 runs at once, 1 thread each
    python -m tasks.common.reproduce table1 --profile paper --launcher ray --runs-per-gpu 8

Each run is its own `python -m tasks.train <overrides> resume=true` process, its output in
<run dir>/run.log, and claims its run id before training (claim.py): two drivers, a restarted
driver or an engine's retry never train a run twice. On CPU, `--jobs N` runs N at once with
cpu_count/N torch threads each (on 2 cores two 1-thread runs finish a table ~2x sooner than one
2-thread run at a time; two 2-thread runs oversubscribe and each gets ~5x slower). One bar over
the table's runs (finished / running / failed / to train); failed runs are listed at the end
with their log, the table is written from the rest and the exit status is 1. Only results/runs/
counts as finished: the committed reference results (results/reference/) never stop a run.
"""
from __future__ import annotations

import sys

from . import interrupt

if __name__ == "__main__":  # before the imports below: a Ctrl-C while they load is one line too
    interrupt.install("before any run started: nothing was written")  # exits until runs start

import fnmatch  # noqa: E402
import threading  # noqa: E402
from pathlib import Path  # noqa: E402

from . import launch, plan, tables, verdicts  # noqa: E402
from .errors import ConfigError, cli_parser, fail  # noqa: E402
from .protocol import experiment_files, load_spec, missing_reason, profiles  # noqa: E402
from .state import RUN_LOG  # noqa: E402
from .store import is_finished, results_root, slug, zeros_root  # noqa: E402
from .validate import check_device  # noqa: E402


def main(argv=None) -> int:
    ap = cli_parser(__doc__)
    ap.add_argument("table")
    ap.add_argument("--profile", default="smoke", choices=profiles())
    ap.add_argument("--force", action="store_true",
                    help="rerun finished runs too (skip_existing=false, resume=false)")
    ap.add_argument("--only", action="append", default=[], metavar="GLOB",
                    help="run only the experiment files whose name matches (repeatable), e.g. 'mad_*'")
    ap.add_argument("--jobs", type=int, default=1, metavar="N",
                    help="runs at once on CPU (local launcher without GPUs), cpu_count/N threads each")
    ap.add_argument("--launcher", default="local", help="local | ray | slurm (make LAUNCHER=...)")
    ap.add_argument("--gpus", type=int, default=None,
                    help="GPUs to use (local: default all visible; ray: GPUs a local Ray declares)")
    ap.add_argument("--runs-per-gpu", type=int, default=None, metavar="K",
                    help="runs sharing one GPU (default: per task, conf/estimates.yaml)")
    ap.add_argument("--claim", default=None, metavar="ID[@COLUMN]",
                    help="train only the runs one claim of conf/claims.yaml rests on (its rows at "
                         "its columns, or at COLUMN), then print its verdicts, e.g. mad@Memorize")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run")
    a = ap.parse_intermixed_args(argv)
    try:  # every check before anything trains: one line, exit 2
        jobs, points, todo, claim = _prepare(a)
    except ConfigError as e:
        return fail(e)
    print(plan.summary(a.table, a.profile, jobs, points, a.force)
          + plan.expected_line([(j.overrides, j.cpu_minutes) for j in todo], a.jobs), flush=True)
    adhoc = [j for j in todo if j.adhoc]
    if adhoc:  # an override took them off the grid: say it before they train, not after
        print(f"note: {len(adhoc)} of these runs are ad hoc (an override takes them off the "
              f"{a.table} protocol at profile {a.profile}; each run's note says which): they "
              f"train, but no table reads them ({adhoc[0].result.parent})", flush=True)
    again = ["skip_existing=false", "resume=false"] if a.force else ["resume=true"]
    progress = Progress(a.table, a.profile, jobs, todo)
    interrupt.raise_from_now()  # runs start: a stop is passed on to them and the driver unwinds
    try:
        results = _launch(a, todo, again, progress)
    except interrupt.STOPS as e:
        progress.close()
        return interrupted(a.launcher, e)
    progress.close()
    failed = [(name, log) for name, rc, log in results if rc]
    rc = _finish(a.table, a.profile, failed, len(todo))
    if claim:
        print_verdicts(claim, a.profile)
    return rc


def _prepare(a) -> tuple[list, int, list, dict | None]:
    """(the table's jobs, its grid points, the jobs to train, the claim or None), after checking
    the arguments, the device, the experiment files, the composed grid and the data."""
    reason = missing_reason(a.table) or launch.layout_error(a.launcher, a.gpus, a.runs_per_gpu)
    if not reason and a.jobs < 1:
        reason = f"--jobs {a.jobs}: use a positive number of runs at once, e.g. --jobs 2"
    if reason:
        raise ConfigError(reason)
    if a.launcher == "local":  # before composing; a login node / Ray client needs no GPU
        check_device(a.overrides, a.profile)
    files = experiment_files(a.table)
    if a.only:
        files = [f for f in files if any(fnmatch.fnmatch(f.split("/", 1)[1], g) for g in a.only)]
        if not files:
            names = ", ".join(f.split("/", 1)[1] for f in experiment_files(a.table))
            raise ConfigError(f"--only {' '.join(a.only)} matches no file of "
                              f"conf/experiment/{a.table}/ ({names})")
    jobs, points = plan.plan(a.table, a.profile, files, a.overrides)  # ConfigError: one line
    claim = None
    if a.claim:
        claim, wanted = claim_subset(a.table, a.claim)
        jobs = [j for j in jobs if wanted(j.run_id)]
    todo = [j for j in jobs if j.state != "running" and (a.force or j.state != "finished")]
    if a.launcher == "local":  # on a cluster each run checks the data where it runs
        check_data(todo)
    return jobs, points, todo, claim


def check_data(todo) -> None:
    """Each dataset the runs to train read, checked (or downloaded) once before any run starts:
    a missing data folder is one line and exit 2 here, not one failed run per sweep point. The
    runs of one experiment file that share their task.dataset / task.datamodule overrides read
    the same data: one composed config per such group."""
    from .provenance import composer
    from .runner import check_data as check_cfg
    groups = {}
    for j in todo:
        key = tuple(o for o in j.overrides if o.startswith(
            ("experiment=", "profile=", "task=", "task.dataset=", "task.datamodule.")))
        groups.setdefault(key, j.overrides)

    def exp(overrides):  # the run's experiment file
        return next((o.split("=", 1)[1] for o in overrides if o.startswith("experiment=")), "")
    failed = {}  # experiment file -> its first error
    with composer() as compose:
        for overrides in groups.values():
            if exp(overrides) not in failed:
                try:
                    check_cfg(compose(overrides))
                except ConfigError as e:
                    failed[exp(overrides)] = e
    if failed:
        ok = sorted(f.split("/", 1)[-1] for f in {exp(j.overrides) for j in todo} - set(failed))
        hint = " ".join(f"--only '{f}'" for f in ok)
        raise ConfigError(f"{next(iter(failed.values()))}"
                          + (f" (or {hint} to train the table's other files)" if ok else ""))


def claim_subset(table: str, arg: str):
    """(the claim restricted to COLUMN, a test of a run id: one of its runs). A run id starts
    `<row>__<column>__<setting>__` (store.make_run_id); the claim's rows are its `rows` and
    `versus`, its columns the table's column keys (and setting globs) its labels name."""
    cid, _, label = arg.partition("@")
    claims = verdicts.load_claims()
    claim = verdicts.find_claim(claims, cid)
    if claim["table"] != table:
        raise ConfigError(f"claim {cid} is about {claim['table']}, not {table}: "
                          f"make reproduce-{claim['table']} ARGS=--claim={arg}")
    cols = verdicts.claim_columns(load_spec(table), claim)
    if label:
        labels = [c.get("label", c["key"]) for c in cols]  # as verdicts names the columns
        if label not in labels:
            raise ConfigError(f"claim {cid} has no column {label!r}: use one of {', '.join(labels)}")
        i = labels.index(label)
        claim, cols = {**claim, "columns": [claim["columns"][i]]}, [cols[i]]
    rows = {slug(str(r)) for r in [*claim["rows"], *claim.get("versus", [])]}

    def wanted(run_id: str) -> bool:
        parts = run_id.split("__")
        if len(parts) < 4 or parts[0] not in rows:
            return False
        return any(c["key"] == "*" or slug(str(c["key"])) == parts[1]
                   and fnmatch.fnmatch(parts[2], c.get("settings", "*")) for c in cols)
    return {**claims, "claims": [claim]}, wanted


def print_verdicts(claims: dict, profile: str) -> None:
    """The claim's verdicts from the runs under results/ (yours, not the committed reference)."""
    for r in verdicts.evaluate(claims, profile, results_root()):
        why = f" ({r['why']})" if r["why"] else ""
        print(f"verdict [{profile}]: {r['text']}: {r['verdict'].upper()}{why}\n"
              f"  tested: {r['tested']}; evidence: {r['evidence']}; converged: {r['converged']}")


def interrupted(launcher: str | None, exc: BaseException = KeyboardInterrupt()) -> int:
    """Ctrl-C / SIGTERM on the driver while runs train: one line, exit 130 / 143. Local runs get
    the stop (each prints where it resumes from, in its run.log and here, releases its claim and
    keeps its last checkpoint); Ray's tasks end with the driver; submitted SLURM jobs go on
    (scancel them). No table is rebuilt and finished runs are never touched. launcher None: a
    stop while no run trains (no adopted run to stop)."""
    interrupt.stop_children()
    what, code = interrupt.how(exc)
    left = {None: "", "local": "running runs stopped; ", "ray": "Ray tasks stopped; ",
            "slurm": "submitted SLURM jobs go on (scancel to stop them); "}[launcher]
    print(f"error: {what}: no table rebuilt, finished runs untouched; {left}rerun the same "
          "command to continue (stopped runs resume from their last checkpoint)", file=sys.stderr)
    return code


def stoppable(argv=None) -> int:
    """main(), stopped by Ctrl-C / SIGTERM before or after its runs (planning, the table): one
    line, exit 130 / 143, no table rebuilt, no finished run touched."""
    try:
        return main(argv)
    except BaseException as e:  # a stop, or an error a stop caused (interrupt.stop_behind)
        stop = interrupt.stop_behind(e)
        if stop is None:
            raise
        return interrupted(None, stop)


class Progress:
    """One bar over the table's runs: finished / running / failed / to train."""

    def __init__(self, table, profile, jobs, todo):
        from tqdm import tqdm
        self.n = {"finished": sum(j.state == "finished" for j in jobs if j not in todo),
                  "running": sum(j.state == "running" for j in jobs), "failed": 0,
                  "to train": len(todo)}
        # the bar on a terminal only: in a log file its redraws are residue (the lines say it)
        self.bar = tqdm(total=len(jobs), initial=self.n["finished"], unit="run", file=sys.stderr,
                        desc=f"{table} [{profile}]", disable=not sys.stderr.isatty())
        self.lock = threading.Lock()
        self._show()

    def _show(self):
        self.bar.set_postfix_str(", ".join(f"{v} {k}" for k, v in self.n.items()))

    def start(self, job):
        with self.lock:
            self.n["to train"] -= 1
            self.n["running"] += 1
            self._show()

    def end(self, job, rc: int, started: bool = True):
        with self.lock:
            self.n["running" if started else "to train"] -= 1
            state = "failed" if rc else "finished" if is_finished(job.result) else "running"
            self.n[state] += 1  # exit 0 without a result: its claim is held elsewhere
            if state == "finished":
                self.bar.update(1)
            self._show()

    def write(self, line: str):
        self.bar.write(line, file=sys.stdout)

    def close(self):
        self.bar.close()


def _launch(a, todo, again, progress) -> list[tuple[str, int, Path]]:
    tasks, by_name = [], {}
    for i, j in enumerate(todo, 1):
        # a Hydra dir per job: two runs started in the same second must not share one
        cmd = [sys.executable, "-m", "tasks.train", *j.overrides, *again,
               f"hydra.run.dir=${{paths.log_dir}}/hydra/${{now:%Y-%m-%d_%H-%M-%S}}_{j.run_id}"]
        whole = int(plan._EST.get(j.task, {}).get("gpus_per_run") or 0)
        tasks.append(launch.Task(j.run_id, cmd, Path(j.rdir) / RUN_LOG, gpus=whole))
        by_name[j.run_id] = (i, j)
    k = a.runs_per_gpu or min([int(plan._EST.get(j.task, {}).get("runs_per_gpu") or 1)
                               for j in todo] or [1])
    if any(t.gpus for t in tasks):  # LM / DeiT runs take whole GPUs
        k = 1
    job = lambda t: by_name[t.name][1]  # noqa: E731
    if a.launcher == "ray":
        progress.write(f"launcher ray: {len(tasks)} runs, {k} per GPU")
        return launch.run_ray(tasks, k, gpus=a.gpus,
                              on_end=lambda t, rc: progress.end(job(t), rc, started=False))
    if a.launcher == "slurm":
        folder = zeros_root() / "outputs" / "submitit" / a.table
        progress.write(f"launcher slurm: {len(tasks)} runs as {-(-len(tasks) // k)} array tasks "
                       f"of {k} (logs: {folder})")
        return launch.run_slurm(tasks, k, folder, params=launch.slurm_params(),
                                on_end=lambda t, rc: progress.end(job(t), rc, started=False))
    gpus = launch.visible_gpus() if a.gpus is None else a.gpus
    many = (gpus * k if gpus else a.jobs) > 1

    def echo(t, line):
        progress.write((f"[{by_name[t.name][0]}] " if many else "") + line)
    return launch.run_local(tasks, a.jobs, gpus=gpus, runs_per_gpu=k,
                            on_start=lambda t: progress.start(job(t)),
                            on_end=lambda t, rc: progress.end(job(t), rc), echo=echo)


def _finish(table: str, profile: str, failed: list[tuple[str, Path]], of: int) -> int:
    info = tables.make(table, profile, results_root())  # no runs: make() said so in one line
    if info["runs"]:
        print(f"{table} [{profile}]: {info.get('table') or info.get('figure')} "
              f"({info['runs']} runs)")
    if failed:
        for name, log in failed:
            print(f"failed: {name}  log: {log}", file=sys.stderr)
        print(f"error: {len(failed)} of {of} runs failed (listed above with their logs); the "
              "table above holds the rest. Fix the cause named at the end of each log and rerun "
              "the same command: finished runs are skipped (`make status TABLE=...` lists them)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(stoppable())
