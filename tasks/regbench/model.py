"""RegBench's model builder (conf/experiment/fig2/regbench.yaml `backbone._target_`)."""
from __future__ import annotations

from tasks.synthetic_common.model import RegBenchModel

from .data import VOCAB


def build_regbench_model(mixer, *, vocab_size: int = VOCAB, d_model: int = 128, n_layers: int = 4,
                         n_heads: int = 2, causal: bool = True, **_generic):
    """Pre-LN [mixer, GELU MLP 4x] x n_layers around `mixer` (a MixerSpec)."""
    factory = lambda d: mixer(d, n_heads, causal=causal)
    return RegBenchModel(vocab_size, factory, d_model=d_model, n_layers=n_layers)
