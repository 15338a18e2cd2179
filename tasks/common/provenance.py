"""Which runs a table may take, and which runs a table's experiment files make.

A run belongs to its table ("protocol") only when its config is what the experiment file gives
at that profile for one sweep point: every hydra.sweeper.params key has one of its sweep values,
and the command line changed nothing else that counts for the run id (store.is_non_identity).
Anything else is "adhoc": its JSON goes to results/runs/adhoc/<table>/ and no table reads it.
`sweep_jobs` expands an experiment file into its jobs the way Hydra's BasicSweeper does (used by
`make reproduce-*` for the progress bar and by `make status`).
"""
from __future__ import annotations

import copy
import functools
import itertools
from contextlib import contextmanager
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Glob
from omegaconf import DictConfig, OmegaConf

from .errors import ConfigError, NoRows
from .store import (CONF, KEYS_NOW_GROUPS, conf_dirs, conf_glob, current_id, is_non_identity,
                    make_run_id, read_result, result_path, run_dir, searchpath_overrides,
                    table_name)

_FREE = ("experiment", "profile")  # the two choices `make reproduce-<table>` itself passes
OVERRIDES = OverridesParser.create()  # Hydra's override parser (it keeps no state between calls)


def _hydra_node(cfg: DictConfig):
    """The job's Hydra config: cfg.hydra (composed with return_hydra_config=True) or the running
    job's HydraConfig; None for an in-process run(cfg) of a plain composed config."""
    if "hydra" in cfg:
        return cfg.hydra
    from hydra.core.hydra_config import HydraConfig
    return HydraConfig.get() if HydraConfig.initialized() else None


def _plain(cfg: DictConfig):
    """The config without its hydra node as a non-struct copy: sweep strings resolve against it."""
    return OmegaConf.create(OmegaConf.to_container(
        OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), resolve=False))


def sweep_params(cfg: DictConfig, hydra_node=None) -> dict[str, str]:
    """hydra.sweeper.params as override values, interpolations resolved against the job's config
    (experiment files write `mixer: ${mixers.${profile.name}}`)."""
    hydra_node = hydra_node if hydra_node is not None else _hydra_node(cfg)
    params = hydra_node.sweeper.get("params") if hydra_node is not None else None
    raw = OmegaConf.to_container(params, resolve=False) if params is not None else {}
    out, plain = {}, None
    for k, v in (raw or {}).items():
        if "${" in str(v):
            plain = plain if plain is not None else _plain(cfg)
            plain["__sweep__"] = v
            v = plain["__sweep__"]
        out[str(k)] = str(v)
    return out


def _sweep_strings(ov) -> list[str]:
    """A sweep override's values as strings; `glob(...)` over a config group (conf/sweep/
    all_mixers.yaml: every conf/mixer/ file but the ablation's variants) is filtered against the
    group's files, as Hydra's BasicSweeper does with the config loader's group options."""
    if isinstance(ov.value(), Glob):
        group = ov.get_key_element().lstrip("+~")
        return ov.value().filter(sorted({p.stem for p in conf_glob(group, "*.yaml")}))
    return list(ov.sweep_string_iterator())


def _values(key: str, value: str) -> list:
    ov = OVERRIDES.parse_override(f"{key}={value}")
    if ov.is_sweep_override():
        return _sweep_strings(ov) if isinstance(ov.value(), Glob) else list(ov.sweep_iterator())
    return [ov.value()]


def _same(a, b) -> bool:
    num = (int, float)
    if isinstance(a, num) and isinstance(b, num) and not isinstance(a, bool) and not isinstance(b, bool):
        return float(a) == float(b)
    return str(a) == str(b)


def classify(cfg: DictConfig) -> dict:
    """{"kind": "protocol" | "adhoc" | "unchecked", ...} for a run of this config."""
    hn = _hydra_node(cfg)
    if not cfg.meta.get("table"):
        return {"kind": "adhoc", "overrides": list(hn.overrides.task) if hn else []}
    if hn is None:  # the Python API without Hydra's overrides: nothing to check against
        return {"kind": "unchecked"}
    choices = OmegaConf.to_container(hn.runtime.choices) if "runtime" in hn else {}
    params = sweep_params(cfg, hn)
    given = {OVERRIDES.parse_override(t).key_or_group: t for t in hn.overrides.task}
    point, bad, grid = {}, [], {}
    for key, value in params.items():
        job = choices[key] if key in choices else OmegaConf.select(cfg, key)
        point[key] = job
        if not any(_same(job, v) for v in _values(key, value)):  # off the grid
            bad.append(given.get(key, f"{key}={job}"))
            grid[key] = value  # the note names the protocol's values (an lr typed to 6 digits)
    bad += [t for k, t in given.items()
            if k not in _FREE and k not in params and not is_non_identity(k)]
    info = {"experiment": choices.get("experiment"), "profile": str(cfg.profile.name)}
    if bad:
        return {"kind": "adhoc", "overrides": bad, **info, **({"grid": grid} if grid else {})}
    return {"kind": "protocol", **info, "sweep": point}


def protocol_overrides(provenance: dict) -> list[str]:
    """The overrides that compose a protocol run again from its recorded provenance (classify's
    experiment, profile and sweep point; a key that became a group since: by its group)."""
    return [f"experiment={provenance['experiment']}", f"profile={provenance['profile']}",
            *(f"{KEYS_NOW_GROUPS.get(k, k)}={v}" for k, v in (provenance.get("sweep") or {}).items())]


def _grid_text(prov: dict) -> str:
    grid = prov.get("grid") or {}
    return "".join(f"; its {k} is one of {v}" for k, v in grid.items())


def for_run(cfg: DictConfig, run_id: str) -> tuple[dict, Path]:
    """(provenance, result JSON path) of a run; says so when a table's run will not enter it."""
    prov = classify(cfg)
    out = result_path(cfg, run_id, adhoc=prov["kind"] == "adhoc")
    if prov["kind"] == "adhoc" and table_name(cfg) != "adhoc":
        print(f"note: ad-hoc run ({' '.join(prov['overrides'])} is not the {table_name(cfg)} "
              f"protocol at profile {cfg.profile.name}{_grid_text(prov)}): it will not enter the "
              f"table; result goes to {out}", flush=True)
    return prov, out


@contextmanager
def composer():
    """compose(overrides, hydra=True) with conf/ loaded once (one Hydra init for many jobs)."""
    from hydra import compose, initialize_config_dir
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        extra = searchpath_overrides()  # $ZEROS_CONF_PATH's folders, where set
        yield lambda ov, hydra=False: compose("train", overrides=[*extra, *ov],
                                              return_hydra_config=hydra)


def older_config(files, bare_is_older: bool = True) -> set[str]:
    """The run ids among these result JSONs that a run of today's config would not reproduce: the
    run's protocol point (its provenance: experiment, profile, sweep) composed with today's conf/
    gets another id than the one recomputed from the config the run stored (so a mere change of
    the id rules, `make rekey`, does not count). Unreadable or ad-hoc JSONs, and runs that stored a
    config but no provenance (code before it), count as older; a JSON with neither (made by hand)
    too unless bare_is_older=False (tables: nothing to judge it by). Hydra is started only if a
    run's protocol point was not met before in this process, and composes once per set of group
    choices (split_groups: ~0.4-0.7 s a compose here; a run's lr, seed, d_model are set on a copy)."""
    older, todo = set(), []
    for f in files:
        try:
            d = read_result(f)
            p = d.get("provenance") or {}
            if p.get("kind") == "protocol":
                todo.append((d, p))
            elif "config" in d or p or bare_is_older:
                older.add(d["run_id"])
        except Exception:  # noqa: BLE001  (unreadable: not a run of today's config)
            older.add(Path(f).stem)
    key = lambda p: (*searchpath_overrides(), *protocol_overrides(p))  # noqa: E731
    if need := {key(p): p for _, p in todo if key(p) not in _TODAY_ID}:
        with composer() as compose:
            bases: dict[tuple, DictConfig | None] = {}  # group choices -> their composed config
            for k, p in need.items():
                groups, values = split_groups(protocol_overrides(p))
                try:
                    if groups not in bases:
                        bases[groups] = None  # a group set today's conf/ no longer composes
                        bases[groups] = compose(list(groups))
                    _TODAY_ID[k] = make_run_id(with_values(bases[groups], values))
                except Exception:  # noqa: BLE001  (a point today's conf/ no longer composes)
                    _TODAY_ID[k] = None
    for d, p in todo:
        try:
            if _TODAY_ID[key(p)] != current_id(d):
                older.add(d["run_id"])
        except Exception:  # noqa: BLE001  (a stored config today's id rules cannot read)
            older.add(d["run_id"])
    return older


def chooses_group(ov, groups) -> bool:
    """Whether Hydra applies this parsed override while composing the defaults list (a group
    choice, a +/~ edit) rather than setting it on the composed config afterwards, as it does a
    plain `key=value` (ConfigLoaderImpl._apply_overrides_to_config, hydra-core 1.3)."""
    return ov.get_key_element().lstrip("+~") in groups or ov.package is not None \
        or ov.is_add() or ov.is_delete() or ov.is_force_add()


def split_groups(overrides: list[str]) -> tuple[tuple[str, ...], list]:
    """(the overrides that compose, the parsed plain ones to set after: with_values). Runs that
    differ in plain values only (lr, seed, d_model: most of a table) compose once."""
    groups = group_names()
    fixed, plain = [], []
    for ov in OVERRIDES.parse_overrides(overrides):
        (fixed.append(ov.input_line) if chooses_group(ov, groups) else plain.append(ov))
    return tuple(fixed), plain


def group_names() -> set[str]:
    """The config groups (conf/'s folders, e.g. `mixer`, `hydra/launcher`), the one place both
    split_groups and the planner learn which override keys name a group."""
    return _group_dirs(tuple(conf_dirs()))


@functools.lru_cache(maxsize=4)
def _group_dirs(dirs: tuple[Path, ...]) -> set[str]:
    return {str(p.relative_to(d)) for d in dirs for p in d.rglob("*") if p.is_dir()}


def with_values(base: DictConfig, values: list) -> DictConfig:
    """A copy of base with the plain overrides set as Hydra sets them (OmegaConf.update, merge)."""
    cfg = copy.deepcopy(base)
    for ov in values:
        OmegaConf.update(cfg, ov.key_or_group, ov.value(), merge=True)
    return cfg


# protocol point -> the id today's conf/ gives it, per process (a CLI reads conf/ once): `make
# tables` meets most runs twice (yours and the reference's copy), `make reference` too
_TODAY_ID: dict[tuple, str | None] = {}


def profile_rows(cfg: DictConfig) -> dict:
    """The experiment's rows per profile: `mixers`, or `backbones` (Table 4's baselines)."""
    return cfg.get("mixers") or cfg.get("backbones") or {}


def offers_profile(cfg: DictConfig, profile: str) -> bool:
    """smoke and paper run every experiment; another profile (cpu) only where it has rows."""
    rows = profile_rows(cfg)  # `mixers.cpu: null` says "no cpu rows" where a parent file has some
    return bool(rows.get(profile)) or (not rows and profile in ("smoke", "paper"))


def sweep_jobs(experiment: str, profile: str, extra: list[str], compose) -> list[list[str]]:
    """Each job's override list, as Hydra's BasicSweeper builds it: the config's sweep params
    first, then the command line (a command-line key replaces the config's grid of that key)."""
    base = [f"experiment={experiment}", f"profile={profile}", *extra]
    fixed = [t for t in base if not OVERRIDES.parse_override(t).is_sweep_override()]
    cfg = compose(fixed, hydra=True)  # as Hydra loads a sweep's config: without the sweeps
    if not offers_profile(cfg, profile):
        rows = profile_rows(cfg)
        have = "|".join(rows) or "smoke|paper"
        raise NoRows(f"conf/experiment/{experiment}.yaml has no rows for profile={profile} "
                          f"(mixers.{profile}): use PROFILE={have}, or add `mixers.{profile}` "
                          f"and conf/task_profile/<task>_{profile}.yaml")
    params = [f"{k}={v}" for k, v in sweep_params(cfg).items()]
    return split_sweep(params + base)


def split_sweep(overrides: list[str]) -> list[list[str]]:
    """The Cartesian product of the overrides, as Hydra's BasicSweeper.split_arguments builds it
    (hydra/_internal/core_plugins/basic_sweeper.py, hydra-core 1.3): one list per key, a later
    key replaces an earlier one in the earlier one's place; through the public override parser."""
    lists: dict[str, list[str]] = {}
    for ov in OVERRIDES.parse_overrides(overrides):
        key = ov.get_key_element()
        if ov.is_sweep_override():
            if not ov.is_discrete_sweep():
                raise ConfigError(f"{key}: only discrete sweeps (a,b,c) are expanded here")
            lists[key] = [f"{key}={v}" for v in _sweep_strings(ov)]
        else:
            lists[key] = [f"{key}={ov.get_value_element_as_str()}"]
    return [list(x) for x in itertools.product(*lists.values())]


def job_paths(overrides: list[str], compose) -> tuple[str, Path, Path]:
    """(run id, result JSON, run dir) of one job: what runner.run will use for it."""
    cfg = compose(overrides, hydra=True)
    rid = make_run_id(cfg)
    return rid, result_path(cfg, rid, adhoc=classify(cfg)["kind"] == "adhoc"), run_dir(cfg, rid)
