"""Run states and `make status TABLE=x [PROFILE=y]`: which runs of a table are finished, running,
failed or missing.

    python -m tasks.common.status table1 --profile smoke

runner.run writes <run dir>/state.json (running + pid + start time; failed + the one-line
reason when an exception escapes; stopped on Ctrl-C / SIGTERM, counted as to train since the next
run resumes it; finished); a result JSON that reads back whole is "finished".
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

STATE = "state.json"


def read_result(path: Path) -> dict:
    """The result JSON as a dict; ValueError (one line, names the file) when it does not read."""
    try:
        d = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON ({str(e).splitlines()[0]})") from None
    if not isinstance(d, dict) or "metrics" not in d:
        raise ValueError(f"{path}: not a run result (no 'metrics')")
    return d


def is_finished(path: Path) -> bool:
    """For skip_existing: a result JSON that does not read back is a run still to do."""
    if not Path(path).exists():
        return False
    try:
        read_result(path)
        return True
    except ValueError as e:
        print(f"warning: {e}: training this run again", flush=True)
        return False


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class RunState:
    """`with RunState() as st: ... st.start(run_dir) ...`: nothing is written before start()
    (a skipped run keeps its state); after it, the exit writes finished or failed."""

    def __init__(self):
        self.path: Path | None = None
        self.claim = None  # claim.Claim on the run id (claim.claim_run), released at the exit

    def _write(self, **state) -> None:
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.path)

    def start(self, rdir: Path) -> None:
        self.path = Path(rdir) / STATE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._write(state="running", pid=os.getpid(), started=_now())

    def __enter__(self):
        return self

    def __exit__(self, typ, exc, tb):
        try:
            return self._exit(typ, exc)
        finally:
            if self.claim is not None:
                self.claim.release()

    def _exit(self, typ, exc):
        if self.path is None:
            return False
        if exc is None:
            self._write(state="finished", finished=_now())
        elif issubclass(typ, SystemExit) and exc.code in (130, 143):  # runner._stopped: Ctrl-C / SIGTERM
            self._write(state="stopped", stopped=_now())  # not a failure: the next run resumes it
        else:
            reason = (str(exc).strip().splitlines() or [""])[0]
            self._write(state="failed", reason=f"{typ.__name__}: {reason}".rstrip(": "),
                        failed=_now())
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    return True


def job_state(result: Path, rdir: Path) -> tuple[str, str]:
    """(finished | running | failed | missing, detail)."""
    if Path(result).exists():
        try:
            d = read_result(result)
            return "finished", f"step {d.get('global_step')}  {result}"
        except ValueError as e:
            return "failed", str(e)
    from . import claim
    held = claim.read(Path(rdir) / claim.CLAIM)
    if held is not None and claim.is_live(held):  # any host: the lease says it is alive
        return "running", claim.holder(held)
    try:
        st = json.loads((Path(rdir) / STATE).read_text())
    except (OSError, json.JSONDecodeError):
        return "missing", ""
    if held is not None:
        return "failed", f"killed (claim of {claim.holder(held)} expired; the next run resumes it)"
    if st.get("state") == "running":
        if _alive(int(st.get("pid", -1))):
            return "running", f"pid {st['pid']} since {st.get('started')}"
        return "failed", f"killed (pid {st.get('pid')} gone, started {st.get('started')})"
    if st.get("state") == "failed":
        return "failed", st.get("reason", "")
    if st.get("state") == "stopped":  # Ctrl-C / SIGTERM: to train, from its last checkpoint
        return "missing", f"stopped {st.get('stopped')}: the next run resumes it from its last checkpoint"
    return "missing", "result JSON removed"


ORDER = ("finished", "running", "failed", "missing")


def table_status(table: str, profile: str, extra: list[str] | None = None):
    """[(state, run id, detail)] over every protocol job of the table (plan.py), and its count."""
    from .plan import plan
    from .reproduce import experiment_files
    jobs, _ = plan(table, profile, experiment_files(table), extra or [])
    return [(j.state, j.run_id, j.detail) for j in jobs], len(jobs)


def _results_dir() -> Path:
    """Where the runs put their results (paths.root_dir defaults to $ZEROS_ROOT or the repo)."""
    return Path(os.environ.get("ZEROS_ROOT", Path(__file__).resolve().parents[2])) / "results"


def reference_line(table: str, profile: str, current: set[str], results_dir: Path) -> str:
    """How many committed reference runs of the table/profile a run of today's config would
    reproduce. A reference run counts as current when the id recomputed from the config it
    stored is one of today's ids (so a mere change of the id rules does not make it stale)."""
    from .runinfo import current_id, profile_of_id
    from .tables import reference_root
    ref_dir = reference_root(results_dir) / "runs" / table
    total = fresh = 0
    for f in sorted(ref_dir.glob("*.json")) if ref_dir.is_dir() else []:
        try:
            d = read_result(f)
        except Exception:  # noqa: BLE001  unreadable: its profile is the one its id ends with
            total += profile_of_id(f.stem) == profile
            continue
        if d.get("profile") != profile:
            continue
        total += 1
        try:
            fresh += current_id(d) in current
        except Exception:  # noqa: BLE001  (a config from older code: not current)
            pass
    if not total:
        return f"reference [{profile}]: no committed runs"
    runs = f"{total} committed run{'s' if total > 1 else ''}"
    if fresh == total:
        return f"reference [{profile}]: {runs}, all of the current config"
    return (f"reference [{profile}]: {runs}, {fresh} of the current config; the "
            f"other {total - fresh} come from an older config (renew: make reproduce-{table} "
            f"PROFILE={profile} && make reference TABLE={table} PROFILE={profile})")


def main(argv=None) -> int:
    from .reproduce import missing_reason, profiles
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("table")
    ap.add_argument("--profile", default="smoke")
    ap.add_argument("overrides", nargs="*", help="the extra overrides the sweep was run with")
    a = ap.parse_intermixed_args(argv)  # `make status` puts the overrides after --profile
    reason = missing_reason(a.table)
    if not reason and a.profile not in profiles():
        reason = f"unknown profile {a.profile!r}: use one of {', '.join(profiles())}"
    if reason:
        print(f"error: {reason}", file=sys.stderr)
        return 2
    rows, total = table_status(a.table, a.profile, a.overrides)
    rows.sort(key=lambda r: ORDER.index(r[0]))
    for state, rid, detail in rows:
        print(f"{state:9s} {rid}  {detail}".rstrip())
    counts = ", ".join(f"{sum(r[0] == s for r in rows)} {s}" for s in ORDER)
    print(f"{a.table} [{a.profile}]: {total} runs: {counts}")
    print(reference_line(a.table, a.profile, {r[1] for r in rows}, _results_dir()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
