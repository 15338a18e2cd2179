"""Data path on a tiny generated ImageFolder: transforms, repeated augmentation, mixup loss,
forward/backward, one full Lightning run, the one-line missing-data error, digits writer."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tasks.common.errors import ConfigError
from tasks.vision.data import (VisionDataModule, _posterize_allow_zero, _patch_zero_bit_posterize,
                               build_transforms)
from tasks.vision.digits import write_digits_imagefolder
from tasks.vision.model import build_vit
from tasks.vision.objective import VisionObjective

TINY_VIT = dict(img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=2)  # 4x4 grid


@pytest.fixture(scope="module")
def tiny_imagefolder(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny_imagenet")
    rng = np.random.default_rng(0)
    for split, n in (("train", 6), ("val", 2)):
        for c in ("n001", "n002", "n003"):
            (root / split / c).mkdir(parents=True)
            for i in range(n):
                img = rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)  # non-square, resized
                Image.fromarray(img).save(root / split / c / f"{i}.JPEG")
    return root


def _datamodule(root, **kw):
    args = dict(source="imagefolder", root=str(root), num_classes=3, img_size=32, batch_size=6,
                num_workers=0, repeated_aug=True, num_repeats=3)
    args.update(kw)
    return VisionDataModule(**args)


@pytest.mark.parametrize("mixer", ["zeros", "zeros_sm", "softmax"])
def test_forward_backward_on_generated_imagefolder(tiny_imagefolder, mixer):
    dm = _datamodule(tiny_imagefolder)
    dm.check()
    dm.setup("fit")
    images, labels = next(iter(dm.train_dataloader()))
    assert images.shape == (6, 3, 32, 32) and labels.dtype == torch.long
    # repeated augmentation: 18 train images x 3 repeats, DeiT keeps len(dataset) per epoch
    assert len(dm.train_dataloader().sampler) == 18
    torch.manual_seed(0)
    model = build_vit(mixer, num_classes=3, **TINY_VIT)
    obj = VisionObjective(num_classes=3)
    loss = obj.step(model, (images, labels), "train").loss
    loss.backward()
    assert torch.isfinite(loss) and loss > 0
    grads = [p.grad for n, p in model.named_parameters() if "blocks.0.attn" in n]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)
    assert sum(g.abs().sum() for g in grads) > 0
    val_images, val_labels = next(iter(dm.val_dataloader()))
    out = obj.step(model, (val_images, val_labels), "val")
    assert out.preds.shape == (6, 3)
    metrics = obj.metrics()
    assert set(metrics) == {"acc1", "acc3"}  # top-5 capped at the number of classes


def test_mixup_targets_and_metrics():
    obj = VisionObjective(num_classes=10)
    assert set(obj.metrics()) == {"acc1", "acc5"}
    logits = torch.tensor([[0.0, 5.0, 1.0, 0, 0, 0, 0, 0, 0, 0]]).repeat(2, 1)
    target = torch.tensor([1, 2])
    top1, top5 = obj.metrics()["acc1"], obj.metrics()["acc5"]
    assert top1(logits, target) == 0.5 and top5(logits, target) == 1.0
    with pytest.raises(ValueError, match="even batch"):
        obj.train_loss(torch.nn.Flatten(), torch.randn(3, 10), torch.tensor([0, 1, 2]))


def test_full_run_writes_result(tiny_imagefolder, tmp_path, monkeypatch):
    """Table 3's experiment through the one training path, on the tiny folder, per-epoch lr."""
    from hydra import compose, initialize_config_dir

    from tasks.common.runner import run
    monkeypatch.setenv("ZEROS_ROOT", str(tmp_path))
    conf = str(Path(__file__).resolve().parents[2] / "conf")
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        cfg = compose("train", overrides=[
            "experiment=table3/deit_tiny", "profile=smoke", "logger=none", "mixer=zeros",
            "task.datamodule.source=imagefolder", f"task.datamodule.root={tiny_imagefolder}",
            "task.num_classes=3", "task.datamodule.batch_size=6", "task.datamodule.num_workers=0",
            "backbone.patch_size=8", "backbone.embed_dim=32", "backbone.depth=1",
            "trainer.max_epochs=2", "trainer.check_val_every_n_epoch=1",
            "scheduler.warmup_steps=1"])
    run(cfg)
    (res,) = [json.loads(p.read_text()) for p in (tmp_path / "results/runs/table3").glob("*.json")]
    assert res["params"] > 0 and 0 <= res["metrics"]["best"]["val/acc1"] <= 1
    assert [h["epoch"] for h in res["history"]] == [0, 1]


def test_missing_dataset_is_one_line_error(tmp_path, capsys):
    with pytest.raises(ConfigError) as err:
        _datamodule(tmp_path / "no_imagenet").check()
    msg = str(err.value)
    assert "\n" not in msg and "no_imagenet/train" in msg and "root=" in msg
    (tmp_path / "empty" / "train").mkdir(parents=True)
    with pytest.raises(ConfigError, match="class folders"):
        _datamodule(tmp_path / "empty").check()


def test_zero_bit_posterize_does_not_crash_randaugment():
    tf = build_transforms(32, is_training=True)  # DeiT's rand-m9-mstd0.5-inc1
    assert _patch_zero_bit_posterize(tf) == 0  # build_transforms already patched it
    img = Image.fromarray(np.full((8, 8, 3), 200, dtype=np.uint8))
    assert np.asarray(_posterize_allow_zero(img, 0)).max() == 0
    assert np.asarray(_posterize_allow_zero(img, 4)).max() == 192  # 200 & 0xF0
    ra = next(t for t in tf.transforms if type(t).__name__ == "RandAugment")
    post = next(op for op in ra.ops if op.name == "PosterizeIncreasing")
    post.magnitude, post.magnitude_std, post.prob = 10, 0, 1.0  # the level that asks for 0 bits
    assert np.asarray(post(img)).max() == 0


def test_digits_imagefolder(tmp_path):
    root = write_digits_imagefolder(tmp_path / "digits", size=16)
    n_train = sum(1 for _ in (root / "train").rglob("*.png"))
    n_val = sum(1 for _ in (root / "val").rglob("*.png"))
    assert n_train + n_val == 1797 and 340 <= n_val <= 380
    assert sorted(p.name for p in (root / "val").iterdir()) == [str(i) for i in range(10)]
    assert Image.open(next((root / "train" / "3").iterdir())).size == (16, 16)
    write_digits_imagefolder(root, size=16)  # second call: complete marker, no rewrite


def test_deit_schedule_is_per_epoch_warmup_then_cosine():
    """DeiT/timm step the lr once per epoch: warmup from warmup_init_lr, then cosine to min_lr."""
    from tasks.common.module import make_lr_lambda
    cfg = dict(name="cosine", warmup_steps=10, warmup_init_lr=1e-6, min_lr=1e-5)
    lr = lambda e: 1e-3 * make_lr_lambda(cfg, 100, 1e-3)(e)  # noqa: E731
    assert lr(0) == pytest.approx(1e-6) and lr(10) == pytest.approx(1e-3)
    assert lr(5) == pytest.approx(1e-6 + (1e-3 - 1e-6) / 2)
    assert lr(55) == pytest.approx((1e-3 + 1e-5) / 2) and lr(100) == pytest.approx(1e-5)
