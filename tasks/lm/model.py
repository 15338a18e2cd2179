"""Decoder-only LM with any token mixer in the attention slot, in one of three layouts.

transformer_lm (fairseq `transformer_lm` with --decoder-normalize-before, the HGRN2 setup's
Transformer; the default):
  tokens -> embedding · √d (fairseq scales embeddings) + positions (sinusoidal: no parameters)
  -> dropout -> N × [x + drop(mixer(LN(x))); x + drop(fc2(act(fc1(LN(x)))))] -> final LN
  -> tied output projection (logits = h · Eᵀ, no bias).
Softmax parameter count of the base config (6 × 512, FFN 2048, vocab 50,264):
  embedding 50264·512 = 25,735,168; per layer attention 4·(512²+512) = 1,050,624, FFN
  512·2048+2048+2048·512+512 = 2,099,712, two LNs 2,048 -> 3,152,384 × 6 = 18,914,304;
  final LN 1,024; total 44,650,496 = the paper's Transformer row (conf/table/table2.yaml). Learned positions (1026 × 512) would
  add 525,312 (45.18M), so the fairseq layout is sinusoidal.
hgrn_lm (HGRN's fairseq LM, `hgrn_lm_base`): the same decoder without token positions, a GLU
  channel mixer l3(act(l1 x) · l2 x) (`ffn: glu`, act = identity in fairseq-evo) and learned
  per-layer lower bounds of the forget gate (`lower_bounds: true`: softmax over layers,
  cumulative sum, minus the first, so layer 0 gets 0) handed to the mixer's forward.
mamba_lm (mamba_ssm MambaLMHeadModel): no positions, no embedding scale, RMSNorm, no MLP
  (`ffn: none`: Mamba-1 blocks are [x + mixer(RMSNorm x)] only), final RMSNorm, tied head.
transformer_lm is conf/backbone/lm_fairseq.yaml; the other two are
conf/row_model/lm_wikitext103_{hgrn2,mamba}.yaml, merged into it for those rows (docs/lm.md cites
the originals).
GPT-2 (Figure 4): learned positions, no embedding scale, GELU, 12 × 768.
The mixer comes from the suite's registry (`zeros.mixers`, one config value per table row). A
mixer whose forward takes state=/return_state=True (ZeroS: a T==1 call with a state is one
decoding step) lets the LM decode token by token in constant memory per token.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from zeros.mixers import MixerSpec


@dataclass
class LMConfig:
    vocab_size: int
    n_layers: int = 6
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    max_len: int = 1024  # learned positions only
    positions: str = "sinusoidal"  # sinusoidal | learned | none
    activation: str = "relu"  # fairseq transformer_lm default; GPT-2: gelu; GLU gate: none
    ffn: str = "mlp"  # mlp: fc2(act(fc1 x)) | glu: l3(act(l1 x) * l2 x) | none: no channel mixer
    norm: str = "layer"  # layer | rms
    lower_bounds: bool = False  # HGRN's learned per-layer forget-gate lower bounds
    dropout: float = 0.1
    scale_embedding: bool = True  # fairseq multiplies token embeddings by √d; GPT-2 does not
    mixer: str = "softmax"  # registry name (zeros.mixers.available_mixers())
    mixer_kwargs: dict = field(default_factory=dict)

    def spec(self) -> MixerSpec:
        return MixerSpec(self.mixer, dict(self.mixer_kwargs))


def sinusoidal_positions(pos: torch.Tensor, dim: int) -> torch.Tensor:
    """fairseq: [sin(p·w_i) | cos(p·w_i)], w_i = 10000^(-i/(half-1)); pos [T] -> [T, dim]."""
    half = dim // 2
    w = torch.exp(torch.arange(half, dtype=torch.float32, device=pos.device)
                  * -(math.log(10000.0) / max(half - 1, 1)))  # [half]
    ang = pos.float()[:, None] * w[None]  # [T, half]
    emb = torch.cat([ang.sin(), ang.cos()], dim=1)
    return F.pad(emb, (0, dim % 2))  # [T, dim]


@dataclass
class LMState:
    layers: list  # one mixer state per layer
    t: int  # tokens consumed (absolute position offset)


ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu, "none": lambda x: x}


def _norm(cfg: "LMConfig") -> nn.Module:
    return nn.RMSNorm(cfg.d_model, eps=1e-5) if cfg.norm == "rms" else nn.LayerNorm(cfg.d_model)


class Block(nn.Module):
    def __init__(self, cfg: LMConfig, mixer: nn.Module):
        super().__init__()
        self.ln_mix = _norm(cfg)
        self.ln_ffn = _norm(cfg) if cfg.ffn != "none" else None
        self.mixer = mixer
        # channel mixer: mlp fc2(act(fc1 x)); glu fc2(act(fc1 x) * gate(x)) (fairseq-evo's GLU
        # l3(act(l1 x) * l2 x), biases on); none: Mamba's LM has no MLP
        if cfg.ffn != "none":
            self.fc1, self.fc2 = nn.Linear(cfg.d_model, cfg.d_ff), nn.Linear(cfg.d_ff, cfg.d_model)
        self.gate = nn.Linear(cfg.d_model, cfg.d_ff) if cfg.ffn == "glu" else None
        self.act = ACTIVATIONS[cfg.activation]
        self.drop = nn.Dropout(cfg.dropout)

    def ffn(self, x):
        h = self.act(self.fc1(x))
        return self.fc2(h * self.gate(x) if self.gate is not None else h)

    def forward(self, x, state=None, return_state=False, lower_bound=None):
        h = self.ln_mix(x)
        new_state = None
        kw = {} if lower_bound is None else {"lower_bound": lower_bound}
        if state is not None or return_state:
            h, new_state = self.mixer(h, state=state, return_state=True, **kw)
        else:
            h = self.mixer(h, **kw)
        x = x + self.drop(h)
        if self.ln_ffn is not None:
            x = x + self.drop(self.ffn(self.ln_ffn(x)))
        return x, new_state


def supports_state(mixer: nn.Module) -> bool:
    return "return_state" in inspect.signature(mixer.forward).parameters


def _takes_lower_bound(mixer: nn.Module) -> bool:
    return "lower_bound" in inspect.signature(mixer.forward).parameters


class LanguageModel(nn.Module):
    def __init__(self, cfg: LMConfig, mixer_spec: MixerSpec | None = None):
        """mixer_spec (default cfg.spec()) builds one mixer per block, causal."""
        super().__init__()
        spec = mixer_spec if mixer_spec is not None else cfg.spec()
        for key, options in (("positions", ("sinusoidal", "learned", "none")),
                             ("ffn", ("mlp", "glu", "none")), ("norm", ("layer", "rms")),
                             ("activation", tuple(ACTIVATIONS))):
            if getattr(cfg, key) not in options:
                raise ValueError(f"backbone.{key}={getattr(cfg, key)!r}: use {', '.join(options)}")
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        nn.init.normal_(self.embed.weight, std=cfg.d_model ** -0.5 if cfg.scale_embedding else 0.02)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model) if cfg.positions == "learned" else None
        if self.pos is not None:
            nn.init.normal_(self.pos.weight, std=0.02)
        self.embed_scale = math.sqrt(cfg.d_model) if cfg.scale_embedding else 1.0
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, spec(cfg.d_model, cfg.n_heads, causal=True))
                                    for _ in range(cfg.n_layers))
        self.stateful = all(supports_state(b.mixer) for b in self.blocks)
        if cfg.lower_bounds and not all(_takes_lower_bound(b.mixer) for b in self.blocks):
            raise ValueError(f"backbone.lower_bounds=true needs a mixer whose forward takes "
                             f"lower_bound= (hgrn, hgrn2), not {cfg.mixer!r}")
        # HGRN's decoder: ones [L, D], turned into bounds in forward (fairseq-evo HgrnDecoder)
        self.lower_bounds = nn.Parameter(torch.ones(cfg.n_layers, cfg.d_model)) \
            if cfg.lower_bounds else None
        self.ln_out = _norm(cfg)

    def _positions(self, T, t0, device):
        if self.cfg.positions == "none":
            return 0.0
        pos = torch.arange(t0, t0 + T, device=device)  # [T]
        if self.pos is not None:
            if t0 + T > self.cfg.max_len:
                raise ValueError(f"position {t0 + T} exceeds model.max_len={self.cfg.max_len}")
            return self.pos(pos)
        return sinusoidal_positions(pos, self.cfg.d_model)

    def forward(self, tokens, state: LMState | None = None, return_state: bool = False):
        """tokens [B, T] -> logits [B, T, V] (and the new LMState with return_state=True)."""
        B, T = tokens.shape
        t0 = 0 if state is None else state.t
        x = self.embed(tokens) * self.embed_scale + self._positions(T, t0, tokens.device)
        x = self.drop(x)  # [B, T, D]
        want_state = state is not None or return_state
        if want_state and not self.stateful:
            raise ValueError(f"mixer {self.cfg.mixer!r} takes no state=/return_state=: decode by "
                             "re-running the prefix (tasks.lm.generate does this)")
        new_states = []
        lbs = None
        if self.lower_bounds is not None:  # softmax over layers, cumsum, minus layer 0's
            lbs = self.lower_bounds.softmax(0).cumsum(0)
            lbs = lbs - lbs[:1]  # [L, D]: 0 for the first layer, rising with depth
        for i, block in enumerate(self.blocks):
            x, s = block(x, None if state is None else state.layers[i], want_state,
                         None if lbs is None else lbs[i])
            new_states.append(s)
        logits = F.linear(self.ln_out(x), self.embed.weight)  # [B, T, V] tied
        return (logits, LMState(new_states, t0 + T)) if want_state else logits


def lm_mixer_kwargs(name: str, kwargs: dict, positions: str) -> dict:
    """The Transformer row is fairseq's: absolute positions only, so softmax gets no RoPE unless
    a config asks for it. The other mixers keep their own defaults (ZeroS: its RoPE, docs/spec.md §5)."""
    kwargs = dict(kwargs)
    if name == "softmax" and positions != "none":
        kwargs.setdefault("rope", False)
    return kwargs


def build_lm(mixer: MixerSpec | None = None, **cfg) -> LanguageModel:
    """Hydra backbone builder: `builder(mixer=MixerSpec, **the other keys)` (tasks/INTERFACE.md).
    `layout` (conf/lm_layout/*.yaml) only names the LM its keys set; nothing reads it."""
    cfg.pop("layout", None)
    if mixer is not None:
        cfg.update(mixer=mixer.name, mixer_kwargs=dict(mixer.kwargs, **cfg.get("mixer_kwargs", {})))
    lm_cfg = LMConfig(**cfg)
    lm_cfg.mixer_kwargs = lm_mixer_kwargs(lm_cfg.mixer, lm_cfg.mixer_kwargs, lm_cfg.positions)
    return LanguageModel(lm_cfg)
