"""Run identity: the run id hashes the resolved config minus logging/paths, so any setting that
changes what is trained is a new run, and skip_existing skips only an exact match."""
from __future__ import annotations

import json
from functools import cache

import pytest
from framework_helpers import REPO, compose
from job_helpers import TINY, clear_hydra, job_config

from tasks.common.provenance import protocol_overrides
from tasks.common.schema import check_values
from tasks.common.store import identity, is_non_identity, make_run_id
from tasks.common.validate import check_config

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


# committed reference runs that today's protocol still trains, one per task family: a change of
# composition that moves run ids (a schema whose defaults enter the config, say) fails here. A
# change meant to alter what one of them trains makes it stale: retrain it or pick a current one.
REFERENCE = ["table1/ZeroS__memorize__baseline__lr0.001_wd0_s0__cpu-2ede9053",
             "table2/ZeroS__wikitext103__L2_d128_T256__lr0.002_wd0.1_s1__smoke-b1fd45f1",
             "table4/ZeroS__ETTh1__h96_Lprotocol__lr0.0006_wd0.1_s2024__cpu-f2d23c87",
             "fig2/ZeroS__regbench__N2500__lr0.0005_wd0.1_s0__cpu-d0c10da1",
             "fig3/ZeroS__L64__L64_d64__lr0.000464159_wd0.1_s1__cpu-39c957ff"]  # carried twice (make carry)


@pytest.mark.parametrize("name", REFERENCE)
def test_a_committed_reference_run_recomposes_to_its_id(name):
    payload = json.loads((REPO / "results/reference/runs" / f"{name}.json").read_text())
    cfg = compose(protocol_overrides(payload["provenance"]))
    assert make_run_id(cfg) == payload["run_id"]
    before = identity(cfg)
    check_values(cfg)  # the schema checks read the config, they do not fill it in
    check_config(cfg)
    assert identity(cfg) == before


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


def test_retired_lookup_nodes_enter_the_id_only_through_what_they_decided():
    # the committed MAD cpu runs stored a `mad_cpu` node with every task's cap: hashed whole, one
    # task's new cap moved every task's run id. A retired key now (store.RETIRED_KEYS): the run's
    # own cap is in trainer.max_steps (today from conf/mad_task_profile/<task>_cpu.yaml)
    from tasks.common.store import resolved_node, run_id_of
    cfg = compose(["experiment=table1/mad", "profile=cpu", "mixer=zeros", "mad_task=memorization"])
    nodes = {k: resolved_node(cfg, k) for k in cfg}
    old = {**nodes, "mad_cpu": {"steps": {"memorization": 1600, "noisy-in-context-recall": 4500}}}
    new = {**nodes, "mad_cpu": {"steps": {"memorization": 1600, "noisy-in-context-recall": 9000}}}
    assert run_id_of(old) == run_id_of(new) == make_run_id(cfg)
    capped = {**nodes, "trainer": {**nodes["trainer"], "max_steps": 1700}}
    assert run_id_of(capped) != make_run_id(cfg)
    assert cfg.trainer.max_steps == 6400
