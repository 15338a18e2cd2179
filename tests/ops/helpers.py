"""Shared input makers for the operator tests."""
import torch
import torch.nn.functional as F


def make_inputs(B=2, T=16, H=3, d=8, dtype=torch.float64, g0=False, s_scale=3.0, seed=0,
                requires_grad=False):
    """Random ZeroS operator inputs: unit-norm q, k; logits s; activated gates."""
    g = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(B, T, H, d, generator=g, dtype=torch.float64), dim=-1)
    k = F.normalize(torch.randn(B, T, H, d, generator=g, dtype=torch.float64), dim=-1)
    v = torch.randn(B, T, H, d, generator=g, dtype=torch.float64)
    s = s_scale * torch.randn(B, T, H, generator=g, dtype=torch.float64)
    g1 = torch.sigmoid(torch.randn(B, T, H, generator=g, dtype=torch.float64))
    gh = torch.sigmoid(torch.randn(B, T, H, generator=g, dtype=torch.float64))
    z = torch.tanh(torch.randn(B, T, H, generator=g, dtype=torch.float64)) if g0 else None
    out = [x if x is None else x.to(dtype).requires_grad_(requires_grad)
           for x in (q, k, v, s, g1, gh, z)]
    return out


def grads(out, inputs, seed=1):
    """Gradients of <out, w> for a fixed random w, w.r.t. every input that requires grad."""
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    loss = (out.to(torch.float64) * w).sum()
    xs = [x for x in inputs if x is not None]
    return torch.autograd.grad(loss, xs)


def rel_err(a, b, floor=1e-2):
    """max |a - b| / max |b| (b the reference; the floor makes an exactly-zero reference,
    e.g. T = 1 without g0, is compared in absolute terms)."""
    a, b = a.to(torch.float64), b.to(torch.float64)
    return ((a - b).abs().max() / b.abs().max().clamp_min(floor)).item()
