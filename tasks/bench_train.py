"""Training-step benchmark at each paper table's own shapes: ZeroS vs softmax (SDPA) vs LinAttn.

    python -m tasks.bench_train [--tables table1 fig3 ...] [--profiles paper smoke]
                                [--threads 1] [--max-batch 64] [--out results/bench/cpu_train.csv]

For every table the experiment file is composed with Hydra's compose API (profile=paper and
profile=smoke) and the model is built by the runner's own `build()` (tasks/common/runner.py),
so shapes and models come from the configs, never from numbers in this file. TABLES below is
the one thin mapping (table -> experiment glob + the sweep value that fixes the shape, when a
sweep spans several); fix it there if the experiment files are renamed. Measured, per table x
profile, all mixers in ONE process, interleaved, min over --reps (on a shared machine other
jobs only ever add time):
  layer_s   one mixer layer forward+backward on x [B, T, D] of the shape the model feeds it
  step_s    one full training step: model + the task's loss + backward + the task's optimizer
  *_cpu_s   the same, process CPU time (with --threads 1: the job's own compute; wall time on
            a shared machine is inflated by whatever else runs, CPU time far less)
  peak_mib  peak resident memory of two training steps above the resident size before them,
            in a fresh process per mixer (VmHWM; Linux)
Ratios (`*_vs_softmax`) are within one process; absolute seconds on a shared machine are not
comparable across runs. CPU runs are fp32; on a CUDA machine everything runs there under bf16
autocast and peak_mib is torch.cuda.max_memory_allocated (untested here: no GPU was lent).
"""
from __future__ import annotations

import argparse
import contextlib
import glob
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
import yaml

from tasks.common.protocol import profiles
from tasks.common.store import CONF, ROOT

# bench name -> (mixer config group, kwargs set on top). zeros_before is the path `auto` took
# before zeros/ops/select.py (chunks of 64 everywhere); zeros_naive what table4's builder
# forces on CPU (tasks/timeseries/models.py sets backend="naive" unless the config names one)
VARIANTS = {"zeros": ("zeros", {"backend": "auto"}), "zeros_before": ("zeros", {"backend": "chunk"}),
            "zeros_naive": ("zeros", {"backend": "naive"}),
            "softmax": ("softmax", {}), "linear_attn": ("linear_attn", {})}
MIXERS = ("zeros", "zeros_before", "softmax", "linear_attn")
# <variant>_compiled: the same model under torch.compile (inductor, what `compile: true` runs):
# the layer wrapped alone for layer_s, the whole model compiled in place for step_s
# (zeros/compile.py). Their *_vs_softmax are against softmax_compiled, *_vs_eager against the
# same variant eager. The first call compiles (tens of seconds per shape on CPU; not timed).
COMPILED = ("zeros_compiled", "softmax_compiled")
# table -> (experiment glob under conf/experiment, overrides that pick the swept shape)
TABLES = {
    "table1": ("table1/mad*", ["task.setting=baseline", "mad_task=in-context-recall"]),
    "ablation": ("ablation/mad*", ["task.setting=baseline"]),
    "fig2": ("fig2/regbench*", []),
    "fig3": ("fig3/mqar*", []),
    "table2": ("table2/wikitext103*", []),
    "fig4": ("fig4/owt2*", []),
    "table3": ("table3/deit_tiny*", []),
    "table4": ("table4/decoder*", ["task.dataset=ETTh1", "task.horizon=96"]),
}


def _experiment(pattern: str) -> str:
    files = sorted(glob.glob(str(CONF / "experiment" / f"{pattern}.yaml")))
    if not files:
        raise FileNotFoundError(f"no experiment file matches conf/experiment/{pattern}.yaml: "
                                "update TABLES in tasks/bench_train.py")
    return str(Path(files[0]).relative_to(CONF / "experiment").with_suffix(""))


def compose(table: str, profile: str, variant: str):
    from hydra import compose as hcompose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf, open_dict
    pattern, extra = TABLES[table]
    mixer, kwargs = VARIANTS[variant]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = hcompose("train", overrides=[f"experiment={_experiment(pattern)}",
                                           f"profile={profile}", f"mixer={mixer}"])
    with open_dict(cfg):
        for ov in extra:  # only keys the experiment has (a renamed key is skipped, not invented)
            key, val = ov.split("=", 1)
            if OmegaConf.select(cfg, key) is not None:
                OmegaConf.update(cfg, key, yaml.safe_load(val), merge=True)  # "96" -> 96
        for key, val in kwargs.items():
            OmegaConf.update(cfg, f"mixer.kwargs.{key}", val, merge=True)
    return cfg


def build(cfg):
    from unittest import mock

    from tasks.common.runner import build as runner_build
    # the config check refuses accelerator=gpu without CUDA; the model is built on CPU anyway
    with mock.patch.object(torch.cuda, "is_available", lambda: True):
        return runner_build(cfg, check_data=False)


def synthetic_batch(dm, max_batch=0, device="cpu"):
    """One training batch of the protocol's shape, made by the datamodule's `example_batch(B,
    device)` (random values, no data files read), on `device` (tests/gpu's dry-run: fake CUDA).
    max_batch > 0 caps the batch size (a CPU budget; recorded in the CSV)."""
    if not hasattr(dm, "example_batch"):
        raise NotImplementedError(f"{type(dm).__name__} has no example_batch(batch_size, device): "
                                  "add it to the task's datamodule (tasks/INTERFACE.md)")
    B = int(dm.batch_size)
    return dm.example_batch(min(B, max_batch) if max_batch else B, device=device)


def mixer_layers(model) -> list:
    """The model's sequence-mixer modules: those of a registry class, else (timm's DeiT keeps its
    own softmax attention) those whose class is named *Attention."""
    from zeros.mixers import available_mixers, mixer_class
    classes = tuple(c for c in map(mixer_class, available_mixers()) if isinstance(c, type))
    return ([m for m in model.modules() if isinstance(m, classes)]
            or [m for m in model.modules() if type(m).__name__.endswith("Attention")])


def _mixer_layer(model):
    return mixer_layers(model)[0]


def _vm_mib(field: str) -> float:
    """/proc/self/status's VmRSS (resident now) or VmHWM (its peak) in MiB; nan elsewhere."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_mib(table, profile, mixer, max_batch, threads=0):
    """Peak resident memory of two training steps above the resident size before them, in a
    fresh process (in the timing process freed memory is reused across mixers)."""
    cmd = [sys.executable, "-m", "tasks.bench_train", "--peak", table, profile, mixer,
           "--max-batch", str(max_batch), "--threads", str(threads or torch.get_num_threads())]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    try:
        return float(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return float("nan")


def _peak_child(table, profile, mixer, max_batch):
    c = Case(table, profile, mixer, max_batch)
    cuda = c.device == "cuda"  # device memory: the allocator's own peak
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated() / 2**20 if cuda else _vm_mib("VmRSS")
    c.train_step()
    c.train_step()
    print((torch.cuda.max_memory_allocated() / 2**20 if cuda else _vm_mib("VmHWM")) - base)


class Case:
    """One (table, profile, mixer): the built model, its optimizer, a batch, the layer input.
    On a CUDA machine everything moves there and runs under bf16 autocast (the paper profile)."""

    def __init__(self, table, profile, mixer, max_batch):
        compiled = mixer.endswith("_compiled")
        self.cfg = compose(table, profile, mixer.removesuffix("_compiled"))
        dm, model, module = build(self.cfg)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = model.to(self.device)
        batch = synthetic_batch(dm, max_batch)
        self.batch = ({k: v.to(self.device) for k, v in batch.items()} if isinstance(batch, dict)
                      else tuple(x.to(self.device) for x in batch))
        self.objective = module.objective
        from tasks.common.module import weight_decay_groups
        self.opt = module.optimizer_factory(weight_decay_groups(self.model, module.decay))
        self.layer = _mixer_layer(self.model)
        shapes = []
        h = self.layer.register_forward_hook(lambda m, a, o: shapes.append(tuple(a[0].shape)))
        with torch.no_grad(), self._autocast():
            self.objective.step(self.model, self.batch, "train")
        h.remove()
        self.x_shape = shapes[0]  # [B, T, D] the layer sees
        self.x = torch.randn(self.x_shape, device=self.device, requires_grad=True)
        self.layer_call = self.layer
        if compiled:
            from zeros.compile import compile_or_eager
            self.layer_call = torch.compile(self.layer)
            compile_or_eager(self.model)

    def _autocast(self):
        if self.device == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()  # CPU runs are fp32 (the runner's CPU policy)

    def _sync(self):
        if self.device == "cuda":
            torch.cuda.synchronize()

    def layer_fwd_bwd(self):
        with self._autocast():
            y = self.layer_call(self.x)
        y.float().sum().backward()
        self.layer.zero_grad(set_to_none=True)
        self.x.grad = None
        self._sync()

    def train_step(self):
        self.model.train()
        with self._autocast():
            loss = self.objective.step(self.model, self.batch, "train").loss
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self._sync()


def _timed(fn):
    """(wall s, process CPU s). With --threads 1 the CPU time is what this job used itself:
    far less inflated than wall time by other jobs on a shared machine."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def measure(table, profile, mixers, reps, max_batch, peak=True):
    """Rows for one table x profile: every mixer built, then timed interleaved (round robin)."""
    from tasks.common.module import batch_size
    cases, failed = {}, []
    for m in mixers:  # a mixer the table cannot build (e.g. LinAttn under 2-D RoPE) is a note
        try:
            cases[m] = Case(table, profile, m, max_batch)
        except Exception as err:
            failed.append({"table": table, "profile": profile, "mixer": m,
                           "note": f"not built: {type(err).__name__}: {str(err)[:160]}"})
    mixers = list(cases)
    for c in cases.values():  # warm-up (first-call allocations, lazy inits)
        c.layer_fwd_bwd()
        c.train_step()
    lt = {m: [] for m in mixers}  # (wall, cpu) pairs
    st = {m: [] for m in mixers}
    for _ in range(reps):
        for m, c in cases.items():
            lt[m].append(_timed(c.layer_fwd_bwd))
            st[m].append(_timed(c.train_step))
    low = lambda xs, j: min(x[j] for x in xs)  # noqa: E731
    peak = {m: peak_mib(table, profile, m, max_batch) if peak and not m.endswith("_compiled")
            else float("nan") for m in mixers}
    rows = []
    for m, c in cases.items():
        B, T, D = c.x_shape
        rows.append({"table": table, "profile": profile, "experiment": _experiment(TABLES[table][0]),
                     "mixer": m, "B": B, "T": T, "D": D, "H": getattr(c.layer, "n_heads", 0),
                     "causal": bool(getattr(c.layer, "causal", True)),
                     "batch": batch_size(c.batch), "layer_s": low(lt[m], 0),
                     "step_s": low(st[m], 0), "layer_cpu_s": low(lt[m], 1),
                     "step_cpu_s": low(st[m], 1), "peak_mib": peak[m]})
    del cases
    return rows + failed


def run(tables, profiles, mixers=MIXERS, reps=3, out="results/bench/cpu_train.csv", threads=0,
        max_batch=0, peak=True):
    if threads:
        torch.set_num_threads(threads)
    rows = []
    for table in tables:
        for profile in profiles:
            try:
                rows += measure(table, profile, mixers, reps, max_batch, peak)
            except Exception as err:  # one broken table must not hide the others
                rows.append({"table": table, "profile": profile, "mixer": "-",
                             "note": f"failed: {type(err).__name__}: {str(err)[:200]}"})
            print(f"done {table} {profile}", flush=True)
            _write(rows, out, max_batch)  # after every table: a killed run keeps what it did
    df = _write(rows, out, max_batch)
    print(df.drop(columns=["experiment"], errors="ignore").to_markdown(index=False, floatfmt=".3f"))
    print(f"\nwrote {out}")
    return df


def _write(rows, out, max_batch):
    import pandas as pd
    df = pd.DataFrame(rows)
    if "layer_s" in df:
        def ratio(col, ref_of):  # r[col] / the same column of row ref_of(r) in its table
            idx = df.set_index(["table", "profile", "mixer"])[col]
            return [r[col] / idx.get((r["table"], r["profile"], ref_of(r["mixer"])), float("nan"))
                    for _, r in df.iterrows()]
        comp = lambda m: str(m).endswith("_compiled")  # noqa: E731
        softmax = lambda m: "softmax_compiled" if comp(m) else "softmax"  # noqa: E731
        eager = lambda m: str(m).removesuffix("_compiled") if comp(m) else m  # noqa: E731
        for suffix, ref_of in (("_vs_softmax", softmax), ("_vs_eager", eager)):
            for col in ("layer_s", "step_s", "layer_cpu_s", "step_cpu_s"):
                df[col.replace("_s", suffix)] = ratio(col, ref_of)
    df.insert(0, "threads", torch.get_num_threads())
    df.insert(0, "max_batch", max_batch)
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    df.to_csv(out, index=False)
    return df


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tables", nargs="+", default=list(TABLES), choices=list(TABLES))
    p.add_argument("--profiles", nargs="+", default=["paper", "smoke"], choices=profiles())
    p.add_argument("--mixers", nargs="+", default=list(MIXERS) + list(COMPILED),
                   choices=list(VARIANTS) + list(COMPILED))
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: default); 1 on a busy machine")
    p.add_argument("--max-batch", type=int, default=0,
                   help="cap the batch size (0: the protocol's); the layer/step ratios barely move")
    p.add_argument("--out", default="results/bench/cpu_train.csv")
    p.add_argument("--no-peak", action="store_true", help="skip the peak-memory child processes")
    p.add_argument("--peak", nargs=3, metavar=("TABLE", "PROFILE", "MIXER"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.peak:
        if a.threads:
            torch.set_num_threads(a.threads)
        return _peak_child(*a.peak, a.max_batch)
    run(a.tables, a.profiles, a.mixers, a.reps, a.out, a.threads, a.max_batch, not a.no_peak)


if __name__ == "__main__":
    main()
