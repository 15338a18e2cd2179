"""One string -> class map of sequence mixers. Every mixer maps x [B, T, D] -> [B, T, D].

`create_mixer(name, d_model, n_heads, causal=True, **kw)` builds one; `MixerSpec` is the
picklable (name, kwargs) pair a model builder receives from `conf/mixer/<name>.yaml`.
This module imports no mixer: the package's `__init__` imports every module of the package, so
importing anything from `zeros.mixers` runs every `@register` first.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch.nn as nn

_REGISTRY: dict[str, Callable[..., nn.Module]] = {}
_ENCODER: set[str] = set()  # mixers with a non-causal (encoder) mode


def register(name: str, *, encoder: bool = False):
    """Class decorator: `@register("gla")`. `encoder=True` if the class accepts causal=False."""
    def wrap(cls):
        if name in _REGISTRY:
            raise ValueError(f"mixer {name!r} registered twice")
        _REGISTRY[name] = cls
        if encoder:
            _ENCODER.add(name)
        return cls
    return wrap


def available_mixers() -> list[str]:
    return sorted(_REGISTRY)


def encoder_mixers() -> list[str]:
    return sorted(_ENCODER)


def mixer_class(name: str) -> Callable[..., nn.Module]:
    """The registered class of `name` (e.g. to find a model's mixer layers by isinstance)."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown mixer {name!r}: use one of {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def check_mixer_args(name: str, d_model: int, n_heads: int, causal: bool = True) -> None:
    """Raise ValueError (one line naming the fix) for a bad name / head count / mode."""
    mixer_class(name)  # an unknown name raises, listing the known ones
    if n_heads < 1 or d_model % n_heads:
        raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}: pick n_heads "
                         "that divides d_model")
    if not causal and name not in _ENCODER:
        raise ValueError(f"mixer {name!r} has no encoder (causal=False) mode: use one of "
                         f"{', '.join(sorted(_ENCODER))} or causal=True")


def create_mixer(name: str, d_model: int, n_heads: int, *, causal: bool = True,
                 **kwargs: Any) -> nn.Module:
    check_mixer_args(name, d_model, n_heads, causal)
    return _REGISTRY[name](d_model, n_heads, causal=causal, **kwargs)


@dataclass
class MixerSpec:
    """What a model builder receives: call it once per block to get a fresh mixer."""
    name: str
    kwargs: dict = field(default_factory=dict)

    def __call__(self, d_model: int, n_heads: int, *, causal: bool = True, **extra) -> nn.Module:
        return create_mixer(self.name, d_model, n_heads, causal=causal, **{**self.kwargs, **extra})

