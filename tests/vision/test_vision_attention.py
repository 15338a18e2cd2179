"""The timm attention wrapper: DeiT-Tiny builds with it, encoder ZeroS is permutation-equivariant
without RoPE (the causal layer is not), 2-D RoPE depends on relative grid offsets only."""
import pytest
import timm
import torch

from tasks.vision.attention import VisionMixerAttention, vision_attn_layer
from tasks.common.backbone import count_parameters as count_params
from tasks.vision.model import build_vit
from tasks.vision.rope2d import apply_axial_rope
from zeros import ZeroSAttention, ZeroSSMAttention

DEIT_TINY_PARAMS = 5.7e6  # the paper's DeiT row (Table 3)


@pytest.fixture(scope="module")
def deit_models():
    torch.manual_seed(0)
    return {m: timm.create_model("deit_tiny_patch16_224", pretrained=False,
                                 attn_layer=vision_attn_layer(m, rope="none" if m == "softmax"
                                                              else "2d"))
            for m in ("softmax", "zeros", "zeros_sm")}


def test_deit_tiny_builds_with_our_attention(deit_models):
    zeros, sm = deit_models["zeros"], deit_models["zeros_sm"]
    assert len(zeros.blocks) == 12 and zeros.embed_dim == 192
    for model, layer_cls in ((zeros, ZeroSAttention), (sm, ZeroSSMAttention)):
        for blk in model.blocks:
            assert isinstance(blk.attn, VisionMixerAttention)
            assert isinstance(blk.attn.layer, layer_cls)
            assert blk.attn.layer.causal is False and blk.attn.layer.n_heads == 3
    with torch.no_grad():
        out = zeros(torch.randn(1, 3, 224, 224))
    assert out.shape == (1, 1000) and torch.isfinite(out).all()


def test_softmax_deit_tiny_param_count_matches_paper(deit_models):
    n = count_params(deit_models["softmax"])
    assert abs(n - DEIT_TINY_PARAMS) / DEIT_TINY_PARAMS < 0.05, n
    assert type(deit_models["softmax"].blocks[0].attn) is timm.layers.Attention  # unchanged DeiT
    # ZeroS adds the u projection and gates per block: more parameters, same order (paper: 6.0M)
    assert 1.0 < count_params(deit_models["zeros"]) / n < 1.1
    assert 1.0 < count_params(deit_models["zeros_sm"]) / n < 1.01


def _layer(mixer, causal, rope="none", dim=32, heads=2):
    torch.manual_seed(1)
    cls = vision_attn_layer(mixer, rope=rope, causal=causal)
    return cls(dim, num_heads=heads, qkv_bias=True).double().eval()


@pytest.mark.parametrize("mixer", ["zeros", "zeros_sm"])
def test_encoder_is_permutation_equivariant_without_rope(mixer):
    layer = _layer(mixer, causal=False)
    x = torch.randn(2, 17, 32, dtype=torch.float64)  # [B, 1 + 16 patches, C]
    perm = torch.cat([torch.tensor([0]), 1 + torch.randperm(16)])  # shuffle patches, keep cls
    y = layer(x)
    torch.testing.assert_close(layer(x[:, perm]), y[:, perm])
    # and over every token, class token included: no position enters an encoder without RoPE
    full = torch.randperm(17)
    torch.testing.assert_close(layer(x[:, full]), y[:, full])


@pytest.mark.parametrize("mixer", ["zeros", "zeros_sm"])
def test_causal_and_rope_layers_are_not_permutation_equivariant(mixer):
    x = torch.randn(2, 17, 32, dtype=torch.float64)
    perm = torch.cat([torch.tensor([0]), 1 + torch.randperm(16)])
    for layer in (_layer(mixer, causal=True), _layer(mixer, causal=False, rope="2d"),
                  _layer(mixer, causal=False, rope="1d")):
        err = (layer(x[:, perm]) - layer(x)[:, perm]).abs().max()
        assert err > 1e-4, (layer.causal, layer.rope, err)


def test_axial_rope_depends_on_relative_offsets_and_skips_class_token():
    torch.manual_seed(0)
    q, k = torch.randn(2, 1, 1, 8, dtype=torch.float64).unbind(0)  # one vector each, d=8
    grid = (4, 5)

    def place(v, r, c):  # a [1, 1 + 20, 1, 8] sequence with v at patch (r, c), zeros elsewhere
        x = torch.zeros(1, 21, 1, 8, dtype=torch.float64)
        x[:, 1 + r * grid[1] + c] = v
        return apply_axial_rope(x, 1, grid)[0, 1 + r * grid[1] + c, 0]

    base = place(q, 0, 1) @ place(k, 2, 3)
    torch.testing.assert_close(place(q, 1, 2) @ place(k, 3, 4), base)  # same (Δr, Δc)
    assert (place(q, 1, 1) @ place(k, 3, 4) - base).abs() > 1e-6  # other Δc
    assert (place(q, 1, 2) @ place(k, 2, 4) - base).abs() > 1e-6  # other Δr
    x = torch.randn(2, 21, 3, 8)
    torch.testing.assert_close(apply_axial_rope(x, 1, grid)[:, 0], x[:, 0])  # cls untouched
    with pytest.raises(ValueError, match="square grid"):
        apply_axial_rope(torch.randn(1, 1 + 20, 1, 8))  # 20 patches: give grid=
    with pytest.raises(ValueError, match="divisible by 4"):
        apply_axial_rope(torch.randn(1, 1 + 16, 1, 6))


def test_wrapper_rejects_masks_causal_calls_and_unsupported_options():
    layer = _layer("zeros", causal=False)
    x = torch.randn(1, 5, 32, dtype=torch.float64)
    with pytest.raises(NotImplementedError, match="attn_mask"):
        layer(x, attn_mask=torch.ones(5, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="is_causal"):
        layer(x, is_causal=True)
    assert _layer("zeros", causal=True)(x, is_causal=True).shape == x.shape
    cls = vision_attn_layer("zeros")
    with pytest.raises(ValueError, match="qk_norm"):
        cls(32, num_heads=2, qk_norm=True, norm_layer=torch.nn.LayerNorm)
    with pytest.raises(ValueError, match="attn_drop"):
        cls(32, num_heads=2, attn_drop=0.1)
    with pytest.raises(TypeError, match="dim_out"):
        cls(32, num_heads=2, dim_out=16)  # would otherwise be dropped silently
    with pytest.raises(ValueError, match="rope"):
        vision_attn_layer("zeros", rope="3d")
    with pytest.raises(ValueError, match="divisible by 4"):
        build_vit("zeros", num_classes=3, img_size=16, patch_size=8, embed_dim=12, depth=1,
                  num_heads=2)  # head dim 6


def test_layer_options_and_bias_reach_the_zeros_layer():
    cls = vision_attn_layer("zeros", rope="none", use_norm=False, gates=False)
    attn = cls(32, num_heads=2, qkv_bias=False, proj_bias=False, proj_drop=0.2)
    assert attn.layer.use_norm is False and attn.layer.gate is None
    assert attn.layer.proj.bias is None and attn.layer.drop.p == 0.2
