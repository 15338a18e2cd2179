"""The layers' fused input steps against their plain compositions, forward AND backward:
zeros/rope.py `rope_normalize` (RoPE + unit norm on stacked q, k in one autograd Function) and
zeros/layer.py `_project` (projections and gates in one matmul, split once)."""
import pytest
import torch
import torch.nn.functional as F

from zeros import ZeroSAttention, ZeroSSMAttention
from zeros.rope import apply_rope, rope_normalize


pytestmark = pytest.mark.usefixtures("rope_path")  # every test: C and torch (tests/conftest.py)


def _qk(B, T, H, d, dtype, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(B, T, 2, H, d, generator=g, dtype=torch.float64)).to(dtype)


def _plain(x, offset, normalize):
    """The layers' previous steps: RoPE on q and on k, then F.normalize each, in fp32/fp64."""
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    outs = []
    for t in x.unbind(2):
        r = apply_rope(t.to(acc), offset)
        outs.append(F.normalize(r, dim=-1) if normalize else r)
    return torch.stack(outs, 2).to(x.dtype)


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("T,offset", [(1, 0), (7, 0), (11, 5), (65, 0), (197, 300)])
def test_rope_normalize_matches_rope_then_normalize_fwd_bwd(T, offset, normalize):
    x = _qk(2, T, 3, 8, torch.float64).requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    y, y_ref = rope_normalize(x, offset, normalize=normalize), _plain(x2, offset, normalize)
    assert torch.allclose(y, y_ref, atol=1e-12)
    g = torch.randn_like(y)
    (y * g).sum().backward()
    (y_ref * g).sum().backward()
    assert torch.allclose(x.grad, x2.grad, atol=1e-11)


def test_rope_normalize_gradcheck():
    x = _qk(1, 5, 2, 4, torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: rope_normalize(t, 3), (x,))


@pytest.mark.parametrize("scale", [1e-3, 1e3])
def test_rope_normalize_fp32_wide_input_ranges(scale):
    x = _qk(2, 33, 4, 16, torch.float32, scale=scale).requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    y, y_ref = rope_normalize(x, 0), _plain(x2, 0, True)
    assert torch.allclose(y, y_ref, atol=1e-6)
    assert torch.allclose(y.norm(dim=-1), torch.ones(()), atol=1e-6)
    g = torch.randn_like(y)
    (y * g).sum().backward()
    (y_ref * g).sum().backward()
    assert torch.allclose(x.grad, x2.grad, rtol=1e-4, atol=1e-5 / scale)


def test_rope_normalize_bf16_returns_bf16_close_to_fp32():
    x = _qk(2, 19, 2, 8, torch.bfloat16).requires_grad_()
    y = rope_normalize(x, 0)
    assert y.dtype == torch.bfloat16
    assert torch.allclose(y.float(), _plain(x.detach().float(), 0, True), atol=1e-2)
    y.float().sum().backward()
    assert x.grad.dtype == torch.bfloat16 and torch.isfinite(x.grad).all()


def test_rope_normalize_zero_vector_follows_normalize_eps():
    """Below eps F.normalize divides by eps (no direction to remove): same value and gradient."""
    x = _qk(1, 4, 1, 4, torch.float64)
    x[0, 2] = 0.0
    x.requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    y, y_ref = rope_normalize(x, 0), _plain(x2, 0, True)
    assert torch.equal(y[0, 2], torch.zeros_like(y[0, 2]))
    g = torch.randn_like(y)
    (y * g).sum().backward()
    (y_ref * g).sum().backward()
    assert torch.allclose(x.grad, x2.grad, atol=1e-6)


def test_rope_normalize_outputs_are_contiguous_per_tensor():
    """q, k = y.unbind(2) are contiguous [B, T, H, d] (the op's inputs, no extra copies)."""
    q, k = rope_normalize(_qk(2, 9, 3, 8, torch.float32), 0).unbind(2)
    assert q.is_contiguous() and k.is_contiguous()


def _separate_linears_layer(m, x):
    """The layer's forward with its projections as separate matmuls (the pre-fusion form)."""
    B, T, D = x.shape
    m2 = type(m)(D, m.n_heads, causal=m.causal, backend="naive").double()
    m2.load_state_dict(m.state_dict())
    m2._project = lambda x, n: _unfused_project(m2, x, n)
    return m2, m2(x)


def _unfused_project(m, x, n):
    B, T, D = x.shape
    parts = m.proj(x).view(B, T, n, m.n_heads, m.head_dim)
    raw = m.gate(x).view(B, T, -1, m.n_heads)
    return parts[:, :, :2], [parts[:, :, j] for j in range(2, n)], raw


@pytest.mark.parametrize("cls", [ZeroSAttention, ZeroSSMAttention])
@pytest.mark.parametrize("causal", [True, False])
def test_fused_projection_equals_separate_linears_fwd_bwd(cls, causal):
    m = cls(32, 4, causal=causal, backend="naive").double()
    x = torch.randn(2, 13, 32, dtype=torch.float64, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    m2, y_ref = _separate_linears_layer(m, x2)
    y = m(x)
    assert torch.allclose(y, y_ref, atol=1e-12)
    y.pow(2).sum().backward()
    y_ref.pow(2).sum().backward()
    assert torch.allclose(x.grad, x2.grad, atol=1e-10)
    for (name, p), p2 in zip(m.named_parameters(), m2.parameters()):
        assert torch.allclose(p.grad, p2.grad, atol=1e-10), name


def test_overridden_rope_hook_is_still_called():
    """A subclass replacing `_rope` (tasks/vision's 2-D RoPE) keeps its rotation; q, k are then
    normalised once on both."""
    calls = []

    class Hooked(ZeroSAttention):
        def _rope(self, q, k, offset):
            calls.append(q.shape)
            return q.flip(-1), k.flip(-1)

    m = Hooked(16, 2).double()
    y = m(torch.randn(1, 6, 16, dtype=torch.float64))
    assert calls == [(1, 6, 2, 8)] and torch.isfinite(y).all()


def test_rope_normalize_strided_input_and_gradient():
    """x as the layers pass it (a slice of the fused projection's output rows) and an output
    gradient in another layout: same values and gradient as the plain composition."""
    big = torch.randn(3, 10, 5 * 2 * 8 + 3, dtype=torch.float64)
    x = big[..., 7:7 + 2 * 2 * 8].view(3, 10, 2, 2, 8).requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    y, y_ref = rope_normalize(x, 4), _plain(x2, 4, True)
    assert torch.allclose(y, y_ref, atol=1e-12)
    g = torch.randn(2, 8, 3, 10, 2, dtype=torch.float64).permute(2, 3, 4, 0, 1)  # [3, 10, 2, 2, 8]
    (y * g).sum().backward()
    (y_ref * g).sum().backward()
    assert torch.allclose(x.grad, x2.grad, atol=1e-11)
