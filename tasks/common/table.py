"""The table layer of the results pipeline (after protocol.py): a table's runs -> its cells and
their text. The protocol of conf/table/<table>.yaml: best over the lr/wd grid per setting and seed
(protocol.best_over), mean over settings, mean ± std over seeds; the cell text (ours / reference /
paper and the difference) in one grid that pandas writes as Markdown (tabulate) and LaTeX."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .convergence import mark, rising, rising_note
from .protocol import best_over, column_runs, heuristic_runs
from .provenance import older_config
from .store import cell_of


def _column_values(df: pd.DataFrame, spec: dict, col: dict) -> pd.DataFrame:
    """Per (row, seed): this column's value after best-over-grid and mean-over-settings (seeds
    with all of the row's settings)."""
    metric = col.get("metric", spec.get("metric"))
    mode = col.get("mode", spec.get("mode", "max"))
    source = col.get("source", spec.get("source", "reported"))  # reported: each run's task.report
    select = col.get("select_by", spec.get("select_by")) or metric
    scale = float(col.get("scale", spec.get("scale", 1.0)))
    d = df if df.empty else column_runs(df, col)
    val_key = metric if metric == "params" else f"{source}:{metric}"
    sel_key = select if select == "params" else f"{source}:{select}"
    if d.empty or val_key not in d or sel_key not in d:
        return pd.DataFrame(columns=["row", "seed", "value", "n_settings"])
    d = d.dropna(subset=[sel_key, val_key])
    keys = ["row", "setting", "seed"]
    picked = best_over(d, keys, sel_key, mode)  # best grid point per (row, setting, seed)
    best = picked[keys + [val_key]].assign(
        rising=[rising(r, metric, mode) for _, r in picked.iterrows()])  # still rising at its cap
    # a seed enters the cell only with every setting its row has at another seed: a seed still
    # missing a task would otherwise average over fewer tasks (a partly retrained MAD Avg)
    n = best.groupby(["row", "seed"])["setting"].transform("nunique")
    best = best[n == n.groupby(best["row"]).transform("max")]
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
    order = {(r if isinstance(r, str) else r["key"]): i for i, r in enumerate(spec.get("rows", []))}
    cols = [c.get("label", c["key"]) for c in spec["columns"]] + ([avg] if avg else [])
    corder = {c: i for i, c in enumerate(cols)}
    long["_r"] = long["row"].map(lambda r: order.get(r, len(order)))
    long["_c"] = long["column"].map(lambda c: corder.get(c, len(corder)))
    long = long.sort_values(["_r", "row", "_c"]).drop(columns=["_r", "_c"]).reset_index(drop=True)
    return long if long["rising"].eq(True).any() else long.drop(columns="rising")  # a column only if any


OLDER_NOTE = ("† older config: a run behind the cell (any lr, wd or seed) was trained by an older "
              "config than today's, which would train another run: `make status TABLE={table} "
              "PROFILE={profile}` counts them, `make reproduce-{table} PROFILE={profile}` retrains "
              "them.")


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
    n_old = int(df["older"].sum()) if "older" in df else 0
    old = f" ({n_old} of an older config †)" if n_old else ""
    return (f"{len(df)} runs{old}, profile {profiles}, steps {span}, seeds {seeds}{report}, "
            f"commit {' '.join(commits) or 'unknown'}")


def drop_superseded(df: pd.DataFrame) -> pd.DataFrame:
    """Without the older-config runs (an `older` column) whose cell (store.cell_of: row, setting,
    lr, wd, seed, profile) also has a run of today's config: that run replaces them, as `make
    reference` replaces a reference run (else best-over-lr could pick the superseded run)."""
    if df.empty or "older" not in df:
        return df
    cells = df["run_id"].map(cell_of)
    return df[~(df["older"] & cells.isin(set(cells[~df["older"]])))]


def current_runs(df: pd.DataFrame, root: Path, table: str) -> pd.DataFrame:
    """df (runs_frame of root) with an `older` column (the run is of an older config than today's:
    a † on its cells; provenance.older_config composes once per group choice), less the older
    runs that a run of today's config in the same cell supersedes (drop_superseded). The
    one rule of tables, figures and verdicts."""
    if df.empty:
        return df
    older = older_config([root / "runs" / table / f"{r}.json" for r in df["run_id"]],
                         bare_is_older=False)
    return drop_superseded(df.assign(older=df["run_id"].isin(older)))


def cell_steps(df: pd.DataFrame, spec: dict) -> pd.DataFrame:
    """Per (row, column): the global_step range of the runs behind the cell ("192", "50-192") and,
    where df has an `older` column (tables.make), whether any of them (any lr, wd or seed) is of an
    older config than today's: today's config would train another run, which could move the cell."""
    out = []
    for col in spec["columns"]:
        d = column_runs(df, col)
        steps = pd.to_numeric(d.get("global_step"), errors="coerce")
        older = d["older"] if "older" in d else pd.Series(False, index=d.index)
        for row, g in steps.groupby(d["row"]):
            lo, hi = g.min(), g.max()
            if not np.isnan(lo):
                out.append({"row": row, "column": col.get("label", col["key"]),
                            "steps": f"{int(lo)}" if lo == hi else f"{int(lo)}-{int(hi)}",
                            "older": bool(older[g.index].any())})
    out = pd.DataFrame(out, columns=["row", "column", "steps", "older"])
    if not out["older"].any():
        return out.drop(columns="older")  # a column only if any
    avg = [{"row": r, "column": spec["average"], "older": g.any()}  # the average: any of its columns
           for r, g in out.groupby("row", sort=False)["older"]] if spec.get("average") else []
    return pd.concat([out, pd.DataFrame(avg, columns=["row", "column", "older"])], ignore_index=True)


def with_reference(long: pd.DataFrame, ref_long: pd.DataFrame) -> pd.DataFrame:
    """Adds the reference value per cell; diff = ours − paper, or reference − paper where ours
    is missing (diff_of says which)."""
    ref = ref_long[["row", "column", "ours"] + (["older"] if "older" in ref_long else [])].rename(
        columns={"ours": "reference", "older": "reference_older"})  # † on the reference's cells
    out = long.merge(ref, on=["row", "column"], how="left")
    use_ref = out["ours"].isna() & out["reference"].notna()
    out["diff"] = np.where(use_ref, out["reference"] - out["paper"], out["ours"] - out["paper"])
    out["diff_of"] = np.where(use_ref, "reference", np.where(out["ours"].notna(), "ours", ""))
    return out


def grid(long: pd.DataFrame, cell) -> pd.DataFrame:
    """Rows x columns of cell text (`cell(line)`), in the long table's order; "" where no line."""
    first = long.dropna(subset=["row"]).drop_duplicates(["row", "column"])  # one line per cell
    text = first.assign(cell=[cell(r) for _, r in first.iterrows()])
    return text.pivot(index="row", columns="column", values="cell").reindex(
        index=list(dict.fromkeys(first["row"])), columns=list(dict.fromkeys(long["column"]))).fillna("")


def render_markdown(long: pd.DataFrame, spec: dict, profile: str, sources: dict | None = None,
                    label: str = "ours") -> str:
    """Per cell ours ± std / reference / paper (diff) [extras]; title, profile, cell legend,
    sources (describe() per label) above, the heuristic row and the rising note below."""
    nd = int(spec.get("digits", 2))
    has_ref = "reference" in long and long["reference"].notna().any()
    extras = [k for k in long.columns if k.startswith("extra:")]

    def cell(r) -> str:
        ours = (fmt(r["ours"], nd) + (f" ± {fmt(r['ours_std'], nd)}" if r["n_seeds"] > 1 else "")
                + mark(r) + (" †" if r.get("older") in (True,) else ""))
        ref = (f" / {fmt(r['reference'], nd)}" + (" †" if r.get("reference_older") in (True,) else "")
               if has_ref else "")
        tag = "ref " if r.get("diff_of") == "reference" else ""
        diff = "" if pd.isna(r["diff"]) else f" ({tag}{r['diff']:+.{nd}f})"
        more = "".join(f" [{k[6:]} {fmt(r[k], nd)}]" for k in extras if not pd.isna(r[k]))
        return f"{ours}{ref} / {fmt(r['paper'], nd)}{diff}{more}"
    legend = (f"{label} ± std over seeds / reference / paper ({label} − paper; 'ref' marks "
              "reference − paper where ours is missing)" if has_ref
              else f"{label} ± std over seeds / paper ({label} − paper)")
    note = spec.get("note") or ""  # one text, or one per profile ({smoke: ..., cpu: ...})
    note = (note.get(profile) or "") if isinstance(note, dict) else note
    lines = [f"# {spec.get('title', '')}", "", f"Profile: **{profile}**. Cell: {legend}. {note}".rstrip(), ""]
    lines += [f"- {name}: {text}" for name, text in (sources or {}).items()] + ([""] if sources else [])
    table, h = grid(long, cell).rename_axis("model"), heuristic_row(long, nd)
    if h is not None:
        table.loc[h.name] = h
    lines += [table.to_markdown(tablefmt="github", disable_numparse=True)] + rising_note(long)
    if any(c in long and long[c].eq(True).any() for c in ("older", "reference_older")):
        lines += ["", OLDER_NOTE.format(table=spec.get("name", "<table>"), profile=profile)]
    return "\n".join(lines) + "\n"


def render_latex(long: pd.DataFrame, spec: dict, profile: str) -> str:
    """ours (paper) per cell, `$^*$` where the value is the committed reference's."""
    nd = int(spec.get("digits", 2))
    esc = lambda s: str(s).replace("_", r"\_").replace("%", r"\%").replace("&", r"\&")  # noqa: E731

    def cell(r) -> str:
        ref = "reference" in r and pd.isna(r["ours"]) and not pd.isna(r["reference"])
        val = f"{fmt(r['reference'], nd)}$^*$" if ref else fmt(r["ours"], nd)
        return f"{val} ({fmt(r['paper'], nd)})".replace("—", "--")
    wide = grid(long, cell).rename(index=esc, columns=esc).rename_axis(index="Model", columns=None)
    return (wide.reset_index().to_latex(index=False, escape=False, column_format="l" + "c" * wide.shape[1])
            + f"% ours ({profile} profile), paper in parentheses, * = committed reference run\n")


def heuristics(df: pd.DataFrame, spec: dict) -> pd.DataFrame:
    """Per table column: the heuristic of its runs in the column's units (x scale), where the
    column's metric is the heuristic's; mean over settings, as the cells average them."""
    out = []
    if df.empty or "heuristic" not in df:
        return pd.DataFrame(columns=["column", "heuristic", "heuristic_label"])
    for col in spec["columns"]:
        metric = col.get("metric", spec.get("metric"))
        d = heuristic_runs(column_runs(df, col), metric)
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


def heuristic_row(long: pd.DataFrame, nd: int) -> pd.Series | None:
    """The row under a table's model rows: the heuristic per column, italic (none: no row)."""
    if "heuristic" not in long or not long["heuristic"].notna().any():
        return None
    h = long.drop_duplicates("column").set_index("column")
    return h["heuristic"].map(lambda x: "" if pd.isna(x) else f"*{fmt(x, nd)}*").rename(
        f"*{h['heuristic_label'].dropna().iloc[0]}*")
