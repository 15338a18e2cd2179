"""What a person sees during a run (tasks/common/progress.py): one line per event (no Lightning
message twice, no third-party tips), a line per validation (and every tenth of the steps) with the
metric and the ETA, the run and Hydra dirs at the start, the table's metric and the result path at
the end."""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from framework_helpers import TINY, run_cli

# '[13:34:56] msg' (our console), '[date][logger][LEVEL] - msg' (Hydra's default), 'INFO: msg'
_PREFIX = re.compile(r"^(\[[^\]]*\](\[[^\]]*\]\[[^\]]*\] -)? ?|INFO: |WARNING: )")


def test_toy_run_prints_each_event_once_with_metric_eta_and_result(tmp_path):
    r = run_cli([*TINY, "trainer.max_steps=4", "trainer.val_check_interval=2", "logger=csv"],
                tmp_path)  # W&B noise: test_framework_wandb.py
    assert r.returncode == 0, r.stderr[-3000:]
    text = r.stdout + r.stderr
    messages = [_PREFIX.sub("", ln).strip() for ln in text.splitlines() if ln.strip()]
    twice = [m for m, n in Counter(messages).items() if n > 1]
    assert not twice, f"printed more than once: {twice}"
    for noise in ("Tip:", "litlogger", "GPU available", "TPU available", "anonymous setting",
                  "LeafSpec"):
        assert noise not in text, noise
    vals = [m for m in messages if re.search(r"\] step [24]/4 \| .*val/acc=\S+ \| "
                                            r"train/loss=\S+ \| elapsed \S+, eta \S+$", m)]
    assert len(vals) == 2, text
    start = next(m for m in messages if m.startswith("run "))
    assert "run dir " in start and "Hydra output " in start
    done = next(m for m in messages if m.startswith("done "))
    assert re.search(r"val/acc=\S+ \(best\) \| test/acc=\S+ .*4 steps in", done), done
    result = Path(next(m for m in messages if m.startswith("result: "))[len("result: "):])
    assert result.is_file() and result.parent.name == "adhoc"
    hydra_log = next((tmp_path / "outputs" / "hydra").rglob("train.log"))
    assert "step 4/4" in hydra_log.read_text()  # the same lines reach the Hydra output dir


def test_short_id_keeps_row_column_setting_and_hash():
    from tasks.common.progress import short_id
    assert short_id("ZeroS__toy_recall__default__lr0.001_wd0_s0__smoke-f29d180d") == \
        "ZeroS__toy_recall__default-f29d180d"
    assert short_id("resume_me") == "resume_me"


def test_bar_callbacks_drop_the_negative_epoch_total_of_a_step_budget():
    from types import SimpleNamespace

    from tasks.common.progress import bar_callbacks
    assert bar_callbacks(False) == []
    (bar,) = bar_callbacks(True)
    for max_epochs, want in ((-1, "Epoch 3"), (5, "Epoch 3/4"), (None, "Epoch 3")):
        bar._trainer = SimpleNamespace(max_epochs=max_epochs)  # what Lightning's setup assigns
        assert bar._get_train_description(3).strip() == want


def test_run_validating_only_at_its_end_prints_a_line_every_tenth_of_its_steps(tmp_path):
    # Table 1 smoke validates once, at step 192: it used to print nothing until then
    r = run_cli([*TINY, "trainer.max_steps=20", "trainer.val_check_interval=20", "logger=csv"],
                tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    steps = [int(m.group(1)) for m in re.finditer(r"\] step (\d+)/20 \|", r.stdout)]
    assert steps == [2, 4, 6, 8, 10, 12, 14, 16, 18, 20], r.stdout
    assert "\r" not in r.stdout + r.stderr  # no bar redraws in a file


def test_bar_only_when_stdout_and_stderr_are_terminals(monkeypatch):
    # under the reproduce driver stdout is a pipe while stderr is the terminal: rich's bar went
    # into the piped lines as redraw residue
    import sys

    from tasks.common.progress import use_bar

    class Stream:
        def __init__(self, tty):
            self.tty = tty

        def isatty(self):
            return self.tty
    for out, err, bar in [(True, True, True), (False, True, False), (True, False, False)]:
        monkeypatch.setattr(sys, "stdout", Stream(out))
        monkeypatch.setattr(sys, "stderr", Stream(err))
        assert use_bar(None) is bar
    assert use_bar(True) is True and use_bar(False) is False
