"""`make status`, the sweep's progress over runs, FORCE and the fresh-clone rule: the committed
reference results (results/reference/) never make a user's run count as finished."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from job_helpers import clear_hydra, fake_result, job_config

from tasks.common import plan, reproduce, state, status, store
from tasks.common.provenance import composer, job_paths, sweep_jobs


def toy_jobs():
    """[(overrides, run id, result JSON, run dir)] of the toy table's two smoke runs."""
    with composer() as compose:
        return [(j, *job_paths(j, compose)) for j in sweep_jobs("toy/recall", "smoke", [], compose)]


def provenance_of(job: list[str]) -> dict:
    """The provenance a protocol run of these overrides records (provenance.for_run)."""
    kv = dict(o.split("=", 1) for o in job)
    return {"kind": "protocol", "experiment": kv.pop("experiment"), "profile": kv.pop("profile"),
            "sweep": kv}


def test_status_lists_finished_running_failed_missing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ZEROS_ROOT", str(tmp_path))
    (_, id0, res0, _), (_, id1, _, dir1) = toy_jobs()
    assert status.main(["toy"]) == 0
    assert "toy [smoke]: 2 runs: 0 finished, 0 running, 0 failed, 2 missing" in capsys.readouterr().out
    fake_result(res0)
    dir1.mkdir(parents=True)
    (dir1 / state.STATE).write_text(json.dumps({"state": "failed", "reason": "ValueError: nan"}))
    assert status.main(["toy", "--profile", "smoke"]) == 0
    out = capsys.readouterr().out
    assert f"finished  {id0}  step 50" in out and f"failed    {id1}  ValueError: nan" in out
    assert "2 runs: 1 finished, 0 running, 1 failed, 0 missing" in out
    (dir1 / state.STATE).write_text(json.dumps({"state": "running", "pid": os.getpid()}))
    assert state.job_state(tmp_path / "none.json", dir1)[0] == "running"  # this pid is alive
    (dir1 / state.STATE).write_text(json.dumps({"state": "running", "pid": 2**22 + 7}))
    assert state.job_state(tmp_path / "none.json", dir1)[1].startswith("killed")
    res0.write_text("{half a json")
    assert state.job_state(res0, dir1)[0] == "failed"
    assert status.main(["nope"]) == 2 and "error: unknown table 'nope'" in capsys.readouterr().err


def test_status_takes_overrides_after_the_profile(tmp_path, monkeypatch, capsys):
    # the order `make status TABLE=toy PROFILE=smoke ARGS=...` passes them in
    monkeypatch.setenv("ZEROS_ROOT", str(tmp_path))
    assert status.main(["toy", "--profile", "smoke", "trainer.max_steps=7"]) == 0
    out = capsys.readouterr().out
    assert "toy [smoke]: 2 runs: 0 finished, 0 running, 0 failed, 2 missing" in out
    ids = {rid for _, rid, _, _ in toy_jobs()}  # the ids without the override
    assert not any(rid in out for rid in ids)  # the override changed every run's id


def test_job_state_says_how_far_a_running_run_is(tmp_path):
    """The last progress line of run.log (progress.py's format), not a later line of another kind."""
    (tmp_path / state.STATE).write_text(json.dumps({"state": "running", "pid": os.getpid()}))
    assert state.job_state(tmp_path / "none.json", tmp_path)[1] == \
        f"pid {os.getpid()} since None"  # no run.log (a run started by hand): nothing added
    (tmp_path / state.RUN_LOG).write_text(
        "[22:37:35] [ZeroS__lm-581cf900] step 12750/24000 | val/loss=1.414 | eta 2:10:19\n"
        "[22:40:41] [ZeroS__lm-581cf900] step 13000/24000 | val/loss=1.413 | eta 2:08:50\n"
        "[22:40:42] checkpoint written\n")
    st, detail = state.job_state(tmp_path / "none.json", tmp_path)
    assert st == "running" and detail.endswith(
        "; [22:40:41] step 13000/24000 | val/loss=1.413 | eta 2:08:50")


def test_a_stopped_run_is_to_train_not_failed(tmp_path):
    # runner._stopped raises SystemExit(130 / 143) on Ctrl-C / SIGTERM: the run resumes next time
    for code in (130, 143):
        try:
            with state.RunState() as st:
                st.start(tmp_path)
                raise SystemExit(code)
        except SystemExit:
            pass
        assert json.loads((tmp_path / state.STATE).read_text())["state"] == "stopped"
        kind, detail = state.job_state(tmp_path / "none.json", tmp_path)
        assert kind == "missing" and "resumes it from its last checkpoint" in detail
    try:
        with state.RunState() as st:
            st.start(tmp_path)
            raise SystemExit(2)  # a bad config is a failure
    except SystemExit:
        pass
    assert state.job_state(tmp_path / "none.json", tmp_path)[0] == "failed"


def test_run_state_records_failure_reason_and_finish(tmp_path):
    try:
        with state.RunState() as st:
            st.start(tmp_path)
            assert json.loads((tmp_path / state.STATE).read_text())["state"] == "running"
            raise RuntimeError("CUDA out of memory\nsecond line")
    except RuntimeError:
        pass
    st = json.loads((tmp_path / state.STATE).read_text())
    assert st == {**st, "state": "failed", "reason": "RuntimeError: CUDA out of memory"}
    with state.RunState() as st:
        st.start(tmp_path)
    assert json.loads((tmp_path / state.STATE).read_text())["state"] == "finished"
    with state.RunState():  # a skipped run: never started, state untouched
        pass
    assert json.loads((tmp_path / state.STATE).read_text())["state"] == "finished"


def test_corrupted_result_is_not_finished_and_is_trained_again(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text('{"metrics": ')
    assert not store.is_finished(bad)
    assert f"warning: {bad}: not valid JSON (" in capsys.readouterr().out


def test_fresh_clone_trains_although_the_reference_has_the_run(tmp_path, monkeypatch, capsys):
    from tasks.common.runner import run
    monkeypatch.setenv("ZEROS_ROOT", str(tmp_path))
    (job, rid, res, _), _ = toy_jobs()
    ref = fake_result(tmp_path / "results" / "reference" / "runs" / "toy" / f"{rid}.json")
    try:
        best = run(job_config([*job, "logger=none"], tmp_path))
    finally:
        clear_hydra()
    assert best is not None and res.is_file() and f"result: {res}" in capsys.readouterr().out
    assert json.loads(res.read_text())["provenance"]["kind"] == "protocol"
    assert json.loads(ref.read_text())["global_step"] == 50  # the reference is untouched


def test_reference_line_counts_the_committed_runs_of_the_current_config(tmp_path, monkeypatch,
                                                                        capsys):
    from omegaconf import OmegaConf
    monkeypatch.setenv("ZEROS_ROOT", str(tmp_path))
    (job0, rid0, _, _), (job1, rid1, _, _) = toy_jobs()
    ref = tmp_path / "results" / "reference" / "runs" / "toy"
    try:
        now, old = (OmegaConf.to_container(job_config(j), resolve=True) for j in (job0, job1))
    finally:
        clear_hydra()
    old["seed"] = 12345  # a run of an older config: its stored config is not today's
    p0, p1 = (provenance_of(j) for j in (job0, job1))
    fake_result(ref / "any-stale-name.json", config=now, provenance=p0)  # today's config, an old id
    fake_result(ref / f"{rid1}.json", config=old, provenance=p1)
    fake_result(ref / "cpu-run.json", profile="cpu", config=now, provenance=p0)  # not counted
    assert status.main(["toy"]) == 0
    out = capsys.readouterr().out
    assert ("reference [smoke]: 2 committed runs, 1 of the current config; the other 1 come from "
            "an older config (renew: make reproduce-toy PROFILE=smoke && make reference "
            "TABLE=toy PROFILE=smoke)") in out
    (ref / f"{rid1}.json").unlink()
    assert status.main(["toy"]) == 0
    assert "reference [smoke]: 1 committed run, all of the current config" in capsys.readouterr().out
    # unreadable JSONs count toward the profile their id ends with, and never as current
    (ref / "X__L64__s0__cpu-0badc0de.json").write_text("{not json")
    assert status.reference_line("toy", "smoke", tmp_path / "results").startswith(
        "reference [smoke]: 1 committed run, all of the current config")
    (ref / "X__L64__s0__smoke-0badc0de.json").write_text("{not json")
    assert status.reference_line("toy", "smoke", tmp_path / "results").startswith(
        "reference [smoke]: 2 committed runs, 1 of the current config")
    assert status.reference_line("toy", "paper", tmp_path / "results") == \
        "reference [paper]: no committed runs"
    # each protocol point is composed once per process: a second look needs no Hydra
    from tasks.common import provenance
    monkeypatch.setattr(provenance, "composer", None)  # calling it would raise
    assert provenance.older_config(sorted(ref.glob("*.json"))) == {"X__L64__s0__cpu-0badc0de",
                                                                    "X__L64__s0__smoke-0badc0de"}


def _fake_children(monkeypatch, calls, rc=lambda cmd: 0):
    from tasks.common import launch
    monkeypatch.setattr(launch, "run_task",
                        lambda task, env=None, echo=None: calls.append(task.cmd) or rc(task.cmd))
    monkeypatch.setattr(reproduce.tables, "make", lambda *a: {"runs": 0})


def test_force_reruns_finished_runs_and_plan_counts_them(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ZEROS_ROOT", str(tmp_path))
    (_, _, res0, _), _ = toy_jobs()
    fake_result(res0)
    calls = []
    _fake_children(monkeypatch, calls)
    assert reproduce.main(["toy"]) == 0
    assert "toy [smoke]: 2 runs: 1 finished, 0 running, 0 failed, 1 to train" in \
        capsys.readouterr().out
    assert len(calls) == 1 and "resume=true" in calls[0] and "skip_existing=false" not in calls[0]
    assert reproduce.main(["toy", "--force"]) == 0
    assert ("toy [smoke]: 2 runs: 1 finished, 0 running, 0 failed; FORCE=1: all 2 trained again "
            "from step 0") in capsys.readouterr().out
    assert len(calls) == 3 and "skip_existing=false" in calls[1] and "resume=false" in calls[1]


def test_reproduce_says_before_training_that_off_protocol_runs_are_ad_hoc(tmp_path, monkeypatch,
                                                                         capsys):
    monkeypatch.setenv("ZEROS_ROOT", str(tmp_path))
    calls = []
    _fake_children(monkeypatch, calls)
    assert reproduce.main(["toy"]) == 0
    assert "ad hoc" not in capsys.readouterr().out
    assert reproduce.main(["toy", "trainer.max_steps=7"]) == 0  # not a toy sweep key
    out = capsys.readouterr().out
    assert "note: 2 of these runs are ad hoc" in out and "runs/adhoc/toy" in out


def test_reproduce_only_filters_files_and_a_failed_file_does_not_stop_the_rest(monkeypatch,
                                                                              capsys):
    assert reproduce.main(["ablation", "--only", "no_such_*"]) == 2
    err = capsys.readouterr().err
    assert "--only no_such_*" in err and "(lm, mad, mad_seeds)" in err  # names what there is
    from tasks.common import launch, plan
    calls, made = [], []

    def fake_plan(table, profile, files, extra):  # one run per file: composing is tested above
        return [plan.Job([f"experiment={f}"], f.replace("/", "_"), Path("/nonexistent.json"),
                         Path("/tmp/none"), "mad", None, None) for f in files], len(files)
    monkeypatch.setattr(plan, "plan", fake_plan)
    monkeypatch.setattr(reproduce, "check_data", lambda todo: None)  # (tested in test_framework_launch)
    monkeypatch.setattr(launch, "run_task",  # the LM run "fails" ...
                        lambda task, env=None, echo=None:
                        calls.append(task.cmd) or int("experiment=ablation/lm" in task.cmd))
    monkeypatch.setattr(reproduce.tables, "make", lambda *a: made.append(a) or {"runs": 0})
    assert reproduce.main(["ablation", "--only", "mad"]) == 0
    assert len(calls) == 1 and "experiment=ablation/mad" in calls[0]
    assert reproduce.main(["ablation"]) == 1
    assert made  # ... the other run still ran and the table was still written
    err = capsys.readouterr().err
    assert "1 of 3 runs failed" in err  # lm, mad, mad_seeds: one run per file here
    assert "failed: ablation_lm  log: /tmp/none/run.log" in err  # each failed run with its log


def test_bar_counts_finished_running_failed_and_to_train(tmp_path):
    from tasks.common import plan
    done = fake_result(tmp_path / "a.json")
    jobs = [plan.Job([], n, tmp_path / f"{n}.json", tmp_path, "toy_recall", None, None)
            for n in "abc"]
    bar = reproduce.Progress("toy", "smoke", jobs, jobs)
    for j in jobs:
        bar.start(j)
    assert bar.n == {"finished": 0, "running": 3, "failed": 0, "to train": 0}
    bar.end(jobs[0], 0)
    bar.end(jobs[1], 1)
    bar.end(jobs[2], 0)  # exit 0 without a result: its claim was held by another driver
    assert bar.n == {"finished": 1, "running": 1, "failed": 1, "to train": 0} and done
    bar.close()


def test_bad_override_is_one_line_before_any_run(monkeypatch, capsys):
    calls = []
    _fake_children(monkeypatch, calls)
    assert reproduce.main(["toy", "trainer.max_stepz=5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and not calls


@pytest.mark.parametrize("argv, words", [
    (["toy", "trainer.max_stepz=5"], "unknown key trainer.max_stepz: check its spelling"),
    (["toy", "mixer=nope"], "unknown mixer 'nope': use one of"),
    (["toy", "optimizer.lr=("], "quote the value"),
    (["fig4", "--profile", "cpu"], "no rows for profile=cpu"),  # no file of fig4 has cpu rows
])
@pytest.mark.parametrize("command", [status.main, plan.main, reproduce.main])
def test_plan_status_reproduce_bad_input_is_one_line_exit_2(command, argv, words, monkeypatch,
                                                            capsys):
    _fake_children(monkeypatch, [])
    assert command(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and words in err[0], err




def test_reproduce_jobs_starts_only_unfinished_runs_each_with_its_share_of_threads(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ZEROS_ROOT", str(tmp_path))
    (_, _, res0, _), _ = toy_jobs()
    fake_result(res0)
    calls = []
    from tasks.common import launch
    monkeypatch.setattr(launch, "run_task",
                        lambda task, env=None, echo=None: calls.append((task.cmd, env)) or 0)
    monkeypatch.setattr(launch, "visible_gpus", lambda: 0)
    monkeypatch.setattr(reproduce.tables, "make", lambda *a: {"runs": 0})
    monkeypatch.setattr(launch.os, "cpu_count", lambda: 2)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # a caller's count would win (launch)
    assert reproduce.main(["toy", "--jobs", "2"]) == 0
    assert "toy [smoke]: 2 runs: 1 finished, 0 running, 0 failed, 1 to train" in \
        capsys.readouterr().out
    (cmd, env), = calls  # the finished run is not started at all
    assert "-m" not in cmd[2:] and "experiment=toy/recall" in cmd and "resume=true" in cmd
    assert env["OMP_NUM_THREADS"] == "1"  # 2 cores / 2 runs at once
    assert any(c.startswith("hydra.run.dir=") for c in cmd)  # no shared Hydra dir per second
    assert reproduce.main(["toy", "--jobs", "0"]) == 2
    assert "--jobs 0" in capsys.readouterr().err


def test_expected_line_sums_runs_longest_first_over_parallel_lanes():
    todo = [([], 30.0), ([], 20.0), ([], 20.0), ([], 10.0), ([], None)]
    line = plan.expected_line(todo, 2)
    assert "expected at most ~40 min" in line and "80 run-minutes" in line  # 30+10 | 20+20
    assert "1 runs without an estimate" in line
    assert plan.expected_line([([], None)], 2) == ""  # no estimate: say nothing
    assert plan.makespan([5.0, 4.0, 3.0], 1) == 12.0
