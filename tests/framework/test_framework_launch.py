"""Launchers: local GPU pinning, Ray on the loopback with fake GPUs, submitit's local executor,
and the driver's bad-input lines. Stub jobs (a few hundred ms) stand in for training runs."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from tasks.common import launch

STUB = ("import json, os, sys, time; t0 = time.time(); time.sleep(0.3); "
        "open(sys.argv[1], 'a').write(json.dumps({'name': sys.argv[2], 'gpu': "
        "os.environ.get('CUDA_VISIBLE_DEVICES'), 't0': t0, 't1': time.time()}) + '\\n')")


def stub_tasks(tmp_path, n):
    rec = tmp_path / "record.jsonl"
    return rec, [launch.Task(f"run{i}", [sys.executable, "-c", STUB, str(rec), f"run{i}"],
                             tmp_path / "logs" / f"run{i}.log") for i in range(n)]


def records(rec):
    return [json.loads(line) for line in rec.read_text().splitlines()]


def max_at_once_per_gpu(rows) -> int:
    worst = 0
    for r in rows:  # at the start of each run, how many runs on its GPU overlap it
        worst = max(worst, sum(o["gpu"] == r["gpu"] and o["t0"] <= r["t0"] < o["t1"] for o in rows))
    return worst


def test_local_launcher_pins_runs_to_gpus_k_per_gpu(tmp_path):
    rec, tasks = stub_tasks(tmp_path, 8)
    out = launch.run_local(tasks, 1, gpus=2, runs_per_gpu=2)
    rows = records(rec)
    assert sorted(r["name"] for r in rows) == sorted(t.name for t in tasks)  # each exactly once
    assert {r["gpu"] for r in rows} == {"0", "1"} and max_at_once_per_gpu(rows) <= 2
    assert all(rc == 0 for _, rc, _ in out)


THREADS = ("import os, sys; open(sys.argv[1], 'w').write(os.environ['OMP_NUM_THREADS'])")


@pytest.mark.parametrize("caller, slots, want", [(None, 2, "1"), (None, 1, "2"), ("1", 1, "1")])
def test_local_launcher_keeps_the_callers_thread_count(tmp_path, monkeypatch, caller, slots, want):
    # 2 cores shared out over the slots; the caller's OMP_NUM_THREADS wins (two drivers side by
    # side at --jobs 1 each must not run 2 threads a run on 2 cores)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    if caller is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", caller)
    out = tmp_path / "threads"
    launch.run_local([launch.Task("t", [sys.executable, "-c", THREADS, str(out)],
                                  tmp_path / "t.log")], slots)
    assert out.read_text() == want


def test_bad_layouts_are_one_line_naming_the_fix(monkeypatch):
    assert "use one of local, ray, slurm" in launch.layout_error("kube", None, None)
    assert "RUNS_PER_GPU=0" in launch.layout_error("local", None, 0)
    monkeypatch.setattr(launch, "visible_gpus", lambda: 0)
    assert "shows 0 CUDA GPU" in launch.layout_error("local", 2, None)
    assert launch.layout_error("ray", 2, None, submit_only=True) is None  # planning: no check


def test_ray_address_that_does_not_answer_is_named(monkeypatch):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    err = launch.ray_address_error(f"127.0.0.1:{port}", timeout=1)
    assert err and "does not answer" in err and "unset RAY_ADDRESS" in err


def test_ray_not_importable_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    assert "needs Ray" in launch.layout_error("ray", None, None)


def test_driver_bad_input_exits_2_with_one_line(capsys, monkeypatch):
    from tasks.common import reproduce
    monkeypatch.setattr(launch, "visible_gpus", lambda: 0)
    for argv, want in ((["toy", "--launcher", "kube"], "LAUNCHER=kube"),
                       (["toy", "--runs-per-gpu", "0"], "RUNS_PER_GPU=0"),
                       (["toy", "--gpus", "4"], "GPUS=4")):
        assert reproduce.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and want in err[0]


def test_submit_without_a_gpu_skips_the_local_cuda_check(monkeypatch, capsys):
    from tasks.common import plan, reproduce
    monkeypatch.setattr(plan, "plan", lambda *a: ([], 0))
    monkeypatch.setattr(reproduce.tables, "make", lambda *a: {"runs": 0})
    monkeypatch.setattr(launch, "layout_error", lambda *a, **k: None)
    monkeypatch.setattr(launch, "run_slurm", lambda *a, **k: [])
    assert reproduce.main(["toy", "--profile", "paper", "--launcher", "slurm"]) == 0
    if not launch.visible_gpus():
        assert reproduce.main(["toy", "--profile", "paper"]) == 2  # local: needs CUDA
        assert "CUDA" in capsys.readouterr().err


def test_driver_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    from tasks.common import plan, reproduce
    job = plan.Job([], "a", Path("/nonexistent/toy/a.json"), Path("/nonexistent/a"), "mad", None, None)
    monkeypatch.setattr(plan, "plan", lambda *a: ([job], 1))
    monkeypatch.setattr(reproduce, "_launch", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt))
    for launcher in ("local", "slurm"):
        monkeypatch.setattr(launch, "layout_error", lambda *a, **k: None)
        assert reproduce.main(["toy", "--launcher", launcher]) == 130
        err = [ln for ln in capsys.readouterr().err.splitlines() if "error" in ln]
        assert len(err) == 1 and err[0].startswith("error: interrupted (Ctrl-C)")


def test_submitit_local_executor_runs_the_job_list(tmp_path):
    rec, tasks = stub_tasks(tmp_path, 4)
    out = launch.run_slurm(tasks, 2, tmp_path / "submitit", cluster="local",
                           params={"timeout_min": 5})
    assert sorted(n for n, rc, _ in out if rc == 0) == sorted(t.name for t in tasks)
    assert sorted(r["name"] for r in records(rec)) == sorted(t.name for t in tasks)


@pytest.fixture(scope="module")
def local_ray():
    os.environ.pop("RAY_ADDRESS", None)
    if "ray" not in sys.modules and not launch._has_ray():
        pytest.skip("ray is not installed (make install)")
    ray = launch.ray_start(num_gpus=4, num_cpus=8)  # fake GPUs: Ray only counts them
    yield ray
    ray.shutdown()


def test_ray_cluster_is_on_the_loopback_only(local_ray):
    assert os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
    assert os.environ["RAY_USAGE_STATS_ENABLED"] == "0"
    nodes = local_ray.nodes()
    assert nodes and all(n["NodeManagerAddress"] == "127.0.0.1" for n in nodes)


def test_ray_fractional_gpus_k_runs_per_gpu_each_once(local_ray, tmp_path):
    rec, tasks = stub_tasks(tmp_path, 16)
    t0 = time.time()
    out = launch.run_ray(tasks, runs_per_gpu=2, cpus_per_run=0.5)
    rows = records(rec)
    assert sorted(r["name"] for r in rows) == sorted(t.name for t in tasks)  # each exactly once
    assert all(rc == 0 for _, rc, _ in out) and len(out) == 16
    assert {r["gpu"] for r in rows} <= {"0", "1", "2", "3"} and len({r["gpu"] for r in rows}) > 1
    assert max_at_once_per_gpu(rows) <= 2, rows
    assert time.time() - t0 < 120


def test_driver_checks_each_dataset_once_before_any_run(monkeypatch, capsys, tmp_path):
    """A missing data folder is one line and exit 2 before the sweep starts, not one failed run
    per sweep point (Table 4 at smoke: 4 runs over ETTh1/ETTh2 without task.datamodule.data_dir)."""
    from tasks.common import reproduce, runner
    monkeypatch.setenv("ZEROS_ROOT", str(tmp_path))
    monkeypatch.setattr(reproduce, "_launch", lambda *a: pytest.fail("a run was launched"))
    seen = []
    real = runner.check_data
    monkeypatch.setattr(runner, "check_data",
                        lambda cfg: seen.append(cfg.task.get("dataset")) or real(cfg))
    assert reproduce.main(["table4", "--profile", "smoke"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "task.datamodule.data_dir is not set" in err[0]
    assert "--only" not in err[0]  # both files need the folder: no other file to suggest
    assert seen == ["ETTh1", "ETTh1"]  # each file stopped at its first dataset
    assert reproduce.main(["ablation", "--profile", "smoke"]) == 2  # the LM file without its data
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "task.datamodule.data.path" in err[0] and "--only 'mad'" in err[0]
    csv = tmp_path / "ETTh1.csv"  # both present: checked once per file, then the runs start
    for name in ("ETTh1", "ETTh2"):
        (tmp_path / f"{name}.csv").write_text("date,OT\n")
    seen.clear()
    monkeypatch.setattr(reproduce, "_launch", lambda *a: [])
    monkeypatch.setattr(reproduce.tables, "make", lambda *a, **k: {"runs": 0})
    monkeypatch.setattr("tasks.timeseries.data.ensure_file", lambda *a, **k: csv)
    assert reproduce.main(["table4", "--profile", "smoke", f"task.datamodule.data_dir={tmp_path}"]) == 0
    assert sorted(seen) == ["ETTh1", "ETTh1", "ETTh2", "ETTh2"]  # per experiment file x dataset
