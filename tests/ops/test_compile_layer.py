"""torch.compile(layer, fullgraph=True) traces ZeroSAttention and ZeroSSMAttention as ONE graph
at every paper shape (causal and encoder, odd lengths included) and equals eager, forward and
backward, prompt-then-decode included. Backend aot_eager (dynamo + AOTAutograd, no codegen:
seconds); inductor only under `slow`."""
import copy

import pytest
import torch

from zeros.layer import ZeroSAttention, ZeroSSMAttention
from zeros.ops.library import AVAILABLE

pytestmark = pytest.mark.skipif(not AVAILABLE, reason="torch without torch.library.custom_op")
# (d_model, heads, T) the layers see in the paper profile (results/bench/cpu_train.csv):
# table2/fig4 LM, table1 MAD, table3 DeiT (T = 197), table4 time series (d = 4: the C loops),
# fig3 MQAR (one head of 128)
PAPER = {"lm": (512, 8, 512), "mad": (128, 16, 127), "deit": (192, 3, 197),
         "timeseries": (32, 8, 11), "mqar": (128, 1, 64)}
LAYERS = {"zeros": ZeroSAttention, "zeros_sm": ZeroSSMAttention}


def _grads(m, x, y):
    w = torch.randn(y.shape, generator=torch.Generator().manual_seed(1))
    return torch.autograd.grad((y * w).sum(), [x, *m.parameters()])


def _compare(layer, x, backend="aot_eager", atol=1e-5):
    comp = copy.deepcopy(layer)
    torch._dynamo.reset()
    fn = torch.compile(comp, backend=backend, fullgraph=True)  # fullgraph: a break raises
    xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    ye, yc = layer(xe), fn(xc)
    torch.testing.assert_close(yc, ye, atol=atol, rtol=1e-4)
    for ge, gc in zip(_grads(layer, xe, ye), _grads(comp, xc, yc)):
        torch.testing.assert_close(gc, ge, atol=atol, rtol=1e-4)


@pytest.mark.parametrize("shape", list(PAPER))
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_compiles_fullgraph_and_equals_eager(name, causal, shape):
    D, H, T = PAPER[shape]
    torch.manual_seed(0)
    layer = LAYERS[name](D, H, causal=causal)
    B = 1 if T * D > 50000 else 2
    _compare(layer, torch.randn(B, T, D))


@pytest.mark.parametrize("T", [1, 33])
@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_compiles_at_odd_lengths(name, T):
    torch.manual_seed(0)
    _compare(LAYERS[name](24, 3, zero_order=True), torch.randn(2, T, 24))


def test_large_logit_spread_takes_the_chunk_path_inside_the_compiled_op():
    """quadratic_ok is data-dependent: decided inside the op, so no graph break and no wrong
    result when the logits spread beyond the quadratic path's range."""
    torch.manual_seed(0)
    layer = ZeroSAttention(32, 4)
    with torch.no_grad():
        layer.mu.fill_(30.0)  # large deviation logits
    _compare(layer, 5 * torch.randn(2, 11, 32), atol=1e-4)


@pytest.mark.parametrize("name", list(LAYERS))
def test_compiled_prompt_then_decode_equals_eager(name):
    torch.manual_seed(0)
    layer = LAYERS[name](32, 4)
    comp = torch.compile(copy.deepcopy(layer), backend="aot_eager", fullgraph=True)
    torch._dynamo.reset()
    x = torch.randn(2, 12, 32)
    ye, se = layer(x[:, :9], return_state=True)
    yc, sc = comp(x[:, :9], return_state=True)
    torch.testing.assert_close(yc, ye, atol=1e-5, rtol=1e-4)
    for t in range(9, 11):  # decoding steps: a new state shape each step recompiles, no crash
        ye, se = layer(x[:, t:t + 1], state=se)
        yc, sc = comp(x[:, t:t + 1], state=sc)
        torch.testing.assert_close(yc, ye, atol=1e-5, rtol=1e-4)


def test_compiled_model_recompiles_on_a_new_shape():
    torch.manual_seed(0)
    layer = ZeroSAttention(32, 4)
    comp = torch.compile(copy.deepcopy(layer), backend="aot_eager", fullgraph=True)
    for B, T in [(2, 16), (3, 40)]:
        x = torch.randn(B, T, 32)
        torch.testing.assert_close(comp(x), layer(x), atol=1e-5, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_compiles_with_inductor(name):
    torch.manual_seed(0)
    _compare(LAYERS[name](128, 16), torch.randn(2, 127, 128), backend="inductor", atol=1e-4)


def test_compile_failure_warns_once_then_runs_eager():
    from zeros.compile import compile_or_eager

    def broken(gm, example_inputs):
        raise RuntimeError("no C++ compiler found")
    torch.manual_seed(0)
    layer = ZeroSAttention(32, 4)
    model = compile_or_eager(copy.deepcopy(layer), backend=broken)
    x = torch.randn(2, 16, 32)
    with pytest.warns(UserWarning, match="compile: torch.compile failed .*no C\\+\\+ compiler"):
        y = model(x)
    torch.testing.assert_close(y, layer(x))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # eager from now on: no second warning
        torch.testing.assert_close(model(x), layer(x))


def test_compile_in_place_keeps_state_dict_keys():
    from zeros.compile import compile_or_eager
    layer = ZeroSAttention(32, 4)
    keys = list(layer.state_dict())
    assert list(compile_or_eager(layer, backend="aot_eager").state_dict()) == keys


def test_compile_setting_rejects_a_bad_value():
    from zeros.compile import compile_setting
    assert compile_setting(False) is None and compile_setting(True) == "inductor"
    assert compile_setting("aot_eager") == "aot_eager"
    with pytest.raises(ValueError, match="compile="):
        compile_setting(3)
