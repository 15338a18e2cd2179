"""Build a timm DeiT/ViT whose only change is the attention (Table 3 swaps nothing else)."""
from __future__ import annotations

import timm
import torch.nn as nn

from .attention import vision_attn_layer

# DeiT-Tiny: patch 16, dim 192, depth 12, 3 heads (timm's deit_tiny_patch16_224)
PAPER_MODEL = "deit_tiny_patch16_224"


def build_vit(mixer="zeros", *, model_name: str = PAPER_MODEL, num_classes: int = 1000,
              rope: str = "2d", drop_path_rate: float = 0.1, mixer_options: dict | None = None,
              **model_overrides) -> nn.Module:
    """timm.create_model(model_name, attn_layer=<mixer>) without pretrained weights.

    `mixer`: a name or a `zeros.mixers.MixerSpec` (the framework passes one; its kwargs go to
    the ZeroS layer like `mixer_options`). `model_overrides` go to timm (img_size, patch_size,
    embed_dim, depth, num_heads, ...): the smoke profile shrinks the same DeiT constructor.
    """
    name = getattr(mixer, "name", mixer)
    options = {**(getattr(mixer, "kwargs", None) or {}), **(mixer_options or {})}
    rope = "none" if name == "softmax" else rope  # DeiT baseline: timm's Attention, unchanged
    attn_layer = vision_attn_layer(name, rope=rope, **options)
    return timm.create_model(model_name, pretrained=False, num_classes=num_classes,
                             drop_path_rate=drop_path_rate, attn_layer=attn_layer,
                             **model_overrides)
