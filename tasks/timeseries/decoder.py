"""The decoder-only, channel-independent forecaster of the authors' time-series setup (Table 4).

Each channel is its own sequence. Its lookback window is normalised (minus the mean of the last
segment, divided by the window's std), left-padded with zeros to a whole number of segments of
length = horizon, and cut into non-overlapping segments. A linear tokenizer maps each segment to
a token; a causal pre-norm Transformer (any mixer in the attention slot) runs over the tokens;
a linear de-tokenizer maps every position back to a segment, read as the forecast of the NEXT
segment. The last position's output is the forecast. Training loss (see `loss`):
forecast MSE + next-segment MSE at every earlier position.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

MixerFactory = Callable[..., nn.Module]  # (d_model=, n_heads=, dropout=) -> [B,T,D] -> [B,T,D]


def default_d_model(n_channels: int) -> int:
    """d_model = 16·⌊√C⌋ (ETT 32, Weather 64, Solar 176)."""
    return 16 * math.isqrt(n_channels)


class FeedForward(nn.Module):
    def __init__(self, d_model: int, expansion: int, dropout: float):
        super().__init__()
        self.up = nn.Linear(d_model, expansion * d_model)
        self.down = nn.Linear(expansion * d_model, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.drop(self.down(F.gelu(self.up(x))))


class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, dropout, mlp_ratio, mixer_factory: MixerFactory):
        super().__init__()
        self.norm_mix = nn.RMSNorm(d_model)
        self.mixer = mixer_factory(d_model=d_model, n_heads=n_heads, dropout=dropout)
        self.norm_mlp = nn.RMSNorm(d_model)
        self.mlp = FeedForward(d_model, mlp_ratio, dropout)

    def forward(self, x):  # [B, N, D]
        x = x + self.mixer(self.norm_mix(x))
        return x + self.mlp(self.norm_mlp(x))


class DecoderForecaster(nn.Module):
    def __init__(self, lookback: int, horizon: int, n_channels: int,
                 mixer_factory: MixerFactory, *, d_model: int | None = None, n_layers: int = 3,
                 n_heads: int = 8, mlp_ratio: int = 4, dropout: float = 0.1):
        super().__init__()
        self.lookback, self.horizon, self.n_channels = lookback, horizon, n_channels
        self.n_segments = -(-lookback // horizon)  # ceil: the window is left-padded
        self.pad = self.n_segments * horizon - lookback
        d_model = d_model or default_d_model(n_channels)
        self.tokenizer = nn.Linear(horizon, d_model)
        self.pos_emb = nn.Parameter(0.02 * torch.randn(self.n_segments, d_model))
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(DecoderBlock(d_model, n_heads, dropout, mlp_ratio,
                                                 mixer_factory) for _ in range(n_layers))
        self.final_norm = nn.RMSNorm(d_model)
        self.detokenizer = nn.Linear(d_model, horizon)

    def _segments(self, x):
        """x [B, L, C] -> normalised segments [B*C, N, H] and the (mean, std) [B*C, 1, 1]."""
        B, L, C = x.shape
        series = x.permute(0, 2, 1).reshape(B * C, L)  # [B*C, L]
        mean = series[:, -self.horizon:].mean(dim=1, keepdim=True)  # [B*C, 1] last segment
        std = series.std(dim=1, keepdim=True) + 1e-5  # [B*C, 1] whole input window
        series = F.pad((series - mean) / std, (self.pad, 0))  # [B*C, N*H] zeros on the left
        return series.view(B * C, self.n_segments, self.horizon), mean[..., None], std[..., None]

    def _next_segments(self, segments):
        h = self.drop(self.tokenizer(segments) + self.pos_emb)  # [B*C, N, D]
        for block in self.blocks:
            h = block(h)
        return self.detokenizer(self.final_norm(h))  # [B*C, N, H] position n -> segment n+1

    def forward(self, x):
        """x [B, L, C] (scaled) -> forecast [B, H, C] (scaled)."""
        return self.forecast_and_aux(x)[0]

    def forecast_and_aux(self, x):
        B, L, C = x.shape
        if L != self.lookback or C != self.n_channels:
            raise ValueError(f"expected input [B, {self.lookback}, {self.n_channels}], got "
                             f"{tuple(x.shape)}")
        segments, mean, std = self._segments(x)
        out = self._next_segments(segments)  # [B*C, N, H]
        forecast = out[:, -1:] * std + mean  # [B*C, 1, H] back to the scaled data
        forecast = forecast.view(B, C, self.horizon).permute(0, 2, 1)  # [B, H, C]
        # next-segment error inside the window (normalised units), positions 0..N-2
        aux = F.mse_loss(out[:, :-1], segments[:, 1:]) if self.n_segments > 1 else x.new_zeros(())
        return forecast, aux

    def loss(self, x, y):
        """forecast MSE + next-segment MSE at every earlier position (the authors' loss)."""
        forecast, aux = self.forecast_and_aux(x)
        return F.mse_loss(forecast, y) + aux, forecast
