"""PNG plots of Figures 2 and 3 from the framework's runs frame (tasks.common.tables.runs_frame):
one panel per group, x parsed from `meta.setting`, one line per table row (mixer), best over lrs."""
from __future__ import annotations

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def best_points(df: pd.DataFrame, y: str, x_pattern: str, panel_pattern: str | None,
                mode: str = "max") -> pd.DataFrame:
    """(panel, row, x, y): the best y over the remaining runs (lr, wd) at each (panel, row, x)."""
    if df.empty or y not in df:
        return pd.DataFrame(columns=["panel", "row", "x", "y"])
    d = df.dropna(subset=[y]).copy()
    d["x"] = d["setting"].astype(str).map(lambda s: float(re.search(x_pattern, s).group(1)))
    d["panel"] = (d["setting"].astype(str).map(lambda s: re.search(panel_pattern, s).group(0))
                  if panel_pattern else "")
    agg = d.groupby(["panel", "row", "x"])[y]
    out = (agg.max() if mode == "max" else agg.min()).reset_index().rename(columns={y: "y"})
    return out.sort_values(["panel", "row", "x"])


def panel_plot(points: pd.DataFrame, out: Path, *, title: str, xlabel: str, ylabel: str,
               logx: bool = True) -> str:
    panels = list(dict.fromkeys(points["panel"])) or [""]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.2), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        p = points[points["panel"] == panel]
        for row, g in p.groupby("row", sort=False):
            ax.plot(g["x"], g["y"], marker="o", label=str(row))
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
        axes[0][-1].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return str(out)
