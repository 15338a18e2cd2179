"""Train and evaluate one Table 3 model: `python -m tasks.vision.run --profile smoke --mixer zeros`.

Writes <out>/<mixer>.json with top-1/top-5 (final and best over validations), parameter count,
wall time and the validation history. Exits with one line when the dataset is missing.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from .data import MissingDatasetError, VisionDataModule
from .lit import VisionClassifier
from .model import build_vit, count_params
from .objective import VisionObjective
from .profiles import get_profile


def run_one(profile: dict, mixer: str, out_dir: str | os.PathLike, seed: int = 0,
            log_dir: str | os.PathLike = "outputs/vision") -> dict:
    """Fit one model under `profile` (see profiles.py) and return (and save) its result."""
    import lightning as L

    L.seed_everything(seed, workers=True)
    if profile.get("threads"):
        torch.set_num_threads(profile["threads"])
    data = VisionDataModule(seed=seed, **profile["data"])
    data.check()
    num_classes = profile["data"]["num_classes"]
    model = build_vit(mixer, num_classes=num_classes, **profile["model"])
    objective = VisionObjective(num_classes=num_classes, **profile["objective"])
    module = VisionClassifier(model, objective, **profile["optim"])
    run_dir = Path(log_dir) / mixer
    tr = dict(profile["trainer"])
    trainer = L.Trainer(default_root_dir=str(run_dir), logger=False, devices=1,
                        enable_checkpointing=tr.pop("enable_checkpointing", tr["max_epochs"] > 50),
                        enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0, use_distributed_sampler=False, **tr)
    last = run_dir / "checkpoints" / "last.ckpt"
    t0 = time.time()
    trainer.fit(module, datamodule=data, ckpt_path=str(last) if last.exists() else None)
    final = trainer.validate(module, datamodule=data, verbose=False)[0]
    wall = time.time() - t0
    hist = module.history
    best = max((h.get("val/acc1", float("nan")) for h in hist), default=final["val/acc1"])
    result = {
        "mixer": mixer, "params": count_params(model), "top1": final["val/acc1"],
        "top5": final.get("val/acc5"), "best_top1": max(best, final["val/acc1"]),
        "val_loss": final["val/loss"], "epochs": trainer.current_epoch,
        "wall_time_s": round(wall, 1), "seed": seed, "device": str(module.device),
        "threads": torch.get_num_threads(), "history": hist,
    }
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f"{mixer}.json.tmp"
    tmp.write_text(json.dumps(result, indent=1))
    tmp.replace(out / f"{mixer}.json")  # atomic: a half-written result never counts as done
    return result


def apply_overrides(profile: dict, args) -> dict:
    if args.root:
        profile["data"]["root"] = args.root
    if args.epochs:
        profile["trainer"]["max_epochs"] = args.epochs
    if args.rope:
        profile["model"]["rope"] = args.rope
    return profile


def add_common_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", default="smoke", choices=["smoke", "paper"])
    p.add_argument("--root", default=None, help="dataset directory (ImageFolder train/ val/)")
    p.add_argument("--epochs", type=int, default=None, help="override the profile's epochs")
    p.add_argument("--rope", default=None, choices=["2d", "1d", "none"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="results folder (default results/vision/<profile>)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    add_common_args(p)
    p.add_argument("--mixer", default="zeros", help="zeros | zeros_sm | softmax | registry name")
    args = p.parse_args(argv)
    profile = apply_overrides(get_profile(args.profile), args)
    out = args.out or f"results/vision/{args.profile}"
    try:
        res = run_one(profile, args.mixer, out, seed=args.seed,
                      log_dir=f"outputs/vision/{args.profile}")
    except MissingDatasetError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{args.mixer}: top1 {100 * res['top1']:.2f}  params {res['params']:,}  "
          f"wall {res['wall_time_s']:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
