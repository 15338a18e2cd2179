"""MAD score aggregation and the Table-1 markdown writer.

MAD score (mad-lab `mad/analysis.py`): per setting the best test accuracy over the lr x wd
grid; per task the mean over its settings; overall the mean of the six task scores.
"""
from __future__ import annotations

import pandas as pd

from .settings import TASK_LABELS, TASKS

# Table 1 of the paper (accuracy %), SPEC §7
PAPER_TABLE1 = {
    "Transformer": dict(Compress=51.6, Fuzzy=29.8, **{"In-Context": 94.1}, Memorize=85.2, Noisy=86.8,
                        **{"Sel.Copy": 99.6}, Avg=74.5),
    "LinAttn": dict(Compress=31.1, Fuzzy=8.15, **{"In-Context": 91.0}, Memorize=74.9, Noisy=75.6,
                    **{"Sel.Copy": 93.1}, Avg=62.3),
    "ZeroS": dict(Compress=44.0, Fuzzy=14.9, **{"In-Context": 99.9}, Memorize=88.1, Noisy=96.1,
                  **{"Sel.Copy": 97.8}, Avg=73.5),
    "ZeroS-SM": dict(Compress=45.2, Fuzzy=28.0, **{"In-Context": 100.0}, Memorize=84.3, Noisy=96.6,
                     **{"Sel.Copy": 98.5}, Avg=75.4),
}
# ablation (MAD avg; In-Context with the zero-order term), SPEC §7
PAPER_ABLATION = {"ZeroS": 73.5, "+ zero-order term": 69.4, "plain softmax (no reweighting)": 67.6,
                  "no gates": 70.8, "no LayerNorm": 69.4}


def setting_scores(results: pd.DataFrame, metric: str = "acc_macro") -> pd.DataFrame:
    """Best `metric` over the (lr, weight_decay) grid per (model, task, setting).

    `results`: one row per run with columns model, task, setting, lr, weight_decay, <metric>.
    """
    need = {"model", "task", "setting", metric}
    if missing := need - set(results.columns):
        raise ValueError(f"results lack columns {sorted(missing)}")
    return results.groupby(["model", "task", "setting"], as_index=False)[metric].max()


def task_scores(results: pd.DataFrame, metric: str = "acc_macro") -> pd.DataFrame:
    """[model x task] mean over settings of the per-setting best, plus the 'Avg' over tasks."""
    best = setting_scores(results, metric)
    table = best.groupby(["model", "task"])[metric].mean().unstack("task")
    table = table[[t for t in TASKS if t in table.columns]]
    table["Avg"] = table.mean(axis=1)
    return table


def table1_markdown(results: pd.DataFrame, model_labels: dict[str, str], profile: str,
                    paper: dict[str, dict] = PAPER_TABLE1) -> str:
    """Markdown table: paper / ours (macro, the MAD metric) / difference, plus ours micro."""
    cols = ["Compress", "Fuzzy", "In-Context", "Memorize", "Noisy", "Sel.Copy", "Avg"]
    tables = {m: task_scores(results, m).rename(columns=TASK_LABELS) * 100
              for m in ("acc_macro", "acc_micro") if m in results.columns}
    lines = [f"# Table 1 (MAD) — profile `{profile}`", "",
             "Accuracy %. `ours (macro)` uses MAD's metric (torchmetrics multiclass accuracy, "
             "average='macro', -100 ignored); `ours (micro)` = correct / scored positions. "
             "Per setting best over the lr x wd grid, per task mean over settings, Avg = mean "
             "over the tasks present. '—' = not run.", "",
             "| model | row | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    fmt = lambda v: "—" if v is None or pd.isna(v) else f"{v:.1f}"
    for model, label in model_labels.items():
        ref = paper.get(label, {})
        ours = {k: (t.loc[model] if model in t.index else None) for k, t in tables.items()}
        get = lambda k, c: (None if ours.get(k) is None or c not in ours[k].index
                            else ours[k][c])
        lines.append(f"| {label} | paper | " + " | ".join(fmt(ref.get(c)) for c in cols) + " |")
        lines.append(f"| {label} | ours (macro) | "
                     + " | ".join(fmt(get("acc_macro", c)) for c in cols) + " |")
        diffs = [None if ref.get(c) is None or get("acc_macro", c) is None
                 else get("acc_macro", c) - ref[c] for c in cols]
        lines.append(f"| {label} | diff | " + " | ".join(
            "—" if d is None or pd.isna(d) else f"{d:+.1f}" for d in diffs) + " |")
        if "acc_micro" in tables:
            lines.append(f"| {label} | ours (micro) | "
                         + " | ".join(fmt(get("acc_micro", c)) for c in cols) + " |")
    return "\n".join(lines) + "\n"
