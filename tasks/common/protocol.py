"""The protocol layer of the results pipeline (after store.py): which runs a table is made of and
how its grid is reduced. A table is conf/table/<table>.yaml (its spec) plus the experiment files
of conf/experiment/<table>/; its runs are the protocol result JSONs of results/runs/<table>/ (an
ad-hoc run never enters); a cell takes per (row, setting, seed) the best run over the rest of
the grid (learning rates, weight decays): `best_over`, the one implementation the tables, the
figures and the verdicts share."""
from __future__ import annotations

import sys
from fnmatch import fnmatchcase
from pathlib import Path

import pandas as pd
import yaml

from .convergence import stop_reason
from .errors import ConfigError
from .store import CONF, conf_file, conf_glob, read_result

TABLE_CONF = CONF / "table"  # the repository's table specs (a task outside it: store.conf_dirs)
_WARNED: set = set()  # a corrupted JSON is named once per process, not once per read


def table_specs() -> list[str]:
    """Every table with a spec conf/table/<table>.yaml (in the config folders: store.conf_dirs)."""
    return sorted(p.stem for p in conf_glob("table", "*.yaml"))


def load_spec(table: str) -> dict:
    path = conf_file(f"table/{table}.yaml")
    if not path.is_file():
        raise ConfigError(f"no table spec conf/table/{table}.yaml: use one of "
                          f"{', '.join(table_specs())}")
    return yaml.safe_load(path.read_text())


def table_names() -> list[str]:
    return sorted(p.name for p in conf_glob("experiment", "*") if p.is_dir())


def experiment_files(table: str) -> list[str]:
    return sorted(f"{table}/{p.stem}" for p in conf_glob(f"experiment/{table}", "*.yaml"))


def profiles() -> list[str]:
    return sorted(p.stem for p in conf_glob("profile", "*.yaml"))


def profile_reason(profile: str | None) -> str | None:
    """The one line for a profile conf/profile/ lacks (None: no profile asked, or a known one)."""
    if profile is not None and profile not in profiles():
        return f"unknown profile {profile!r}: use one of {', '.join(profiles())}"
    return None


def missing_reason(table: str, profile: str | None = None) -> str | None:
    if not experiment_files(table):
        return f"unknown table {table!r}: use one of {', '.join(table_names())} (conf/experiment/)"
    return profile_reason(profile)


def runs_frame(results_dir: Path, table: str) -> pd.DataFrame:
    """One row per protocol result JSON of the table; metrics flattened as '<snapshot>:<name>'
    (best, final, reported and the task's extra snapshots)."""
    rows = []
    for p in sorted((Path(results_dir) / "runs" / table).glob("*.json")):
        try:
            d = read_result(p)
        except ValueError as e:  # one line naming the file; the other runs and tables go on
            if p not in _WARNED:
                _WARNED.add(p)
                print(f"warning: skip {e}", file=sys.stderr)
            continue
        if (d.get("provenance") or {}).get("kind") == "adhoc":  # misplaced by hand: not a cell
            continue
        r = {k: d.get(k) for k in ("run_id", "table", "row", "column", "setting", "task", "mixer",
                                   "profile", "seed", "lr", "weight_decay", "params",
                                   "wall_time_s", "global_step", "git_commit", "git_dirty",
                                   "monitor", "run_dir")}
        metrics = d.get("metrics") or {}
        r.update({f"{src}:{k}": v for src, snap in metrics.items() if isinstance(snap, dict)
                  for k, v in snap.items()})
        r.update(reported_columns(d, metrics))
        r.update(run_heuristic(d))
        r["history"], r["stop_reason"] = d.get("history", []), stop_reason(d)  # (inferred for old JSONs)
        r["datamodule"] = ((d.get("config") or {}).get("task") or {}).get("datamodule")  # its data
        rows.append(r)
    return pd.DataFrame(rows)


def at_profile(df: pd.DataFrame, profile) -> pd.DataFrame:
    """The runs of a runs_frame at one profile (an empty frame as it is: it has no columns)."""
    return df[df["profile"] == profile] if not df.empty else df


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


def heuristic_of(run, metric: str) -> tuple[float, str] | None:
    """(value, label) of a run's task.heuristic (a runs_frame row) where it applies to `metric`:
    heuristic metric 'acc' is drawn for val/acc and test/acc (any stage prefix)."""
    value, of = run.get("heuristic"), run.get("heuristic_metric")
    if value is None or value != value or not isinstance(of, str) or str(metric).split("/")[-1] != of:
        return None
    return float(value), run.get("heuristic_label")


def heuristic_runs(df: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The runs whose heuristic applies to `metric` (tables, curves and figures draw it)."""
    if df.empty or "heuristic" not in df:
        return df.iloc[0:0]
    return df[[heuristic_of(r, metric) is not None for r in df.to_dict("records")]]


def column_runs(df: pd.DataFrame, col: dict) -> pd.DataFrame:
    """The runs behind one table column: its `key` (a run's meta.column; "*" = every run) and,
    if given, its `settings` glob over meta.setting (e.g. "recall_*": one task of a column
    that averages several)."""
    d = df if col.get("key", "*") == "*" else df[df["column"] == col["key"]]
    pattern = col.get("settings")
    if pattern and len(d):
        d = d[[fnmatchcase(str(s), pattern) for s in d["setting"]]]
    return d


def best_over(d: pd.DataFrame, keys: list[str], by: str, mode: str = "max") -> pd.DataFrame:
    """Per group of `keys` (e.g. row, setting, seed) the run with the best `by` over the rest
    of the grid (learning rates, weight decays, sizes): the first of equal `by` in frame order,
    so a tie never looks at another column. Groups in sorted key order."""
    d = d.dropna(subset=[by])
    if d.empty:
        return d
    g = d[by].groupby([d[k] for k in keys])
    return d.loc[(g.idxmax() if mode == "max" else g.idxmin()).values]
