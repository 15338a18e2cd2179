"""Each run trained exactly once: the exclusive claim on a run id, its lease and takeover."""
from __future__ import annotations

import json
import multiprocessing as mp
import time

from tasks.common import claim, state


def _other_host(rdir, age_s: float, lease: float = 60.0):
    rdir.mkdir(parents=True, exist_ok=True)
    info = {"token": "t-other", "host": "node-b", "pid": 4242, "started": "2026-01-01T00:00:00",
            "renewed": time.time() - age_s, "lease_s": lease}
    (rdir / claim.CLAIM).write_text(json.dumps(info))


def test_second_claim_is_refused_with_the_holder_named(tmp_path, capsys):
    first = claim.take(tmp_path / "r", "run-a")
    assert first is not None and (tmp_path / "r" / claim.CLAIM).exists()
    assert claim.take(tmp_path / "r", "run-a") is None
    out = capsys.readouterr().out
    assert "skip (claimed): run-a is being trained by" in out and f"pid {first.info['pid']}" in out
    first.release()
    assert not (tmp_path / "r" / claim.CLAIM).exists()
    again = claim.take(tmp_path / "r", "run-a")  # released: the next one takes it
    assert again is not None and again.took_over is None
    again.release()


def test_live_claim_of_another_host_is_not_taken(tmp_path, capsys):
    _other_host(tmp_path / "r", age_s=5)
    assert claim.take(tmp_path / "r", "run-a") is None
    assert "node-b pid 4242" in capsys.readouterr().out
    assert state.job_state(tmp_path / "none.json", tmp_path / "r")[0] == "running"


def test_expired_claim_of_another_host_is_taken_over(tmp_path, capsys):
    _other_host(tmp_path / "r", age_s=600)
    assert state.job_state(tmp_path / "none.json", tmp_path / "r")[0] != "running"
    got = claim.take(tmp_path / "r", "run-a")
    assert got is not None and got.took_over["host"] == "node-b"
    assert "taking over run-a from node-b pid 4242" in capsys.readouterr().out
    assert json.loads((tmp_path / "r" / claim.CLAIM).read_text())["token"] == got.info["token"]
    got.release()


def test_heartbeat_keeps_the_claim_live_past_its_lease(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEROS_CLAIM_LEASE_S", "0.4")
    got = claim.take(tmp_path / "r", "run-a")
    time.sleep(1.2)  # three leases: renewed every 0.1 s
    held = claim.read(tmp_path / "r" / claim.CLAIM)
    assert held["token"] == got.info["token"] and claim.is_live(held)
    got.release()
    assert claim.read(tmp_path / "r" / claim.CLAIM) is None


def _race(rdir, barrier, out):
    barrier.wait()
    got = claim.take(rdir, "run-a")
    out.put(got is not None)
    time.sleep(0.5)  # hold it while the others look


def _winners(rdir, n=6):
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(rdir, barrier, out)) for _ in range(n)]
    for p in procs:
        p.start()
    results = [out.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    return sum(results)


def test_many_processes_at_once_exactly_one_claims(tmp_path):
    assert _winners(tmp_path / "fresh") == 1


def test_many_takers_of_one_stale_claim_exactly_one_wins(tmp_path):
    _other_host(tmp_path / "stale", age_s=600)
    assert _winners(tmp_path / "stale") == 1


def test_claim_run_resumes_a_taken_over_run_and_rank_gt0_does_not_claim(tmp_path, monkeypatch):
    from job_helpers import clear_hydra, job_config
    from tasks.common.store import make_run_id, run_dir
    monkeypatch.setenv("ZEROS_ROOT", str(tmp_path))
    cfg = job_config(["experiment=toy/recall", "mixer=zeros"])
    clear_hydra()
    rid = make_run_id(cfg)
    _other_host(run_dir(cfg, rid), age_s=600)
    cfg.resume = False  # resume=true is the default now (issue 34): a takeover must turn it on
    st = state.RunState()
    with st:
        assert claim.claim_run(cfg, rid, tmp_path / "none.json", st)
        assert cfg.resume  # a takeover continues from last.ckpt
    assert not (run_dir(cfg, rid) / claim.CLAIM).exists()  # released when the run ended
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert claim.claim_run(cfg, rid, tmp_path / "none.json", state.RunState())
    assert not (run_dir(cfg, rid) / claim.CLAIM).exists()


def test_claim_of_a_dead_process_on_this_host_is_stale_at_once(tmp_path):
    import socket
    rdir = tmp_path / "r"
    rdir.mkdir()
    (rdir / claim.CLAIM).write_text(json.dumps({
        "token": "t", "host": socket.gethostname(), "pid": 2**22 + 7, "started": "x",
        "renewed": time.time(), "lease_s": 600}))
    got = claim.take(rdir, "run-a")
    assert got is not None and got.took_over["pid"] == 2**22 + 7
    got.release()


def test_a_retry_waits_for_the_killed_attempts_lease_then_takes_over(tmp_path, monkeypatch, capsys):
    _other_host(tmp_path / "r", age_s=59.0, lease=60.0)  # another host's claim, 1 s to live
    monkeypatch.setenv("ZEROS_CLAIM_WAIT_S", "10")
    t0 = time.time()
    got = claim.take(tmp_path / "r", "run-a")
    assert got is not None and got.took_over["host"] == "node-b" and time.time() - t0 < 8
    out = capsys.readouterr().out
    assert "waiting up to 10 s for the claim on run-a" in out and "lease of 60 s expired" in out
    got.release()


def test_a_retry_does_not_take_a_claim_that_stays_renewed(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ZEROS_CLAIM_LEASE_S", "0.4")
    held = claim.take(tmp_path / "r", "run-a")  # renewed every 0.1 s by its heartbeat
    monkeypatch.setenv("ZEROS_CLAIM_WAIT_S", "1")
    assert claim.take(tmp_path / "r", "run-a") is None
    assert "skip (claimed): run-a" in capsys.readouterr().out
    held.release()
