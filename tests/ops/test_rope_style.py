"""rope_style on the ZeroS layers: the standard RoPE is a relative rotation; the authors' style
reproduces their released layer's non-rotation (interleaved frequencies under rotate_half)."""
import math

import pytest
import torch
import torch.nn.functional as F

from zeros import ZeroSAttention, ZeroSSMAttention
from zeros.mixers import create_mixer
from zeros.ops import naive_zeros
from zeros.rope import apply_rope
from zeros.rope_authors import apply_rope_authors, authors_rope_tables

ROPES = {"standard": apply_rope, "authors": apply_rope_authors}
# the setup of the measurement as we reconstruct it (it is not recorded): head dim 16,
# positions 0..63, 64 unit-norm random vectors per seed; the issue measured |Rx|/|x| off by up to 0.5 and q.k
# changing by up to 0.52 when both positions shift
D_HEAD, T = 16, 64


def _unit(n, seed):
    g = torch.Generator().manual_seed(seed)
    return F.normalize(torch.randn(n, 1, 1, D_HEAD, generator=g, dtype=torch.float64), dim=-1)


def _norm_ratio_deviation(rope):
    x = _unit(64, 0).expand(64, T, 1, D_HEAD)
    return (rope(x).norm(dim=-1) - 1).abs().max().item()


def _qk_shift_change(rope, shift=8):
    """max over (m, n) and 64 random pairs of |q_m·k_n - q_{m+s}·k_{n+s}| (rotated, not renormed)."""
    q, k = (rope(_unit(64, s).expand(64, T, 1, D_HEAD)) for s in (1, 2))
    dots = torch.einsum("bmhd,bnhd->bmn", q, k)
    return (dots[:, shift:, shift:] - dots[:, :T - shift, :T - shift]).abs().max().item()


def test_authors_tables_repeat_each_frequency_as_an_interleaved_pair():
    cos, sin = authors_rope_tables(5, 8)
    assert cos.shape == (5, 8)
    assert torch.equal(cos[:, 0::2], cos[:, 1::2]) and torch.equal(sin[:, 0::2], sin[:, 1::2])
    assert not torch.allclose(cos[:, :4], cos[:, 4:])  # the standard layout repeats halves


def test_authors_rope_hand_computed_at_head_dim_4():
    """d = 4: channel 0 turns by f0·t but its rotate_half partner 2 by f1·t (f1 = base^-1/2)."""
    x = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64).expand(1, 3, 1, 4)
    y = apply_rope_authors(x, offset=5)
    for i, t in enumerate((5, 6, 7)):
        a, b = t * 1.0, t * 0.01  # f0 = 1, f1 = 10000 ** (-2/4)
        want = [1 * math.cos(a) - 3 * math.sin(a), 2 * math.cos(b) - 4 * math.sin(b),
                3 * math.cos(b) + 1 * math.sin(b), 4 * math.cos(b) + 2 * math.sin(b)]
        # channel 1 pairs with 3 and reads frequency 0 (1 // 2); channel 2 frequency 1 (2 // 2)
        want[1] = 2 * math.cos(a) - 4 * math.sin(a)
        assert torch.allclose(y[0, i, 0], torch.tensor(want, dtype=torch.float64), atol=1e-6)


def test_standard_rope_is_a_rotation_norm_kept():
    assert _norm_ratio_deviation(apply_rope) < 1e-6


def test_standard_rope_is_relative_qk_unchanged_by_a_common_shift():
    assert _qk_shift_change(apply_rope) < 1e-5


def test_authors_rope_changes_the_norm_by_about_half():
    dev = _norm_ratio_deviation(apply_rope_authors)
    assert 0.4 < dev < 0.65, dev  # measured 0.549 here; the issue: |Rx|/|x| off by up to 0.5


def test_authors_rope_is_not_relative_qk_changes_about_052():
    change = _qk_shift_change(apply_rope_authors)
    # measured 0.573 here (shift 8; shifts 1/4/16/32 give 0.41/0.49/0.59/0.51): a maximum over
    # random samples, so the band is wide; the issue measured up to 0.52 on its own setup
    assert abs(change - 0.52) < 0.1, change


def _authors_reference(m, x):
    """The layer's maths step by step with the authors' RoPE (then unit norm), naive operator."""
    B, T_, D = x.shape
    H, d = m.n_heads, m.head_dim
    q, k, v, u = (x @ m.proj.weight.T + m.proj.bias).view(B, T_, 4, H, d).unbind(2)
    s, _ = m.deviation_logits(u)
    q, k = (F.normalize(apply_rope_authors(z), dim=-1) for z in (q, k))
    g = torch.sigmoid(x @ m.gate.weight.T + m.gate.bias).view(B, T_, 2, H)
    o = naive_zeros(q, k, v, s, g[:, :, 0], g[:, :, 1], None, causal=True)
    return F.layer_norm(o, (d,)).reshape(B, T_, D) @ m.out.weight.T + m.out.bias


def test_zeros_layer_authors_style_equals_its_step_by_step_form():
    torch.manual_seed(0)
    m = ZeroSAttention(64, 4, rope_style="authors").double()
    x = torch.randn(2, 19, 64, dtype=torch.float64)
    assert torch.allclose(m(x), _authors_reference(m, x), atol=1e-12)
    std = ZeroSAttention(64, 4).double()
    std.load_state_dict(m.state_dict())
    assert not torch.allclose(std(x), m(x), atol=1e-4)  # the style changes the output


@pytest.mark.parametrize("cls", [ZeroSAttention, ZeroSSMAttention])
def test_layer_with_authors_style_runs_forward_and_backward(cls):
    torch.manual_seed(0)
    m = cls(64, 4, rope_style="authors")
    x = torch.randn(2, 33, 64, requires_grad=True)
    y = m(x)
    y.pow(2).sum().backward()
    assert y.shape == x.shape and torch.isfinite(y).all() and torch.isfinite(x.grad).all()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in m.parameters())


@pytest.mark.parametrize("cls", [ZeroSAttention, ZeroSSMAttention])
def test_authors_style_decoding_equals_parallel(cls):
    """The offset reaches the authors' RoPE too (prompt, then one token at a time)."""
    torch.manual_seed(0)
    m = cls(32, 4, rope_style="authors").double().eval()
    x = torch.randn(1, 20, 32, dtype=torch.float64)
    y, st = m(x[:, :12], return_state=True)
    outs = [y]
    for t in range(12, 20):
        y_t, st = m(x[:, t:t + 1], state=st)
        outs.append(y_t)
    assert torch.allclose(torch.cat(outs, 1), m(x), atol=1e-11)


def test_without_rope_the_style_does_not_matter():
    a = ZeroSAttention(32, 4, rope=False).double()
    b = ZeroSAttention(32, 4, rope=False, rope_style="authors").double()
    b.load_state_dict(a.state_dict())
    x = torch.randn(1, 9, 32, dtype=torch.float64)
    assert torch.allclose(a(x), b(x), atol=1e-12)


def test_mixer_kwargs_select_the_style_and_a_bad_one_names_the_choices():
    m = create_mixer("zeros", 32, 4, causal=True, rope_style="authors")
    assert m.rope_style == "authors"
    assert create_mixer("zeros_sm", 32, 4, causal=True).rope_style == "standard"
    with pytest.raises(ValueError, match="rope_style='standard'"):
        ZeroSAttention(32, 4, rope_style="interleaved")


def test_a_layer_with_its_own_rope_refuses_the_authors_style():
    class OwnRope(ZeroSAttention):
        def _rope(self, q, k, offset):
            return q, k
    with pytest.raises(ValueError, match="brings its own RoPE"):
        OwnRope(32, 4, rope_style="authors")
    OwnRope(32, 4, rope=False, rope_style="authors")  # no RoPE: nothing to refuse
