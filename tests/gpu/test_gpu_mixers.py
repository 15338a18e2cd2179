"""CUDA checks of the fla-based mixers (marked gpu; `pytest -m gpu tests/gpu` on a GPU): each fla
kernel the mixers call agrees with the pure-torch reference used on CPU, in bf16 (what
bf16-mixed hands it) and in fp32 where the path takes fp32, at a head dim the chunk kernels take
(32) and one below their minimum (8: the fused recurrent kernels); and a bf16-autocast training
step works for every mixer. One op / mixer per test, so one failure hides no other."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
OPS = ["gla", "simple_gla", "delta", "retention", "rwkv6"]


def _args(name, K, B=2, T=100, H=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    q, k, v = r(B, T, H, K), r(B, T, H, K), r(B, T, H, K)
    from zeros.mixers import fla_based as ops
    if name == "gla":
        return ops.gla_op, (q, k, v, F.logsigmoid(r(B, T, H, K)) / 4), dict(scale=0.2)
    if name == "simple_gla":
        return ops.simple_gla_op, (q, k, v, F.logsigmoid(r(B, T, H)) / 4), dict(scale=0.2)
    if name == "delta":
        return ops.delta_op, (q, F.normalize(k, dim=-1), v, torch.rand(B, T, H)), dict(scale=0.2)
    if name == "retention":
        return ops.retention_op, (q, k, v), {}
    w, u = -torch.exp(r(B, T, H, K) - 2), r(H, K)
    return ops.rwkv6_op, (q, k, v, w, u), dict(scale=0.2)


@pytest.mark.parametrize("K", [32, 8])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("name", OPS)
def test_fla_op_matches_cpu_reference(name, dtype, K):
    fn, tensors, kw = _args(name, K)
    ref = fn(*tensors, **kw)  # CPU: fla's naive fp32 reference
    low = [t.cuda().to(dtype) if t.dim() >= 3 and t.is_floating_point() else t.cuda()
           for t in tensors]
    got = fn(*low, **kw).float().cpu()
    tol = 5e-2 if dtype == torch.bfloat16 else 2e-3
    err = ((got - ref).abs().max() / ref.abs().max()).item()
    assert err < tol, f"{name} {dtype} K={K}: relative error {err:.3g}"


def test_hgrn_op_matches_cpu_reference():
    from zeros.mixers import fla_based as ops
    x, gh = torch.randn(2, 100, 64), F.logsigmoid(torch.randn(2, 100, 64))
    got = ops.hgrn_op(x.cuda(), gh.cuda()).cpu()
    assert torch.allclose(got, ops.hgrn_op(x, gh), atol=1e-3)


@pytest.mark.parametrize("n_heads", [4, 16])  # d = 32 and d = 8 (MAD)
@pytest.mark.parametrize("name", ["zeros", "zeros_sm", "softmax", "linear_attn", "gla",
                                  "deltanet", "mamba", "mamba2", "hgrn", "hgrn2", "retnet",
                                  "rwkv6", "hyena", "mh_hyena", "aft", "h3", "baseconv"])
def test_bf16_autocast_step_on_cuda(name, n_heads):
    from zeros.mixers import create_mixer
    m = create_mixer(name, 128, n_heads).cuda()
    x = torch.randn(2, 128, 128, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = m(x)
    assert y.shape == x.shape and torch.isfinite(y.float()).all()
    y.float().square().mean().backward()
    assert all(p.grad is not None for p in m.parameters() if p.requires_grad)


@pytest.mark.parametrize("name", ["deltanet", "gla", "hgrn2", "mamba2", "zeros"])
def test_fp32_step_on_cuda(name):
    """precision=32-true: DeltaNet's chunk kernel refuses fp32, the fused recurrent one runs."""
    from zeros.mixers import create_mixer
    m = create_mixer(name, 128, 4).cuda()
    y = m(torch.randn(2, 100, 128, device="cuda"))
    assert y.dtype == torch.float32 and torch.isfinite(y).all()
    y.square().mean().backward()
