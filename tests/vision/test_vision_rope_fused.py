"""The 2-D axial RoPE in the layers' fused RoPE + unit-norm step (zeros/rope.py `rope_normalize`
with tasks/vision/rope2d.py `axial_tables`) against the step-by-step form (`apply_axial_rope`,
then F.normalize), forward AND backward, and the vision layers end to end."""
import pytest
import torch
import torch.nn.functional as F

from tasks.vision.attention import build_zeros_layer
from tasks.vision.rope2d import apply_axial_rope, axial_tables
from zeros.rope import rope_normalize


pytestmark = pytest.mark.usefixtures("rope_path")  # every test: C and torch (tests/conftest.py)


def _plain(qk, prefix, grid, base, normalize):
    acc = torch.float64 if qk.dtype == torch.float64 else torch.float32
    outs = []
    for t in qk.unbind(2):
        r = apply_axial_rope(t.to(acc), prefix, grid, base).to(acc)
        outs.append(F.normalize(r, dim=-1) if normalize else r)
    return torch.stack(outs, 2).to(qk.dtype)


# awkward grids: a single patch, non-square, no prefix token, two prefix tokens, DeiT's 14x14
CASES = [(1, (1, 1)), (1, (3, 5)), (0, (2, 3)), (2, (4, 4)), (1, (14, 14))]


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("prefix,grid", CASES)
def test_axial_tables_in_rope_normalize_match_apply_axial_rope_fwd_bwd(prefix, grid, normalize):
    T, d = prefix + grid[0] * grid[1], 12
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, T, 2, 3, d, generator=g, dtype=torch.float64).requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    y = rope_normalize(x, tables=axial_tables(T, d, prefix, grid, 7.0), normalize=normalize)
    y_ref = _plain(x2, prefix, grid, 7.0, normalize)
    assert torch.allclose(y, y_ref, atol=1e-6)  # the tables are fp32 angles, like the reference's
    w = torch.randn(y.shape, generator=g, dtype=torch.float64)
    (y * w).sum().backward()
    (y_ref * w).sum().backward()
    assert torch.allclose(x.grad, x2.grad, atol=1e-5)


def test_axial_rope_normalize_gradcheck():
    x = torch.randn(1, 5, 2, 2, 8, dtype=torch.float64, requires_grad=True)
    tables = tuple(t.double() for t in axial_tables(5, 8, 1, (2, 2)))
    assert torch.autograd.gradcheck(lambda t: rope_normalize(t, tables=tables), (x,))


def test_rope_normalize_rejects_tables_of_another_shape():
    x = torch.randn(1, 5, 2, 1, 8)
    with pytest.raises(ValueError, match="tables"):
        rope_normalize(x, tables=axial_tables(5, 12, 1, (2, 2)))


def _unfused(layer):
    """The layer's RoPE + norm step as it was: the `_rope` hook, then F.normalize of q and k."""
    def rope_qk(qk, offset, normalize):
        q, k = layer._rope(*qk.unbind(2), offset)
        return (F.normalize(q, dim=-1), F.normalize(k, dim=-1)) if normalize else (q, k)
    return rope_qk


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mixer", ["zeros", "zeros_sm"])
@pytest.mark.parametrize("causal", [False, True])
def test_vision_layer_fused_rope_equals_hook_then_normalize_fwd_bwd(mixer, causal, dtype):
    torch.manual_seed(0)
    fused = build_zeros_layer(mixer, 24, 2, causal=causal, rope="2d", grid=(3, 5), backend="naive")
    ref = build_zeros_layer(mixer, 24, 2, causal=causal, rope="2d", grid=(3, 5), backend="naive")
    ref.load_state_dict(fused.state_dict())
    ref._rope_qk = _unfused(ref)
    fused, ref = fused.to(dtype), ref.to(dtype)
    x = torch.randn(3, 16, 24).to(dtype).requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    y, y_ref = fused(x), ref(x2)
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    assert torch.allclose(y.float(), y_ref.float(), atol=tol)
    w = torch.randn(y.shape).to(dtype)
    (y.float() * w.float()).sum().backward()
    (y_ref.float() * w.float()).sum().backward()
    assert torch.allclose(x.grad.float(), x2.grad.float(), atol=tol * 10)
    for (name, p), p2 in zip(fused.named_parameters(), ref.parameters()):
        assert torch.allclose(p.grad.float(), p2.grad.float(), atol=tol * 10), name


def test_vision_layer_without_rope_and_with_1d_rope_still_build_and_run():
    for rope in ("none", "1d"):
        layer = build_zeros_layer("zeros", 16, 2, rope=rope)
        assert layer(torch.randn(1, 10, 16)).shape == (1, 10, 16)
