"""Table 4 from the finished runs: MSE and MAE per dataset x horizon, their average over the
horizons present, the paper's numbers beside ours and the difference (ours - paper, on the full
average only: a partial average is not the paper's quantity), the budget each run took (epochs
trained under early stopping, the reported epoch in brackets), wall time and the profile.

Called by the framework's table step (`conf/table/table4.yaml` names `write_table4` as its
writer and holds the rows, columns, note and the paper's numbers): `make tables` or
`python -m tasks.common.tables table4`. Writes results/tables/<profile>/table4.md, .csv and .tex;
each MSE / MAE cell is ours / reference / paper (the committed reference runs of the profile).
"""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from tasks.common.table import fmt

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
    """One line per (model, dataset, horizon): per seed the grid point (lr/wd) with the best val
    MSE, then the mean ± std over seeds (never the best seed: that would pick on luck)."""
    cols = ["model", "dataset", "horizon", "lookback", "mse", "mae", "mse_std", "mae_std",
            "n_seeds", "wall_s", "epochs", "profile"]
    need = {"row", "column", "setting", "best:test/mse", "best:test/mae", "best:val/mse"}
    if runs.empty or not need <= set(runs.columns):
        return pd.DataFrame(columns=cols)
    runs = runs.dropna(subset=["best:val/mse", "best:test/mse"])
    keys = ["row", "column", "setting"] + (["seed"] if "seed" in runs.columns else [])
    best = runs.loc[runs.groupby(keys)["best:val/mse"].idxmin().values].copy()
    best["epochs_txt"] = _epochs(best)
    if "wall_time_s" not in best:
        best["wall_time_s"] = None
    if "profile" not in best:
        best["profile"] = None
    out = []
    for (row, col, setting), g in best.groupby(["row", "column", "setting"], sort=False):
        n = len(g)
        out.append({"model": row, "dataset": col, "horizon": _horizon(setting),
                    "lookback": _lookback(setting), "mse": g["best:test/mse"].mean(),
                    "mae": g["best:test/mae"].mean(),
                    "mse_std": g["best:test/mse"].std(ddof=1) if n > 1 else 0.0,
                    "mae_std": g["best:test/mae"].std(ddof=1) if n > 1 else 0.0, "n_seeds": n,
                    "wall_s": pd.to_numeric(g["wall_time_s"]).sum(min_count=1),
                    "epochs": "; ".join(g["epochs_txt"]), "profile": g["profile"].iloc[0]})
    return pd.DataFrame(out, columns=cols)


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


def _ref_values(ref: pd.DataFrame | None, model, ds, horizon) -> tuple:
    """(MSE, MAE) of the reference runs at this line: a horizon, or 'avg' over the same horizons."""
    if ref is None or ref.empty:
        return None, None
    r = ref[(ref["model"] == model) & (ref["dataset"] == ds)]
    if isinstance(horizon, int):
        r = r[r["horizon"] == horizon]
    elif not r.empty:  # an average: over the horizons ours has (the label names them)
        hs = [96, 192, 336, 720] if horizon == "avg" else \
            [int(h) for h in str(horizon).split("avg of ")[-1].split("/")]
        r = r[r["horizon"].isin(hs)] if set(hs) <= set(r["horizon"]) else r.iloc[0:0]
    return (r["mse"].mean(), r["mae"].mean()) if not r.empty else (None, None)


def _cell(ours, ref, paper, has_ref: bool, std=None, n: int = 1) -> str:
    """'ours / reference / paper', as every table of the suite shows a cell ('ours / paper'
    without reference runs); ours as 'mean ± std (n seeds)' over more than one seed."""
    text = [_f(x) if x is not None else "—" for x in ((ours, ref, paper) if has_ref else (ours, paper))]
    if n > 1 and ours is not None:
        text[0] = f"{_f(ours)} ± {_f(std)} ({n} seeds)"
    return " / ".join(text)


def render(lines: pd.DataFrame, profile: str, spec: dict,
           ref: pd.DataFrame | None = None) -> tuple[str, pd.DataFrame]:
    """`ref`: collect() of the committed reference runs of this profile (None: no reference
    column, e.g. when the reference table itself is built)."""
    ROW_ORDER, DATASET_ORDER = spec["rows"], spec["columns"]
    PAPER = {(r, ds): (v.get("mse"), v.get("mae"))
             for r, cols in spec["paper"].items() for ds, v in cols.items()}
    has_ref = ref is not None and not ref.empty
    cell = "ours / reference / paper" if has_ref else "ours / paper"
    heads = ["dataset", "horizon", "lookback", "model", f"MSE ({cell})", f"MAE ({cell})", "Δ MSE",
             "Δ MAE", "epochs (reported), per seed", "wall time (s, all seeds)"]
    out, rows = [], []  # the shown text per line, the numbers (the CSV) per line
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
                    spread = {"n": 1, "mse": None, "mae": None}  # an average over horizons
                else:
                    m = m[m["horizon"] == h]
                    if m.empty:
                        continue
                    mse, mae, wall = m["mse"].iloc[0], m["mae"].iloc[0], m["wall_s"].iloc[0]
                    lb, p_mse, p_mae = m["lookback"].iloc[0], None, None
                    label, epochs = h, m["epochs"].iloc[0]
                    spread = {"n": int(m["n_seeds"].iloc[0]), "mse": m["mse_std"].iloc[0],
                              "mae": m["mae_std"].iloc[0]}
                full = label == "avg"  # the paper's number is a full average: no Δ on a partial one
                d_mse = _diff(mse, p_mse) if full else None
                d_mae = _diff(mae, p_mae) if full else None
                r_mse, r_mae = _ref_values(ref, model, ds, label) if has_ref else (None, None)
                rows.append({"dataset": ds, "horizon": label, "lookback": lb, "model": model,
                             "mse": mse, "mae": mae, "paper_mse": p_mse, "paper_mae": p_mae,
                             "diff_mse": d_mse, "diff_mae": d_mae, "epochs": epochs,
                             "wall_s": wall, "profile": profile, "n_seeds": spread["n"],
                             "mse_std": spread["mse"], "mae_std": spread["mae"],
                             **({"ref_mse": r_mse, "ref_mae": r_mae} if has_ref else {})})
                out.append([ds, label, lb, model,
                            _cell(mse, r_mse, p_mse, has_ref, spread["mse"], spread["n"]),
                            _cell(mae, r_mae, p_mae, has_ref, spread["mae"], spread["n"]),
                            _f(d_mse, sign="+"), _f(d_mae, sign="+"), epochs, _f(wall, 0)])
    for (model, ds), (p_mse, p_mae) in PAPER.items():  # paper entries we have no run for
        if lines[(lines["model"] == model) & (lines["dataset"] == ds)].empty:
            rows.append({"dataset": ds, "horizon": "avg", "lookback": "", "model": model,
                         "mse": None, "mae": None, "paper_mse": p_mse, "paper_mae": p_mae,
                         "wall_s": None, "profile": profile})
            out.append([ds, "avg", "", model, _cell(None, None, p_mse, has_ref),
                        _cell(None, None, p_mae, has_ref), "—", "—", "—", "—"])
    grid = pd.DataFrame(out, columns=heads).astype(str).to_markdown(
        index=False, tablefmt="github", disable_numparse=True)
    text = [f"# {spec['title']} (profile: **{profile}**)", "", spec["note"], "",
            f"Cell: {cell}; Δ = ours − paper.", "", grid]
    return "\n".join(text) + "\n", pd.DataFrame(rows)


def render_latex(frame: pd.DataFrame, profile: str, spec: dict) -> str:
    """The same lines as a LaTeX tabular (pandas writes it): MSE and MAE cells as ours /
    reference / paper."""
    has_ref = "ref_mse" in frame
    cell = "ours / ref. / paper" if has_ref else "ours / paper"

    def c(row, k):
        vals = [row.get(k), row.get(f"ref_{k}")] if has_ref else [row.get(k)]
        vals.append(row.get(f"paper_{k}"))
        return " / ".join("--" if v is None or pd.isna(v) else f"{v:.3f}" for v in vals)
    grid = pd.DataFrame([[r["dataset"], r["horizon"], r.get("lookback") or "", r["model"], c(r, "mse"),
                          c(r, "mae")] for _, r in frame.iterrows()],
                        columns=["dataset", "horizon", "lookback", "model", f"MSE ({cell})", f"MAE ({cell})"])
    grid = grid.astype(str).map(lambda x: x.replace("_", "\\_"))
    return (f"% {spec['title']} (profile: {profile}); cells: {cell}\n"
            + grid.to_latex(index=False, escape=False, column_format="l" * grid.shape[1]))


def write_table4(runs: pd.DataFrame, spec: dict, out_dir: Path) -> str:
    """The table writer the framework calls (its `plot` hook): writes results/tables/<profile>/table4.*."""
    tables_dir = Path(out_dir).parent / "tables"
    tables_dir.mkdir(parents=True, exist_ok=True)
    profile = str(runs["profile"].iloc[0]) if not runs.empty and "profile" in runs else "none (no runs)"
    from tasks.common.figures import reference_runs  # the committed reference runs, if any
    ref = reference_runs()
    text, frame = render(collect(runs), profile, spec, collect(ref) if ref is not None else None)
    (tables_dir / "table4.md").write_text(text)
    frame.to_csv(tables_dir / "table4.csv", index=False)
    (tables_dir / "table4.tex").write_text(render_latex(frame, profile, spec))
    return str(tables_dir / "table4.md")
