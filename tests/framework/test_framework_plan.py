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
                                 ["mixer=zeros,gla", "task.mad_task=compression"])
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
