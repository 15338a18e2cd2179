"""Framework plug-in (tasks/INTERFACE.md §2): the datamodule and the objective of Table 4."""
from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
import torchmetrics
from torch.utils.data import DataLoader

from tasks.common.errors import ConfigError
from tasks.common.objective import Objective, StepOutput

from .data import DATASETS, ensure_file, load_forecast_data
from .models import resolve_lookback, training_loss


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


class ForecastObjective(Objective):
    """Train: the model's own loss (decoder: forecast + next-segment MSE; baselines: MSE).
    Val/test: MSE and MAE over every (window, step, channel) on the scaled data."""

    def metrics(self):
        return {"mse": torchmetrics.MeanSquaredError(), "mae": torchmetrics.MeanAbsoluteError()}

    def step(self, model, batch, stage):
        x, y = batch  # [B, L, C], [B, H, C]
        if stage == "train":
            loss, forecast = training_loss(model, x, y)
        else:
            forecast = model(x)  # [B, H, C]
            loss = torch.nn.functional.mse_loss(forecast, y)
        return StepOutput(loss, forecast.detach().flatten(), y.flatten())
