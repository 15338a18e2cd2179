"""Checks that run before anything is trained: each failure is ONE line naming the fix."""
from __future__ import annotations

import netrc
import os
import re
import socket
from pathlib import Path
from urllib.parse import urlparse

import torch
from omegaconf import DictConfig, OmegaConf

from zeros.mixers import available_mixers, check_mixer_args

from .errors import ConfigError, short_reason
from .schema import check_values
from .store import CONF, KEYS_NOW_GROUPS, conf_dirs

# config groups whose choice on the command line is checked before Hydra composes
CHECKED_GROUPS = ("task", "backbone", "mixer", "optimizer", "scheduler", "trainer", "logger",
                  "profile", "experiment", "sweep", "mad_task")


def group_options(group: str) -> list[str]:
    return sorted({str(p.relative_to(d / group).with_suffix("")) for d in conf_dirs()
                   for p in (d / group).rglob("*.yaml")})  # conf/, then $ZEROS_CONF_PATH


def check_overrides(argv: list[str]) -> None:
    """`profile=fast` -> 'unknown profile 'fast': use one of cpu, paper, smoke'. Sweeps (a,b) too."""
    for arg in argv:
        if "=" not in arg or arg.startswith(("-", "hydra")):
            continue
        key, value = arg.split("=", 1)
        key = key.lstrip("+~")
        if key.startswith("override "):
            key = key.split(" ", 1)[1]
        if key not in CHECKED_GROUPS or value in ("null", "") or value.startswith("glob("):
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
                          "profile=cpu (PROFILE=cpu: the paper's effects at CPU size) or "
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
    if cfg.profile.name not in ("smoke", "paper") and not (CONF / "profile" /
                                                          f"{cfg.profile.name}.yaml").exists():
        raise ConfigError(f"unknown profile {cfg.profile.name!r}: use one of " + ", ".join(group_options("profile")))
    check_group_keys(cfg)
    t = cfg.task
    check_report(str(t.get("report") or "best"), OmegaConf.to_container(t.extra_metrics)
                 if t.get("extra_metrics") else None)


def check_group_keys(cfg: DictConfig) -> None:
    """`experiment=table1/mad task.mad_task=compression` would train compression under the
    chosen conf/mad_task/ file's column and heuristic: a key that became a group (store.
    KEYS_NOW_GROUPS) must agree with the group's choice (Hydra's, in a run of tasks.train)."""
    from hydra.core.hydra_config import HydraConfig
    choices = HydraConfig.get().runtime.choices if HydraConfig.initialized() else {}
    for key, group in KEYS_NOW_GROUPS.items():
        chosen, value = choices.get(group), OmegaConf.select(cfg, key)
        if chosen is not None and value is not None and str(value) != str(chosen):
            raise ConfigError(f"{key}={value} disagrees with {group}={chosen}: choose it as "
                              f"{group}={value} (conf/{group}/{value}.yaml)")


REPORTS = ("best", "last")
RESERVED = ("best", "final", "reported")  # snapshot names of metrics.* that extras cannot take


def check_report(report: str, extras: dict | None) -> None:
    """task.report / task.extra_metrics: one-line errors before anything is trained."""
    if report not in REPORTS:
        raise ConfigError(f"task.report={report!r}: use best (the best validation by "
                          "task.monitor, test on best.ckpt) or last (the last validation and weights)")
    for name, e in (extras or {}).items():
        if name in RESERVED or not isinstance(e, dict) or not e.get("metric") \
                or e.get("pick", "max") not in ("max", "min"):
            raise ConfigError(f"task.extra_metrics.{name}: use a name other than "
                              f"{'/'.join(RESERVED)} and {{metric: val/acc, pick: max|min}}")


WANDB_MODES = ("offline", "online", "disabled")


def _walk(node, prefix: str):
    for k, v in node.items():
        if isinstance(v, dict):
            yield from _walk(v, f"{prefix}.{k}")
        else:
            yield f"{prefix}.{k}", str(k), v


def check_data_dirs(cfg: DictConfig) -> None:
    """A data folder the user named (task.datamodule.data_dir / data_path / data.path) that does
    not exist is a typo, also when the files could be downloaded (a download needs a target);
    an existing but empty one is refused unless the datamodule downloads into it."""
    dm = cfg.task.get("datamodule")
    if dm is None:
        return
    values = OmegaConf.to_container(dm, resolve=True)
    download = bool(values.get("download", False))
    for key, name, value in _walk(values, "task.datamodule"):
        # data_path folders (MAD/MQAR caches) are created on first use: not checked
        if value in (None, "") or not (name == "data_dir" or key.endswith(".data.path")):
            continue
        p = Path(os.path.expanduser(str(value)))
        if not p.exists():
            raise ConfigError(f"data folder {p} ({key}) does not exist: fix the path "
                              f"(make ... DATA_DIR=/path) or create it (mkdir -p {p})")
        if p.is_dir() and not download and not any(p.iterdir()):
            raise ConfigError(f"data folder {p} ({key}) is empty: put the data files there "
                              "or fix the path")


def check_wandb(cfg: DictConfig, timeout: float = 3.0) -> None:
    """wandb.mode=online needs an API key and a reachable W&B host; found out here in at most
    `timeout` seconds instead of a UsageError traceback or a 2-minute hang inside wandb.init."""
    mode = str(cfg.wandb.get("mode"))
    if mode not in WANDB_MODES:
        raise ConfigError(f"unknown wandb.mode {mode!r}: use one of {', '.join(WANDB_MODES)}")
    if mode != "online" or not cfg.logger.get("wandb"):
        return
    host, port = wandb_host()
    back = "or go back to offline logging with wandb.mode=offline (sync later: make wandb-sync)"
    if not _wandb_key(cfg, host):
        raise ConfigError(f"wandb.mode=online but no W&B API key: run `wandb login` or set "
                          f"WANDB_API_KEY, {back}")
    reason = unreachable(host, port, timeout)
    if reason:
        raise ConfigError(f"wandb.mode=online but {host}:{port} is unreachable ({reason}): "
                          f"check the network, {back}")


def wandb_host() -> tuple[str, int]:
    base = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")
    url = urlparse(base if "://" in base else f"https://{base}")
    return url.hostname or "api.wandb.ai", url.port or (80 if url.scheme == "http" else 443)


def unreachable(host: str, port: int, timeout: float = 3.0) -> str | None:
    """None if a TCP connection opens within `timeout` s, else the reason in a few words. Behind
    an HTTPS proxy, wandb talks to the proxy: that is the connection that must open."""
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    if proxy:
        p = urlparse(proxy if "://" in proxy else f"http://{proxy}")
        host, port = p.hostname or host, p.port or 8080
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return None
    except OSError as e:
        return short_reason(e, 60)


def _wandb_key(cfg: DictConfig, host: str) -> bool:
    if cfg.wandb.get("api_key") or os.environ.get("WANDB_API_KEY") or \
            os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    path = Path(os.environ.get("NETRC", Path.home() / ".netrc")).expanduser()
    try:
        return path.is_file() and netrc.netrc(str(path)).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def check_before_run(cfg: DictConfig) -> None:
    """Everything a single run's command line can get wrong, before the run id is derived or any
    data/model is touched (tasks.train calls it first)."""
    check_values(cfg)
    check_config(cfg)
    check_data_dirs(cfg)
    check_wandb(cfg)


def single_run() -> bool:
    """True inside a Hydra single run (not a multirun job, not an in-process call): there a
    point the protocol lacks is the user's typo, not a Cartesian sweep point to skip."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.RUN


def check_composes(argv: list[str]) -> None:
    """A single run's overrides compose (a typo'd key such as optimizer.lrr=1, a parse error):
    Hydra itself reports these in several lines with exit 1. Multiruns are left to Hydra (their
    sweep syntax `a=1,2` does not compose as one config)."""
    if any(a in ("-m", "--multirun", "-cn", "-cp") or a.startswith("--config") for a in argv):
        return  # sweep syntax or another primary config: left to Hydra
    overrides = [a for a in argv if "=" in a and not a.startswith("-")]
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            compose("train", overrides=overrides)
    except HydraException as e:
        raise ConfigError(hydra_error_line(e)) from None


def hydra_error_line(e: Exception) -> str:
    """Hydra's several-line composition error as one line that names the fix."""
    lines = [ln.strip() for ln in str(e).splitlines()
             if ln.strip() and not ln.startswith((" ", "\t")) and "HYDRA_FULL_ERROR" not in ln]
    text = " ".join(lines[:3]) or type(e).__name__
    m = re.match(r"Could not override '([^']+)'", text)
    if m and "+" + m.group(1) in text:  # a key the config does not have: mostly a typo
        key = m.group(1)
        text = (f"unknown key {key}: check its spelling (`python -m tasks.train --cfg job` "
                f"prints every key), or add it as a new key with +{key}=...")
    if "Error parsing override" in text or " expecting {" in text:  # the grammar's token list
        head = lines[0] if "Error parsing override" in text else text.split(" expecting {")[0]
        text = head + ": quote the value (key='value') or see Hydra's override grammar"
    return text
