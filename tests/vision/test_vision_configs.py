"""conf/experiment/table3 composes to the DeiT recipe (paper) and to digits (smoke, cpu), builds through
the framework, and a missing ImageNet directory stops the run with one line."""
from pathlib import Path

import pytest

from tasks.common.errors import ConfigError
from tasks.common.runner import build
from tasks.vision.attention import VisionMixerAttention

CONF = Path(__file__).resolve().parents[2] / "conf"


def _compose(overrides):
    from hydra import compose, initialize_config_dir
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=overrides)


def test_paper_profile_is_the_deit_recipe(tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGENET_DIR", str(tmp_path / "no_imagenet"))
    cfg = _compose(["experiment=table3/deit_tiny", "profile=paper", "logger=none"])
    dm, tr = cfg.task.datamodule, cfg.trainer
    assert dm.batch_size * tr.accumulate_grad_batches == 1024 and tr.max_epochs == 300
    assert cfg.optimizer.lr == pytest.approx(5e-4 * 1024 / 512) and cfg.optimizer.weight_decay == 0.05
    assert cfg.scheduler.name == "cosine" and cfg.scheduler.interval == "epoch"  # as DeiT
    assert cfg.scheduler.warmup_steps == 5 and cfg.scheduler.warmup_init_lr == 1e-6
    assert dm.aug.auto_augment.startswith("rand-m9-mstd0.5") and dm.aug.re_prob == 0.25
    assert dm.repeated_aug and dm.num_repeats == 3 and dm.img_size == 224
    ob = cfg.task.objective
    assert (ob.mixup, ob.cutmix, ob.smoothing) == (0.8, 1.0, 0.1)
    assert cfg.backbone.model_name == "deit_tiny_patch16_224" and cfg.backbone.drop_path_rate == 0.1
    assert tr.precision == "bf16-mixed"
    cpu = _compose(["experiment=table3/deit_tiny", "profile=paper", "logger=none",
                    "trainer.accelerator=cpu"])  # the framework refuses gpu without CUDA
    dm_obj, model, _ = build(cpu, check_data=False)
    assert isinstance(model.blocks[0].attn, VisionMixerAttention) and len(model.blocks) == 12
    with pytest.raises(ConfigError, match="no_imagenet/train is missing") as err:
        dm_obj.check()
    assert "\n" not in str(err.value)


def test_smoke_profile_uses_digits_and_a_tiny_vit():
    cfg = _compose(["experiment=table3/deit_tiny", "profile=smoke", "logger=none",
                    "mixer=zeros_sm"])
    assert cfg.task.datamodule.source == "digits" and cfg.task.num_classes == 10
    assert cfg.trainer.max_steps == -1 and cfg.trainer.val_check_interval is None
    assert cfg.trainer.accelerator == "cpu"
    _, model, module = build(cfg, check_data=False)
    assert model.patch_embed.grid_size == (8, 8) and model.head.out_features == 10
    assert set(module.val_metrics) == {"acc1", "acc5"}


def test_cpu_profile_is_the_smoke_digits_setup_trained_longer_for_every_row():
    smoke = _compose(["experiment=table3/deit_tiny", "profile=smoke", "logger=none"])
    cpu = _compose(["experiment=table3/deit_tiny", "profile=cpu", "logger=none"])
    assert cpu.task.datamodule == smoke.task.datamodule and cpu.backbone == smoke.backbone
    assert cpu.optimizer == smoke.optimizer and cpu.task.objective == smoke.task.objective
    assert (smoke.trainer.max_epochs, cpu.trainer.max_epochs) == (40, 100)
    assert cpu.mixers.cpu == "zeros,zeros_sm,softmax" and cpu.trainer.precision == "32-true"
