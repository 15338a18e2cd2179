"""Long-horizon forecasting data (Table 4): files, conventional splits, scaling, windows.

Facts of the benchmark (Informer/Autoformer convention, used by the authors' code):
- ETTh1/ETTh2: hourly; train/val/test = 12/4/4 months = 8640/2880/2880 rows (the rest of the
  file is never used). ETTm1/ETTm2: the same months at 15-minute rows (x4).
- weather.csv / solar_AL.txt: 70/10/20 of all rows (train = int(0.7 n), test = int(0.2 n),
  val = the rest).
- Validation and test segments start one lookback before their first target row, so the first
  forecast of each split starts exactly at the split boundary.
- A StandardScaler is fitted on the training rows only and applied to every split; every
  metric is computed on these scaled values.
"""
from __future__ import annotations

import gzip
import hashlib
import http.client
import shutil
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import numpy as np
import pandas as pd
import torch
import yaml
from torch.utils.data import DataLoader, Dataset

from tasks.common.errors import ConfigError
from tasks.common.store import CONF

SPLITS = ("train", "val", "test")
ETT_RAW = "https://raw.githubusercontent.com/zhouhaoyi/ETDataset/main/ETT-small/"
LAI_RAW = "https://raw.githubusercontent.com/laiguokun/multivariate-time-series-data/master/"


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    filename: str  # the conventional file name looked up in the data directory
    kind: str  # "ett_hour" | "ett_minute" | "ratio"
    n_channels: int
    url: str | None  # public source (None: no stable direct URL)
    git_blob_sha1: str | None  # checksum of the downloaded object (git blob id in its source repo)
    gzipped: bool = False  # the source serves filename + ".gz"
    header: bool = True  # solar_AL.txt has no header row and no date column
    where: str = ""  # where a person gets the file by hand


# Checksums are the git blob ids of the files in their public repositories (verified here
# against the real ETTh1/ETTh2: `git hash-object ETTh1.csv` == the id below).
DATASETS = {
    "ETTh1": DatasetSpec("ETTh1", "ETTh1.csv", "ett_hour", 7, ETT_RAW + "ETTh1.csv",
                         "a52c4925778c07c1ef1a2cf6fd01594919717d9e",
                         where="github.com/zhouhaoyi/ETDataset (ETT-small/)"),
    "ETTh2": DatasetSpec("ETTh2", "ETTh2.csv", "ett_hour", 7, ETT_RAW + "ETTh2.csv",
                         "6e3760778598fdee5208213d3fce122637307eec",
                         where="github.com/zhouhaoyi/ETDataset (ETT-small/)"),
    "ETTm1": DatasetSpec("ETTm1", "ETTm1.csv", "ett_minute", 7, ETT_RAW + "ETTm1.csv",
                         "62c9f979e2dc5b05d9cc5b38891e60e6baf77417",
                         where="github.com/zhouhaoyi/ETDataset (ETT-small/)"),
    "ETTm2": DatasetSpec("ETTm2", "ETTm2.csv", "ett_minute", 7, ETT_RAW + "ETTm2.csv",
                         "f9d46027c987d442d2d8f81308d1d8c4d1d35db8",
                         where="github.com/zhouhaoyi/ETDataset (ETT-small/)"),
    "weather": DatasetSpec("weather", "weather.csv", "ratio", 21, None, None,
                           where="the Autoformer dataset bundle (github.com/thuml/Autoformer, "
                                 "'all_six_datasets' -> weather/weather.csv)"),
    "solar_AL": DatasetSpec("solar_AL", "solar_AL.txt", "ratio", 137,
                            LAI_RAW + "solar-energy/solar_AL.txt.gz",
                            "08a1f235546b3708309ff4fb544a54bb82e4f5e7", gzipped=True,
                            header=False,
                            where="github.com/laiguokun/multivariate-time-series-data "
                                  "(solar-energy/solar_AL.txt.gz, gunzip it)"),
}


def git_blob_sha1(data: bytes) -> str:
    """The id git gives a file's contents: sha1(b"blob <size>\\0" + data)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _download_verified(spec: DatasetSpec, dest: Path) -> None:
    """Fetch spec.url, verify its checksum, write dest (gunzipping when needed)."""
    with urllib.request.urlopen(spec.url, timeout=60) as resp:  # noqa: S310 (fixed https URL)
        payload = resp.read()
    got = git_blob_sha1(payload)
    if got != spec.git_blob_sha1:
        raise RuntimeError(f"checksum mismatch for {spec.url}: git blob sha1 {got}, expected "
                           f"{spec.git_blob_sha1}; refusing to use it")
    if spec.gzipped:
        payload = gzip.decompress(payload)
    tmp = dest.with_suffix(dest.suffix + ".part")
    tmp.write_bytes(payload)
    shutil.move(tmp, dest)


def ensure_file(name: str, data_dir: str | Path, *, download: bool = True) -> Path:
    """Path of the dataset file in data_dir; downloads (checksum-verified) when absent.

    Never substitutes another file: a missing file either downloads from its one public source
    or raises ConfigError with one line naming the file and where to put it.
    """
    if name not in DATASETS:
        raise KeyError(f"unknown dataset {name!r}; known: {sorted(DATASETS)}")
    spec = DATASETS[name]
    data_dir = Path(data_dir)
    path = data_dir / spec.filename
    if path.is_file():
        return path
    reason = "no public direct URL is known for it"
    if download and spec.url is not None:
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
            _download_verified(spec, path)
            return path
        except (OSError, ValueError, http.client.HTTPException) as err:  # offline, DNS, HTTP
            reason = f"download from {spec.url} failed ({type(err).__name__})"
    elif not download:
        reason = "downloads are disabled"
    raise ConfigError(f"{spec.filename} not found: put it at {path} (source: {spec.where}; "
                           f"{reason})")


def read_values(path: Path, spec: DatasetSpec) -> np.ndarray:
    """All rows of the file as float32 [n_rows, C] (the date column dropped)."""
    if spec.header:
        frame = pd.read_csv(path)
        if "date" in frame.columns:
            frame = frame.drop(columns=["date"])
    else:
        frame = pd.read_csv(path, header=None)
    values = frame.to_numpy(dtype=np.float32)  # [n, C]
    if values.shape[1] != spec.n_channels:
        raise ValueError(f"{path} has {values.shape[1]} channels, {spec.name} has "
                         f"{spec.n_channels}: is it the right file?")
    return values


def split_borders(kind: str, n_rows: int, lookback: int) -> dict[str, tuple[int, int]]:
    """[start, end) rows of each split's segment; val/test start one lookback early."""
    if kind in ("ett_hour", "ett_minute"):
        per_month = 30 * 24 * (4 if kind == "ett_minute" else 1)
        n_train, n_val, n_test = 12 * per_month, 4 * per_month, 4 * per_month
        if n_rows < n_train + n_val + n_test:
            raise ValueError(f"an ETT file needs {n_train + n_val + n_test} rows, got {n_rows}")
    elif kind == "ratio":
        n_train, n_test = int(n_rows * 0.7), int(n_rows * 0.2)
        n_val = n_rows - n_train - n_test
    else:
        raise ValueError(f"unknown split kind {kind!r}")
    if lookback > n_train:
        raise ValueError(f"lookback {lookback} is longer than the training split ({n_train})")
    return {"train": (0, n_train),
            "val": (n_train - lookback, n_train + n_val),
            "test": (n_train + n_val - lookback, n_train + n_val + n_test)}


class StandardScaler:
    """Per-channel mean/std fitted on the training rows only (population std, as sklearn)."""

    def fit(self, train_rows: np.ndarray) -> "StandardScaler":
        # float64 sums: a float32 mean over tens of thousands of rows is off in the 4th digit
        self.mean = train_rows.mean(axis=0, dtype=np.float64)  # [C]
        self.std = train_rows.std(axis=0, dtype=np.float64)  # [C]
        self.std = np.where(self.std == 0, 1.0, self.std)  # a constant channel stays finite
        return self

    def transform(self, rows: np.ndarray) -> np.ndarray:
        return ((rows - self.mean) / self.std).astype(np.float32)

    def inverse_transform(self, rows: np.ndarray) -> np.ndarray:
        return rows * self.std + self.mean


class ForecastWindows(Dataset):
    """Sliding windows over one split's segment: x = rows [i, i+L), y = rows [i+L, i+L+H)."""

    def __init__(self, segment: np.ndarray, lookback: int, horizon: int):
        self.data = torch.from_numpy(np.ascontiguousarray(segment))  # [n, C]
        self.lookback, self.horizon = lookback, horizon
        self.n = len(segment) - lookback - horizon + 1
        if self.n < 1:
            raise ValueError(f"a segment of {len(segment)} rows holds no window of lookback "
                             f"{lookback} + horizon {horizon}")

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.data[i:i + self.lookback]  # [L, C]
        y = self.data[i + self.lookback:i + self.lookback + self.horizon]  # [H, C]
        return x, y


@dataclass
class ForecastData:
    name: str
    n_channels: int
    scaler: StandardScaler
    splits: dict  # split -> ForecastWindows
    borders: dict  # split -> (start, end)


def load_forecast_data(name: str, data_dir: str | Path, lookback: int, horizon: int, *,
                       download: bool = True) -> ForecastData:
    spec = DATASETS[name]
    values = read_values(ensure_file(name, data_dir, download=download), spec)  # [n, C]
    borders = split_borders(spec.kind, len(values), lookback)
    scaler = StandardScaler().fit(values[slice(*borders["train"])])
    scaled = scaler.transform(values)
    splits = {s: ForecastWindows(scaled[slice(*borders[s])], lookback, horizon) for s in SPLITS}
    return ForecastData(name, spec.n_channels, scaler, splits, borders)


def protocol_lookbacks() -> dict[int, int]:
    """The protocol's lookback per horizon: conf/task/timeseries.yaml `protocol_lookbacks`
    (its one place; docs/protocols.md, "Time series")."""
    path = CONF / "task" / "timeseries.yaml"
    table = yaml.safe_load(path.read_text())["protocol_lookbacks"]
    return {int(h): int(lb) for h, lb in table.items()}


def resolve_lookback(horizon: int, lookback) -> int:
    """`lookback` = an int, or "protocol"/None for the protocol's value for this horizon."""
    if lookback in (None, "protocol"):
        table = protocol_lookbacks()
        if horizon not in table:
            raise ValueError(f"no protocol lookback for horizon {horizon}: use one of "
                             f"{sorted(table)} or set task.lookback to an int")
        return table[horizon]
    return int(lookback)


# ---- the framework's datamodule (conf/task/timeseries.yaml) ----
class ForecastDataModule(L.LightningDataModule):
    def __init__(self, dataset: str, horizon: int, lookback="protocol", data_dir=None,
                 batch_size: int = 32, eval_batch_size: int = 256, download: bool = True,
                 num_workers: int = 0):
        super().__init__()
        self.dataset, self.horizon = dataset, int(horizon)
        self.lookback = resolve_lookback(self.horizon, lookback)
        self.data_dir, self.download = data_dir, download
        self.batch_size, self.eval_batch_size, self.num_workers = batch_size, eval_batch_size, num_workers
        self.data = None

    def check(self) -> None:
        if self.dataset not in DATASETS:
            raise ConfigError(f"unknown dataset {self.dataset!r}: set task.dataset to one of "
                              f"{', '.join(sorted(DATASETS))}")
        if self.data_dir is None:
            raise ConfigError(f"task.datamodule.data_dir is not set: pass the folder holding "
                              f"{DATASETS[self.dataset].filename} (make ... DATA_DIR=/path)")
        ensure_file(self.dataset, Path(self.data_dir), download=self.download)

    def example_batch(self, batch_size: int, device="cpu"):
        """Random (x [B, lookback, C], y [B, horizon, C]) of a training batch's shape, no data
        read (the training benchmark, the dry-run)."""
        C = DATASETS[self.dataset].n_channels
        return (torch.randn(batch_size, self.lookback, C, device=device),
                torch.randn(batch_size, self.horizon, C, device=device))

    def setup(self, stage=None):
        if self.data is None:
            self.data = load_forecast_data(self.dataset, self.data_dir, self.lookback,
                                           self.horizon, download=self.download)

    def train_dataloader(self):
        return DataLoader(self.data.splits["train"], batch_size=self.batch_size, shuffle=True,
                          drop_last=True, num_workers=self.num_workers)

    def val_dataloader(self):
        return DataLoader(self.data.splits["val"], batch_size=self.eval_batch_size,
                          num_workers=self.num_workers)

    def test_dataloader(self):
        return DataLoader(self.data.splits["test"], batch_size=self.eval_batch_size,
                          num_workers=self.num_workers)
