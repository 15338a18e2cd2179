"""The device check (`make gpu-check`): one script for the first lent GPU, everything in one folder.

On a CUDA machine with no network (python 3.12, torch 2.11, triton 3.6 and no hydra/fla), in
about 8 minutes on an H200 it:
  1. installs the missing pure-Python packages from the wheel folder (`make gpu-wheels`) with
     pip --no-index;
  2. records the environment (env.json);
  3. runs `pytest -m gpu` on tests/kernels and tests/gpu (pytest_gpu.txt, junit XML);
  4. runs `kernels.bench_gpu` at reduced size (gpu_kernels.csv/png) and the small-head-dim
     comparison of the padded Triton path vs the torch chunk path (gpu_small_d.csv), which
     decides what `backend="auto"` should pick below d = 16 (docs/kernels.md);
  5. runs two bf16-mixed training steps of every table's paper-profile model x mixer with the
     real kernels on synthetic batches of the protocol's shape: one JSON line each in
     train_steps.jsonl (status, error, step time, peak memory).
Without CUDA it runs what it can (1-2 and a fake-CUDA dry-run of the toy experiment), lists the
GPU parts it skipped in summary.txt and exits 0.

  python tests/gpu/gpu_check.py --out results/gpu_check --wheels wheels/gpu
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
# module -> distribution of what the GPU image lacks (pure-Python wheels, see mk/gpu.mk)
NEEDED = {"omegaconf": "omegaconf", "antlr4": "antlr4-python3-runtime", "hydra": "hydra-core",
          "hydra_plugins.hydra_submitit_launcher": "hydra-submitit-launcher",
          "submitit": "submitit", "cloudpickle": "cloudpickle", "einops": "einops",
          "fla": "fla-core", "tabulate": "tabulate", "tqdm": "tqdm"}
SMALL_D = [(128, 128, 16, 8), (224, 128, 8, 4), (32, 1024, 8, 22), (8, 4096, 16, 8)]  # B,T,H,d


def _missing(mod: str) -> bool:
    try:
        return importlib.util.find_spec(mod) is None
    except (ImportError, ValueError):
        return True


def install_wheels(wheels: Path, log) -> dict:
    todo = sorted({dist for mod, dist in NEEDED.items() if _missing(mod)})
    if not todo:
        return dict(status="ok", installed=[], note="nothing missing")
    if not wheels.is_dir():
        return dict(status="fail", missing=todo, error=f"{wheels} does not exist: run "
                    "`make gpu-wheels` on a machine with network and copy the folder")
    base = [sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(wheels),
            "--no-deps", *todo]
    for extra in ([], ["--user"], ["--break-system-packages"]):
        r = subprocess.run(base + extra, capture_output=True, text=True)
        log.write(f"$ {' '.join(base + extra)}\n{r.stdout}{r.stderr}\n")
        if r.returncode == 0:
            importlib.invalidate_caches()
            return dict(status="ok", installed=todo)
    return dict(status="fail", missing=todo, error=(r.stderr.strip().splitlines() or [""])[-1])


def env_info() -> dict:
    import torch
    info = dict(python=sys.version.split()[0], torch=torch.__version__,
                cuda=torch.cuda.is_available())
    for mod in ("triton", "fla", "lightning", "hydra"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001 - recorded, not fatal
            info[mod] = f"unavailable: {type(e).__name__}"
    if info["cuda"]:
        info.update(device=torch.cuda.get_device_name(0),
                    capability=".".join(map(str, torch.cuda.get_device_capability(0))))
    return info


def _run(cmd: list, timeout: int) -> tuple[str, int]:
    """(stdout + stderr, exit code) of a subprocess in the repo root; 124 when it timed out."""
    try:
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        return r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        return f"{e.stdout or ''}\ntimed out after {timeout} s", 124


def run_pytest(out: Path, timeout: int) -> dict:
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests/kernels", "tests/gpu",
           "-p", "no:cacheprovider", f"--junitxml={out / 'pytest_gpu.xml'}"]
    text, rc = _run(cmd, timeout)
    (out / "pytest_gpu.txt").write_text(text)
    last = [ln for ln in text.splitlines() if ln.strip()][-1:] or [""]
    return dict(status="ok" if rc == 0 else "fail", rc=rc, result=last[0])


def run_bench(out: Path, timeout: int) -> dict:
    cmd = [sys.executable, "-m", "kernels.bench_gpu", "--T", "1024", "4096", "16384",
           "--block-T", "2048", "--repeats", "5", "--out", str(out / "gpu_kernels.csv"),
           "--plot", str(out / "gpu_kernels.png")]
    text, rc = _run(cmd, timeout)
    (out / "bench_gpu.txt").write_text(text)
    return dict(status="ok" if rc == 0 else "fail", rc=rc,
                summary=[ln for ln in text.splitlines() if "x" in ln and "T=" in ln][-4:])


def run_small_d(out: Path) -> dict:
    """Padded Triton vs torch chunk at the paper's small head dims (bf16, causal, fwd+bwd)."""
    import torch
    from kernels.bench_gpu import bench_operator, write_csv
    rows = []
    for B, T, H, d in SMALL_D:
        for m in ("zeros_triton", "zeros_chunk_torch"):
            rows += bench_operator(m, B, T, H, d, torch.bfloat16, 5)
    write_csv(rows, str(out / "gpu_small_d.csv"))
    t = {(r["method"], r["mode"], r["B"], r["T"], r["H"], r["d"]): r.get("ms") for r in rows}
    lines = []
    for B, T, H, d in SMALL_D:
        a = t.get(("zeros_triton", "fwd+bwd", B, T, H, d))
        b = t.get(("zeros_chunk_torch", "fwd+bwd", B, T, H, d))
        lines.append(f"B={B} T={T} H={H} d={d}: triton(padded) {a} ms, chunk {b} ms")
    return dict(status="ok", lines=lines)


def _step_key(case, cfg) -> tuple:
    """One training-step run per (table, mixer, backbone, mixer kwargs, model builder)."""
    bb = next((o for o in case.overrides if o.startswith("backbone=")), "")
    return (case.experiment.split("/")[0], str(cfg.mixer.name), bb,
            str(cfg.mixer.get("kwargs")), str(cfg.backbone.get("_target_")))


def train_step(cfg, steps: int = 2) -> dict:
    import torch
    import paper_models as pm
    dm, model, module = pm.build_case(cfg)
    model.cuda().train()
    batch = pm.synthetic_batch(cfg, dm, device="cuda")
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = module.objective.step(model, batch, "train").loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite loss {loss.item()}")
    return dict(step_s=round(times[-1], 4), first_step_s=round(times[0], 3),
                peak_mib=round(torch.cuda.max_memory_allocated() / 2 ** 20, 1),
                loss=round(float(loss), 4))


def run_train_steps(out: Path, deadline: float) -> dict:
    import torch
    path = out / "train_steps.jsonl"
    n = {"ok": 0, "fail": 0, "skipped": 0}
    import paper_models as pm
    seen = set()
    with path.open("w") as f:
        for case, cfg in pm.paper_configs():
            key = _step_key(case, cfg)
            if key in seen:
                continue
            row = dict(case=case.name, table=key[0], mixer=key[1])
            if time.time() > deadline:
                row.update(status="skipped", error="time budget of the check spent")
            else:
                try:
                    row.update(status="ok", error="", **train_step(cfg))
                except Exception as e:  # noqa: BLE001 - one line per failing model
                    if pm.not_in_protocol(e):
                        continue  # not a point of the protocol: try the next swept value
                    msg = (str(e).strip().splitlines() or [""])[0]
                    row.update(status="fail", error=f"{type(e).__name__}: {msg}"[:300])
                torch.cuda.empty_cache()
            seen.add(key)
            n[row["status"]] += 1
            f.write(json.dumps(row) + "\n")
            f.flush()
    return dict(status="ok" if n["fail"] == 0 and n["skipped"] == 0 else "fail", **n)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("GPU_CHECK_OUT", "results/gpu_check"))
    p.add_argument("--wheels", default=str(ROOT / "wheels" / "gpu"))
    p.add_argument("--budget", type=float, default=470.0, help="seconds for the whole check")
    args = p.parse_args(argv)
    t0 = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary, skipped = {}, []
    with (out / "gpu_check.log").open("w") as log:
        summary["wheels"] = install_wheels(Path(args.wheels), log)
    summary["env"] = env_info()
    (out / "env.json").write_text(json.dumps(summary["env"], indent=1))
    if summary["env"]["cuda"]:
        summary["pytest_gpu"] = run_pytest(out, timeout=150)
        summary["bench_gpu"] = run_bench(out, timeout=150)
        try:
            summary["small_d"] = run_small_d(out)
        except Exception as e:  # noqa: BLE001
            summary["small_d"] = dict(status="fail", error=f"{type(e).__name__}: {e}"[:300])
        summary["train_steps"] = run_train_steps(out, deadline=t0 + args.budget)
    else:
        skipped = ["pytest -m gpu (tests/kernels, tests/gpu)", "bench-gpu (reduced)",
                   "small head dims: padded Triton vs torch chunk",
                   "two bf16-mixed training steps per table x mixer"]
        import dryrun  # what runs without a GPU: the fake-CUDA dry-run of one experiment
        results, _ = dryrun.run(only="toy", log=lambda *a: None)
        summary["dryrun_toy"] = dict(status="ok" if all(r["status"] == "ok" for r in results)
                                     else "fail", line=dryrun.summary(results))
    summary["skipped"] = skipped
    summary["wall_s"] = round(time.time() - t0, 1)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    lines = [f"gpu-check ({summary['env'].get('device', 'no CUDA device')}), "
             f"{summary['wall_s']} s, output in {out}/"]
    for k, v in summary.items():
        if isinstance(v, dict) and "status" in v:
            lines.append(f"  {k}: {v['status']}  " + json.dumps(
                {x: y for x, y in v.items() if x != "status"}, default=str)[:400])
    lines += [f"  SKIPPED (no CUDA): {s}" for s in skipped]
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    failed = [k for k, v in summary.items() if isinstance(v, dict) and v.get("status") == "fail"]
    return 1 if failed and summary["env"]["cuda"] else 0


if __name__ == "__main__":
    sys.exit(main())
