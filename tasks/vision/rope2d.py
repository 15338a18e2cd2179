"""2-D axial rotary position embedding for ViT tokens [prefix tokens, then a row-major patch grid].

Why 2-D: a 1-D RoPE over the flattened token order would put two vertically adjacent patches
`grid_w` positions apart while two horizontally adjacent ones are 1 apart, so the rotation would
encode raster distance, not image geometry. Axial RoPE splits each head's d channels in two
halves: the first half is rotated by the patch row, the second by the patch column (each half in
the rotate-half form of zeros/rope.py), so q·k after rotation depends on the (Δrow, Δcol) offset
only. Prefix tokens (the class token) are not rotated: they have no place on the grid, and
leaving them at the identity rotation is what timm's own RoPE ViTs do with their prefix tokens.
"""
from __future__ import annotations

import math

import torch

from zeros.rope import rope_angles


def infer_grid(num_patches: int) -> tuple[int, int]:
    """A square (rows, cols) grid for `num_patches` tokens; non-square grids must be given."""
    side = math.isqrt(num_patches)
    if side * side != num_patches:
        raise ValueError(f"{num_patches} patch tokens do not form a square grid: pass "
                         "grid=(rows, cols) to the 2-D RoPE attention (vision_attn_layer)")
    return side, side


def _rotate_half(x, cos, sin):
    """Rotate-half RoPE of x [B, N, H, m] by angles cos/sin [N, 1, m]."""
    m = x.shape[-1]
    x1, x2 = x[..., : m // 2], x[..., m // 2:]
    rotated = torch.cat([-x2, x1], dim=-1)
    return x * cos + rotated * sin


def _grid(T: int, d: int, num_prefix_tokens: int, grid):
    if d % 4:
        raise ValueError(f"2-D axial RoPE needs a head dim divisible by 4, got {d}: change "
                         "embed_dim/num_heads or use rope='1d' or 'none'")
    n_patch = T - num_prefix_tokens
    rows, cols = grid if grid is not None else infer_grid(n_patch)
    if rows * cols != n_patch:
        raise ValueError(f"grid {rows}x{cols} does not match {n_patch} patch tokens "
                         f"(T={T}, num_prefix_tokens={num_prefix_tokens})")
    return n_patch, cols


def axial_tables(T: int, d: int, num_prefix_tokens: int = 1, grid: tuple[int, int] | None = None,
                 base: float = 100.0, device=None):
    """cos, sin [T, 2, d/4] of `apply_axial_rope` for zeros/rope.py `rope_normalize(tables=)`:
    group 0 (the first half of d) by patch row, group 1 by patch column, each a rotate-half
    within its half; prefix tokens get the identity (cos 1, sin 0)."""
    n_patch, cols = _grid(T, d, num_prefix_tokens, grid)
    idx = torch.arange(n_patch, device=device)
    m = d // 4
    cos = torch.ones(T, 2, m, device=device)
    sin = torch.zeros(T, 2, m, device=device)
    for g, pos in enumerate((idx // cols, idx % cols)):
        c, s = rope_angles(pos, d // 2, base)  # [N, 1, d/2]: the m angles twice
        cos[num_prefix_tokens:, g], sin[num_prefix_tokens:, g] = c[:, 0, :m], s[:, 0, :m]
    return cos, sin


def apply_axial_rope(x: torch.Tensor, num_prefix_tokens: int = 1,
                     grid: tuple[int, int] | None = None, base: float = 100.0) -> torch.Tensor:
    """Rotate patch tokens of x [B, T, H, d] by their (row, col); the first
    `num_prefix_tokens` tokens are returned unchanged. d must be a multiple of 4.

    `base` defaults to 100 (not 10,000): a ViT grid is only ~14 positions wide, and with base
    10,000 most channel pairs would barely rotate across the image.
    The layers take the fused form (`axial_tables` + zeros/rope.py `rope_normalize`); this
    step-by-step one is the reference the tests hold it to.
    """
    B, T, H, d = x.shape
    n_patch, cols = _grid(T, d, num_prefix_tokens, grid)
    idx = torch.arange(n_patch, device=x.device)
    cos_r, sin_r = rope_angles(idx // cols, d // 2, base)  # [N, 1, d/2] row angles
    cos_c, sin_c = rope_angles(idx % cols, d // 2, base)  # [N, 1, d/2] column angles
    patches = x[:, num_prefix_tokens:].float()  # [B, N, H, d]
    half = d // 2
    rot = torch.cat([_rotate_half(patches[..., :half], cos_r, sin_r),
                     _rotate_half(patches[..., half:], cos_c, sin_c)], dim=-1)  # [B, N, H, d]
    return torch.cat([x[:, :num_prefix_tokens], rot.to(x.dtype)], dim=1)
