"""Figure 2's number of training automata is a config group (conf/automata/N<n>.yaml) whose choice
names what a run trains: the multirun label `automata=N64` of a smoke run trains 64 automata
(issue 34: Hydra printed automata=N2500..N40000 while the smoke runs trained 64..1024)."""
import math
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tasks.common.provenance import composer, sweep_jobs

CONF = Path(__file__).resolve().parents[2] / "conf"
PAPER = ["N2500", "N5000", "N10000", "N20000", "N40000"]  # seq_icl configs/dataset/icl_dfa.yaml
SIZES = {"smoke": ["N64", "N128", "N256", "N512", "N1024"], "cpu": ["N2500", "N5000"],
         "paper": PAPER}


def _label(job: list[str]) -> str:
    return next(t.split("=", 1)[1] for t in job if t.startswith("automata="))


@pytest.mark.parametrize("profile", sorted(SIZES))
def test_fig2_sweep_labels_name_the_automata_each_run_trains(profile):
    with composer() as compose:
        jobs = sweep_jobs("fig2/regbench", profile, [], compose)
        first = {}  # one job per label (the paper grid has 6000): the label is what differs
        for job in jobs:
            first.setdefault(_label(job), job)
        assert list(first) == SIZES[profile]
        for label, job in first.items():
            cfg = compose(job)
            assert cfg.task.datamodule.num_train == int(label[1:]), (profile, job)
            assert cfg.meta.setting == label  # the figure's x axis and the run id's setting


@pytest.mark.parametrize("profile,num_train,warmup", [
    ("smoke", 64, 4), ("cpu", 2500, 16), ("paper", 2500, 1580)])
def test_fig2_single_run_trains_its_profiles_default_set(profile, num_train, warmup):
    # the task profile's own warmup (smoke 4, cpu 16) wins over the group's protocol warmup
    with composer() as compose:
        cfg = compose(["experiment=fig2/regbench", f"profile={profile}"], hydra=True)
    assert cfg.hydra.runtime.choices.automata == f"N{num_train}"
    assert (cfg.task.datamodule.num_train, cfg.scheduler.warmup_steps) == (num_train, warmup)


def test_automata_files_hold_their_size_and_seq_icl_warmup():
    # seq_icl warms up over 20 of 200 epochs; an epoch is ceil(N / 32) steps at batch 32
    files = {p.stem: OmegaConf.load(p) for p in (CONF / "automata").glob("*.yaml")}
    assert sorted(files, key=lambda s: int(s[1:])) == SIZES["smoke"] + PAPER
    for name, c in files.items():
        n = int(name[1:])
        assert c.task.datamodule.num_train == n
        assert c.scheduler.warmup_steps == math.ceil(n / 32) * 20, name


def test_a_run_stored_with_the_old_lookup_keys_rekeys_to_todays_id():
    # before conf/automata/, a smoke run of 128 automata stored `automata: N5000`, the
    # `regbench_sizes` table and task.smoke_num_train: store.RETIRED_KEYS leaves them out
    from tasks.common.store import current_id, make_run_id
    with composer() as compose:
        cfg = compose(["experiment=fig2/regbench", "profile=smoke", "automata=N128"])
    old = OmegaConf.to_container(cfg, resolve=True)
    old["automata"] = "N5000"
    old["regbench_sizes"] = {"N5000": {"num_train": 5000, "warmup_steps": 3140,
                                       "smoke_num_train": 128}}
    old["task"]["smoke_num_train"] = 128
    assert current_id({"config": old}) == make_run_id(cfg)
    old["task"]["datamodule"]["num_train"] = 256  # the test can fail: a trained key counts
    assert current_id({"config": old}) != make_run_id(cfg)
