"""Rotary position embedding (rotate-half form) on [B, T, H, d] tensors, with a position offset
so a decoding step continues where the prompt stopped."""
from __future__ import annotations

import torch


def rope_angles(positions: torch.Tensor, dim: int, base: float = 10000.0):
    """cos, sin of shape [T, 1, dim] for integer positions [T]."""
    if dim % 2:
        raise ValueError(f"RoPE needs an even head dim, got {dim}: change d_model/n_heads or "
                         "set rope=False")
    inv = base ** (-torch.arange(0, dim, 2, device=positions.device, dtype=torch.float32) / dim)
    ang = positions.to(torch.float32)[:, None] * inv[None, :]  # [T, dim/2]
    ang = torch.cat([ang, ang], dim=-1)[:, None, :]  # [T, 1, dim]
    return ang.cos(), ang.sin()


def apply_rope(x: torch.Tensor, offset: int = 0, base: float = 10000.0) -> torch.Tensor:
    """Rotate x [B, T, H, d] by the angles of positions offset .. offset+T-1."""
    T, d = x.shape[1], x.shape[-1]
    pos = torch.arange(offset, offset + T, device=x.device)
    cos, sin = rope_angles(pos, d, base)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    rotated = torch.cat([-x2, x1], dim=-1)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)
