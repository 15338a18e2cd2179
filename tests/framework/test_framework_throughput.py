"""`make throughput` (tasks/common/throughput.py): runs/hour at K runs per GPU, one CSV row per K."""
from __future__ import annotations

import csv

import pytest

from tasks.common import throughput


def test_bad_ks_and_no_gpu_are_one_line_exit_2(capsys, monkeypatch):
    assert throughput.main(["--ks", "0,2"]) == 2
    assert "use positive numbers" in capsys.readouterr().err
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert throughput.main([]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--device cpu" in err[0]


@pytest.mark.parametrize("command, argv", [
    ("throughput", ["--table", "tabel1"]), ("throughput", ["--profile", "smok"]),
    ("curves", ["table1", "--profile", "smok"])])
def test_unknown_table_or_profile_names_the_choices(command, argv, capsys):
    from tasks.common import curves
    with pytest.raises(SystemExit) as e:
        {"throughput": throughput.main, "curves": curves.main}[command](argv)
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err


@pytest.mark.slow  # ~1-2 min: three toy runs of 5 steps (the warm-up, K=1, K=2)
def test_cpu_pipeline_writes_one_row_per_k(tmp_path, monkeypatch):
    monkeypatch.setattr(throughput, "SCRATCH", tmp_path / "runs")
    out = tmp_path / "t.csv"
    assert throughput.main(["--device", "cpu", "--table", "toy", "--profile", "smoke",
                            "--ks", "1,2", "--max-steps", "5", "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert [(r["k"], r["runs"], r["failed"]) for r in rows] == [("1", "1", "0"), ("2", "2", "0")]
    assert all(float(r["steps_per_s"]) > 0 and r["full_steps"] == "50" for r in rows)
