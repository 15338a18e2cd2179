"""The typed keys of the config groups as dataclasses: each field's type (OmegaConf checks it:
`int` refuses 1.5 and true, null only where Optional) and lowest value. check_values reads them
from the composed config, never changes it (no run id moves); why these are not group schemas in
Hydra's ConfigStore: docs/runs.md "One-line errors". A new key: one field below."""
from dataclasses import dataclass, field, fields
from typing import Optional

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import ValidationError

from .errors import ConfigError, short_reason


def ge(low, eg: str | None = None, gt: bool = False):
    """A number >= low (> low with gt); `eg`: the value an error suggests (else max(low, 1))."""
    return field(default=MISSING, metadata={"low": low, "gt": gt,
                                            "eg": eg or str(max(int(low), 1))})


@dataclass
class Run:
    seed: int = ge(0)


@dataclass
class Optimizer:
    lr: float = ge(0, "1e-3", gt=True)
    weight_decay: float = ge(0)
    eps: Optional[float] = ge(0, gt=True)


@dataclass
class Scheduler:
    warmup_steps: Optional[int] = ge(0)
    min_lr: Optional[float] = ge(0)
    min_lr_ratio: Optional[float] = ge(0)


@dataclass
class Trainer:  # a float limit / interval is a fraction of an epoch, an int a count (Lightning)
    max_steps: Optional[int] = ge(-1, "100")
    max_epochs: Optional[int] = ge(-1)
    gradient_clip_val: Optional[float] = ge(0)
    accumulate_grad_batches: int = ge(1)
    log_every_n_steps: Optional[int] = ge(1)
    val_check_interval: Optional[float] = ge(0, "0.5", gt=True)
    check_val_every_n_epoch: Optional[int] = ge(1)
    limit_train_batches: Optional[float] = ge(0, "0.5")
    limit_val_batches: Optional[float] = ge(0, "0.5")
    limit_test_batches: Optional[float] = ge(0, "0.5")
    num_nodes: int = ge(1)


@dataclass
class Backbone:
    d_model: Optional[int] = ge(1)
    n_layers: Optional[int] = ge(1)
    n_heads: Optional[int] = ge(1)


@dataclass
class DataModule:
    batch_size: Optional[int] = ge(1)
    eval_batch_size: Optional[int] = ge(1)
    num_workers: Optional[int] = ge(0)
    num_train: Optional[int] = ge(1)
    num_val: Optional[int] = ge(1)
    num_test: Optional[int] = ge(1)


GROUPS = {"": Run, "optimizer.": Optimizer, "scheduler.": Scheduler, "trainer.": Trainer,
          "backbone.": Backbone, "task.datamodule.": DataModule}
_ABSENT = object()


def check_values(cfg: DictConfig) -> None:
    """'No training' settings first (smoke's val_check_interval follows max_steps, so max_steps=0
    would otherwise be reported as a bad interval), then the keys each dataclass has."""
    _check_training_length(cfg.trainer)
    for prefix, schema in GROUPS.items():
        spec = {f.name: f for f in fields(schema)}
        values = {k: v for k in spec if (v := _select(cfg, prefix + k)) is not _ABSENT}
        for k, v in values.items():  # OmegaConf takes "5" as 5: a quoted number stays an error
            if isinstance(v, str):
                raise _not_a(spec[k], prefix, v)
        try:  # the types, by OmegaConf
            node = OmegaConf.merge(OmegaConf.structured(schema), values)
        except ValidationError as e:
            raise _not_a(spec[e.key], prefix, values[e.key]) from None
        for k in values:  # the lowest values
            low, gt, eg = (spec[k].metadata[m] for m in ("low", "gt", "eg"))
            if node[k] is not None and (node[k] < low or gt and node[k] == low):
                raise ConfigError(f"{prefix}{k}={values[k]} is out of range: it must be "
                                  f"{'>' if gt else '>='} {low} (e.g. {prefix}{k}={eg})")


def _select(cfg: DictConfig, key: str):
    try:  # key by key: an unresolvable key that no dataclass has is no error here
        return OmegaConf.select(cfg, key, default=_ABSENT)
    except Exception as e:
        raise ConfigError(f"{key} does not resolve ({short_reason(e)}): fix its value") from None


def _not_a(f, prefix: str, value) -> ConfigError:
    key, kind = prefix + f.name, "an integer" if "int" in str(f.type) else "a number"
    if value is None:
        return ConfigError(f"{key}=null is not allowed: set {key} to {kind}")
    return ConfigError(f"{key}={value!r} is not {kind}: e.g. {key}={f.metadata['eg']}")


def _check_training_length(t: DictConfig) -> None:
    for key in ("max_steps", "max_epochs", "limit_train_batches"):
        value = t.get(key)
        if value == 0 and not isinstance(value, bool):
            raise ConfigError(f"no training: trainer.{key}=0 trains nothing, and the result would "
                              f"record an untrained model: use trainer.{key}>0 (or drop it)")
    if t.get("max_steps") in (-1, None) and t.get("max_epochs") == -1:
        raise ConfigError("no end: trainer.max_steps=-1 and trainer.max_epochs=-1 train forever: "
                          "set trainer.max_steps or trainer.max_epochs > 0")
