"""The RoPE of the authors' released ZeroS layer (`rope_style="authors"`), quirk included.

Their layer builds the cos/sin tables with each frequency repeated as an interleaved pair
([f0, f0, f1, f1, ..., f_{d/2-1}, f_{d/2-1}] along the head dim) but rotates with rotate_half,
which pairs channel j with j + d/2. Channel j (< d/2) therefore turns by the angle of frequency
j // 2 while its partner j + d/2 turns by that of frequency (j + d/2) // 2: the 2x2 map of each
pair is [[cos a, -sin a], [sin b, cos b]] with a = f_{j//2}·t != b = f_{(j+d/2)//2}·t for every
pair once d >= 4 (at d = 2 both halves use f0 and it is the standard RoPE). So it is
neither a rotation (the norm changes; the layer L2-normalises right after, so only directions
survive) nor relative (q_m . k_n depends on m and n, not only on m - n). docs/operator.md,
"RoPE style", says why the suite defaults to the standard RoPE (zeros/rope.py).

Our own code, written from that description; positions start at `offset` (decoding).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

ROPE_STYLES = ("standard", "authors")


def check_rope_style(rope_style: str) -> str:
    if rope_style not in ROPE_STYLES:
        raise ValueError(f"rope_style={rope_style!r} is not one of {ROPE_STYLES}: pass "
                         "rope_style='standard' (rotation) or 'authors' (their released layer)")
    return rope_style


def authors_rope_tables(T: int, dim: int, offset: int = 0, base: float = 10000.0, device=None):
    """cos, sin [T, dim]: frequency i at channels 2i and 2i+1 (the interleaved layout)."""
    if dim % 2:
        raise ValueError(f"RoPE needs an even head dim, got {dim}: change d_model/n_heads or "
                         "set rope=False")
    inv = base ** (-torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim)
    pos = torch.arange(offset, offset + T, device=device, dtype=torch.float32)
    ang = pos[:, None] * inv[None, :]  # [T, dim/2]
    ang = torch.stack([ang, ang], dim=-1).flatten(-2)  # [T, dim]: f0 f0 f1 f1 ...
    return ang.cos(), ang.sin()


def apply_rope_authors(x: torch.Tensor, offset: int = 0, base: float = 10000.0) -> torch.Tensor:
    """x [B, T, H, d] -> x * cos + rotate_half(x) * sin with the interleaved tables above
    (rotate_half: [x1, x2] -> [-x2, x1], halves of d). fp32 (fp64 stays fp64), x's dtype out."""
    T, d = x.shape[1], x.shape[-1]
    cos, sin = authors_rope_tables(T, d, offset, base, x.device)
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(acc)
    x1, x2 = xf[..., : d // 2], xf[..., d // 2:]
    rotated = torch.cat([-x2, x1], dim=-1)
    c, s = cos[:, None].to(acc), sin[:, None].to(acc)  # [T, 1, d]: broadcast over heads
    return (xf * c + rotated * s).to(x.dtype)


def unit_norm(x: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """F.normalize over the head dim in fp32 (fp64 stays fp64), x's dtype out."""
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    return F.normalize(x.to(acc), dim=-1, eps=eps).to(x.dtype)
