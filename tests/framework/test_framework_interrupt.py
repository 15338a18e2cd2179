"""Ctrl-C / SIGTERM of the reproduce driver and of a run at any moment (tasks/common/interrupt.py):
one line, exit 130 / 143, no traceback, no `--- Logging error ---`, no table rebuilt."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from framework_helpers import REPO, offline_env, slowed_env


def _catches_sigterm(pid: int) -> bool:
    """The process has a SIGTERM handler (Linux: the SigCgt mask of /proc/<pid>/status)."""
    try:
        status = open(f"/proc/{pid}/status").read()
    except OSError:
        return False
    mask = next(ln.split()[1] for ln in status.splitlines() if ln.startswith("SigCgt:"))
    return bool(int(mask, 16) >> (signal.SIGTERM - 1) & 1)


def _sigint_default():
    """A terminal's Ctrl-C, also where the tests themselves run as a background job (`nohup
    make test &`): a shell starts background jobs with SIGINT ignored, and Python keeps an
    ignored SIGINT ignored (as interrupt.install does, on purpose)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stopped_at_start(module: str, sig, tmp_path, after: float):
    p = subprocess.Popen([sys.executable, "-m", module, *(["toy"] if "reproduce" in module else [])],
                         cwd=REPO, env=offline_env(tmp_path), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=_sigint_default)
    # a stop once interrupt.install() ran (its SIGTERM handler shows in /proc), while the
    # imports that follow it (torch, hydra, pandas: seconds) load; a fixed sleep from the
    # start raced the interpreter's own start on a loaded machine (killed by the default action)
    deadline = time.time() + 60
    while not _catches_sigterm(p.pid) and p.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(after)
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    return p.returncode, out, err


@pytest.mark.parametrize("module", ["tasks.common.reproduce", "tasks.train"])
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_stop_while_importing_is_one_line_and_the_exit_code(module, sig, code, tmp_path):
    rc, out, err = _stopped_at_start(module, sig, tmp_path, after=0.05)
    assert rc == code, err[-2000:]
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: ") and ("Ctrl-C" if code == 130 else "SIGTERM") in err
    assert not (tmp_path / "results").exists()  # nothing written


def test_stop_behind_an_error_raised_while_the_stop_unwinds_is_one_line(tmp_path):
    # CI, stop 40: SIGTERM inside Hydra's compose; omegaconf's cleanup (flag_override's finally)
    # then raised an AttributeError that replaced the stop: exit 1 and a traceback
    code = ("import os, signal, time\n"
            "from tasks.common import interrupt\n"
            "interrupt.install('before the run started', exit_now=False)\n"
            "try:\n"
            "    os.kill(os.getpid(), signal.SIGTERM); time.sleep(5)\n"
            "finally:\n"
            "    raise AttributeError(\"'NoneType' object has no attribute 'x'\")\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 143, p.stderr
    assert p.stderr == "error: terminated (SIGTERM) before the run started\n"


def test_stop_behind_finds_the_stop_in_the_chain_and_nothing_without_one():
    from tasks.common import interrupt
    try:
        try:
            raise interrupt.Interrupted()
        finally:
            raise ValueError("cleanup failed")
    except ValueError as e:
        assert isinstance(interrupt.stop_behind(e), interrupt.Interrupted)
    assert interrupt.stop_behind(ValueError("plain")) is None


def test_driver_stopped_rebuilds_no_table_and_says_one_line(monkeypatch, capsys):
    from tasks.common import reproduce
    made = []
    monkeypatch.setattr(reproduce.tables, "make", lambda *a, **k: made.append(a))

    def stopped(argv):
        raise KeyboardInterrupt
    monkeypatch.setattr(reproduce, "main", stopped)
    assert reproduce.stoppable(["toy"]) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: interrupted (Ctrl-C): no table rebuilt")
    assert made == []


@pytest.mark.slow  # ~30 s: the driver, its Hydra multirun child and the child's first run
@pytest.mark.parametrize("sig, code, what", [(signal.SIGINT, 130, "interrupted (Ctrl-C)"),
                                             (signal.SIGTERM, 143, "terminated (SIGTERM)")])
def test_driver_stopped_mid_run_passes_the_stop_on_and_exits_with_its_code(sig, code, what,
                                                                            tmp_path):
    env = slowed_env(tmp_path, from_step=3, sleep_s=0.5)  # the test stops the driver mid-run
    p = subprocess.Popen([sys.executable, "-m", "tasks.common.reproduce", "toy"], cwd=REPO, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=_sigint_default)
    runs = tmp_path / "outputs" / "runs" / "toy"
    deadline = time.time() + 200
    while not list(runs.glob("*/checkpoints/last.ckpt")) and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    assert p.returncode == code, err[-3000:]
    assert "Traceback" not in err and "Logging error" not in err, err[-3000:]
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert lines[-1].startswith(f"error: {what}: no table rebuilt")
    # the run's own stop line: in its run.log and echoed by the driver (stdout, prefixed or not)
    assert any(f"error: {what}: rerun the same command to resume from" in ln
               for ln in (out + err).splitlines()), (out + err)[-3000:]
    assert not (tmp_path / "results" / "tables").exists()
    assert not list((tmp_path / "results").rglob("*.json"))  # the stopped run wrote no result
