"""End-to-end runs of the CLI: default run offline (W&B dir + CSV + JSON), a 2-job multirun killed
after its first job and rerun through `reproduce` (skip, no overwrite, table), in-process resume."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from framework_helpers import REPO, TINY, compose, offline_env, run_cli, squash


def test_default_run_offline_leaves_wandb_csv_json(tmp_path):
    r = run_cli(TINY, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    jsons = list((tmp_path / "results" / "runs" / "adhoc").glob("*.json"))
    assert len(jsons) == 1
    d = json.loads(jsons[0].read_text())
    for key in ("run_id", "git_commit", "config", "params", "wall_time_s", "device", "metrics",
                "history", "seed", "profile", "mixer", "task", "table"):
        assert key in d, key
    assert d["global_step"] == 3 and d["device"].startswith("cpu") and d["params"] > 0
    assert {"val/acc", "test/acc", "val/loss"} <= set(d["metrics"]["best"])
    assert d["config"]["mixer"]["name"] == "zeros" and d["precision"] == "32-true"
    rdir = tmp_path / "outputs" / "runs" / "adhoc" / d["run_id"]
    assert (rdir / "csv" / "metrics.csv").read_text().count("\n") >= 2
    offline = list((rdir / "wandb").glob("offline-run-*"))
    assert offline and list(offline[0].glob("*.wandb")), "no offline W&B run directory"
    assert (rdir / "checkpoints" / "last.ckpt").is_file()
    assert not list((tmp_path / "results" / "runs").rglob("*.tmp"))  # atomic write cleaned up


def test_killed_multirun_skips_finished_job_and_regenerates_table(tmp_path):
    runs = tmp_path / "results" / "runs" / "toy"
    # the toy protocol itself (2 x 50 steps): TINY overrides would make the runs ad hoc
    args = [sys.executable, "-m", "tasks.train", "-m", "experiment=toy/recall", "resume=true",
            "logger=csv"]
    p = subprocess.Popen(args, cwd=REPO, env=offline_env(tmp_path), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        t0 = time.time()
        while not list(runs.glob("*.json")) and time.time() - t0 < 180 and p.poll() is None:
            time.sleep(0.1)
    finally:
        os.killpg(p.pid, signal.SIGKILL)  # the sweep dies during (or before) its second job
        p.wait()
    first = list(runs.glob("*.json"))
    assert len(first) >= 1, "first job never finished"
    before = {f: (f.stat().st_mtime_ns, f.read_bytes()) for f in first}
    r = run_cli(["toy", "--profile", "smoke", "logger=csv"], tmp_path,
                module="tasks.common.reproduce")
    assert r.returncode == 0, r.stderr[-3000:]
    # the plan skips the finished run: it is not even started again
    assert f"toy [smoke]: 2 runs: {len(first)} finished" in r.stdout
    assert r.stdout.count("result: ") == 2 - len(first)
    after = sorted(runs.glob("*.json"))
    assert len(after) == 2 and {json.loads(f.read_text())["mixer"] for f in after} == {"zeros", "softmax"}
    for f, (mtime, data) in before.items():  # nothing overwritten
        assert f.stat().st_mtime_ns == mtime and f.read_bytes() == data
    md = squash((tmp_path / "results" / "tables" / "smoke" / "toy.md").read_text())
    assert "| ZeroS |" in md and "| Transformer |" in md and "smoke" in md
    csv = (tmp_path / "results" / "tables" / "smoke" / "toy.csv").read_text()
    assert csv.startswith("row,column,ours,ours_std,n_seeds,n_settings,paper,diff,profile")
    assert (tmp_path / "results" / "tables" / "smoke" / "toy.tex").is_file()


def test_resume_continues_from_last_checkpoint(tmp_path, monkeypatch):
    from tasks.common.runner import run  # lazy: lightning imports triton.language (see configs test)
    monkeypatch.setenv("ZEROS_ROOT", str(tmp_path))
    base = ["logger=csv", "run_id=resume_me", *TINY[1:], "trainer.val_check_interval=2"]
    run(compose([*base, "trainer.max_steps=2"]))  # "killed" after 2 steps: keep its checkpoint
    out = tmp_path / "results" / "runs" / "adhoc" / "resume_me.json"
    out.unlink()
    d = json.loads(json.dumps(run(compose([*base, "trainer.max_steps=4", "resume=true"]))))
    res = json.loads(out.read_text())
    assert res["global_step"] == 4
    assert [h["step"] for h in res["history"]] == [2, 4]  # the first attempt's history survived
    assert d is not None


def test_run_interrupted_by_ctrl_c_exits_130_with_the_resume_hint_and_a_failed_state(
        tmp_path, monkeypatch, capsys):
    """Lightning turns a Ctrl-C in fit into sys.exit(1) ("graceful shutdown"); the run must say
    it was interrupted, where it resumes from, record it in state.json, and exit 130."""
    from tasks.common import module
    from tasks.common.runner import run
    monkeypatch.setenv("ZEROS_ROOT", str(tmp_path))

    def ctrl_c(self, batch, batch_idx):
        raise KeyboardInterrupt
    monkeypatch.setattr(module.TaskModule, "training_step", ctrl_c)
    sigint = signal.getsignal(signal.SIGINT)  # Lightning ignores SIGINT while it shuts down
    try:
        with pytest.raises(SystemExit) as e:
            run(compose(["logger=csv", "run_id=ctrl_c", *TINY]))
    finally:
        signal.signal(signal.SIGINT, sigint)
    assert e.value.code == 130
    err = capsys.readouterr().err
    # stopped in its first step: no last.ckpt to resume from, and the line says so (Lightning's
    # INFO lines land in err too when lightning is first imported inside this test)
    assert [ln for ln in err.splitlines() if ln.startswith("error:")] == [
        "error: interrupted (Ctrl-C): no checkpoint yet: rerunning the same command starts the "
        "run again"], err
    state = next(tmp_path.rglob("ctrl_c/state.json"))
    assert json.loads(state.read_text())["reason"] == "KeyboardInterrupt: interrupted (Ctrl-C)"
    assert not (tmp_path / "results" / "runs" / "adhoc" / "ctrl_c.json").exists()


def test_run_stopped_by_the_sigint_handler_prints_only_our_line(tmp_path, monkeypatch, capsys):
    """A real SIGINT through the handler tasks.train installs: Lightning's own "Detected
    KeyboardInterrupt, attempting graceful shutdown ..." must not print beside our one line
    (the handler raises interrupt.Interrupted, which Lightning's KeyboardInterrupt path misses)."""
    from lightning.pytorch.trainer import call

    from tasks.common import interrupt, module
    from tasks.common.runner import run
    monkeypatch.setenv("ZEROS_ROOT", str(tmp_path))
    said = []
    monkeypatch.setattr(call, "rank_zero_info", lambda *a, **k: said.append(a))

    def ctrl_c(self, batch, batch_idx):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)  # the handler raises here
    monkeypatch.setattr(module.TaskModule, "training_step", ctrl_c)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(interrupt, "_stopping", False)
    try:  # a terminal's Ctrl-C even under `nohup make test &` (SIGINT ignored: install keeps that)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        interrupt.install("before the run started", exit_now=False)
        with pytest.raises(SystemExit) as e:
            run(compose(["logger=csv", "run_id=sigint", *TINY]))
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    assert e.value.code == 130 and said == [], said
    out, err = capsys.readouterr()
    assert "Detected KeyboardInterrupt" not in out + err
    assert [ln for ln in err.splitlines() if ln.startswith("error:")] == [
        "error: interrupted (Ctrl-C): no checkpoint yet: rerunning the same command starts the "
        "run again"], err
