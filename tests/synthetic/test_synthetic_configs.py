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
              "mad_ablation": ["task.datamodule.num_train=256", "task.datamodule.num_test=128"],
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
    params = OmegaConf.to_container(cfg.hydra.sweeper.params, resolve=False) or {}
    return {k: str(v).split(",") for k, v in params.items()}


def _first_step(experiment, mixer=None, batch_size=None):
    cfg = _compose(experiment)
    sweep = _sweep(cfg)
    picks = [f"{k}={v[0]}" for k, v in sweep.items() if k != "mixer"]
    picks.append(f"mixer={mixer or sweep.get('mixer', ['zeros'])[0]}")
    extra = [*picks, *SMALL_DATA[cfg.task.name]]
    extra += [f"task.datamodule.batch_size={batch_size}"] if batch_size else []
    cfg = _compose(experiment, extra=extra)
    assert cfg.profile.name == "paper" and cfg.trainer.precision == "bf16-mixed"
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


def test_experiment_files_exist_and_are_current():
    from tasks.mad.make_configs import main
    assert main(["--check"]) == 0, "run `python -m tasks.mad.make_configs`"
    assert len(_files("table1", "mad_*.yaml")) == 6
    assert len(_files("ablation", "mad_*.yaml")) == 30
    assert len(_files("fig2")) == 5 and len(_files("fig3")) == 4


def test_table1_sweeps_the_66_settings_and_grid():
    n = 0
    for exp in _files("table1", "mad_*.yaml"):
        sweep = _sweep(_compose(exp))
        n += len(sweep["task.setting"])
        assert len(sweep["optimizer.lr"]) == 3 and len(sweep["optimizer.weight_decay"]) == 2
        assert {"zeros", "zeros_sm", "softmax", "linear_attn"} <= set(sweep["mixer"])
    assert n == 66


FAST = ["table1/mad_memorize", "table1/mad_compress", "ablation/mad_no_gates__memorize",
        "fig2/regbench_N2500", "fig3/mqar_L64"]
SLOW = [f for f in _files("table1", "mad_*.yaml") if f not in FAST]


@pytest.mark.parametrize("experiment", FAST + [pytest.param(f, marks=pytest.mark.slow)
                                               for f in SLOW])
def test_paper_config_first_step(experiment):
    protocol = _compose(experiment)
    cfg = _first_step(experiment, batch_size=2)
    if experiment.startswith("table1"):
        assert protocol.task.datamodule.batch_size == 128 and cfg.backbone.d_model == 128
        assert cfg.task.stop_at == 0.999 and cfg.optimizer.decay == "all"  # as mad-lab
    if experiment.startswith("ablation"):
        assert cfg.mixer.kwargs.gates is False and cfg.meta.row == "ZeroS no gates"


def test_smoke_profile_narrows_the_sweep():
    sweep = _sweep(_compose("table1/mad_recall", profile="smoke"))
    assert sweep["task.setting"] == ["baseline"] and len(sweep["optimizer.lr"]) == 1
    assert sweep["mixer"] == ["zeros", "zeros_sm", "softmax", "linear_attn"]
    abl = _sweep(_compose("ablation/mad_zero_order__recall", profile="smoke"))
    assert "mixer" not in abl  # the ablation file's own ZeroS variant


@pytest.mark.slow
@pytest.mark.parametrize("experiment", _files("table1", "mad_*.yaml") + _files("fig2")[:1]
                         + _files("fig3")[:1])
def test_paper_config_first_step_every_mixer(experiment):
    for mixer in _sweep(_compose(experiment))["mixer"]:
        _first_step(experiment, mixer)  # the configured batch size
