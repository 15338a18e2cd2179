"""Results -> the paper's tables: `python -m tasks.common.tables <table> [--profile smoke]`.

Reads results/runs/<table>/*.json (this machine's protocol runs), applies the table's protocol
from conf/table/<table>.yaml (best over the lr/wd grid per setting and seed, mean over settings,
mean ± std over seeds), and writes results/tables/<profile>/<table>.{md,csv,tex}: per cell ours /
reference (the committed runs of results/reference/runs/, same profile) / paper and the
difference, plus the profile, steps, seeds and git commits the runs came from. A `kind: figure`
spec calls its `plot` function instead (results/figures/<profile>/). No runs: the old file stays.
`--reference` rebuilds results/reference/{tables,figures}/<profile>/ from the reference runs.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from .errors import ConfigError
from .convergence import mark, rising, rising_note, stop_reason
from .reporting import column_runs, heuristic_row, reported_columns, run_heuristic, with_extras
from .status import read_result

ROOT = Path(__file__).resolve().parents[2]
TABLE_CONF = ROOT / "conf" / "table"
_WARNED: set = set()  # a corrupted JSON is named once per process, not once per read


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
        for src, snap in metrics.items():  # best, final, reported and the task's extra snapshots
            for k, v in (snap if isinstance(snap, dict) else {}).items():
                r[f"{src}:{k}"] = v
        r.update(reported_columns(d, metrics))
        r.update(run_heuristic(d))
        r["history"], r["stop_reason"] = d.get("history", []), stop_reason(d)  # (inferred for old JSONs)
        rows.append(r)
    return pd.DataFrame(rows)


def _column_values(df: pd.DataFrame, spec: dict, col: dict) -> pd.DataFrame:
    """Per (row, seed): this column's value after best-over-grid and mean-over-settings."""
    metric = col.get("metric", spec.get("metric"))
    mode = col.get("mode", spec.get("mode", "max"))
    source = col.get("source", spec.get("source", "reported"))  # reported: each run's task.report
    select = col.get("select_by", spec.get("select_by")) or metric
    scale = float(col.get("scale", spec.get("scale", 1.0)))
    if df.empty:
        return pd.DataFrame(columns=["row", "seed", "value", "n_settings"])
    d = column_runs(df, col)
    val_key = metric if metric == "params" else f"{source}:{metric}"
    sel_key = select if select == "params" else f"{source}:{select}"
    if d.empty or val_key not in d or sel_key not in d:
        return pd.DataFrame(columns=["row", "seed", "value", "n_settings"])
    d = d.dropna(subset=[sel_key, val_key])
    keys = ["row", "setting", "seed"]
    pick = d[sel_key].groupby([d[k] for k in keys]).idxmax() if mode == "max" else \
        d[sel_key].groupby([d[k] for k in keys]).idxmin()
    best = d.loc[pick.values, keys + [val_key]].assign(  # best grid point per (row, setting, seed)
        rising=[rising(r, metric, mode) for _, r in d.loc[pick.values].iterrows()])  # still rising at its cap
    sep = col.get("group_sep")  # e.g. "_": "fuzzy_recall_V32" -> group "fuzzy_recall"
    if sep:  # mean within each group of settings first, then over groups (MAD avg protocol)
        best = best.assign(group=best["setting"].astype(str).str.rsplit(sep, n=1).str[0])
        best = best.groupby(["row", "seed", "group"]).agg(
            **{val_key: (val_key, "mean")}, n=("setting", "nunique"), rising=("rising", "max")).reset_index()
    per_seed = best.groupby(["row", "seed"]).agg(value=(val_key, "mean"), rising=("rising", "max"),
                                                 n_settings=("n", "sum") if sep else ("setting", "nunique"))
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
                        "n_seeds": len(g), "n_settings": int(g["n_settings"].max()), "rising": g["rising"].any()})
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
                            "n_seeds": len(by_seed), "n_settings": int(g["n_settings"].sum()), "rising": g["rising"].any()})
    long = pd.DataFrame(out, columns=["row", "column", "ours", "ours_std", "n_seeds", "n_settings", "rising"])
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
    long = long.sort_values(["_r", "row", "_c"]).drop(columns=["_r", "_c"]).reset_index(drop=True)
    return long if long["rising"].eq(True).any() else long.drop(columns="rising")  # a column only if any


def _row_order(spec):
    return [r if isinstance(r, str) else r["key"] for r in spec.get("rows", [])]


def fmt(x, nd: int = 2, sign: str = "") -> str:
    """A table cell: "—" for a missing value, else nd decimals (sign="+": differences)."""
    return "—" if x is None or pd.isna(x) else f"{x:{sign}.{nd}f}"


def describe(df: pd.DataFrame) -> str:
    """Where the numbers come from: runs, profile, steps (global_step range), seeds, commits."""
    if df.empty:
        return "no runs"
    steps = pd.to_numeric(df.get("global_step"), errors="coerce").dropna()
    span = "?" if steps.empty else (f"{int(steps.min())}" if steps.min() == steps.max()
                                    else f"{int(steps.min())}–{int(steps.max())}")
    seeds = ",".join(str(int(s)) for s in sorted(pd.to_numeric(df["seed"]).dropna().unique()))
    commits = []
    if "git_commit" in df:
        for c, g in df.groupby(df["git_commit"].fillna("unknown"), sort=True):
            dirty = "git_dirty" in g and bool(g["git_dirty"].fillna(False).astype(bool).any())
            commits.append(f"{str(c)[:7]}{'+dirty' if dirty else ''}")
    profiles = ",".join(sorted(df["profile"].astype(str).unique()))
    reports = sorted(df["report"].astype(str).unique()) if "report" in df else ["best"]
    report = "" if reports == ["best"] else f", report {'/'.join(reports)}"  # task.report
    return (f"{len(df)} runs, profile {profiles}, steps {span}, seeds {seeds}{report}, "
            f"commit {' '.join(commits) or 'unknown'}")


def cell_steps(df: pd.DataFrame, spec: dict) -> pd.DataFrame:
    """Per (row, column): the global_step range of the runs behind the cell ("192", "50-192")."""
    out = []
    for col in spec["columns"]:
        d = column_runs(df, col)
        steps = pd.to_numeric(d.get("global_step"), errors="coerce")
        for row, g in steps.groupby(d["row"]):
            lo, hi = g.min(), g.max()
            if not np.isnan(lo):
                out.append({"row": row, "column": col.get("label", col["key"]),
                            "steps": f"{int(lo)}" if lo == hi else f"{int(lo)}-{int(hi)}"})
    return pd.DataFrame(out, columns=["row", "column", "steps"])


def with_reference(long: pd.DataFrame, ref_long: pd.DataFrame) -> pd.DataFrame:
    """Adds the reference value per cell; diff = ours − paper, or reference − paper where ours
    is missing (diff_of says which)."""
    ref = ref_long[["row", "column", "ours"]].rename(columns={"ours": "reference"})
    out = long.merge(ref, on=["row", "column"], how="left")
    use_ref = out["ours"].isna() & out["reference"].notna()
    out["diff"] = np.where(use_ref, out["reference"] - out["paper"], out["ours"] - out["paper"])
    out["diff_of"] = np.where(use_ref, "reference", np.where(out["ours"].notna(), "ours", ""))
    return out


def render_markdown(long: pd.DataFrame, spec: dict, profile: str, sources: dict | None = None,
                    label: str = "ours") -> str:
    """sources: {"ours": describe(...), "reference": describe(...)} lines under the title."""
    nd = int(spec.get("digits", 2))
    cols = list(dict.fromkeys(long["column"]))
    has_ref = "reference" in long and long["reference"].notna().any()
    cell = (f"{label} ± std over seeds / reference / paper ({label} − paper; 'ref' marks "
            "reference − paper where ours is missing)" if has_ref
            else f"{label} ± std over seeds / paper ({label} − paper)")
    note = spec.get("note") or ""  # one text, or one per profile ({smoke: ..., cpu: ...})
    note = (note.get(profile) or "") if isinstance(note, dict) else note
    lines = [f"# {spec.get('title', '')}", "", f"Profile: **{profile}**. Cell: {cell}. "
             f"{note}".rstrip(), ""]
    for name, text in (sources or {}).items():
        lines.append(f"- {name}: {text}")
    if sources:
        lines.append("")
    lines += ["| model | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for row, g in long.groupby("row", sort=False):
        cells = []
        for c in cols:
            r = g[g["column"] == c]
            if r.empty:
                cells.append("")
                continue
            r = r.iloc[0]
            ours = fmt(r["ours"], nd) + (f" ± {fmt(r['ours_std'], nd)}" if r["n_seeds"] > 1 else "") + mark(r)
            ref = f" / {fmt(r['reference'], nd)}" if has_ref else ""
            tag = "ref " if r.get("diff_of") == "reference" else ""
            diff = "" if np.isnan(r["diff"]) else f" ({tag}{r['diff']:+.{nd}f})"
            extras = "".join(f" [{k[6:]} {fmt(r[k], nd)}]" for k in long.columns
                             if k.startswith("extra:") and not _isnan(r[k]))
            cells.append(f"{ours}{ref} / {fmt(r['paper'], nd)}{diff}{extras}")
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    lines += heuristic_row(long, cols, lambda x: fmt(x, nd)) + rising_note(long)  # lines to read cells by
    return "\n".join(lines) + "\n"


def _isnan(x) -> bool:
    return x is None or (isinstance(x, float) and np.isnan(x))


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
            if r.empty:
                cells.append("")
                continue
            r = r.iloc[0]
            ref = "reference" in r and np.isnan(r["ours"]) and not np.isnan(r["reference"])
            val = f"{fmt(r['reference'], nd)}$^*$" if ref else fmt(r["ours"], nd)
            cells.append(f"{val} ({fmt(r['paper'], nd)})")
        lines.append(esc(row) + " & " + " & ".join(cells).replace("—", "--") + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}",
              f"% ours ({profile} profile), paper in parentheses, * = committed reference run"]
    return "\n".join(lines) + "\n"


def reference_root(results_dir: Path) -> Path:
    """results/reference/ next to the user's results, else the repository's committed one."""
    own = Path(results_dir) / "reference"
    return own if own.is_dir() or Path(results_dir) == ROOT / "results" else ROOT / "results" / "reference"


def _pick_profile(*frames) -> str | None:
    for df in frames:  # the most faithful profile present
        if not df.empty:
            return "paper" if (df["profile"] == "paper").any() else str(df["profile"].iloc[0])
    return None


def make(table: str, profile: str | None = None, results_dir: Path | None = None,
         reference: bool = False) -> dict:
    """Build one table/figure. reference=True: from results/reference/runs/ into
    results/reference/{tables,figures}/<profile>/ (no reference column)."""
    spec = load_spec(table)
    asked = profile  # the label of a "no runs" line: only a profile that was asked for
    results_dir = Path(results_dir or ROOT / "results")
    ref_root = reference_root(results_dir)
    src = ref_root if reference else results_dir
    df = runs_frame(src, table)
    ref = pd.DataFrame() if reference else runs_frame(ref_root, table)
    profile = profile or _pick_profile(df, ref)
    df = df[df["profile"] == profile] if not df.empty else df
    ref = ref[ref["profile"] == profile] if not ref.empty else ref
    figure = spec.get("kind") == "figure"
    out_dir = src / ("figures" if figure else "tables") / str(profile)
    if df.empty:  # never replace a table with an empty one (e.g. a failed paper attempt)
        old = sorted((str(p) for p in out_dir.glob(f"{table}.*")),  # name the .md/.png first
                     key=lambda p: (not p.endswith((".md", ".png")), p)) if profile else []
        print(f"{table}{f' [{asked}]' if asked else ''}: no runs in {src / 'runs' / table}/"
              + (f"; kept {old[0]}" if old else "; nothing written"), flush=True)
        return {"kept": old[0] if old else None, "runs": 0}
    sources = {"ours" if not reference else "reference": describe(df)}
    if not ref.empty:
        sources["reference"] = describe(ref)
    if figure:  # the spec's plot hook (tasks/common/figures.py)
        from .figures import run_plot_hook
        return {**run_plot_hook(spec, df, src, str(profile), sources, ref), "runs": len(df)}
    long = build_table(df, spec)
    long = long.merge(cell_steps(df, spec), on=["row", "column"], how="left")  # steps per cell
    if not ref.empty:
        long = with_reference(long, build_table(ref, spec))
    long = with_extras(long, df, spec)  # labelled extra snapshots, heuristic: only if any
    long["profile"] = profile
    first = ["row", "column", "ours", "ours_std", "n_seeds", "n_settings", "paper", "diff", "profile"]
    long = long[first + [c for c in long.columns if c not in first]]  # old CSV columns first
    out_dir.mkdir(parents=True, exist_ok=True)
    long.to_csv(out_dir / f"{table}.csv", index=False)
    label = "reference" if reference else "ours"
    (out_dir / f"{table}.md").write_text(render_markdown(long, spec, profile, sources, label))
    (out_dir / f"{table}.tex").write_text(render_latex(long, spec, profile))
    return {"table": str(out_dir / f"{table}.md"), "runs": len(df)}


def publish_reference(table: str, profile: str, results_dir: Path | None = None) -> dict:
    """`make reference`: the user's protocol runs of table/profile replace that table/profile's
    reference runs; the reference table is rebuilt. ConfigError when there are none."""
    results_dir = Path(results_dir or ROOT / "results")
    df = runs_frame(results_dir, table)
    df = df[df["profile"] == profile] if not df.empty else df
    if df.empty:
        raise ConfigError(f"no protocol runs of {table} at profile {profile} in "
                          f"{results_dir / 'runs' / table}/: run `make reproduce-{table} "
                          f"PROFILE={profile}` first")
    dest = results_dir / "reference" / "runs" / table  # this results dir's own reference
    old = runs_frame(results_dir / "reference", table)
    for rid in (old[old["profile"] == profile]["run_id"] if not old.empty else []):
        (dest / f"{rid}.json").unlink(missing_ok=True)
    dest.mkdir(parents=True, exist_ok=True)
    for rid in df["run_id"]:
        shutil.copy2(results_dir / "runs" / table / f"{rid}.json", dest / f"{rid}.json")
    return {**make(table, profile, results_dir, reference=True), "copied": len(df)}


def _profiles(table: str, results_dir, reference: bool) -> list:
    """Every profile the table has runs of (each gets its own folder); [None] when none."""
    root = Path(results_dir or ROOT / "results")
    df = runs_frame(reference_root(root) if reference else root, table)
    return sorted(df["profile"].astype(str).unique()) if not df.empty else [None]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tables", nargs="*", help="table names (conf/table/*.yaml); none = all")
    ap.add_argument("--profile", default=None, help="smoke | paper | ... (default: every profile present)")
    ap.add_argument("--results-dir", default=None)
    ap.add_argument("--reference", action="store_true",
                    help="rebuild the reference tables from results/reference/runs/")
    ap.add_argument("--publish", action="store_true",
                    help="copy the user's runs of TABLE/--profile into the reference first")
    a = ap.parse_args(argv)
    if not a.results_dir and os.environ.get("ZEROS_ROOT"):  # where the runs put their results
        a.results_dir = str(Path(os.environ["ZEROS_ROOT"]) / "results")
    names = a.tables or sorted(p.stem for p in TABLE_CONF.glob("*.yaml"))
    try:
        if a.publish:
            if len(a.tables) != 1 or not a.profile:
                raise ConfigError("--publish needs one table and --profile: make reference "
                                  "TABLE=table1 PROFILE=smoke")
            print(f"{a.tables[0]}: {publish_reference(a.tables[0], a.profile, a.results_dir)}")
            return 0
        for t in names:
            for profile in [a.profile] if a.profile else _profiles(t, a.results_dir, a.reference):
                info = make(t, profile, a.results_dir, reference=a.reference)
                if info["runs"]:  # no runs: make() said so in one line
                    print(f"{t} [{profile}]: {info.get('table') or info.get('figure')} "
                          f"({info['runs']} runs)")
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
