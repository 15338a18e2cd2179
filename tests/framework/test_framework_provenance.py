"""Table provenance: a table takes a run only when its config is the experiment's at that profile
for one sweep point; debug overrides land in results/runs/adhoc/<table>/ and never in a table."""
from __future__ import annotations

import json

import pytest
from job_helpers import TINY, clear_hydra, job_config

from tasks.common import protocol, tables
from tasks.common.provenance import classify, composer, sweep_jobs


@pytest.fixture
def job():
    yield lambda ov, out=None: job_config(ov, out)
    clear_hydra()


T1 = ["experiment=table1/mad", "profile=smoke", "mad_task=compression"]


def test_a_sweep_point_with_non_identity_overrides_is_protocol(job):
    p = classify(job([*T1, "mixer=softmax", "resume=true", "logger=none", "paths.root_dir=/x"]))
    assert p["kind"] == "protocol" and p["sweep"]["mixer"] == "softmax"
    assert p["experiment"] == "table1/mad" and p["profile"] == "smoke"


def test_max_steps_override_on_a_table_experiment_is_adhoc(job):
    p = classify(job([*T1, "mixer=zeros", "trainer.max_steps=5"]))
    assert p == {"kind": "adhoc", "overrides": ["trainer.max_steps=5"],
                 "experiment": "table1/mad", "profile": "smoke"}


def test_readme_one_run_example_with_a_mixer_not_a_row_is_adhoc(job):
    # README: `python -m tasks.train experiment=table1/mad mixer=gla`; the smoke rows come from
    # `mixer: ${mixers.${profile.name}}` (resolved), and GLA is a paper row only
    assert classify(job(["experiment=table1/mad", "mixer=gla"]))["overrides"] == ["mixer=gla"]
    assert classify(job(["experiment=table1/mad", "mixer=gla", "profile=paper"]))["kind"] == \
        "protocol"


def test_off_grid_sweep_value_and_extra_group_are_adhoc(job):
    assert classify(job([*T1, "optimizer.lr=0.01"]))["overrides"] == ["optimizer.lr=0.01"]
    assert classify(job([*T1, "optimizer.lr=1e-3"]))["kind"] == "protocol"  # 0.001, as the grid
    assert classify(job(["experiment=toy/recall", "sweep=seeds3"]))["overrides"] == ["sweep=seeds3"]


def test_off_grid_note_names_the_protocols_values(job, capsys, tmp_path):
    # an lr typed to 6 digits (0.000464159 for fig3's 0.00046415888) is off the grid: the note
    # says which values would have made it a protocol run
    from tasks.common.provenance import for_run
    p = classify(job([*T1, "optimizer.lr=0.01"]))
    assert p["grid"] == {"optimizer.lr": "0.001"}
    for_run(job([*T1, "optimizer.lr=0.01"], tmp_path), "x-00000000")
    assert "its optimizer.lr is one of 0.001)" in capsys.readouterr().out
    assert "grid" not in classify(job([*T1, "mixer=zeros", "trainer.max_steps=5"]))


def test_a_recorded_point_of_a_key_now_a_group_recomposes_by_the_group(job):
    # Table 1's runs before conf/mad_task/ recorded `task.mad_task`: recomposed as that task's
    # group option (its column), not the experiment's default task with the key set over it
    from tasks.common.provenance import protocol_overrides
    ov = protocol_overrides({"experiment": "table1/mad", "profile": "smoke",
                             "sweep": {"task.mad_task": "compression", "mixer": "zeros"}})
    assert ov == ["experiment=table1/mad", "profile=smoke", "mad_task=compression", "mixer=zeros"]
    cfg = job(ov)
    assert (cfg.task.mad_task, cfg.meta.column) == ("compression", "compress")


def test_sweep_jobs_expand_like_hydra_basic_sweeper():
    with composer() as compose:
        jobs = sweep_jobs("table1/mad", "smoke", ["mixer=zeros,softmax"], compose)
        assert len(jobs) == 6 * 2  # six MAD tasks x the command line's two mixers
        assert "experiment=table1/mad" in jobs[0] and "task.setting=baseline" in jobs[0]
        assert len(sweep_jobs("toy/recall", "smoke", [], compose)) == 2


def test_adhoc_run_of_a_table_lands_in_adhoc_not_in_the_table(job, tmp_path, monkeypatch, capsys):
    from tasks.common.runner import run
    monkeypatch.setenv("ZEROS_ROOT", str(tmp_path))
    run(job(["experiment=toy/recall", "mixer=zeros", "logger=none", *TINY], tmp_path))
    out = capsys.readouterr().out
    assert "it will not enter the table" in out and "trainer.max_steps=3" in out
    (res,) = (tmp_path / "results" / "runs" / "adhoc" / "toy").glob("*.json")
    prov = json.loads(res.read_text())["provenance"]
    assert prov["kind"] == "adhoc" and "trainer.max_steps=3" in prov["overrides"]
    assert not (tmp_path / "results" / "runs" / "toy").exists()
    assert tables.make("toy", "smoke", tmp_path / "results")["runs"] == 0
    assert not (tmp_path / "results" / "tables").exists()


def test_table_ignores_an_adhoc_json_put_into_its_folder(tmp_path):
    from job_helpers import fake_result
    fake_result(tmp_path / "runs" / "toy" / "a.json", provenance={"kind": "adhoc", "overrides": []})
    fake_result(tmp_path / "runs" / "toy" / "b.json", row="Transformer")
    df = protocol.runs_frame(tmp_path, "toy")
    assert list(df["row"]) == ["Transformer"]


@pytest.mark.parametrize("point", [
    ["experiment=fig3/mqar", "profile=cpu", "mixer=zeros", "length=L128",
     "backbone.d_model=128", "optimizer.lr=0.0021544347", "seed=2"],
    ["experiment=table1/mad", "profile=cpu", "mad_task=memorization", "mixer=zeros_sm",
     "optimizer.lr=0.001", "optimizer.weight_decay=0.1"],
    ["experiment=table4/decoder", "profile=smoke", "task.dataset=ETTh2", "task.horizon=336"],
])
def test_split_groups_then_with_values_composes_what_hydra_composes(point):
    # older_config composes once per group choice and sets lr/seed/sizes on a copy: the config
    # (and so the run id) must be Hydra's own for the whole override list
    from omegaconf import OmegaConf

    from tasks.common.provenance import split_groups, with_values
    groups, values = split_groups(point)
    assert [v.key_or_group for v in values] == [t.split("=")[0] for t in point
                                               if "." in t.split("=")[0] or t.startswith("seed")]
    with composer() as compose:
        whole, split = compose(point), with_values(compose(list(groups)), values)
    assert OmegaConf.to_yaml(split) == OmegaConf.to_yaml(whole)
    assert OmegaConf.to_yaml(split, resolve=True) == OmegaConf.to_yaml(whole, resolve=True)
