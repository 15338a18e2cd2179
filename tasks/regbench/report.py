"""Figure 2: RegBench accuracy vs number of training automata, one line per mixer."""
from __future__ import annotations

from pathlib import Path

from tasks.synthetic_common.report import best_points, panel_plot


def fig2(df, spec: dict, out_dir) -> str:
    """Framework plot hook (conf/table/fig2.yaml): best test accuracy over lrs per training size."""
    y = f"{spec.get('source', 'best')}:{spec['metric']}"
    pts = best_points(df, y, r"N(\d+)", None, spec.get("mode", "max"))
    return panel_plot(pts, Path(out_dir) / f"{spec['name']}.png", title=spec.get("title", ""),
                      xlabel="training automata", ylabel="RegBench accuracy")
