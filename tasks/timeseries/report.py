"""Table 4 from the finished runs: MSE and MAE per dataset x horizon, their average over the
horizons present, the paper's numbers beside ours and the difference (ours - paper, on the full
average only: a partial average is not the paper's quantity), the budget each run took (epochs
trained under early stopping, the reported epoch in brackets), wall time and the profile.

Called by the framework's table step (`conf/table/table4.yaml` names `write_table4` as its
writer and holds the rows, columns, note and the paper's numbers): `make tables` or
`python -m tasks.common.tables table4`. Writes results/tables/<profile>/table4.md and table4.csv.
"""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from tasks.common.tables import fmt

from .data import protocol_lookbacks


def _horizon(setting: str) -> int:
    m = re.match(r"h(\d+)", str(setting))
    return int(m.group(1)) if m else -1


def _lookback(setting: str) -> str:
    m = re.search(r"_L(\w+)", str(setting))
    if not m:
        return "?"
    if m.group(1) == "protocol":  # the protocol's lookback for this horizon
        return str(protocol_lookbacks().get(_horizon(setting), "protocol"))
    return m.group(1)


def collect(runs: pd.DataFrame) -> pd.DataFrame:
    """One line per (model, dataset, horizon): the run with the best val MSE (over lr/wd/seed)."""
    need = {"row", "column", "setting", "best:test/mse", "best:test/mae", "best:val/mse"}
    if runs.empty or not need <= set(runs.columns):
        return pd.DataFrame(columns=["model", "dataset", "horizon", "lookback", "mse", "mae",
                                     "wall_s", "epochs", "profile"])
    runs = runs.dropna(subset=["best:val/mse", "best:test/mse"])
    idx = runs.groupby(["row", "column", "setting"])["best:val/mse"].idxmin()
    best = runs.loc[idx.values]
    return pd.DataFrame({
        "model": best["row"].values, "dataset": best["column"].values,
        "horizon": [_horizon(s) for s in best["setting"]],
        "lookback": [_lookback(s) for s in best["setting"]],
        "mse": best["best:test/mse"].values, "mae": best["best:test/mae"].values,
        "epochs": _epochs(best),
        "wall_s": best["wall_time_s"].values if "wall_time_s" in best else None,
        "profile": best["profile"].values if "profile" in best else None})


def _epochs(best: pd.DataFrame) -> list[str]:
    """'16 (4)': epochs trained (early stopping ends them) and, in brackets, the reported one."""
    def one(final, chosen):
        if pd.isna(final):
            return "—"
        return f"{int(final) + 1}" + ("" if pd.isna(chosen) else f" ({int(chosen) + 1})")
    missing = [None] * len(best)
    final, chosen = best.get("final:epoch", missing), best.get("best:epoch", missing)
    return [one(f, c) for f, c in zip(final, chosen)]


def _diff(ours, paper) -> float | None:
    return None if paper is None or pd.isna(ours) else ours - paper


def _order(values, order):
    return sorted(set(values), key=lambda v: (order.index(v) if v in order else len(order), v))


def _f(x, nd=3, sign=""):  # Table 4 reports MSE/MAE to 3 decimals
    return fmt(x, nd, sign)


def render(lines: pd.DataFrame, profile: str, spec: dict) -> tuple[str, pd.DataFrame]:
    ROW_ORDER, DATASET_ORDER = spec["rows"], spec["columns"]
    PAPER = {(r, ds): (v.get("mse"), v.get("mae"))
             for r, cols in spec["paper"].items() for ds, v in cols.items()}
    out = [f"# {spec['title']} (profile: **{profile}**)", "", spec["note"], "",
           "| dataset | horizon | lookback | model | MSE | MAE | paper MSE | paper MAE | Δ MSE | Δ MAE "
           "| epochs (reported) | wall time (s) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    rows = []
    for ds in _order(lines["dataset"], DATASET_ORDER):
        d = lines[lines["dataset"] == ds]
        for h in sorted(set(d["horizon"])) + ["avg"]:
            for model in _order(d["model"], ROW_ORDER):
                m = d[d["model"] == model]
                if h == "avg":
                    if m.empty:
                        continue
                    mse, mae, wall = m["mse"].mean(), m["mae"].mean(), m["wall_s"].sum()
                    lb = ",".join(sorted(set(m["lookback"])))
                    p_mse, p_mae = PAPER.get((model, ds), (None, None))
                    hs = sorted(set(m["horizon"]))
                    label = "avg" if hs == [96, 192, 336, 720] else f"avg of {'/'.join(map(str, hs))}"
                    epochs = "—"
                else:
                    m = m[m["horizon"] == h]
                    if m.empty:
                        continue
                    mse, mae, wall = m["mse"].iloc[0], m["mae"].iloc[0], m["wall_s"].iloc[0]
                    lb, p_mse, p_mae = m["lookback"].iloc[0], None, None
                    label, epochs = h, m["epochs"].iloc[0]
                full = label == "avg"  # the paper's number is a full average: no Δ on a partial one
                d_mse = _diff(mse, p_mse) if full else None
                d_mae = _diff(mae, p_mae) if full else None
                rows.append({"dataset": ds, "horizon": label, "lookback": lb, "model": model,
                             "mse": mse, "mae": mae, "paper_mse": p_mse, "paper_mae": p_mae,
                             "diff_mse": d_mse, "diff_mae": d_mae, "epochs": epochs,
                             "wall_s": wall, "profile": profile})
                out.append(f"| {ds} | {label} | {lb} | {model} | {_f(mse)} | {_f(mae)} | {_f(p_mse)} "
                           f"| {_f(p_mae)} | {_f(d_mse, sign='+')} | {_f(d_mae, sign='+')} "
                           f"| {epochs} | {_f(wall, 0)} |")
    for (model, ds), (p_mse, p_mae) in PAPER.items():  # paper entries we have no run for
        if lines[(lines["model"] == model) & (lines["dataset"] == ds)].empty:
            rows.append({"dataset": ds, "horizon": "avg", "lookback": "", "model": model,
                         "mse": None, "mae": None, "paper_mse": p_mse, "paper_mae": p_mae,
                         "wall_s": None, "profile": profile})
            out.append(f"| {ds} | avg |  | {model} | — | — | {_f(p_mse)} | {_f(p_mae)} | — | — | — | — |")
    return "\n".join(out) + "\n", pd.DataFrame(rows)


def write_table4(runs: pd.DataFrame, spec: dict, out_dir: Path) -> str:
    """The table writer the framework calls (its `plot` hook): writes results/tables/<profile>/table4.*."""
    tables_dir = Path(out_dir).parent / "tables"
    tables_dir.mkdir(parents=True, exist_ok=True)
    profile = str(runs["profile"].iloc[0]) if not runs.empty and "profile" in runs else "none (no runs)"
    text, frame = render(collect(runs), profile, spec)
    (tables_dir / "table4.md").write_text(text)
    frame.to_csv(tables_dir / "table4.csv", index=False)
    return str(tables_dir / "table4.md")
