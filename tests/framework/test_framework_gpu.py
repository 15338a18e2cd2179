"""CUDA checks (marked gpu; run with a GPU: pytest -m gpu tests/framework): fla's Triton kernels,
which the fla-based mixers call on CUDA, agree with the pure-torch references used on CPU, and
a bf16-autocast training step works for every mixer."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.gpu
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _inputs(B=2, T=100, H=2, K=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    return r(B, T, H, K), r(B, T, H, K), r(B, T, H, K)


@cuda
def test_fla_kernels_match_cpu_references():
    from zeros.mixers import fla_based as ops
    q, k, v = _inputs()
    gk = F.logsigmoid(torch.randn_like(q)) / 4
    g = F.logsigmoid(torch.randn(q.shape[:3])) / 4
    beta = torch.rand(q.shape[:3])
    kn = F.normalize(k, dim=-1)
    w = -torch.exp(torch.randn_like(q) - 2)
    u = torch.randn(q.shape[2], q.shape[3])
    c = lambda *t: [x.cuda() for x in t]  # noqa: E731
    pairs = {
        "gla": (ops.gla_op, (q, k, v, gk, 0.2)),
        "simple_gla": (ops.simple_gla_op, (q, k, v, g, 0.2)),
        "delta": (ops.delta_op, (q, kn, v, beta, 0.2)),
        "retention": (ops.retention_op, (q, k, v)),
        "rwkv6": (ops.rwkv6_op, (q, k, v, w, u, 0.2)),
    }
    for name, (fn, args) in pairs.items():
        tensors = [a for a in args if torch.is_tensor(a)]
        rest = [a for a in args if not torch.is_tensor(a)]
        ref = fn(*tensors, *rest)
        got = fn(*c(*tensors), *rest).float().cpu()
        assert torch.allclose(got, ref, atol=2e-2, rtol=2e-2), f"{name}: {(got - ref).abs().max()}"
    x, gh = torch.randn(2, 100, 64), F.logsigmoid(torch.randn(2, 100, 64))
    assert torch.allclose(ops.hgrn_op(*c(x, gh)).cpu(), ops.hgrn_op(x, gh), atol=1e-3)


@cuda
@pytest.mark.parametrize("name", ["zeros", "zeros_sm", "softmax", "linear_attn", "gla", "deltanet",
                                  "mamba", "mamba2", "hgrn", "hgrn2", "retnet", "rwkv6", "hyena",
                                  "mh_hyena", "aft", "h3", "baseconv"])
def test_bf16_autocast_step_on_cuda(name):
    from zeros.mixers import create_mixer
    m = create_mixer(name, 128, 4).cuda()
    x = torch.randn(2, 128, 128, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = m(x)
    assert y.shape == x.shape and torch.isfinite(y.float()).all()
    y.float().square().mean().backward()
    assert all(p.grad is not None for p in m.parameters())
