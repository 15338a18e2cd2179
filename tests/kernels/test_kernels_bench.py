"""kernels/bench_gpu.py without a GPU: clear refusal, and its CSV/plot/summary code on fake rows."""
import pytest
import torch

from kernels import bench_gpu
from kernels_testlib import make_inputs


def fake_rows():
    rows = []
    for T in (1024, 2048, 16384):
        for method, ms in (("zeros_triton", 1.2), ("fla_chunk_simple_gla", 1.0),
                           ("sdpa_flash", 0.5), ("zeros_chunk_torch", 4.0)):
            scale = T / 1024 * (T / 1024 if method == "sdpa_flash" else 1)
            for mode, f in (("fwd", 1.0), ("fwd+bwd", 3.0)):
                rows.append(dict(kind="operator", method=method, mode=mode, B=8, T=T, H=16, d=64,
                                 dtype="bfloat16", ms=ms * f * scale, peak_mib=10.0 * T / 1024,
                                 tokens_per_s=1.0, status="ok"))
    rows.append(dict(kind="operator", method="fla_chunk_linear_attn", mode="fwd", B=8, T=1024,
                     H=16, d=64, dtype="bfloat16", ms="", peak_mib="", tokens_per_s="",
                     status="oom"))
    for m, tps in (("block_zeros", 2e5), ("block_softmax", 1e5)):
        rows.append(dict(kind="block", method=m, mode="fwd+bwd", B=8, T=2048, H=16, d=64,
                         dtype="bfloat16", ms=80.0, peak_mib="", tokens_per_s=tps, status="ok"))
    return rows


def test_csv_plot_and_summary_on_fake_rows(tmp_path):
    csv_path, png = tmp_path / "b" / "gpu.csv", tmp_path / "b" / "gpu.png"
    bench_gpu.write_csv(fake_rows(), csv_path)
    rows = bench_gpu.read_csv(csv_path)
    assert len(rows) == len(fake_rows()) and set(rows[0]) == set(bench_gpu.FIELDS)
    bench_gpu.plot(rows, png)
    assert png.stat().st_size > 10_000
    text = bench_gpu.summarize(rows)
    assert "T=16384  zeros/simple_gla=1.20x  sdpa/zeros=6.67x (goal >= 3)" in text
    assert "block tokens/s: zeros 200000, softmax 100000" in text


def test_main_refuses_without_cuda(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        bench_gpu.main(["--out", str(tmp_path / "x.csv")])
    assert not (tmp_path / "x.csv").exists()


def test_operator_fns_run_on_cpu_inputs():
    """The ZeroS entries of the sweep are callable as the benchmark calls them."""
    xs = [x.detach() for x in make_inputs(B=1, T=20, H=2, d=16)[:6]]
    a = bench_gpu.operator_fn("zeros_triton")(*xs)
    b = bench_gpu.operator_fn("zeros_chunk_torch")(*xs)
    assert torch.allclose(a, b, atol=1e-5)
    with pytest.raises(ValueError, match="unknown method"):
        bench_gpu.operator_fn("nope")
