"""What a run reports, read back from its result JSON: the reported snapshot (task.report) and
the task's heuristic baseline (task.heuristic), for tables (tables.py) and plots (curves.py)."""
from __future__ import annotations

from fnmatch import fnmatchcase

import numpy as np
import pandas as pd


def column_runs(df: pd.DataFrame, col: dict) -> pd.DataFrame:
    """The runs behind one table column: its `key` (a run's meta.column; "*" = every run) and,
    if given, its `settings` glob over meta.setting (e.g. "recall_*": one task of a column
    that averages several)."""
    d = df if col.get("key", "*") == "*" else df[df["column"] == col["key"]]
    pattern = col.get("settings")
    if pattern and len(d):
        d = d[[fnmatchcase(str(s), pattern) for s in d["setting"]]]
    return d


def reported_columns(d: dict, metrics: dict) -> dict:
    """'reported:<metric>' columns: the snapshot the run reports (task.report). A JSON from
    before task.report has neither `report` nor metrics.reported: it reported its best."""
    report = d.get("report") or "best"
    snap = metrics.get("reported") or metrics.get("final" if report == "last" else "best") or {}
    return {"report": report, **{f"reported:{k}": v for k, v in snap.items()}}


def run_heuristic(d: dict) -> dict:
    """The run's task.heuristic {value, label, metric}: the line a model must cross."""
    h = ((d.get("config") or {}).get("task") or {}).get("heuristic")
    if not isinstance(h, dict) or h.get("value") is None:
        return {}
    return {"heuristic": float(h["value"]), "heuristic_label": str(h.get("label") or "heuristic"),
            "heuristic_metric": str(h.get("metric") or "acc")}


def heuristic_applies(metric: str, heuristic_metric) -> bool:
    """task.heuristic.metric 'acc' is drawn for val/acc and test/acc (any stage prefix)."""
    return isinstance(heuristic_metric, str) and str(metric).split("/")[-1] == heuristic_metric


def heuristics(df: pd.DataFrame, spec: dict) -> pd.DataFrame:
    """Per table column: the heuristic of its runs in the column's units (x scale), where the
    column's metric is the heuristic's; mean over settings, as the cells average them."""
    out = []
    if df.empty or "heuristic" not in df:
        return pd.DataFrame(columns=["column", "heuristic", "heuristic_label"])
    for col in spec["columns"]:
        metric = col.get("metric", spec.get("metric"))
        d = column_runs(df, col).dropna(subset=["heuristic"])
        d = d[[heuristic_applies(metric, m) for m in d["heuristic_metric"]]]
        if len(d):
            per_setting = d.groupby("setting")["heuristic"].mean()
            out.append({"column": col.get("label", col["key"]),
                        "heuristic": per_setting.mean() * float(col.get("scale", spec.get("scale", 1.0))),
                        "heuristic_label": d["heuristic_label"].iloc[0]})
    return pd.DataFrame(out, columns=["column", "heuristic", "heuristic_label"])


def extra_tables(df: pd.DataFrame, spec: dict) -> pd.DataFrame:
    """spec `extras: [{source, metric, label, mode, select_by}]`: per (row, column) the value of
    another snapshot (e.g. the best-accuracy epoch beside the reported lowest-loss one), built by
    the same protocol as the cell. Columns 'extra:<label>'; rows/columns without it are absent."""
    from .tables import build_table  # the same protocol as the cells (tables imports us)
    out = None
    for e in spec.get("extras") or []:
        over = {k: e[k] for k in ("source", "metric", "mode", "select_by") if k in e}
        if "metric" in e and "select_by" not in e:
            over["select_by"] = None  # select on the extra's own metric
        cols = [{**c, **over} for c in spec["columns"] if c.get("metric") != "params"]
        long = build_table(df, {**spec, **over, "columns": cols, "paper": None, "extras": None})
        long = long.dropna(subset=["ours"])[["row", "column", "ours"]]
        long = long.rename(columns={"ours": f"extra:{e.get('label', e.get('source'))}"})
        out = long if out is None else out.merge(long, on=["row", "column"], how="outer")
    return out if out is not None else pd.DataFrame(columns=["row", "column"])


def with_extras(long: pd.DataFrame, df: pd.DataFrame, spec: dict) -> pd.DataFrame:
    """The labelled extra snapshots and the heuristic per cell, as columns only where a run has
    them (a table of runs without them stays exactly as it was)."""
    ex = extra_tables(df, spec)
    if len(ex):
        long = long.merge(ex, on=["row", "column"], how="left")
    h = heuristics(df, spec)
    if len(h):
        long = long.merge(h, on="column", how="left")
    return long


def heuristic_row(long: pd.DataFrame, cols: list, fmt) -> list[str]:
    """The markdown line under a table's rows: the heuristic per column (none: no line)."""
    if "heuristic" not in long or not long["heuristic"].notna().any():
        return []
    h = long.drop_duplicates("column").set_index("column")
    label = h["heuristic_label"].dropna().iloc[0]
    cells = ["" if c not in h.index or np.isnan(h.loc[c, "heuristic"])
             else f"*{fmt(h.loc[c, 'heuristic'])}*" for c in cols]
    return [f"| *{label}* | " + " | ".join(cells) + " |"]
