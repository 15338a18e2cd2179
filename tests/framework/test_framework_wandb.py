"""W&B as the dashboard (tasks/common/wandb_log.py), checked on the offline run files: group =
table, job_type = profile, tags, name = run id, a deterministic W&B id, and the table's metric in
the summary. The .wandb file is read with wandb's own protobuf Record type; the framing is the
LevelDB log format wandb writes (a 7-byte ':W&B' header, 32 KiB blocks of 7-byte-headed chunks)."""
from __future__ import annotations

import json
import os
import struct

from framework_helpers import TINY, compose


def _records(path):
    from wandb.proto import wandb_internal_pb2 as pb
    data, pos, buf, block = path.read_bytes(), 7, b"", 32768
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = block - pos % block
        crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if left < 7 or (kind == 0 and length == 0):  # block padding
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk  # FULL/FIRST start, MIDDLE/LAST append
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf)
            yield rec


def test_offline_run_has_table_group_tags_and_table_metric_summary(tmp_path, monkeypatch, capfd):
    _check_offline_run(tmp_path, monkeypatch, capfd)


def test_offline_run_record_is_complete_beside_a_busy_load(tmp_path, monkeypatch, capfd):
    # `make test` beside a training run once read a 7-byte .wandb file: wandb.finish() returned
    # before wandb-core had written the run. Bounded CPU burners (2 per core, at most 20 s,
    # killed at the end) slow the service down as that run did; the record must be complete.
    import subprocess
    import sys
    burn = "import time\nt = time.time() + 20\nwhile time.time() < t: pass"
    load = [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(2 * (os.cpu_count() or 1))]
    try:
        _check_offline_run(tmp_path, monkeypatch, capfd)
    finally:
        for p in load:
            p.kill()
            p.wait(timeout=10)


def _live_services() -> list[int]:
    """This process's wandb-core children still running (Linux /proc; a zombie has exited)."""
    me, pids = os.getpid(), []
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
            cmd = open(f"/proc/{d}/cmdline", "rb").read()
        except OSError:
            continue
        if int(stat[1]) == me and stat[0] != "Z" and b"wandb-core" in cmd:
            pids.append(int(d))
    return pids


def test_offline_run_service_has_exited_when_the_run_returns(tmp_path, monkeypatch, capfd):
    """The cause of the 7-byte .wandb file, checked without a race: wandb-core writes the file
    on its own schedule after wandb.finish() returns, so a run is complete on disk only once the
    service has exited. wandb_log joins it (wandb.teardown()); without that the service lives on
    beside the process (this test fails) and a busy machine reads a header-only file."""
    import wandb
    real_init, seen = wandb.init, []

    def init(*a, **k):
        run = real_init(*a, **k)
        seen.extend(_live_services())
        return run
    monkeypatch.setattr(wandb, "init", init)
    _check_offline_run(tmp_path, monkeypatch, capfd)
    assert seen, "no wandb-core child seen at init: the test no longer reaches the service"
    assert _live_services() == []


def _check_offline_run(tmp_path, monkeypatch, capfd):
    from tasks.common.runner import run
    from tasks.common.wandb_log import wandb_id
    monkeypatch.setenv("ZEROS_ROOT", str(tmp_path))
    run(compose(["logger=default", "wandb.mode=offline", "meta.table=toy", "run_id=wb_probe",
                 *TINY]))
    assert "anonymous setting" not in capfd.readouterr().err
    result = json.loads(next((tmp_path / "results" / "runs").rglob("wb_probe.json")).read_text())
    files = list((tmp_path / "outputs").rglob("offline-run-*/*.wandb"))
    assert len(files) == 1
    recs = list(_records(files[0]))
    runs = [r.run for r in recs if r.WhichOneof("record_type") == "run"]
    kinds = [r.WhichOneof("record_type") for r in recs]
    assert runs, f"no run record in {files[0]} ({files[0].stat().st_size} bytes): {kinds}"
    assert runs[0].run_id == wandb_id("wb_probe") and runs[0].display_name == "wb_probe"
    assert runs[0].run_group == "toy" and runs[0].job_type == "smoke"
    assert {"table:toy", "mixer:zeros", "profile:smoke", "setting:default", "seed:0",
            "row:ZeroS", "column:toy_recall"} <= set(runs[0].tags)
    summary = {}
    for r in recs:
        if r.WhichOneof("record_type") == "summary":
            summary.update({u.key: json.loads(u.value_json) for u in r.summary.update})
    # conf/table/toy.yaml: metric test/acc_micro from the best checkpoint
    assert summary["table_metric_name"] == "best:test/acc_micro"
    assert summary["table_metric"] == result["metrics"]["best"]["test/acc_micro"]
    assert summary["best/val/acc"] == result["metrics"]["best"]["val/acc"]
    assert summary["global_step"] == 3 and summary["params"] == result["params"] > 0


def test_wandb_sync_says_one_line_when_nothing_to_sync(tmp_path, capsys):
    from tasks.common.wandb_log import sync_main
    assert sync_main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("no unsynced offline W&B runs")


def test_wandb_sync_without_key_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    from tasks.common.wandb_log import sync_main
    (tmp_path / "wandb" / "offline-run-20260101_000000-abc").mkdir(parents=True)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "none"))
    assert sync_main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "wandb login" in err
