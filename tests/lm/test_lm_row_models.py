"""Table 2's rows as their originals build them (HGRN2: fairseq-evo hgrn_lm; Mamba:
MambaLMHeadModel; the rest: fairseq transformer_lm), the transplant as a named option, and the
context-window evaluation option (fairseq eval_lm --context-window)."""
import numpy as np
import pytest
import torch
import torch.nn as nn

from tasks.common.errors import ConfigError
from tasks.lm.data import BlockDataset, build_token_cache, eval_windows
from tasks.lm.evaluate import evaluate_blocks
from tasks.lm.model import LanguageModel, LMConfig
from tasks.lm.tokenizer import ByteTokenizer
from zeros.mixers import create_mixer

from test_lm_framework import _dm, _test_metrics
from test_lm_model_eval import Bigram


def _paper(mixer, *extra):
    from hydra import compose, initialize_config_dir

    from tasks.common.runner import build
    from tests_lm_paths import CONF
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=["experiment=table2/wikitext103", "profile=paper",
                                          f"mixer={mixer}", "logger=none",
                                          "trainer.accelerator=cpu", *extra])
    with torch.device("meta"):
        return build(cfg, check_data=False)[1]


def test_hgrn2_row_is_hgrns_own_lm():
    model = _paper("hgrn2")
    c = model.cfg
    assert (c.positions, c.ffn, c.activation, c.d_ff, c.norm) == ("none", "glu", "none", 1024, "layer")
    assert c.scale_embedding and c.n_layers == 6  # fairseq's decoder: embeddings × √d
    assert model.lower_bounds.shape == (6, 512)  # HgrnDecoder.lower_bounds: ones [L, D]
    block = model.blocks[0]
    assert block.gate is not None and block.fc1.out_features == 1024  # GLU 2·d, biases on
    assert block.mixer.qfi.bias is not None  # hgrn_lm_base: args.bias = True


def test_mamba_row_is_mamba_lm_head_model():
    model = _paper("mamba")
    c = model.cfg
    assert (c.positions, c.ffn, c.norm, c.scale_embedding) == ("none", "none", "rms", False)
    assert len(model.blocks) == 12 and model.embed_scale == 1.0
    assert not hasattr(model.blocks[0], "fc1") and model.blocks[0].ln_ffn is None  # no MLP
    assert isinstance(model.ln_out, nn.RMSNorm) and isinstance(model.blocks[0].ln_mix, nn.RMSNorm)


@pytest.mark.parametrize("mixer", ["hgrn2", "mamba"])
def test_transplant_into_transformer_lm_is_a_named_option(mixer):
    c = _paper(mixer, "~row_model@backbone").cfg
    assert (c.positions, c.ffn, c.activation, c.d_ff, c.n_layers) == \
        ("sinusoidal", "mlp", "relu", 2048, 6)


def test_learned_lower_bounds_rise_from_zero_and_reach_the_mixer():
    torch.manual_seed(0)
    cfg = LMConfig(vocab_size=20, n_layers=3, d_model=8, n_heads=2, d_ff=16, positions="none",
                   ffn="glu", activation="none", lower_bounds=True, mixer="hgrn2", dropout=0.0)
    model = LanguageModel(cfg)
    seen = []
    for b in model.blocks:
        b.mixer.register_forward_pre_hook(lambda m, a, kw: seen.append(kw["lower_bound"]),
                                          with_kwargs=True)
    with torch.no_grad():
        model.lower_bounds.normal_()
        model(torch.randint(0, 20, (1, 5)))
    lb = model.lower_bounds.softmax(0).cumsum(0)
    torch.testing.assert_close(torch.stack(seen), lb - lb[:1])
    assert torch.all(seen[0] == 0) and torch.all(seen[2] >= seen[1])


def test_hgrn2_mixer_takes_a_per_channel_lower_bound():
    torch.manual_seed(0)
    x = torch.randn(2, 6, 8)
    fixed = create_mixer("hgrn2", 8, 2, lower_bound=0.3)
    learned = create_mixer("hgrn2", 8, 2)
    learned.load_state_dict(fixed.state_dict())
    torch.testing.assert_close(learned(x, lower_bound=torch.full((8,), 0.3)), fixed(x))
    assert not torch.allclose(learned(x, lower_bound=torch.zeros(8)), fixed(x))


def test_lower_bounds_need_a_mixer_that_takes_them():
    with pytest.raises(ValueError, match="lower_bound"):
        LanguageModel(LMConfig(vocab_size=9, n_layers=1, d_model=8, n_heads=2, d_ff=8,
                               lower_bounds=True, mixer="zeros"))


@pytest.mark.parametrize("n,block,context", [(50, 8, 3), (49, 7, 6), (5, 8, 4), (64, 16, 0)])
def test_context_windows_score_every_token_once_after_its_context(n, block, context):
    toks = np.arange(n, dtype=np.uint16) % 250
    ds = BlockDataset(toks, block, 256, full_only=False, context=context)
    scored = []
    for i in range(len(ds)):
        item, (w, s, e) = ds[i], ds.windows[i]
        assert w == max(0, s - context) and e - s <= block - context  # fairseq's block: T - C
        keep = item["target"] != -100
        scored += item["target"][keep].tolist()
        assert item["input"][s - w] == (toks[s - 1] if s else 256)  # its previous token
    assert scored == toks.tolist()  # every token once, in order


def test_context_window_evaluation_in_the_datamodule_equals_evaluate_blocks(text_dir, tmp_path):
    dm, model = _dm(text_dir, tmp_path, eval_context=40), Bigram(257)
    metrics = _test_metrics(dm, model)
    toks = build_token_cache(dm.data_cfg, ByteTokenizer()).tokens("test")
    ref = evaluate_blocks(model, toks, block=48, batch_size=5, eos_id=256, context=40)
    plain = evaluate_blocks(model, toks, block=48, batch_size=5, eos_id=256)
    assert int(metrics["tokens"].compute()) == ref["tokens"] == len(toks)
    assert float(metrics["ppl"].compute()) == pytest.approx(ref["ppl"], rel=1e-6)
    assert ref["ppl"] == pytest.approx(plain["ppl"], rel=1e-9)  # a bigram ignores the context
    assert ref["blocks"] == len(eval_windows(len(toks), 48, 40)) > plain["blocks"]


def test_context_window_changes_what_a_long_context_model_sees():
    class LastTokenCount(nn.Module):  # more confident in token 0 the more tokens it has read
        def forward(self, x):
            pos = torch.arange(x.shape[1], dtype=torch.float32)[None, :, None]
            return torch.cat([pos.expand(*x.shape, 1), torch.zeros(*x.shape, 4)], -1)

    toks = np.zeros(64, dtype=np.uint16)
    a = evaluate_blocks(LastTokenCount(), toks, block=16, eos_id=4)
    b = evaluate_blocks(LastTokenCount(), toks, block=16, eos_id=4, context=12)
    assert a["tokens"] == b["tokens"] == 64 and b["loss"] < a["loss"]  # scored after 12 more


def test_bad_eval_context_is_one_line(text_dir, tmp_path):
    with pytest.raises(ConfigError, match="eval_context=48: use 0 <= eval_context < eval_block=48"):
        _dm(text_dir, tmp_path, eval_context=48).check()
