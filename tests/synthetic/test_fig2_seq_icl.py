"""Figure 2 (RegBench) as seq_icl (berlino/seq_icl at 9b9223d) runs it: the best checkpoint by
validation loss is tested, each row has seq_icl's model for its architecture, the runs plotted are
chosen on validation, and the paper profile sweeps the seq_icl paper's size grid."""
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn as nn
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from tasks.common.runner import build
from tasks.synthetic_common.model import RegBenchModel
from tasks.synthetic_common.report import best_points
from zeros.mixers.attention import SoftmaxAttention

CONF = Path(__file__).resolve().parents[2] / "conf"
SMALL = ["task.datamodule.num_train=8", "task.datamodule.num_val=4", "task.datamodule.num_test=4"]


def _cfg(profile="cpu", mixer="softmax", extra=()):
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(CONF), version_base="1.3"):
        return compose("train", ["experiment=fig2/regbench", f"profile={profile}", f"mixer={mixer}",
                                 *SMALL, *extra], return_hydra_config=True)


def _size(cfg):
    b = cfg.backbone
    return int(b.d_model), int(b.n_layers), int(b.n_heads)


def test_regbench_tests_the_best_checkpoint_by_validation_loss():
    # seq_icl train.py:968 trainer.test(model, ckpt_path="best"); configs/pipeline/dfa.yaml:14-15
    t = _cfg().task
    assert (t.monitor, t.monitor_mode, t.report) == ("val/loss", "min", "best")


def test_regbench_softmax_row_is_seq_icl_transformer():
    # seq_icl configs/experiment/dfa/transformer.yaml: 8 x 128, 2 heads, attention dropout 0.1,
    # max_position_embeddings (learned absolute positions), plain MHA (no RoPE)
    cfg = _cfg()
    assert _size(cfg) == (128, 8, 2)
    _, model, _ = build(cfg, check_data=False)
    assert isinstance(model.pos, nn.Embedding) and model.pos.num_embeddings == 4098
    attn = [m for m in model.modules() if isinstance(m, SoftmaxAttention)]
    assert len(attn) == 8 and all(not a.rope and a.attn_dropout == 0.1 for a in attn)
    mlp = model.blocks[1].layer
    assert isinstance(mlp[1], nn.GELU) and mlp[1].approximate == "tanh"  # create_mlp_cls


@pytest.mark.parametrize("mixer,size,pos,ffn", [
    ("zeros", (128, 8, 2), True, True), ("zeros_sm", (128, 8, 2), True, True),  # the Transformer's
    ("linear_attn", (128, 8, 2), True, True),  # dfa/linear_transformer.yaml
    ("gla", (128, 4, 1), False, True), ("retnet", (32, 2, 8), False, True),
    ("rwkv6", (32, 2, 1), False, True), ("mamba", (128, 4, 1), False, False)])
def test_regbench_rows_take_seq_icl_sizes(mixer, size, pos, ffn):
    cfg = _cfg(mixer=mixer)
    assert _size(cfg) == size
    assert (cfg.backbone.pos_emb == "learned") == pos and bool(cfg.backbone.ffn) == ffn
    if mixer.startswith("zeros"):  # ZeroS replaces the attention only: its RoPE stays
        assert cfg.backbone.mixer_kwargs is None


def test_noffn_model_reads_the_embeddings_in_every_layer():
    # seq_icl SimpleLMHeadModelNoFFN.forward: hidden_states = mixer(embeddings) for each mixer
    torch.manual_seed(0)
    m = RegBenchModel(20, lambda d: nn.Linear(d, d), d_model=16, n_layers=3, ffn=False).eval()
    ids = torch.randint(1, 20, (2, 7))
    y = m(ids)
    with torch.no_grad():
        m.blocks[0].weight.mul_(3.0)  # an earlier layer does not reach the head
    assert torch.equal(y, m(ids))
    assert torch.allclose(y, m.head(m.blocks[-1](m.embed(ids))))


def test_fig2_chooses_the_lr_on_validation_not_on_test():
    # lr A: better test, worse validation loss; lr B is the one chosen on validation
    df = pd.DataFrame({"setting": ["N2500", "N2500"], "row": ["ZeroS", "ZeroS"], "lr": [1, 2],
                       "reported:test/acc": [0.9, 0.6], "reported:val/loss": [1.5, 1.2]})
    pts = best_points(df, "reported:test/acc", r"N(\d+)", None, "max",
                      select="reported:val/loss", select_mode="min")
    assert pts["y"].tolist() == [0.6]
    spec = OmegaConf.to_container(OmegaConf.load(CONF / "table" / "fig2.yaml"))
    assert (spec["select_by"], spec["select_mode"], spec["source"]) == ("val/loss", "min", "reported")


def test_fig3_keeps_its_best_over_lrs():  # MQAR is not changed by Figure 2's selection
    df = pd.DataFrame({"setting": ["L64_d64"] * 2, "row": ["ZeroS"] * 2,
                       "best:test/acc": [0.9, 0.6], "best:val/loss": [1.5, 1.2]})
    assert best_points(df, "best:test/acc", r"_d(\d+)", r"^L\d+")["y"].tolist() == [0.9]


def test_best_points_averages_the_seeds_best_runs_never_the_best_seed():
    # per seed the best lr (0.9 / 0.5), then mean ± std over seeds: 0.7, not seed 0's 0.9
    df = pd.DataFrame({"setting": ["L64_d64"] * 4, "row": ["ZeroS"] * 4, "seed": [0, 0, 1, 1],
                       "lr": [1, 2, 1, 2], "best:test/acc": [0.9, 0.2, 0.3, 0.5]})
    pts = best_points(df, "best:test/acc", r"_d(\d+)", r"^L\d+")
    assert pts["y"].tolist() == pytest.approx([0.7]) and pts["n"].tolist() == [2]
    assert pts["std"].tolist() == pytest.approx([df["best:test/acc"].iloc[[0, 3]].std()])


def test_paper_profile_sweeps_seq_icl_size_grid_cpu_keeps_row_defaults():
    # the seq_icl paper's Table 3: hidden 64-1024, layers 1-12, heads 1-4
    sweep = OmegaConf.to_container(_cfg("paper").hydra.sweeper.params)
    assert sweep["backbone.d_model"] == "64,128,256,512,1024"
    assert sweep["backbone.n_layers"] == "1,2,4,8,12" and sweep["backbone.n_heads"] == "1,2,4"
    cpu = OmegaConf.to_container(_cfg("cpu").hydra.sweeper.params)
    assert not any(k.startswith("backbone.") for k in cpu)


def test_unlisted_mixer_takes_the_transformer_model_without_softmax_kwargs():
    cfg = _cfg(mixer="hyena")  # not a Figure 2 row: replaces the Transformer's attention, as ZeroS
    assert _size(cfg) == (128, 8, 2) and cfg.backbone.pos_emb == "learned"
    assert cfg.backbone.mixer_kwargs is None  # rope/attn_dropout are the softmax layer's options
