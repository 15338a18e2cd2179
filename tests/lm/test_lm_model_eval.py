"""Parameter counts, block evaluation, perplexity, generation == parallel forward."""
import math

import numpy as np
import pytest
import torch
import torch.nn as nn

from tasks.lm.data import block_ranges
from tasks.lm.evaluate import evaluate_blocks
from tasks.lm.generate import generate
from tasks.common.backbone import count_parameters
from tasks.common.protocol import load_spec
from tasks.lm.model import LanguageModel, LMConfig, sinusoidal_positions


def _paper_model(mixer):
    from hydra import compose, initialize_config_dir

    from tasks.common.runner import build
    from tests_lm_paths import CONF
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=["experiment=table2/wikitext103", "profile=paper",
                                          f"mixer={mixer}", "logger=none",
                                          "trainer.accelerator=cpu"])
    with torch.device("meta"):  # no memory, no init cost
        return build(cfg, check_data=False)[1], cfg.mixer.label


@pytest.mark.parametrize("mixer", ["softmax", "zeros", "zeros_sm"])
def test_base_lm_param_count_matches_paper(mixer):
    model, row = _paper_model(mixer)
    n = count_parameters(model)
    paper_m = load_spec("table2")["paper"][row]["Params (M)"]  # the paper's number, from conf/
    assert abs(n / 1e6 - paper_m) / paper_m < 0.005, n
    if mixer == "softmax":  # fairseq transformer_lm, pre-LN, sinusoidal, tied, 50,264 entries
        assert n == 44_650_496


def test_real_small_build_runs():
    cfg = LMConfig(vocab_size=50, n_layers=2, d_model=32, n_heads=4, d_ff=64, mixer="zeros")
    model = LanguageModel(cfg)
    assert model(torch.randint(0, 50, (2, 9))).shape == (2, 9, 50)
    assert model.embed.weight.data_ptr() == model.embed.weight.data_ptr()  # tied head
    emb = sinusoidal_positions(torch.arange(3), 8)  # fairseq table: [sin | cos]
    assert torch.allclose(emb[0], torch.tensor([0.0] * 4 + [1.0] * 4))


class Bigram(nn.Module):
    """logits depend on the previous token only: lets us recompute the exact NLL."""

    def __init__(self, V):
        super().__init__()
        self.table = nn.Parameter(torch.randn(V, V, generator=torch.Generator().manual_seed(0)))

    def forward(self, x):
        return self.table[x]  # [B, T, V]


@pytest.mark.parametrize("n,block,batch", [(50, 7, 3), (49, 7, 2), (5, 8, 4), (64, 16, 16)])
def test_block_evaluation_counts_every_token_once(n, block, batch):
    V, eos = 11, 10
    rng = np.random.default_rng(n)
    toks = rng.integers(0, V, n).astype(np.uint16)
    ranges = block_ranges(n, block)
    assert sorted(i for s, e in ranges for i in range(s, e)) == list(range(n))
    model = Bigram(V)
    res = evaluate_blocks(model, toks, block=block, batch_size=batch, eos_id=eos)
    prev = np.concatenate([[eos], toks[:-1]]).astype(np.int64)
    logp = torch.log_softmax(model.table.detach().double(), -1)
    expected = -float(logp[torch.from_numpy(prev), torch.from_numpy(toks.astype(np.int64))].sum())
    assert res["tokens"] == n and res["blocks"] == math.ceil(n / block)
    assert res["loss"] == pytest.approx(expected / n, rel=1e-6)
    assert res["ppl"] == pytest.approx(math.exp(expected / n), rel=1e-6)


def test_uniform_logits_ppl_is_vocab_size():
    class Uniform(nn.Module):
        def forward(self, x):
            return torch.zeros(*x.shape, 257)

    toks = np.random.default_rng(0).integers(0, 257, 1000).astype(np.uint16)
    res = evaluate_blocks(Uniform(), toks, block=64, batch_size=4, eos_id=256)
    assert res["ppl"] == pytest.approx(257.0, rel=1e-6) and res["tokens"] == 1000


@pytest.mark.parametrize("mixer", ["zeros", "zeros_sm", "softmax"])
def test_generation_equals_parallel_forward(mixer):
    torch.manual_seed(0)
    cfg = LMConfig(vocab_size=40, n_layers=2, d_model=16, n_heads=2, d_ff=32, dropout=0.1,
                   mixer=mixer, mixer_kwargs={"rope": False} if mixer == "softmax" else {})
    model = LanguageModel(cfg).double().eval()
    assert model.stateful == (mixer != "softmax")  # softmax: the re-read-prefix fallback
    prompt = torch.randint(0, 40, (2, 5))
    gen = torch.Generator().manual_seed(1)
    ids, step_logits = generate(model, prompt, 8, temperature=1.0, generator=gen)
    assert ids.shape == (2, 13) and torch.equal(ids[:, :5], prompt)
    with torch.no_grad():
        parallel = model(ids)[:, 4:-1]  # the logits each new token was drawn from
    torch.testing.assert_close(step_logits, parallel, rtol=1e-9, atol=1e-9)


def test_zeros_decoding_state_is_constant_size():
    cfg = LMConfig(vocab_size=30, n_layers=1, d_model=16, n_heads=2, d_ff=32, mixer="zeros")
    model = LanguageModel(cfg).eval()
    sizes = []
    with torch.no_grad():
        _, state = model(torch.zeros(1, 3, dtype=torch.long), return_state=True)
        for _ in range(3):
            _, state = model(torch.zeros(1, 1, dtype=torch.long), state=state)
            op = state.layers[0].op
            sizes.append(sum(v.numel() for v in vars(op).values() if torch.is_tensor(v)))
    assert state.t == 6 and len(set(sizes)) == 1
