"""PNG plots of Figures 2 and 3 from the framework's runs frame (tasks.common.protocol.runs_frame):
one panel per group, x parsed from `meta.setting`, one line per table row (mixer), best over lrs."""
from __future__ import annotations

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from tasks.common.convergence import rising  # noqa: E402
from tasks.common.figures import OLDER, OLDER_MARK, legend_outside, save  # noqa: E402
from tasks.common.protocol import best_over, heuristic_runs  # noqa: E402


def best_points(df: pd.DataFrame, y: str, x_pattern: str, panel_pattern: str | None,
                mode: str = "max", select: str | None = None,
                select_mode: str = "min") -> pd.DataFrame:
    """(panel, row, x, y, std, n, rising[, older]) at each (panel, row, x): per seed, over the remaining
    runs (lr, wd, size), the best y (`select` None) or the y of the run with the best `select`
    column (e.g. 'reported:val/loss', select_mode min: the choice on validation, never on the
    plotted test); then y and std over the n seeds, as the tables do (never the best seed);
    rising: a seed's run ended at its step cap with y's metric still rising (convergence.rising)."""
    cols = [y] + ([select] if select else [])
    if df.empty or any(c not in df for c in cols):
        return pd.DataFrame(columns=["panel", "row", "x", "y", "std", "n", "rising"])
    d = df.dropna(subset=cols).copy()
    d["x"] = d["setting"].astype(str).map(lambda s: float(re.search(x_pattern, s).group(1)))
    d["panel"] = (d["setting"].astype(str).map(lambda s: re.search(panel_pattern, s).group(0))
                  if panel_pattern else "")
    seed = ["seed"] if "seed" in d else []
    out = best_over(d, ["panel", "row", "x"] + seed, select or y, select_mode if select else mode)
    out = out.assign(rising=[bool(rising(r, y.split(":", 1)[-1], mode)) for _, r in out.iterrows()])
    out = (out.groupby(["panel", "row", "x"], sort=True)
           .agg(y=(y, "mean"), std=(y, "std"), n=(y, "size"), rising=("rising", "any"))
           .reset_index())
    if "older" in d:  # any run of the point (any lr, seed) of an older config (tables.make)
        old = d.groupby(["panel", "row", "x"])["older"].any().rename("older").reset_index()
        out = out.merge(old, on=["panel", "row", "x"], how="left")
    return out.assign(std=out["std"].fillna(0.0))


def panel_heuristics(df: pd.DataFrame, metric: str,
                     panel_of) -> dict[str, list[tuple[float, str]]]:
    """panel -> [(value, label)]: the task.heuristic of the panel's runs where it applies to
    `metric` (e.g. MQAR's 1/pairs: 0.25 at L 64, 0.125 at L 128): the line to cross."""
    h = heuristic_runs(df, metric)
    if h.empty:
        return {}
    out: dict[str, list[tuple[float, str]]] = {}
    for (setting, value, label), _ in h.groupby(["setting", "heuristic", "heuristic_label"]):
        lines = out.setdefault(panel_of(str(setting)), [])
        if (float(value), str(label)) not in lines:
            lines.append((float(value), str(label)))
    return out


UNCONVERGED = "↑ unconverged (its step cap, still rising)"


def mark_points(ax, pts: pd.DataFrame) -> None:
    """On the points of `pts` (best_points): a black ring where a run is unconverged (the figure
    states no ordering from it, as the tables' ↑) and a grey cross where a run is of an older
    config than today's (the tables' †); each mark is a line of the points' CSV too."""
    ring = dict(marker="o", markersize=11, markerfacecolor="none", markeredgecolor="black",
                linestyle="none")
    for flag, label, style in (("rising", UNCONVERGED, ring), ("older", OLDER, OLDER_MARK)):
        hit = pts[pts[flag].eq(True)] if flag in pts else pts.iloc[:0]
        if not hit.empty:
            ax.plot(hit["x"], hit["y"], label=label, **style)


def panel_plot(points: pd.DataFrame, out: Path, *, title: str, xlabel: str, ylabel: str,
               logx: bool = True, extras: list[tuple[str, pd.DataFrame]] = (),
               lines: dict[str, list[tuple[float, str]]] | None = None) -> str:
    """One panel per points["panel"], one solid line per row, mark_points' ring (unconverged) and
    cross (older config); `extras`: (label, points) drawn dashed in the row's
    colour; `lines`: per panel, grey dashed horizontal lines (heuristics)."""
    panels = list(dict.fromkeys(points["panel"])) or [""]
    colour = {r: f"C{i % 10}" for i, r in enumerate(sorted(set(points["row"])))}  # same in every panel
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels) + 1.8, 3.2), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        p = points[points["panel"] == panel]
        for row, g in p.groupby("row", sort=False):
            ax.plot(g["x"], g["y"], marker="o", color=colour[row], label=str(row))
            if "std" in g and g["std"].gt(0).any():  # mean ± std over seeds: a band, not points
                ax.fill_between(g["x"], g["y"] - g["std"], g["y"] + g["std"], color=colour[row],
                                alpha=0.15, linewidth=0)
        mark_points(ax, p)
        for label, e in extras:
            for row, g in e[e["panel"] == panel].groupby("row", sort=False):
                ax.plot(g["x"], g["y"], marker=".", linestyle="--", alpha=0.6,
                        color=colour.get(row), label=f"{row} ({label})")
        for value, label in (lines or {}).get(panel, []):  # its value on the line: differs per panel
            ax.axhline(value, color="0.3", linestyle="--", linewidth=1, label=label)
            ax.annotate(f"{value:g}", (1.0, value), xycoords=("axes fraction", "data"),
                        xytext=(-2, 2), textcoords="offset points", ha="right", va="bottom",
                        fontsize=6, color="0.3")
        if logx:
            ax.set_xscale("log", base=2)
        if panel:  # one panel per group (e.g. sequence length); the figure title is the suptitle
            ax.set_title(panel, fontsize=9)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        if p.empty:
            ax.text(0.5, 0.5, "no runs yet", ha="center", transform=ax.transAxes)
    if not points.empty:
        legend_outside(axes[0], at=axes[0][-1], fontsize=6)
    fig.suptitle(title, fontsize=10)
    return str(save(fig, out))  # + profile/budget in the title, the points' CSV
