"""Results -> the paper's tables: `python -m tasks.common.tables <table> [--profile smoke]`.

Reads results/runs/<table>/*.json, applies the table's protocol from conf/table/<table>.yaml
(best over the lr/wd grid per setting and seed, mean over settings, mean ± std over seeds), and
writes results/tables/<table>.{md,csv,tex} with the paper's number, ours, the difference and the
profile. A `kind: figure` spec calls its `plot` function instead (PNG).
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from .errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
TABLE_CONF = ROOT / "conf" / "table"


def load_spec(table: str) -> dict:
    path = TABLE_CONF / f"{table}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in TABLE_CONF.glob("*.yaml")))
        raise ConfigError(f"no table spec conf/table/{table}.yaml: use one of {known}")
    return yaml.safe_load(path.read_text())


def runs_frame(results_dir: Path, table: str) -> pd.DataFrame:
    """One row per result JSON; metrics flattened as 'best:<name>' and 'final:<name>'."""
    rows = []
    for p in sorted((Path(results_dir) / "runs" / table).glob("*.json")):
        d = json.loads(p.read_text())
        r = {k: d.get(k) for k in ("run_id", "table", "row", "column", "setting", "task", "mixer",
                                   "profile", "seed", "lr", "weight_decay", "params",
                                   "wall_time_s", "global_step")}
        for src in ("best", "final"):
            for k, v in d.get("metrics", {}).get(src, {}).items():
                r[f"{src}:{k}"] = v
        r["history"] = d.get("history", [])
        rows.append(r)
    return pd.DataFrame(rows)


def _column_values(df: pd.DataFrame, spec: dict, col: dict) -> pd.DataFrame:
    """Per (row, seed): this column's value after best-over-grid and mean-over-settings."""
    metric = col.get("metric", spec.get("metric"))
    mode = col.get("mode", spec.get("mode", "max"))
    source = col.get("source", spec.get("source", "best"))
    select = col.get("select_by", spec.get("select_by")) or metric
    scale = float(col.get("scale", spec.get("scale", 1.0)))
    if df.empty:
        return pd.DataFrame(columns=["row", "seed", "value", "n_settings"])
    d = df if col.get("key", "*") == "*" else df[df["column"] == col["key"]]
    val_key = metric if metric == "params" else f"{source}:{metric}"
    sel_key = select if select == "params" else f"{source}:{select}"
    if d.empty or val_key not in d or sel_key not in d:
        return pd.DataFrame(columns=["row", "seed", "value", "n_settings"])
    d = d.dropna(subset=[sel_key, val_key])
    keys = ["row", "setting", "seed"]
    pick = d[sel_key].groupby([d[k] for k in keys]).idxmax() if mode == "max" else \
        d[sel_key].groupby([d[k] for k in keys]).idxmin()
    best = d.loc[pick.values, keys + [val_key]]  # best grid point per (row, setting, seed)
    sep = col.get("group_sep")  # e.g. "_": "fuzzy_recall_V32" -> group "fuzzy_recall"
    if sep:  # mean within each group of settings first, then over groups (MAD avg protocol)
        best = best.assign(group=best["setting"].astype(str).str.rsplit(sep, n=1).str[0])
        best = best.groupby(["row", "seed", "group"]).agg(
            **{val_key: (val_key, "mean")}, n=("setting", "nunique")).reset_index()
        per_seed = best.groupby(["row", "seed"]).agg(value=(val_key, "mean"), n_settings=("n", "sum"))
    else:
        per_seed = best.groupby(["row", "seed"]).agg(value=(val_key, "mean"),
                                                     n_settings=("setting", "nunique"))
    per_seed["value"] *= scale
    return per_seed.reset_index()


def build_table(df: pd.DataFrame, spec: dict) -> pd.DataFrame:
    """Long format: row, column, ours, ours_std, n_seeds, n_settings, paper, diff."""
    out, per_col = [], {}
    for col in spec["columns"]:
        label = col.get("label", col["key"])
        v = _column_values(df, spec, col)
        per_col[label] = v
        for row, g in v.groupby("row"):
            out.append({"row": row, "column": label, "ours": g["value"].mean(),
                        "ours_std": g["value"].std(ddof=1) if len(g) > 1 else 0.0,
                        "n_seeds": len(g), "n_settings": int(g["n_settings"].max())})
    avg = spec.get("average")
    if avg and any(len(v) for v in per_col.values()):
        merged = pd.concat([v.assign(column=c) for c, v in per_col.items() if len(v)])
        n_cols = len(per_col)
        for row, g in merged.groupby("row"):
            by_seed = g.groupby("seed")["value"].agg(["mean", "count"])
            by_seed = by_seed[by_seed["count"] == n_cols]  # only seeds with every column present
            if len(by_seed):
                out.append({"row": row, "column": avg, "ours": by_seed["mean"].mean(),
                            "ours_std": by_seed["mean"].std(ddof=1) if len(by_seed) > 1 else 0.0,
                            "n_seeds": len(by_seed), "n_settings": int(g["n_settings"].sum())})
    long = pd.DataFrame(out, columns=["row", "column", "ours", "ours_std", "n_seeds", "n_settings"])
    # the paper's numbers: one line per (row, column) the paper reports, even without our runs
    paper = [{"row": r, "column": c, "paper": p} for r, cols in (spec.get("paper") or {}).items()
             for c, p in cols.items() if p is not None]
    long = long.merge(pd.DataFrame(paper, columns=["row", "column", "paper"]),
                      on=["row", "column"], how="outer")
    long["diff"] = long["ours"] - long["paper"]
    order = {r: i for i, r in enumerate(_row_order(spec))}
    cols = [c.get("label", c["key"]) for c in spec["columns"]] + ([avg] if avg else [])
    corder = {c: i for i, c in enumerate(cols)}
    long["_r"] = long["row"].map(lambda r: order.get(r, len(order)))
    long["_c"] = long["column"].map(lambda c: corder.get(c, len(corder)))
    return long.sort_values(["_r", "row", "_c"]).drop(columns=["_r", "_c"]).reset_index(drop=True)


def _row_order(spec):
    return [r if isinstance(r, str) else r["key"] for r in spec.get("rows", [])]


def _fmt(x, nd=2):
    return "—" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.{nd}f}"


def render_markdown(long: pd.DataFrame, spec: dict, profile: str) -> str:
    nd = int(spec.get("digits", 2))
    cols = list(dict.fromkeys(long["column"]))
    lines = [f"# {spec.get('title', '')}", "",
             f"Profile of ours: **{profile}**. Cell: ours ± std over seeds / paper (ours − paper). "
             f"{spec.get('note', '')}".rstrip(), "",
             "| model | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for row, g in long.groupby("row", sort=False):
        cells = []
        for c in cols:
            r = g[g["column"] == c]
            if r.empty:
                cells.append("")
                continue
            r = r.iloc[0]
            ours = _fmt(r["ours"], nd) + (f" ± {_fmt(r['ours_std'], nd)}" if r["n_seeds"] > 1 else "")
            diff = "" if np.isnan(r["diff"]) else f" ({r['diff']:+.{nd}f})"
            cells.append(f"{ours} / {_fmt(r['paper'], nd)}{diff}")
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render_latex(long: pd.DataFrame, spec: dict, profile: str) -> str:
    nd = int(spec.get("digits", 2))
    cols = list(dict.fromkeys(long["column"]))
    esc = lambda s: str(s).replace("_", r"\_").replace("%", r"\%").replace("&", r"\&")  # noqa: E731
    lines = [r"\begin{tabular}{l" + "c" * len(cols) + "}", r"\toprule",
             "Model & " + " & ".join(esc(c) for c in cols) + r" \\", r"\midrule"]
    for row, g in long.groupby("row", sort=False):
        cells = []
        for c in cols:
            r = g[g["column"] == c]
            cells.append("" if r.empty else f"{_fmt(r.iloc[0]['ours'], nd)} ({_fmt(r.iloc[0]['paper'], nd)})")
        lines.append(esc(row) + " & " + " & ".join(cells).replace("—", "--") + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", f"% ours ({profile} profile), paper in parentheses"]
    return "\n".join(lines) + "\n"


def make(table: str, profile: str | None = None, results_dir: Path | None = None) -> dict:
    spec = load_spec(table)
    results_dir = Path(results_dir or ROOT / "results")
    df = runs_frame(results_dir, table)
    if profile is None and not df.empty:  # the most faithful profile present
        profile = "paper" if (df["profile"] == "paper").any() else str(df["profile"].iloc[0])
    if not df.empty:
        df = df[df["profile"] == profile]
    out_dir = results_dir / ("figures" if spec.get("kind") == "figure" else "tables")
    out_dir.mkdir(parents=True, exist_ok=True)
    if spec.get("kind") == "figure":
        mod, fn = spec["plot"].rsplit(".", 1)
        png = getattr(importlib.import_module(mod), fn)(df, spec, out_dir)
        return {"figure": png, "runs": len(df)}
    long = build_table(df, spec)
    long["profile"] = profile or "none"
    long.to_csv(out_dir / f"{table}.csv", index=False)
    (out_dir / f"{table}.md").write_text(render_markdown(long, spec, profile or "none (no runs)"))
    (out_dir / f"{table}.tex").write_text(render_latex(long, spec, profile or "none"))
    return {"table": str(out_dir / f"{table}.md"), "runs": len(df)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tables", nargs="*", help="table names (conf/table/*.yaml); none = all")
    ap.add_argument("--profile", default=None, help="smoke | paper (default: paper if present)")
    ap.add_argument("--results-dir", default=None)
    a = ap.parse_args(argv)
    names = a.tables or sorted(p.stem for p in TABLE_CONF.glob("*.yaml"))
    try:
        for t in names:
            info = make(t, a.profile, a.results_dir)
            print(f"{t}: {info}")
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
