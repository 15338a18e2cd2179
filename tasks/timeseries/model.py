"""Table 4 model builders. Every model maps x [B, L, C] -> [B, H, C] on the scaled data.

`build_forecaster(mixer=MixerSpec, model=..., dataset=..., horizon=..., lookback=...)` is the
backbone builder the framework calls (conf/backbone/timeseries_*.yaml):
- model="decoder": the authors' decoder-only forecaster with `mixer` in the attention slot
  (the ZeroS / Transformer / LinAttn / GLA rows);
- model="dlinear" | "patchtst" | "itransformer": the domain baselines (`mixer` is unused).
"""
from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F

from .baselines import DLinear, ITransformer, PatchTST
from .data import DATASETS, resolve_lookback
from .decoder import DecoderForecaster

BASELINES = {"dlinear": DLinear, "patchtst": PatchTST, "itransformer": ITransformer}
MODELS = ("decoder", *BASELINES)


def _mixer_factory(mixer, mixer_kwargs=None):
    """MixerSpec (+ the row's kwargs) -> (d_model=, n_heads=, dropout=) -> causal mixer module."""
    def make(d_model, n_heads, dropout):
        # backend stays "auto": it picks the short-T quadratic path on CPU (a channel's token
        # sequence is <= 43 segments) and the Triton kernels on CUDA (zeros/ops/select.py)
        return mixer(d_model, n_heads, causal=True, dropout=dropout, **(mixer_kwargs or {}))
    return make


def build_forecaster(mixer=None, *, model: str = "decoder", dataset: str, horizon: int,
                     lookback="protocol", row: str | None = None, mixer_factory=None,
                     mixer_kwargs: dict | None = None, **options) -> nn.Module:
    """`row` is the table row label carried by the backbone config (unused here).
    `mixer_kwargs`: the row's own mixer options (e.g. the Transformer row's rope=False).
    `mixer_factory` overrides `mixer` with a plain (d_model=, n_heads=, dropout=) callable."""
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}: use one of {sorted(DATASETS)}")
    n_channels = DATASETS[dataset].n_channels
    lookback = resolve_lookback(horizon, lookback)
    if model in BASELINES:
        return BASELINES[model](lookback, horizon, n_channels, **options)
    if model != "decoder":
        raise ValueError(f"unknown model {model!r}: use one of {MODELS}")
    if mixer_factory is None:
        if mixer is None:
            raise ValueError("model='decoder' needs a mixer (MixerSpec) or a mixer_factory")
        mixer_factory = _mixer_factory(mixer, mixer_kwargs)
    return DecoderForecaster(lookback, horizon, n_channels, mixer_factory, **options)


def training_loss(model: nn.Module, x, y):
    """(loss, forecast): the decoder's own loss (forecast + next-segment MSE), else plain MSE.
    The decoder's loss is its forward(x, y), called through the model so that a compiled model
    (compiled in place by the `compile` key, or wrapped by torch.compile: `_orig_mod`) runs it
    compiled."""
    if isinstance(getattr(model, "_orig_mod", model), DecoderForecaster):
        return model(x, y)
    forecast = model(x)
    return F.mse_loss(forecast, y), forecast
