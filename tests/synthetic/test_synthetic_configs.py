"""Paper-profile configs of Table 1, the MAD ablation, Figure 2 and Figure 3 compose, and the first
training step of each runs on CPU (with the sweep's first value of every swept key).

Only the data sizes are shrunk (generation time); model, optimizer and schedule are the paper
profile's. The default suite uses mixer zeros and a batch of 2 (time budget) on
the shorter-sequence files; the `slow` tests
take the configured batch size and every swept mixer."""
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from tasks.common.module import weight_decay_groups
from tasks.common.runner import build

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
SMALL_DATA = {"mad": ["task.datamodule.num_train=256", "task.datamodule.num_test=128"],
              "mqar": ["task.datamodule.num_train=256", "task.datamodule.num_test=64"],
              "regbench": ["task.datamodule.num_train=16", "task.datamodule.num_val=8",
                           "task.datamodule.num_test=8"]}


def _files(table, pattern="*.yaml"):
    return sorted(f"{table}/{p.stem}" for p in (CONF / "experiment" / table).glob(pattern))


def _compose(experiment, profile="paper", extra=()):
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose("train", [f"experiment={experiment}", f"profile={profile}", *extra],
                      return_hydra_config=True)
    return cfg


def _sweep(cfg) -> dict[str, list[str]]:
    params = OmegaConf.to_container(cfg.hydra.sweeper.params, resolve=True) or {}
    return {k: str(v).split(",") for k, v in params.items()}


def _first_step(experiment, mixer=None, batch_size=None, picks=None):
    cfg = _compose(experiment)
    sweep = _sweep(cfg)
    picks = list(picks or []) + [f"{k}={v[0]}" for k, v in sweep.items()
                                 if k != "mixer" and not any(p.startswith(f"{k}=") for p in picks or [])]
    picks.append(f"mixer={mixer or sweep.get('mixer', ['zeros'])[0]}")
    extra = [*picks, *SMALL_DATA[cfg.task.name]]
    extra += [f"task.datamodule.batch_size={batch_size}"] if batch_size else []
    cfg = _compose(experiment, extra=extra)
    # MQAR keeps zoology's fp32 at the paper profile (conf/task_profile/mqar_paper.yaml)
    assert cfg.profile.name == "paper"
    assert cfg.trainer.precision == ("32-true" if cfg.task.name == "mqar" else "bf16-mixed")
    cfg.trainer.accelerator = "cpu"  # the paper profile asks for a GPU; everything else as composed
    dm, model, module = build(cfg, check_data=False)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert batch["input"].shape[0] == min(cfg.task.datamodule.batch_size, len(dm.sets["train"]))
    opt = module.optimizer_factory(weight_decay_groups(model, module.decay))
    before = [p.detach().clone() for p in model.parameters()]
    loss = module.objective.step(model, batch, "train").loss
    loss.backward()
    opt.step()
    assert torch.isfinite(loss)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    return cfg


def test_one_experiment_file_per_table_or_figure():
    # */mad_seeds add seeds 1-2 to */mad at profile=cpu only (no rows at smoke/paper)
    assert [_files(t) for t in ("table1", "ablation", "fig2", "fig3")] == [
        ["table1/mad", "table1/mad_seeds"], ["ablation/lm", "ablation/mad", "ablation/mad_seeds"],
        ["fig2/regbench"], ["fig3/mqar"]]


def test_table1_sweeps_the_66_settings_and_grid():
    """mad_task x setting id is Cartesian; the runner skips the ids a task does not have, so
    exactly the protocol's 66 settings train."""
    from tasks.common.errors import NotInProtocol
    from tasks.mad.settings import resolve_setting
    sweep = _sweep(_compose("table1/mad"))
    ok = 0
    for task in sweep["mad_task"]:
        for sid in sweep["task.setting"]:
            try:
                resolve_setting(task, sid)
                ok += 1
            except NotInProtocol:
                pass
    assert ok == 66
    assert len(sweep["optimizer.lr"]) == 3 and len(sweep["optimizer.weight_decay"]) == 2
    assert {"zeros", "zeros_sm", "softmax", "linear_attn"} <= set(sweep["mixer"])


def test_each_mad_task_option_is_its_task_with_its_table1_column():
    # conf/mad_task/<task>.yaml: named by the task id it sets (store.KEYS_NOW_GROUPS: a recorded
    # `task.mad_task=<task>` is recomposed as mad_task=<task>), its column one of Table 1's
    import yaml
    from tasks.mad.settings import TASKS
    spec = yaml.safe_load((CONF / "table" / "table1.yaml").read_text())
    columns = {c["key"] for c in spec["columns"]}
    options = {p.stem: yaml.safe_load(p.read_text()) for p in (CONF / "mad_task").glob("*.yaml")}
    assert sorted(options) == sorted(TASKS)
    assert all(o["task"]["mad_task"] == name for name, o in options.items())
    assert sorted(o["mad_column"] for o in options.values()) == sorted(columns)
    cfg = _compose("ablation/mad", "smoke", ["mad_task=noisy-in-context-recall"])
    assert (cfg.meta.column, cfg.meta.setting) == ("mad_avg", "noisy_recall_baseline")
    assert cfg.task.heuristic.value == 0.316


def test_off_grid_point_is_skipped_not_trained(tmp_path, monkeypatch, capsys):
    from tasks.common.runner import run
    monkeypatch.setenv("ZEROS_ROOT", str(tmp_path))
    cfg = _compose("table1/mad", "smoke", ["mad_task=compression",
                                           "task.setting=noise0.4", "logger=none"])
    assert run(cfg) is None
    assert "skip (not in the protocol): compression has no setting noise0.4" in capsys.readouterr().out
    assert not (tmp_path / "results").exists()


FAST = [("table1/mad", ["mad_task=memorization"]), ("table1/mad", ["mad_task=compression"]),
        ("ablation/mad", ["mad_task=memorization", "mixer=zeros_no_gates"]),
        ("fig2/regbench", []), ("fig3/mqar", [])]
SLOW = [("table1/mad", [f"mad_task={t}"]) for t in
        ("in-context-recall", "fuzzy-in-context-recall", "noisy-in-context-recall",
         "selective-copying")]


@pytest.mark.parametrize("experiment,picks", FAST + [pytest.param(*f, marks=pytest.mark.slow)
                                                     for f in SLOW])
def test_paper_config_first_step(experiment, picks):
    protocol = _compose(experiment)
    mixer = next((p.split("=")[1] for p in picks if p.startswith("mixer=")), None)
    cfg = _first_step(experiment, mixer, batch_size=2,
                      picks=[p for p in picks if not p.startswith("mixer=")])
    if experiment.startswith("table1"):
        assert protocol.task.datamodule.batch_size == 128 and cfg.backbone.d_model == 128
        assert cfg.task.stop_at == 0.999 and cfg.optimizer.decay == "all"  # as mad-lab
    if experiment.startswith("ablation"):
        assert cfg.mixer.kwargs.gates is False and cfg.meta.row == "ZeroS no gates"


def test_smoke_profile_narrows_the_sweep():
    sweep = _sweep(_compose("table1/mad", profile="smoke"))
    assert sweep["task.setting"] == ["baseline"] and len(sweep["optimizer.lr"]) == 1
    assert sweep["mixer"] == ["zeros", "zeros_sm", "softmax", "linear_attn"]
    abl = _sweep(_compose("ablation/mad", profile="smoke"))
    assert abl["task.setting"] == ["baseline"] and abl["mixer"][0] == "zeros"
    assert all(m.startswith("zeros_") for m in abl["mixer"][1:]) and len(abl["mixer"]) == 5


@pytest.mark.slow
@pytest.mark.parametrize("experiment", ["table1/mad", "fig2/regbench", "fig3/mqar"])
def test_paper_config_first_step_every_mixer(experiment):
    for mixer in _sweep(_compose(experiment))["mixer"]:
        _first_step(experiment, mixer)  # the configured batch size
