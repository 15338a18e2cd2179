"""Writes the Hydra experiment files of Table 1 and of the MAD part of the ablation.

    python -m tasks.mad.make_configs          # (re)write conf/experiment/{table1,ablation}/mad*
    python -m tasks.mad.make_configs --check  # exit 1 if the files on disk differ (a test runs it)

One file per MAD task (Table 1) and per (ablation variant, task): each sweeps the task's
settings, the mixers (Table 1 only) and the lr x weight-decay grid with Hydra's basic sweeper.
The smoke profile narrows the sweep in conf/task_profile/mad*_smoke.yaml.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .settings import LEARNING_RATES, TASKS, WEIGHT_DECAYS, setting_id, task_settings

ROOT = Path(__file__).resolve().parents[2]
# meta.column keys of conf/table/table1.yaml
COLUMN_KEY = {"compression": "compress", "fuzzy-in-context-recall": "fuzzy_recall",
              "in-context-recall": "recall", "memorization": "memorize",
              "noisy-in-context-recall": "noisy_recall", "selective-copying": "selective_copy"}
# Table 1 rows the paper reports (baselines as registered in zeros.mixers)
TABLE1_MIXERS = "zeros,zeros_sm,softmax,hyena,mh_hyena,mamba,gla,deltanet,linear_attn"
# ablation rows (conf/table/ablation.yaml) -> ZeroS layer switches (SPEC §5)
ABLATIONS = {
    "zeros": ("ZeroS", {}),
    "zero_order": ("ZeroS + zero-order", {"zero_order": True}),
    "softmax_weights": ("ZeroS softmax weights", {"reweight": False}),
    "no_gates": ("ZeroS no gates", {"gates": False}),
    "no_layernorm": ("ZeroS no LayerNorm", {"use_norm": False}),
}
_GRID = (f"      optimizer.lr: {','.join(f'{x:g}' for x in LEARNING_RATES)}\n"
         f"      optimizer.weight_decay: {','.join(f'{x:g}' for x in WEIGHT_DECAYS)}\n")


def _settings(task: str) -> str:
    return ",".join(setting_id(s) for s in task_settings(task))


def table1_file(task: str) -> str:
    return f"""# @package _global_
# Table 1, MAD {task}: every setting x mixer x lr x wd (written by `python -m tasks.mad.make_configs`).
defaults:
  - override /task: mad
  - override /backbone: mad
task:
  mad_task: {task}
backbone:
  _target_: tasks.mad.framework.build_mad_model
  mad_task: ${{task.mad_task}}
  setting: ${{task.setting}}
meta:
  table: table1
  column: {COLUMN_KEY[task]}
  setting: ${{task.setting}}
optimizer:
  decay: all                  # mad-lab: AdamW over every parameter
trainer:
  max_epochs: 200
hydra:
  sweeper:
    params:
      task.setting: {_settings(task)}
      mixer: {TABLE1_MIXERS}
{_GRID}"""


def ablation_file(variant: str, task: str) -> str:
    row, switches = ABLATIONS[variant]
    kwargs = "{" + ", ".join(f"{k}: {str(v).lower()}" for k, v in switches.items()) + "}"
    return f"""# @package _global_
# Ablation, {row} on MAD {task} (written by `python -m tasks.mad.make_configs`).
defaults:
  - override /task: mad_ablation
  - override /backbone: mad
  - override /mixer: zeros
task:
  mad_task: {task}
mixer:
  kwargs: {kwargs}
backbone:
  _target_: tasks.mad.framework.build_mad_model
  mad_task: ${{task.mad_task}}
  setting: ${{task.setting}}
meta:
  table: ablation
  row: {row}
  column: mad_avg
  setting: {COLUMN_KEY[task]}_${{task.setting}}
optimizer:
  decay: all                  # mad-lab: AdamW over every parameter
trainer:
  max_epochs: 200
hydra:
  sweeper:
    params:
      task.setting: {_settings(task)}
{_GRID}"""


def expected_files() -> dict[Path, str]:
    out = {}
    for task in TASKS:
        out[ROOT / "conf/experiment/table1" / f"mad_{COLUMN_KEY[task]}.yaml"] = table1_file(task)
        for variant in ABLATIONS:
            name = f"mad_{variant}__{COLUMN_KEY[task]}.yaml"
            out[ROOT / "conf/experiment/ablation" / name] = ablation_file(variant, task)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare with the files on disk")
    a = ap.parse_args(argv)
    stale = [p for p, text in expected_files().items()
             if not p.exists() or p.read_text() != text]
    if a.check:
        for p in stale:
            print(f"stale: {p.relative_to(ROOT)} (run python -m tasks.mad.make_configs)")
        return 1 if stale else 0
    for p in stale:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(expected_files()[p])
        print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
