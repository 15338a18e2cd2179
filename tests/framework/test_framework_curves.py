"""`make plots TABLE=...` (tasks/common/curves.py): learning curves of a table's runs as a PNG,
from each run's csv/metrics.csv, else from the result JSON's history; one-line errors."""
from __future__ import annotations

import json
import re
import subprocess

import matplotlib.image as mpimg
import pandas as pd
import pytest

from framework_helpers import REPO, offline_env

from tasks.common import curves


def _fake_run(results, root, run_id, row, with_csv=True):
    """A result JSON as tasks.train writes it (the fields curves reads) plus its metrics.csv."""
    rdir = root / "outputs" / "runs" / "toy" / run_id
    steps = [5, 10, 15]
    acc = [0.2, 0.5, 0.9] if row == "ZeroS" else [0.1, 0.3, 0.4]
    if with_csv:
        (rdir / "csv").mkdir(parents=True)
        rows = [{"step": s - 1, "train/loss": 2.0 / s} for s in range(1, 16)]
        rows += [{"step": s, "val/acc": a} for s, a in zip(steps, acc)]
        pd.DataFrame(rows).to_csv(rdir / "csv" / "metrics.csv", index=False)
    d = {"run_id": run_id, "table": "toy", "row": row, "column": "toy_recall", "setting": "V16_L9",
         "task": "toy_recall", "mixer": row.lower(), "profile": "smoke", "seed": 0, "lr": 3e-3,
         "weight_decay": 0.1, "monitor": "val/acc", "run_dir": str(rdir),
         "metrics": {"best": {"val/acc": max(acc)}, "final": {"val/acc": acc[-1]}},
         "history": [{"step": s, "val/acc": a} for s, a in zip(steps, acc)]}
    out = results / "runs" / "toy" / f"{run_id}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(d))


def test_plots_writes_png_of_toy_table_from_csv_and_history(tmp_path):
    results = tmp_path / "results"
    _fake_run(results, tmp_path, "a", "ZeroS")
    _fake_run(results, tmp_path, "b", "Transformer", with_csv=False)  # history only
    r = subprocess.run(["make", "-s", "plots", "TABLE=toy", "PROFILE=smoke", f"PY={REPO}/.venv/bin/python"],
                       cwd=REPO, env=offline_env(tmp_path), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    png = results / "figures" / "smoke" / "toy_curves.png"
    assert r.stdout.strip() == f"curves: {png}"
    assert mpimg.imread(png).shape[0] > 100
    c = curves.collect("toy", "smoke", results)  # the monitor and train/loss
    assert set(c["row"]) == {"ZeroS", "Transformer"} and set(c["panel"]) == {"toy_recall"}
    acc = c[c["metric"] == "val/acc"]
    assert acc[acc["row"] == "ZeroS"]["value"].tolist() == [0.2, 0.5, 0.9]
    assert acc[acc["row"] == "Transformer"]["value"].tolist() == [0.1, 0.3, 0.4]  # from history
    assert (c["metric"] == "train/loss").sum() == 15
    loss = curves.collect("toy", "smoke", results, metric="train/loss")
    assert len(loss) == 15 and set(loss["row"]) == {"ZeroS"}  # the history has no train/loss


def test_plots_without_runs_or_table_is_one_line_exit_2(tmp_path):
    for table, words in (("toy", "no runs of toy at profile paper"), ("nope", "no table spec")):
        r = subprocess.run([f"{REPO}/.venv/bin/python", "-m", "tasks.common.curves", table,
                            "--profile", "paper", "--results-dir", str(tmp_path)], cwd=REPO,
                           env=offline_env(tmp_path), capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert r.stderr.startswith("error: ") and words in r.stderr


def test_plots_unknown_metric_names_the_fix(tmp_path):
    _fake_run(tmp_path / "results", tmp_path, "a", "ZeroS")
    with pytest.raises(curves.ConfigError, match="--metric val/loss"):
        curves.make("toy", "smoke", tmp_path / "results", metric="val/nope")


def test_curves_draw_the_task_heuristic_as_a_dashed_line_on_its_metric_only(tmp_path):
    """task.heuristic {value, label} (in the JSON's config) is a dashed horizontal line at its
    value on the val/acc panel, absent from the train/loss panel and from runs without one."""
    results = tmp_path / "results"
    _fake_run(results, tmp_path, "a", "ZeroS", with_csv=False)
    _fake_run(results, tmp_path, "b", "Transformer", with_csv=False)
    f = results / "runs" / "toy" / "a.json"
    d = json.loads(f.read_text())
    d["config"] = {"task": {"heuristic": {"value": 0.316, "label": "context-value heuristic"}}}
    d["history"] = [{**h, "train/loss": 1.0} for h in d["history"]]
    f.write_text(json.dumps(d))
    c = curves.collect("toy", "smoke", results)
    fig = curves.draw(c, {"title": "toy", "rows": ["ZeroS", "Transformer"]})
    by_metric = {ax.get_ylabel(): ax for ax in fig.axes if ax.get_ylabel()}
    dashed = [ln for ln in by_metric["val/acc"].lines if ln.get_linestyle() == "--"]
    assert len(dashed) == 1 and set(dashed[0].get_ydata()) == {0.316}
    assert "context-value heuristic" in dashed[0].get_label()
    assert re.search(r"\(profile smoke, \d+(-\d+)? steps\)$",
                     " ".join(fig._suptitle.get_text().split()))  # (wrapped: one narrow panel)
    assert not [ln for ln in by_metric["train/loss"].lines if ln.get_linestyle() == "--"]
    # one line per row besides it (the rows' curves are solid)
    assert len([ln for ln in by_metric["val/acc"].lines if ln.get_linestyle() == "-"]) == 2
    curves.plt.close(fig)


def test_curves_order_panels_by_number_and_tell_a_rows_lrs_apart(tmp_path):
    """Panels sort L64 before L128; a row trained at several lrs gets one line style and one
    legend entry per lr (in every panel), a row at one lr stays one solid line."""
    results = tmp_path / "results"
    for rid, row, setting, lr in (("a", "ZeroS", "L128", 3e-3), ("b", "ZeroS", "L128", 1e-3),
                                  ("c", "ZeroS", "L64", 3e-3), ("d", "Transformer", "L64", 3e-3)):
        _fake_run(results, tmp_path, rid, row, with_csv=False)
        f = results / "runs" / "toy" / f"{rid}.json"
        f.write_text(json.dumps({**json.loads(f.read_text()), "setting": setting, "lr": lr}))
    fig = curves.draw(curves.collect("toy", "smoke", results, metric="val/acc"), {"title": "toy"})
    axes = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in axes] == ["toy_recall / L64", "toy_recall / L128"]
    styles = {ln.get_label(): ln.get_linestyle() for ln in axes[1].lines}
    assert set(styles) == {"ZeroS (lr 0.001)", "ZeroS (lr 0.003)"}
    assert len(set(styles.values())) == 2
    l64 = {ln.get_label(): ln.get_linestyle() for ln in axes[0].lines}
    assert l64 == {"ZeroS (lr 0.003)": styles["ZeroS (lr 0.003)"], "Transformer": "-"}
    curves.plt.close(fig)


def test_curves_cross_the_end_of_a_run_of_an_older_config(tmp_path):
    """The runs are the tables' (table.current_runs): a run of an older config than today's (here
    one that stored a config but no provenance) gets the tables' † as a grey cross on its last
    point, one legend entry; today's runs and hand-made JSONs get none."""
    from tasks.common.figures import OLDER, points
    results = tmp_path / "results"
    _fake_run(results, tmp_path, "a", "ZeroS")
    _fake_run(results, tmp_path, "b", "Transformer", with_csv=False)
    fig = curves.draw(curves.collect("toy", "smoke", results, metric="val/acc"), {"title": "toy"})
    assert OLDER not in set(points(fig)["line"])
    curves.plt.close(fig)
    f = results / "runs" / "toy" / "a.json"
    f.write_text(json.dumps({**json.loads(f.read_text()), "config": {"mixer": "old"}}))
    c = curves.collect("toy", "smoke", results, metric="val/acc")
    assert c.groupby("run_id")["older"].first().to_dict() == {"a": True, "b": False}
    fig = curves.draw(c, {"title": "toy"})
    pts = points(fig)
    assert pts[pts["line"] == OLDER][["x", "y"]].values.tolist() == [[15, 0.9]]
    curves.plt.close(fig)
