"""Every experiment file composes (smoke and paper) and its model + data instantiate on CPU;
trainer/launcher configs compose; bad configs fail before training with one line naming the fix."""
from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tasks.common.errors import ConfigError
from tasks.common.schema import check_values
from tasks.common.validate import check_config, check_overrides
from zeros.mixers import check_mixer_args

from framework_helpers import CONF, TINY, compose, run_cli



def build(cfg, check_data=True):
    # lazy: lightning imports triton.language, which must not happen at collection time
    # (tests/kernels sets TRITON_INTERPRET in its conftest, collected after this directory)
    from tasks.common.runner import build as _build
    return _build(cfg, check_data=check_data)


EXPERIMENTS = sorted(str(p.relative_to(CONF / "experiment").with_suffix(""))
                     for p in (CONF / "experiment").rglob("*.yaml"))


def _swept(cfg, key):
    params = OmegaConf.select(cfg, "hydra.sweeper.params") or {}
    return [v.strip() for v in str(params.get(key, "")).split(",") if v.strip()]


def test_there_are_experiment_files():
    assert "toy/recall" in EXPERIMENTS


@pytest.mark.parametrize("exp", EXPERIMENTS)
def test_experiment_composes_and_builds_on_cpu(exp):
    cfg = compose([f"experiment={exp}", "profile=smoke", "logger=none"])
    assert cfg.meta.table, f"{exp}: set meta.table (results folder, W&B group)"
    assert (CONF / "table" / f"{cfg.meta.table}.yaml").is_file(), \
        f"{exp}: meta.table={cfg.meta.table} has no conf/table/{cfg.meta.table}.yaml"
    check_config(cfg)  # what tasks.train checks before the run id
    check_values(cfg)
    dm, model, module = build(cfg, check_data=False)  # data files may be absent here
    assert sum(p.numel() for p in model.parameters()) > 0
    assert hasattr(dm, "train_dataloader") and module.objective is not None
    # every mixer the experiment sweeps is a known one with a valid head split
    bb = cfg.backbone
    for name in _swept(cfg, "mixer"):
        mix = compose([f"experiment={exp}", f"mixer={name}"]).mixer.name
        if "d_model" in bb and "n_heads" in bb:
            check_mixer_args(mix, int(bb.d_model), int(bb.n_heads), bool(bb.get("causal", True)))
    paper = compose([f"experiment={exp}", "profile=paper"])
    check_values(paper)  # the paper protocol's values fit the schema's types and ranges too
    # bf16 autocast, unless the task's paper profile keeps the original's fp32 (MQAR: zoology)
    tp = CONF / "task_profile" / f"{paper.task.name}_paper.yaml"
    fp32 = tp.is_file() and OmegaConf.select(OmegaConf.load(tp), "trainer.precision") == "32-true"
    assert paper.profile.name == "paper"
    assert paper.trainer.precision == ("32-true" if fp32 else "bf16-mixed")


def test_profiles_trainers_and_launcher_compose():
    smoke = compose([])
    assert smoke.profile.name == "smoke" and smoke.trainer.accelerator == "cpu"
    assert smoke.trainer.precision == "32-true"
    ddp = compose(["trainer=ddp", "profile=paper"])
    assert ddp.trainer.strategy == "ddp"
    fsdp = compose(["trainer=fsdp", "profile=paper"])
    assert fsdp.trainer.strategy._target_.endswith("FSDPStrategy")
    from hydra import compose as hcompose
    from hydra import initialize_config_dir
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = hcompose("train", overrides=["hydra/launcher=slurm"], return_hydra_config=True)
    assert cfg.hydra.launcher._target_.endswith("SlurmLauncher")
    assert cfg.hydra.launcher.gpus_per_node == 1


def test_sweep_files_add_grids():
    from hydra import compose as hcompose
    from hydra import initialize_config_dir
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = hcompose("train", overrides=["experiment=toy/recall", "sweep=seeds3"],
                       return_hydra_config=True)
    params = cfg.hydra.sweeper.params
    assert params.seed == "0,1,2" and params.mixer == "zeros,softmax"  # merged with the experiment's
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = hcompose("train", overrides=["sweep=all_mixers"], return_hydra_config=True)
    from tasks.common.provenance import _values, split_sweep
    from zeros.mixers import available_mixers
    jobs = split_sweep([f"mixer={cfg.hydra.sweeper.params.mixer}"])  # glob(...) over conf/mixer/
    assert sorted(j[0].split("=")[1] for j in jobs) == available_mixers()
    # a run's point is checked against the glob too
    assert "gla" in _values("mixer", cfg.hydra.sweeper.params.mixer)
    assert "zeros_no_gates" not in _values("mixer", cfg.hydra.sweeper.params.mixer)


def test_task_profile_file_wins_over_experiment(tmp_path):
    # conf/task_profile/<task>_<profile>.yaml is picked by interpolation of the final choices
    path = CONF / "task_profile" / "toy_recall_smoke.yaml"
    assert path.is_file()
    cfg = compose(["experiment=toy/recall"])
    expected = OmegaConf.load(path).task.datamodule.num_train
    assert cfg.task.datamodule.num_train == expected


def test_bad_overrides_name_the_fix():
    with pytest.raises(ConfigError, match=r"unknown profile 'fast': use one of cpu, paper, smoke"):
        check_overrides(["profile=fast"])
    with pytest.raises(ConfigError, match=r"unknown mixer 'nope': use one of .*zeros"):
        check_overrides(["mixer=zeros,nope"])
    with pytest.raises(ConfigError, match=r"unknown task 'imagenet9'"):
        check_overrides(["task=imagenet9"])
    check_overrides(["mixer=zeros,gla", "profile=paper", "optimizer.lr=1e-3"])
    check_overrides(["mixer=glob(*,exclude=zeros_*)"])  # Hydra expands it against conf/mixer/


def test_bad_values_fail_in_check_config_and_build():
    with pytest.raises(ConfigError, match="d_model=30 is not divisible by n_heads=4"):
        check_config(compose(["backbone.d_model=30", "backbone.n_heads=4"]))
    with pytest.raises(ConfigError, match="unknown mixer 'nope'"):
        check_config(compose(["mixer.name=nope"]))
    with pytest.raises(ConfigError, match=r"task\.report='final'"):
        check_config(compose(["+task.report=final"]))
    with pytest.raises(ConfigError, match="not found: create it or set task.datamodule.data_path=null"):
        build(compose(["task.datamodule.data_path=/nonexistent/toy.pt"]))


def test_cli_bad_profile_is_one_line_before_training(tmp_path):
    r = run_cli(["profile=fast", *TINY[:1]], tmp_path, timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip() == ("error: unknown profile 'fast': use one of cpu, paper, smoke "
                                "(files in conf/profile/)")
    assert not (Path(tmp_path) / "results").exists()  # nothing ran


def test_cli_bad_heads_is_one_line_before_training(tmp_path, monkeypatch, capsys):
    # in-process through the real entry point (Hydra main) to save a subprocess start
    import sys

    from tasks import train
    monkeypatch.setenv("ZEROS_ROOT", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["zeros-train", "backbone.n_heads=3", "logger=none"])
    # Hydra's main configures logging with handlers bound to this test's captured stderr; put
    # the previous logging state back so later tests do not write to a closed stream
    import logging
    root, saved = logging.getLogger(), logging.getLogger().handlers[:]
    saved_level, saved_disable = root.level, logging.root.manager.disable
    loggers = {n: (lg.handlers[:], lg.level, lg.propagate, lg.disabled)
               for n, lg in logging.root.manager.loggerDict.items() if isinstance(lg, logging.Logger)}
    try:
        with pytest.raises(SystemExit) as e:
            train.main()
    finally:
        root.handlers[:] = saved
        root.setLevel(saved_level)
        logging.disable(saved_disable)
        for n, lg in logging.root.manager.loggerDict.items():
            if isinstance(lg, logging.Logger):
                lg.handlers[:], lg.level, lg.propagate, lg.disabled = loggers.get(
                    n, ([], logging.NOTSET, True, False))
    assert e.value.code == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert err == ["error: d_model=64 is not divisible by n_heads=3: pick n_heads that divides "
                   "d_model (backbone.d_model / backbone.n_heads)"]
    assert not (tmp_path / "results" / "runs").exists()


def test_paper_profile_without_cuda_stops_at_once(monkeypatch):
    """A paper-profile command on a CPU machine fails before composing, with one line."""
    import torch

    from tasks.common import reproduce
    from tasks.common.validate import check_device
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"^profile=paper needs a CUDA GPU"):
        check_device(["experiment=table1/mad", "profile=paper"])
    check_device(["profile=paper", "trainer.accelerator=cpu"])  # explicit CPU: allowed
    check_device(["profile=smoke"])
    from tasks.common import plan
    composed = []
    monkeypatch.setattr(plan, "plan", lambda *a: composed.append(a) or ([], 0))
    assert reproduce.main(["table1", "--profile", "paper"]) == 2
    assert composed == []  # no experiment file was planned (composed) or run


@pytest.mark.parametrize("exp", EXPERIMENTS)
def test_experiment_cpu_profile_has_rows_budget_and_estimate_or_says_it_has_none(exp):
    """profile=cpu composes; an experiment with `mixers.cpu` has measured minutes for the
    reproduce driver's estimate and sweeps only known mixers; one without cpu rows is refused by
    the driver with a line naming the fix (not Hydra's interpolation error)."""
    from tasks.common.provenance import composer, profile_rows, sweep_jobs
    cfg = compose([f"experiment={exp}", "profile=cpu", "logger=none"])
    assert cfg.profile.name == "cpu" and cfg.trainer.accelerator == "cpu"
    assert cfg.trainer.precision == "32-true"
    rows = profile_rows(cfg)
    group = "mixer" if cfg.get("mixers") else "backbone"
    with composer() as c:
        if not rows.get("cpu"):  # absent, or `cpu: null` (ablation/lm)
            with pytest.raises(ConfigError, match=r"no rows for profile=cpu \(mixers\.cpu\)"):
                sweep_jobs(exp, "cpu", [], c)
            return
        jobs = sweep_jobs(exp, "cpu", [], c)
        assert jobs
        first = c(jobs[0])
    from tasks.common.plan import cpu_minutes
    assert (cpu_minutes(first) or 0) > 0, \
        f"{exp}: add the task's measured minutes to conf/estimates.yaml (`cpu`)"
    for name in str(rows["cpu"]).split(","):
        assert (CONF / group / f"{name.strip()}.yaml").is_file()
