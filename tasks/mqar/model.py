"""MQAR's model builder (conf/experiment/fig3/mqar.yaml `backbone._target_`)."""
from __future__ import annotations

from tasks.synthetic_common.model import MQARModel


def build_mqar_model(mixer, *, vocab_size: int = 8192, d_model: int = 128, n_layers: int = 2,
                     n_heads: int = 1, max_positions: int = 0, causal: bool = True, **_generic):
    """zoology's 2-block model without MLP around `mixer` (a MixerSpec). `_generic` swallows the
    generic SequenceBackbone keys of conf/backbone/*.yaml."""
    factory = lambda d: mixer(d, n_heads, causal=causal)
    return MQARModel(vocab_size, factory, d_model=d_model, n_layers=n_layers,
                     max_positions=max_positions)
