"""Each protocol value and each paper number is written once, in conf/: every experiment file
composes under every profile (its sweep resolves, its rows exist), and no code under tasks/
restates a paper number or an experiment's optimisation setting."""
from __future__ import annotations

import itertools
import re

import pytest
import yaml
from omegaconf import OmegaConf

from tasks.common.provenance import offers_profile

from framework_helpers import CONF, REPO

EXPERIMENTS = sorted(str(p.relative_to(CONF / "experiment").with_suffix(""))
                     for p in (CONF / "experiment").rglob("*.yaml"))
PROFILES = sorted(p.stem for p in (CONF / "profile").glob("*.yaml"))
CODE = {p: p.read_text() for p in (REPO / "tasks").rglob("*") if p.suffix in (".py", ".md")}


def _compose(overrides):
    from hydra import compose, initialize_config_dir
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=overrides, return_hydra_config=True)


@pytest.mark.parametrize("exp,profile", list(itertools.product(EXPERIMENTS, PROFILES)))
def test_every_experiment_composes_under_every_profile(exp, profile):
    cfg = _compose([f"experiment={exp}", f"profile={profile}"])
    assert cfg.profile.name == profile
    if not offers_profile(cfg, profile):
        # the reproduce driver refuses it with one line (test_framework_configs checks that)
        pytest.skip(f"{exp} has no rows at profile={profile}")
    assert (CONF / "table" / f"{cfg.meta.table}.yaml").is_file(), f"{exp}: no table spec"
    sweep = OmegaConf.to_container(cfg.hydra.sweeper.params, resolve=True) or {}
    choices = cfg.hydra.runtime.choices  # swept groups (mixer, backbone, automata, ...): their
    for group in [k for k in sweep if k in choices]:  # options exist in conf/<group>/
        for name in str(sweep[group]).split(","):
            if name:
                assert (CONF / group / f"{name}.yaml").is_file(), f"{exp}: {group}={name}"
    for key in ("meta.row", "meta.column", "meta.setting"):  # interpolations resolve
        assert OmegaConf.select(cfg, key, throw_on_missing=True) is not None


def _paper_numbers() -> set[str]:
    """The paper's numbers of every table, as written, when distinctive enough to grep (three
    significant digits or more: 23.91, 0.218, 51.6; not 6.0 or 100)."""
    out: set[str] = set()

    def walk(x):
        if isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, float) and len(f"{x}".replace(".", "").strip("0")) >= 3:
            out.add(f"{x}")
    for p in (CONF / "table").glob("*.yaml"):
        walk((yaml.safe_load(p.read_text()) or {}).get("paper"))
    return out


def test_no_paper_number_outside_conf():
    nums = _paper_numbers()
    assert len(nums) > 50  # the tables' paper sections were read
    hits = [f"{p.relative_to(REPO)}: {n}" for p, text in CODE.items() for n in nums
            if re.search(r"(?<![\d.])" + re.escape(n) + r"(?!\d)", text)]
    assert not hits, f"paper numbers restated outside conf/table: {hits}"


def test_no_optimisation_setting_of_an_experiment_in_code():
    """lr / weight decay / warmup of every experiment at profile=paper are set in conf/ only: a
    task module that defaults `lr=5e-4` (a second copy of Table 2's protocol) fails here."""
    values: set[float] = set()
    for exp in EXPERIMENTS:
        cfg = _compose([f"experiment={exp}", "profile=paper"])
        for key in ("optimizer.lr", "optimizer.weight_decay", "scheduler.warmup_steps",
                    "scheduler.warmup_init_lr", "scheduler.min_lr"):
            v = OmegaConf.select(cfg, key)
            if isinstance(v, (int, float)) and v not in (0, 1):
                values.add(float(v))
    pattern = re.compile(r"\b(lr|learning_rate|weight_decay|wd|warmup\w*|min_lr)\b\s*[:=]\s*"
                         r"([0-9][0-9_.]*(?:e-?\d+)?)")
    hits = [f"{p.relative_to(REPO)}: {m.group(0)}" for p, text in CODE.items()
            for m in pattern.finditer(text) if float(m.group(2).replace("_", "")) in values]
    assert not hits, f"experiment settings restated in tasks/: {hits}"


def test_every_task_package_names_its_roles_the_same():
    """conf/task/*.yaml and the backbones point into <package>.data / .objective / .model: one
    layout per task package (tasks/README.md), so a reader finds the same role in the same file."""
    targets = []
    for p in list((CONF / "task").glob("*.yaml")) + list((CONF / "experiment").rglob("*.yaml")) \
            + list((CONF / "backbone").glob("*.yaml")):
        targets += re.findall(r"_target_:\s*(tasks\.\S+)", p.read_text())
    assert len(targets) > 10
    bad = [t for t in targets if not t.startswith("tasks.common.")
           and t.split(".")[2] not in ("data", "objective", "model")]
    assert not bad, f"targets outside the data/objective/model layout: {bad}"


# `${table.${key}}` / `${oc.select:table.${key},...}`: a value looked up in a top-level table by
# another value. A choice that follows a swept value is a config group instead (conf/length/,
# conf/automata/, conf/row_model/<task>_<mixer>.yaml: docs/framework.md "Per-row and per-setting
# choices"), so the table never enters the resolved config and the run id.
_LOOKUP = re.compile(r"\$\{(?:oc\.select:)?'?([A-Za-z_]\w*)\.[^{}]*\$\{")
# the rows per profile, read only by the sweeper (not identity: store.NON_IDENTITY_TOP)
_ROWS_PER_PROFILE = {"mixers", "backbones", "mad_tasks"}


def lookup_tables(text: str) -> set[str]:
    """The top-level names a config text reads through a nested interpolation or oc.select."""
    names = set(_LOOKUP.findall(text))
    names |= set(re.findall(r"\$\{oc\.select:'?([A-Za-z_]\w*)", text))
    return names


def test_no_experiment_reads_a_top_level_lookup_table():
    assert lookup_tables("a: ${mqar_rows.${mixer.name}.pos_emb}") == {"mqar_rows"}
    assert lookup_tables("a: ${oc.select:regbench_row.ffn,true}") == {"regbench_row"}
    found = {}
    for p in (CONF / "experiment").rglob("*.yaml"):
        for name in lookup_tables(p.read_text()) - _ROWS_PER_PROFILE:
            found.setdefault(name, []).append(str(p.relative_to(CONF)))
    assert not found, f"lookup tables (make them a config group): {found}"


def test_no_task_profile_reads_a_lookup_table():
    # issue 30: the last ones (MAD's caps and task lists) became conf/mad_task_profile/ and the
    # experiments' `mad_tasks`, the cpu minutes conf/estimates.yaml; an old run's stored node is
    # not hashed into its id (store.RETIRED_KEYS)
    found = {str(p.relative_to(CONF)): sorted(lookup_tables(p.read_text()))
             for p in (CONF / "task_profile").glob("*.yaml") if lookup_tables(p.read_text())}
    assert not found, f"lookup tables (make them a config group): {found}"


def test_the_repository_root_is_computed_once():
    # store.ROOT is the one place; a module computing its own from __file__ drifts when moved
    own = [str(p.relative_to(REPO)) for p, text in CODE.items() if p.suffix == ".py"
           and re.search(r"Path\(__file__\)\.resolve\(\)\.parents\[", text)]
    assert own == ["tasks/common/store.py"], own
