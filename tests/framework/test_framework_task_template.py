"""Adding a task is the list of files of tasks/INTERFACE.md ("Adding a task: the files"): this
test writes exactly those files for a brand-new task outside the repository (a Python package on
PYTHONPATH, a conf/ folder on $ZEROS_CONF_PATH), trains it through `python -m tasks.train` and
builds its table. If the framework starts needing one more file (a registry, a list of tasks or
tables, a make target), this test fails until INTERFACE.md's list and TASK_FILES say so."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from framework_helpers import REPO, offline_env, squash

TASK, TABLE = "copy_first", "copytpl"

# the task's package: data.py (a LightningDataModule; TokenClassification and SequenceBackbone fit)
DATA_PY = '''
import lightning as L
import torch
from torch.utils.data import DataLoader

from tasks.common.objective import IGNORE


class CopyFirstDataModule(L.LightningDataModule):
    """Random tokens; the target of the last position is the first token (others unscored)."""

    def __init__(self, vocab_size=8, seq_len=6, num_train=64, num_val=32, num_test=32,
                 batch_size=16, seed=0):
        super().__init__()
        self.v, self.t, self.b, self.seed = vocab_size, seq_len, batch_size, seed
        self.sizes = {"train": num_train, "val": num_val, "test": num_test}

    def _set(self, split, i):
        g = torch.Generator().manual_seed(self.seed + i)
        x = torch.randint(0, self.v, (self.sizes[split], self.t), generator=g)
        y = torch.full_like(x, IGNORE)
        y[:, -1] = x[:, 0]
        return [{"input": a, "target": b} for a, b in zip(x, y)]

    def train_dataloader(self):
        return DataLoader(self._set("train", 0), batch_size=self.b, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self._set("val", 1), batch_size=self.b)

    def test_dataloader(self):
        return DataLoader(self._set("test", 2), batch_size=self.b)
'''

# path (relative to the temporary folder) -> text: INTERFACE.md's required files, then the one
# optional file this task uses (its smoke sizes: <= 10 steps, so the test takes seconds)
TASK_FILES = {
    f"py/{TASK}/__init__.py": "",
    f"py/{TASK}/data.py": DATA_PY,
    f"conf/task/{TASK}.yaml": f"""
name: {TASK}
monitor: val/acc_micro
monitor_mode: max
stop_at: null
run_test: true
vocab_size: 8
causal: true
datamodule:
  _target_: {TASK}.data.CopyFirstDataModule
  vocab_size: ${{task.vocab_size}}
objective:
  _target_: tasks.common.objective.TokenClassification
  num_classes: ${{task.vocab_size}}
""",
    f"conf/experiment/{TABLE}/copy.yaml": f"""# @package _global_
defaults:
  - override /task: {TASK}
  - override /backbone: sequence
meta:
  table: {TABLE}
  setting: V${{task.vocab_size}}
backbone: {{d_model: 16, n_heads: 2, n_layers: 1}}
hydra:
  sweeper:
    params:
      mixer: zeros
""",
    f"conf/table/{TABLE}.yaml": """
title: "Copy the first token: accuracy %"
kind: table
metric: test/acc_micro
mode: max
scale: 100
columns:
  - {key: copy_first, label: Copy}
average: null
rows: [ZeroS]
paper: {ZeroS: {Copy: 100.0}}
""",
    f"conf/task_profile/{TASK}_smoke.yaml": """# @package _global_
trainer: {max_steps: 6}
""",
}
REQUIRED = [p for p in TASK_FILES if "task_profile" not in p]  # INTERFACE.md: required


def write_task(root: Path, monkeypatch, skip: str | None = None) -> dict:
    """Writes TASK_FILES (but `skip`) under root; this process and the returned subprocess
    environment find them: the package on the path, the conf/ folder on $ZEROS_CONF_PATH."""
    for rel, text in TASK_FILES.items():
        if rel != skip:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text.lstrip("\n"))
    env = {"ZEROS_CONF_PATH": str(root / "conf"), "ZEROS_ROOT": str(root)}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.syspath_prepend(str(root / "py"))
    path = os.pathsep.join([str(root / "py"), str(REPO)])
    return {**offline_env(root), **env, "PYTHONPATH": path}


def test_a_new_task_from_the_interface_list_composes_trains_and_builds_its_table(
        tmp_path, monkeypatch, capsys):
    from tasks.common import plan, tables
    env = write_task(tmp_path, monkeypatch)
    # composes: the framework's own composer (make plan) finds the new table and experiment
    assert plan.main([TABLE, "--profile", "smoke", "--list"]) in (0, None)
    assert capsys.readouterr().out.count(f"ZeroS__{TASK}__V8__") == 1
    # trains: a protocol run (the table accepts it), 6 steps of the generic backbone
    r = subprocess.run([sys.executable, "-m", "tasks.train", "-m", f"experiment={TABLE}/copy"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    (result,) = (tmp_path / "results" / "runs" / TABLE).glob("*.json")
    d = json.loads(result.read_text())
    assert (d["task"], d["row"], d["column"], d["global_step"]) == (TASK, "ZeroS", TASK, 6)
    assert d["provenance"]["kind"] == "protocol", d["provenance"]
    # builds its table from the result JSON
    assert tables.main([TABLE]) == 0
    md = squash((tmp_path / "results" / "tables" / "smoke" / f"{TABLE}.md").read_text())
    ours = f"{100 * d['metrics']['best']['test/acc_micro']:.2f}"
    assert f"| ZeroS | {ours} / 100.00 (" in md and "| model | Copy |" in md, md


def test_a_new_task_without_its_table_spec_fails_in_one_line_naming_it(tmp_path, monkeypatch,
                                                                        capsys):
    from tasks.common import tables
    spec = f"conf/table/{TABLE}.yaml"
    assert spec in REQUIRED
    write_task(tmp_path, monkeypatch, skip=spec)
    assert tables.main([TABLE]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and spec in err, err


@pytest.mark.parametrize("rel", [p for p in REQUIRED if p.startswith("conf/")])
def test_the_interface_lists_every_file_of_the_template(rel):
    """INTERFACE.md names each required config file (with the task/table as placeholders)."""
    text = (REPO / "tasks" / "INTERFACE.md").read_text()
    generic = (rel.replace(TASK, "<task>").replace(TABLE, "<table>")
               .replace("copy.yaml", "<file>.yaml"))
    assert f"`{generic}`" in text, generic
