"""The Triton path as torch.library ops: compiled kernels are a `triton_op` whose launches go
through `wrap_triton`, so AOTAutograd decomposes it and Inductor sees each kernel (a
`triton_kernel_wrapper_functional` node), not one opaque op; under the Triton interpreter (this
CPU machine) it is an opaque custom op that runs the interpreted kernels. Both forms: forward and
backward equal the naive path, eager and under torch.compile(fullgraph=True)."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from kernels_testlib import as_reference, grads, make_inputs, max_err
from zeros.ops import naive_zeros
from zeros.ops.library import AVAILABLE

pytestmark = pytest.mark.skipif(not AVAILABLE or not hasattr(torch.library, "triton_op"),
                                reason="torch without torch.library.custom_op / triton_op")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _triton(*args, causal):
    from kernels.zeros_triton import zeros_attention_triton
    return zeros_attention_triton(*args, causal=causal, chunk_size=16)


@pytest.mark.parametrize("T,causal", [(1, True), (17, True), (40, True), (17, False),
                                      (40, False)])
def test_compiled_triton_op_matches_naive_forward_and_backward(T, causal):
    """fullgraph=True through the op (a graph break raises), chunks of 16 so T = 17 and 40
    leave a ragged last chunk; fp32 against the fp64 naive weights."""
    if torch.cuda.is_available():
        pytest.skip("interpreter test; a GPU runs tests/kernels/test_kernels_gpu.py")
    inputs = make_inputs(2, T, 2, 16, g0=True)
    torch._dynamo.reset()
    fn = torch.compile(lambda *a: _triton(*a, causal=causal), backend="aot_eager", fullgraph=True)
    out = fn(*inputs)
    ref_in = as_reference(inputs)
    ref = naive_zeros(*ref_in, causal=causal)
    assert max_err(out, ref) < 2e-5
    for name, g, r in zip("q k v s g1 gh g0".split(), grads(out, inputs), grads(ref, ref_in)):
        assert max_err(g, r) < 5e-5, name


def test_interpreted_triton_op_passes_opcheck():
    """Schema, fake impl against the interpreted kernels, registered autograd, AOT dispatch."""
    from kernels.common import INTERPRET
    from kernels.zeros_triton import TRITON_OP
    if not INTERPRET:
        pytest.skip("under the interpreter only (on a GPU the op is a triton_op)")
    assert not TRITON_OP.is_triton_op
    q, k, v, s, g1, gh, g0 = make_inputs(1, 20, 2, 16, g0=True)
    for causal in (True, False):
        args = (q, k, v, s, g1, gh, g0, causal, 16, False)
        torch.library.opcheck(TRITON_OP.op, args)
        outs = TRITON_OP.op(*[a.detach() if isinstance(a, torch.Tensor) else a for a in args])
        plain = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
        torch.library.opcheck(TRITON_OP.bwd_op, (torch.randn_like(outs[0]), *plain, *outs[1:]),
                              test_utils=("test_schema", "test_faketensor"))


# Run with TRITON_INTERPRET=0 (JIT kernels) in a fresh process: the kernels' kind is fixed when
# `kernels` is imported, and this process imported them interpreted. AOTAutograd traces the op
# on fake CUDA tensors (no GPU needed: nothing is launched or compiled); the forward and backward
# graphs must hold the kernels themselves. The joint (training) graph cannot be traced on fake
# CUDA without a driver (the autograd engine asks for a context), so fwd and bwd ops separately.
_TRACE = textwrap.dedent("""
    import json, sys, torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from functorch.compile import aot_function, make_boxed_func
    from kernels.zeros_triton import TRITON_OP
    graphs = {}
    def rec(name):
        def c(gm, ex):
            graphs[name] = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
            return make_boxed_func(gm)
        return c
    res = {"is_triton_op": TRITON_OP.is_triton_op}
    with FakeTensorMode(allow_non_fake_inputs=True), torch.no_grad():
        for causal, recompute in ((True, True), (True, False), (False, True)):
            xs = [torch.empty(2, 40, 2, 16, device="cuda") for _ in range(3)]
            xs += [torch.empty(2, 40, 2, device="cuda") for _ in range(4)]
            c = (causal, 16, recompute)
            outs = aot_function(lambda *a: TRITON_OP.op(*a, *c), fw_compiler=rec("fw"))(*xs)
            aot_function(lambda do, *a: TRITON_OP.bwd_op(do, *a[:7], *c, *a[7:]),
                         fw_compiler=rec("bw"))(outs[0], *xs, *outs[1:])
            res[str(c)] = graphs.copy()
    print(json.dumps(res))
""")


def test_compiled_kernels_are_a_triton_op_that_inductor_sees_into():
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", _TRACE], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    import json
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res.pop("is_triton_op") is True
    wrapper = "triton_kernel_wrapper_functional"
    # kernels per graph: causal fwd = states + output; bwd = dq, suffix, dkv (+ the states
    # kernel when recomputed); encoder fwd = outer sum + rows; bwd = 3 row passes + outer sum
    want = {"(True, 16, True)": (2, 4), "(True, 16, False)": (2, 3), "(False, 16, True)": (2, 4)}
    for key, (n_fw, n_bw) in want.items():
        g = res[key]
        assert sum(wrapper in t for t in g["fw"]) == n_fw, (key, g["fw"])
        assert sum(wrapper in t for t in g["bw"]) == n_bw, (key, g["bw"])
        assert not any("zeros.triton" in t for t in g["fw"] + g["bw"]), "an opaque op is left"


# ---- CUDA (skipped without a GPU): the triton_op itself, bf16 included ----
def gpu(fn):
    return pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(),
                                              reason="needs a CUDA GPU")(fn))


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("recompute", [True, False])
def test_triton_op_passes_opcheck_on_cuda(dtype, causal, recompute):
    from kernels.zeros_triton import TRITON_OP
    assert TRITON_OP.is_triton_op
    q, k, v, s, g1, gh, g0 = make_inputs(2, 100, 2, 64, g0=True, device="cuda")
    q, k, v = (x.detach().to(dtype).requires_grad_() for x in (q, k, v))
    args = (q, k, v, s, g1, gh, g0, causal, 64, recompute)
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else {}
    torch.library.opcheck(TRITON_OP.op, args, **tol)
    plain = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
    outs = TRITON_OP.op(*plain)
    torch.library.opcheck(TRITON_OP.bwd_op, (torch.randn_like(outs[0]), *plain, *outs[1:]),
                          test_utils=("test_schema", "test_faketensor"), **tol)


@gpu
@pytest.mark.parametrize("causal", [True, False])
def test_triton_op_under_inductor_matches_eager_on_cuda(causal):
    inputs = make_inputs(2, 300, 4, 64, g0=True, device="cuda")
    want = _triton(*inputs, causal=causal)
    gw = grads(want, inputs)
    torch._dynamo.reset()
    fn = torch.compile(lambda *a: _triton(*a, causal=causal), fullgraph=True)  # inductor
    got = fn(*inputs)
    assert max_err(got, want) < 1e-5
    for a, b in zip(grads(got, inputs), gw):
        assert max_err(a, b) < 1e-5
