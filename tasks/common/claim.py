"""Each run trained exactly once: before training, a run takes a claim on its run id, a file
<run dir>/claim.json created exclusively (O_CREAT|O_EXCL: of two processes, on any hosts sharing
the file system, exactly one creates it) holding host, pid, start time and a lease that a
heartbeat thread renews while the run trains.

- a live claim (renewed within its lease): the run is skipped with one line naming the holder;
- a stale claim (lease expired: the holder was killed, or its host died): taken over, and the run
  resumes from its last checkpoint. A pid check alone cannot see other hosts, hence the lease.
  Two takers of the same stale claim race on a marker file created exclusively per claim token,
  so exactly one removes the old claim and creates its own.
Hosts compare lease times by their clocks (keep them NTP-synced); the lease is ZEROS_CLAIM_LEASE_S
seconds (default 120), renewed every quarter of it.

ZEROS_CLAIM_WAIT_S (the Ray launcher sets it on its one retry of a task whose worker died): wait
up to that long for a live claim to end (released, or its lease expired: the killed attempt's
claim on another host) before skipping, so that the retry resumes the run instead of skipping it.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import uuid
from pathlib import Path

from .store import now, write_json_atomic

CLAIM = "claim.json"


def lease_s() -> float:
    return float(os.environ.get("ZEROS_CLAIM_LEASE_S", 120))


def read(path: Path) -> dict | None:
    """The claim's content; None when there is none. A claim caught between its creation and
    its first write reads as a live claim of an unknown holder (by its file time)."""
    try:
        text = Path(path).read_text()
        mtime = Path(path).stat().st_mtime
    except OSError:
        return None
    try:
        info = json.loads(text)
        if isinstance(info, dict) and "token" in info:
            return info
    except json.JSONDecodeError:
        pass
    return {"token": f"unreadable-{mtime}", "host": "?", "pid": "?", "started": "?",
            "renewed": mtime, "lease_s": lease_s()}


def is_live(info: dict, now: float | None = None) -> bool:
    """Renewed within its lease; on this host also its process alive (a killed driver's runs
    are taken over at once, not a lease later)."""
    if info.get("host") == socket.gethostname() and isinstance(info.get("pid"), int) \
            and not pid_alive(info["pid"]):
        return False
    return (now or time.time()) - float(info["renewed"]) <= float(info.get("lease_s", lease_s()))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        pass
    return True


def holder(info: dict) -> str:
    age = time.time() - float(info["renewed"])
    return (f"{info.get('host')} pid {info.get('pid')} since {info.get('started')}, lease "
            f"renewed {age:.0f} s ago")


class Claim:
    """A claim this process holds: renewed by a daemon thread until release()."""

    def __init__(self, path: Path, info: dict, took_over: dict | None = None):
        self.path, self.info, self.took_over = Path(path), info, took_over
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True, name="claim-heartbeat")
        self._thread.start()

    def _beat(self):
        while not self._stop.wait(float(self.info["lease_s"]) / 4):
            now = read(self.path)
            if now is None or now["token"] != self.info["token"]:  # stalled past the lease
                print(f"warning: lost the claim on {self.path.parent.name} "
                      f"({'taken over by ' + holder(now) if now else 'removed'})",
                      file=sys.stderr, flush=True)
                return
            self.info["renewed"] = time.time()
            write_json_atomic(self.path, self.info)  # the file exists throughout

    def release(self) -> None:
        self._stop.set()
        now = read(self.path)
        if now is not None and now["token"] == self.info["token"]:
            self.path.unlink(missing_ok=True)
        for marker in self.path.parent.glob(f"{CLAIM}.*.takeover"):
            marker.unlink(missing_ok=True)


def _new_info() -> dict:
    return {"token": uuid.uuid4().hex, "host": socket.gethostname(), "pid": os.getpid(),
            "started": now(),
            "renewed": time.time(), "lease_s": lease_s()}


def take(rdir: Path, run_id: str) -> Claim | None:
    """Claim the run; None (and one line naming the holder) when someone else holds it."""
    rdir = Path(rdir)
    rdir.mkdir(parents=True, exist_ok=True)
    path, took_over = rdir / CLAIM, None
    wait = float(os.environ.get("ZEROS_CLAIM_WAIT_S") or 0)
    deadline, waiting, tries = time.time() + wait, False, 0
    while tries < 5:
        tries += 1
        info = _new_info()
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            old = read(path)
            if old is None:  # released meanwhile: try again
                continue
            if is_live(old):
                if time.time() < deadline:  # a retry: the killed attempt's lease runs out
                    if not waiting:
                        print(f"waiting up to {wait:.0f} s for the claim on {run_id} of "
                              f"{holder(old)} to end", flush=True)
                    waiting, tries = True, tries - 1
                    time.sleep(min(1.0, max(0.05, float(old.get("lease_s", 1)) / 8)))
                    continue
                print(f"skip (claimed): {run_id} is being trained by {holder(old)}", flush=True)
                return None
            marker = rdir / f"{CLAIM}.{old['token']}.takeover"
            try:  # exactly one taker per stale claim
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            except FileExistsError:
                time.sleep(0.05)  # another taker won: its new claim is live on the next look
                continue
            again = read(path)
            if again is not None and again["token"] == old["token"]:
                path.unlink(missing_ok=True)
                took_over = old
            continue
        with os.fdopen(fd, "w") as f:
            json.dump(info, f)
        if took_over:
            why = (f"lease of {float(took_over.get('lease_s', 0)):.0f} s expired"
                   if time.time() - float(took_over["renewed"]) > float(took_over.get("lease_s", 0))
                   else "its process is gone")
            print(f"taking over {run_id} from {holder(took_over)} ({why}): resuming from its "
                  "last checkpoint", flush=True)
        return Claim(path, info, took_over)
    print(f"skip (claimed): {run_id}: the claim {path} keeps changing hands", flush=True)
    return None


def global_rank() -> int:
    """This process's rank under DDP (Lightning's launcher, torchrun, SLURM): only rank 0 claims."""
    for var in ("RANK", "LOCAL_RANK", "SLURM_PROCID"):
        v = os.environ.get(var)
        if v and v.isdigit() and int(v) > 0:
            return int(v)
    return 0


def claim_run(cfg, run_id: str, out_json: Path, state) -> bool:
    """The runner's hook: claim the run (rank 0 only), re-check that it did not finish meanwhile,
    resume on a takeover; the RunState releases the claim when the run ends. False: skip it."""
    from omegaconf import open_dict

    from .store import is_finished, run_dir
    if global_rank() > 0:
        return True
    claim = take(run_dir(cfg, run_id), run_id)
    if claim is None:
        return False
    state.claim = claim
    if cfg.skip_existing and is_finished(out_json):  # finished by another driver meanwhile
        print(f"skip (finished): {out_json}", flush=True)
        return False
    if claim.took_over and not cfg.resume:
        with open_dict(cfg):
            cfg.resume = True
    return True
