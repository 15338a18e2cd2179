"""CPU benchmark of the ZeroS operator: forward+backward time and peak memory.

    python -m zeros.bench [--lengths 512 2048 8192] [--out results/bench/cpu_operator.csv]

Each (method, T) runs in a fresh subprocess so its peak resident memory (ru_maxrss minus the
resident size after the inputs exist) belongs to that method alone. Methods:
  chunk         zeros_attention(backend="chunk")  (ours, the CPU default)
  naive         explicit T×T weights              (ground truth; only where it fits)
  materialized  the authors' linear-time layout: global max, B×T×H×d×d prefix tensors (docs/spec.md §6)
  sdpa          torch scaled_dot_product_attention, causal softmax attention
  zeros_sm      zeros_sm_attention(backend="fast")
Ratios in the printed table are measured in the same run; absolute seconds on a shared 2-core
machine are noisy, so compare ratios, not runs. `cpu_s` (process CPU time, all threads) is less
sensitive than wall time to other load on the machine.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

B, H, D = 2, 4, 64
# largest T each quadratic-memory method is run at on a 24 GiB machine
MAX_T = {"naive": 2048, "materialized": 2048}


def materialized_prefix_zeros(q, k, v, s, g1, gh):
    """The authors' linear-time path as docs/spec.md §6 describes it (benchmark/defect demo only):
    exponentials relative to ONE max over the whole sequence, and cumulative sums of
    B×T×H×d×d outer products. Causal, no g0. Shapes as zeros_attention."""
    T = q.shape[1]
    e = torch.exp(s - s.amax(1, keepdim=True))  # [B, T, H] early rows underflow
    kv = k[..., :, None] * v[..., None, :]  # [B, T, H, d, d]
    E, Fs = e.cumsum(1), (e[..., None, None] * kv).cumsum(1)
    P, G, Hs = s.cumsum(1), (s[..., None, None] * kv).cumsum(1), kv.cumsum(1)
    t = torch.arange(1, T + 1, dtype=q.dtype, device=q.device)[None, :, None]
    alpha, beta = gh / E, (g1 - gh) / t
    gamma = -(beta * P + gh) / t
    M = alpha[..., None, None] * Fs + beta[..., None, None] * G + gamma[..., None, None] * Hs
    return (q[..., None, :] @ M).squeeze(-2)  # [B, T, H, d]


def _inputs(T, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(B, T, H, D, generator=g), dim=-1)
    k = F.normalize(torch.randn(B, T, H, D, generator=g), dim=-1)
    v = torch.randn(B, T, H, D, generator=g)
    s, g1, gh = torch.randn(B, T, H, generator=g), torch.rand(B, T, H, generator=g), \
        torch.rand(B, T, H, generator=g)
    return [x.requires_grad_() for x in (q, k, v, s, g1, gh)]


def _method(name):
    from zeros.ops import zeros_attention, zeros_sm_attention
    if name == "chunk":
        return lambda q, k, v, s, g1, gh: zeros_attention(q, k, v, s, g1, gh, backend="chunk")
    if name == "naive":
        return lambda q, k, v, s, g1, gh: zeros_attention(q, k, v, s, g1, gh, backend="naive")
    if name == "materialized":
        return materialized_prefix_zeros
    if name == "sdpa":
        return lambda q, k, v, *_: F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
    if name == "zeros_sm":
        return lambda q, k, v, s, g1, gh: zeros_sm_attention(q, k, v, g1, gh, backend="fast")
    raise ValueError(f"unknown method {name!r}")


def _rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure_one(name, T, reps, threads=0):
    """Runs in the child: min wall time of fwd+bwd over reps (after one warm-up), peak memory."""
    if threads:
        torch.set_num_threads(threads)
    fn, xs = _method(name), _inputs(T)
    base = _rss_mib()
    times, cpu = [], []
    for _ in range(reps + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        fn(*xs).sum().backward()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        for x in xs:
            x.grad = None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB (Linux)
    return {"method": name, "T": T, "fwd_bwd_s": min(times[1:]), "cpu_s": min(cpu[1:]),
            "peak_mib": peak - base}


def run(lengths, methods, reps, out, threads=0):
    import pandas as pd
    from tqdm import tqdm
    rows = []
    jobs = [(m, T) for T in lengths for m in methods]
    for m, T in tqdm(jobs, desc="bench", unit="run"):
        if T > MAX_T.get(m, 1 << 30):
            rows.append({"method": m, "T": T, "fwd_bwd_s": float("nan"), "cpu_s": float("nan"),
                         "peak_mib": float("nan"), "note": f"skipped: O(T²) or B·T·H·d² memory above T={MAX_T[m]}"})
            continue
        cmd = [sys.executable, "-m", "zeros.bench", "--one", m, str(T), "--reps", str(reps),
               "--threads", str(threads)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            rows.append({"method": m, "T": T, "fwd_bwd_s": float("nan"), "cpu_s": float("nan"),
                         "peak_mib": float("nan"), "note": "failed: " + res.stderr[-200:]})
            continue
        rows.append({**json.loads(res.stdout.strip().splitlines()[-1]), "note": ""})
    df = pd.DataFrame(rows)
    chunk = df[df.method == "chunk"].set_index("T")["fwd_bwd_s"]
    chunk_cpu = df[df.method == "chunk"].set_index("T")["cpu_s"]
    df["time_vs_chunk"] = df.apply(lambda r: r.fwd_bwd_s / chunk.get(r["T"], float("nan")), 1)
    df["cpu_vs_chunk"] = df.apply(lambda r: r.cpu_s / chunk_cpu.get(r["T"], float("nan")), 1)
    df.insert(0, "threads", threads or torch.get_num_threads())
    df.insert(0, "B_H_d", f"{B}x{H}x{D}")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    df.to_csv(out, index=False)
    print(df.drop(columns=["B_H_d"]).to_markdown(index=False, floatfmt=".3f"))
    print(f"\nwrote {out}  (time_vs_chunk > 1: slower than chunk)")
    return df


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 8192])
    p.add_argument("--methods", nargs="+",
                   default=["chunk", "naive", "materialized", "sdpa", "zeros_sm"])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", default="results/bench/cpu_operator.csv")
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads per run (0: torch's default). On a machine shared with other "
                        "jobs use 1: oversubscribed OpenMP threads distort timings badly")
    p.add_argument("--one", nargs=2, metavar=("METHOD", "T"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.one:
        print(json.dumps(measure_one(a.one[0], int(a.one[1]), a.reps, a.threads)))
        return
    run(a.lengths, a.methods, a.reps, a.out, a.threads)


if __name__ == "__main__":
    main()
