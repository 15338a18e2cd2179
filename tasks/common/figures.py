"""Matplotlib helpers for the paper's figures (PNG). Table specs with `kind: figure` name a plot
function `(runs: DataFrame, spec: dict, out_dir: Path) -> str`; `default_figure` is generic."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from .tables import runs_frame  # noqa: E402,F401  (re-exported for plot modules)


def line_plot(df: pd.DataFrame, x: str, y: str, hue: str, out: Path, *, title: str = "",
              xlabel: str | None = None, ylabel: str | None = None, logx: bool = False,
              best: str = "max") -> Path:
    """One line per `hue` value: y against x, taking the best y over the other runs at each x
    (e.g. best accuracy over learning rates, as MQAR's figure does)."""
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for name, g in df.groupby(hue, sort=False):
        agg = g.groupby(x)[y].max() if best == "max" else g.groupby(x)[y].min()
        ax.plot(agg.index, agg.values, marker="o", label=str(name))
    ax.set_xlabel(xlabel or x)
    ax.set_ylabel(ylabel or y)
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_title(title)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _save(fig, out)


def default_figure(df: pd.DataFrame, spec: dict, out_dir: Path) -> str:
    """spec keys: name, x (a run column such as 'setting' or 'lr'), metric, source, mode, title."""
    out = Path(out_dir) / f"{spec['name']}.png"
    y = f"{spec.get('source', 'best')}:{spec['metric']}"
    if df.empty or y not in df:
        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.text(0.5, 0.5, "no runs yet", ha="center")
        return str(_save(fig, out))
    if spec.get("curves"):  # one curve drawer for the whole suite: tasks/common/curves.py
        from .curves import draw, frame  # curves imports this module
        curves = frame(df, spec["metric"])
        if curves.empty:
            fig, ax = plt.subplots(figsize=(5, 3.5))
            ax.text(0.5, 0.5, f"no run logged {spec['metric']}", ha="center")
            return str(_save(fig, out))
        return str(_save(draw(curves, spec), out))
    return str(line_plot(df, spec.get("x", "setting"), y, "row", out, title=spec.get("title", ""),
                         best=spec.get("mode", "max")))


def legend_outside(axes, at, fontsize: float = 7) -> None:
    """One legend for all `axes` (each label once), right of the axis `at`: inside a panel it
    would hide the curves."""
    handles = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    if handles:
        at.legend(handles.values(), handles.keys(), fontsize=fontsize, loc="upper left",
                  bbox_to_anchor=(1.02, 1.0), borderaxespad=0)


def _save(fig, out: Path) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
