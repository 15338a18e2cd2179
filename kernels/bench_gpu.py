"""GPU benchmark of the ZeroS Triton kernels (`make bench-gpu`): needs CUDA.

Operator rows: forward and forward+backward time (median of CUDA-event timings) and peak extra
memory for B=8, H=16, d=64, bf16, causal, T = 1K..64K, for
  zeros_triton          kernels.zeros_attention_triton (this package)
  zeros_chunk_torch     zeros.ops backend="chunk" (the torch reference path)
  fla_chunk_simple_gla  fla.ops.simple_gla.chunk_simple_gla (head-wise decay, the fla bar)
  fla_chunk_linear_attn fla.ops.linear_attn.chunk_linear_attn
  sdpa_flash            torch SDPA restricted to the flash backend
  zeros_sm_fast         ZeroS-SM as SDPA + linear terms (zeros.ops.sm), the bench hook for
                        deciding whether a fused ZeroS-SM kernel is worth writing
Block rows: training tokens/s (fwd+bwd) of a pre-LN LM block (attention + 4x MLP, D = H·d) with
ZeroSAttention(backend="triton") vs the same block with softmax attention (SDPA flash).
Writes a CSV (one row per method, mode, T) and a log-log PNG of time vs T, and prints the
ratios the kernels issue asks for (ZeroS vs fla chunk_simple_gla, SDPA vs ZeroS at T = 16K).
"""
from __future__ import annotations

import argparse
import csv
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

FIELDS = ["kind", "method", "mode", "B", "T", "H", "d", "dtype", "ms", "peak_mib",
          "tokens_per_s", "status"]
METHODS = ["zeros_triton", "zeros_chunk_torch", "fla_chunk_simple_gla", "fla_chunk_linear_attn",
           "sdpa_flash", "zeros_sm_fast"]
DEFAULT_T = [1024 * 2 ** i for i in range(7)]  # 1K .. 64K


def require_cuda() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("bench-gpu needs a CUDA GPU (torch.cuda.is_available() is False): the "
                         "Triton kernels are only timed compiled; on CPU run `make test-kernels` "
                         "(interpreter correctness) or `make bench` (torch operator benchmark)")


# ---------------------------------------------------------------------------- operator calls
def make_operator_inputs(B, T, H, d, dtype, device="cuda", seed=0):
    g = torch.Generator(device=device).manual_seed(seed)
    q = F.normalize(torch.randn(B, T, H, d, device=device, generator=g), dim=-1).to(dtype)
    k = F.normalize(torch.randn(B, T, H, d, device=device, generator=g), dim=-1).to(dtype)
    v = torch.randn(B, T, H, d, device=device, generator=g).to(dtype)
    s, g1, gh = (torch.randn(B, T, H, device=device, generator=g).to(dtype) for _ in range(3))
    g1, gh = torch.sigmoid(g1), torch.sigmoid(gh)
    return [x.requires_grad_() for x in (q, k, v, s, g1, gh)]


def operator_fn(method):
    """A callable (q, k, v, s, g1, gh) -> output tensor for one method; imports lazily."""
    if method == "zeros_triton":
        from kernels.zeros_triton import zeros_attention_triton
        return lambda q, k, v, s, g1, gh: zeros_attention_triton(q, k, v, s, g1, gh)
    if method == "zeros_chunk_torch":
        from zeros.ops import zeros_attention  # (its unit-norm check is CPU-only by default)
        return lambda q, k, v, s, g1, gh: zeros_attention(q, k, v, s, g1, gh, backend="chunk")
    if method == "fla_chunk_simple_gla":
        from fla.ops.simple_gla import chunk_simple_gla
        # a head-wise log-decay from the logits, so the gate path is exercised like ZeroS's s
        return lambda q, k, v, s, g1, gh: chunk_simple_gla(q, k, v, g=F.logsigmoid(s.float()))[0]
    if method == "fla_chunk_linear_attn":
        from fla.ops.linear_attn import chunk_linear_attn
        return lambda q, k, v, s, g1, gh: chunk_linear_attn(q, k, v)[0]
    if method == "sdpa_flash":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def sdpa(q, k, v, s, g1, gh):
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                o = F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v)),
                                                   is_causal=True)
            return o.transpose(1, 2)
        return sdpa
    if method == "zeros_sm_fast":
        from zeros.ops import zeros_sm_attention
        return lambda q, k, v, s, g1, gh: zeros_sm_attention(q, k, v, g1, gh, backend="fast")
    raise ValueError(f"unknown method {method!r}; choose from {METHODS}")


def time_cuda(fn, warmup=3, repeats=10):
    """Median milliseconds of fn() over `repeats` CUDA-event timings after `warmup` calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def bench_operator(method, B, T, H, d, dtype, repeats):
    row = dict(kind="operator", method=method, B=B, T=T, H=H, d=d, dtype=str(dtype).split(".")[-1])
    out = []
    for mode in ("fwd", "fwd+bwd"):
        r = dict(row, mode=mode, ms="", peak_mib="", tokens_per_s="", status="ok")
        try:
            fn = operator_fn(method)
            xs = make_operator_inputs(B, T, H, d, dtype)
            do = torch.randn(B, T, H, d, device="cuda", dtype=dtype)

            def step():
                if mode == "fwd":
                    with torch.no_grad():
                        fn(*xs)
                else:
                    fn(*xs).backward(do)
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            step()
            torch.cuda.synchronize()
            r["peak_mib"] = round((torch.cuda.max_memory_allocated() - base) / 2 ** 20, 1)
            r["ms"] = round(time_cuda(step, repeats=repeats), 4)
            r["tokens_per_s"] = round(B * T / (r["ms"] / 1e3))
        except torch.cuda.OutOfMemoryError:
            r["status"] = "oom"
        except Exception as err:  # noqa: BLE001 - one failing baseline must not stop the sweep
            r["status"] = f"error: {type(err).__name__}: {str(err)[:120]}"
        finally:
            xs = fn = do = None
            torch.cuda.empty_cache()
        out.append(r)
        print(r, flush=True)
    return out


# ---------------------------------------------------------------------------- LM block
class SoftmaxAttention(nn.Module):
    """Causal multi-head softmax attention through SDPA (the Transformer baseline block)."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x):  # [B, T, D]
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [B, H, T, d]
        return self.out(o.transpose(1, 2).reshape(B, T, D))


class Block(nn.Module):
    def __init__(self, attn, d_model):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = attn
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def bench_block(kind, B, T, H, d, dtype, repeats):
    from zeros import ZeroSAttention
    D = H * d
    r = dict(kind="block", method=f"block_{kind}", mode="fwd+bwd", B=B, T=T, H=H, d=d,
             dtype=str(dtype).split(".")[-1], ms="", peak_mib="", tokens_per_s="", status="ok")
    try:
        attn = ZeroSAttention(D, H, backend="triton") if kind == "zeros" else SoftmaxAttention(D, H)
        block = Block(attn, D).cuda()
        x = torch.randn(B, T, D, device="cuda", requires_grad=True)

        def step():
            with torch.autocast("cuda", dtype=dtype):
                y = block(x)
            y.float().sum().backward()
        r["ms"] = round(time_cuda(step, repeats=repeats), 4)
        r["tokens_per_s"] = round(B * T / (r["ms"] / 1e3))
    except torch.cuda.OutOfMemoryError:
        r["status"] = "oom"
    except Exception as err:  # noqa: BLE001
        r["status"] = f"error: {type(err).__name__}: {str(err)[:120]}"
    torch.cuda.empty_cache()
    print(r, flush=True)
    return [r]


# ---------------------------------------------------------------------------- outputs
def write_csv(rows, path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in FIELDS})


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def _ok(rows, kind="operator"):
    return [r for r in rows if r["kind"] == kind and r["status"] == "ok" and r["ms"] != ""]


def plot(rows, path):
    """Log-log time vs T (fwd, fwd+bwd) and peak memory vs T, one line per method."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ops = _ok(rows)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    panels = [("fwd", "ms", "forward time (ms)"), ("fwd+bwd", "ms", "forward+backward time (ms)"),
              ("fwd+bwd", "peak_mib", "fwd+bwd peak extra memory (MiB)")]
    for ax, (mode, field, title) in zip(axes, panels):
        for m in sorted({r["method"] for r in ops}):
            pts = sorted((int(r["T"]), float(r[field])) for r in ops
                         if r["method"] == m and r["mode"] == mode and r[field] != "")
            if pts:
                ax.plot(*zip(*pts), marker="o", label=m)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length T")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    first = ops[0] if ops else {}
    fig.suptitle(f"ZeroS kernels, B={first.get('B')} H={first.get('H')} d={first.get('d')} "
                 f"{first.get('dtype')}, causal")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def summarize(rows, T_ref=16384):
    """The issue's acceptance ratios: ZeroS/fla_simple_gla fwd+bwd time (goal <= 1.3) and
    SDPA/ZeroS fwd+bwd time at T_ref (goal >= 3), per T where both ran."""
    ops = _ok(rows)
    t = {(r["method"], r["mode"], int(r["T"])): float(r["ms"]) for r in ops}
    lines = []
    for T in sorted({int(r["T"]) for r in ops}):
        z = t.get(("zeros_triton", "fwd+bwd", T))
        gla = t.get(("fla_chunk_simple_gla", "fwd+bwd", T))
        sdpa = t.get(("sdpa_flash", "fwd+bwd", T))
        parts = [f"T={T}"]
        if z and gla:
            parts.append(f"zeros/simple_gla={z / gla:.2f}x")
        if z and sdpa:
            parts.append(f"sdpa/zeros={sdpa / z:.2f}x" + (" (goal >= 3)" if T == T_ref else ""))
        lines.append("  ".join(parts))
    blocks = {r["method"]: float(r["tokens_per_s"]) for r in _ok(rows, "block")}
    if "block_zeros" in blocks and "block_softmax" in blocks:
        lines.append(f"block tokens/s: zeros {blocks['block_zeros']:.0f}, softmax "
                     f"{blocks['block_softmax']:.0f}")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--B", type=int, default=8)
    p.add_argument("--H", type=int, default=16)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--T", type=int, nargs="+", default=DEFAULT_T)
    p.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
    p.add_argument("--block-T", type=int, nargs="+", default=[2048, 8192])
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--out", default="results/bench/gpu_kernels.csv")
    p.add_argument("--plot", default="results/bench/gpu_kernels.png")
    args = p.parse_args(argv)
    require_cuda()
    dtype = torch.bfloat16
    rows = []
    for T in args.T:
        for m in args.methods:
            rows += bench_operator(m, args.B, T, args.H, args.d, dtype, args.repeats)
            write_csv(rows, args.out)  # keep partial results if a later size dies
    for T in args.block_T:
        for kind in ("zeros", "softmax"):
            rows += bench_block(kind, args.B, T, args.H, args.d, dtype, args.repeats)
    write_csv(rows, args.out)
    plot(rows, args.plot)
    print(f"wrote {args.out} and {args.plot}\n" + summarize(rows))
    return rows


if __name__ == "__main__":
    sys.exit(0 if main() is not None else 1)
