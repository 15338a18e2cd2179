"""Sequence mixers for every table row: `create_mixer("gla", d_model, n_heads, causal=True)`."""
from .registry import (MixerSpec, available_mixers, check_mixer_args, create_mixer,
                       encoder_mixers, register)

__all__ = ["MixerSpec", "available_mixers", "check_mixer_args", "create_mixer",
           "encoder_mixers", "register"]
