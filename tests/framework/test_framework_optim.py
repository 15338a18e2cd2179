"""Weight-decay groups and the one-cycle options of the shared TaskModule."""
import pytest
import torch.nn as nn

from tasks.common.errors import ConfigError
from tasks.common.module import TaskModule, weight_decay_groups


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)  # weight decayed, bias not
        self.norm = nn.LayerNorm(4)  # 1-d: not decayed
        self.pos_embed = nn.Parameter(nn.init.zeros_(nn.Parameter(nn.Linear(4, 4).weight)))

    def no_weight_decay(self):
        return {"pos_embed"}


def test_matrices_policy_skips_1d_and_no_weight_decay_names():
    m = _Net()
    keep, rest = weight_decay_groups(m, "matrices")
    assert [id(p) for p in keep["params"]] == [id(m.lin.weight)]
    assert rest["weight_decay"] == 0.0
    assert {id(p) for p in rest["params"]} == {id(m.lin.bias), id(m.norm.weight),
                                                id(m.norm.bias), id(m.pos_embed)}


def test_all_policy_decays_everything():
    m = _Net()
    (group,) = weight_decay_groups(m, "all")
    assert len(group["params"]) == len(list(m.parameters())) and "weight_decay" not in group


def test_unknown_policy_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown optimizer.decay 'some'"):
        TaskModule(_Net(), objective=type("O", (), {"metrics": lambda self: {}})(),
                   optimizer=None, scheduler={}, decay="some")


def test_one_schedule_fairseq_inverse_sqrt_and_cosine():
    """fairseq: linear warmup from warmup_init_lr (update 0) to lr (update `warmup`), then
    lr * sqrt(warmup / update); cosine decays to min_lr over the remaining updates."""
    from tasks.common.module import make_lr_lambda
    cfg = dict(name="inverse_sqrt", warmup_steps=4000, warmup_init_lr=1e-7)
    f = make_lr_lambda(cfg, 50000, 5e-4)
    assert 5e-4 * f(0) == pytest.approx(1e-7) and 5e-4 * f(4000) == pytest.approx(5e-4)
    assert 5e-4 * f(1) == pytest.approx(1e-7 + (5e-4 - 1e-7) / 4000)
    assert 5e-4 * f(16000) == pytest.approx(2.5e-4)  # lr · sqrt(4000 / 16000)
    g = make_lr_lambda(dict(name="cosine", warmup_steps=300, min_lr=0.0), 25000, 1e-3)
    assert g(300) == pytest.approx(1.0) and g(25000) == pytest.approx(0.0, abs=1e-12)
    assert g(12650) == pytest.approx(0.5)
    with pytest.raises(ConfigError, match="unknown scheduler 'cosin'"):
        make_lr_lambda(dict(name="cosin"), 10, 1e-3)


@pytest.mark.parametrize("name", ["constant", "cosine", "inverse_sqrt"])
def test_make_lr_lambda_warmup_from_zero_starts_at_zero(name):
    """warmup_init_lr=0 (the default) puts step 0 at lr 0 for every schedule: a warmup value of
    0.0 is a value, not 'no warmup' (constant once started at 1x, inverse_sqrt at 10x)."""
    from tasks.common.module import make_lr_lambda
    f = make_lr_lambda(dict(name=name, warmup_steps=100), 1000, 1e-3)
    assert f(0) == 0.0 and f(50) == pytest.approx(0.5) and f(100) == pytest.approx(1.0)


def _lrs(sched_cfg: dict, lr: float, steps: int) -> list[float]:
    """The lr a real optimizer sees at each of `steps` updates under make_lr_lambda."""
    import torch
    from tasks.common.module import make_lr_lambda
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, make_lr_lambda(sched_cfg, steps, lr))
    out = []
    for _ in range(steps + 1):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_min_lr_ratio_floor_follows_the_lr_and_wins_over_min_lr():
    """seq_icl: cosine down to 0.1 x lr, whatever the lr of the sweep point (a fixed 2.5e-5 is
    0.1 x lr only at lr 2.5e-4)."""
    for lr in (2.5e-4, 5e-4):
        lrs = _lrs(dict(name="cosine", warmup_steps=2, min_lr=2.5e-5, min_lr_ratio=0.1), lr, 10)
        assert lrs[2] == pytest.approx(lr) and lrs[-1] == pytest.approx(0.1 * lr)
        assert min(lrs[2:]) == pytest.approx(0.1 * lr)  # never below the floor after warmup
    fixed = _lrs(dict(name="cosine", warmup_steps=2, min_lr=2.5e-5), 5e-4, 10)
    assert fixed[-1] == pytest.approx(2.5e-5)  # without the ratio: min_lr as before
    nulled = _lrs(dict(name="cosine", min_lr=2.5e-5, min_lr_ratio=None), 5e-4, 10)
    assert nulled[-1] == pytest.approx(2.5e-5)


def test_min_lr_ratio_outside_0_1_is_a_config_error():
    from tasks.common.module import make_lr_lambda
    with pytest.raises(ConfigError, match="min_lr_ratio=1.5"):
        make_lr_lambda(dict(name="cosine", min_lr_ratio=1.5), 10, 1e-3)
