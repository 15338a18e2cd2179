"""Input makers and comparisons for the kernel tests (named apart from tests/ops/helpers.py)."""
import torch
import torch.nn.functional as F

NAMES = ("q", "k", "v", "s", "g1", "gh", "g0")


def make_inputs(B=2, T=17, H=2, d=16, g0=False, seed=0, s_scale=3.0, dtype=torch.float32,
                device="cpu"):
    """Random operator inputs (unit-norm q, k; logits; activated gates), all requiring grad."""
    g = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(B, T, H, d, generator=g), dim=-1)
    k = F.normalize(torch.randn(B, T, H, d, generator=g), dim=-1)
    v = torch.randn(B, T, H, d, generator=g)
    s = s_scale * torch.randn(B, T, H, generator=g)
    g1 = torch.sigmoid(torch.randn(B, T, H, generator=g))
    gh = torch.sigmoid(torch.randn(B, T, H, generator=g))
    z = torch.tanh(torch.randn(B, T, H, generator=g)) if g0 else None
    return [None if x is None else x.to(device=device, dtype=dtype).requires_grad_()
            for x in (q, k, v, s, g1, gh, z)]


def as_reference(inputs):
    """float64 CPU leaf copies for the naive ground truth."""
    return [None if x is None else x.detach().cpu().double().requires_grad_() for x in inputs]


def grads(out, inputs, seed=1):
    """Gradients of <out, w> for a fixed random w w.r.t. every non-None input."""
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    loss = (out.double() * w.to(out.device)).sum()
    return torch.autograd.grad(loss, [x for x in inputs if x is not None])


def max_err(a, b, floor=1e-2):
    """max |a − b| / max(max |b|, floor): relative to the reference's scale; the floor compares
    an (almost) exactly-zero reference, e.g. ds at T = 1, in absolute terms."""
    a, b = a.detach().cpu().double(), b.detach().cpu().double()
    return ((a - b).abs().max() / b.abs().max().clamp_min(floor)).item()
