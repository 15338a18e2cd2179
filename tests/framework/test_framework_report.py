"""task.report (best | last), task.extra_metrics and the reported snapshot through the result
JSON and the tables, on tiny hand-made histories; one in-process toy run per report mode."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch.nn as nn
from framework_helpers import squash

from tasks.common.callbacks import ResultWriter, pick_row
from tasks.common.errors import ConfigError
from tasks.common.validate import check_report
from tasks.common.protocol import runs_frame
from tasks.common.table import build_table, render_markdown
from tasks.common.tables import make

HISTORY = [  # val/loss lowest at step 2, val/acc highest at step 3, last at step 4
    {"step": 1, "epoch": 0, "val/loss": 2.0, "val/acc": 0.2},
    {"step": 2, "epoch": 0, "val/loss": 0.5, "val/acc": 0.5},
    {"step": 3, "epoch": 1, "val/loss": 0.9, "val/acc": 0.8},
    {"step": 4, "epoch": 1, "val/loss": 1.1, "val/acc": 0.7},
]


def _write(tmp_path, report, extras=None, monitor="val/loss", mode="min"):
    w = ResultWriter(tmp_path / "r.json", {"run_id": "r"}, monitor, mode, report, extras)
    trainer = SimpleNamespace(global_step=4, current_epoch=1)
    for row in HISTORY:  # what on_validation_end does, row by row
        w.history.append(dict(row))
        if w._better(row[monitor], w.best.get(monitor)):
            w.best = dict(row)
    w.test = {"test/acc": 0.66}
    return w.write(trainer, nn.Linear(2, 2), {}, {})


def test_report_best_reports_the_monitor_snapshot_with_the_test_of_best_ckpt(tmp_path):
    p = _write(tmp_path, "best")
    m = p["metrics"]
    assert p["report"] == "best" and m["reported"]["step"] == 2 and m["reported"]["test/acc"] == 0.66
    assert m["best"] == m["reported"] and m["final"]["step"] == 4  # final as before


def test_report_last_reports_the_last_validation_and_keeps_best_without_a_test(tmp_path):
    p = _write(tmp_path, "last")
    m = p["metrics"]
    assert p["report"] == "last" and m["reported"]["step"] == 4 and m["reported"]["test/acc"] == 0.66
    assert m["best"]["step"] == 2 and "test/acc" not in m["best"]  # best.ckpt was not tested


def test_extra_metrics_pick_their_own_snapshot(tmp_path):
    p = _write(tmp_path, "best", {"acc_best_epoch": {"metric": "val/acc", "pick": "max"},
                                  "loss_max": {"metric": "val/loss", "pick": "min"}})
    assert p["metrics"]["acc_best_epoch"]["step"] == 3 and p["metrics"]["loss_max"]["step"] == 2
    ties = [{"step": 1, "a": 0.5}, {"step": 2, "a": 0.5}]
    assert pick_row(ties, "a", "max")["step"] == 1 and pick_row(ties, "b", "max") == {}


@pytest.mark.parametrize("report,extras,words", [
    ("final", None, "task.report='final'"),
    ("best", {"best": {"metric": "val/acc"}}, "task.extra_metrics.best"),
    ("best", {"x": {"metric": "val/acc", "pick": "median"}}, "task.extra_metrics.x")])
def test_bad_report_or_extra_is_a_one_line_config_error(tmp_path, report, extras, words):
    with pytest.raises(ConfigError, match=words.replace(".", r"\.")):
        check_report(report, extras)  # in validate.check_config, before the run id


def _json(root, rid, row, metrics, report=None, heuristic=None, setting="s"):
    d = {"run_id": rid, "table": "t", "row": row, "column": "a", "setting": setting, "seed": 0,
         "lr": 1e-3, "weight_decay": 0.0, "profile": "cpu", "metrics": metrics, "history": [],
         "config": {"task": {"heuristic": heuristic}}}
    if report:
        d["report"] = report
    (root / "runs" / "t").mkdir(parents=True, exist_ok=True)
    (root / "runs" / "t" / f"{rid}.json").write_text(json.dumps(d))


SPEC = {"title": "T", "metric": "test/acc", "mode": "max", "scale": 100, "digits": 1,
        "source": "reported", "columns": [{"key": "a", "label": "A"}], "rows": ["M1", "M2"],
        "paper": {"M1": {"A": 50.0}}}


def test_tables_read_the_reported_snapshot_and_old_jsons_as_best(tmp_path):
    _json(tmp_path, "old", "M1", {"best": {"test/acc": 0.6}, "final": {"test/acc": 0.3}})
    _json(tmp_path, "new", "M2", {"best": {"val/acc": 0.9}, "final": {"test/acc": 0.4},
                                  "reported": {"test/acc": 0.4}}, report="last")
    df = runs_frame(tmp_path, "t")
    cell = build_table(df, SPEC).set_index("row")["ours"]
    assert cell["M1"] == pytest.approx(60.0) and cell["M2"] == pytest.approx(40.0)
    assert dict(zip(df["row"], df["report"])) == {"M1": "best", "M2": "last"}
    from tasks.common.table import describe
    assert ", report best/last," in describe(df)
    assert "report" not in describe(df[df["row"] == "M1"])  # old runs: the line as before


def test_extras_are_a_labelled_cell_suffix_and_csv_column_only_where_present(tmp_path):
    _json(tmp_path, "m1", "M1", {"best": {"test/acc": 0.6}, "reported": {"test/acc": 0.6},
                                 "acc_best_epoch": {"val/acc": 0.75}})
    _json(tmp_path, "m2", "M2", {"best": {"test/acc": 0.5}, "reported": {"test/acc": 0.5}})
    spec = {**SPEC, "extras": [{"source": "acc_best_epoch", "metric": "val/acc",
                                "label": "best-acc epoch"}]}
    from tasks.common.table import with_extras
    df = runs_frame(tmp_path, "t")
    long = with_extras(build_table(df, spec), df, spec)
    md = squash(render_markdown(long, spec, "cpu"))
    assert "| M1 | 60.0 / 50.0 (+10.0) [best-acc epoch 75.0] |" in md
    assert "| M2 | 50.0 / — |" in md  # no extra snapshot: the cell as before
    plain = with_extras(build_table(df, SPEC), df, SPEC)  # no extras in the spec: no new column
    assert not [c for c in plain.columns if c.startswith("extra:") or c == "heuristic"]


def test_heuristic_is_a_table_row_scaled_and_a_csv_column(tmp_path, monkeypatch):
    h = {"value": 0.316, "label": "context-value heuristic"}
    _json(tmp_path, "m1", "M1", {"best": {"test/acc": 0.9}}, heuristic=h)
    _json(tmp_path, "m2", "M2", {"best": {"test/acc": 0.2}}, heuristic=h)
    monkeypatch.setattr("tasks.common.tables.load_spec", lambda t: {**SPEC, "name": "t"})
    info = make("t", "cpu", tmp_path)
    md = squash(open(info["table"]).read())
    assert "| *context-value heuristic* | *31.6* |" in md
    csv = (tmp_path / "tables" / "cpu" / "t.csv").read_text().splitlines()
    assert "heuristic" in csv[0].split(",") and all("31.6" in ln for ln in csv[1:])


def test_runner_tests_the_best_checkpoint_or_the_last_weights(tmp_path, monkeypatch):
    """Two identical toy runs (same seed, same history) that differ only in task.report: the
    test pass of report=last runs on other weights than best.ckpt (monitor_mode=max on the loss
    makes the first validation the 'best', so best and last differ)."""
    from framework_helpers import TINY, compose
    from tasks.common.runner import run  # lazy: lightning imports triton.language
    monkeypatch.setenv("ZEROS_ROOT", str(tmp_path))
    base = ["logger=none", *TINY[1:], "trainer.max_steps=4", "trainer.val_check_interval=1",
            "optimizer.lr=1e-2", "task.monitor=val/loss", "task.monitor_mode=max"]
    out = {}
    for report in ("best", "last"):
        run(compose([*base, f"run_id=r_{report}", f"+task.report={report}"]))
        out[report] = json.loads((tmp_path / "results" / "runs" / "adhoc" / f"r_{report}.json")
                                 .read_text())
    b, la = out["best"], out["last"]
    assert b["history"] == la["history"] and b["report"] == "best" and la["report"] == "last"
    assert la["metrics"]["best"]["step"] != la["metrics"]["final"]["step"] == 4
    assert la["metrics"]["reported"]["step"] == 4 and "test/loss" not in la["metrics"]["best"]
    assert b["metrics"]["reported"]["step"] == b["metrics"]["best"]["step"]
    assert b["metrics"]["reported"]["test/loss"] != la["metrics"]["reported"]["test/loss"]
