"""The `compile` key reaches Table 4's training step: the decoder's loss (forecast + next-segment
MSE) goes through the module's call, which compile_or_eager compiles (zeros/compile.py), so the
step the runner trains is one compiled graph and equals eager, loss and gradients. Backend
aot_eager (dynamo + AOTAutograd, no codegen: seconds)."""
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


@pytest.mark.parametrize("mixer", ["zeros", "softmax"])
def test_compile_key_compiles_the_decoder_training_step_and_equals_eager(mixer):
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
    compile_or_eager(comp, counting, fullgraph=True)  # what runner.py does under `compile:`
    x, y = torch.randn(2, 64, 7), torch.randn(2, 16, 7)
    obj = ForecastObjective()
    with warnings.catch_warnings():  # a compile failure warns and runs eager: not here
        warnings.filterwarnings("error", message="compile: ")
        out_c = obj.step(comp, (x, y), "train")
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

