"""ZeroS attention as a timm `VisionTransformer(attn_layer=...)` class.

timm (>= 1.0.23) builds every block's attention as
    attn_layer(dim, num_heads=, qkv_bias=, qk_norm=, scale_norm=, proj_bias=, attn_drop=,
               proj_drop=, norm_layer=, device=, dtype=)
and calls it as forward(x [B, N, C], attn_mask=None, is_causal=False). It must be a class (timm
runs issubclass on it), so `vision_attn_layer(...)` returns a fresh subclass with the mixer
settings bound as class attributes.

Mixers: "softmax" returns timm's own Attention (the DeiT baseline, unchanged); "zeros" and
"zeros_sm" wrap `zeros.ZeroSAttention` / `zeros.ZeroSSMAttention` in encoder mode (causal=False,
docs/spec.md §3); any other name is looked up in the mixer registry `zeros.mixers.create_mixer` (which
must build it non-causal).

RoPE on patches (rope=): "2d" (default) axial RoPE over (row, col), class token unrotated, see
tasks/vision/rope2d.py; "1d" the layer's own RoPE over the token order (class token at 0, patches
1..N in raster order); "none" no RoPE (DeiT's learned absolute position embedding, which timm
adds before the blocks in every case, is then the only position signal).
"""
from __future__ import annotations

import torch
import torch.nn as nn

from zeros import ZeroSAttention, ZeroSSMAttention
from zeros.rope import rope_normalize

from .rope2d import apply_axial_rope, axial_tables

ROPE_MODES = ("2d", "1d", "none")
ZEROS_MIXERS = {"zeros": ZeroSAttention, "zeros_sm": ZeroSSMAttention}


class _AxialRopeMixin:
    """Replaces the layer's 1-D RoPE by 2-D axial RoPE: in the fused RoPE + unit-norm step
    (`_rope_qk`, what the layers call) and in the plain hook (`_rope(q, k, offset)` on q, k
    [B, T, H, d], the step-by-step form)."""
    num_prefix_tokens: int = 1
    grid: tuple[int, int] | None = None
    axial_base: float = 100.0

    def _rope(self, q, k, offset):
        if not self.rope:
            return q, k
        if offset:
            raise ValueError("2-D RoPE has no position offset: vision encoders run whole images")
        kw = dict(num_prefix_tokens=self.num_prefix_tokens, grid=self.grid, base=self.axial_base)
        return apply_axial_rope(q, **kw), apply_axial_rope(k, **kw)

    def _rope_qk(self, qk, offset, normalize):
        """The layer's fused input step (zeros/rope.py `rope_normalize`: RoPE + unit norm of the
        stacked q, k in one autograd op) with the 2-D tables: same values as `_rope` then
        F.normalize (tests/vision/test_vision_attention.py), ~20 fewer small ops per layer."""
        if not self.rope:
            return super()._rope_qk(qk, offset, normalize)
        if offset:
            raise ValueError("2-D RoPE has no position offset: vision encoders run whole images")
        tables = axial_tables(qk.shape[1], qk.shape[-1], self.num_prefix_tokens, self.grid,
                              self.axial_base, qk.device)
        return rope_normalize(qk, tables=tables, normalize=normalize).unbind(2)


class ZeroSAxialAttention(_AxialRopeMixin, ZeroSAttention):
    """ZeroSAttention with 2-D axial RoPE on the patch grid."""


class ZeroSSMAxialAttention(_AxialRopeMixin, ZeroSSMAttention):
    """ZeroSSMAttention with 2-D axial RoPE on the patch grid."""


_AXIAL = {"zeros": ZeroSAxialAttention, "zeros_sm": ZeroSSMAxialAttention}


def build_zeros_layer(mixer: str, dim: int, num_heads: int, *, causal: bool = False,
                      rope: str = "2d", num_prefix_tokens: int = 1,
                      grid: tuple[int, int] | None = None, axial_base: float = 100.0,
                      **layer_kwargs) -> nn.Module:
    """A ZeroS / ZeroS-SM layer [B, N, dim] -> [B, N, dim] with the chosen RoPE mode."""
    if mixer not in ZEROS_MIXERS:
        raise ValueError(f"unknown ZeroS mixer {mixer!r}: choose one of {sorted(ZEROS_MIXERS)}")
    if rope not in ROPE_MODES:
        raise ValueError(f"rope={rope!r}: choose one of {ROPE_MODES}")
    if rope == "2d":
        layer = _AXIAL[mixer](dim, num_heads, causal=causal, rope=True, **layer_kwargs)
        if layer.head_dim % 4:
            raise ValueError(f"rope='2d' needs a head dim divisible by 4, got {layer.head_dim} "
                             f"(dim={dim}, num_heads={num_heads}): use rope='1d' or 'none'")
        layer.num_prefix_tokens, layer.grid = num_prefix_tokens, grid
        layer.axial_base = axial_base
        return layer
    return ZEROS_MIXERS[mixer](dim, num_heads, causal=causal, rope=(rope == "1d"), **layer_kwargs)


class VisionMixerAttention(nn.Module):
    """timm-compatible attention wrapping a sequence mixer [B, N, C] -> [B, N, C].

    Class attributes (bound by `vision_attn_layer`): mixer, rope, causal, num_prefix_tokens,
    grid, axial_base, layer_kwargs.
    """
    mixer: str = "zeros"
    rope: str = "2d"
    causal: bool = False
    num_prefix_tokens: int = 1
    grid: tuple[int, int] | None = None
    axial_base: float = 100.0
    layer_kwargs: dict = {}

    def __init__(self, dim, num_heads=8, qkv_bias=False, qk_norm=False, scale_norm=False,
                 proj_bias=True, attn_drop=0.0, proj_drop=0.0, norm_layer=None, device=None,
                 dtype=None, **unknown):
        super().__init__()
        if unknown:  # a newer timm passing options this wrapper would silently drop
            raise TypeError(f"VisionMixerAttention got unsupported timm options "
                            f"{sorted(unknown)}: extend tasks/vision/attention.py")
        if qk_norm or scale_norm:
            # ZeroS already L2-normalises q and k and LayerNorms each head's output
            raise ValueError(f"qk_norm/scale_norm are not supported with mixer={self.mixer!r}: "
                             "build the model with qk_norm=False, scale_norm=False")
        if attn_drop:
            # there is no attention matrix to drop out of in a linear-time mixer
            raise ValueError(f"attn_drop={attn_drop} cannot apply to mixer={self.mixer!r}: "
                             "set attn_drop_rate=0 (DeiT uses 0)")
        # ZeroS layers have one bias switch for all their projections (q, k, v, u, gates, out)
        kw = {"bias": bool(qkv_bias or proj_bias), "dropout": proj_drop, **self.layer_kwargs}
        if self.mixer in ZEROS_MIXERS:
            self.layer = build_zeros_layer(
                self.mixer, dim, num_heads, causal=self.causal, rope=self.rope,
                num_prefix_tokens=self.num_prefix_tokens, grid=self.grid,
                axial_base=self.axial_base, **kw)
        else:
            self.layer = _registry_mixer(self.mixer, dim, num_heads, self.causal, self.rope, kw)
        if device is not None or dtype is not None:
            self.to(device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None,
                is_causal: bool = False) -> torch.Tensor:
        if attn_mask is not None:
            raise NotImplementedError(f"mixer={self.mixer!r} takes no attn_mask: ZeroS has no "
                                      "pairwise score matrix to mask; run unpadded images")
        if is_causal and not self.causal:
            raise ValueError("is_causal=True but this layer was built as an encoder: build it "
                             "with vision_attn_layer(..., causal=True)")
        return self.layer(x)  # [B, N, C]


def _registry_mixer(name, dim, num_heads, causal, rope, kw):
    """Any encoder-capable mixer of the registry (zeros.mixers.create_mixer). Its own RoPE
    default applies with rope='none'; rope='1d' passes rope=True; '2d' exists only for ZeroS."""
    from zeros.mixers import create_mixer
    if rope == "2d":
        raise ValueError(f"rope='2d' is only implemented for {sorted(ZEROS_MIXERS)}: use "
                         f"rope='1d' or 'none' for mixer {name!r} (backbone.rope=none)")
    extra = {"rope": True} if rope == "1d" else {}
    return create_mixer(name, dim, num_heads, causal=causal, **{**kw, **extra})


def vision_attn_layer(mixer: str = "zeros", *, rope: str = "2d", causal: bool = False,
                      num_prefix_tokens: int = 1, grid: tuple[int, int] | None = None,
                      axial_base: float = 100.0, **layer_kwargs) -> type[nn.Module]:
    """The class to pass as timm's `attn_layer=` for `mixer`.

    `layer_kwargs` go to the ZeroS layer (e.g. use_norm, gates, reweight, zero_order, backend).
    """
    if mixer == "softmax":
        if rope != "none" or causal or layer_kwargs:
            raise ValueError("mixer='softmax' is timm's unchanged Attention (the DeiT baseline): "
                             "it takes rope='none', causal=False and no layer options")
        from timm.layers import Attention
        return Attention
    if rope not in ROPE_MODES:
        raise ValueError(f"rope={rope!r}: choose one of {ROPE_MODES}")
    attrs = dict(mixer=mixer, rope=rope, causal=causal, num_prefix_tokens=num_prefix_tokens,
                 grid=None if grid is None else tuple(grid), axial_base=axial_base,
                 layer_kwargs=dict(layer_kwargs))
    return type(f"VisionMixerAttention_{mixer}", (VisionMixerAttention,), attrs)
