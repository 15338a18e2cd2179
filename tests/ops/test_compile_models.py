"""Compiled dry-run of every table's full model with the ZeroS mixer: the model compiled
with fullgraph=True (a graph break raises, naming its cause) runs one training step (the task's
loss, backward) at the smoke profile's sizes on CPU, batch cut to 2. Backend "eager"
(dynamo alone: what breaks graphs is dynamo's tracing; no codegen, seconds); the layer-level
tests (test_compile_layer.py) run aot_eager and compare numbers. `make compile-check` runs it."""
import sys
import warnings
from pathlib import Path

import pytest
import torch
import yaml

from zeros.ops.library import AVAILABLE

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "gpu"))
pytestmark = pytest.mark.skipif(not AVAILABLE, reason="torch without torch.library.custom_op")

# experiment -> overrides that pick one swept shape (the sweep's first value where it has many)
MODELS = {
    "table1/mad": ["task.setting=baseline", "mad_task=in-context-recall"],
    "ablation/mad": ["task.setting=baseline"],
    "ablation/lm": [],
    "table2/wikitext103": [],
    "table3/deit_tiny": [],
    "table4/decoder": ["task.dataset=ETTh1", "task.horizon=96"],
    "fig2/regbench": [],
    "fig3/mqar": [],
    "fig4/owt2": [],
}


def _compose(experiment, mixer, overrides):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=[f"experiment={experiment}", "profile=smoke",
                                          f"mixer={mixer}"])
    from omegaconf import OmegaConf, open_dict
    with open_dict(cfg):
        for ov in overrides:  # only keys the experiment has (a renamed key is not invented)
            key, val = ov.split("=", 1)
            if OmegaConf.select(cfg, key) is not None:
                OmegaConf.update(cfg, key, yaml.safe_load(val), merge=True)  # "96" -> 96
    return cfg


def _cut(batch, n=2):
    if isinstance(batch, dict):
        return {k: v[:n] for k, v in batch.items()}
    return tuple(x[:n] for x in batch)


# in `make test`: two models that build and trace in seconds; every table under `slow`
# (`make compile-check`: ~4 min on 2 busy cores)
QUICK = {("fig3/mqar", "zeros"), ("table4/decoder", "zeros")}


CASES = [pytest.param(e, m, id=f"{e}-{m}", marks=() if (e, m) in QUICK else pytest.mark.slow)
         for e in MODELS for m in ("zeros", "zeros_sm")]


@pytest.mark.parametrize("experiment, mixer", CASES)
def test_table_model_compiles_as_one_graph(experiment, mixer):
    from paper_models import synthetic_batch
    from tasks.common.runner import build
    from zeros.compile import compile_or_eager
    if not (ROOT / "conf" / "experiment" / f"{experiment}.yaml").exists():
        pytest.fail(f"conf/experiment/{experiment}.yaml is gone: update MODELS in {__file__}")
    torch.manual_seed(0)
    cfg = _compose(experiment, mixer, MODELS[experiment])
    dm, model, module = build(cfg, check_data=False)
    batch = _cut(synthetic_batch(cfg, dm, device="cpu"))
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    torch._dynamo.reset()
    model.train()
    # what the `compile` key runs (runner.py): the model's call compiled in place, so the
    # step goes through it (table4's decoder too: its loss is a forward(x, y)); fullgraph: a
    # graph break fails, and its eager fallback's warning is made an error here
    compile_or_eager(model, counting, fullgraph=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="compile: ")
        loss = module.objective.step(model, batch, "train").loss
    loss.backward()
    assert torch.isfinite(loss)
    n_zeros = sum("zeros." in str(n.target) for g in graphs for n in g.graph.nodes)
    assert len(graphs) == 1 and n_zeros > 0, (len(graphs), n_zeros)
