"""ImageNet-1k (or digits for smoke runs) as a LightningDataModule with DeiT's data recipe.

Sources (`source=`):
  imagefolder  root/train/<class>/*.JPEG and root/val/<class>/*.JPEG (torchvision ImageFolder)
  hf           a Hugging Face `datasets` dataset (hf_name, e.g. "ILSVRC/imagenet-1k"), columns
               image/label; needs the dataset in the local HF cache or network access
  digits       scikit-learn digits written as an ImageFolder under root (no download)
Train transform (timm create_transform, DeiT): RandomResizedCrop(bicubic), hflip 0.5,
RandAugment rand-m9-mstd0.5-inc1, random erasing 0.25 (pixel mode), ImageNet mean/std.
Eval: resize to img_size/crop_pct (bicubic), centre crop. Repeated augmentation (3 repeats,
timm RepeatAugSampler, as DeiT) on the train split. Mixup/cutmix live in the objective.
"""
from __future__ import annotations

import os
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from tasks.common.errors import ConfigError

from .digits import write_digits_imagefolder


SOURCES = ("imagefolder", "hf", "digits")
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def check_imagefolder(root: str | os.PathLike) -> Path:
    """Raise ConfigError unless root/train and root/val are non-empty class folders."""
    root = Path(root).expanduser()
    for split in ("train", "val"):
        d = root / split
        if not d.is_dir() or not any(p.is_dir() for p in d.iterdir()):
            raise ConfigError(
                f"ImageNet directory {d} is missing or has no class folders: put ImageNet-1k in "
                f"ImageFolder layout at {root}/{{train,val}}/<class>/*.JPEG and pass "
                "task.datamodule.root=PATH (or data.root / IMAGENET_DIR for make), or use "
                "source=hf / the digits smoke profile")
    return root


def build_transforms(img_size: int, is_training: bool, aug: dict | None = None):
    """timm create_transform with DeiT's settings; `aug` overrides any of them."""
    from timm.data import create_transform
    a = dict(auto_augment="rand-m9-mstd0.5-inc1", color_jitter=0.3, interpolation="bicubic",
             re_prob=0.25, re_mode="pixel", re_count=1, hflip=0.5, scale=(0.08, 1.0),
             crop_pct=0.875, mean=IMAGENET_MEAN, std=IMAGENET_STD)
    a.update(aug or {})
    common = dict(interpolation=a["interpolation"], mean=tuple(a["mean"]), std=tuple(a["std"]))
    if not is_training:
        return create_transform(img_size, is_training=False, crop_pct=a["crop_pct"], **common)
    tf = create_transform(img_size, is_training=True, auto_augment=a["auto_augment"],
                          color_jitter=a["color_jitter"], re_prob=a["re_prob"],
                          re_mode=a["re_mode"], re_count=a["re_count"], hflip=a["hflip"],
                          scale=tuple(a["scale"]), **common)
    _patch_zero_bit_posterize(tf)
    return tf


def _posterize_allow_zero(img, bits_to_keep, **kw):
    """timm's posterize, but keeping 0 bits gives a black image (as Pillow < 13 did)."""
    from timm.data.auto_augment import posterize
    if bits_to_keep <= 0:
        return img.point(lambda _: 0)
    return posterize(img, bits_to_keep, **kw)


def _patch_zero_bit_posterize(transform) -> int:
    """Pillow 13 rejects ImageOps.posterize(img, 0); DeiT's RandAugment (rand-m9-mstd0.5-inc1)
    asks for 0 bits whenever the sampled magnitude reaches 10 (~2% of PosterizeIncreasing
    calls) and would crash a run. Swap in the old semantics; returns how many ops it patched."""
    from timm.data.auto_augment import RandAugment, posterize
    n = 0
    for t in getattr(transform, "transforms", []):
        if isinstance(t, RandAugment):
            for op in t.ops:
                if op.aug_fn is posterize:
                    op.aug_fn, n = _posterize_allow_zero, n + 1
    return n


class HFImageDataset(Dataset):
    """A `datasets` split with an image column and an integer label column."""

    def __init__(self, split, transform, image_key="image", label_key="label"):
        self.split, self.transform = split, transform
        self.image_key, self.label_key = image_key, label_key

    def __len__(self):
        return len(self.split)

    def __getitem__(self, i):
        row = self.split[i]
        return self.transform(row[self.image_key].convert("RGB")), int(row[self.label_key])


class VisionDataModule(L.LightningDataModule):
    """Batches of (images [B, 3, S, S] float, labels [B] long)."""

    def __init__(self, source: str = "imagefolder", root: str = "data/imagenet",
                 hf_name: str | None = None, hf_splits: tuple = ("train", "validation"),
                 num_classes: int = 1000, img_size: int = 224, batch_size: int = 128,
                 eval_batch_size: int | None = None, num_workers: int = 8,
                 repeated_aug: bool = True, num_repeats: int = 3, aug: dict | None = None,
                 digits_size: int = 32, seed: int = 0):
        super().__init__()
        if source not in SOURCES:
            raise ValueError(f"source={source!r}: choose one of {SOURCES}")
        self.source, self.root, self.hf_name, self.hf_splits = source, root, hf_name, hf_splits
        self.num_classes, self.img_size = num_classes, img_size
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.num_workers, self.repeated_aug, self.num_repeats = num_workers, repeated_aug, num_repeats
        self.aug, self.digits_size, self.seed = dict(aug or {}), digits_size, seed
        self.train_set = self.val_set = None

    def example_batch(self, batch_size: int, device="cpu"):
        """Random (images, labels) of a training batch's shape, no data read (the training
        benchmark, the dry-run)."""
        S = int(self.img_size)
        return (torch.randn(batch_size, 3, S, S, device=device),
                torch.randint(0, int(self.num_classes), (batch_size,), device=device))

    def check(self) -> None:
        """Called before training: a one-line error when the data is not there."""
        if self.source == "imagefolder":
            check_imagefolder(self.root)
        elif self.source == "hf" and not self.hf_name:
            raise ConfigError("source=hf needs hf_name (e.g. ILSVRC/imagenet-1k)")

    def prepare_data(self) -> None:
        if self.source == "digits":
            write_digits_imagefolder(self.root, self.digits_size, self.seed)

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        train_tf = build_transforms(self.img_size, True, self.aug)
        eval_tf = build_transforms(self.img_size, False, self.aug)
        if self.source == "hf":
            import datasets
            ds = datasets.load_dataset(self.hf_name)
            self.train_set = HFImageDataset(ds[self.hf_splits[0]], train_tf)
            self.val_set = HFImageDataset(ds[self.hf_splits[1]], eval_tf)
        else:
            from torchvision.datasets import ImageFolder
            if self.source == "digits":
                write_digits_imagefolder(self.root, self.digits_size, self.seed)
            root = check_imagefolder(self.root)
            self.train_set = ImageFolder(str(root / "train"), transform=train_tf)
            self.val_set = ImageFolder(str(root / "val"), transform=eval_tf)
            if len(self.train_set.classes) != self.num_classes:
                raise ConfigError(
                    f"{root}/train has {len(self.train_set.classes)} classes but num_classes="
                    f"{self.num_classes}: fix the folder or set num_classes")

    def _rank(self):
        trainer = getattr(self, "trainer", None)
        return (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)

    def train_dataloader(self):
        if self.repeated_aug:
            # DeiT: each image appears num_repeats times per epoch under different augmentations
            # (spread over ranks); the epoch keeps len(dataset) samples (rounded to 256)
            from timm.data.distributed_sampler import RepeatAugSampler
            world, rank = self._rank()
            sampler = RepeatAugSampler(self.train_set, num_replicas=world, rank=rank,
                                       num_repeats=self.num_repeats)
            return DataLoader(self.train_set, self.batch_size, sampler=sampler, drop_last=True,
                              **self._loader_kw())
        # drop_last: batch mixup needs an even batch, and a ragged last batch skews it
        return DataLoader(self.train_set, self.batch_size, shuffle=True, drop_last=True,
                          **self._loader_kw())

    def val_dataloader(self):
        return DataLoader(self.val_set, self.eval_batch_size, shuffle=False, **self._loader_kw())

    def test_dataloader(self):
        return self.val_dataloader()  # ImageNet's labelled test set is its val set

    def _loader_kw(self):
        return dict(num_workers=self.num_workers, pin_memory=torch.cuda.is_available(),
                    persistent_workers=self.num_workers > 0)
