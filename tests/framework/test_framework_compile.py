"""The `compile` key compiles the whole model on CPU too (it was silently skipped without CUDA)
and trains to the same numbers as eager."""
import json

import pytest

from framework_helpers import TINY, run_cli


def _result(stdout):
    path = [x for x in stdout.splitlines() if x.startswith("result: ")][-1][8:]
    return json.loads(open(path).read())


@pytest.mark.slow  # two CPU training runs (~1 min each on a quiet machine)
def test_compile_key_trains_on_cpu_like_eager(tmp_path):
    args = [*TINY, "mixer=zeros"]
    eager = run_cli(args, tmp_path / "eager", timeout=400)
    comp = run_cli([*args, "compile=aot_eager"], tmp_path / "comp", timeout=400)
    assert eager.returncode == 0, eager.stderr[-2000:]
    assert comp.returncode == 0, comp.stderr[-2000:]
    assert "compile: torch.compile failed" not in comp.stderr  # it compiled, no eager fallback
    a, b = _result(eager.stdout)["metrics"], _result(comp.stdout)["metrics"]
    for key, val in a["reported"].items():
        assert abs(b["reported"][key] - val) <= 1e-4 * max(1.0, abs(val)), key
