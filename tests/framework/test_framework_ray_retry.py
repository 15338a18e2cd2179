"""A Ray worker killed mid-run, for real: a local Ray on the loopback runs one toy training run
through the ray launcher; the test SIGKILLs the worker process after the run's first checkpoint.
The run must die with its worker, and the launcher's one retry must take its claim over and
resume from that checkpoint: one retry, one result JSON, a finished run never trained again."""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

import pytest

from framework_helpers import TINY, slowed_env
from tasks.common import launch


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is dead too
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def loopback_ray():
    if not sys.platform.startswith("linux"):
        pytest.skip("the test reads /proc")
    if "ray" not in sys.modules and not launch._has_ray():
        pytest.skip("ray is not installed (make install)")
    os.environ.pop("RAY_ADDRESS", None)
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before Ray starts: loopback only
    ray = launch.ray_start(num_cpus=2)
    assert all(n["NodeManagerAddress"] == "127.0.0.1" for n in ray.nodes())
    yield ray
    ray.shutdown()


@pytest.mark.slow  # ~60-120 s on 2 busy cores: Ray's start and two imports of tasks.train
def test_ray_worker_killed_mid_run_is_retried_once_and_resumes(loopback_ray, tmp_path):
    env = slowed_env(tmp_path, from_step=4, sleep_s=0.4)  # steps 4.. slow: time to kill
    args = [*TINY, "trainer.max_steps=16", "checkpoint_every_n_steps=2", "logger.wandb=false"]
    cmd = [sys.executable, "-m", "tasks.train", *args]
    task = launch.Task("toy", cmd, tmp_path / "run.log", env=env)
    runs = tmp_path / "outputs" / "runs"
    killed = {}

    def kill_worker_after_a_checkpoint():
        deadline = time.time() + 300
        while time.time() < deadline and not killed:
            for c in runs.rglob("claim.json"):
                if (c.parent / "checkpoints" / "last.ckpt").exists():
                    run_pid = json.loads(c.read_text())["pid"]
                    worker = _parent(run_pid)  # the run's wrapper exec'd it: the worker's child
                    killed.update(run=run_pid, worker=worker,
                                  title=open(f"/proc/{worker}/cmdline").read())
                    os.kill(worker, signal.SIGKILL)
                    return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_worker_after_a_checkpoint, daemon=True)
    killer.start()
    out = launch.run_ray([task], runs_per_gpu=1, cpus_per_run=1)
    killer.join(timeout=5)
    log = task.log.read_text()
    assert killed and "ray::" in killed["title"], (killed, log[-3000:])  # a Ray worker
    assert out == [("toy", 0, task.log)], log[-3000:]
    assert not _alive(killed["run"])  # the run died with its worker (no orphan trains on)
    assert log.count("(retrying once: the run resumes)") == 1, log[-3000:]
    assert log.count("taking over ") == 1, log[-3000:]  # the killed attempt's claim
    resumed = [ln for ln in log.splitlines() if "resume: continuing from" in ln]
    assert len(resumed) == 1 and not resumed[0].rstrip().endswith("at step 0"), log[-3000:]
    results = list((tmp_path / "results" / "runs").rglob("*.json"))
    assert len(results) == 1 and log.count("result: ") == 1, log[-3000:]
    payload = json.loads(results[0].read_text())
    assert payload["global_step"] == 16
    assert not list(runs.rglob("claim.json"))  # released

    mtime = results[0].stat().st_mtime_ns  # again: a finished run is skipped, never retrained
    assert launch.run_ray([task], runs_per_gpu=1, cpus_per_run=1) == [("toy", 0, task.log)]
    assert task.log.read_text().count("skip (finished)") == 1
    assert results[0].stat().st_mtime_ns == mtime
