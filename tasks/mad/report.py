"""MAD tables with both accuracies from the framework's run files (results/runs/table1, ablation).

    python -m tasks.mad.report [--results-dir results] [--profile smoke|paper]

Writes results/tables/table1_mad.md (paper / ours macro / diff / ours micro, per MAD task and
Avg) and, when ablation runs exist, results/tables/ablation_mad.md (MAD avg per ZeroS variant).
The framework's own results/tables/table1.md (make reproduce-table1) shows the macro numbers.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from .make_configs import COLUMN_KEY
from .score import PAPER_ABLATION, PAPER_TABLE1, table1_markdown, task_scores

ROOT = Path(__file__).resolve().parents[2]
TASK_OF_COLUMN = {v: k for k, v in COLUMN_KEY.items()}
ABLATION_PAPER_ROWS = {"ZeroS": "ZeroS", "ZeroS + zero-order": "+ zero-order term",
                       "ZeroS softmax weights": "plain softmax (no reweighting)",
                       "ZeroS no gates": "no gates", "ZeroS no LayerNorm": "no LayerNorm"}


def load_runs(results_dir: Path, table: str, profile: str | None) -> pd.DataFrame:
    rows = []
    for p in sorted((results_dir / "runs" / table).glob("*.json")):
        d = json.loads(p.read_text())
        if profile and d.get("profile") != profile:
            continue
        m = d.get("metrics", {}).get("final", {})
        column, setting = d.get("column"), str(d.get("setting"))
        if table == "ablation":
            if column != "mad_avg":
                continue  # WikiText rows of the shared ablation table
            key, setting = setting.rsplit("_", 1)
            column = key
        if column not in TASK_OF_COLUMN or "test/acc" not in m:
            continue
        rows.append(dict(model=d["row"], task=TASK_OF_COLUMN[column], setting=setting,
                         lr=d.get("lr"), weight_decay=d.get("weight_decay"),
                         acc_macro=m["test/acc"], acc_micro=m.get("test/acc_micro")))
    return pd.DataFrame(rows)


def ablation_markdown(runs: pd.DataFrame, profile: str) -> str:
    macro = task_scores(runs, "acc_macro") * 100
    lines = [f"# Ablation, MAD part — profile `{profile}`", "",
             "MAD avg (macro accuracy %, mean over tasks of the mean over settings of the best "
             "grid point). Tasks present: " + ", ".join(c for c in macro.columns if c != "Avg"),
             "", "| variant | paper MAD avg | ours | diff | " +
             " | ".join(c for c in macro.columns if c != "Avg") + " |",
             "|---|---|---|---|" + "---|" * (len(macro.columns) - 1)]
    for row, paper_key in ABLATION_PAPER_ROWS.items():
        ref = PAPER_ABLATION.get(paper_key)
        if row not in macro.index:
            lines.append(f"| {row} | {ref} | — | — |" + " — |" * (len(macro.columns) - 1))
            continue
        r = macro.loc[row]
        diff = "—" if ref is None else f"{r['Avg'] - ref:+.1f}"
        lines.append(f"| {row} | {ref} | {r['Avg']:.1f} | {diff} | " +
                     " | ".join(f"{r[c]:.1f}" for c in macro.columns if c != "Avg") + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results-dir", default=str(ROOT / "results"))
    ap.add_argument("--profile", default=None, help="smoke | paper (default: every run)")
    a = ap.parse_args(argv)
    results = Path(a.results_dir)
    out = results / "tables"
    out.mkdir(parents=True, exist_ok=True)
    runs = load_runs(results, "table1", a.profile)
    if runs.empty:
        print("error: no MAD runs in results/runs/table1 (run make reproduce-table1)", file=sys.stderr)
        return 2
    labels = {r: r for r in [*PAPER_TABLE1, *sorted(set(runs.model) - set(PAPER_TABLE1))]
              if r in set(runs.model)}
    (out / "table1_mad.md").write_text(table1_markdown(runs, labels, a.profile or "all"))
    print(f"wrote {out / 'table1_mad.md'} ({len(runs)} runs)")
    abl = load_runs(results, "ablation", a.profile)
    if not abl.empty:
        (out / "ablation_mad.md").write_text(ablation_markdown(abl, a.profile or "all"))
        print(f"wrote {out / 'ablation_mad.md'} ({len(abl)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
