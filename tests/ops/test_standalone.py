"""The library stands alone: `zeros` and `kernels` work where only the core dependencies (torch,
triton) are installed. A fresh interpreter whose import system refuses the training suite's
packages (and `tasks`) imports every module of zeros/ and kernels/, builds both ZeroS layers and
every registered mixer, and runs the layers forward and backward, causal and encoder. No second
environment is installed: a `sys.meta_path` finder raises ImportError for the refused names."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The `suite` extra of pyproject.toml by import name, plus what those bring that torch and triton
# do not (yaml: hydra's and omegaconf's PyYAML), plus the application itself.
REFUSED = ("lightning", "pytorch_lightning", "lightning_fabric", "hydra", "hydra_plugins",
           "omegaconf", "wandb", "datasets", "tokenizers", "timm", "torchmetrics", "torchvision",
           "torchdata", "pandas", "matplotlib", "sklearn", "tqdm", "tabulate", "submitit", "yaml",
           "tasks")

SCRIPT = r"""
import importlib, importlib.util, os, pkgutil, sys
REFUSED = set(sys.argv[1].split(","))

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in REFUSED:
            raise ModuleNotFoundError(f"refused: {name} is not a core dependency", name=name)
        return None

sys.meta_path.insert(0, Refuse())
import torch
import zeros
assert os.path.dirname(os.path.dirname(zeros.__file__)) == os.getcwd(), zeros.__file__
packages = ["zeros"] + (["kernels"] if importlib.util.find_spec("triton") else [])
modules = []
for pkg in packages:  # every module, so a top-level import of the suite anywhere fails here
    p = importlib.import_module(pkg)
    for m in pkgutil.walk_packages(p.__path__, pkg + "."):
        importlib.import_module(m.name)
        modules.append(m.name)
from zeros import ZeroSAttention, ZeroSSMAttention
from zeros.mixers import available_mixers, create_mixer, encoder_mixers
torch.manual_seed(0)
for cls in (ZeroSAttention, ZeroSSMAttention):
    for causal in (True, False):
        layer = cls(32, 4, causal=causal)
        x = torch.randn(2, 37, 32, requires_grad=True)
        y = layer(x)
        y.square().mean().backward()
        assert y.shape == x.shape and torch.isfinite(x.grad).all()
        assert all(p.grad is not None for p in layer.parameters())
for name in available_mixers():
    create_mixer(name, 32, 4, causal=True)
for name in encoder_mixers():
    create_mixer(name, 32, 4, causal=False)
loaded = sorted({m.partition(".")[0] for m in sys.modules} & REFUSED)
assert not loaded, loaded
print("OK", len(modules), "modules", len(available_mixers()), "mixers")
"""


def test_zeros_imports_and_trains_without_the_suite():
    env = {**os.environ, "PYTHONPATH": ROOT}
    r = subprocess.run([sys.executable, "-c", SCRIPT, ",".join(REFUSED)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.startswith("OK"), (r.stdout + r.stderr)[-3000:]


def test_refusing_finder_refuses():
    # the blocker itself works: the same script fails at once when zeros is refused too
    env = {**os.environ, "PYTHONPATH": ROOT}
    r = subprocess.run([sys.executable, "-c", SCRIPT, ",".join(REFUSED + ("zeros",))], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "refused: zeros is not a core dependency" in r.stderr
