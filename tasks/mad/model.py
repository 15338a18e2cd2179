"""MAD's model builder (conf/experiment/table1/mad.yaml `backbone._target_`)."""
from __future__ import annotations

from tasks.synthetic_common.model import MADAutoEncoder, MADLanguageModel

from .settings import resolve_setting


def build_mad_model(mixer, *, mad_task: str, setting: str = "baseline", d_model: int = 128,
                    n_layers: int = 2, n_heads: int = 16, causal: bool = True,
                    mixer_kwargs: dict | None = None, **_generic):
    """MAD backbone for `mixer` (a MixerSpec): the auto-encoder for compression, else the LM.

    `mixer_kwargs` maps a mixer name to extra keyword arguments for that row (the experiment
    file sets `linear_attn: {feature_map: hadamard, ...}`: mad-lab's linear attention); a key the
    mixer config itself sets (`mixer.kwargs.eps=1e-6`) wins. `_generic` swallows the generic
    backbone keys (mlp, norm, ...) that conf/backbone/mad.yaml sets for SequenceBackbone; the MAD
    architecture here is fixed by the protocol.
    """
    vocab = resolve_setting(mad_task, setting)["vocab_size"]
    row = dict((mixer_kwargs or {}).get(mixer.name) or {})
    extra = {k: v for k, v in row.items() if k not in mixer.kwargs}
    factory = lambda d: mixer(d, n_heads, causal=causal, **extra)
    cls = MADAutoEncoder if mad_task == "compression" else MADLanguageModel
    return cls(vocab, factory, dim=d_model, n_mixers=n_layers)
