"""The compiled (non-interpreted) kernels build for sm_90 on this CPU machine: Triton's bundled
ptxas runs the whole pipeline, catching compile-mode errors the interpreter cannot see."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def compile_reports(dtypes, dims):
    env = dict(os.environ, TRITON_INTERPRET="0")  # a fresh process: kernels must be JIT functions
    code = ("import json; from kernels.compile_check import main; "
            f"print('JSON', json.dumps(main(['--dtypes', '{dtypes}', '--dims', '{dims}'])))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    line = [x for x in r.stdout.splitlines() if x.startswith("JSON ")][-1]
    return json.loads(line[5:])


def check(reports, n_dims):
    assert len(reports) == 8 * n_dims
    for rep in reports:
        assert rep["regs"] > 0, rep  # ptxas accepted the PTX
        assert rep["shared"] <= 228 * 1024, rep  # fits an H100/H200 SM


def test_compiles_for_sm90_bf16_d64():
    """The benchmark configuration (bf16, d = 64)."""
    check(compile_reports("bf16", "64"), 1)


@pytest.mark.slow
def test_compiles_for_sm90_all_dims():
    check(compile_reports("bf16,fp16", "16,32,64,128"), 4 * 2)
