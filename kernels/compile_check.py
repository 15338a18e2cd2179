"""Compile every ZeroS kernel for an NVIDIA target on a machine without a GPU.

The Triton interpreter runs kernels as numpy code and skips the compiler, so type errors of the
compiled path (loop-carried dtypes, control flow, dot shapes) and register/shared-memory use
are invisible to the CPU tests. Triton bundles ptxas, so the full pipeline (TTIR -> PTX -> cubin)
runs here; this prints registers, spill bytes and shared memory per kernel. It must run with
TRITON_INTERPRET unset (the kernels must be JIT functions, not interpreted ones):
  TRITON_INTERPRET=0 python -m kernels.compile_check --dtypes bf16 --dims 64 --arch 90
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from . import chunk_bwd, chunk_fwd, encoder, step
from .common import INTERPRET, block_v, num_warps


def kernel_specs(dt: str, D: int, H: int = 16, BT: int = 64):
    """(kernel, pointer dtypes, int args, float args, constexprs, num_warps) as the wrappers
    launch them, for input dtype `dt` ('bf16', 'fp16' or 'fp32') and head dim D."""
    P, F = "*" + dt, "*fp32"
    c = dict(H=H, D=D, BT=BT, BV=block_v(D), PREC="ieee" if dt == "fp32" else "tf32")
    cg = dict(c, HAS_G0=True)
    rows = dict(s=F, a=F, g=F, g0=F, Zr=F, Pr=F)
    light, heavy = num_warps(D, False), num_warps(D, True)
    return [
        (chunk_fwd._fwd_states_kernel, dict(k=P, v=P, s=F, F_out=F, G_out=F, H_out=F, scal_out=F),
         {"T", "NT"}, set(), c, light),
        (chunk_fwd._fwd_out_kernel, dict(q=P, k=P, v=P, s=F, a=F, g=F, g0=F, F_in=F, G_in=F,
                                         H_in=F, scal_in=F, o=P, Z_out=F, P_out=F),
         {"T", "NT"}, set(), cg, heavy),
        (chunk_bwd._bwd_dq_kernel, dict(q=P, k=P, v=P, do=P, F_in=F, G_in=F, H_in=F, scal_in=F,
                                        dq=F, Dsum=F, **rows), {"T", "NT"}, set(), cg, heavy),
        (chunk_bwd._bwd_suffix_kernel, dict(q=P, do=P, a=F, g=F, g0=F, Zr=F, Pr=F, Du=F, dF_out=F,
                                            dG_out=F, dH_out=F, dE_out=F),
         {"T", "NT"}, set(), cg, light),
        (chunk_bwd._bwd_dkv_kernel, dict(q=P, k=P, v=P, do=P, Du=F, dF_in=F, dG_in=F, dH_in=F,
                                         dE_in=F, dk=F, dv=F, ds=F, **rows),
         {"T", "NT"}, set(), cg, heavy),
        (encoder._outer_sum_kernel, dict(X=P, Y=P, w=F, out=F), {"T", "NT"}, set(), c, light),
        (encoder._rows_apply_kernel, dict(X=P, S=F, cf=F, Y=P, out=F, dots=F),
         {"T", "stride_r", "stride_c"}, set(), dict(c, HAS_Y=True), light),
        (step._step_kernel, dict(q=P, k=P, v=P, s=P, g1=P, gh=P, g0=P, shift=F, m=F, E=F, P=F,
                                 F=F, G=F, Hs=F, o=P, m_out=F, E_out=F, P_out=F, F_out=F, G_out=F,
                                 H_out=F), set(), {"n"}, dict(D=D, BV=block_v(D), HAS_G0=True), 4),
    ]


def compile_one(fn, ptrs, ints, floats, consts, warps, arch):
    sig = {n: "constexpr" if n in consts else ptrs.get(n) or ("i32" if n in ints else "fp32")
           for n in fn.arg_names}
    unknown = [n for n in fn.arg_names if n not in consts and n not in ptrs and n not in ints
               and n not in floats]
    if unknown:
        raise KeyError(f"{fn.__name__}: no type given for {unknown}")
    k = triton.compile(ASTSource(fn, sig, constexprs=consts), target=GPUTarget("cuda", arch, 32),
                       options=dict(num_warps=warps))
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(k.asm["ptx"])
    try:
        r = subprocess.run([ptxas, f"-arch=sm_{arch}a" if arch >= 90 else f"-arch=sm_{arch}",
                            "-v", f.name, "-o", os.devnull], capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    regs = re.findall(r"Used (\d+) registers", r.stderr)
    spill = re.findall(r"(\d+) bytes spill stores", r.stderr)
    return dict(kernel=fn.__name__, warps=warps, regs=int(regs[-1]) if regs else -1,
                spill_bytes=int(spill[-1]) if spill else -1, shared=k.metadata.shared)


def main(argv=None):
    p = argparse.ArgumentParser(description="compile the ZeroS kernels without a GPU")
    p.add_argument("--dtypes", default="bf16")
    p.add_argument("--dims", default="64")
    p.add_argument("--arch", type=int, default=90)
    args = p.parse_args(argv)
    if INTERPRET:
        raise SystemExit("unset TRITON_INTERPRET: the interpreter replaces the compiler")
    reports = []
    for dt in args.dtypes.split(","):
        for D in (int(x) for x in args.dims.split(",")):
            for spec in kernel_specs(dt, D):
                rep = dict(compile_one(*spec, args.arch), dtype=dt, D=D)
                print(rep, flush=True)
                reports.append(rep)
    return reports


if __name__ == "__main__":
    main()
    sys.exit(0)
