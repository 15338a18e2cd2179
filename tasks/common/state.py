"""Run states: runner.run writes <run dir>/state.json (running + pid + start time; failed + the
one-line reason when an exception escapes; stopped on Ctrl-C / SIGTERM, counted as to train since
the next run resumes it; finished); a result JSON that reads back whole is "finished". The plan
(plan.py) and `make status` (status.py) read them back with job_state."""
from __future__ import annotations

import json
import os
from pathlib import Path

from . import claim, store
from .store import now, write_json_atomic

STATE = "state.json"
RUN_LOG = "run.log"  # a driver-started run's output (reproduce._launch writes it)


class RunState:
    """`with RunState() as st: ... st.start(run_dir) ...`: nothing is written before start()
    (a skipped run keeps its state); after it, the exit writes finished or failed."""

    def __init__(self):
        self.path: Path | None = None
        self.claim = None  # claim.Claim on the run id (claim.claim_run), released at the exit

    def _write(self, **state) -> None:
        write_json_atomic(self.path, state)

    def start(self, rdir: Path) -> None:
        self.path = Path(rdir) / STATE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._write(state="running", pid=os.getpid(), started=now())

    def __enter__(self):
        return self

    def __exit__(self, typ, exc, tb):
        try:
            if self.path is None:
                pass
            elif exc is None:
                self._write(state="finished", finished=now())
            elif issubclass(typ, SystemExit) and exc.code in (130, 143):  # runner._stopped
                self._write(state="stopped", stopped=now())  # Ctrl-C / SIGTERM: resumed next run
            else:
                reason = (str(exc).strip().splitlines() or [""])[0]
                self._write(state="failed", reason=f"{typ.__name__}: {reason}".rstrip(": "),
                            failed=now())
        finally:
            if self.claim is not None:
                self.claim.release()
        return False


def job_state(result: Path, rdir: Path) -> tuple[str, str]:
    """(finished | running | failed | missing, detail)."""
    if Path(result).exists():
        try:
            d = store.read_result(result)
            return "finished", f"step {d.get('global_step')}  {result}"
        except ValueError as e:
            return "failed", str(e)
    held = claim.read(Path(rdir) / claim.CLAIM)
    if held is not None and claim.is_live(held):  # any host: the lease says it is alive
        return "running", claim.holder(held) + last_progress(rdir)
    try:
        st = json.loads((Path(rdir) / STATE).read_text())
    except (OSError, json.JSONDecodeError):
        return "missing", ""
    if held is not None:
        return "failed", f"killed (claim of {claim.holder(held)} expired; the next run resumes it)"
    if st.get("state") == "running":
        if claim.pid_alive(int(st.get("pid", -1))):
            return "running", f"pid {st['pid']} since {st.get('started')}" + last_progress(rdir)
        return "failed", f"killed (pid {st.get('pid')} gone, started {st.get('started')})"
    if st.get("state") == "failed":
        return "failed", st.get("reason", "")
    if st.get("state") == "stopped":  # Ctrl-C / SIGTERM: to train, from its last checkpoint
        return "missing", f"stopped {st.get('stopped')}: the next run resumes it from its last checkpoint"
    return "missing", "result JSON removed"


def last_progress(rdir: Path) -> str:
    """'; [22:40:41] step 13000/24000 | ... | eta 2:08:50': the last progress line (progress.py)
    of a driver-started run's <run dir>/run.log, so `make status` says how far a running run is;
    '' without one (a run started by hand logs to its Hydra dir)."""
    try:
        with open(Path(rdir) / RUN_LOG, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 8192))  # progress.py writes one per validation
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        stamp, _, rest = line.partition(" [")  # "[hh:mm:ss] [<run>] step ..."
        if "] step " in rest:
            return f"; {stamp} {rest.split('] ', 1)[1]}"
    return ""
