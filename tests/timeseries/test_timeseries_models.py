"""Table 4 models: shapes, the decoder's normalisation/tokenisation/loss, causality, baselines."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tasks.timeseries.baselines import DLinear, ITransformer, MovingAverage, PatchTST
from tasks.timeseries.decoder import DecoderForecaster, default_d_model
from tasks.timeseries.data import resolve_lookback
from tasks.timeseries.model import build_forecaster, training_loss
from zeros import ZeroSAttention
from zeros.mixers import MixerSpec


class TinySoftmax(nn.Module):
    """A small causal softmax attention for the mixer slot."""

    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        self.h = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)

    def forward(self, x):  # [B, T, D]
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.h, -1).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, D)


def zeros_factory(d_model, n_heads, dropout):
    return ZeroSAttention(d_model, n_heads, causal=True, dropout=dropout, backend="naive")


FACTORIES = {"zeros": zeros_factory, "softmax": lambda d_model, n_heads, dropout: TinySoftmax(d_model, n_heads)}


def test_d_model_rule():
    assert [default_d_model(c) for c in (7, 21, 137)] == [32, 64, 176]


@pytest.mark.parametrize("mixer", sorted(FACTORIES))
@pytest.mark.parametrize("lookback", [64, 80])  # 80: not a multiple of the horizon -> left pad
def test_decoder_shapes_and_loss(mixer, lookback):
    torch.manual_seed(0)
    model = DecoderForecaster(lookback, 16, 3, FACTORIES[mixer])
    assert model.n_segments == -(-lookback // 16)
    x, y = torch.randn(4, lookback, 3), torch.randn(4, 16, 3)
    out = model(x)
    assert out.shape == (4, 16, 3) and torch.isfinite(out).all()
    loss, forecast = model.loss(x, y)
    assert loss.ndim == 0 and forecast.shape == (4, 16, 3)
    loss.backward()
    assert all(p.grad is not None for p in model.tokenizer.parameters())


def test_decoder_normalisation_is_affine_equivariant():
    # minus the last segment's mean, over the window's std: the forecast of a*x+b is a*f(x)+b
    torch.manual_seed(0)
    model = DecoderForecaster(48, 16, 2, FACTORIES["softmax"]).eval()
    x = torch.randn(3, 48, 2)
    with torch.no_grad():
        ref, moved = model(x), model(3.0 * x + 5.0)
    torch.testing.assert_close(moved, 3.0 * ref + 5.0, rtol=1e-3, atol=1e-3)


def test_decoder_loss_is_forecast_plus_next_segment_mse():
    torch.manual_seed(0)
    model = DecoderForecaster(48, 16, 2, FACTORIES["softmax"]).eval()
    x, y = torch.randn(2, 48, 2), torch.randn(2, 16, 2)
    segments, mean, std = model._segments(x)  # [B*C, 3, 16]
    out = model._next_segments(segments)  # [B*C, 3, 16]
    forecast = (out[:, -1] * std[:, 0] + mean[:, 0]).view(2, 2, 16).permute(0, 2, 1)
    expect = F.mse_loss(forecast, y) + F.mse_loss(out[:, :-1], segments[:, 1:])
    loss, _ = model.loss(x, y)
    torch.testing.assert_close(loss, expect)
    # the segments are the normalised window, in order: last segment has mean 0
    assert segments[:, -1].mean(-1).abs().max() < 1e-5


@pytest.mark.parametrize("mixer", sorted(FACTORIES))
def test_decoder_is_causal_over_segments(mixer):
    # the prediction made at segment n must not see segments after n (next-segment loss is fair)
    torch.manual_seed(0)
    model = DecoderForecaster(64, 16, 1, FACTORIES[mixer]).eval()
    seg = torch.randn(2, 4, 16)
    with torch.no_grad():
        a = model._next_segments(seg)
        seg2 = seg.clone()
        seg2[:, 3] += 10.0
        b = model._next_segments(seg2)
    torch.testing.assert_close(a[:, :3], b[:, :3])
    assert not torch.allclose(a[:, 3], b[:, 3])


def test_moving_average_pads_with_end_values():
    x = torch.arange(6.0).view(1, 6, 1)
    out = MovingAverage(3)(x)[0, :, 0]
    torch.testing.assert_close(out, torch.tensor([1 / 3, 1, 2, 3, 4, 14 / 3]))


@pytest.mark.parametrize("cls,kw", [(DLinear, {}), (PatchTST, {"d_model": 32, "d_ff": 64}),
                                    (ITransformer, {"d_model": 32, "d_ff": 64})])
def test_baseline_shapes(cls, kw):
    torch.manual_seed(0)
    model = cls(96, 24, 7, **kw)
    x = torch.randn(5, 96, 7)
    out = model(x)
    assert out.shape == (5, 24, 7) and torch.isfinite(out).all()
    loss, _ = training_loss(model, x, torch.randn(5, 24, 7))
    loss.backward()


def test_dlinear_is_linear_in_its_input():
    torch.manual_seed(0)
    model = DLinear(32, 8, 2)
    a, b = torch.randn(3, 32, 2), torch.randn(3, 32, 2)
    bias = model(torch.zeros_like(a))
    torch.testing.assert_close(model(a + b) - bias, (model(a) - bias) + (model(b) - bias),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mixer", ["zeros", "softmax", "linear_attn"])
def test_builder_with_registry_mixers(mixer):
    model = build_forecaster(MixerSpec(mixer), dataset="ETTh1", horizon=24, lookback=96)
    assert model(torch.randn(2, 96, 7)).shape == (2, 24, 7)
    assert model.tokenizer.out_features == 32  # 16 * floor(sqrt(7))
    if mixer == "zeros":
        assert model.blocks[0].mixer.backend == "auto"  # short T: auto picks the quadratic path


def test_builder_protocol_lookbacks_and_errors():
    assert [resolve_lookback(h, "protocol") for h in (96, 192, 336, 720)] == [1024, 2048, 2048, 4096]
    assert resolve_lookback(96, 512) == 512
    with pytest.raises(ValueError, match="horizon 48"):
        resolve_lookback(48, "protocol")
    with pytest.raises(ValueError, match="unknown dataset"):
        build_forecaster(MixerSpec("zeros"), dataset="ETTh9", horizon=96)
    model = build_forecaster(None, model="dlinear", dataset="weather", horizon=96, row="DLinear")
    assert isinstance(model, DLinear)
