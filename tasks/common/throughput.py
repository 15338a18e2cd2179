"""Runs per hour at K runs sharing one GPU (K = 1, 2, 4, 8): the measurement behind
conf/estimates.yaml's `runs_per_gpu` and `step_ms` (assumptions until a GPU runs this).
One call on a GPU machine (`make throughput`, ~4-6 min on an H200 for Table 1's MAD runs):

    python -m tasks.common.throughput --table table1 --profile paper [--ks 1,2,4,8 --max-steps 1000]

For each K it trains K copies of the table's first protocol run (seed 1000+i: distinct run ids,
the same work) at once on GPU 0 through the local launcher (launch.run_local, pinned by
CUDA_VISIBLE_DEVICES), each capped at --max-steps optimizer steps, under a scratch ZEROS_ROOT
(outputs/throughput/: nothing reaches results/runs/), and appends one row per K to the CSV
(default results/throughput/<table>_<profile>_<device>.csv):
  k, runs, steps_per_run, wall_s       the K runs, from their processes' start to their exit
  runs_per_hour_capped                 K / wall_s x 3600, at the step cap, process start included
  steps_per_s                          optimizer steps of all K runs / wall_s
  train_s_mean                         each run's own training wall (its result JSON), mean
  full_steps, runs_per_hour_full       one protocol run's budget (max_steps, or max_epochs x
                                       batches per epoch; batches = steps without gradient
                                       accumulation) and steps_per_s x 3600 / full_steps:
                                       protocol runs per hour at K, process start not counted,
                                       an upper bound where early stopping ends runs sooner
  gpu_mem_peak_mib                     nvidia-smi memory.used on GPU 0, sampled every second
With --device cpu the same pipeline runs the K processes on CPU at 1 thread each: a check of
the pipeline, not a GPU figure. An unrecorded 20-step run goes first (--no-warmup: none), so
that first-use costs (Triton's JIT, data caches) do not land on K=1.
"""
from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from . import launch
from .errors import cli_parser, fail
from .protocol import profiles, table_names
from .store import ROOT

SCRATCH = ROOT / "outputs" / "throughput"  # the measured runs' ZEROS_ROOT, one folder per call
FIELDS = ["table", "profile", "task", "device", "k", "runs", "steps_per_run", "wall_s",
          "runs_per_hour_capped", "steps_per_s", "train_s_mean", "full_steps",
          "runs_per_hour_full", "gpu_mem_peak_mib", "failed", "run"]


class GpuMemory(threading.Thread):
    """Peak memory.used of GPU 0 (MiB) while it runs; None without nvidia-smi."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak, self._stop = None, threading.Event()

    def run(self):
        while not self._stop.wait(1.0):
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,"
                                      "noheader,nounits", "-i", "0"], capture_output=True,
                                     text=True, timeout=10).stdout.split()
                self.peak = max(self.peak or 0, int(out[0]))
            except (OSError, ValueError, IndexError, subprocess.SubprocessError):
                return

    def stop(self) -> int | None:
        self._stop.set()
        return self.peak


def first_job(table: str, profile: str, extra: list[str]):
    """The table's first protocol run (plan.py's job list) and its step budget."""
    from . import plan
    from .reproduce import experiment_files
    jobs, _ = plan.plan(table, profile, experiment_files(table), extra)
    if not jobs:
        raise SystemExit(f"error: {table} has no runs at profile={profile}: pick another --table")
    return jobs[0]


def measure(job, k: int, max_steps: int, device: str, scratch: Path) -> dict:
    """Train K capped copies of `job` at once; one CSV row."""
    env = {"ZEROS_ROOT": str(scratch), "ZEROS_DATA": os.environ.get("ZEROS_DATA",
                                                                    str(ROOT / "data")),
           "WANDB_MODE": "disabled", "PYTHONPATH": str(ROOT)}
    cpu = ["trainer.accelerator=cpu", "trainer.devices=1"] if device == "cpu" else []
    tasks = [launch.Task(f"k{k}-{i}", [sys.executable, "-m", "tasks.train", *job.overrides,
                                       f"seed={1000 + i}", f"trainer.max_steps={max_steps}",
                                       "logger.wandb=false", "skip_existing=false",
                                       "resume=false", *cpu,
                                       f"hydra.run.dir={scratch}/hydra/k{k}-{i}"],
                         scratch / "logs" / f"k{k}-{i}.log", env=env) for i in range(k)]
    mem = GpuMemory()
    if device != "cpu":
        mem.start()
    t0 = time.time()
    out = launch.run_local(tasks, k, gpus=0 if device == "cpu" else 1, runs_per_gpu=k)
    wall = time.time() - t0
    peak = mem.stop()
    results = [json.loads(p.read_text()) for p in (scratch / "results").rglob("*.json")]
    steps = sum(int(r.get("global_step") or 0) for r in results)
    train = [float(r["wall_time_s"]) for r in results if r.get("wall_time_s") is not None]
    full = job_steps(job)
    rate = steps / wall if wall else 0.0
    return {"task": job.task, "k": k, "runs": len(results), "steps_per_run": max_steps,
            "wall_s": round(wall, 1), "runs_per_hour_capped": round(len(results) / wall * 3600, 1),
            "steps_per_s": round(rate, 2),
            "train_s_mean": round(sum(train) / len(train), 1) if train else None,
            "full_steps": full,
            "runs_per_hour_full": round(rate * 3600 / full, 2) if full and rate else None,
            "gpu_mem_peak_mib": peak, "failed": sum(1 for _, rc, _ in out if rc),
            "run": job.run_id}


def job_steps(job) -> int | None:
    """A protocol run's optimizer-step budget, from its GPU estimate (plan.gpu_minutes =
    batches x step_ms; conf/estimates.yaml)."""
    from . import plan
    est = plan._EST.get(job.task)
    if job.gpu_minutes is None or not est:
        return None
    return round(job.gpu_minutes * 60000 / float(est["step_ms"]))


def main(argv=None) -> int:
    ap = cli_parser(__doc__)
    ap.add_argument("--table", default="table1", choices=table_names())
    ap.add_argument("--profile", default="paper", choices=profiles())
    ap.add_argument("--ks", default="1,2,4,8", help="runs per GPU to measure, e.g. 1,2,4,8")
    ap.add_argument("--max-steps", type=int, default=1000, help="step cap of each run")
    ap.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    ap.add_argument("--no-warmup", action="store_true", help="skip the unrecorded 20-step run")
    ap.add_argument("--out", default=None, help="CSV (default results/throughput/<table>_"
                    "<profile>_<device>.csv); rows are appended")
    ap.add_argument("overrides", nargs="*", help="extra overrides for the job list (e.g. mixer=gla)")
    a = ap.parse_intermixed_args(argv)
    try:
        ks = [int(k) for k in a.ks.split(",")]
    except ValueError:
        ks = [0]
    if min(ks) < 1 or a.max_steps < 1:
        return fail(f"--ks {a.ks} --max-steps {a.max_steps}: use positive numbers, e.g. --ks "
                    "1,2,4,8 --max-steps 1000")
    name = "cpu"
    if a.device == "gpu":
        import torch
        if not torch.cuda.is_available():
            return fail("no CUDA GPU visible: run on a GPU machine, or --device cpu --table toy "
                        "--profile smoke for a check of the pipeline")
        name = torch.cuda.get_device_name(0)
    job = first_job(a.table, a.profile, a.overrides)
    slug = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower()
    out = Path(a.out or ROOT / "results" / "throughput" / f"{a.table}_{a.profile}_{slug}.csv")
    out.parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    print(f"throughput: {job.run_id} ({job.task}) x K = {a.ks} at {a.max_steps} steps on {name}",
          flush=True)
    new = not out.exists()
    with open(out, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            w.writeheader()
        if not a.no_warmup:  # first-use costs (Triton JIT and caches, data caches) out of K=1
            measure(job, 1, min(20, a.max_steps), a.device, SCRATCH / stamp / "warmup")
        for k in ks:
            row = {"table": a.table, "profile": a.profile, "device": name,
                   **measure(job, k, a.max_steps, a.device, SCRATCH / stamp / f"k{k}")}
            w.writerow(row)
            f.flush()
            print(f"K={k}: {row['runs']} runs in {row['wall_s']} s, {row['steps_per_s']} steps/s,"
                  f" {row['runs_per_hour_capped']} runs/h at {a.max_steps} steps, "
                  f"{row['runs_per_hour_full']} protocol runs/h, failed {row['failed']}",
                  flush=True)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
