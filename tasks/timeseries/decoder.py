"""The decoder-only, channel-independent forecaster of the authors' time-series setup (Table 4).

Each channel is its own sequence. Its lookback window is normalised (minus the mean of the last
segment, divided by the window's std), left-padded with zeros to a whole number of segments of
length = horizon, and cut into non-overlapping segments. A linear tokenizer maps each segment to
a token; a causal pre-norm Transformer (any mixer in the attention slot) runs over the tokens;
a linear de-tokenizer maps every position back to a segment, read as the forecast of the NEXT
segment. The last position's output is the forecast. Training loss (see `loss`):
forecast MSE + next-segment MSE at every earlier position.

As the authors' `models/Autoregressive.py` (LJC-FVNR/ARMA-Attention @ f22adb9, `Model`,
lines 625-696; docs/timeseries.md "Models"): a learned per-channel,
per-position embedding added to the position embedding, `dropout(tokens) + pos + channel`, an
RMSNorm on the input of the blocks and one after them (every RMSNorm with eps 1e-5), and GPT-2
initialisation of every Linear (the residual-writing projections scaled by 1/sqrt(2 layers)).
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

MixerFactory = Callable[..., nn.Module]  # (d_model=, n_heads=, dropout=) -> [B,T,D] -> [B,T,D]


NORM_EPS = 1e-5  # the authors' RMSNorm: rsqrt(mean(x^2) + 1e-5) (Autoregressive.py:19-20)
STD_EPS = 1e-6   # window std + 1e-6 (Autoregressive.py:662)
INIT_STD = 0.02  # GPT-2 / nanoGPT: every Linear N(0, 0.02), zero biases (Autoregressive.py:648-654)
# the Linears that write into the residual stream (the authors' `c_proj`s: attention output and
# MLP down-projection, Autoregressive.py:644-646) get 0.02 / sqrt(2 * layers)
RESIDUAL_PROJ = ("mixer.out.weight", "mlp.down.weight")
INITS = ("gpt2", "torch")  # torch: PyTorch's defaults (the suite's model before issue 31)


def default_d_model(n_channels: int, arx: bool = False) -> int:
    """d_model = 16·⌊√C⌋ (ETT 32, Weather 64, Solar 176); the ARX variant 32·⌊√C⌋ (ETT 64)."""
    return (32 if arx else 16) * math.isqrt(n_channels)


class ContextTokens(nn.Module):
    """The ARX variant's tokens (SAMoVAR, LJC-FVNR/Structural-Aligned-Mixture-of-VAR @ 4e2581f
    models/Autoregressive.py:115-160, 171-240): beside each channel's segment token, a context
    token made from ALL channels' segments at that position (a Linear across channels, then a
    Linear segment -> d); each kind RMS-normed, interleaved [ctx_0, own_0, ctx_1, own_1, ...]."""

    def __init__(self, n_channels: int, horizon: int, d_model: int):
        super().__init__()
        self.across = nn.Linear(n_channels, n_channels)
        self.temporal = nn.Linear(horizon, d_model)
        self.norm_ctx = nn.RMSNorm(d_model, eps=NORM_EPS)
        self.norm_own = nn.RMSNorm(d_model, eps=NORM_EPS)

    def forward(self, own, segments):
        """own tokens [B*C, N, D], segments [B*C, N, H] -> [B*C, 2N, D]."""
        C = self.across.in_features
        BC, N, H = segments.shape
        seg = segments.view(BC // C, C, N, H).permute(0, 2, 3, 1)  # [B, N, H, C]
        ctx = self.temporal(self.across(seg).permute(0, 3, 1, 2))  # [B, C, N, D]
        pair = torch.stack([self.norm_ctx(ctx.reshape(BC, N, -1)), self.norm_own(own)], dim=2)
        return pair.view(BC, 2 * N, own.shape[-1])


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
        self.norm_mix = nn.RMSNorm(d_model, eps=NORM_EPS)
        self.mixer = mixer_factory(d_model=d_model, n_heads=n_heads, dropout=dropout)
        self.norm_mlp = nn.RMSNorm(d_model, eps=NORM_EPS)
        self.mlp = FeedForward(d_model, mlp_ratio, dropout)

    def forward(self, x):  # [B, N, D]
        x = x + self.mixer(self.norm_mix(x))
        return x + self.mlp(self.norm_mlp(x))


class DecoderForecaster(nn.Module):
    def __init__(self, lookback: int, horizon: int, n_channels: int,
                 mixer_factory: MixerFactory, *, d_model: int | None = None, n_layers: int = 3,
                 n_heads: int = 8, mlp_ratio: int = 4, dropout: float = 0.1,
                 channel_emb: bool = True, init: str = "gpt2", arx: bool = False):
        super().__init__()
        if init not in INITS:
            raise ValueError(f"init={init!r}: use one of {INITS}")
        self.lookback, self.horizon, self.n_channels = lookback, horizon, n_channels
        self.n_segments = -(-lookback // horizon)  # ceil: the window is left-padded
        self.pad = self.n_segments * horizon - lookback
        d_model = d_model or default_d_model(n_channels, arx)
        self.tokenizer = nn.Linear(horizon, d_model)
        self.context = ContextTokens(n_channels, horizon, d_model) if arx else None
        n_tokens = self.n_segments * (2 if arx else 1)
        self.pos_emb = nn.Parameter(INIT_STD * torch.randn(n_tokens, d_model))
        # one learned embedding per (channel, position): the channel-independent model can
        # tell its channels apart (the authors' channel_emb [1, C, N, d], init 0.02 randn)
        self.channel_emb = nn.Parameter(INIT_STD * torch.randn(
            n_channels, n_tokens, d_model)) if channel_emb else None
        self.drop = nn.Dropout(dropout)
        self.pre_norm = nn.RMSNorm(d_model, eps=NORM_EPS)
        self.blocks = nn.ModuleList(DecoderBlock(d_model, n_heads, dropout, mlp_ratio,
                                                 mixer_factory) for _ in range(n_layers))
        self.final_norm = nn.RMSNorm(d_model, eps=NORM_EPS)
        self.detokenizer = nn.Linear(d_model, horizon)
        if init == "gpt2":
            self._init_weights(n_layers)

    def _init_weights(self, n_layers: int):
        """GPT-2 initialisation over the whole model, mixers included (the authors apply it to
        every nn.Linear whatever the predictor); embeddings keep their 0.02 randn."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, mean=0.0, std=INIT_STD)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        for name, p in self.named_parameters():
            if name.endswith(RESIDUAL_PROJ):
                nn.init.normal_(p, mean=0.0, std=INIT_STD / math.sqrt(2 * n_layers))

    def _segments(self, x):
        """x [B, L, C] -> normalised segments [B*C, N, H] and the (mean, std) [B*C, 1, 1]."""
        B, L, C = x.shape
        series = x.permute(0, 2, 1).reshape(B * C, L)  # [B*C, L]
        mean = series[:, -self.horizon:].mean(dim=1, keepdim=True)  # [B*C, 1] last segment
        std = series.std(dim=1, keepdim=True) + STD_EPS  # [B*C, 1] whole input window
        series = F.pad((series - mean) / std, (self.pad, 0))  # [B*C, N*H] zeros on the left
        return series.view(B * C, self.n_segments, self.horizon), mean[..., None], std[..., None]

    def _embed(self, segments):
        """[B*C, N, H] -> pre-normed tokens [B*C, N, D]: dropout on the tokens only, then
        + position + channel embedding, then RMSNorm (the authors' order)."""
        h = self.tokenizer(segments)  # [B*C, N, D]; row b*C + c is channel c
        if self.context is not None:
            h = self.context(h, segments)  # [B*C, 2N, D]
        h = self.drop(h)
        BC, N, D = h.shape
        h = h.view(BC // self.n_channels, self.n_channels, N, D) + self.pos_emb
        if self.channel_emb is not None:
            h = h + self.channel_emb
        return self.pre_norm(h.view(BC, N, D))

    def _next_segments(self, segments):
        h = self._embed(segments)  # [B*C, N, D]
        for block in self.blocks:
            h = block(h)
        h = self.final_norm(h)
        if self.context is not None:
            h = h[:, 1::2]  # each channel's own tokens
        return self.detokenizer(h)  # [B*C, N, H] position n -> segment n+1

    def forward(self, x, y=None):
        """x [B, L, C] (scaled) -> forecast [B, H, C] (scaled); with the target y [B, H, C]:
        (training loss, forecast). The loss goes through forward so that the `compile` key,
        which compiles the module's call (zeros/compile.py), compiles what training runs."""
        if y is None:
            return self.forecast_and_aux(x)[0]
        forecast, aux = self.forecast_and_aux(x)
        return F.mse_loss(forecast, y) + aux, forecast

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
        """(loss, forecast): forecast MSE + next-segment MSE at every earlier position (the
        authors' loss). Through the module's call: compiled when the model is."""
        return self(x, y)
