"""The convergence rule (stop reasons, last-quarter gain, ↑ marks) and the verdicts on the paper's
claims (conf/claims.yaml): each verdict kind on made-up runs, and the committed verdicts file is
what `make verdicts PROFILE=cpu` renders from the committed reference runs."""
from __future__ import annotations

import json

import pytest
import yaml
from framework_helpers import squash

from tasks.common import table as T
from tasks.common import verdicts as V
from tasks.common.callbacks import Convergence
from tasks.common.convergence import last_quarter, rising, stop_reason
from tasks.common.protocol import runs_frame
from tasks.common.provenance import older_config
from tasks.common.store import ROOT
from tasks.common.table import build_table, render_markdown

RULES = {"close": 5.0, "min_seeds": 3, "spread": 2.0, "tie": 1.0, "margin": 5.0}


def cell(value, std=0.0, n=1, up=False):
    return {"value": value, "std": std, "n": n, "rising": up}


# --- the convergence callback, on tiny fake metric sequences --------------------------------

def _run(cb: Convergence, values):
    for i, v in enumerate(values):
        reason = cb.decide(v)
        if reason:
            return reason, i
    return "cap", len(values) - 1


def test_convergence_stops_at_threshold():
    assert _run(Convergence("val/acc", "max", stop_at=0.99), [0.2, 0.5, 0.991, 0.999]) == ("threshold", 2)


def test_convergence_stops_on_plateau_within_tolerance():
    # window 3, tolerance 1 point: 0.60 -> best of the last three 0.605 gains 0.5 points <= 1
    cb = Convergence("val/acc", "max", window=3, tolerance=1.0)
    assert _run(cb, [0.3, 0.5, 0.6, 0.602, 0.605, 0.601, 0.7]) == ("plateau", 5)


def test_convergence_plateau_for_a_loss_is_relative():
    cb = Convergence("val/mse", "min", window=2, tolerance=0.0)  # task.patience=2 (tolerance 0)
    assert _run(cb, [1.0, 0.5, 0.6, 0.55]) == ("plateau", 3)


def test_convergence_runs_to_the_cap_while_improving():
    cb = Convergence("val/acc", "max", stop_at=0.99, window=3, tolerance=1.0)
    assert _run(cb, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]) == ("cap", 5)
    assert cb.summary([{"step": 100 * i, "val/acc": v} for i, v in enumerate(cb.values)]) == {
        "stop_reason": "cap", "last_quarter": {"metric": "val/acc", "gain": pytest.approx(20.0),
                                               "unit": "points"}}


def test_convergence_stops_on_a_non_finite_metric():
    assert _run(Convergence("val/loss", "min", window=5), [1.0, float("nan")]) == ("diverged", 1)


def test_convergence_from_task_reads_converge_then_patience():
    t = {"monitor": "val/ppl", "monitor_mode": "min", "stop_monitor": "val/acc", "stop_mode": "max",
         "stop_at": 0.999, "converge": {"window": 4, "tolerance": 0.5}}
    cb = Convergence.from_task(_Attr(t))
    assert (cb.metric, cb.mode, cb.stop_at, cb.window, cb.tolerance) == ("val/acc", "max", 0.999, 4, 0.5)
    cb = Convergence.from_task(_Attr({"monitor": "val/mse", "monitor_mode": "min", "patience": 12}))
    assert (cb.metric, cb.mode, cb.stop_at, cb.window, cb.tolerance) == ("val/mse", "min", None, 12, 0.0)


class _Attr(dict):
    __getattr__ = dict.__getitem__


# --- the measures on stored histories -----------------------------------------------------

def _history(values, every=100):
    return [{"step": every * (i + 1), "val/acc": v} for i, v in enumerate(values)]


def test_last_quarter_gain_of_the_best_so_far():
    # steps 100..800; 3/4 of 800 = 600: best up to 600 is 0.5, best overall 0.58 -> 8 points
    assert last_quarter(_history([0.1, 0.3, 0.4, 0.5, 0.45, 0.5, 0.55, 0.58]), "val/acc", "max") == pytest.approx(8.0)
    assert last_quarter([{"step": 1, "val/mse": 1.0}, {"step": 4, "val/mse": 0.9}], "val/mse", "min") == pytest.approx(10.0)


def test_stop_reason_inferred_for_old_jsons():
    cfg = {"task": {"stop_at": 0.99, "stop_monitor": None}, "trainer": {"max_steps": 800}}
    base = {"monitor": "val/acc", "monitor_mode": "max", "config": cfg}
    assert stop_reason({**base, "history": _history([0.5, 0.995]), "global_step": 200}) == "threshold"
    assert stop_reason({**base, "history": _history([0.5, 0.6]), "global_step": 200}) == "plateau"
    assert stop_reason({**base, "history": _history([0.5] * 8), "global_step": 800}) == "cap"
    assert stop_reason({**base, "stop_reason": "plateau", "global_step": 800}) == "plateau"


def test_rising_only_at_the_cap():
    h = _history([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    cfg = {"task": {}, "trainer": {"max_steps": 800}}
    assert rising({"history": h, "config": cfg, "global_step": 800}, "test/acc", "max")
    assert not rising({"history": h, "stop_reason": "plateau"}, "test/acc", "max")
    assert not rising({"history": _history([0.5] * 8), "config": cfg, "global_step": 800}, "test/acc", "max")


def _write(root, row, seed, acc, hist, table="toy", step=800):
    d = root / "runs" / table
    d.mkdir(parents=True, exist_ok=True)
    rid = f"{row}_{seed}_{acc}"
    (d / f"{rid}.json").write_text(json.dumps({
        "run_id": rid, "table": table, "row": row, "column": "toy_recall", "setting": "x",
        "seed": seed, "lr": 1e-3, "weight_decay": 0.0, "profile": "cpu", "global_step": step,
        "monitor": "val/acc_micro", "monitor_mode": "max",
        "config": {"task": {}, "trainer": {"max_steps": 800}},
        "metrics": {"best": {"test/acc_micro": acc, "val/acc_micro": acc}},
        "history": [{"step": 100 * (i + 1), "val/acc_micro": v} for i, v in enumerate(hist)]}))


def test_table_marks_a_rising_cell(tmp_path):
    _write(tmp_path, "ZeroS", 0, 0.8, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    _write(tmp_path, "Transformer", 0, 0.9, [0.9] * 8)
    spec = yaml.safe_load((ROOT / "conf" / "table" / "toy.yaml").read_text())
    long = build_table(runs_frame(tmp_path, "toy"), spec)
    md = squash(render_markdown(long, spec, "cpu"))
    assert "| ZeroS | 80.0 ↑ / 100.0" in md and "| Transformer | 90.0 / 100.0" in md
    assert "↑ unconverged" in md


# --- verdicts -----------------------------------------------------------------------------

def test_a_rising_cell_is_never_holds():
    assert V.judge(cell(90, up=True), cell(50), "max", 0.0, RULES)[0] == V.UNDECIDED
    assert V.judge(cell(90), cell(50, up=True), "max", 0.0, RULES)[0] == V.UNDECIDED
    # a claim failing while only the better row rises stays failed (its gain widens the gap)
    assert V.judge(cell(50), cell(90, up=True), "max", 0.0, RULES)[0] == V.FAILS


def test_closer_with_a_rising_cell_is_undecided():
    """A distance between two rows moves either way while one of them still rises: GLA rising
    toward or away from the Transformer decides nothing about ZeroS being the nearer one."""
    claim = {"id": "fig4", "table": "fig4", "text": "{column}: ZeroS nearer than {versus}",
             "rows": ["ZeroS", "Transformer"], "versus": ["GLA"]}
    cells = {("ZeroS", "c"): cell(3.0), ("Transformer", "c"): cell(2.0), ("GLA", "c"): cell(2.5)}
    (rec,) = V._closer(claim, cells, "c", "min", RULES)
    assert rec["verdict"] == V.FAILS  # converged: GLA is nearer
    cells[("GLA", "c")] = cell(2.5, up=True)
    (rec,) = V._closer(claim, cells, "c", "min", RULES)
    assert rec["verdict"] == V.UNDECIDED and "unconverged" in rec["why"]


def test_a_gap_within_the_seed_spread_is_undecided():
    a, b = cell(60, std=8, n=3), cell(57, std=8, n=3)
    verdict, why = V.judge(a, b, "max", 0.0, RULES)
    assert verdict == V.UNDECIDED and "spread" in why
    assert V.judge(cell(60, std=0.5, n=3), cell(57, std=0.5, n=3), "max", 0.0, RULES)[0] == V.HOLDS


def test_a_close_gap_with_one_seed_is_undecided():
    verdict, why = V.judge(cell(60), cell(57), "max", 0.0, RULES)
    assert verdict == V.UNDECIDED and "needs 3" in why
    assert V.judge(cell(0.30), cell(0.40), "min", 0.0, RULES)[0] == V.HOLDS  # 25% lower loss


def test_a_missing_row_is_not_tested_and_clear_gaps_decide():
    assert V.judge(None, cell(50), "max", 0.0, RULES)[0] == V.UNTESTED
    assert V.judge(cell(90), cell(50), "max", 0.0, RULES)[0] == V.HOLDS
    assert V.judge(cell(40), cell(90), "max", 0.0, RULES)[0] == V.FAILS
    assert V.judge(cell(93), cell(99), "max", -5.0, RULES)[0] == V.UNDECIDED  # 1 from "within 5"
    assert V.judge(cell(80), cell(99), "max", -5.0, RULES)[0] == V.FAILS


def test_verdicts_from_made_up_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(T, "older_config", lambda files, **kw: set())  # today's config
    for s, (z, t) in enumerate([(0.95, 0.50), (0.96, 0.52), (0.94, 0.51)]):
        _write(tmp_path, "ZeroS", s, z, [z] * 8)
        _write(tmp_path, "Transformer", s, t, [t] * 8)
    claims = {**RULES, "rising_gain": 2.0, "claims": [
        {"id": "c1", "table": "toy", "text": "ZeroS above {versus}", "kind": "order",
         "rows": ["ZeroS"], "versus": ["Transformer", "Mamba"], "columns": ["Recall"]}]}
    recs = V.evaluate(claims, "cpu", tmp_path)
    assert [(r["text"], r["verdict"], r["seeds"]) for r in recs] == [
        ("ZeroS above Transformer", V.HOLDS, "3/3"), ("ZeroS above Mamba", V.UNTESTED, "3/0")]
    md, csv = V.render(recs, "cpu")
    assert "ZeroS 95 ± 1 (3 seeds)" in md and csv.splitlines()[0].startswith("claim,table,column")
    assert "†" not in md.split("| claim |")[1] and "older config (†): 0 of 2." in md


def test_a_cell_resting_on_an_older_config_run_is_marked(tmp_path, monkeypatch):
    """One of the Transformer's seeds is of an older config: its cell (and only its) carries †,
    the record says config=older and the header counts it; the verdict itself is unchanged."""
    for s, (z, t) in enumerate([(0.95, 0.50), (0.96, 0.52), (0.94, 0.51)]):
        _write(tmp_path, "ZeroS", s, z, [z] * 8)
        _write(tmp_path, "Transformer", s, t, [t] * 8)
    claims = {**RULES, "rising_gain": 2.0, "claims": [
        {"id": "c1", "table": "toy", "text": "ZeroS above {versus}", "kind": "order",
         "rows": ["ZeroS"], "versus": ["Transformer"], "columns": ["Recall"]}]}
    # the JSONs store a config but no provenance (code before it): all of an older config
    files = sorted((tmp_path / "runs" / "toy").glob("*.json"))
    assert older_config(files, bare_is_older=False) == {f.stem for f in files}
    monkeypatch.setattr(T, "older_config", lambda files, **kw: {"Transformer_1_0.52"})
    (rec,) = V.evaluate(claims, "cpu", tmp_path)  # frames() marks them as the tables do
    assert rec["verdict"] == V.HOLDS and rec["config"] == "older"
    assert "ZeroS 95 ± 1 (3 seeds); Transformer 51 ± 1 (3 seeds) †" == rec["evidence"]
    md, _ = V.render([rec], "cpu")
    assert "older config (†): 1 of 1 (toy 1)." in md


def test_committed_verdicts_are_regenerated_byte_for_byte():
    """`make verdicts PROFILE=cpu` from results/reference/runs renders the committed files."""
    root = ROOT / "results" / "reference"
    md, csv = V.build("cpu", root)
    assert md == (root / "verdicts.md").read_text(), "run `make verdicts PROFILE=cpu` and commit"
    assert csv == (root / "verdicts.csv").read_text()


def test_reproduce_claim_subset_selects_the_claims_runs_and_names_the_fix():
    """`make reproduce-<table> ARGS=--claim=ID@COLUMN` trains only the runs the claim rests on."""
    import pytest

    from tasks.common.errors import ConfigError
    from tasks.common.reproduce import claim_subset
    claims, wanted = claim_subset("table1", "mad@Memorize")
    assert [c["columns"] for c in claims["claims"]] == [["Memorize"]]
    assert wanted("ZeroS__memorize__baseline__lr0.001_wd0_s0__cpu-1a2b3c4d")
    assert wanted("ZeroS-SM__memorize__baseline__lr0.001_wd0_s0__cpu-1a2b3c4d")
    assert not wanted("ZeroS__compress__baseline__lr0.001_wd0_s0__cpu-1a2b3c4d")
    assert not wanted("Hyena__memorize__baseline__lr0.001_wd0_s0__cpu-1a2b3c4d")  # not the claim's
    _, wanted = claim_subset("table4", "forecast@ETTh1 h336")  # a column with a settings glob
    assert wanted("DLinear__ETTh1__h336_Lprotocol__lr0.0001_wd0.1_s2025__cpu-1a2b3c4d")
    assert not wanted("DLinear__ETTh1__h96_Lprotocol__lr0.0001_wd0.1_s2025__cpu-1a2b3c4d")
    assert not wanted("Transformer__ETTh1__h336_Lprotocol__lr0.0006_wd0.1_s2024__cpu-1a2b3c4d")
    for arg, says in [("nosuch", "unknown claim 'nosuch': use one of mad, "),
                      ("forecast", "claim forecast is about table4, not table1: make reproduce-table4"),
                      ("mad@Nope", "claim mad has no column 'Nope': use one of Compress, ")]:
        with pytest.raises(ConfigError, match=says.replace("(", r"\(")):
            claim_subset("table1", arg)
