"""scikit-learn's digits (1,797 8x8 grey images, 10 classes; packaged, no download) written as an
ImageFolder (train/, val/) of upsampled RGB PNGs, so the smoke profile runs the exact ImageNet
code path: ImageFolder -> timm transforms -> mixup/cutmix -> ViT."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

VAL_FRACTION = 0.2


def _split(labels: np.ndarray, seed: int) -> np.ndarray:
    """Stratified boolean mask of the validation images (VAL_FRACTION of each class)."""
    rng = np.random.default_rng(seed)
    is_val = np.zeros(len(labels), dtype=bool)
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        is_val[idx[: round(VAL_FRACTION * len(idx))]] = True
    return is_val


def write_digits_imagefolder(root: str | os.PathLike, size: int = 32, seed: int = 0) -> Path:
    """Write root/{train,val}/<digit>/<index>.png once (a marker file says it is complete)."""
    from PIL import Image
    from sklearn.datasets import load_digits

    root = Path(root)
    done = root / ".complete"
    if done.exists():
        return root
    if root.exists():  # an interrupted earlier write: start again
        shutil.rmtree(root)
    digits = load_digits()
    images = (digits.images / 16.0 * 255.0).round().astype(np.uint8)  # [N, 8, 8] in 0..255
    is_val = _split(digits.target, seed)
    for i, (img, label) in enumerate(zip(images, digits.target)):
        split = "val" if is_val[i] else "train"
        folder = root / split / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        # bicubic upsampling keeps strokes smooth; RGB so the 3-channel ImageNet pipeline applies
        Image.fromarray(img, mode="L").resize((size, size), Image.BICUBIC).convert("RGB").save(
            folder / f"{i:04d}.png")
    done.touch()
    return root
