"""The `compile` key reaches Table 4's training step: the decoder's loss (forecast + next-segment
MSE) is its forward(x, y), so compiling the module's call (compile_or_eager, zeros/compile.py,
what runner.py runs; or a user's torch.compile(model) wrapper) compiles the whole step: one
graph holding the loss, equal to eager in loss and gradients. Backend aot_eager (dynamo +
AOTAutograd, no codegen: seconds). On the old code the loss ran eager (0 graphs in place; the
wrapper's step lost the next-segment term)."""
import copy
import warnings

import pytest
import torch

from tasks.timeseries.model import build_forecaster
from tasks.timeseries.objective import ForecastObjective
from zeros.compile import compile_or_eager
from zeros.mixers import MixerSpec
from zeros.ops.library import AVAILABLE

pytestmark = pytest.mark.skipif(not AVAILABLE, reason="torch without torch.library.custom_op")


@pytest.mark.parametrize("how", ["in_place", "wrapped"])  # the compile key; torch.compile(model)
@pytest.mark.parametrize("mixer", ["zeros", "softmax"])
def test_compiled_decoder_training_step_is_one_graph_and_equals_eager(mixer, how):
    from torch._dynamo.backends.registry import lookup_backend
    torch.manual_seed(0)
    # dropout 0: eager and compiled draw their dropout masks differently
    eager = build_forecaster(MixerSpec(mixer), dataset="ETTh1", horizon=16, lookback=64,
                             dropout=0.0).train()
    comp = copy.deepcopy(eager)
    graphs = []

    def counting(gm, example_inputs):  # aot_eager, counting the graphs dynamo hands it
        graphs.append(gm)
        return lookup_backend("aot_eager")(gm, example_inputs)
    torch._dynamo.reset()
    if how == "in_place":
        compile_or_eager(comp, counting, fullgraph=True)  # what runner.py does under `compile:`
        model = comp
    else:  # a user's torch.compile(model) (an OptimizedModule around the decoder)
        model = torch.compile(comp, backend=counting, fullgraph=True)
    x, y = torch.randn(2, 64, 7), torch.randn(2, 16, 7)
    obj = ForecastObjective()
    with warnings.catch_warnings():  # a compile failure warns and runs eager: not here
        warnings.filterwarnings("error", message="compile: ")
        out_c = obj.step(model, (x, y), "train")
    out_e = obj.step(eager, (x, y), "train")
    # one graph, and it holds the loss (the old path compiled forward only: the loss ran eager)
    assert len(graphs) == 1, len(graphs)
    targets = [str(n.target) for n in graphs[0].graph.nodes]
    assert any("mse_loss" in t for t in targets), "the training loss is not in the graph"
    if mixer == "zeros":
        assert any("zeros." in t for t in targets)
    torch.testing.assert_close(out_c.loss, out_e.loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out_c.preds, out_e.preds, rtol=1e-5, atol=1e-6)
    out_c.loss.backward()
    out_e.loss.backward()
    for (name, pe), pc in zip(eager.named_parameters(), comp.parameters()):
        torch.testing.assert_close(pc.grad, pe.grad, rtol=1e-4, atol=1e-6, msg=name)

