"""Tile kernels written as Triton users write them, against the NumPy a user would write.

The ``tiles`` section times the project's examples, written with ``load_tile``; these are
the same jobs in the form a Triton user brings: a program per row (or per box), a
power-of-two block, index tiles from ``t.arange`` and a mask, ``p.x.load((row, cols),
mask=cols < C)``.  Issue 31's targets hold them to the speed of NumPy on one thread
(``llvm-1t``: ``threads=1``, the least of the repeats), with the two-thread wall time
(``llvm``) and the numpy backend beside it.
"""

from __future__ import annotations

import math
import time

import numpy as np

from accy import axis, bf16, cdiv, f32, i64, kernel, scalar, tensor

from .targets import Setup, Target, Workload, _rng, _runner

def _np_dtype(name: str):
    import ml_dtypes

    return np.float32 if name == "f32" else ml_dtypes.bfloat16


def block_for(n: int) -> int:
    """Triton's ``next_power_of_2``."""
    return 1 << max(0, (n - 1).bit_length())


# -- the kernels, as a Triton user writes them ------------------------------------------------


def make_softmax(block: int, dtype=f32):
    @kernel(dst=tensor(dtype, 2), x=tensor(dtype, 2))
    def softmax(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=axis("row", R), warps=4)
        def program(t, pid):
            row = pid["row"]
            cols = t.arange(block)
            mask = cols < C
            x = p.x.load((row, cols), mask=mask, other=float("-inf")).cast(f32)
            e = t.exp(x - t.max(x, axis=0))
            p.dst.store((row, cols), (e / t.sum(e, axis=0)).cast(dtype), mask=mask)

    return softmax


def make_layer_norm(block: int, dtype=f32):
    """Triton's layer-norm tutorial: a program per row, the row in ``block``-wide pieces."""

    @kernel(y=tensor(dtype, 2), x=tensor(dtype, 2), w=tensor(dtype, 1), b=tensor(dtype, 1), eps=scalar(f32))
    def layer_norm(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=axis("row", R), warps=8)
        def program(t, pid):
            row = pid["row"]

            def add(t, c0, acc):
                cols = c0 + t.arange(block)
                return acc + p.x.load((row, cols), mask=cols < C, other=0.0).cast(f32)

            mean = t.sum(t.fold_range(0, C, block, t.zeros((block,), f32), add), axis=0) / C  # f32 / index: f32

            def add_squares(t, c0, acc):
                cols = c0 + t.arange(block)
                mask = cols < C
                d = t.where(mask, p.x.load((row, cols), mask=mask, other=0.0).cast(f32) - mean, 0.0)
                return acc + d * d

            var = t.sum(t.fold_range(0, C, block, t.zeros((block,), f32), add_squares), axis=0) / C
            rstd = 1.0 / t.sqrt(var + p.eps)

            def write(t, c0):
                cols = c0 + t.arange(block)
                mask = cols < C
                x = p.x.load((row, cols), mask=mask, other=0.0).cast(f32)
                w = p.w.load(cols, mask=mask).cast(f32)
                b = p.b.load(cols, mask=mask).cast(f32)
                p.y.store((row, cols), ((x - mean) * rstd * w + b).cast(dtype), mask=mask)

            t.for_range(0, C, block, write)

    return layer_norm


def make_rms_norm(block: int, dtype=f32):
    """One block holds the whole row."""

    @kernel(y=tensor(dtype, 2), x=tensor(dtype, 2), w=tensor(dtype, 1), eps=scalar(f32))
    def rms_norm(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=axis("row", R), warps=8)
        def program(t, pid):
            row = pid["row"]
            cols = t.arange(block)
            mask = cols < C
            x = p.x.load((row, cols), mask=mask, other=0.0).cast(f32)
            rstd = t.rsqrt(t.sum(x * x, axis=0) / t.cast(C, f32) + p.eps)
            w = p.w.load(cols, mask=mask).cast(f32)
            p.y.store((row, cols), (x * rstd * w).cast(dtype), mask=mask)

    return rms_norm


def make_argmax(block: int, dtype=f32):
    @kernel(out=tensor(i64, 1), x=tensor(dtype, 2))
    def argmax(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=axis("row", R), warps=4)
        def program(t, pid):
            row = pid["row"]
            cols = t.arange(block)
            x = p.x.load((row, cols), mask=cols < C, other=float("-inf"))
            p.out.store(row, t.argmax(x, axis=0).cast(i64))

    return argmax


def make_cumsum(block: int, dtype=f32):
    @kernel(dst=tensor(dtype, 2), x=tensor(dtype, 2))
    def cumsum(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=axis("row", R), warps=4)
        def program(t, pid):
            row = pid["row"]
            cols = t.arange(block)
            mask = cols < C
            x = p.x.load((row, cols), mask=mask, other=0.0).cast(f32)
            p.dst.store((row, cols), t.cumsum(x, axis=0).cast(dtype), mask=mask)

    return cumsum


def make_column_sum(box_rows: int = 64, box_cols: int = 128, dtype=f32):
    """A program per ``box_cols`` columns, walking down them in masked boxes."""

    @kernel(out=tensor(f32, 1), x=tensor(dtype, 2))
    def column_sum(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=axis("c", cdiv(C, box_cols)), warps=4)
        def program(t, pid):
            cols = pid["c"] * box_cols + t.arange(box_cols)

            def step(t, r0, acc):
                rows = r0 + t.arange(box_rows)
                mask = (rows[:, None] < R) & (cols[None, :] < C)
                x = p.x.load((rows[:, None], cols[None, :]), mask=mask, other=0.0).cast(f32)
                return acc + t.sum(x, axis=0)

            total = t.fold_range(0, R, box_rows, t.zeros((box_cols,), f32), step)
            p.out.store(cols, total, mask=cols < C)

    return column_sum


GELU_C = math.sqrt(2.0 / math.pi)


def make_gelu(box: int = 64, gather: bool = True, dtype=f32):
    """GELU (tanh form) over a 2-D tensor in ``box`` x ``box`` programs: ``gather`` reads and
    writes through index tiles and a mask, else ``load_tile``/``store_tile`` (the same box)."""

    @kernel(dst=tensor(dtype, 2), x=tensor(dtype, 2))
    def gelu(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=(axis("r", cdiv(R, box)), axis("c", cdiv(C, box))), warps=4)
        def program(t, pid):
            r0, c0 = pid["r"] * box, pid["c"] * box
            if gather:
                rows, cols = r0 + t.arange(box), c0 + t.arange(box)
                mask = (rows[:, None] < R) & (cols[None, :] < C)
                x = p.x.load((rows[:, None], cols[None, :]), mask=mask, other=0.0).cast(f32)
            else:
                x = p.x.load_tile((r0, c0), (box, box)).cast(f32)
            y = 0.5 * x * (1.0 + t.tanh(GELU_C * (x + 0.044715 * x * x * x)))
            if gather:
                p.dst.store((rows[:, None], cols[None, :]), y.cast(dtype), mask=mask)
            else:
                p.dst.store_tile((r0, c0), y.cast(dtype))

    return gelu


def make_max_pool(strided: bool = True, rows: int = 16, cols: int = 64):
    """A 2x2 max-pool with stride 2 as four strided boxes (``steps=(2, 2)``); ``strided=False``:
    the same four loads as unit-stride boxes of the same size, the bar the strided ones are held to."""

    @kernel(dst=tensor(f32, 2), x=tensor(f32, 2))
    def max_pool(k, p):
        H, W = p.dst.shape

        @k.for_each_tile(grid=(axis("r", cdiv(H, rows)), axis("c", cdiv(W, cols))), warps=4)
        def program(t, pid):
            r0, c0 = pid["r"] * rows, pid["c"] * cols
            best = t.full((rows, cols), float("-inf"))
            for dy in range(2):
                for dx in range(2):
                    if strided:
                        v = p.x.load_tile((2 * r0 + dy, 2 * c0 + dx), (rows, cols), other=float("-inf"), steps=(2, 2))
                    else:
                        v = p.x.load_tile((r0 + dy * H, c0 + dx * W), (rows, cols), other=float("-inf"))
                    best = t.maximum(best, v)
            p.dst.store_tile((r0, c0), best)

    return max_pool


def make_matmul(bm: int = 64, bn: int = 64, bk: int = 32):
    """Triton's matmul tutorial without its grouping: masked loads through index tiles."""

    @kernel(c=tensor(f32, 2), a=tensor(f32, 2), b=tensor(f32, 2))
    def matmul(k, p):
        M, K = p.a.shape
        N = p.b.shape[1]

        @k.for_each_tile(grid=(axis("m", cdiv(M, bm)), axis("n", cdiv(N, bn))), warps=4)
        def program(t, pid):
            rm = pid["m"] * bm + t.arange(bm)
            rn = pid["n"] * bn + t.arange(bn)

            def step(t, k0, acc):
                rk = k0 + t.arange(bk)
                a = p.a.load((rm[:, None], rk[None, :]), mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
                b = p.b.load((rk[:, None], rn[None, :]), mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
                return t.dot(a, b, acc)

            acc = t.fold_range(0, K, bk, t.zeros((bm, bn), f32), step)
            p.c.store((rm[:, None], rn[None, :]), acc, mask=(rm[:, None] < M) & (rn[None, :] < N))

    return matmul


# -- the workloads ----------------------------------------------------------------------------


def _inputs(shape, name: str, scale: float = 1.0, shift: float = 0.0):
    x = (_rng().standard_normal(shape) * scale + shift).astype(np.float32)
    return x.astype(_np_dtype(name))


def _rtol(name: str, f32_rtol: float) -> float:
    return f32_rtol if name == "f32" else 1e-2  # bf16 rounds each output to 8 bits


def softmax(rows: int, cols: int, name: str = "f32", block: int | None = None) -> Setup:
    x = _inputs((rows, cols), name, 4.0)
    dst = np.zeros_like(x)
    dtype = np.dtype(x.dtype)

    def numpy_version():
        x32 = x.astype(np.float32, copy=False)
        e = np.exp(x32 - x32.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)).astype(dtype, copy=False)

    program = make_softmax(block or block_for(cols), f32 if name == "f32" else bf16)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    return Setup(_runner(program, [dst], [x]), {"numpy": numpy_version}, e / e.sum(axis=1, keepdims=True),
                 _rtol(name, 1e-5))


def oversized_softmax(rows: int, cols: int, block: int) -> Setup:
    """The row in a ``block`` far wider than it, against the fitted block on one thread."""
    fitted = softmax(rows, cols)
    wide = softmax(rows, cols, block=block)
    return Setup(wide.run, {"fitted block": lambda: fitted.run("llvm", threads=1)}, wide.expected, wide.rtol)


def layer_norm(rows: int, cols: int, name: str = "f32", block: int = 1024) -> Setup:
    x = _inputs((rows, cols), name, 1.0, 3.0)
    rng = _rng()
    w = rng.uniform(0.5, 1.5, cols).astype(x.dtype)
    b = rng.standard_normal(cols).astype(x.dtype)
    y = np.zeros_like(x)
    eps = np.float32(1e-5)

    def numpy_version():
        x32 = x.astype(np.float32, copy=False)
        mean = x32.mean(axis=1, keepdims=True)
        out = (x32 - mean) / np.sqrt(x32.var(axis=1, keepdims=True) + eps) * w.astype(np.float32) + b.astype(np.float32)
        return out.astype(x.dtype, copy=False)

    x64 = x.astype(np.float64)
    expected = ((x64 - x64.mean(axis=1, keepdims=True)) / np.sqrt(x64.var(axis=1, keepdims=True) + 1e-5)
                * w.astype(np.float64) + b.astype(np.float64))
    program = make_layer_norm(min(block, block_for(cols)), f32 if name == "f32" else bf16)
    return Setup(_runner(program, [y], [x, w, b, 1e-5]), {"numpy": numpy_version}, expected, _rtol(name, 1e-4))


def rms_norm(rows: int, cols: int, name: str = "f32") -> Setup:
    x = _inputs((rows, cols), name)
    w = _rng().uniform(0.5, 1.5, cols).astype(x.dtype)
    y = np.zeros_like(x)
    eps = np.float32(1e-5)

    def numpy_version():
        x32 = x.astype(np.float32, copy=False)
        out = x32 / np.sqrt((x32 * x32).mean(axis=1, keepdims=True) + eps) * w.astype(np.float32)
        return out.astype(x.dtype, copy=False)

    x64 = x.astype(np.float64)
    expected = x64 / np.sqrt((x64 * x64).mean(axis=1, keepdims=True) + 1e-5) * w.astype(np.float64)
    program = make_rms_norm(block_for(cols), f32 if name == "f32" else bf16)
    return Setup(_runner(program, [y], [x, w, 1e-5]), {"numpy": numpy_version}, expected, _rtol(name, 1e-5))


def argmax(rows: int, cols: int, name: str = "f32") -> Setup:
    x = _inputs((rows, cols), name)
    out = np.zeros(rows, np.int64)
    program = make_argmax(block_for(cols), f32 if name == "f32" else bf16)
    expected = np.argmax(x.astype(np.float32), axis=1)
    return Setup(_runner(program, [out], [x]), {"numpy": lambda: np.argmax(x, axis=1)},
                 expected.astype(np.float64), 0.0)


def cumsum(rows: int, cols: int, name: str = "f32") -> Setup:
    x = _inputs((rows, cols), name)
    dst = np.zeros_like(x)
    program = make_cumsum(block_for(cols), f32 if name == "f32" else bf16)
    numpy_version = (lambda: np.cumsum(x, axis=1)) if name == "f32" else \
        (lambda: np.cumsum(x.astype(np.float32), axis=1).astype(x.dtype))
    return Setup(_runner(program, [dst], [x]), {"numpy": numpy_version},
                 np.cumsum(x.astype(np.float64), axis=1), _rtol(name, 1e-5 * math.sqrt(cols)))


def column_sum(rows: int, cols: int) -> Setup:
    x = _inputs((rows, cols), "f32")
    out = np.zeros(cols, np.float32)
    return Setup(_runner(make_column_sum(), [out], [x]), {"numpy": lambda: x.sum(axis=0)},
                 x.astype(np.float64).sum(axis=0), 1e-5 * math.sqrt(rows))


def _gelu64(x):
    x = x.astype(np.float64)
    return 0.5 * x * (1.0 + np.tanh(GELU_C * (x + 0.044715 * x ** 3)))


def gelu(rows: int, cols: int) -> Setup:
    x = _inputs((rows, cols), "f32")
    dst = np.zeros_like(x)
    c, k = np.float32(GELU_C), np.float32(0.044715)

    def numpy_version():
        return np.float32(0.5) * x * (np.float32(1.0) + np.tanh(c * (x + k * x * x * x)))

    return Setup(_runner(make_gelu(), [dst], [x]), {"numpy": numpy_version}, _gelu64(x), 1e-5)


def gather_box(rows: int, cols: int) -> Setup:
    """GELU through index tiles and a mask against ``load_tile`` of the same box, on one thread."""
    x = _inputs((rows, cols), "f32")
    dst, other = np.zeros_like(x), np.zeros_like(x)
    boxes = _runner(make_gelu(gather=False), [other], [x])
    return Setup(_runner(make_gelu(), [dst], [x]), {"load_tile": lambda: boxes("llvm", threads=1)},
                 _gelu64(x), 1e-5)


def max_pool(h: int, w: int) -> Setup:
    """The strided pool against unit-stride boxes of the same loads (one thread) and NumPy's."""
    x = _inputs((2 * h, 2 * w), "f32")
    dst, other = np.zeros((h, w), np.float32), np.zeros((h, w), np.float32)
    unit = _runner(make_max_pool(strided=False), [other], [x])
    return Setup(_runner(make_max_pool(), [dst], [x]),
                 {"unit-stride boxes": lambda: unit("llvm", threads=1),
                  "numpy": lambda: x.reshape(h, 2, w, 2).max(axis=(1, 3))},
                 x.astype(np.float64).reshape(h, 2, w, 2).max(axis=(1, 3)), 1e-7)


def matmul(m: int, n: int, k: int, triton_style: bool) -> Setup:
    from .tiles import tile_matmul

    if not triton_style:
        return tile_matmul(m, n, k)  # the README's: load_tile, 64x64x32
    rng = _rng()
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    c = np.zeros((m, n), np.float32)
    return Setup(_runner(make_matmul(), [c], [a, b]), {"numpy": lambda: a @ b}, a.astype(np.float64) @ b,
                 1e-5 * np.sqrt(k))


ONE_THREAD = "llvm-1t"  # the llvm backend on one thread: the measure
_ALL = ("llvm-1t", "llvm", "interpreter")
_NUMPY_5X = Target("numpy", 5.0, backend="interpreter")


def _row_ops(name: str) -> tuple[Workload, ...]:
    """The row kernels at issue 31's row widths in ``name`` (f32 or bf16)."""
    shapes = ((8192, 97), (4096, 1000), (1024, 4096), (512, 8192))
    out = []
    for rows, cols in shapes:
        size = f"{rows}x{cols} {name}"
        out += [Workload("softmax", size, lambda r=rows, c=cols: softmax(r, c, name),
                         (Target("numpy", 0.7, ONE_THREAD), _NUMPY_5X), _ALL),
                Workload("layer norm", size, lambda r=rows, c=cols: layer_norm(r, c, name),
                         (Target("numpy", 0.3, ONE_THREAD), _NUMPY_5X), _ALL),
                Workload("rms norm", size, lambda r=rows, c=cols: rms_norm(r, c, name),
                         (Target("numpy", 0.3, ONE_THREAD), _NUMPY_5X), _ALL),
                Workload("argmax", size, lambda r=rows, c=cols: argmax(r, c, name),
                         (Target("numpy", 1.0, ONE_THREAD), _NUMPY_5X), _ALL),
                Workload("cumsum", size, lambda r=rows, c=cols: cumsum(r, c, name),
                         (Target("numpy", 1.0, ONE_THREAD), _NUMPY_5X), _ALL)]
    return tuple(out)


WORKLOADS = (
    Workload("softmax", "1823x781", lambda: softmax(1823, 781), (Target("numpy", 0.7, ONE_THREAD), _NUMPY_5X), _ALL),
    Workload("layer norm", "1151x8192", lambda: layer_norm(1151, 8192),
             (Target("numpy", 0.3, ONE_THREAD), _NUMPY_5X), _ALL),
    Workload("rms norm", "2048x4096", lambda: rms_norm(2048, 4096), (Target("numpy", 0.3, ONE_THREAD), _NUMPY_5X),
             _ALL),
    Workload("argmax", "4096x1000", lambda: argmax(4096, 1000), (Target("numpy", 1.0, ONE_THREAD), _NUMPY_5X), _ALL),
    Workload("cumsum", "4096x1000", lambda: cumsum(4096, 1000), (Target("numpy", 1.0, ONE_THREAD), _NUMPY_5X), _ALL),
    Workload("column sum", "4096x1000, 64x128 boxes", lambda: column_sum(4096, 1000),
             (Target("numpy", 1.0, ONE_THREAD), _NUMPY_5X), _ALL),
    Workload("gelu 2-D", "2000x3000, 64x64 boxes", lambda: gelu(2000, 3000),
             (Target("numpy", 0.5, ONE_THREAD), _NUMPY_5X), _ALL),
    Workload("oversized block", "4096x1000 in 4096", lambda: oversized_softmax(4096, 1000, 4096),
             (Target("fitted block", 1.3, ONE_THREAD),), (ONE_THREAD,)),
    Workload("gather-form box", "2000x3000, 64x64", lambda: gather_box(2000, 3000),
             (Target("load_tile", 1.2, ONE_THREAD),), (ONE_THREAD,)),
    Workload("strided max-pool", "2048^2 to 1024^2, 2x2 stride 2", lambda: max_pool(1024, 1024),
             (Target("unit-stride boxes", 1.5, ONE_THREAD), Target("numpy", 0.5, ONE_THREAD)), (ONE_THREAD, "llvm")),
    Workload("README matmul", "1024^3, 64x64x32", lambda: matmul(1024, 1024, 1024, False),
             (Target("numpy", 1 / 0.8),), ("llvm",)),
    Workload("README matmul", "2048^3, 64x64x32", lambda: matmul(2048, 2048, 2048, False),
             (Target("numpy", 1 / 0.8),), ("llvm",)),
    Workload("triton matmul", "1024^3, 64x64x32", lambda: matmul(1024, 1024, 1024, True),
             (Target("numpy", 1 / 0.8),), ("llvm",)),
    *_row_ops("f32"),
    *_row_ops("bf16"),
)
QUICK = {("README matmul", "2048^3, 64x64x32")} | {(w.kernel, w.size) for w in WORKLOADS if w.size.endswith("bf16")}


COLD_TARGET_SECONDS = 1.0


def cold_compiles() -> dict:
    """Seconds from a fresh program to its first llvm run (trace, passes, lowering, host JIT),
    caches off, for each kernel above, in a process of their own (this one has compiled them):
    issue 31's target is under 1 s for every one."""
    import json
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = "import json; from bench.triton_style import compile_each; print(json.dumps(compile_each()))"
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def compile_each() -> dict:
    """:func:`cold_compiles`' measurement, in this process."""
    from .timing import environment

    rows, cols = 8, 1000
    x, out = np.ones((rows, cols), np.float32), np.zeros((rows, cols), np.float32)
    w, c = np.ones(cols, np.float32), np.zeros(cols, np.float32)
    a = np.ones((100, 100), np.float32)
    cases = {
        "softmax": (lambda: make_softmax(1024), [out, x]),
        "softmax bf16": (lambda: make_softmax(1024, bf16), [out.astype(_np_dtype("bf16")), x.astype(_np_dtype("bf16"))]),
        "layer norm": (lambda: make_layer_norm(1024), [out, x, w, w, 1e-5]),
        "rms norm": (lambda: make_rms_norm(1024), [out, x, w, 1e-5]),
        "argmax": (lambda: make_argmax(1024), [np.zeros(rows, np.int64), x]),
        "cumsum": (lambda: make_cumsum(1024), [out, x]),
        "column sum": (make_column_sum, [c, x]),
        "gelu 2-D": (make_gelu, [out, x]),
        "triton matmul": (make_matmul, [np.zeros_like(a), a, a]),
    }
    seconds = {}
    with environment(ACCY_CACHE="0", ACCY_TRACE_CACHE="0"):
        for name, (make, args) in cases.items():
            start = time.perf_counter()
            make().run(args, backend="llvm")
            seconds[name] = time.perf_counter() - start
    return seconds
