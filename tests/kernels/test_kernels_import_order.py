"""The interpreted kernels work even when triton was imported before TRITON_INTERPRET=1 was set
(as in the full suite, where earlier tests import triton): they must not call triton.language's
own @jit helpers (tl.sum, tl.max, tl.zeros), which stay compiled-only in that case."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = """
import os
import triton, triton.language  # imported first, without the interpreter
os.environ["TRITON_INTERPRET"] = "1"
import torch
from kernels.zeros_triton import zeros_attention_triton, zeros_step_triton
from zeros.ops import naive_zeros
g = torch.Generator().manual_seed(0)
q, k = (torch.nn.functional.normalize(torch.randn(1, 70, 2, 16, generator=g), dim=-1)
        for _ in range(2))
v, s, g1, gh = torch.randn(1, 70, 2, 16, generator=g), *torch.rand(3, 1, 70, 2, generator=g)
for causal in (True, False):
    xs = [x.clone().requires_grad_() for x in (q, k, v, s, g1, gh)]
    o = zeros_attention_triton(*xs, causal=causal)
    o.sum().backward()
    assert (o - naive_zeros(q, k, v, s, g1, gh, causal=causal)).abs().max() < 1e-5
zeros_step_triton(None, q[:, 0], k[:, 0], v[:, 0], s[:, 0], g1[:, 0], gh[:, 0])
print("OK")
"""


def test_kernels_run_when_triton_was_imported_first():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), r.stderr[-3000:]
