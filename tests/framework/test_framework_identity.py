"""Run identity: the run id hashes the resolved config minus logging/paths, so any setting that
changes what is trained is a new run, and skip_existing skips only an exact match."""
from __future__ import annotations

from functools import cache

import pytest
from framework_helpers import compose
from job_helpers import TINY, clear_hydra, job_config

from tasks.common.store import is_non_identity, make_run_id

BASE = ["experiment=table1/mad", "profile=smoke", "mixer=zeros"]


@cache
def base_id() -> str:
    return make_run_id(compose(BASE))


@pytest.mark.parametrize("override", [
    "trainer.gradient_clip_val=1.0", "trainer.accumulate_grad_batches=4",
    "trainer.limit_train_batches=10", "trainer.max_steps=5", "trainer.limit_val_batches=2",
    "task.datamodule.batch_size=8", "seed=1", "backbone.n_layers=1"])
def test_a_training_setting_is_a_new_run(override):
    assert make_run_id(compose([*BASE, override])) != base_id()


@pytest.mark.parametrize("override", [
    "paths.root_dir=/elsewhere", "logger=none", "wandb.mode=disabled", "skip_existing=false",
    "resume=true", "compile=true", "trainer.log_every_n_steps=1",
    "trainer.enable_progress_bar=true", "trainer.enable_model_summary=true"])
def test_a_logging_or_path_setting_is_the_same_run(override):
    assert make_run_id(compose([*BASE, override])) == base_id()


def test_data_location_keys_are_not_identity_but_lookalikes_are():
    assert is_non_identity("task.datamodule.data.path") and is_non_identity("paths.data_dir")
    assert is_non_identity("task.datamodule.num_workers")
    assert not is_non_identity("backbone.drop_path_rate")  # "path" inside a word: a model knob


def test_skip_existing_skips_only_an_exact_match(tmp_path, monkeypatch, capsys):
    from tasks.common.runner import run
    monkeypatch.setenv("ZEROS_ROOT", str(tmp_path))
    base = ["logger=none", *TINY]
    try:
        assert run(job_config(base, tmp_path)) is not None            # trains
        assert run(job_config(base, tmp_path)) is None                # the same: skipped
        assert "skip (finished)" in capsys.readouterr().out
        clipped = [*base, "trainer.gradient_clip_val=1.0", "trainer.accumulate_grad_batches=2"]
        assert run(job_config(clipped, tmp_path)) is not None         # a new run: trains
        assert "skip (finished)" not in capsys.readouterr().out
    finally:
        clear_hydra()
    assert len(list((tmp_path / "results" / "runs" / "adhoc").glob("*.json"))) == 2
