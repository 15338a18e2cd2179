"""MQAR's model builder (conf/experiment/fig3/mqar.yaml `backbone._target_`)."""
from __future__ import annotations

from tasks.common.errors import ConfigError
from tasks.synthetic_common.model import MQARModel


def build_mqar_model(mixer, *, vocab_size: int = 8192, d_model: int = 128, n_layers: int = 2,
                     n_heads: int = 1, pos_emb: str = "none", max_positions: int = 64,
                     mixer_kwargs: dict | None = None, identity_norm: bool = True,
                     embed_dropout: float = 0.1, causal: bool = True, init: str = "transformer",
                     **_generic):
    """zoology's 2-block model without MLP around `mixer` (a MixerSpec).

    pos_emb=learned adds learned absolute positions for `max_positions` positions; `mixer_kwargs`
    override the row's layer kwargs (e.g. rope=false). Both come per row from
    conf/row_model/mqar_<mixer>.yaml (zoology: learned positions and no RoPE for attention, nothing for the others).
    identity_norm: zoology's r <- r + LN2(r) after each block (its Identity state mixer);
    embed_dropout: zoology's 0.1 on the embeddings; init: zoology's init branch for the row
    ('mamba' for its MambaBlock rows, else 'transformer'; both rescale the output projection).
    `_generic` swallows the generic SequenceBackbone keys of conf/backbone/*.yaml."""
    if pos_emb not in ("none", "learned"):
        raise ConfigError(f"unknown pos_emb {pos_emb!r}: use backbone.pos_emb=none|learned")
    extra = dict(mixer_kwargs or {})
    factory = lambda d: mixer(d, n_heads, causal=causal, **extra)
    return MQARModel(vocab_size, factory, d_model=d_model, n_layers=n_layers,
                     max_positions=int(max_positions) if pos_emb == "learned" else 0,
                     embed_dropout=float(embed_dropout), identity_norm=bool(identity_norm),
                     init=str(init))
