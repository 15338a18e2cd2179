"""Table 3 (ImageNet-1k, DeiT-Tiny): train ZeroS, ZeroS-SM and DeiT (softmax) under a profile and
print our top-1 and parameter counts next to the paper's rows.

    python -m tasks.vision.table3 --profile smoke|paper [--root DIR] [--mixers zeros,softmax]

A mixer whose result JSON exists in results/vision/<profile>/ is not retrained (delete the file
to rerun it). Writes results/vision/table3_<profile>.md.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .data import MissingDatasetError
from .profiles import TABLE3_MIXERS, get_profile
from .run import add_common_args, apply_overrides, run_one

# SPEC §7, Table 3: top-1 % and parameters (M) on ImageNet-1k with the DeiT-Tiny backbone
PAPER_ROWS = [("ZeroS", 75.51, 6.0), ("HGRN2", 75.39, 6.1), ("HGRN1", 74.40, 6.1),
              ("TNN", 72.29, 6.4), ("DeiT", 72.20, 5.7)]
LABELS = {"zeros": "ZeroS", "zeros_sm": "ZeroS-SM", "softmax": "DeiT", "hgrn": "HGRN1",
          "hgrn2": "HGRN2"}


def format_table(results: dict[str, dict], profile: str) -> str:
    """Markdown: one row per paper model and per trained mixer."""
    ours = {LABELS.get(m, m): r for m, r in results.items()}
    paper = {name: (top1, params) for name, top1, params in PAPER_ROWS}
    names = [n for n, _, _ in PAPER_ROWS] + [n for n in ours if n not in paper]
    lines = [f"Table 3 (ImageNet-1k, DeiT-Tiny) - profile `{profile}`"
             + (" (digits 32 px, tiny ViT: ours is NOT comparable to the paper's numbers)"
                if profile == "smoke" else ""), "",
             "| model | paper top-1 % | paper params | ours top-1 % | ours top-5 % | "
             "ours best top-1 % | ours params | wall time |",
             "|---|---|---|---|---|---|---|---|"]
    for n in names:
        p_top1, p_params = paper.get(n, (None, None))
        r = ours.get(n)
        cells = [n, f"{p_top1:.2f}" if p_top1 else "-", f"{p_params:.1f}M" if p_params else "-"]
        if r:
            cells += [f"{100 * r['top1']:.2f}", f"{100 * r['top5']:.2f}",
                      f"{100 * r['best_top1']:.2f}", f"{r['params'] / 1e6:.3f}M",
                      f"{r['wall_time_s'] / 60:.1f} min"]
        else:
            cells += ["(paper only)" if n in paper else "-"] + ["-"] * 4
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    add_common_args(p)
    p.add_argument("--mixers", default=",".join(TABLE3_MIXERS),
                   help="comma-separated mixers to train (default: zeros,zeros_sm,softmax)")
    args = p.parse_args(argv)
    profile = apply_overrides(get_profile(args.profile), args)
    out = Path(args.out or f"results/vision/{args.profile}")
    results, t0 = {}, time.time()
    for mixer in args.mixers.split(","):
        done = out / f"{mixer}.json"
        if done.exists():
            print(f"[table3] {mixer}: reusing {done}")
            results[mixer] = json.loads(done.read_text())
            continue
        print(f"[table3] training {mixer} ({args.profile})", flush=True)
        try:
            results[mixer] = run_one(profile, mixer, out, seed=args.seed,
                                     log_dir=f"outputs/vision/{args.profile}")
        except MissingDatasetError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    table = format_table(results, args.profile)
    table += f"\nTotal wall time of this invocation: {(time.time() - t0) / 60:.1f} min\n"
    path = out.parent / f"table3_{args.profile}.md"
    path.write_text(table)
    print(table)
    print(f"[table3] wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
