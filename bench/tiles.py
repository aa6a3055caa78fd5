"""Tile programs (``examples/tile_*.py`` and the tile attention entry) against the NumPy a user
would write for the same job, with issue 18's targets: the llvm backend (a program per core)
and the numpy backend (the tile interpreter), each a ratio to a baseline timed in the same run.

The tiles' cold path (trace, passes, host compile of a fresh tile matmul) is timed too.
"""

from __future__ import annotations

import time

import numpy as np

from .targets import Setup, Target, Workload, _rng, _runner, example
from .timing import environment


def _speed(at_least: float) -> float:
    """A target of "at least ``at_least`` x the baseline's speed" as a time ratio."""
    return 1.0 / at_least


# the CPU's tile sizes for a big matmul (each program's panels fit the caches; the example's
# 64x64x32 default suits a GPU's registers): choosing them is the user's (autotuning: issue 20)
CPU_MATMUL_TILES = (128, 128, 64)


def tile_matmul(m: int, n: int, k: int, tiles=(64, 64, 32)) -> Setup:
    rng = _rng()
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    c = np.zeros((m, n), np.float32)
    program = example("tile_matmul").make_matmul(bm=tiles[0], bn=tiles[1], bk=tiles[2])
    return Setup(_runner(program, [c], [a, b]), {"numpy": lambda: a @ b}, a.astype(np.float64) @ b,
                 1e-5 * np.sqrt(k))


def tile_softmax(rows: int, cols: int) -> Setup:
    module = example("tile_softmax")
    x = (_rng().standard_normal((rows, cols)) * 4).astype(np.float32)
    dst = np.zeros_like(x)

    def numpy_version():
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    return Setup(_runner(module.tile_softmax, [dst], [x]), {"numpy": numpy_version}, module.reference(x), 1e-5)


def tile_layer_norm(rows: int, cols: int) -> Setup:
    module = example("tile_norms")
    rng = _rng()
    x = (rng.standard_normal((rows, cols)) + 3.0).astype(np.float32)
    w, b = rng.uniform(0.5, 1.5, cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
    y = np.zeros_like(x)
    eps = np.float32(module.EPS)

    def numpy_version():
        mean = x.mean(axis=1, keepdims=True)
        return (x - mean) / np.sqrt(x.var(axis=1, keepdims=True) + eps) * w + b

    return Setup(_runner(module.tile_layer_norm, [y], [x, w, b, module.EPS]), {"numpy": numpy_version},
                 module.layer_norm_reference(x.astype(np.float64), w, b), 1e-4)


def tile_argmax(rows: int, cols: int) -> Setup:
    module = example("tile_argmax")
    x = _rng().standard_normal((rows, cols), dtype=np.float32)
    out = np.zeros(rows, np.int64)
    return Setup(_runner(module.tile_argmax, [out], [x]), {"numpy": lambda: np.argmax(x, axis=1)},
                 np.argmax(x, axis=1).astype(np.float64), 0.0)


def tile_cumsum(rows: int, cols: int) -> Setup:
    module = example("tile_cumsum")
    x = _rng().standard_normal((rows, cols), dtype=np.float32)
    dst = np.zeros_like(x)
    return Setup(_runner(module.tile_cumsum, [dst], [x]), {"numpy": lambda: np.cumsum(x, axis=1)},
                 np.cumsum(x.astype(np.float64), axis=1), 1e-5 * np.sqrt(cols))


def tile_attention(shape) -> Setup:
    from accy.library import ScaledDotProduct, scaled_dot_product_tile
    from accy.library.attention import reference

    from .attention import numpy_reference, torch_sdpa
    from .targets import _attention_inputs

    entry = scaled_dot_product_tile(ScaledDotProduct(*shape))
    inputs = _attention_inputs(shape)
    b, q, _, _, v = shape
    dst = np.zeros((b, q, v), np.float32)
    baselines = {"numpy": lambda: numpy_reference(*inputs)}
    torch_run, _ = torch_sdpa()
    if torch_run is not None:
        baselines["torch-sdpa"] = lambda: torch_run(*inputs)
    return Setup(_runner(entry, [dst], inputs), baselines, reference(*inputs), 1e-5)


_NUMPY_5X = Target("numpy", 5.0, backend="interpreter")
WORKLOADS = (
    Workload("tile matmul", "1024^3, 64x64x32 tiles", lambda: tile_matmul(1024, 1024, 1024),
             (Target("numpy", _speed(0.8)),), backends=("llvm",)),
    Workload("tile matmul", "1024^3", lambda: tile_matmul(1024, 1024, 1024, CPU_MATMUL_TILES),
             (Target("numpy", _speed(0.8)),), backends=("llvm",)),
    Workload("tile matmul", "2048^3", lambda: tile_matmul(2048, 2048, 2048, CPU_MATMUL_TILES),
             (Target("numpy", _speed(0.8)),), backends=("llvm",)),
    Workload("tile matmul", "256^3", lambda: tile_matmul(256, 256, 256), (_NUMPY_5X,)),
    Workload("tile attention", "(8,256,256,64,64)", lambda: tile_attention((8, 256, 256, 64, 64)),
             (Target("torch-sdpa", 1.0), Target("numpy", 0.5), _NUMPY_5X), backends=("llvm", "interpreter")),
    Workload("tile attention", "(16,512,512,64,64)", lambda: tile_attention((16, 512, 512, 64, 64)),
             (Target("torch-sdpa", 1.0), Target("numpy", 0.5)), backends=("llvm",)),
    Workload("tile softmax", "1823x781", lambda: tile_softmax(1823, 781), (Target("numpy", 0.7), _NUMPY_5X)),
    Workload("tile layer norm", "1151x8192", lambda: tile_layer_norm(1151, 8192),
             (Target("numpy", 0.3), _NUMPY_5X)),
    Workload("tile argmax", "(4096,1000)", lambda: tile_argmax(4096, 1000), (Target("numpy", 1.0), _NUMPY_5X)),
    Workload("tile cumsum", "(4096,1000)", lambda: tile_cumsum(4096, 1000), (Target("numpy", 1.0), _NUMPY_5X)),
)
QUICK = {("tile matmul", "2048^3"), ("tile attention", "(16,512,512,64,64)")}
COLD_TARGET_SECONDS = 0.3


def cold_compile() -> dict:
    """Seconds from a fresh tile matmul program to its first llvm run (trace, passes, lowering,
    host JIT), with the compile and trace caches off (``ACCY_CACHE=0``, ``ACCY_TRACE_CACHE=0``):
    the issue's target is under 0.3 s."""
    make = example("tile_matmul").make_matmul
    a, b = np.ones((64, 64), np.float32), np.ones((64, 64), np.float32)
    c = np.zeros((64, 64), np.float32)
    with environment(ACCY_CACHE="0", ACCY_TRACE_CACHE="0"):
        program = make(bm=32, bn=32, bk=16)
        start = time.perf_counter()
        program.graph
        traced = time.perf_counter()
        program.run([c, a, b], backend="llvm")
        done = time.perf_counter()
    return {"trace+passes": traced - start, "trace+compile+first run": done - start, "target": COLD_TARGET_SECONDS}
