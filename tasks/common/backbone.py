"""A generic pre-norm residual stack around any registered mixer (MAD, MQAR, RegBench, LM).

embed -> n_layers x [x + mixer(norm(x)), x + mlp(norm(x))] -> norm -> head. The mixer is built
per block from the MixerSpec, so every table row is one config value (`mixer=gla`).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from zeros.mixers import MixerSpec, check_mixer_args

from .errors import ConfigError


def count_parameters(model: nn.Module) -> int:
    """Parameters of a model, tied ones once (what the tables' Params column reports)."""
    return sum(p.numel() for p in model.parameters())


class SwiGLU(nn.Module):
    """w3(silu(w1 x) * w2 x), with w1 and w2 fused into one [2·hidden, d] matrix."""

    def __init__(self, d_model, hidden, bias=False, dropout=0.0):
        super().__init__()
        self.w12 = nn.Linear(d_model, 2 * hidden, bias=bias)
        self.w3 = nn.Linear(hidden, d_model, bias=bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        a, b = self.w12(x).chunk(2, dim=-1)  # [B, T, hidden] each
        return self.drop(self.w3(F.silu(a) * b))


class GeluMLP(nn.Module):
    def __init__(self, d_model, hidden, bias=True, dropout=0.0):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_model, hidden, bias=bias), nn.Linear(hidden, d_model, bias=bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.drop(self.fc2(self.drop(F.gelu(self.fc1(x)))))


def make_norm(kind: str, d_model: int) -> nn.Module:
    if kind == "rms":
        return nn.RMSNorm(d_model)
    if kind == "layer":
        return nn.LayerNorm(d_model)
    raise ConfigError(f"unknown norm {kind!r}: use backbone.norm=rms or backbone.norm=layer")


class Block(nn.Module):
    def __init__(self, mixer: nn.Module, mlp: nn.Module | None, d_model: int, norm: str, dropout: float):
        super().__init__()
        self.norm1, self.mixer = make_norm(norm, d_model), mixer
        self.norm2 = make_norm(norm, d_model) if mlp is not None else None
        self.mlp = mlp
        self.drop = nn.Dropout(dropout)

    def forward(self, x):  # [B, T, D]
        x = x + self.drop(self.mixer(self.norm1(x)))
        if self.mlp is not None:
            x = x + self.mlp(self.norm2(x))
        return x


class SequenceBackbone(nn.Module):
    """Token ids [B, T] (or features [B, T, in_dim] when in_dim is set) -> [B, T, out_dim]."""

    def __init__(self, mixer: MixerSpec, *, d_model: int, n_layers: int, n_heads: int,
                 vocab_size: int | None = None, in_dim: int | None = None,
                 out_dim: int | None = None, mlp: str = "swiglu", mlp_hidden: int | None = None,
                 norm: str = "rms", causal: bool = True, tie_embeddings: bool = False,
                 pos_emb: str = "none", max_len: int = 2048, dropout: float = 0.0,
                 mixer_kwargs: dict | None = None):
        super().__init__()
        try:
            check_mixer_args(mixer.name, d_model, n_heads, causal)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if (vocab_size is None) == (in_dim is None):
            raise ConfigError("SequenceBackbone needs exactly one of backbone.vocab_size (token "
                              "ids) or backbone.in_dim (features)")
        self.embed = nn.Embedding(vocab_size, d_model) if vocab_size else nn.Linear(in_dim, d_model)
        if pos_emb not in ("none", "learned"):
            raise ConfigError(f"unknown pos_emb {pos_emb!r}: use backbone.pos_emb=none|learned")
        self.pos = nn.Embedding(max_len, d_model) if pos_emb == "learned" else None
        hidden = mlp_hidden or 4 * d_model
        mlps = {"swiglu": SwiGLU, "gelu": GeluMLP, "none": None}
        if mlp not in mlps:
            raise ConfigError(f"unknown mlp {mlp!r}: use backbone.mlp=swiglu|gelu|none")
        blocks = []
        for _ in range(n_layers):  # each block's MLP built before its mixer: the init's RNG order
            ff = mlps[mlp](d_model, hidden, dropout=dropout) if mlps[mlp] else None
            blocks.append(Block(mixer(d_model, n_heads, causal=causal, **(mixer_kwargs or {})), ff,
                                d_model, norm, dropout))
        self.blocks = nn.ModuleList(blocks)
        self.drop = nn.Dropout(dropout)
        self.norm = make_norm(norm, d_model)
        out_dim = out_dim or vocab_size
        if out_dim is None:
            raise ConfigError("set backbone.out_dim (no vocab_size to default to)")
        self.head = nn.Linear(d_model, out_dim, bias=False)
        if tie_embeddings:
            if not vocab_size or out_dim != vocab_size:
                raise ConfigError("tie_embeddings needs token inputs with out_dim == vocab_size")
            self.head.weight = self.embed.weight

    def features(self, x):
        h = self.embed(x)  # [B, T, D]
        if self.pos is not None:
            h = h + self.pos(torch.arange(h.shape[1], device=h.device))
        h = self.drop(h)
        for blk in self.blocks:
            h = blk(h)
        return self.norm(h)  # [B, T, D]

    def forward(self, x):
        return self.head(self.features(x))  # [B, T, out_dim]
