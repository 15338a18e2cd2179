"""Run an LM experiment over its mixers and write the table / figure.

  python -m tasks.lm.reproduce table2 --profile smoke data.path=../shared/data/wikitext-2
  python -m tasks.lm.reproduce fig4 --profile paper
Runs live in <out_root>/runs/<mixer>-<hash of the run config>/ (metrics.json, history.csv,
model.pt); a run whose metrics.json exists is reused, so table2 and fig4 smoke share runs and a
killed reproduction resumes. Outputs: <out_root>/<experiment>_<profile>/table.{md,csv} (val/test
ppl, params, next to the paper's) and, for fig4, fig4.png (train and val loss vs update).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

from omegaconf import OmegaConf

from .errors import LMDataError
from .profiles import LABELS, PAPER_TABLE2, get_config
from .model import lm_mixer_kwargs
from .train import train_one


def run_key(cfg, mixer: str) -> str:
    spec = {k: OmegaConf.to_container(cfg[k], resolve=True)
            for k in ("data", "tokenizer", "model", "train", "eval")}
    kwargs = OmegaConf.to_container(cfg.mixer_kwargs, resolve=True).get(mixer, {}) or {}
    spec["mixer"] = mixer
    spec["mixer_kwargs"] = lm_mixer_kwargs(mixer, kwargs, cfg.model.positions)  # effective ones
    return hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]


def _registered(name: str) -> bool:
    from zeros.mixers import available_mixers
    try:
        return name in available_mixers()
    except ImportError:  # registry still incomplete: the ZeroS/attention mixers are there
        return name in ("zeros", "zeros_sm", "softmax", "linear_attn")


def run_experiment(cfg, log=print) -> list[dict]:
    rows = []
    for mixer in cfg.mixers:
        if not _registered(mixer):
            log(f"[lm] skip {mixer}: not in the zeros.mixers registry")
            continue
        out = Path(cfg.out_root) / "runs" / f"{mixer}-{run_key(cfg, mixer)}"
        if (out / "metrics.json").is_file():
            log(f"[lm] reuse {out}")
            rows.append(json.loads((out / "metrics.json").read_text()) | {"run_dir": str(out)})
            continue
        rows.append(train_one(cfg, mixer, out, log=log) | {"run_dir": str(out)})
    return rows


def write_table(rows: list[dict], cfg, out_dir: Path) -> str:
    lines = [f"LM {cfg.experiment} — profile {cfg.profile} (tokenizer "
             f"{cfg.tokenizer.name}; ppl per {'byte' if cfg.tokenizer.name == 'byte' else 'token'}"
             f"; paper: WikiText-103, GPT-2 BPE)", "",
             "| model | val ppl | test ppl | params | test tokens | wall s | cpu s | paper val | "
             "paper test | paper params |", "|---|---|---|---|---|---|---|---|---|---|"]
    csv_rows = ["mixer,label,val_ppl,test_ppl,params,test_tokens,wall_s,cpu_s,paper_val,"
                "paper_test,profile"]
    for r in rows:
        p = PAPER_TABLE2.get(r["mixer"], {}) if cfg.experiment == "table2" else {}
        label = LABELS.get(r["mixer"], r["mixer"])
        f = lambda v: "—" if v is None else (f"{v:.2f}" if isinstance(v, float) else str(v))
        val, test = r.get("valid_ppl"), r.get("test_ppl")
        lines.append(f"| {label} | {f(val)} | {f(test)} | {r['params'] / 1e6:.2f}M | "
                     f"{r.get('test_tokens', '—')} | {r['wall_s']} | {r.get('cpu_s', '—')} | "
                     f"{f(p.get('val'))} | "
                     f"{f(p.get('test'))} | {p.get('params') or '—'} |")
        csv_rows.append(",".join(str(x) for x in (
            r["mixer"], label, val, test, r["params"], r.get("test_tokens"), r["wall_s"],
            r.get("cpu_s"), p.get("val"), p.get("test"), cfg.profile)))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "table.md").write_text("\n".join(lines) + "\n")
    (out_dir / "table.csv").write_text("\n".join(csv_rows) + "\n")
    return "\n".join(lines)


def plot_curves(rows: list[dict], cfg, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for r in rows:
        h = pd.read_csv(Path(r["run_dir"]) / "history.csv")
        label = LABELS.get(r["mixer"], r["mixer"])
        axes[0].plot(h["step"], h["train_loss"], label=label)
        axes[1].plot(h["step"], h["val_loss"], label=label)
    for ax, name in zip(axes, ("training loss", "validation loss")):
        ax.set_xlabel("update")
        ax.set_title(name)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("loss (nats / token)")
    axes[1].legend()
    fig.suptitle(f"LM loss curves — {cfg.experiment}, profile {cfg.profile}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="LM reproduction: table2 (WikiText-103) | fig4 (OWT2)")
    ap.add_argument("experiment", choices=["table2", "fig4"])
    ap.add_argument("--profile", default="smoke", choices=["smoke", "paper"])
    ap.add_argument("overrides", nargs="*", help="dotlist overrides, e.g. data.path=DIR")
    a = ap.parse_intermixed_args(argv)
    cfg = get_config(a.experiment, a.profile, a.overrides)
    start = time.time()
    try:
        rows = run_experiment(cfg)
    except LMDataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(cfg.out_root) / f"{a.experiment}_{a.profile}"
    print(write_table(rows, cfg, out))
    if a.experiment == "fig4" or a.profile == "smoke":
        plot_curves(rows, cfg, out / f"{a.experiment}.png")
    print(f"[lm] wrote {out} in {time.time() - start:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
