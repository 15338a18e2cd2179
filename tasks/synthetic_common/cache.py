"""On-disk cache of generated synthetic data, keyed by a hash of (generator, config, seed, split).

Generators are pure functions of (config, seed); generating the 66 MAD settings, 100k MQAR
sequences or 40k automata takes seconds to minutes, so each result is stored once as an .npz
under `cache_dir()` and every later run (and every lr x wd grid point) streams from that file.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch.utils.data import Dataset

from tasks.common.store import ROOT

# bump when a generator's output changes for the same config, so stale caches are never reused
CACHE_FORMAT_VERSION = 1


def cache_dir() -> Path:
    """`$ZEROS_SYNTH_CACHE` or <repo>/cache/synthetic (git-ignored)."""
    env = os.environ.get("ZEROS_SYNTH_CACHE")
    if env:
        return Path(env)
    return ROOT / "cache" / "synthetic"


def config_hash(name: str, config: dict, seed: int, split: str) -> str:
    """Stable 16-hex-digit key of everything that determines the generated arrays."""
    payload = json.dumps({"name": name, "config": config, "seed": int(seed), "split": split,
                          "v": CACHE_FORMAT_VERSION}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def split_seed(seed: int, split: str) -> int:
    """Independent integer seed per split, so train and test never share a random stream."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{split}".encode()).digest()[:4], "little")


def cached_arrays(name: str, config: dict, seed: int, split: str,
                  generate: Callable[[], dict[str, np.ndarray]], directory: Path | None = None
                  ) -> dict[str, np.ndarray]:
    """Load the arrays for (name, config, seed, split) from the cache, generating them once.

    `generate()` must return a dict of numpy arrays; it is only called on a cache miss. Files are
    written atomically (temp file + rename) so two processes sharing the cache never read half a file.
    """
    directory = Path(directory) if directory is not None else cache_dir()
    path = directory / name / f"{split}-{config_hash(name, config, seed, split)}.npz"
    if path.exists():
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    arrays = generate()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp.npz")
    os.close(fd)
    try:
        np.savez(tmp, **arrays)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    (path.parent / f"{path.stem}.json").write_text(
        json.dumps({"config": config, "seed": seed, "split": split}, sort_keys=True, default=str))
    return arrays



class ArrayDataset(Dataset):
    """Rows of cached {"inputs", "targets"} integer arrays as {"input", "target"} int64 tensors
    (MAD and MQAR stream their cached splits through it)."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.x, self.y = arrays["inputs"], arrays["targets"]

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input": torch.from_numpy(self.x[i].astype(np.int64)),
                "target": torch.from_numpy(self.y[i].astype(np.int64))}
