"""GPU dry-run on CPU: every paper-profile model, one training step on fake CUDA tensors.

For every case of `paper_models.paper_configs()` (experiment file x shape-changing sweep value):
build the model with the runner's build(), move it to fake CUDA, then forward (the task's own
objective on a synthetic batch) and backward, once under CUDA bf16 autocast (bf16-mixed) and
once in fp32 (32-true). Kernel entries assert what their kernels accept; every Triton launch is
recorded. Prints one line per failing (case, precision) and writes the recorded launches
(deduplicated) for compile_recorded.py:

  python tests/gpu/dryrun.py [--only table4] [--launches results/gpu_check/launches.json]
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # no GPU: kernels are defined interpreted
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import fake_cuda as fc  # noqa: E402
import paper_models as pm  # noqa: E402

PRECISIONS = ("bf16-mixed", "32-true")


def _one_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0] if msg else ''}"[:300]


def step(model, module, batch, precision: str, compile: bool = False) -> None:
    """Forward through the task's objective and backward, as Lightning's training step does.
    compile: the model under torch.compile (the `compile` key): its inference graph through
    dynamo + aot_eager (AOTAutograd, the ops' fake impls), then the training step through dynamo
    with the eager backend (AOTAutograd's joint graph needs a CUDA context: fake_cuda.py)."""
    # a fresh context per `with`: a @contextmanager object cannot be entered twice (the
    # compile branch's second entry raised AttributeError 'args' for every bf16-mixed run)
    ctx = (lambda: fc.cuda_autocast(torch.bfloat16)) if precision == "bf16-mixed" else _null
    if compile:
        torch._dynamo.reset()
        with ctx(), torch.no_grad():
            module.objective.step(torch.compile(model, backend="aot_eager"), batch, "train")
        model = torch.compile(model, backend="eager")
    with ctx():
        out = module.objective.step(model, batch, "train")
    fc.fake_backward(out.loss)
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    if missing and len(missing) == sum(1 for p in model.parameters() if p.requires_grad):
        raise RuntimeError("no parameter got a gradient")
    for p in model.parameters():
        p.grad = None


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _meta_key(case, cfg, every_length):
    """The case's dedupe key from its model built on the meta device (no memory, no init) and a
    synthetic batch on fake CUDA: a paper-size model (12 layers x 1024 wide) took ~1 s to build
    for real, and Figure 2's grid (automata x sizes x mixers) has 3,000 cases of 90 shapes.
    None where a meta build fails (then the real build decides); NotInProtocol propagates."""
    try:
        with torch.device("meta"):
            dm, model, _ = pm.build_case(cfg)
        with fc.fake_cuda(fc.Recorder()):
            return pm.dedupe_key(case, cfg, model, pm.synthetic_batch(cfg, dm), every_length)
    except Exception as e:  # noqa: BLE001  (whatever the meta device cannot build)
        if pm.not_in_protocol(e):
            raise
        return None


def run(only=None, precisions=PRECISIONS, log=functools.partial(print, flush=True),
        every_length=False, compile=False):
    """Returns (results, launches): results = [{case, precision, status, error}]."""
    results, launches, seen = [], {}, set()
    warnings.filterwarnings("ignore")
    start, current = time.time(), None
    for case, cfg in pm.paper_configs(only):
        if case.experiment != current:  # progress: CI's run is ~10 silent minutes otherwise
            current = case.experiment
            log(f"[{time.time() - start:5.0f} s] {current}")
        try:
            if _meta_key(case, cfg, every_length) in seen:
                continue  # a shape already run: no real build (most of Figure 2's grid)
            dm, model, module = pm.build_case(cfg)
        except Exception as e:  # a model that does not build fails both precisions
            if pm.not_in_protocol(e):  # a swept point the protocol lacks: the runner skips it
                continue
            for prec in precisions:
                results.append(dict(case=case.name, precision=prec, status="fail",
                                    error="build: " + _one_line(e)))
            log(f"FAIL {case.name}: build: {_one_line(e)}")
            continue
        rec = fc.Recorder()
        with fc.fake_cuda(rec):
            try:
                batch = pm.synthetic_batch(cfg, dm)
            except Exception as e:
                for prec in precisions:
                    results.append(dict(case=case.name, precision=prec, status="fail",
                                        error="batch: " + _one_line(e)))
                log(f"FAIL {case.name}: batch: {_one_line(e)}")
                continue
            key = pm.dedupe_key(case, cfg, model, batch, every_length)
            if key in seen:
                continue
            seen.add(key)
            fc.to_fake_cuda(model)
            for prec in precisions:
                rec.label = f"{case.name} [{prec}]"
                t0 = time.time()
                try:
                    step(model, module, batch, prec, compile)
                    results.append(dict(case=case.name, precision=prec, status="ok", error="",
                                        seconds=round(time.time() - t0, 2)))
                except Exception as e:
                    results.append(dict(case=case.name, precision=prec, status="fail",
                                        error=_one_line(e)))
                    log(f"FAIL {case.name} [{prec}]: {_one_line(e)}")
        for r in rec.launches:
            k = json.dumps({x: r[x] for x in ("kernel", "sig", "consts", "num_warps",
                                              "num_stages")}, sort_keys=True)
            launches.setdefault(k, r)
    return results, list(launches.values())


def summary(results) -> str:
    fails = [r for r in results if r["status"] != "ok"]
    return (f"dry-run: {len(results) - len(fails)} ok, {len(fails)} failed of {len(results)} "
            f"(case x precision) runs")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default=None, help="substring of the experiment name")
    p.add_argument("--launches", default=None, help="write recorded Triton launches (JSON)")
    p.add_argument("--results", default=None, help="write per-run results (JSON lines)")
    p.add_argument("--every-length", action="store_true",
                   help="run every swept batch size and sequence length (default: one per model shape)")
    p.add_argument("--compile", action="store_true",
                   help="each model under torch.compile too (dynamo + aot_eager on fake tensors)")
    args = p.parse_args(argv)
    t0 = time.time()
    results, launches = run(args.only, every_length=args.every_length, compile=args.compile)
    if not results:
        print(f"error: --only {args.only} matches no experiment (a substring of e.g. "
              "table1/mad, fig3/mqar)", file=sys.stderr)
        return 2
    for path, rows in ((args.launches, launches), (args.results, results)):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(summary(results), f"; {len(launches)} distinct Triton launches; "
          f"{time.time() - t0:.0f} s")
    return 1 if any(r["status"] != "ok" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
