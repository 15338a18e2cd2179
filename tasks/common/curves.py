"""Learning curves of a table's runs, without W&B: `make plots TABLE=x [PROFILE=smoke]`.

    python -m tasks.common.curves TABLE [--profile smoke] [--metric train/loss] [--results-dir DIR]

One panel per column (per column/setting when a column has several settings), one colour per row
(mixer); every run of a row (seeds, lr/wd grid points) is a line of that colour. The curve is the
run's monitored metric against the step, read from <run_dir>/csv/metrics.csv (every validation,
also of a resumed run) or, when that is gone (runs from another machine), from the result JSON's
history. The task's heuristic baseline (task.heuristic) is a dashed horizontal line on the panels
of its metric; a grey cross ends the curve of a run of an older config than today's (the tables'
†; the runs are the tables' own: table.current_runs). Writes
results/figures/<profile>/<table>_curves.png (--metric train/loss: <table>_curves_train-loss.png).
Without runs of yours yet it draws the committed reference runs into
results/reference/figures/<profile>/.
"""
from __future__ import annotations

import math
import re
import sys
import textwrap
from pathlib import Path

import pandas as pd

from .errors import ConfigError, cli_parser, fail
from .figures import OLDER, OLDER_MARK, budget, legend_outside, plt, save
from .protocol import at_profile, heuristic_of, load_spec, profiles, runs_frame
from .store import reference_root, results_root
from .table import current_runs


def run_curve(result: dict, metric: str, history_only: bool = False) -> pd.DataFrame:
    """step, value of `metric` for one run: its metrics.csv if present, else its JSON history.
    history_only: the JSON's history alone (the reference runs: their relative run_dir must not
    pick up a checkout's own outputs/ of the same id, so every machine draws the same curve)."""
    run_dir = result.get("run_dir")  # a runs_frame row: NaN when the JSON has none
    csv = Path(run_dir) / "csv" / "metrics.csv" if isinstance(run_dir, str) and not history_only \
        else None
    df = pd.read_csv(csv) if csv is not None and csv.is_file() else pd.DataFrame()
    if metric in df:
        df = df.dropna(subset=[metric]).drop_duplicates("step", keep="last")
    else:
        df = pd.DataFrame(result.get("history") or [])
    if metric not in df:
        return pd.DataFrame(columns=["step", "value"])
    return df.dropna(subset=[metric])[["step", metric]].rename(columns={metric: "value"})


def collect(table: str, profile: str, results_dir: Path, metric: str | None = None,
            history_only: bool = False) -> pd.DataFrame:
    """One row per (run, metric, step): row, panel, run_id, metric, step, value, older. metric
    None: the run's monitored metric and train/loss (smoke runs validate once: the loss shows the
    curve). The runs are the tables' (table.current_runs: older-config runs flagged, superseded
    ones dropped)."""
    runs = current_runs(at_profile(runs_frame(results_dir, table), profile), results_dir, table)
    out = frame(runs, metric, history_only)
    if out.empty and not runs.empty:  # runs, but none logged this metric
        raise ConfigError(f"no run of {table} in {results_dir / 'runs' / table}/ has a curve of "
                          f"{metric or 'its monitored metric'}: pass a column of their "
                          "csv/metrics.csv (e.g. --metric val/loss)")
    return out


def frame(runs: pd.DataFrame, metric: str | None = None, history_only: bool = False) -> pd.DataFrame:
    """collect() for a runs frame already read (one row per run); empty without runs."""
    if runs.empty:
        return pd.DataFrame()
    several = runs.groupby("column")["setting"].nunique()
    parts = []
    for d in runs.to_dict("records"):  # runs_frame already read each JSON (history, run_dir)
        col = d["column"]
        panel = f"{col} / {d['setting']}" if several.get(col, 1) > 1 else str(col)
        monitor = d["monitor"] if isinstance(d.get("monitor"), str) else "val/loss"
        for m in [metric] if metric else dict.fromkeys([monitor, "train/loss"]):
            value, label = heuristic_of(d, m) or (float("nan"), None)  # where it applies to m
            parts.append(run_curve(d, m, history_only).assign(
                row=d["row"], panel=panel, run_id=d["run_id"], metric=m, profile=d.get("profile"),
                lr=d.get("lr"), heuristic=value, heuristic_label=label,
                older=bool(d.get("older"))))
    return pd.concat(parts, ignore_index=True)


STYLES = ("-", "--", ":", "-.")


def _natural(text: str) -> list:
    """Sort key that orders the numbers in a name by value: L64 < L128."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(text))]


def _draw_heuristic(ax, p: pd.DataFrame) -> None:
    """The line a model must cross: dashed, one per distinct value among the panel's runs."""
    if "heuristic" not in p:
        return
    for (value, label), _ in p.dropna(subset=["heuristic"]).groupby(["heuristic", "heuristic_label"]):
        ax.axhline(value, color="0.3", linestyle="--", linewidth=1, label=f"{label} ({value:g})")


def draw(curves: pd.DataFrame, spec: dict):
    """The figure (one panel per column/setting and metric); make() saves it."""
    panels = sorted(dict.fromkeys(curves["panel"]), key=_natural)  # L64 before L128, d64 before d128
    metrics = list(dict.fromkeys(curves["metric"]))
    order = [r for r in spec.get("rows") or [] if r in set(curves["row"])]
    rows = order + sorted(r for r in set(curves["row"]) if r not in order)  # as Figures 2-3 colour them
    colour = {r: f"C{i % 10}" for i, r in enumerate(rows)}
    n_lrs = curves.groupby("row")["lr"].nunique().to_dict() if "lr" in curves else {}
    lrs = sorted(curves["lr"].dropna().unique()) if "lr" in curves else []
    style = {lr: STYLES[i % len(STYLES)] for i, lr in enumerate(lrs)}
    ncol = min(4, len(panels))
    per_metric = math.ceil(len(panels) / ncol)  # grid rows of one metric; each metric starts a row
    fig, axes = plt.subplots(per_metric * len(metrics), ncol, squeeze=False,
                             figsize=(4 * ncol + 2.2, 3 * per_metric * len(metrics)))
    used = set()
    for k, (metric, panel) in enumerate((m, p) for m in metrics for p in panels):
        idx = (k // len(panels)) * per_metric * ncol + k % len(panels)
        ax = axes.flat[idx]
        used.add(idx)
        p = curves[(curves["panel"] == panel) & (curves["metric"] == metric)]
        for row in rows:
            by_lr = n_lrs.get(row, 1) > 1  # a row trained at several lrs: one style (and entry) each
            for i, (_, g) in enumerate(p[p["row"] == row].groupby("run_id", sort=False)):
                g = g.sort_values("step")
                label = f"{row} (lr {g['lr'].iloc[0]:.3g})" if by_lr else (str(row) if i == 0 else None)
                ax.plot(g["step"], g["value"], color=colour[row], alpha=0.8, marker=".",
                        linestyle=style.get(g["lr"].iloc[0], "-") if by_lr else "-", label=label)
        if "older" in p and p["older"].any():  # the tables' †: a cross on each such curve's end
            ends = p[p["older"]].sort_values("step").groupby("run_id", sort=False).tail(1)
            ax.plot(ends["step"], ends["value"], label=OLDER, **OLDER_MARK)
        _draw_heuristic(ax, p)
        ax.set_title(panel, fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
    for idx, ax in enumerate(axes.flat):
        if idx not in used:
            ax.axis("off")
    legend_outside(axes.flat, at=axes[0][-1])
    title = f"{spec.get('title', spec.get('name', ''))}: learning curves"
    stamp = budget(curves)  # a result always says which profile and budget produced it
    if stamp:
        title += f" ({stamp})"
    fig.suptitle(textwrap.fill(title, 45 * ncol), fontsize=9)  # one narrow panel: wrap, not cut
    return fig


def curves_stem(table: str, metric: str | None) -> str:
    """The file name make() writes (no suffix): <table>_curves, or <table>_curves_val-acc for
    --metric val/acc; metric_of reads it back."""
    return f"{table}_curves" + (f"_{metric.replace('/', '-')}" if metric else "")


def metric_of(table: str, stem: str) -> str | None:
    """curves_stem's metric: toy_curves_val-acc -> val/acc, toy_curves -> None (the default)."""
    return stem.removeprefix(f"{table}_curves").lstrip("_").replace("-", "/") or None


def make(table: str, profile: str, results_dir: Path, metric: str | None = None,
         reference: bool = False) -> Path:
    """Your runs -> results/figures/<profile>/; none yet: the committed reference runs (their JSON
    history) -> results/reference/figures/<profile>/. reference=True: results_dir is the
    reference (tables.refresh_curves), drawn from the JSON histories."""
    spec = load_spec(table)  # ConfigError naming the known tables
    for root in (results_dir, reference_root(results_dir)):
        ref = reference or root == reference_root(results_dir)
        curves = collect(table, profile, root, metric, history_only=ref)
        if not curves.empty:
            return save(draw(curves, spec),
                        root / "figures" / profile / f"{curves_stem(table, metric)}.png")
    raise ConfigError(f"no runs of {table} at profile {profile} in {results_dir / 'runs' / table}/ "
                      f"(nor in the reference): run `make reproduce-{table} PROFILE={profile}` first")


def main(argv=None) -> int:
    ap = cli_parser(__doc__)
    ap.add_argument("table", help="a table name (conf/table/*.yaml)")
    ap.add_argument("--profile", default="smoke", choices=profiles())
    ap.add_argument("--metric", default=None,
                    help="a metrics.csv column, e.g. train/loss (default: each run's monitor)")
    ap.add_argument("--results-dir", default=None,
                    help="default: $ZEROS_ROOT/results, else the repository's results/")
    a = ap.parse_args(argv)
    results = Path(a.results_dir) if a.results_dir else results_root()
    try:
        out = make(a.table, a.profile, results, a.metric)
    except ConfigError as e:
        return fail(e)
    print(f"curves: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
