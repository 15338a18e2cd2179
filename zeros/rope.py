"""Rotary position embedding (rotate-half form) on [B, T, H, d] tensors, with a position offset
so a decoding step continues where the prompt stopped."""
from __future__ import annotations

import torch

from .ops import native
from .ops.library import DifferentiableOp


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
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32  # fp64 stays fp64
    return (x.to(acc) * cos + rotated.to(acc) * sin).to(x.dtype)


def rope_half_tables(T: int, dim: int, offset: int = 0, base: float = 10000.0, device=None):
    """cos, sin [T, dim/2]: the angles of `rope_angles` once per channel pair (channels j and
    j + dim/2 share an angle in the rotate-half form)."""
    cos, sin = rope_angles(torch.arange(offset, offset + T, device=device), dim, base)
    return cos[:, 0, : dim // 2], sin[:, 0, : dim // 2]


def _rope_fwd(x, cos, sin, normalize, eps):
    """y = R x / max(‖x‖, eps) on x [B, T, n, H, d] (q and k stacked: ONE call for both), with
    R the rotate-half rotation of each position within each of G equal channel groups (G = 1:
    the 1-D RoPE, channel j pairs with j + d/2; G = 2: tasks/vision's 2-D axial RoPE, a
    rotate-half within each half of d). cos, sin [T, G, m], m = d / (2G). R is orthogonal, so
    normalising after the rotation (the layers' maths) equals scaling R x by 1/‖R x‖, and the
    backward is dx = Rᵀ(g - (g·y) y) / ‖x‖: a handful of passes instead of autograd's ~20
    small ops; where zeros/ops/native.py has its C kernels, one pass each way (csrc/rope.c).
    Returns (y, inv, keep): y in fp32 (fp64 stays fp64) with memory [n, B, T, H, d], so
    y[:, :, j] is a contiguous [B, T, H, d] tensor; inv = 1/max(‖x‖, eps), keep = ‖x‖ > eps,
    [B, T, n, H] ([0] without normalize), for the backward."""
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    T, G, m = cos.shape
    xa = x.to(acc)
    y = _y_like(x, acc)
    if native.rope_supported(xa):
        c, s = (t.to(acc).contiguous() for t in (cos, sin))
        inv, keep = native.rope_forward(xa, c, s, y, normalize, eps)
        if inv is None:
            return y, x.new_empty(0, dtype=acc), x.new_empty(0, dtype=acc)
        return y, inv, keep
    c, s = (t.to(acc).view(T, 1, 1, G, m) for t in (cos, sin))
    xf, yv = xa.unflatten(-1, (G, 2, m)), y.unflatten(-1, (G, 2, m))  # views: d stays contiguous
    x1, x2, y1, y2 = xf[..., 0, :], xf[..., 1, :], yv[..., 0, :], yv[..., 1, :]
    torch.mul(x1, c, out=y1).addcmul_(x2, s, value=-1)  # [x1, x2] -> [x1 c - x2 s,
    torch.mul(x2, c, out=y2).addcmul_(x1, s)  #                   x2 c + x1 s]
    if not normalize:
        return y, x.new_empty(0, dtype=acc), x.new_empty(0, dtype=acc)
    nrm = torch.linalg.vector_norm(y, dim=-1)
    keep = (nrm > eps).to(acc)  # below eps F.normalize divides by eps: a plain scale
    inv = nrm.clamp_min_(eps).reciprocal_()
    y.mul_(inv[..., None])
    return y, inv, keep


def _y_like(x, acc):
    """An empty tensor of x's shape with memory [n, B, T, H, d] (q and k each contiguous)."""
    return torch.empty((x.shape[2], *x.shape[:2], *x.shape[3:]), dtype=acc,
                       device=x.device).permute(1, 2, 0, 3, 4)


def _rope_fake(x, cos, sin, normalize, eps):
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    shape = x.shape[:-1] if normalize else (0,)
    return _y_like(x, acc), x.new_empty(shape, dtype=acc), x.new_empty(shape, dtype=acc)


def _rope_bwd(g, x, cos, sin, normalize, eps, y, inv, keep):
    """dx [B, T, n, H, d] (row-major, x's dtype) for the gradient g of y."""
    T, G, m = cos.shape
    z = g.to(y.dtype)
    if native.rope_supported(y):
        c, s = (t.to(y.dtype).contiguous() for t in (cos, sin))
        nrm = inv if normalize else None
        return (native.rope_backward(z, y, c, s, nrm, keep if normalize else None,
                                     normalize).to(x.dtype),)
    c, s = (t.to(y.dtype).view(T, 1, 1, G, m) for t in (cos, sin))
    if normalize:  # the normalisation's Jacobian: remove the component along y
        z = torch.addcmul(z, (z * y).sum(-1, keepdim=True) * keep[..., None], y, value=-1)
    dx = torch.empty(y.shape, dtype=y.dtype, device=y.device)
    zv, dv = z.unflatten(-1, (G, 2, m)), dx.unflatten(-1, (G, 2, m))
    z1, z2, d1, d2 = zv[..., 0, :], zv[..., 1, :], dv[..., 0, :], dv[..., 1, :]
    torch.mul(z1, c, out=d1).addcmul_(z2, s)  # Rᵀ: the rotation by -angle
    torch.mul(z2, c, out=d2).addcmul_(z1, s, value=-1)
    if normalize:
        dx.mul_(inv[..., None])
    return (dx.to(x.dtype),)


ROPE_OP = DifferentiableOp(
    "rope_normalize", _rope_fwd, _rope_bwd, _rope_fake,
    "(Tensor x, Tensor cos, Tensor sin, bool normalize, float eps) -> (Tensor, Tensor, Tensor)", 1,
    save_out=True)


def rope_normalize(x: torch.Tensor, offset: int = 0, base: float = 10000.0, *, rope: bool = True,
                   normalize: bool = True, eps: float = 1e-12, tables=None) -> torch.Tensor:
    """RoPE then L2-normalise (F.normalize's eps) x [B, T, n, H, d] in one fused op, n tensors
    stacked (q and k). rope=False: normalise only. tables=(cos, sin): the rotation's angles
    instead of the 1-D RoPE's (offset and base are then unused), either [T, d/2] (rotate-half
    over d) or [T, G, d/(2G)] (rotate-half within each of G equal channel groups, e.g.
    tasks/vision/rope2d.py `axial_tables`); identity rows are cos 1, sin 0."""
    T, d = x.shape[1], x.shape[-1]
    if not rope:
        if not normalize:
            return x
        acc = torch.float64 if x.dtype == torch.float64 else torch.float32
        return torch.nn.functional.normalize(x.to(acc), dim=-1, eps=eps).to(x.dtype)
    if tables is None:
        cos, sin = rope_half_tables(T, d, offset, base, x.device)
    else:
        cos, sin = tables
    if cos.dim() == 2:
        cos, sin = cos[:, None], sin[:, None]  # one group
    if cos.shape != sin.shape or cos.shape[0] != T or 2 * cos.shape[1] * cos.shape[2] != d:
        raise ValueError(f"RoPE tables of shape {tuple(cos.shape)} do not fit x {tuple(x.shape)}: "
                         "pass cos, sin [T, d/2] or [T, G, d/(2G)]")
    return ROPE_OP(x, cos, sin, normalize, eps)[0].to(x.dtype)
