"""Checks that run before anything is trained: each failure is ONE line naming the fix."""
from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import DictConfig

from zeros.mixers import available_mixers, check_mixer_args

from .errors import ConfigError

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
# config groups whose choice on the command line is checked before Hydra composes
CHECKED_GROUPS = ("task", "backbone", "mixer", "optimizer", "scheduler", "trainer", "logger",
                  "profile", "experiment", "sweep")


def group_options(group: str) -> list[str]:
    root = CONF_DIR / group
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.yaml"))


def check_overrides(argv: list[str]) -> None:
    """`profile=fast` -> 'unknown profile 'fast': use one of paper, smoke'. Sweeps (a,b) too."""
    for arg in argv:
        if "=" not in arg or arg.startswith(("-", "hydra")):
            continue
        key, value = arg.split("=", 1)
        key = key.lstrip("+~")
        if key.startswith("override "):
            key = key.split(" ", 1)[1]
        if key not in CHECKED_GROUPS or value in ("null", ""):
            continue
        options = group_options(key)
        for choice in value.split(","):
            if choice not in options:
                raise ConfigError(f"unknown {key} {choice!r}: use one of {', '.join(options)} "
                                  f"(files in conf/{key}/)")


def check_device(argv: list[str], profile: str | None = None) -> None:
    """A paper-profile command on a machine without CUDA stops here, before Hydra composes a
    single config (composing Table 1's paper grid alone takes minutes). `profile` is the
    reproduce driver's --profile; otherwise the last `profile=` override counts (smoke default).
    An explicit `trainer.accelerator=cpu` keeps the paper protocol on CPU on purpose."""
    for arg in argv:
        if arg.startswith("profile="):
            profile = arg.split("=", 1)[1]
    if profile != "paper" or any(a.startswith("trainer.accelerator=") for a in argv):
        return
    if not torch.cuda.is_available():
        raise ConfigError("profile=paper needs a CUDA GPU and none is visible: use "
                          "profile=smoke (PROFILE=smoke), or add trainer.accelerator=cpu to run "
                          "the paper protocol on CPU anyway")


def check_config(cfg: DictConfig) -> None:
    name = cfg.mixer.name
    if name not in available_mixers():
        raise ConfigError(f"unknown mixer {name!r}: use one of {', '.join(available_mixers())}")
    bb = cfg.backbone
    if "d_model" in bb and "n_heads" in bb:
        try:
            check_mixer_args(name, int(bb.d_model), int(bb.n_heads), bool(bb.get("causal", True)))
        except ValueError as e:
            raise ConfigError(f"{e} (backbone.d_model / backbone.n_heads)") from None
    acc = str(cfg.trainer.accelerator)
    if acc in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ConfigError(f"trainer.accelerator={acc} but no CUDA device is visible: use "
                          "profile=smoke or trainer.accelerator=cpu")
    if cfg.profile.name not in ("smoke", "paper") and not (CONF_DIR / "profile" /
                                                          f"{cfg.profile.name}.yaml").exists():
        raise ConfigError(f"unknown profile {cfg.profile.name!r}: use profile=smoke or profile=paper")
