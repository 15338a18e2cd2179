"""Figure 2: RegBench accuracy vs number of training automata, one line per mixer."""
from __future__ import annotations

from pathlib import Path

from tasks.common.figures import _save, plt
from tasks.synthetic_common.report import best_points, panel_heuristics, mark_points


def fig2(df, spec: dict, out_dir) -> str:
    """Framework plot hook (conf/table/fig2.yaml): per training size the reported test accuracy
    of the run (lr, size) chosen on validation (`spec.select_by`, solid; null: the best test),
    each spec `extras` snapshot of the same choice (dashed, same colour, labelled), a ring on
    each unconverged point, a cross on each older-config one and the task's heuristic (grey dashed line)."""
    mode = spec.get("mode", "max")
    y = f"{spec.get('source', 'best')}:{spec['metric']}"  # conf/table/fig2.yaml: reported
    sel = spec.get("select_by")  # as the tables' select_by, with its own direction
    pick = dict(select=f"{spec.get('source', 'best')}:{sel}",
                select_mode=spec.get("select_mode", "min")) if sel else {}
    pts = best_points(df, y, r"N(\d+)", None, mode, **pick)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    colour = {}
    for row, g in pts.groupby("row", sort=False):
        line, = ax.plot(g["x"], g["y"], marker="o", label=str(row))
        colour[row] = line.get_color()
    mark_points(ax, pts)
    for e in spec.get("extras") or []:
        ey = f"{e['source']}:{e.get('metric', spec['metric'])}"
        for row, g in best_points(df, ey, r"N(\d+)", None, mode, **pick).groupby("row", sort=False):
            ax.plot(g["x"], g["y"], marker=".", linestyle="--", alpha=0.6, color=colour.get(row),
                    label=f"{row} ({e.get('label', e['source'])})")
    for value, label in panel_heuristics(df, spec["metric"], lambda setting: "").get("", []):
        ax.axhline(value, color="0.3", linestyle="--", linewidth=1, label=f"{label} ({value:.3f})")
    if pts.empty:
        ax.text(0.5, 0.5, "no runs yet", ha="center", transform=ax.transAxes)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("training automata")
    ax.set_ylabel("RegBench accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    ax.set_title(spec.get("title", ""), fontsize=9)
    return str(_save(fig, Path(out_dir) / f"{spec['name']}.png"))
