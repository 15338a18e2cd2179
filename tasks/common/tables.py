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

import shutil
import sys
from pathlib import Path

import pandas as pd

from .errors import ConfigError, cli_parser, fail
from .figures import run_plot_hook
from .protocol import at_profile, load_spec, profile_reason, runs_frame, table_specs
from .store import cell_of, reference_root, results_root
from .table import (build_table, cell_steps, current_runs, describe, render_latex,
                    render_markdown, with_extras, with_reference)


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
    results_dir = Path(results_dir or results_root())
    ref_root = reference_root(results_dir)
    src = ref_root if reference else results_dir
    df = runs_frame(src, table)
    ref = pd.DataFrame() if reference else runs_frame(ref_root, table)
    profile = profile or _pick_profile(df, ref)
    df = current_runs(at_profile(df, profile), src, table)
    ref = current_runs(at_profile(ref, profile), ref_root, table)
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
        return {**run_plot_hook(spec, df, src, str(profile), sources, ref), "runs": len(df)}
    long = build_table(df, spec)
    long = long.merge(cell_steps(df, spec), on=["row", "column"], how="left")  # steps per cell
    if not ref.empty:
        ref_long = build_table(ref, spec).merge(cell_steps(ref, spec), on=["row", "column"],
                                                how="left")  # its † too
        long = with_reference(long, ref_long)
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
    """`make reference`: the user's protocol runs of table/profile enter that table/profile's
    reference runs, each replacing the reference run of its cell (store.cell_of: the same row,
    setting, lr, wd and seed under another config); the reference's other runs stay (a partial
    retrain never drops them); a user's older run beside today's run of its cell is not copied.
    The reference table is rebuilt. ConfigError when there are none."""
    load_spec(table)  # an unknown table: one line naming the tables, not "reproduce it first"
    results_dir = Path(results_dir or results_root())
    everything = at_profile(runs_frame(results_dir, table), profile)
    df = current_runs(everything, results_dir, table)  # never an older run beside today's of its cell
    if df.empty:
        raise ConfigError(f"no protocol runs of {table} at profile {profile} in "
                          f"{results_dir / 'runs' / table}/: run `make reproduce-{table} "
                          f"PROFILE={profile}` first")
    dest = results_dir / "reference" / "runs" / table  # this results dir's own reference
    old = runs_frame(results_dir / "reference", table)
    old = list(at_profile(old, profile)["run_id"]) if not old.empty else []
    cells, new = {cell_of(r) for r in df["run_id"]}, set(df["run_id"])
    replaced = [r for r in old if cell_of(r) in cells and r not in new]
    for rid in replaced:
        (dest / f"{rid}.json").unlink(missing_ok=True)
    dest.mkdir(parents=True, exist_ok=True)
    for rid in df["run_id"]:
        shutil.copy2(results_dir / "runs" / table / f"{rid}.json", dest / f"{rid}.json")
    skipped = {"superseded": len(everything) - len(df)} if len(everything) > len(df) else {}
    built = make(table, profile, results_dir, reference=True)
    refresh_curves(table, profile, results_dir)
    return {**built, "copied": len(df),
            "replaced": len(replaced), "others_kept": sum(cell_of(r) not in cells for r in old),
            **skipped}


def refresh_curves(table: str, profile: str, results_dir: Path | None = None) -> list[Path]:
    """Redraw the reference learning curves of table/profile that are committed
    (<table>_curves[_<metric>].csv) from the reference runs, so that they never trail the runs
    (tests/framework/test_framework_reference_figures.py checks them byte for byte)."""
    from .curves import make as draw_curves, metric_of  # matplotlib only when there are curves
    ref_root = reference_root(Path(results_dir or results_root()))
    return [draw_curves(table, profile, ref_root, metric_of(table, csv.stem), reference=True)
            for csv in sorted((ref_root / "figures" / profile).glob(f"{table}_curves*.csv"))]


def _profiles(table: str, results_dir, reference: bool) -> list:
    """Every profile the table has runs of (each gets its own folder); [None] when none."""
    root = Path(results_dir or results_root())
    df = runs_frame(reference_root(root) if reference else root, table)
    return sorted(df["profile"].astype(str).unique()) if not df.empty else [None]


def main(argv=None) -> int:
    ap = cli_parser(__doc__)
    ap.add_argument("tables", nargs="*", help="table names (conf/table/*.yaml); none = all")
    ap.add_argument("--profile", default=None, help="smoke | paper | ... (default: every profile present)")
    ap.add_argument("--results-dir", default=None)
    ap.add_argument("--reference", action="store_true",
                    help="rebuild the reference tables from results/reference/runs/")
    ap.add_argument("--publish", action="store_true",
                    help="copy the user's runs of TABLE/--profile into the reference first")
    a = ap.parse_args(argv)
    names = a.tables or table_specs()
    try:
        if reason := profile_reason(a.profile):
            raise ConfigError(reason)
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
                if a.reference and profile and (curves := refresh_curves(t, profile, a.results_dir)):
                    print(f"{t} [{profile}]: {', '.join(p.name for p in curves)} redrawn")
    except ConfigError as e:
        return fail(e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
