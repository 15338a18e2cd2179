"""Sequence mixers for every table row: `create_mixer("gla", d_model, n_heads, causal=True)`.

Adding a mixer: its class with `@register("name")` in one of the modules below (a new module:
add it to the import line) and `conf/mixer/name.yaml` (docs/framework.md, "Adding a mixer").
"""
from .registry import (MixerSpec, available_mixers, check_mixer_args, create_mixer,
                       encoder_mixers, mixer_class, register)
from . import attention, conv, fla_based, ssm  # noqa: F401,E402  (each @register's its mixers)

__all__ = ["MixerSpec", "available_mixers", "check_mixer_args", "create_mixer",
           "encoder_mixers", "mixer_class", "register"]
