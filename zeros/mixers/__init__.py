"""Sequence mixers for every table row: `create_mixer("gla", d_model, n_heads, causal=True)`.

Adding a mixer = its class with `@register("name")` in a module of this package (a new file
is picked up as it is) + `conf/mixer/name.yaml` (docs/framework.md, "Adding a mixer").
"""
import importlib
import pkgutil

from .registry import (MixerSpec, available_mixers, check_mixer_args, create_mixer,
                       encoder_mixers, mixer_class, register)

# Import every module of the package here, once, so that each `@register` has run before any
# lookup (as fairseq/models/__init__.py imports its directory); registry.py imports no mixer.
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["MixerSpec", "available_mixers", "check_mixer_args", "create_mixer",
           "encoder_mixers", "mixer_class", "register"]
