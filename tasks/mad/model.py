"""MAD's model builder (conf/experiment/table1/mad.yaml `backbone._target_`)."""
from __future__ import annotations

from tasks.synthetic_common.model import MADAutoEncoder, MADLanguageModel

from .settings import resolve_setting


def build_mad_model(mixer, *, mad_task: str, setting: str = "baseline", d_model: int = 128,
                    n_layers: int = 2, n_heads: int = 16, causal: bool = True, **_generic):
    """MAD backbone for `mixer` (a MixerSpec): the auto-encoder for compression, else the LM.

    `_generic` swallows the generic backbone keys (mlp, norm, ...) that conf/backbone/mad.yaml
    sets for SequenceBackbone; the MAD architecture here is fixed by the protocol.
    """
    vocab = resolve_setting(mad_task, setting)["vocab_size"]
    factory = lambda d: mixer(d, n_heads, causal=causal)
    cls = MADAutoEncoder if mad_task == "compression" else MADLanguageModel
    return cls(vocab, factory, dim=d_model, n_mixers=n_layers)
