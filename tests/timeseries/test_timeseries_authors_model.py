"""The decoder forecaster = the authors' (LJC-FVNR/ARMA-Attention models/Autoregressive.py
`Model`): channel embedding, dropout(tokens) + pos + channel -> RMSNorm, GPT-2 init, and the
Table 4 Transformer row = their FullAttention (no RoPE, attention dropout 0.1)."""
import math

import pytest
import torch
import torch.nn as nn

from tasks.common.provenance import composer
from tasks.timeseries.decoder import DecoderForecaster
from tasks.timeseries.model import build_forecaster
from zeros.mixers import MixerSpec

L, H, C = 96, 16, 3  # 6 segments


def _model(mixer="softmax", **kw):
    torch.manual_seed(0)
    factory = lambda d_model, n_heads, dropout: MixerSpec(mixer)(d_model, n_heads, dropout=dropout)
    return DecoderForecaster(L, H, C, factory, d_model=64, **kw)


def _block_input(model, x):
    """The tokens the first block receives."""
    seen = []
    hook = model.blocks[0].register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    model(x)
    hook.remove()
    return seen[0]


def test_channel_embedding_is_learned_per_channel_and_position():
    model = _model()
    assert model.channel_emb.shape == (C, model.n_segments, 64) and model.channel_emb.requires_grad
    assert model.channel_emb.std().item() == pytest.approx(0.02, rel=0.1)
    # the same series in every channel: only the channel embedding tells the channels apart
    x = torch.randn(2, L, 1).expand(2, L, C).contiguous()
    y = model.eval()(x)
    assert not torch.allclose(y[..., 0], y[..., 1])
    assert torch.equal(_model(channel_emb=False).eval()(x)[..., 0],
                       _model(channel_emb=False).eval()(x)[..., 1])


def test_dropout_hits_the_tokens_only_then_rmsnorm():
    """authors: x = dropout(tokens) + pos + channel; x = pre_norm(x). With a dropout that drops
    every token, the blocks see RMSNorm(pos + channel) (eps 1e-5), channel by channel."""
    model = _model()

    class DropAll(nn.Module):
        def forward(self, t):
            return torch.zeros_like(t)
    model.drop = DropAll()
    h = _block_input(model, torch.randn(2, L, C)).view(2, C, model.n_segments, 64)
    e = model.pos_emb + model.channel_emb  # [C, N, d]
    want = e * torch.rsqrt(e.pow(2).mean(-1, keepdim=True) + 1e-5)
    assert torch.allclose(h, want.expand_as(h), atol=1e-6)


def test_blocks_receive_rms_normalised_tokens():
    model = _model().eval()
    x = 100 * torch.randn(2, L, C)
    h = _block_input(model, x)
    assert torch.allclose(h.pow(2).mean(-1), torch.ones(h.shape[:-1]), atol=1e-2)  # eps 1e-5
    assert model.pre_norm.eps == model.final_norm.eps == model.blocks[0].norm_mix.eps == 1e-5


@pytest.mark.parametrize("mixer", ["zeros", "softmax"])
def test_gpt2_initialisation(mixer):
    model, n_layers = _model(mixer), 3
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear):
            resid = name.endswith(("mixer.out", "mlp.down"))
            want = 0.02 / math.sqrt(2 * n_layers) if resid else 0.02
            assert m.weight.std().item() == pytest.approx(want, rel=0.25), name
            assert m.weight.mean().abs().item() < want / 2, name
            assert m.bias is None or not m.bias.any(), name
    # init="torch": PyTorch's defaults (kaiming-uniform, std 1/sqrt(3 fan_in) = 0.072 at fan_in 64)
    assert _model(mixer, init="torch").blocks[0].mlp.up.weight.std().item() > 0.05


def test_table4_transformer_row_is_the_authors_full_attention():
    with composer() as compose:
        cfg = compose(["experiment=table4/decoder", "profile=cpu", "mixer=softmax"])
        zeros = compose(["experiment=table4/decoder", "profile=cpu", "mixer=zeros"])
    assert dict(cfg.backbone.mixer_kwargs) == {"rope": False, "attn_dropout": 0.1}
    assert zeros.backbone.mixer_kwargs is None  # ZeroS runs its layer as it is
    b = {k: v for k, v in cfg.backbone.items() if k != "_target_"}
    model = build_forecaster(MixerSpec("softmax"), **b)
    attn = model.blocks[0].mixer
    assert (attn.rope, attn.attn_dropout, attn.drop.p) == (False, 0.1, 0.1)


def test_arx_variant_reads_the_other_channels_causally():
    """SAMoVAR's ARX tokens: d_model 32*floor(sqrt(C)), 2N tokens (context, own) per channel;
    a channel's forecast depends on the other channels' windows, and position n on segments
    <= n only."""
    torch.manual_seed(0)
    factory = lambda d_model, n_heads, dropout: MixerSpec("softmax")(d_model, n_heads,
                                                                    dropout=dropout)
    model = DecoderForecaster(L, H, C, factory, arx=True).eval()
    assert model.tokenizer.out_features == 32 and model.channel_emb.shape == (C, 12, 32)
    x = torch.randn(2, L, C)
    x2 = x.clone()
    x2[:, :, 1] += torch.randn(2, L)
    assert not torch.allclose(model(x)[..., 0], model(x2)[..., 0])
    assert torch.equal(_model().eval()(x)[..., 0], _model().eval()(x2)[..., 0])  # independent
    seg, _, _ = model._segments(x)
    seg2 = seg.clone()
    seg2[:, 3:] += 1.0  # change segments 3.. of every channel
    out, out2 = model._next_segments(seg), model._next_segments(seg2)
    assert out.shape == seg.shape
    assert torch.allclose(out[:, :3], out2[:, :3], atol=1e-6)
    assert not torch.allclose(out[:, 3:], out2[:, 3:])
