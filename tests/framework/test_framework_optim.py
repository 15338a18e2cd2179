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
