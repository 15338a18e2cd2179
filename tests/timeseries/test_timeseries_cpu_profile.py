"""profile=cpu for Table 4: the paper's protocol (lookbacks, early stopping, epochs) on ETTh1 and
ETTh2, rows ZeroS / Transformer / DLinear, and an expected time for every run."""
import pytest

from tasks.common.plan import cpu_minutes
from tasks.common.provenance import composer, job_paths, sweep_jobs

LOOKBACKS = {96: 1024, 192: 2048, 336: 2048, 720: 4096}  # the paper's (conf/task/timeseries.yaml)


@pytest.fixture(scope="module")
def compose():
    with composer() as c:
        yield c


def _baseline_jobs(compose):
    return sweep_jobs("table4/baselines", "cpu", [], compose)


def test_cpu_decoder_sweep_is_both_datasets_all_horizons_two_rows(compose):
    jobs = sweep_jobs("table4/decoder", "cpu", [], compose)
    points = {(j[0], j[1], j[2]) for j in jobs}
    assert len(jobs) == 48 and len(points) == 16  # 3 seeds each
    cfgs = [compose(j) for j in jobs]
    assert {c.meta.row for c in cfgs} == {"ZeroS", "Transformer"}
    assert {c.task.dataset for c in cfgs} == {"ETTh1", "ETTh2"}


@pytest.mark.parametrize("exp", ["decoder", "baselines"])
def test_cpu_runs_are_the_papers_protocol(compose, exp):
    jobs = sweep_jobs(f"table4/{exp}", "cpu", [], compose)
    assert len(jobs) == 3 * (16 if exp == "decoder" else 8)  # 3 seeds (issue 28)
    for job in jobs:
        cfg = compose(job)
        h = cfg.task.horizon
        assert cfg.task.lookback == "protocol" and cfg.meta.setting == f"h{h}_Lprotocol"
        assert cfg.task.protocol_lookbacks[h] == LOOKBACKS[h]
        t = cfg.trainer
        assert t.max_epochs == 100 and t.get("max_steps", -1) in (-1, None)
        assert t.get("limit_train_batches") in (None, 1.0)
        assert cfg.task.patience == 12 and cfg.task.monitor == "val/mse"
        assert cfg.profile.name == "cpu" and t.precision == "32-true"
        # the decoder rows train with the authors' update (bf16 + clip on the scaled gradients)
        assert cfg.get("clip_scaled_grads", False) == (exp == "decoder")


def test_every_cpu_run_has_an_expected_time_and_an_adhoc_lookback_has_none(compose):
    jobs = sweep_jobs("table4/decoder", "cpu", [], compose) + _baseline_jobs(compose)
    minutes = [cpu_minutes(compose(j)) for j in jobs]
    assert all(isinstance(m, float) and m > 0 for m in minutes), minutes
    adhoc = ["experiment=table4/decoder", "profile=cpu", "task.lookback=512"]
    assert cpu_minutes(compose(adhoc)) is None and "adhoc" in str(job_paths(adhoc, compose)[1])


def test_baseline_rows_at_cpu_are_dlinear(compose):
    cfg = compose(["experiment=table4/baselines", "profile=cpu"])
    assert cfg.backbones.cpu == "timeseries_dlinear" and cfg.meta.row == "DLinear"
