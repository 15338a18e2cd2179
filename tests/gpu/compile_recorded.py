"""Compile every Triton launch the dry-run recorded for sm_90, with the ptxas Triton ships.

Input: the JSON lines `dryrun.py --launches` writes (kernel "module:name", argument types,
constexprs, warps, stages; one autotune config per kernel). Each is compiled TTIR -> PTX ->
cubin for `--arch` (default 90) in worker processes without the interpreter, so dtype errors of
the compiled path ("Both operands must be same dtype"), tl.dot shape limits and shared-memory
overflows show up here without a GPU:

  TRITON_INTERPRET=0 python tests/gpu/compile_recorded.py launches.jsonl [--jobs 2]
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


# bytes of shared memory one block may use: sm_90 (H100, H200) 227 KB. triton.compile does not
# check it (the driver does, when a GPU loads the kernel: OutOfResources), so compile_one does
SHARED_MAX = {90: 232448}


def _layers(obj) -> list:
    """The kernel object and what it wraps: Autotuner / Heuristics keep the next layer in `.fn`,
    down to the JITFunction (InterpretedFunction under TRITON_INTERPRET) whose `.fn` is the
    Python function itself."""
    out = [obj]
    while (nxt := getattr(out[-1], "fn", None)) is not None and not inspect.isfunction(nxt):
        out.append(nxt)
    return out


def _base_jit(obj):
    """The JITFunction under any wrappers."""
    return _layers(obj)[-1]


def autotuned(obj) -> bool:
    """Whether an Autotuner wraps the kernel (compiled or interpreted)."""
    from triton.runtime.autotuner import Autotuner
    return any(isinstance(o, Autotuner) for o in _layers(obj))


def shared_verdict(shared: int, arch: int, is_autotuned: bool) -> dict:
    """What compile_one adds for a kernel needing `shared` bytes: nothing within the limit; over
    it a failure for a fixed config (its first launch fails), a note for an autotuner's (the
    dry-run recorded its first config; on a GPU the autotuner skips configs out of resources)."""
    limit = SHARED_MAX.get(arch)
    if not limit or shared <= limit:
        return {}
    over = f"shared memory {shared} > sm_{arch}'s {limit} bytes"
    if is_autotuned:
        return {"note": f"first autotune config: {over} (the autotuner skips it)"}
    return {"ok": False, "error": f"OutOfResources: {over}"}


def _find(kernel: str):
    """The kernel's object as its module defines it (an Autotuner / Heuristics wrapper or the
    JITFunction itself)."""
    mod_name, name = kernel.split(":")
    mod = importlib.import_module(mod_name)
    obj = getattr(mod, name, None)
    if obj is None:  # defined under another attribute name
        from triton.runtime.jit import KernelInterface
        obj = next(v for v in vars(mod).values() if isinstance(v, KernelInterface)
                   and getattr(_base_jit(v).fn, "__name__", None) == name)
    return obj


def _const(v):
    import triton.language as tl
    if isinstance(v, str):
        try:
            return tl.dtype(v)  # a dtype constexpr was recorded by name
        except Exception:
            return v
    return v


def compile_one(rec: dict, arch: int = 90) -> dict:
    """{kernel, ok, error, seconds, shared} for one recorded launch."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    t0 = time.time()
    out = dict(kernel=rec["kernel"], label=rec.get("label", ""), ok=False, error="")
    try:
        found = _find(rec["kernel"])
        fn = _base_jit(found)
        consts = {k: _const(v) for k, v in rec["consts"].items()}
        sig = {n: "constexpr" if n in consts else rec["sig"][n] for n in fn.arg_names}
        k = triton.compile(ASTSource(fn, sig, constexprs=consts),
                           target=GPUTarget("cuda", arch, 32),
                           options=dict(num_warps=rec["num_warps"], num_stages=rec["num_stages"]))
        out.update(ok=True, shared=k.metadata.shared)
        out.update(shared_verdict(k.metadata.shared, arch, autotuned(found)))
    except Exception as e:  # one line: the first line of the compiler's message
        msg = [ln for ln in str(e).splitlines() if ln.strip()]
        out["error"] = f"{type(e).__name__}: {msg[-1] if msg else ''}"[:300]
    out["seconds"] = round(time.time() - t0, 2)
    return out


DIM_NAMES = ("K", "V", "D", "BK", "BV", "BD")


def one_per_kernel(records: list[dict]) -> list[dict]:
    """Per (kernel, argument dtypes) the recorded configs with the smallest and the largest head
    dims: tl.dot limits break at the small end, shared memory at the large end. Compiling costs
    ~10-30 s per config on 2 loaded cores, the full recorded set runs for hours."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        key = (r["kernel"], tuple(v for v in r["sig"].values() if v.startswith("*")))
        groups.setdefault(key, []).append(r)
    dims = lambda r: tuple(r["consts"].get(n) or 0 for n in DIM_NAMES)  # noqa: E731
    out = []
    for rs in groups.values():
        rs = sorted(rs, key=dims)
        out += [rs[0]] + ([rs[-1]] if dims(rs[-1]) != dims(rs[0]) else [])
    return out


def _worker_init():
    os.environ["TRITON_INTERPRET"] = "0"


def compile_all(records: list[dict], jobs: int = 2, arch: int = 90, out=None) -> list[dict]:
    """Compile in `jobs` processes; each result is appended to `out` (a path) as it finishes,
    so a check stopped at a time limit keeps what it compiled."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise SystemExit("unset TRITON_INTERPRET: the interpreter replaces the compiler")
    results = []
    f = open(out, "w") if out else None
    try:
        with ProcessPoolExecutor(max_workers=jobs, initializer=_worker_init) as ex:
            for r in ex.map(compile_one, records, [arch] * len(records)):
                results.append(r)
                if f:
                    f.write(json.dumps(r) + "\n")
                    f.flush()
    finally:
        if f:
            f.close()
    return results


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("launches")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--arch", type=int, default=90)
    p.add_argument("--out", default=None, help="JSON lines, one per compiled launch")
    p.add_argument("--all", action="store_true",
                   help="every recorded config (default: smallest and largest dims per kernel)")
    args = p.parse_args(argv)
    records = [json.loads(ln) for ln in Path(args.launches).read_text().splitlines() if ln]
    n_recorded = len(records)
    if not args.all:
        records = one_per_kernel(records)
    t0 = time.time()
    results = compile_all(records, args.jobs, args.arch, args.out)
    for r in results:
        if not r["ok"]:
            print(f"FAIL {r['kernel']} ({r['label']}): {r['error']}")
        elif r.get("note"):
            print(f"note {r['kernel']} ({r['label']}): {r['note']}")
    n_ok = sum(r["ok"] for r in results)
    print(f"sm_{args.arch} compile: {n_ok} ok, {len(results) - n_ok} failed of {len(results)} "
          f"launch configurations (of {n_recorded} recorded ; {len({r['kernel'] for r in results})} kernels); "
          f"{time.time() - t0:.0f} s with {args.jobs} jobs")
    return 0 if n_ok == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
