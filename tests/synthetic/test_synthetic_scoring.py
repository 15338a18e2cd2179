"""Accuracy definitions on hand-made numbers; the figure hooks write PNGs."""
import pandas as pd
import pytest
import torch
from torchmetrics.classification import MulticlassAccuracy

from tasks.synthetic_common.objective import ClassAccuracy, per_example_accuracy


def test_macro_vs_micro_by_hand():
    # class 0: 3/3 right, class 1: 0/1 right; one ignored position predicted wrong
    preds = torch.tensor([0, 0, 0, 0, 1])
    tgt = torch.tensor([0, 0, 0, 1, -100])
    acc = ClassAccuracy(4)
    acc.update(preds, tgt)
    assert acc.micro() == pytest.approx(3 / 4)
    assert acc.macro() == pytest.approx((1.0 + 0.0) / 2)


def test_macro_matches_torchmetrics_streaming():
    g = torch.Generator().manual_seed(0)
    ours, ref = ClassAccuracy(10), MulticlassAccuracy(10, average="macro", ignore_index=-100)
    for _ in range(4):
        logits = torch.randn(3, 7, 10, generator=g)
        tgt = torch.randint(0, 6, (3, 7), generator=g)  # classes 6..9 never targets
        tgt[torch.rand(3, 7, generator=g) < 0.3] = -100
        ours.update(logits, tgt)
        ref.update(logits.argmax(-1).flatten(), tgt.flatten())
    assert ours.macro() == pytest.approx(float(ref.compute()), abs=1e-6)


def test_mqar_per_example_accuracy():
    preds = torch.tensor([[1, 2, 3], [1, 2, 3]])
    tgt = torch.tensor([[1, -100, 0], [-100, -100, 3]])
    acc = per_example_accuracy(preds, tgt)
    assert acc.tolist() == [0.5, 1.0]  # mean over examples = 0.75, micro would be 2/3


def _results():
    rows = []
    # model A: task t1 two settings, t2 one setting; grid of 2 lrs
    for setting, accs in {"s1": (0.2, 0.6), "s2": (0.9, 0.4)}.items():
        for lr, a in zip((1e-4, 1e-3), accs):
            rows.append(dict(model="A", task="in-context-recall", setting=setting, lr=lr,
                             weight_decay=0.0, acc_macro=a, acc_micro=a / 2))
    for lr, a in zip((1e-4, 1e-3), (0.3, 0.1)):
        rows.append(dict(model="A", task="compression", setting="s1", lr=lr, weight_decay=0.1,
                         acc_macro=a, acc_micro=a))
    return pd.DataFrame(rows)


def test_figure_hooks_write_png(tmp_path):
    from tasks.mqar.report import _panel, fig3
    from tasks.regbench.report import fig2
    from tasks.synthetic_common.report import best_points, panel_heuristics
    rows = []
    for row in ("ZeroS", "Transformer"):
        for L in (64, 128):
            for d in (64, 128):
                for lr, acc in ((1e-3, 0.2), (1e-2, 0.6)):
                    rows.append(dict(row=row, setting=f"L{L}_d{d}", lr=lr, **{"best:test/acc": acc}))
    df = pd.DataFrame(rows)
    pts = best_points(df, "best:test/acc", r"_d(\d+)", r"^L\d+")
    assert len(pts) == 8 and (pts["y"] == 0.6).all()  # best over lrs at each (L, d, row)
    png = fig3(df, {"name": "fig3", "metric": "test/acc"}, tmp_path)
    assert png.endswith("fig3.png") and (tmp_path / "fig3.png").stat().st_size > 1000
    # the line to cross, per panel: 1/pairs of that length's runs, only for an acc metric
    df["heuristic"] = df["setting"].map(lambda s: 0.25 if s.startswith("L64") else 0.125)
    df["heuristic_label"], df["heuristic_metric"] = "a context value (1/pairs)", "acc"
    df["reported:test/acc"] = 0.4
    assert panel_heuristics(df, "test/acc", _panel) == {
        "seq len 64": [(0.25, "a context value (1/pairs)")],
        "seq len 128": [(0.125, "a context value (1/pairs)")]}
    assert panel_heuristics(df, "test/loss", _panel) == {}
    fig3(df, {"name": "fig3x", "metric": "test/acc", "source": "reported",
              "extras": [{"source": "best", "metric": "test/acc", "label": "best"}]}, tmp_path)
    assert (tmp_path / "fig3x.png").stat().st_size > (tmp_path / "fig3.png").stat().st_size
    df2 = pd.DataFrame([dict(row="ZeroS", setting=f"N{n}", **{"best:test/acc": 0.5}) for n in (64, 128)])
    fig2(df2, {"name": "fig2", "metric": "test/acc"}, tmp_path)
    assert (tmp_path / "fig2.png").stat().st_size > 1000
    fig2(pd.DataFrame(), {"name": "empty", "metric": "test/acc"}, tmp_path)  # no runs yet


def test_mark_points_rings_the_unconverged_and_crosses_the_older_config_points(tmp_path):
    # a run that ended at its step cap still rising is ringed (and listed in the points' CSV),
    # as the tables mark its cell with ↑; a run that stopped on its plateau is not. A point with
    # any run of an older config (tables.make's `older` column; here the worse lr's) is crossed
    from tasks.mqar.report import fig3
    from tasks.regbench.report import fig2
    from tasks.synthetic_common.report import OLDER, UNCONVERGED
    rise = [{"step": s, "val/acc": a} for s, a in ((100, 0.2), (200, 0.3), (300, 0.4), (400, 0.6))]
    flat = [{"step": s, "val/acc": 0.6} for s in (100, 200, 300, 400)]
    rows = [dict(row="ZeroS", setting="L64_d64", stop_reason="cap", history=rise),
            dict(row="Transformer", setting="L64_d64", stop_reason="plateau", history=flat),
            dict(row="Transformer", setting="L64_d128", stop_reason="cap", history=flat)]
    df = pd.DataFrame(rows).assign(**{"best:test/acc": 0.6})
    fig3(df, {"name": "fig3", "metric": "test/acc"}, tmp_path)
    pts = pd.read_csv(tmp_path / "fig3.csv")
    assert pts[pts["line"] == UNCONVERGED][["x", "y"]].values.tolist() == [[64.0, 0.6]]
    assert OLDER not in set(pts["line"])  # no `older` column: nothing crossed
    df2 = df.assign(setting=["N64", "N64", "N128"])
    fig2(df2, {"name": "fig2", "metric": "test/acc"}, tmp_path)
    pts = pd.read_csv(tmp_path / "fig2.csv")
    assert pts[pts["line"] == UNCONVERGED][["x", "y"]].values.tolist() == [[64.0, 0.6]]
    old = pd.concat([df.assign(older=False),  # + an older-config run of Transformer L64_d128
                     df.iloc[[2]].assign(older=True, **{"best:test/acc": 0.1})], ignore_index=True)
    fig3(old, {"name": "fig3o", "metric": "test/acc"}, tmp_path)
    pts = pd.read_csv(tmp_path / "fig3o.csv")
    assert pts[pts["line"] == OLDER][["x", "y"]].values.tolist() == [[128.0, 0.6]]
    fig2(old.assign(setting=["N64", "N64", "N128", "N128"]), {"name": "fig2o", "metric": "test/acc"}, tmp_path)
    pts = pd.read_csv(tmp_path / "fig2o.csv")
    assert pts[pts["line"] == OLDER][["x", "y"]].values.tolist() == [[128.0, 0.6]]
