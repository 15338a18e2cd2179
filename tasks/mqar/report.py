"""Figure 3: MQAR accuracy vs d_model, one panel per sequence length, one line per mixer."""
from __future__ import annotations

import re
from pathlib import Path

from tasks.synthetic_common.report import best_points, panel_heuristics, panel_plot


def _panel(setting: str) -> str:  # meta.setting "L64_d128" -> "seq len 64"
    return "seq len " + re.match(r"L(\d+)", setting).group(1)


def fig3(df, spec: dict, out_dir) -> str:
    """Framework plot hook (conf/table/fig3.yaml): best accuracy over lrs at each (L, d_model)
    (solid), each spec `extras` snapshot (dashed, same colour) and per panel the context-value
    heuristic 1/pairs (grey dashed line)."""
    mode = spec.get("mode", "max")

    def points(y: str):
        pts = best_points(df, y, r"_d(\d+)", r"^L\d+", mode)
        pts["panel"] = pts["panel"].map(_panel)
        pts = pts.assign(_L=pts["panel"].str.extract(r"(\d+)")[0].astype(float))
        return pts.sort_values(["_L", "row", "x"])

    pts = points(f"{spec.get('source', 'best')}:{spec['metric']}")
    extras = [(e.get("label", e["source"]), points(f"{e['source']}:{e.get('metric', spec['metric'])}"))
              for e in spec.get("extras") or []]
    return panel_plot(pts, Path(out_dir) / f"{spec['name']}.png", title=spec.get("title", ""),
                      xlabel="d_model", ylabel="MQAR accuracy", extras=extras,
                      lines=panel_heuristics(df, spec["metric"], _panel))
