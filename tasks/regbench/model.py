"""RegBench's model builder (conf/experiment/fig2/regbench.yaml `backbone._target_`)."""
from __future__ import annotations

from tasks.common.errors import ConfigError
from tasks.synthetic_common.model import RegBenchModel

from .data import VOCAB


def build_regbench_model(mixer, *, vocab_size: int = VOCAB, d_model: int = 128, n_layers: int = 4,
                         n_heads: int = 2, causal: bool = True, pos_emb: str = "none",
                         max_positions: int = 4098, mixer_kwargs: dict | None = None,
                         ffn: bool = True, embed_dropout: float = 0.1, **_generic):
    """seq_icl's lm_simple around `mixer` (a MixerSpec): pre-LN [mixer, GELU MLP 4x] x n_layers.

    Per row (conf/row_model/regbench_<mixer>.yaml, from seq_icl's configs/experiment/dfa/<arch>.yaml):
    d_model, n_layers, n_heads; pos_emb=learned adds learned absolute positions for
    `max_positions` positions (seq_icl: max_position_embeddings = input_seq_len + 2 = 4098);
    `mixer_kwargs` override the layer's kwargs (e.g. rope=false, attn_dropout=0.1);
    ffn=false is seq_icl's lm_simple_noffn (its Mamba row). `_generic` swallows the generic
    SequenceBackbone keys of conf/backbone/*.yaml."""
    if pos_emb not in ("none", "learned"):
        raise ConfigError(f"unknown pos_emb {pos_emb!r}: use backbone.pos_emb=none|learned")
    extra = dict(mixer_kwargs or {})
    factory = lambda d: mixer(d, n_heads, causal=causal, **extra)
    return RegBenchModel(vocab_size, factory, d_model=d_model, n_layers=n_layers,
                         embed_dropout=float(embed_dropout), ffn=bool(ffn),
                         max_positions=int(max_positions) if pos_emb == "learned" else 0)
