"""Configs of the standalone LM runner: experiment (table2 | fig4) × profile (smoke | paper).

paper = the protocol in PROTOCOLS.md; smoke = a small model on local text with the byte
tokenizer (no download), a few hundred updates on CPU. The smoke profile has NO default data
path: pass data.path=DIR (e.g. the WikiText-2 valid/test files) on the command line.
"""
from __future__ import annotations

from omegaconf import OmegaConf

# Paper numbers (SPEC.md §7): WikiText-103 val / test perplexity and parameters.
PAPER_TABLE2 = {
    "zeros": {"label": "ZeroS", "val": 23.91, "test": 24.61, "params": "46.31M"},
    "softmax": {"label": "Transformer", "val": 24.4, "test": 24.78, "params": "44.65M"},
    "zeros_sm": {"label": "ZeroS-SM", "val": 23.62, "test": 24.17, "params": "44.69M"},
    "mamba": {"label": "Mamba", "val": 22.58, "test": 23.19, "params": None},
    "hgrn2": {"label": "HGRN2", "val": 23.1, "test": 23.73, "params": None},
    "linear_attn": {"label": "LinAttn", "val": None, "test": None, "params": None},
}
LABELS = {"zeros": "ZeroS", "zeros_sm": "ZeroS-SM", "softmax": "Transformer",
          "linear_attn": "LinearTransformer", "aft": "AFT", "gla": "GLA", "mamba": "Mamba",
          "hgrn2": "HGRN2"}

_TRAIN_FAIRSEQ = dict(seq_len=512, tokens_per_update=65536, micro_batch=16, max_updates=50000,
                      lr=5e-4, betas=[0.9, 0.98], eps=1e-8, weight_decay=0.1, clip=1.0,
                      schedule="inverse_sqrt", warmup=4000, warmup_init_lr=1e-7, min_lr=0.0,
                      eval_every=1000, eval_max_blocks=None, seed=1, threads=None,
                      device="auto", precision="bf16")
_TRAIN_OWT2 = dict(_TRAIN_FAIRSEQ, betas=[0.9, 0.95], lr=1e-3, schedule="cosine", warmup=300,
                   warmup_init_lr=0.0, min_lr=1e-5, max_updates=25000, eval_every=250,
                   eval_max_blocks=256)
_MODEL_FAIRSEQ = dict(n_layers=6, d_model=512, n_heads=8, d_ff=2048, positions="sinusoidal",
                      activation="relu", dropout=0.1, scale_embedding=True, max_len=1024,
                      vocab_size=50264)  # fairseq's GPT-2 dictionary: 50,260 symbols + 4 specials
_MODEL_GPT2 = dict(n_layers=12, d_model=768, n_heads=12, d_ff=3072, positions="learned",
                   activation="gelu", dropout=0.0, scale_embedding=False, max_len=1024,
                   vocab_size=50304)  # 50257 rounded up to a multiple of 64 (nanoGPT-style)
# Extra kwargs per mixer (the softmax row's rope=False is tasks.lm.model.lm_mixer_kwargs's rule).
_MIXER_KW: dict = {}

EXPERIMENTS = {
    ("table2", "paper"): dict(
        data=dict(name="wikitext103", source="hf", unit="line", cache_dir="results/lm/cache",
                  hf=dict(id="Salesforce/wikitext", config="wikitext-103-raw-v1",
                          splits=dict(train="train", valid="validation", test="test"),
                          text_field="text", streaming=False)),
        tokenizer=dict(name="gpt2", path=None, hub_id="gpt2"),
        model=_MODEL_FAIRSEQ, train=_TRAIN_FAIRSEQ, eval=dict(block=512, batch_size=16),
        mixers=["zeros", "zeros_sm", "softmax", "mamba", "hgrn2"]),
    ("fig4", "paper"): dict(
        data=dict(name="openwebtext2", source="hf", unit="document",
                  cache_dir="results/lm/cache",
                  hf=dict(id="segyges/OpenWebText2", config=None, splits=dict(train="train"),
                          text_field="text", streaming=True),
                  # OWT2 has one split: the first 2,000 documents are the validation set
                  holdout=dict(split="valid", **{"from": "train"}, units=2000),
                  # 25k updates × 65,536 tokens = 1.64B tokens are read once
                  max_tokens=dict(train=1_700_000_000, valid=None)),
        tokenizer=dict(name="gpt2", path=None, hub_id="gpt2"),
        model=_MODEL_GPT2, train=_TRAIN_OWT2, eval=dict(block=512, batch_size=16),
        mixers=["linear_attn", "aft", "gla", "softmax", "zeros", "zeros_sm"]),
}
_SMOKE = dict(
    data=dict(name="smoke", source="local", path=None, unit="line",
              cache_dir="results/lm/cache",
              # the WikiText-2 layout of ../shared/data: train on valid.txt, test on test.txt,
              # validate on the last 5% of the training lines
              files=dict(train="valid.txt", test="test.txt"),
              holdout=dict(split="valid", **{"from": "train"}, fraction=0.05), hf=None,
              max_tokens=None),
    tokenizer=dict(name="byte", path=None, hub_id=None),
    model=dict(n_layers=2, d_model=128, n_heads=4, d_ff=512, positions="sinusoidal",
               activation="relu", dropout=0.1, scale_embedding=True, max_len=1024,
               vocab_size=None),
    train=dict(_TRAIN_FAIRSEQ, seq_len=256, tokens_per_update=2048, micro_batch=8,
               max_updates=200, lr=2e-3, warmup=20, eval_every=25, eval_max_blocks=16,
               # one thread: on shared, oversubscribed cores two OpenMP threads ran ~5x slower
               threads=1, device="cpu", precision="fp32"),
    eval=dict(block=256, batch_size=16),
    mixers=["zeros", "softmax", "linear_attn"])
EXPERIMENTS[("table2", "smoke")] = _SMOKE
EXPERIMENTS[("fig4", "smoke")] = _SMOKE  # same runs (the runner reuses them by config hash)


def get_config(experiment: str, profile: str, overrides: list[str] | None = None):
    if (experiment, profile) not in EXPERIMENTS:
        known = ", ".join(f"{e}/{p}" for e, p in EXPERIMENTS)
        raise ValueError(f"no LM config {experiment}/{profile}: use one of {known}")
    base = OmegaConf.create(dict(EXPERIMENTS[(experiment, profile)], mixer_kwargs=_MIXER_KW,
                                 experiment=experiment, profile=profile,
                                 out_root="results/lm"))
    return OmegaConf.merge(base, OmegaConf.from_dotlist(list(overrides or [])))
