"""Each run trained exactly once across drivers: two `reproduce toy` drivers at once, and a
driver killed mid-table then restarted (real toy runs: slow)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from framework_helpers import REPO, offline_env

DRIVER = [sys.executable, "-m", "tasks.common.reproduce", "toy", "logger=csv"]


def _results(root):
    return sorted((root / "results" / "runs" / "toy").glob("*.json"))


@pytest.mark.slow
def test_two_drivers_at_once_train_each_run_once(tmp_path):
    env = offline_env(tmp_path)
    procs = [subprocess.Popen(DRIVER, cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    text = "".join(o[0] for o in outs)
    ids = [json.loads(f.read_text())["run_id"] for f in _results(tmp_path)]
    assert len(ids) == 2
    for rid in ids:  # trained by exactly one of the two drivers; the other skipped it
        assert sum(line.startswith("result: ") and rid in line
                   for line in text.splitlines()) == 1


@pytest.mark.slow
def test_driver_killed_mid_table_and_restarted_trains_the_rest_once(tmp_path):
    env = offline_env(tmp_path)
    p = subprocess.Popen(DRIVER, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        t0 = time.time()
        while not list(tmp_path.glob("outputs/runs/toy/*/claim.json")) and time.time() - t0 < 300:
            time.sleep(0.1)
        time.sleep(2)
    finally:
        os.killpg(p.pid, signal.SIGKILL)  # the driver dies ...
        p.wait()
    held = list(tmp_path.glob("outputs/runs/toy/*/claim.json"))
    assert held
    # ... and its run (its own session: a killed driver alone leaves it to finish), as a crash
    os.kill(json.loads(held[0].read_text())["pid"], signal.SIGKILL)
    time.sleep(0.5)
    r = subprocess.run(DRIVER, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "taking over" in r.stdout  # the dead driver's claim (same host, pid gone)
    assert len(_results(tmp_path)) == 2 and r.stdout.count("result: ") == 2
    assert not list(tmp_path.glob("outputs/runs/toy/*/claim.json"))  # all released
