"""Backbones of the synthetic benchmarks; each takes any sequence mixer through a factory.

A mixer factory is a callable `factory(d_model) -> nn.Module` whose module maps x [B, T, D] to
[B, T, D] (a tuple output is accepted; its first element is used). `mixer_factory(name, ...)`
builds one from the framework's registry `zeros.mixers.create_mixer` when it exists.

- `MADLanguageModel`  (mad-lab LanguageModel): embedding, [mixer, SwiGLU] x 2 as pre-RMSNorm
  residual blocks, no positional embedding, final RMSNorm, untied output head with bias.
- `MADAutoEncoder`    (mad-lab AutoEncoder, compression): same encoder; the last position's state
  plus a sin-cos position embedding per output position, a 2-layer GELU MLP, RMSNorm, head.
- `MQARModel`         (zoology LanguageModel, TransformerBlock with an Identity state mixer):
  pre-LayerNorm, no MLP, tied head, embedding dropout 0.1.
- `RegBenchModel`     (seq_icl lm_simple / lm_simple_noffn): pre-LayerNorm [mixer, GELU MLP 4x]
  blocks, optional learned absolute positions.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from tasks.common.backbone import SwiGLU, count_parameters  # noqa: F401  (re-exported)

MixerFactory = Callable[[int], nn.Module]


def _mix(mixer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    y = mixer(x)
    return y[0] if isinstance(y, tuple) else y


def mad_swiglu(dim: int, multiple_of: int = 16) -> SwiGLU:
    """mad-lab's GLU: no bias, inner width 2*4/3*dim rounded up to a multiple of 16 (352 for
    dim 128). The fused w12 draws the same initial values as separate w1, w2 would."""
    inner = int(2 * dim * 4 / 3)
    return SwiGLU(dim, multiple_of * ((inner + multiple_of - 1) // multiple_of))


class PreNormResidual(nn.Module):
    """x + layer(norm(x))."""

    def __init__(self, dim: int, layer: nn.Module, norm: Callable[[int], nn.Module]):
        super().__init__()
        self.norm, self.layer = norm(dim), layer

    def forward(self, x):
        return x + _mix(self.layer, self.norm(x))


def _rms(dim: int) -> nn.Module:
    return nn.RMSNorm(dim, eps=1e-5)


def _mad_encoder(dim: int, mixer: MixerFactory, n_mixers: int) -> nn.ModuleList:
    blocks = []
    for _ in range(n_mixers):
        blocks += [PreNormResidual(dim, mixer(dim), _rms), PreNormResidual(dim, mad_swiglu(dim), _rms)]
    return nn.ModuleList(blocks)


class MADLanguageModel(nn.Module):
    """Next-token model of MAD: logits [B, T, V] for ids [B, T]."""

    def __init__(self, vocab_size: int, mixer: MixerFactory, dim: int = 128, n_mixers: int = 2):
        super().__init__()
        self.vocab_size = vocab_size
        self.token_embeds = nn.Embedding(vocab_size, dim)
        self.blocks = _mad_encoder(dim, mixer, n_mixers)
        self.norm = _rms(dim)
        self.head = nn.Linear(dim, vocab_size)
        self.apply(_mad_lm_init)

    def forward(self, ids):
        x = self.token_embeds(ids)  # [B, T, D]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))  # [B, T, V]


def sincos_positions(n: int, dim: int) -> torch.Tensor:
    """[n, dim] sin | cos table (fairseq layout, as mad-lab's posemb_sincos_1d)."""
    half = dim // 2
    freq = torch.exp(torch.arange(half, dtype=torch.float) * -(math.log(10000) / (half - 1)))
    ang = torch.arange(n, dtype=torch.float)[:, None] * freq[None]  # [n, half]
    emb = torch.cat([ang.sin(), ang.cos()], dim=1)
    return F.pad(emb, (0, dim % 2))


class MADAutoEncoder(nn.Module):
    """Compression model of MAD: encode the sequence into its last state, decode every position."""

    def __init__(self, vocab_size: int, mixer: MixerFactory, dim: int = 128, n_mixers: int = 2):
        super().__init__()
        self.vocab_size = vocab_size
        self.token_embeds = nn.Embedding(vocab_size, dim)
        self.blocks = _mad_encoder(dim, mixer, n_mixers)
        self.decoder = nn.Sequential(_rms(dim), nn.Linear(dim, dim), nn.GELU(),
                                     _rms(dim), nn.Linear(dim, dim), nn.GELU())
        self.unembed = nn.Sequential(_rms(dim), nn.Linear(dim, vocab_size))
        self.apply(_normal_init)

    def forward(self, ids):
        B, T = ids.shape
        x = self.token_embeds(ids)  # [B, T, D]
        for block in self.blocks:
            x = block(x)
        code = x[:, -1]  # [B, D] global pool 'last'
        pos = sincos_positions(T, code.shape[-1]).to(code)  # [T, D]
        return self.unembed(self.decoder(code[:, None] + pos[None]))  # [B, T, V]


def _keeps_bias(m):
    return getattr(m.bias, "_no_reinit", False)  # Mamba's dt bias (zeros/mixers/ssm.py)


def _mad_lm_init(m):
    # mad-lab LanguageModel (language_model.py:73-79): zero every Linear bias not marked
    # _no_reinit, N(0, 0.02) embeddings, default Linear weights
    if isinstance(m, nn.Linear) and m.bias is not None and not _keeps_bias(m):
        nn.init.zeros_(m.bias)
    elif isinstance(m, nn.Embedding):
        nn.init.normal_(m.weight, std=0.02)


def _normal_init(m):
    # mad-lab AutoEncoder and zoology's TransformerBlock branch: N(0, 0.02) for every Linear
    # weight and Embedding, zero EVERY bias (neither spares Mamba's dt bias: kept as they run)
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, std=0.02)
        if m.bias is not None:
            nn.init.zeros_(m.bias)
    elif isinstance(m, nn.Embedding):
        nn.init.normal_(m.weight, std=0.02)


def _mamba_branch_init(m):
    # zoology model.py _init_weights, `'Mamba' in block_type` branch: Linear weights keep torch's
    # default, biases are zeroed unless marked _no_reinit, embeddings N(0, 0.02)
    if isinstance(m, nn.Linear) and m.bias is not None and not _keeps_bias(m):
        nn.init.zeros_(m.bias)
    elif isinstance(m, nn.Embedding):
        nn.init.normal_(m.weight, std=0.02)


def _out_projection(mixer: nn.Module) -> nn.Linear | None:
    """The mixer's output projection (ours name it `out` or `out_proj`; zoology's `out_proj`)."""
    for name in ("out_proj", "out"):
        proj = getattr(mixer, name, None)
        if isinstance(proj, nn.Linear):
            return proj
    return None


def zoology_init(model: nn.Module, mixers, n_layers: int, scheme: str = "transformer") -> None:
    """zoology's init (model.py `_init_weights`, commit 8700f46), then its GPT-2 rescale of each
    mixer's output projection: 'transformer' N(0, 0.02/sqrt(2 n_layers)); 'mamba' (its MambaBlock
    rows) kaiming_uniform(a=sqrt 5)/sqrt(n_layers)."""
    if scheme not in ("transformer", "mamba"):
        raise ValueError(f"init scheme {scheme!r}: use transformer or mamba (backbone.init)")
    model.apply(_normal_init if scheme == "transformer" else _mamba_branch_init)
    for mixer in mixers:
        proj = _out_projection(mixer)
        if proj is None:
            continue
        if scheme == "transformer":
            nn.init.normal_(proj.weight, std=0.02 / math.sqrt(2 * n_layers))
        else:
            nn.init.kaiming_uniform_(proj.weight, a=math.sqrt(5))
            with torch.no_grad():
                proj.weight /= math.sqrt(n_layers)


class MQARModel(nn.Module):
    """zoology's MQAR model: 2 pre-LN blocks without MLP, tied head.

    zoology's TransformerBlock with `state_mixer = Identity` computes r <- r + mixer(LN1(r)),
    then hands LN2(r) to the next block, which adds it to the residual: r <- r + LN2(r). We keep
    that exactly (it is what "no MLP" means in their runs); `identity_norm=False` drops that
    term (r <- r + mixer(LN1(r)) only). `max_positions > 0` adds learned absolute positions
    (zoology gives them to the attention baseline only). `init`: zoology's init branch
    (`zoology_init`; 'mamba' for its MambaBlock rows).
    """

    def __init__(self, vocab_size: int, mixer: MixerFactory, d_model: int = 128, n_layers: int = 2,
                 max_positions: int = 0, embed_dropout: float = 0.1, identity_norm: bool = True,
                 init: str = "transformer"):
        super().__init__()
        self.vocab_size, self.identity_norm = vocab_size, identity_norm
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_positions, d_model) if max_positions > 0 else None
        self.drop = nn.Dropout(embed_dropout)
        self.mixers = nn.ModuleList(mixer(d_model) for _ in range(n_layers))
        self.norm1 = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(n_layers))
        # the Identity state mixer's LayerNorm (no parameters left unused without it)
        self.norm2 = nn.ModuleList(nn.LayerNorm(d_model) if identity_norm else nn.Identity()
                                   for _ in range(n_layers))
        self.norm_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        zoology_init(self, self.mixers, n_layers, init)
        self.head.weight = self.embed.weight  # tied, as zoology with learnable embeddings

    def forward(self, ids, mask=None):
        """logits [B, T, V]; with a bool `mask` [B, T] only the masked positions' logits [N, V]
        (row-major order): MQAR labels n of L positions and the vocab head dominates the step."""
        if self.pos is not None and ids.shape[1] > self.pos.num_embeddings:
            raise ValueError(f"sequence length {ids.shape[1]} > max_positions "
                             f"{self.pos.num_embeddings}: raise backbone.max_positions")
        h = self.embed(ids)  # [B, T, D]
        if self.pos is not None:
            h = h + self.pos(torch.arange(ids.shape[1], device=ids.device))
        r = self.drop(h)
        for mixer, n1, n2 in zip(self.mixers, self.norm1, self.norm2):
            r = r + _mix(mixer, n1(r))
            if self.identity_norm:
                r = r + n2(r)  # the Identity state mixer's output joins the residual
        if mask is not None:
            r = r[mask]  # [N, D]: the final norm and the head act per position
        return self.head(self.norm_f(r))  # [B, T, V] or [N, V]


class RegBenchModel(nn.Module):
    """seq_icl's `lm_simple` (src/models/sequence/simple_lm.py, SimpleLMHeadModel): embeddings
    (+ learned absolute positions when `max_positions` > 0, its GPT2Embeddings), dropout 0.1,
    pre-LN [mixer, GELU(tanh) MLP 4x] blocks, final LN, tied head.

    ffn=False is its `lm_simple_noffn` (SimpleLMHeadModelNoFFN, seq_icl's Mamba row) as it runs:
    every layer reads the embeddings (`hidden_states = mixer(embeddings)`), so only the last
    layer reaches the head; no norm, no residual, the dropped embeddings unused, no custom init."""

    def __init__(self, vocab_size: int, mixer: MixerFactory, d_model: int = 128, n_layers: int = 4,
                 embed_dropout: float = 0.1, max_positions: int = 0, ffn: bool = True):
        super().__init__()
        self.vocab_size, self.ffn = vocab_size, ffn
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_positions, d_model) if max_positions > 0 else None
        self.drop = nn.Dropout(embed_dropout)
        ln = lambda d: nn.LayerNorm(d)
        # seq_icl create_mlp_cls: F.gelu(approximate='tanh')
        mlp = lambda: nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(approximate="tanh"),
                                    nn.Linear(4 * d_model, d_model))
        self.blocks = nn.ModuleList()
        for _ in range(n_layers):
            if ffn:
                self.blocks += [PreNormResidual(d_model, mixer(d_model), ln),
                                PreNormResidual(d_model, mlp(), ln)]
            else:
                self.blocks.append(mixer(d_model))
        self.norm_f = nn.LayerNorm(d_model) if ffn else nn.Identity()
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        if ffn:
            self.apply(_normal_init)
        self.head.weight = self.embed.weight

    def _embed(self, ids):
        x = self.embed(ids)  # [B, T, D]
        if self.pos is not None:
            if ids.shape[1] > self.pos.num_embeddings:
                raise ValueError(f"sequence length {ids.shape[1]} > max_positions "
                                 f"{self.pos.num_embeddings}: raise backbone.max_positions")
            x = x + self.pos(torch.arange(ids.shape[1], device=ids.device))
        return x

    def forward(self, ids):
        e = self._embed(ids)
        if not self.ffn:  # seq_icl lm_simple_noffn: each layer maps the embeddings, the last wins
            x = e
            for mixer in self.blocks:
                x = _mix(mixer, e)
            return self.head(x)  # [B, T, V]
        x = self.drop(e)  # [B, T, D]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm_f(x))  # [B, T, V]
