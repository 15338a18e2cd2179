"""Table 4's objective (conf/task/timeseries.yaml): the model's own training loss; MSE/MAE."""
from __future__ import annotations

import torch
import torchmetrics

from tasks.common.objective import Objective, StepOutput

from .model import training_loss


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
