"""tasks/common/resume.py MovableCheckpoint: a run whose run dir moved (make carry / make rekey
rename it; a copy to another worktree or $ZEROS_ROOT) resumes knowing its best checkpoint."""
from __future__ import annotations

import warnings

import lightning
import pytest
import torch
from test_framework_resume import BASE, Killed, _kill_at, _run


def test_movable_checkpoint_keeps_its_best_score_when_the_run_dir_moved(tmp_path):
    # make carry / make rekey rename a run dir; a copy moves it to another root: the resumed run
    # must still know its best score, or its next validation replaces best.ckpt whatever it scores
    from lightning.pytorch.callbacks import ModelCheckpoint

    from tasks.common.resume import MovableCheckpoint
    old, new = tmp_path / "a" / "ckpt", tmp_path / "b" / "ckpt"
    state = {"dirpath": str(old), "monitor": "val/loss", "best_model_score": torch.tensor(0.25),
             "best_model_path": str(old / "best.ckpt"), "current_score": torch.tensor(0.3),
             "best_k_models": {str(old / "best.ckpt"): torch.tensor(0.25)},
             "kth_best_model_path": str(old / "best.ckpt"), "kth_value": torch.tensor(0.25),
             "last_model_path": str(old / "last.ckpt")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = ModelCheckpoint(dirpath=str(new), filename="best", monitor="val/loss")
        plain.load_state_dict(dict(state))
    assert plain.best_model_score is None  # Lightning's own: the score is dropped (the bug)
    moved = MovableCheckpoint(dirpath=str(new), filename="best", monitor="val/loss")
    assert moved.state_key == plain.state_key  # the checkpoints written before it load into it
    moved.load_state_dict(dict(state))
    assert float(moved.best_model_score) == 0.25 and float(moved.kth_value) == 0.25
    assert moved.best_model_path == str(new / "best.ckpt") == moved.kth_best_model_path
    assert list(moved.best_k_models) == [str(new / "best.ckpt")]
    assert moved.last_model_path == str(new / "last.ckpt")
    same = MovableCheckpoint(dirpath=str(old), filename="best", monitor="val/loss")
    same.load_state_dict(dict(state))  # not moved: Lightning's load as it is
    assert same.best_model_path == str(old / "best.ckpt") and float(same.best_model_score) == 0.25


def test_a_run_resumed_from_a_moved_run_dir_keeps_its_best_checkpoint_score(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    monkeypatch.setenv("ZEROS_ROOT", str(a))
    with monkeypatch.context() as m:
        _kill_at(m, 11)  # last.ckpt after the validation of step 10
        with pytest.raises(Killed):
            _run([*BASE, "run_id=m"], a)
    b.mkdir()
    (a / "outputs").rename(b / "outputs")  # the run dir moves (make carry, a copy elsewhere)
    monkeypatch.setenv("ZEROS_ROOT", str(b))
    seen, real = [], lightning.Trainer

    class Probe(lightning.Callback):
        def on_train_start(self, trainer, *args):  # after the checkpoint loaded
            seen.append(trainer.checkpoint_callback.best_model_score)

    monkeypatch.setattr(lightning, "Trainer",
                        lambda *args, callbacks=(), **kw: real(*args, callbacks=[*callbacks, Probe()], **kw))
    _run([*BASE, "run_id=m"], b)
    assert seen and seen[0] is not None  # Lightning alone forgot it, so step 15 replaced best.ckpt
