"""`make plan`: the fast job list (compose once per group choice, derive the points) gives the
same run ids, result paths and protocol points as composing every job in full."""
from __future__ import annotations

import random

import pytest

from tasks.common import plan
from tasks.common.provenance import composer, job_paths, sweep_jobs


def _check_sample(table_file: str, profile: str, extra: list[str], n: int = 6):
    jobs, points = plan.plan(table_file.split("/")[0], profile, [table_file], extra, procs=1)
    with composer() as compose:
        every = sweep_jobs(table_file, profile, extra, compose)
        assert points == len(every)
        assert [j.overrides for j in jobs] == [p for p in every if p in
                                               [j.overrides for j in jobs]]
        for job in random.Random(0).sample(jobs, min(n, len(jobs))):
            rid, result, rdir = job_paths(job.overrides, compose)  # the slow path: a full compose
            assert (job.run_id, job.result, job.rdir) == (rid, result, rdir)
    return jobs, points


def test_plan_ids_equal_full_compose_table1_paper():
    # mixer is a config group (composed per choice); lr, wd, task, setting are applied in place
    jobs, points = _check_sample("table1/mad", "paper",
                                 ["mixer=zeros,gla", "mad_task=compression"])
    assert points == 2 * 27 * 6
    assert len(jobs) == 2 * 11 * 6  # compression has 11 of the 27 setting ids


@pytest.mark.parametrize("exp,profile", [("table4/decoder", "paper"),
                                         ("fig2/regbench", "paper"), ("toy/recall", "smoke"),
                                         ("table1/mad", "cpu")])
def test_plan_ids_equal_full_compose(exp, profile):
    jobs, points = _check_sample(exp, profile, [], n=4)
    assert jobs


@pytest.mark.slow
def test_plan_ids_equal_full_compose_fig3_paper():
    _check_sample("fig3/mqar", "paper", [], n=4)


def test_plan_in_a_process_pool_equals_plan_in_one_process(monkeypatch):
    # large grids (table1 at paper: 2,916 points) are derived by a fork pool; small chunks take
    # this grid there too. The pool once lost Hydra before its first compose (`make plan
    # TABLE=table1 PROFILE=paper`: "GlobalHydra is not initialized")
    one, n1 = plan.plan("toy", "smoke", ["toy/recall"], ["mixer=zeros,softmax"], procs=1)
    monkeypatch.setattr(plan, "CHUNK", 1)
    pool, n2 = plan.plan("toy", "smoke", ["toy/recall"], ["mixer=zeros,softmax"], procs=2)
    assert n1 == n2 >= 2 * plan.CHUNK
    assert [(j.run_id, j.overrides) for j in pool] == [(j.run_id, j.overrides) for j in one]


def test_plan_leaves_out_sweep_points_the_protocol_lacks():
    from tasks.mad.data import MADDataModule
    assert MADDataModule.in_protocol("compression", "V32")
    assert not MADDataModule.in_protocol("compression", "noise0.4")  # a noisy-recall setting


def test_plan_wall_estimate_layouts():
    def job(task, minutes):
        return plan.Job([], "x", None, None, task, None, minutes)
    jobs = [job("mad", 10.0) for _ in range(16)]
    assert plan.gpu_wall(jobs, 1, 1)[0] == 160
    assert plan.gpu_wall(jobs, 1, 4)[0] == 40
    assert plan.gpu_wall(jobs, 8, 2)[0] == 10
    lm = [job("lm_wikitext103", 60.0) for _ in range(3)]  # whole GPUs: runs_per_gpu is ignored
    assert plan.gpu_wall(lm, 1, 8)[0] == 180


def test_plan_skips_a_file_without_rows_at_the_profile(monkeypatch):
    """ablation at cpu is MAD's recall ablation: ablation/lm says `mixers.cpu: null` (it would
    otherwise inherit Table 2's cpu rows and train them as ablation runs)."""
    from tasks.common.errors import NoRows
    with composer() as compose:
        with pytest.raises(NoRows, match="ablation/lm.yaml has no rows for profile=cpu"):
            sweep_jobs("ablation/lm", "cpu", [], compose)
    asked = []

    def expand(exp, profile, extra, compose):
        asked.append(exp)
        if exp == "ablation/lm":
            raise NoRows("no rows")
        return [], 0
    monkeypatch.setattr(plan, "expand_file", expand)
    assert plan.plan("ablation", "cpu", ["ablation/lm", "ablation/mad"], []) == ([], 0)
    assert asked == ["ablation/lm", "ablation/mad"]
    with pytest.raises(NoRows):  # no file with rows: the one-line error stands
        plan.plan("ablation", "cpu", ["ablation/lm"], [])


def test_node_cache_follows_interpolations_transitively_and_through_resolver_arguments():
    from omegaconf import OmegaConf
    cfg = OmegaConf.create({"a": {"x": 1}, "b": {"v": "${c.y}"}, "c": {"y": "${a.x}"},
                            "d": {"v": "${oc.select:'a.x',0}"}, "e": {"v": 5},
                            "hydra": {"k": 1}, "f": {"v": "${hydra:k}"}})
    nodes = plan.NodeCache(cfg, ["a.x"])
    assert nodes.deps["b"] == nodes.deps["c"] == nodes.deps["d"] == (0,) and nodes.deps["e"] == ()
    assert nodes.deps["f"] is None  # reaches hydra: resolved at every point
    for x in (1, 2, 1):
        cfg.a.x = x
        r = nodes.resolve(cfg, [f"a.x={x}"], only=["b", "c", "d", "e"])  # (no hydra resolver)
        assert r["b"]["v"] == r["c"]["y"] == r["d"]["v"] == x and r["e"]["v"] == 5


def test_plan_ids_equal_resolving_the_whole_config_at_every_point():
    """Every point of a group (not a sample): NodeCache's run ids and run dirs equal those of
    the whole config resolved at that point, and the same points are in the protocol."""
    from omegaconf import OmegaConf

    from tasks.common.store import make_run_id, run_dir
    with composer() as compose:
        chunks, _ = plan.expand_file("table1/mad", "paper", [
            "mixer=gla", "mad_task=compression,in-context-recall"], compose)
        for chunk in chunks:
            jobs = dict(plan.derive(chunk, compose))
            gkey, points, _ = chunk
            cfg = compose(list(gkey), hydra=True)
            kept = []
            for i, _, plain in points:
                for key, value, _ in plain:
                    OmegaConf.update(cfg, key, value, merge=True)
                dm = OmegaConf.to_container(cfg.task.datamodule, resolve=True)
                if plan.in_protocol_dm(dm):
                    kept.append(i)
                    rid = make_run_id(cfg)
                    assert (jobs[i].run_id, jobs[i].rdir) == (rid, run_dir(cfg, rid))
            assert sorted(jobs) == kept and kept
