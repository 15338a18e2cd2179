"""Figure 3: MQAR accuracy vs d_model, one panel per sequence length, one line per mixer."""
from __future__ import annotations

from pathlib import Path

from tasks.synthetic_common.report import best_points, panel_plot


def fig3(df, spec: dict, out_dir) -> str:
    """Framework plot hook (conf/table/fig3.yaml): best accuracy over lrs at each (L, d_model)."""
    y = f"{spec.get('source', 'best')}:{spec['metric']}"
    pts = best_points(df, y, r"_d(\d+)", r"^L\d+", spec.get("mode", "max"))
    pts["panel"] = pts["panel"].map(lambda s: f"seq len {s[1:]}")
    pts = pts.assign(_L=pts["panel"].str.extract(r"(\d+)")[0].astype(float)).sort_values(["_L", "row", "x"])
    return panel_plot(pts, Path(out_dir) / f"{spec['name']}.png", title=spec.get("title", ""),
                      xlabel="d_model", ylabel="MQAR accuracy")
