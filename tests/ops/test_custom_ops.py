"""Every ZeroS op is a torch.library custom op that passes torch.library.opcheck: schema, the
fake (meta) impl against the real one, registered autograd, and tracing through AOTAutograd."""
import pytest
import torch
import torch.nn.functional as F

from helpers import make_inputs
from zeros.ops import chunk, encoder, native, quadratic
from zeros.ops.library import AVAILABLE
from zeros import rope

pytestmark = pytest.mark.skipif(not AVAILABLE, reason="torch without torch.library.custom_op")
needs_native = pytest.mark.skipif(native.kernels() is None, reason="no C compiler here")


def _check(op, args):
    """opcheck the forward op and its backward op (on the forward's own outputs)."""
    torch.library.opcheck(op.op, args)
    outs = op.op(*[a.detach() if isinstance(a, torch.Tensor) else a for a in args])
    grad = torch.randn_like(outs[0])
    plain = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
    aux = outs if op.first == 0 else outs[1:]
    torch.library.opcheck(op.bwd_op, (grad, *plain, *[x.detach() for x in aux]),
                          test_utils=("test_schema", "test_faketensor"))


def _chunk_args(T=20, d=8, g0=True, C=8):
    q, k, v, s, g1, gh, z = make_inputs(2, T, 3, d, torch.float32, g0=g0, requires_grad=True)
    qc, kc, vc, sc, a, g, g0c, valid = chunk.chunk_layout(q, k, v, s, g1, gh, z, C)
    shift = sc[:, :, 0, 0].detach().clone()
    slc = torch.where(valid, sc - shift[..., None, None], 0.0)
    return (qc, kc, vc, sc, slc, a, g, g0c, valid, shift)


@pytest.mark.parametrize("g0", [False, True])
def test_chunk_op_passes_opcheck(g0):
    _check(chunk.CHUNK_OP, _chunk_args(g0=g0))  # T = 20, C = 8: padded last chunk


def _heads(*xs):
    return [None if x is None else quadratic._heads(x.detach()).requires_grad_() for x in xs]


@pytest.mark.parametrize("d, s_scale", [(16, 3.0), (16, 40.0)])  # 40: spread > 60, chunk path
def test_quadratic_op_passes_opcheck(d, s_scale):
    q, k, v, s, g1, gh, z = make_inputs(2, 11, 3, d, torch.float32, g0=True, s_scale=s_scale)
    if s_scale > 10:
        assert not quadratic.quadratic_ok(s)
    _check(quadratic.QUAD_OP, _heads(q, k, v, s, gh, g1, z))


@needs_native
def test_quadratic_op_native_passes_opcheck():
    q, k, v, s, g1, gh, _ = make_inputs(2, 11, 3, 4, torch.float32)
    assert quadratic._native(q)
    _check(quadratic.QUAD_OP, _heads(q, k, v, s, gh, g1, None))


def test_encoder_op_passes_opcheck():
    q, k, v, *_ = make_inputs(2, 13, 3, 8, torch.float32)
    qh, kh, vh = (x.transpose(1, 2).requires_grad_() for x in (q, k, v))  # strided views
    wq, wk = (torch.randn(2, 3, 13, 3, requires_grad=True) for _ in range(2))
    _check(encoder.RANK3_OP, (qh, kh, vh, wq, wk))


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("use_native", [True, False])
def test_rope_op_passes_opcheck(normalize, use_native, monkeypatch):
    if use_native and native.kernels() is None:
        pytest.skip("no C compiler here")
    if not use_native:
        monkeypatch.setattr(native, "rope_supported", lambda x: False)
    x = torch.randn(2, 7, 2, 3, 8, requires_grad=True)
    cos, sin = rope.rope_half_tables(7, 8)
    _check(rope.ROPE_OP, (x, cos[:, None], sin[:, None], normalize, 1e-12))


def test_layer_ops_are_custom_ops_in_the_graph():
    """The traced layer calls the zeros:: ops (no ctypes, no graph break)."""
    from zeros.layer import ZeroSAttention
    seen = set()

    def backend(gm, example_inputs):
        seen.update(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm
    m = ZeroSAttention(32, 4)
    torch.compile(m, backend=backend, fullgraph=True)(torch.randn(2, 40, 32))
    assert any("zeros.chunk" in t for t in seen) and any("rope_normalize" in t for t in seen)


def test_sm_layer_and_decode_step_are_custom_ops_in_the_graph():
    from zeros.layer import ZeroSAttention, ZeroSSMAttention
    seen = set()

    def backend(gm, example_inputs):
        seen.update(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm
    torch._dynamo.reset()
    torch.compile(ZeroSSMAttention(32, 4), backend=backend, fullgraph=True)(torch.randn(2, 9, 32))
    assert any("zeros.sm" in t for t in seen), seen
    seen.clear()
    m = ZeroSAttention(32, 4)
    _, state = m(torch.randn(2, 5, 32), return_state=True)
    torch.compile(m, backend=backend, fullgraph=True)(torch.randn(2, 1, 32), state=state)
    assert any("zeros.step" in t for t in seen), seen


def test_ops_equal_before_and_after_compile_on_a_bf16_input():
    """The fake impl's dtypes follow the real ones (bf16 in, fp32 compute, bf16 out)."""
    from zeros.ops import zeros_attention
    q, k, v, s, g1, gh, _ = make_inputs(1, 24, 2, 8, torch.bfloat16)
    f = lambda *a: zeros_attention(*a, backend="chunk")  # noqa: E731
    want = f(q, k, v, s, g1, gh)
    got = torch.compile(f, backend="aot_eager", fullgraph=True)(q, k, v, s, g1, gh)
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)
    assert F.mse_loss(got.float(), want.float()) == 0


def _check_recompute(op, args):
    """opcheck a RecomputeOp and its backward op (gradients of every output)."""
    torch.library.opcheck(op.op, args)
    plain = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
    outs = op.op(*plain)
    outs = (outs,) if isinstance(outs, torch.Tensor) else outs
    ws = [torch.randn_like(o) for o in outs]
    # backward: not through opcheck (its checking modes read the storage of the torch.func
    # wrappers the vjp makes inside the op, and raise); fake against real by hand, and its
    # numbers against autograd below
    from torch._subclasses.fake_tensor import FakeTensorMode
    real = op.bwd_op(ws, *plain)
    with FakeTensorMode(allow_non_fake_inputs=True):
        fake = op.bwd_op(ws, *plain)
    assert [(f.shape, f.dtype, f.stride()) for f in fake] == \
        [(r.shape, r.dtype, r.stride()) for r in real]
    # the recomputed gradients equal plain autograd through the function
    xs = [a.detach().requires_grad_() if isinstance(a, torch.Tensor) and a.requires_grad else a
          for a in args]
    ref = op.impl(*xs)
    ref = (ref,) if isinstance(ref, torch.Tensor) else ref
    loss = sum((o * w).sum() for o, w in zip(ref, ws) if o.requires_grad)
    wrt = [x for x in xs if isinstance(x, torch.Tensor) and x.requires_grad]
    want = torch.autograd.grad(loss, wrt, allow_unused=True)
    got = [g for g, a in zip(op.bwd_op(ws, *plain), [a for a in args
                                                     if isinstance(a, torch.Tensor)])
           if a.requires_grad]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, torch.zeros_like(g) if w is None else w)


@pytest.mark.parametrize("g0", [False, True])
def test_step_op_passes_opcheck(g0):
    from zeros.ops.recurrent import STEP_OP, step_update
    from zeros.ops.state import empty_state_like
    q, k, v, s, g1, gh, z = make_inputs(2, 3, 3, 8, torch.float32, g0=g0)
    st = step_update(empty_state_like(s[:, 0], 8), k[:, 0], v[:, 0], s[:, 0])
    st = step_update(st, k[:, 1], v[:, 1], s[:, 1])  # a state that has seen two tokens
    tensors = [x.clone().requires_grad_(x is not st.shift and x is not st.m)
               for x in (st.shift, st.m, st.E, st.P, st.F, st.G, st.H)]
    per_tok = [None if x is None else x[:, 2].clone().requires_grad_() for x in (q, k, v, s, g1,
                                                                                 gh, z)]
    _check_recompute(STEP_OP, (*tensors, *per_tok, st.t))


@pytest.mark.parametrize("causal", [True, False])
def test_sm_op_passes_opcheck(causal):
    from zeros.ops.sm import SM_OP
    q, k, v, _, g1, gh, z = make_inputs(2, 13, 3, 8, torch.float32, g0=True, requires_grad=True)
    _check_recompute(SM_OP, (q, k, v, g1, gh, z, causal, 8 ** -0.5))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_step_and_sm_ops_pass_opcheck_on_cuda():
    from zeros.ops.recurrent import STEP_OP
    from zeros.ops.sm import SM_OP
    from zeros.ops.state import empty_state_like
    q, k, v, s, g1, gh, z = (x.cuda() for x in make_inputs(2, 13, 3, 16, torch.float32,
                                                          g0=True))
    _check_recompute(SM_OP, tuple(x.requires_grad_() for x in (q, k, v, g1, gh, z))
                     + (True, 0.25))
    st = empty_state_like(s[:, 0], 16)
    tensors = [x.clone() for x in (st.shift, st.m, st.E, st.P, st.F, st.G, st.H)]
    per_tok = [x[:, 0].detach().clone().requires_grad_() for x in (q, k, v, s, g1, gh, z)]
    _check_recompute(STEP_OP, (*tensors, *per_tok, st.t))
