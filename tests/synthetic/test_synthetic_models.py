"""The MAD / MQAR / RegBench backbones: structure facts, causality, any mixer via a factory."""
import torch
import torch.nn as nn

from tasks.synthetic_common.model import (MADAutoEncoder, MADLanguageModel, MQARModel,
                                           RegBenchModel, SwiGLU, count_parameters)
from zeros import ZeroSAttention


def zeros_factory(d):
    return ZeroSAttention(d, 16)


def test_mad_lm_structure():
    m = MADLanguageModel(16, zeros_factory)
    kinds = [type(b.layer).__name__ for b in m.blocks]
    assert kinds == ["ZeroSAttention", "SwiGLU", "ZeroSAttention", "SwiGLU"]
    assert all(isinstance(b.norm, nn.RMSNorm) for b in m.blocks)
    assert m.blocks[1].layer.w3.in_features == 352  # SwiGLU(352) at width 128
    assert m.head.bias is not None and m.head.weight.data_ptr() != m.token_embeds.weight.data_ptr()
    assert not any("pos" in n for n, _ in m.named_parameters())  # no positional embedding
    assert (m.head.bias == 0).all()
    x = torch.randint(0, 16, (2, 20))
    assert m(x).shape == (2, 20, 16)


def test_mad_lm_is_causal():
    torch.manual_seed(0)
    m = MADLanguageModel(16, zeros_factory).eval()
    x = torch.randint(0, 16, (1, 12))
    y = x.clone()
    y[0, 8:] = (y[0, 8:] + 3) % 16
    with torch.no_grad():
        torch.testing.assert_close(m(x)[:, :8], m(y)[:, :8])


def test_autoencoder_decodes_every_position_from_last_state():
    torch.manual_seed(0)
    m = MADAutoEncoder(16, zeros_factory).eval()
    x = torch.randint(0, 16, (2, 32))
    out = m(x)
    assert out.shape == (2, 32, 16)
    y = x.clone()
    y[:, 5] = (y[:, 5] + 1) % 16
    with torch.no_grad():  # the code depends on the whole input (last state of a causal encoder)
        assert not torch.allclose(m(x), m(y))


def test_mqar_model_no_mlp_tied_head():
    m = MQARModel(8192, lambda d: ZeroSAttention(d, 1), d_model=64)
    assert m.head.weight is m.embed.weight
    assert not any(isinstance(mod, (SwiGLU, nn.GELU)) for mod in m.modules())
    assert len(m.mixers) == 2
    assert m(torch.randint(0, 8192, (2, 16))).shape == (2, 16, 8192)


def test_regbench_model_and_param_count():
    m = RegBenchModel(20, lambda d: ZeroSAttention(d, 2), d_model=64, n_layers=2)
    assert m(torch.randint(0, 20, (2, 30))).shape == (2, 30, 20)
    assert count_parameters(m) < sum(p.numel() for p in m.parameters()) + 1
