"""Every paper-profile model: experiment files x the shape-changing values their sweeps name.

`paper_cases()` globs conf/experiment/**/*.yaml (so renamed or merged experiment files are
picked up as they are), composes each with `profile=paper` through Hydra's compose API, reads
`hydra.sweeper.params` and expands the keys that change shapes (mixer, backbone, task.setting,
backbone.d_model, task.dataset, task.horizon, ...). Keys that only change optimisation
(optimizer.*, scheduler.*, seed, trainer.*) are ignored. `build_case()` builds the model through
the runner's own `build()`, and `synthetic_batch()` (the training benchmark's) makes one training
batch of the protocol's shape from the datamodule's attributes (data files are never read).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
IGNORED_PREFIXES = ("optimizer", "scheduler", "seed", "trainer", "logger", "wandb", "paths",
                    "hydra", "resume", "skip_existing", "compile", "meta",
                    "recipe")  # conf/recipe/: lr, warmup, clipping, the table column


@dataclass
class Case:
    experiment: str  # e.g. "table1/mad_recall"
    overrides: list[str] = field(default_factory=list)  # the swept values of this case

    @property
    def name(self) -> str:
        return " ".join([self.experiment, *self.overrides])


def experiment_names() -> list[str]:
    root = CONF / "experiment"
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.yaml"))


def _compose(experiment: str, overrides=()):
    from hydra import compose as hcompose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return hcompose("train", overrides=[f"experiment={experiment}", "profile=paper",
                                            *overrides], return_hydra_config=True)


def _sweep_values(key: str, value) -> list:
    """Typed values of one sweeper entry, through Hydra's override grammar (a,b / range / ...)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    ov = OverridesParser.create().parse_override(f"{key}={value}")
    return list(ov.sweep_iterator()) if ov.is_sweep_override() else [ov.value()]


def _is_group(key: str) -> bool:
    return "." not in key and (CONF / key).is_dir()


def _with_mixer(cfg, experiment: str, mixer: str):
    """cfg with `mixer=<name>` applied as Hydra would: the group file, then the experiment's and
    the profile's own mixer keys on top. A Hydra compose costs ~0.4 s here and the grid has ~40
    mixer values per table, so the mixer group is merged directly (test_dryrun checks that this
    equals Hydra's own composition)."""
    from omegaconf import OmegaConf, open_dict
    layers = [OmegaConf.load(CONF / "mixer" / f"{mixer}.yaml")]
    for f in (CONF / "experiment" / f"{experiment}.yaml", CONF / "profile" / "paper.yaml"):
        own = OmegaConf.load(f)
        if "mixer" in own:
            layers.append(own.mixer)
    cfg = cfg.copy()
    with open_dict(cfg):
        cfg.mixer = OmegaConf.merge(*layers)
    return cfg


def paper_configs(only: str | None = None):
    """Yield (Case, composed cfg) for every experiment x shape-changing sweep value."""
    from omegaconf import OmegaConf, open_dict

    from tasks.common.provenance import offers_profile
    for exp in experiment_names():
        if only and only not in exp:
            continue
        base = _compose(exp)
        if not offers_profile(base, "paper"):  # e.g. table1/mad_seeds: cpu-only seeds
            continue
        params = (base.hydra.get("sweeper") or {}).get("params") or {}
        sweep = {k: _sweep_values(k, v) for k, v in params.items()
                 if not str(k).lstrip("+~").startswith(IGNORED_PREFIXES)}
        groups = [k for k in sweep if _is_group(k) and k != "mixer"]
        dotted = sorted(k for k in sweep if not _is_group(k))
        for gvals in itertools.product(*(sweep[k] for k in groups)):
            gov = [f"{k}={v}" for k, v in zip(groups, gvals)]
            cfg_g = _compose(exp, gov) if gov else base
            with open_dict(cfg_g):
                cfg_g.pop("hydra", None)
            for mixer in sweep.get("mixer", [None]):
                cfg_m = cfg_g if mixer is None else _with_mixer(cfg_g, exp, mixer)
                for dvals in itertools.product(*(sweep[k] for k in dotted)):
                    cfg = cfg_m.copy()
                    for k, v in zip(dotted, dvals):
                        OmegaConf.update(cfg, k, v, merge=True)
                    ov = gov + ([f"mixer={mixer}"] if mixer else []) + \
                        [f"{k}={v}" for k, v in zip(dotted, dvals)]
                    yield Case(exp, ov), cfg


def build_case(cfg):
    """(datamodule, model, TaskModule) of one composed config, built on CPU by the runner's
    own build() (the path `python -m tasks.train` takes), as the training benchmark does."""
    from tasks.bench_train import build
    return build(cfg)


def not_in_protocol(e: BaseException) -> bool:
    """A swept combination the protocol does not have (e.g. a MAD setting of another task):
    the runner skips it, and so do the dry-run and the device check."""
    return any(type(x).__name__ == "NotInProtocol" for x in (e, e.__cause__, e.__context__))


def synthetic_batch(cfg, dm, device="cuda"):
    """One training batch with the protocol's shapes, on `device`: the training benchmark's
    (tasks/bench_train.py), as build_case is the runner's."""
    from tasks.bench_train import synthetic_batch as batch
    return batch(dm, device=device)


def dedupe_key(case: Case, cfg, model, batch, every_length: bool = False) -> tuple:
    """Cases whose models have the same class, mixer and mixer shapes and whose batches have the
    same shapes launch the same kernels: one of them is enough (e.g. MAD's vocab and training-
    size variants). Batch size and sequence length only enter the kernels as runtime integers
    and grid sizes, so by default they are left out of the key (`every_length=True` keeps
    them)."""
    def shapes(b):
        xs = list(b.values()) if isinstance(b, dict) else list(b)
        x = xs[0]
        if every_length:
            return tuple(x.shape), str(x.dtype)
        # [B, T] ids / [B, L, C] series: drop B and T; images [B, 3, S, S]: drop B
        return tuple(x.shape[2:] if x.dim() in (2, 3) else x.shape[1:]), str(x.dtype)
    return (type(model).__name__, str(cfg.mixer.name), str(cfg.mixer.get("kwargs")),
            mixer_shapes(model), shapes(batch))


def mixer_shapes(model) -> tuple:
    """The parameter shapes of the model's sequence mixers (the training benchmark's
    mixer_layers), once per distinct shape: the layer count launches the same kernels. Found by
    class, not by parameter name: RegBench's blocks call theirs `layer`, and a name filter left
    Figure 2's d_model x n_heads grid out of the key (8 cases run of its 90 shapes)."""
    from tasks.bench_train import mixer_layers
    return tuple(sorted({(n.split(".")[-1], tuple(p.shape))
                         for m in mixer_layers(model) for n, p in m.named_parameters()}))
