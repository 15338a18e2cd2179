"""The committed reference figures are what the committed runs draw: each figure's CSV of plotted
points (`results/reference/figures/<profile>/<fig>.csv`) and each learning-curve CSV
(`<table>_curves[_<metric>].csv`) is rebuilt byte for byte from results/reference/runs. The
figures twin of test_framework_tables' byte-for-byte tables test: the cpu curves once stayed at
their 2026-12-03 runs for three days of retraining, because nothing rebuilt them."""
from __future__ import annotations

import pytest

from tasks.common.protocol import load_spec
from tasks.common.store import ROOT

FIGURES = ROOT / "results" / "reference" / "figures"
CURVES = sorted(FIGURES.glob("*/*_curves*.csv"))
PLOTS = sorted(p for p in FIGURES.glob("*/*.csv") if "_curves" not in p.stem)


def _reference(tmp_path, table):
    """tmp/runs/<table> and tmp/reference/runs/<table>: the committed runs, linked."""
    for runs in (tmp_path / "runs", tmp_path / "reference" / "runs"):
        runs.mkdir(parents=True, exist_ok=True)
        (runs / table).symlink_to(ROOT / "results" / "reference" / "runs" / table)


@pytest.mark.parametrize("csv", CURVES, ids=lambda p: f"{p.parent.name}-{p.stem}")
def test_committed_curves_are_regenerated_byte_for_byte(csv, tmp_path, monkeypatch):
    from tasks.common.curves import make, metric_of
    monkeypatch.chdir(tmp_path)  # a run's relative run_dir (its metrics.csv) must not resolve: JSON history
    table = csv.stem.partition("_curves")[0]
    metric = metric_of(table, csv.stem)  # val-acc -> val/acc; none: the default
    _reference(tmp_path, table)
    out = make(table, csv.parent.name, tmp_path, metric)
    assert out.with_suffix(".csv").read_text() == csv.read_text(), (
        f"run `python -m tasks.common.curves {table} --profile {csv.parent.name} --results-dir "
        f"results/reference" + (f" --metric {metric}" if metric else "") + "` and commit")


@pytest.mark.parametrize("csv", PLOTS, ids=lambda p: f"{p.parent.name}-{p.stem}")
def test_committed_figures_are_regenerated_byte_for_byte(csv, tmp_path):
    from tasks.common.tables import make
    table, profile = csv.stem, csv.parent.name
    assert load_spec(table).get("kind") == "figure"
    _reference(tmp_path, table)
    assert make(table, profile, tmp_path, reference=True)["runs"] > 0
    new = tmp_path / "reference" / "figures" / profile / f"{table}.csv"
    assert new.read_text() == csv.read_text(), \
        f"run `python -m tasks.common.tables {table} --reference --profile {profile}` and commit"


def test_every_committed_figure_csv_is_checked():
    """Both lists find the files (a renamed folder would silently check nothing)."""
    assert len(CURVES) >= 4 and len(PLOTS) >= 4


def test_make_reference_redraws_the_committed_curves_of_its_table(tmp_path, monkeypatch):
    """`make reference` (tables --publish) and `tables --reference` redraw the reference curves
    that are committed for the table/profile, from the reference runs' JSON histories (not from a
    metrics.csv that the run's relative run_dir finds in this checkout); none are made up."""
    from job_helpers import fake_result
    from tasks.common.tables import main
    monkeypatch.chdir(tmp_path)
    cell = "ZeroS__toy__V16_L9__lr0.003_wd0_s0__smoke"
    curve = lambda accs: [{"step": 10 * (i + 1), "val/acc": a} for i, a in enumerate(accs)]  # noqa: E731
    run_dir = tmp_path / "outputs" / "runs" / "toy" / f"{cell}-0000000a"
    (run_dir / "csv").mkdir(parents=True)  # the trainer's own log, with other numbers: not read
    (run_dir / "csv" / "metrics.csv").write_text("step,val/acc\n10,0.9\n20,0.9\n30,0.9\n")
    fake_result(tmp_path / "runs" / "toy" / f"{cell}-0000000a.json", acc=0.6,
                history=curve([0.2, 0.4, 0.6]), run_dir=f"outputs/runs/toy/{cell}-0000000a")
    fake_result(tmp_path / "reference" / "runs" / "toy" / f"{cell}-000000dd.json", acc=0.1,
                history=curve([0.1]))
    figures = tmp_path / "reference" / "figures" / "smoke"
    figures.mkdir(parents=True)
    (figures / "toy_curves_val-acc.csv").write_text("stale\n")
    argv = ["toy", "--profile", "smoke", "--results-dir", str(tmp_path)]
    assert main([*argv, "--publish"]) == 0
    points = (figures / "toy_curves_val-acc.csv").read_text().splitlines()
    assert points[0] == "panel,line,x,y" and [p.split(",")[-1] for p in points[1:]] == ["0.2", "0.4", "0.6"]
    assert (figures / "toy_curves_val-acc.png").is_file()
    assert sorted(p.name for p in figures.glob("*_curves*")) == [
        "toy_curves_val-acc.csv", "toy_curves_val-acc.png"]  # no default-metric curves made up
    (figures / "toy_curves_val-acc.csv").write_text("stale\n")
    assert main([*argv, "--reference"]) == 0
    assert (figures / "toy_curves_val-acc.csv").read_text().splitlines() == points
