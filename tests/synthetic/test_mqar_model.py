"""MQAR's model as zoology builds it per row (positions from the experiment config) and the
labelled-only scoring (same loss and predictions as scoring every position)."""
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from tasks.common.errors import ConfigError
from tasks.common.objective import TokenClassification
from tasks.mqar.data import multiquery_ar
from tasks.mqar.model import build_mqar_model
from tasks.mqar.objective import MQARObjective
from zeros.mixers import MixerSpec

CONF = Path(__file__).resolve().parents[2] / "conf"


def _cfg(mixer, *overrides, profile="cpu"):
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(CONF), version_base="1.3"):
        return compose("train", ["experiment=fig3/mqar", f"profile={profile}", f"mixer={mixer}",
                                 "backbone.d_model=64", *overrides])


def _model(mixer, *overrides):
    cfg = _cfg(mixer, *overrides)
    kw = OmegaConf.to_container(cfg.backbone, resolve=True)
    kw.pop("_target_")
    return build_mqar_model(MixerSpec(mixer, OmegaConf.to_container(cfg.mixer.kwargs) or {}), **kw)


@pytest.mark.parametrize("length,seq_len", [("L64", 64), ("L128", 128)])
def test_softmax_row_has_learned_positions_of_the_sequence_length_and_no_rope(length, seq_len):
    m = _model("softmax", f"length={length}")
    assert m.pos is not None and m.pos.num_embeddings == seq_len
    assert all(not mixer.rope for mixer in m.mixers)


@pytest.mark.parametrize("mixer", ["zeros", "zeros_sm", "linear_attn"])
def test_other_rows_have_no_learned_positions(mixer):
    m = _model(mixer)
    assert m.pos is None
    if mixer.startswith("zeros"):  # ZeroS keeps its own RoPE: it is part of the layer
        assert all(layer.rope for layer in m.mixers)


def test_learned_positions_change_the_output_of_a_position_free_input():
    m = build_mqar_model(MixerSpec("softmax", {"rope": False}), vocab_size=32, d_model=16,
                         pos_emb="learned", max_positions=8).eval()
    ids = torch.full((1, 8), 3)  # same token everywhere: only positions can tell them apart
    out = m(ids)
    assert not torch.allclose(out[0, 1], out[0, 5])


def test_unknown_pos_emb_is_a_config_error():
    with pytest.raises(ConfigError, match="pos_emb"):
        build_mqar_model(MixerSpec("softmax"), vocab_size=32, d_model=16, pos_emb="rope")


def _tiny_batch(n=6):
    d = multiquery_ar(n, vocab_size=64, input_seq_len=16, num_kv_pairs=2, seed=3)
    return {"input": torch.from_numpy(d["inputs"]), "target": torch.from_numpy(d["targets"])}


@pytest.mark.parametrize("mixer", ["softmax", "zeros"])
def test_labelled_only_loss_equals_full_scoring(mixer):
    torch.manual_seed(0)
    m = build_mqar_model(MixerSpec(mixer), vocab_size=64, d_model=16, max_positions=16).eval()
    batch = _tiny_batch()
    full = TokenClassification(64).step(m, batch, "train").loss
    ours = MQARObjective(64).step(m, batch, "train").loss
    assert torch.allclose(full, ours, atol=1e-6)
    # and the gradients agree (the head sees the same rows)
    g_full = torch.autograd.grad(full, m.embed.weight)[0]
    g_ours = torch.autograd.grad(MQARObjective(64).step(m, batch, "train").loss, m.embed.weight)[0]
    assert torch.allclose(g_full, g_ours, atol=1e-6)


def test_labelled_only_predictions_equal_full_argmax_and_score_the_same():
    torch.manual_seed(0)
    m = build_mqar_model(MixerSpec("softmax"), vocab_size=64, d_model=16).eval()
    batch = _tiny_batch()
    obj = MQARObjective(64)
    out = obj.step(m, batch, "val")
    mask = batch["target"] != -100
    assert torch.equal(out.preds[mask], m(batch["input"]).argmax(-1)[mask])
    full = m(batch["input"]).argmax(-1)
    for name, metric in obj.metrics().items():  # the metrics only look at labelled positions
        ref = obj.metrics()[name]
        metric.update(out.preds, out.target)
        ref.update(full, batch["target"])
        assert torch.allclose(metric.compute(), ref.compute())


def test_a_model_without_mask_support_is_scored_in_full_then_gathered():
    torch.manual_seed(0)
    inner = build_mqar_model(MixerSpec("softmax"), vocab_size=64, d_model=16).eval()

    class NoMask(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner

        def forward(self, ids):
            return self.inner(ids)

    batch = _tiny_batch()
    a = MQARObjective(64).step(NoMask(), batch, "train").loss
    b = MQARObjective(64).step(inner, batch, "train").loss
    assert torch.allclose(a, b, atol=1e-6)


def test_sequence_longer_than_max_positions_is_an_error():
    m = build_mqar_model(MixerSpec("softmax"), vocab_size=64, d_model=16, pos_emb="learned",
                         max_positions=8)
    with pytest.raises(ValueError, match="max_positions"):
        m(torch.zeros(1, 16, dtype=torch.long))


def test_identity_norm_adds_the_normed_residual_and_can_be_dropped():
    torch.manual_seed(0)
    ids = torch.randint(0, 32, (2, 8))
    zoo = build_mqar_model(MixerSpec("softmax"), vocab_size=32, d_model=16).eval()
    plain = build_mqar_model(MixerSpec("softmax"), vocab_size=32, d_model=16,
                             identity_norm=False).eval()
    plain.load_state_dict({k: v for k, v in zoo.state_dict().items() if "norm2" not in k})
    assert not any("norm2" in k for k in plain.state_dict())  # no unused parameters
    with torch.no_grad():  # same weights, the extra term changes the output
        assert not torch.allclose(zoo(ids), plain(ids))
        for n2 in zoo.norm2:  # a LayerNorm with zero gain and bias adds nothing
            n2.weight.zero_()
            n2.bias.zero_()
        assert torch.allclose(zoo(ids), plain(ids), atol=1e-6)


def test_paper_profile_keeps_zoologys_identity_norm_and_cpu_drops_it():
    assert _cfg("softmax", profile="paper").backbone.identity_norm is True
    assert _cfg("softmax", profile="cpu").backbone.identity_norm is False
    assert _cfg("zeros", profile="paper").backbone.embed_dropout == 0.1
    # zoology's attention dropout on the paper profile; the cpu profile drops it (plateau)
    assert _cfg("softmax", profile="paper").backbone.mixer_kwargs.attn_dropout == 0.1
    assert _cfg("softmax", profile="cpu").backbone.mixer_kwargs == {"rope": False,
                                                                     "attn_dropout": 0.0}
