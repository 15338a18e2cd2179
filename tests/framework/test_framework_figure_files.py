"""Every figure says what produced it (its title names the profile and the runs' budget) and has
its numbers beside it (a CSV of the plotted points); `make tables` labels only what is true."""
from __future__ import annotations

import shutil

import pandas as pd

from framework_helpers import REPO


def test_budget_names_profile_and_step_range():
    from tasks.common.figures import budget
    runs = pd.DataFrame({"profile": ["smoke"] * 3, "global_step": [40, 40, 192]})
    assert budget(runs) == "profile smoke, 40-192 steps"
    assert budget(runs.iloc[:2]) == "profile smoke, 40 steps"
    curve = pd.DataFrame({"profile": ["cpu"] * 3, "run_id": ["a", "a", "b"], "step": [5, 10, 10]})
    assert budget(curve) == "profile cpu, 10 steps" and budget(None) == ""


def test_figure_has_its_points_csv_and_profile_budget_title(tmp_path, monkeypatch):
    from tasks.common import figures, tables
    runs = tmp_path / "results" / "runs" / "fig2"
    runs.mkdir(parents=True)
    for f in (REPO / "results" / "reference" / "runs" / "fig2").glob("*__smoke-*.json"):
        shutil.copy(f, runs / f.name)
    titles = []
    save = figures.save

    def spy(fig, out):
        out = save(fig, out)
        titles.append(" ".join(t.get_text() for t in [fig._suptitle, *[a.title for a in fig.axes]]
                               if t is not None))
        return out
    monkeypatch.setattr(figures, "save", spy)
    monkeypatch.setattr("tasks.synthetic_common.report.save", spy)
    monkeypatch.setattr(figures, "_save", spy)
    monkeypatch.setattr("tasks.regbench.report._save", spy, raising=False)
    info = tables.make("fig2", "smoke", tmp_path / "results")
    png = tmp_path / "results" / "figures" / "smoke" / "fig2.png"
    assert info["figure"] == str(png) and png.is_file()
    pts = pd.read_csv(png.with_suffix(".csv"))
    assert list(pts.columns) == ["panel", "line", "x", "y"] and len(pts) >= info["runs"] // 2
    title = " ".join(titles[0].split())  # save() wraps a title wider than the figure
    assert titles and "profile smoke, " in title and " steps)" in title


def test_tables_without_runs_are_not_labelled_with_another_profile(tmp_path, capsys):
    from tasks.common import tables
    assert tables.main(["table1", "--results-dir", str(tmp_path / "results")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("table1: no runs in ") and "[" not in out.split(":")[0]
