"""The kernels people write, against the best plain NumPy (or PyTorch) a user would write
for the same job, with the targets the project holds the llvm backend to.

Each workload runs an example kernel (``examples/``) or a library entry on the llvm
backend and, where it fits the time budget, on the interpreter (``numpy``); every result
is checked against a float64 reference.  A target reads ``accy's time / the baseline's
time <= at_most``.  Each workload also runs on llvm with ``checks=False``
(``llvm-unchecked``): the bounds checks may cost at most 10%.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import pathlib
from typing import Callable

import attrs
import numpy as np

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
# a row's label -> accy's backend and its run options
BACKENDS = {"llvm": ("llvm", {}), "llvm-1t": ("llvm", {"threads": 1}), "interpreter": ("numpy", {})}
UNCHECKED = "llvm-unchecked"  # the llvm backend with checks=False: what the checks cost
CHECKS_COST = 1.10  # the target: checks cost at most 10%


@attrs.frozen
class Target:
    baseline: str
    at_most: float  # accy's time / the baseline's
    backend: str = "llvm"

    def __str__(self) -> str:
        return f"{self.backend} <= {self.at_most:g}x {self.baseline}"


@attrs.frozen
class Setup:
    """A workload's inputs, made: ``run(backend, **options)`` returns accy's outputs."""

    run: Callable[..., object]
    baselines: dict[str, Callable[[], object]]
    expected: object  # float64 outputs (an array, or a tuple of arrays)
    rtol: float  # of the largest expected magnitude: the error each result must stay within


@attrs.frozen
class Workload:
    kernel: str
    size: str
    setup: Callable[[], Setup]
    targets: tuple[Target, ...] = ()
    backends: tuple[str, ...] = ("llvm", "interpreter")  # the interpreter only where it takes seconds


@functools.cache
def example(name: str):
    """``examples/<name>.py`` as a module."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _runner(program, outputs, inputs):
    """``run(backend, **options)``: the program on ``outputs + inputs``; returns the outputs."""
    def run(backend, **options):
        program.run([*outputs, *inputs], backend=backend, **options)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    return run


def _rng():
    return np.random.default_rng(0)


# -- pointwise and stencil ---------------------------------------------------------------------


def vector_add(n: int) -> Setup:
    x, y = (_rng().standard_normal(n, dtype=np.float32) for _ in range(2))
    dst = np.zeros(n, np.float32)
    return Setup(_runner(example("vector_add").vector_add, [dst], [x, y]), {"numpy": lambda: x + y},
                 x.astype(np.float64) + y, 1e-6)


def _cnd_numpy(d):
    """The normal distribution function as NumPy code has no erf: Abramowitz and Stegun 26.2.17."""
    k = np.float32(1.0) / (np.float32(1.0) + np.float32(0.2316419) * np.abs(d))
    poly = k * (np.float32(0.31938153) + k * (np.float32(-0.356563782) + k * (
        np.float32(1.781477937) + k * (np.float32(-1.821255978) + k * np.float32(1.330274429)))))
    w = np.float32(1.0) - np.float32(1.0 / math.sqrt(2.0 * math.pi)) * np.exp(np.float32(-0.5) * d * d) * poly
    return np.where(d < 0, np.float32(1.0) - w, w)


def black_scholes(n: int) -> Setup:
    module = example("black_scholes")
    spot, strike, years = module.options(n)
    rate, vol = np.float32(module.RATE), np.float32(module.VOLATILITY)
    call, put = np.zeros(n, np.float32), np.zeros(n, np.float32)

    def numpy_version():
        root_t = np.sqrt(years)
        d1 = (np.log(spot / strike) + (rate + np.float32(0.5) * vol * vol) * years) / (vol * root_t)
        d2 = d1 - vol * root_t
        discounted = strike * np.exp(-rate * years)
        return (spot * _cnd_numpy(d1) - discounted * _cnd_numpy(d2),
                discounted * _cnd_numpy(-d2) - spot * _cnd_numpy(-d1))

    run = _runner(module.black_scholes, [call, put], [spot, strike, years, module.RATE, module.VOLATILITY])
    return Setup(run, {"numpy": numpy_version}, module.reference(spot, strike, years), 2e-5)


def jacobi(n: int) -> Setup:
    module = example("jacobi")
    src = _rng().standard_normal((n, n), dtype=np.float32)
    dst, out = np.zeros_like(src), src.copy()  # NumPy's boundary is copied once, outside the timing

    def slicing():
        out[1:-1, 1:-1] = np.float32(0.25) * (src[1:-1, :-2] + src[1:-1, 2:] + src[:-2, 1:-1] + src[2:, 1:-1])
        return out

    return Setup(_runner(module.jacobi, [dst], [src, n]), {"numpy": slicing}, module.reference(src), 1e-6)


# -- rows: a block per row ---------------------------------------------------------------------


def softmax(rows: int, cols: int) -> Setup:
    module = example("softmax")
    x = (_rng().standard_normal((rows, cols)) * 4).astype(np.float32)
    dst = np.zeros_like(x)

    def numpy_version():
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    return Setup(_runner(module.softmax, [dst], [x, cols]), {"numpy": numpy_version}, module.reference(x), 1e-5)


def layer_norm(rows: int, cols: int) -> Setup:
    module = example("layer_norm")
    rng = _rng()
    x = (rng.standard_normal((rows, cols)) + 3.0).astype(np.float32)
    weight, bias = rng.uniform(0.5, 1.5, cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
    dst = np.zeros_like(x)

    def numpy_version():
        mean = x.mean(axis=1, keepdims=True)
        return (x - mean) / np.sqrt(x.var(axis=1, keepdims=True) + np.float32(module.EPS)) * weight + bias

    return Setup(_runner(module.layer_norm, [dst], [x, weight, bias, cols]), {"numpy": numpy_version},
                 module.reference(x, weight, bias), 1e-4)


# -- tiles, histograms, sums -----------------------------------------------------------------


def matmul(m: int, n: int, k: int) -> Setup:
    rng = _rng()
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    c = np.zeros((m, n), np.float32)
    expected = a.astype(np.float64) @ b
    return Setup(_runner(example("matmul").matmul, [c], [a, b, m, n, k]), {"numpy": lambda: a @ b}, expected,
                 1e-5 * math.sqrt(k))


def histogram(n: int) -> Setup:
    module = example("histogram")
    x = _rng().integers(0, module.BINS, n).astype(np.int32)
    hist = np.zeros(module.BINS, np.int32)

    def run(backend, **options):
        hist[:] = 0
        module.histogram.run([hist, x], backend=backend, **options)
        return hist

    return Setup(run, {"numpy": lambda: np.bincount(x, minlength=module.BINS)},
                 np.bincount(x, minlength=module.BINS).astype(np.float64), 0.0)


def vector_sum(n: int) -> Setup:
    module = example("sum")
    x = _rng().random(n, dtype=np.float32)
    total = np.zeros(1, np.float32)

    def run(backend, **options):
        total[:] = 0
        module.vector_sum.run([total, x], backend=backend, **options)
        return total

    return Setup(run, {"numpy": lambda: np.array([x.sum()])}, np.array([x.astype(np.float64).sum()]), 1e-5)


# -- attention ---------------------------------------------------------------------------------


def _attention_inputs(shape):
    b, q, k, h, v = shape
    rng = _rng()
    return [rng.standard_normal(s, dtype=np.float32) for s in ((b, q, h), (b, k, h), (b, k, v))]


def attention(entry_name: str, shape) -> Setup:
    from accy.library import attention as library

    from .attention import numpy_einsum, numpy_reference, torch_sdpa

    entry = getattr(library, entry_name)(library.ScaledDotProduct(*shape))
    inputs = _attention_inputs(shape)
    b, q, _, _, v = shape
    dst = np.zeros((b, q, v), np.float32)
    baselines = {"numpy": lambda: numpy_reference(*inputs), "numpy-einsum": lambda: numpy_einsum(*inputs)}
    torch_run, _ = torch_sdpa()
    if torch_run is not None:
        baselines["torch-sdpa"] = lambda: torch_run(*inputs)
    return Setup(_runner(entry, [dst], inputs), baselines, library.reference(*inputs), 1e-5)


WORKLOADS = (
    Workload("vector add", "n=98,432", lambda: vector_add(98_432), (Target("numpy", 2.0),)),
    Workload("vector add", "n=10^7", lambda: vector_add(10_000_000), (Target("numpy", 1.2),)),
    Workload("black-scholes", "10^6 options", lambda: black_scholes(1_000_000), (Target("numpy", 0.5),)),
    Workload("row softmax", "1823x781", lambda: softmax(1823, 781), (Target("numpy", 1.0),)),
    Workload("layer norm", "1151x8192", lambda: layer_norm(1151, 8192), (Target("numpy", 1.0),)),
    Workload("jacobi", "256x256", lambda: jacobi(256), (Target("numpy", 1.0),)),
    Workload("jacobi", "2048x2048", lambda: jacobi(2048), (Target("numpy", 1.0),)),
    Workload("tiled matmul", "512x384x256", lambda: matmul(512, 384, 256), (Target("numpy", 4.0),)),
    Workload("tiled matmul", "2048^3", lambda: matmul(2048, 2048, 2048), (Target("numpy", 4.0),),
             backends=("llvm",)),
    Workload("histogram", "10^6 into 256", lambda: histogram(1_000_000)),
    Workload("sum", "10^7", lambda: vector_sum(10_000_000)),
    Workload("flash attention", "(8,256,256,64,64)", lambda: attention("scaled_dot_product_flash_f32",
                                                                        (8, 256, 256, 64, 64)),
             (Target("torch-sdpa", 2.0), Target("numpy", 1.0)), backends=("llvm",)),
    Workload("flash attention", "(16,512,512,64,64)", lambda: attention("scaled_dot_product_flash_f32",
                                                                         (16, 512, 512, 64, 64)),
             (Target("torch-sdpa", 2.0), Target("numpy", 1.0)), backends=("llvm",)),
    Workload("naive attention", "(4,64,64,32,32)", lambda: attention("scaled_dot_product_f32", (4, 64, 64, 32, 32)),
             (Target("numpy-einsum", 3.0, backend="interpreter"),), backends=("interpreter", "llvm")),
)
QUICK = {("vector add", "n=10^7"), ("tiled matmul", "2048^3"), ("flash attention", "(16,512,512,64,64)")}


def max_error(result, expected) -> float:
    """The largest error, relative to the largest expected magnitude."""
    results = result if isinstance(result, tuple) else (result,)
    wanted = expected if isinstance(expected, tuple) else (expected,)
    worst = 0.0
    for got, want in zip(results, wanted):
        got, want = np.asarray(got, np.float64).reshape(-1), np.asarray(want, np.float64).reshape(-1)
        scale = max(float(np.abs(want).max()), 1e-30)
        worst = max(worst, float(np.abs(got - want).max()) / scale)
    return worst


def run_workloads(measure, budget: float, quick: bool = False, only: str | None = None, workloads=None,
                  skip_quick=None) -> list[dict]:
    """Time every workload (``WORKLOADS`` unless given) on its backends and baselines; one
    row per workload."""
    rows = []
    skip_quick = QUICK if skip_quick is None else skip_quick
    for w in WORKLOADS if workloads is None else workloads:
        if only and only not in w.kernel:
            continue
        row = {"kernel": w.kernel, "size": w.size, "targets": [], "seconds": {}, "errors": {}, "skipped": {}}
        rows.append(row)
        if quick and (w.kernel, w.size) in skip_quick:
            row["skipped"]["all"] = "--quick"
            continue
        setup = w.setup()
        for label, fn in setup.baselines.items():
            seconds, result = measure(fn, budget)
            if seconds is None:
                row["skipped"][label] = result
                continue
            row["seconds"][label] = seconds
            row["errors"][label] = max_error(result, setup.expected)
        for backend in w.backends:
            name, options = BACKENDS[backend]
            seconds, result = measure(lambda: setup.run(name, **options), budget)
            if seconds is None:
                row["skipped"][backend] = result
                continue
            row["seconds"][backend] = seconds
            row["errors"][backend] = error = max_error(result, setup.expected)
            if error > setup.rtol:
                row["skipped"][backend] = f"WRONG: error {error:.2g} over {setup.rtol:.2g}"
        checks = ()
        checked = next((b for b in w.backends if b.startswith("llvm") and b in row["seconds"]), None)
        if checked:  # what the bounds checks cost: the same kernel without them
            options = BACKENDS[checked][1]
            seconds, _ = measure(lambda: setup.run("llvm", checks=False, **options), budget)
            if seconds is not None:
                row["seconds"][UNCHECKED] = seconds
                checks = (Target(UNCHECKED, CHECKS_COST, checked),)
        for t in (*w.targets, *checks):
            accy, base = row["seconds"].get(t.backend), row["seconds"].get(t.baseline)
            ratio = accy / base if accy and base else None
            row["targets"].append({"backend": t.backend, "baseline": t.baseline, "at_most": t.at_most,
                                   "ratio": ratio, "met": None if ratio is None else ratio <= t.at_most})
        row["ratios"] = {f"{b} / {base}": row["seconds"][b] / row["seconds"][base]
                         for b in w.backends if b in row["seconds"]
                         for base in setup.baselines if base in row["seconds"]}
    return rows


def print_rows(rows) -> None:
    for row in rows:
        times = "  ".join(f"{k} {v * 1e3:.3f} ms" for k, v in row["seconds"].items())
        print(f"{row['kernel']:16} {row['size']:20} {times}")
        for k, why in row["skipped"].items():
            print(f"{'':38}{k}: skipped, {why}")
        for t in row["targets"]:
            verdict = "n/a" if t["met"] is None else "met" if t["met"] else "MISSED"
            ratio = "-" if t["ratio"] is None else f"{t['ratio']:.2f}x"
            print(f"{'':38}target {Target(t['baseline'], t['at_most'], t['backend'])}: {ratio} {verdict}")


