"""Plain C kernels (csrc/*.c: the short-sequence ZeroS op, quadratic.c; fused RoPE + unit norm,
rope.c; the encoder pass's gradient fold, encoder.c), compiled on first use with the system C
compiler (cc/gcc, ~1 s) and called through ctypes (no torch headers, no build step at install).

Optional by design: where no compiler is found, the build fails, or ZEROS_NATIVE=0 is set,
`kernels()` returns None and quadratic.py runs its torch path (same maths, tested equal).
The shared object is cached under $ZEROS_NATIVE_CACHE (default ~/.cache/zeros_native), keyed
by a hash of the source and the compiler, so each machine compiles once. Heads are split over
torch's intra-op thread count with Python threads (ctypes releases the GIL during the call).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

SRCS = sorted((Path(__file__).with_name("csrc")).glob("*.c"))
_LIB: list = []  # [lib or None] once tried
_TYPES = {torch.float32: "f32", torch.float64: "f64"}


def _compiler():
    return next((c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)),
                None)


def _build() -> ctypes.CDLL | None:
    if os.environ.get("ZEROS_NATIVE", "1") == "0":
        return None
    cc = _compiler()
    if cc is None or not SRCS:
        return None
    flags = ["-O3", "-shared", "-fPIC", "-std=c99"]
    key = hashlib.sha256(b"".join(p.read_bytes() for p in SRCS)
                         + " ".join([cc, *flags]).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("ZEROS_NATIVE_CACHE", Path.home() / ".cache" / "zeros_native"))
    so = cache / f"zeros_{key}.so"
    try:
        if not so.exists():
            cache.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(suffix=".so", dir=cache)
            os.close(fd)
            subprocess.run([cc, *flags, *map(str, SRCS), "-o", tmp, "-lm"], check=True,
                           capture_output=True, timeout=120)
            os.replace(tmp, so)  # atomic: concurrent first uses do not see a half-written file
        return ctypes.CDLL(str(so))
    except (OSError, subprocess.SubprocessError) as err:
        warnings.warn(f"zeros native kernels unavailable ({type(err).__name__}); using the torch "
                      "path (set ZEROS_NATIVE=0 to silence)")
        return None


def kernels() -> ctypes.CDLL | None:
    if not _LIB:
        _LIB.append(_build())
    return _LIB[0]


def _ptr(x):
    return ctypes.c_void_p(0 if x is None else x.data_ptr())


def _split(N):
    """Head ranges, one per torch thread (at least 64 heads each: a thread costs ~10 us)."""
    n = max(1, min(torch.get_num_threads(), N // 64))
    step = -(-N // n)
    return [(i, min(N, i + step)) for i in range(0, N, step)]


def _run(fn, tensors, N, T, d):
    """fn over head ranges: every tensor [N, T, ...] is offset to the range's first head."""
    def call(lo, hi):
        args = [None if x is None else x[lo:hi] for x in tensors]
        fn(*[_ptr(x) for x in args], ctypes.c_long(hi - lo), ctypes.c_long(T), ctypes.c_long(d))
    parts = _split(N)
    if len(parts) == 1:
        return call(*parts[0])
    with ThreadPoolExecutor(len(parts)) as pool:
        list(pool.map(lambda r: call(*r), parts))


def _contiguous(*xs):
    """The kernels index raw memory: every array row-major (a no-op for the callers' tensors)."""
    return [None if x is None else x.contiguous() for x in xs]


def supported(q) -> bool:
    return q.device.type == "cpu" and q.dtype in _TYPES and kernels() is not None


def quad_forward(q, k, v, s, a, g, g0):
    """o [N, T, d] from contiguous q, k, v [N, T, d] and s, a, g, g0 [N, T] (g0 may be None)."""
    q, k, v, s, a, g, g0 = _contiguous(q, k, v, s, a, g, g0)
    N, T, d = q.shape
    o = q.new_empty(q.shape)
    fn = getattr(kernels(), f"zeros_quad_fwd_{_TYPES[q.dtype]}")
    _run(fn, [q, k, v, s, a, g, g0, o], N, T, d)
    return o


def quad_backward(q, k, v, s, a, g, g0, do):
    """(dq, dk, dv, ds, da, dg, dg0) of quad_forward for the output gradient do [N, T, d]."""
    q, k, v, s, a, g, g0, do = _contiguous(q, k, v, s, a, g, g0, do)
    N, T, d = q.shape
    dq, dk, dv, ds, da, dg = (x.new_empty(x.shape) for x in (q, k, v, s, a, g))
    dg0 = None if g0 is None else g0.new_empty(g0.shape)
    fn = getattr(kernels(), f"zeros_quad_bwd_{_TYPES[q.dtype]}")
    _run(fn, [q, k, v, s, a, g, g0, do, dq, dk, dv, ds, da, dg, dg0], N, T, d)
    return dq, dk, dv, ds, da, dg, dg0


def _strides(x):
    return (ctypes.c_long * 4)(*x.stride()[:4])


def rope_supported(x) -> bool:
    """x [B, T, n, H, d] in fp32/fp64 with unit stride over d (the layers' stacked q, k)."""
    return (x.device.type == "cpu" and x.dtype in _TYPES and x.dim() == 5 and x.stride(-1) == 1
            and x.shape[-1] <= 4096 and kernels() is not None)


def _rows(fn, B):
    """fn(lo, hi) over batch ranges, one per torch thread (at least 8 rows of B each)."""
    n = max(1, min(torch.get_num_threads(), B // 8))
    step = -(-B // n)
    parts = [(i, min(B, i + step)) for i in range(0, B, step)]
    if len(parts) == 1:
        return fn(*parts[0])
    with ThreadPoolExecutor(len(parts)) as pool:
        list(pool.map(lambda r: fn(*r), parts))


def rope_forward(x, cos, sin, y, normalize, eps):
    """y (preallocated, x's shape, any layout with unit stride over d) = R x / ‖R x‖; returns
    (inv, keep) [B, T, n, H] (None without normalize). cos, sin [T, G, m] in x's dtype."""
    B, T, n, H, d = x.shape
    G, m = cos.shape[1:]
    cos, sin = cos.contiguous(), sin.contiguous()
    inv = x.new_empty(B, T, n, H) if normalize else None
    keep = x.new_empty(B, T, n, H) if normalize else None
    fn = getattr(kernels(), f"zeros_rope_fwd_{_TYPES[x.dtype]}")
    xs, ys, es = _strides(x), _strides(y), x.element_size()

    def call(lo, hi):
        fn(ctypes.c_void_p(x.data_ptr() + lo * x.stride(0) * es), xs, _ptr(cos), _ptr(sin),
           ctypes.c_void_p(y.data_ptr() + lo * y.stride(0) * es), ys,
           _ptr(None if inv is None else inv[lo:hi]), _ptr(None if keep is None else keep[lo:hi]),
           ctypes.c_long(hi - lo), ctypes.c_long(T), ctypes.c_long(n), ctypes.c_long(H),
           ctypes.c_long(G), ctypes.c_long(m), ctypes.c_int(int(normalize)), ctypes.c_double(eps))
    _rows(call, B)
    return inv, keep


def rope_backward(g, y, cos, sin, inv, keep, normalize):
    """dx [B, T, n, H, d] (row-major) of rope_forward for the output gradient g."""
    if g.stride(-1) != 1:
        g = g.contiguous()
    B, T, n, H, d = g.shape
    G, m = cos.shape[1:]
    dx = g.new_empty(g.shape)
    fn = getattr(kernels(), f"zeros_rope_bwd_{_TYPES[g.dtype]}")
    gs, ys, es = _strides(g), _strides(y), g.element_size()

    def call(lo, hi):
        fn(ctypes.c_void_p(g.data_ptr() + lo * g.stride(0) * es), gs,
           ctypes.c_void_p(y.data_ptr() + lo * y.stride(0) * es), ys, _ptr(cos), _ptr(sin),
           _ptr(None if inv is None else inv[lo:hi]), _ptr(None if keep is None else keep[lo:hi]),
           _ptr(dx[lo:hi]), ctypes.c_long(hi - lo), ctypes.c_long(T), ctypes.c_long(n),
           ctypes.c_long(H), ctypes.c_long(G), ctypes.c_long(m), ctypes.c_int(int(normalize)))
    _rows(call, B)
    return dx


def fold_supported(g3, x) -> bool:
    """g3 [B, H, N, 3d], x [B, H, N, d] (unit stride over d) on CPU in fp32/fp64."""
    return (g3.device.type == "cpu" and g3.dtype in _TYPES and x.dtype == g3.dtype
            and x.dim() == 4 and x.stride(-1) == 1 and kernels() is not None)


def fold3(g3, w, x):
    """(Σ_j w_j g3_j [B, H, N, d], g3_j · x [B, H, N, 3]) in one pass (encoder.py `_fold`)."""
    g3, w = g3.contiguous(), w.contiguous()
    B, H, N, d = x.shape
    dx, dw = x.new_empty(B, H, N, d), x.new_empty(B, H, N, 3)
    fn = getattr(kernels(), f"zeros_fold3_{_TYPES[x.dtype]}")
    xs, es = (ctypes.c_long * 3)(*x.stride()[:3]), x.element_size()

    def call(lo, hi):
        fn(_ptr(g3[lo:hi]), _ptr(w[lo:hi]), ctypes.c_void_p(x.data_ptr() + lo * x.stride(0) * es),
           xs, _ptr(dx[lo:hi]), _ptr(dw[lo:hi]), ctypes.c_long(hi - lo), ctypes.c_long(H),
           ctypes.c_long(N), ctypes.c_long(d))
    _rows(call, B)
    return dx, dw
