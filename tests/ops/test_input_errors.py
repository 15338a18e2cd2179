"""Bad input to the operators fails loudly with a message that names the problem."""
import pytest

from helpers import make_inputs
from zeros.ops import set_unit_norm_check, zeros_attention, zeros_sm_attention


def _inp(**kw):
    return make_inputs(B=2, T=5, H=3, d=4, **kw)


def test_mismatched_qkv_shapes():
    q, k, v, s, g1, gh, _ = _inp()
    with pytest.raises(ValueError, match=r"k has shape \(2, 4, 3, 4\) but q has \(2, 5, 3, 4\)"):
        zeros_attention(q, k[:, :4], v, s, g1, gh)


def test_gate_shape_is_not_broadcast():
    q, k, v, s, g1, gh, _ = _inp()
    with pytest.raises(ValueError, match=r"gh has shape \(2, 5, 1\) but must be \(2, 5, 3\)"):
        zeros_attention(q, k, v, s, g1, gh[..., :1])
    with pytest.raises(ValueError, match=r"s has shape \(5, 3\)"):
        zeros_attention(q, k, v, s[0], g1, gh)
    with pytest.raises(ValueError, match=r"q must have shape \(B, T, H, d\)"):
        zeros_attention(q[0], k[0], v[0], s, g1, gh)


def test_non_float_dtype():
    q, k, v, s, g1, gh, _ = _inp()
    with pytest.raises(TypeError, match=r"v has dtype torch.int64"):
        zeros_attention(q, k, v.long(), s, g1, gh)
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        zeros_attention(q, k, v, s.tolist(), g1, gh)


def test_not_unit_norm():
    q, k, v, s, g1, gh, _ = _inp()
    with pytest.raises(ValueError, match="q is not unit-norm.*L2-normalise"):
        zeros_attention(2 * q, k, v, s, g1, gh)
    with pytest.raises(ValueError, match="k is not unit-norm"):
        zeros_attention(q, 0.5 * k, v, s, g1, gh)
    set_unit_norm_check("never")
    try:
        zeros_attention(2 * q, k, v, s, g1, gh)  # the caller took responsibility
    finally:
        set_unit_norm_check("cpu")
    with pytest.raises(ValueError, match="must be 'cpu', 'always' or 'never'"):
        set_unit_norm_check("sometimes")


def test_unknown_backend():
    q, k, v, s, g1, gh, _ = _inp()
    with pytest.raises(ValueError, match="unknown backend 'cuda'.*choose one of"):
        zeros_attention(q, k, v, s, g1, gh, backend="cuda")
    with pytest.raises(ValueError, match="unknown ZeroS-SM backend 'chunk'"):
        zeros_sm_attention(q, k, v, g1, gh, backend="chunk")


def test_encoder_has_no_state():
    from zeros.ops import chunk_zeros
    q, k, v, s, g1, gh, _ = _inp()
    with pytest.raises(ValueError, match="no recurrent state"):
        chunk_zeros(q, k, v, s, g1, gh, causal=False, output_final_state=True)
