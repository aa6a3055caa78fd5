"""Accuracy of every math function, measured: each is swept over its domain on every backend
and compared with float64 NumPy (long double for f64 results), in ulps of the result type.

The bounds are the ones docs/ir.md states; a test checks the docs table says the same.
On ``ptx`` (libdevice, executed by the emulator) they are what the sweep measured,
rounded up; the emulator computes the approximate instructions libdevice uses
(``ex2.approx`` and friends) to within the ISA's bounds, not as a GPU's hardware does,
so a GPU's results may differ in the last bit (CUDA documents its own bounds).
f16 and bf16 compute in f32 and round once, so they are within half an ulp plus a sliver.
"""

from __future__ import annotations

import math
import pathlib
import re

import numpy as np
import pytest

from accy import Program, axis, dynamic_buffer
from accy.codegen.host import vecmath
from accy.dsl.types import bf16, f16, f32, f64

from numeric_reference import ulps

N = 4000
UNARY = ("exp", "exp2", "expm1", "log", "log2", "log1p", "rsqrt", "erf", "tanh", "sigmoid", "sin", "cos", "atan")

# documented max ulp: function -> {(backend, type group): bound}; "half" is f16 and bf16;
# the host inlines vecmath's routines, whose bounds vecmath states
_CORRECT = 0.51  # rounded once from a more precise result: half an ulp and a sliver
MAX_ULP = {
    "exp": {"numpy f64": 1, "llvm f32": vecmath.max_ulp("exp", "f32"), "llvm f64": vecmath.max_ulp("exp", "f64"), "ptx f32": 1.5, "ptx f64": 1},
    "exp2": {"numpy f64": 1, "llvm f32": vecmath.max_ulp("exp2", "f32"), "llvm f64": vecmath.max_ulp("exp2", "f64"), "ptx f32": 1, "ptx f64": 1},
    "expm1": {"numpy f64": 1, "llvm f32": vecmath.max_ulp("expm1", "f32"), "llvm f64": vecmath.max_ulp("expm1", "f64"), "ptx f32": 1.5, "ptx f64": 1},
    "log": {"numpy f64": 1, "llvm f32": vecmath.max_ulp("log", "f32"), "llvm f64": vecmath.max_ulp("log", "f64"), "ptx f32": 1, "ptx f64": 1},
    "log2": {"numpy f64": 1, "llvm f32": vecmath.max_ulp("log2", "f32"), "llvm f64": vecmath.max_ulp("log2", "f64"), "ptx f32": 1, "ptx f64": 1},
    "log1p": {"numpy f64": 1, "llvm f32": vecmath.max_ulp("log1p", "f32"), "llvm f64": vecmath.max_ulp("log1p", "f64"), "ptx f32": 1, "ptx f64": 1.5},
    "rsqrt": {"numpy f64": 1.5, "llvm f32": vecmath.max_ulp("rsqrt", "f32"), "llvm f64": vecmath.max_ulp("rsqrt", "f64"), "ptx f32": 1.5, "ptx f64": 1.5},
    "erf": {"numpy f64": 1, "llvm f32": vecmath.max_ulp("erf", "f32"), "llvm f64": vecmath.max_ulp("erf", "f64"), "ptx f32": 1, "ptx f64": 1},
    "tanh": {"numpy f64": 1.5, "llvm f32": vecmath.max_ulp("tanh", "f32"), "llvm f64": vecmath.max_ulp("tanh", "f64"), "ptx f32": 2, "ptx f64": 1.5},
    "sigmoid": {"numpy f64": 2.5, "llvm f32": vecmath.max_ulp("sigmoid", "f32"), "llvm f64": vecmath.max_ulp("sigmoid", "f64"), "ptx f32": 2.5, "ptx f64": 2.5},
    "sin": {"numpy f64": 1, "llvm f32": vecmath.max_ulp("sin", "f32"), "llvm f64": vecmath.max_ulp("sin", "f64"), "ptx f32": 1.5, "ptx f64": 1.5},
    "cos": {"numpy f64": 1, "llvm f32": vecmath.max_ulp("cos", "f32"), "llvm f64": vecmath.max_ulp("cos", "f64"), "ptx f32": 1.5, "ptx f64": 1.5},
    "pow": {"numpy f64": 1, "llvm f32": vecmath.max_ulp("pow", "f32"), "llvm f64": vecmath.max_ulp("pow", "f64"), "ptx f32": 1, "ptx f64": 1.5},
    # ptx: libdevice's documented bounds (CUDA's: atanf 2, atan2f 3, atan and atan2 2 ulp)
    "atan": {"numpy f64": 1, "llvm f32": vecmath.max_ulp("atan", "f32"), "llvm f64": vecmath.max_ulp("atan", "f64"), "ptx f32": 2, "ptx f64": 2},
    "atan2": {"numpy f64": 1, "llvm f32": vecmath.max_ulp("atan2", "f32"), "llvm f64": vecmath.max_ulp("atan2", "f64"), "ptx f32": 3, "ptx f64": 2},
}




def bound(name: str, backend: str, t) -> float:
    group = "half" if t.bits == 16 else t.name
    if group == "half" or (backend == "numpy" and group == "f32"):
        return _CORRECT
    return MAX_ULP[name][f"{backend} {group}"]


def _reference(name: str, x, y=None):
    """The function in float64, or long double for f64 inputs (erf: Python's math.erf)."""
    wide = np.longdouble if x.dtype == np.float64 else np.float64
    x = x.astype(wide)
    with np.errstate(all="ignore"):
        if name == "erf":
            return np.array([math.erf(float(v)) for v in x.tolist()], np.float64)
        if name == "rsqrt":
            return 1 / np.sqrt(x)
        if name == "sigmoid":
            return 1 / (1 + np.exp(-x))
        if name == "pow":
            return np.power(x, y.astype(wide))
        if name == "atan2":  # atan2(y, x): x is the first array here
            return np.arctan2(x, y.astype(wide))
        if name == "atan":
            return np.arctan(x)
        return getattr(np, name)(x)


SPECIALS = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 0.5, -0.5, 2.0]


def _domain(name: str, t, rng) -> np.ndarray:
    big = 700 if t == f64 else 85
    tiny = -740 if t == f64 else -100
    if name in ("exp", "expm1"):
        x = rng.uniform(-1.3 * big, 1.05 * big, N)
    elif name == "exp2":
        x = rng.uniform(-1.5 * big * 1.45, 1.05 * big * 1.45, N)
    elif name in ("log", "log2", "rsqrt"):
        x = np.exp(rng.uniform(tiny, big, N))
    elif name == "log1p":
        x = np.concatenate([np.exp(rng.uniform(-30, big, N // 2)), -np.exp(rng.uniform(-30, -1e-6, N - N // 2))])
    elif name in ("sin", "cos"):
        x = np.concatenate([rng.uniform(-10, 10, N // 2), rng.uniform(-1e5, 1e5, N // 4),
                            np.exp(rng.uniform(-20, 40, N - 3 * (N // 4)))])
    elif name == "atan":  # every magnitude: the reductions at 1 and tan(pi/8), pi/2 - atan(1/x)
        x = np.concatenate([rng.uniform(-3, 3, N // 2), np.exp(rng.uniform(-0.9 * big, 0.9 * big, N - N // 2))
                            * rng.choice([-1, 1], N - N // 2)])
    else:
        x = rng.uniform(-12, 12, N)
    with np.errstate(all="ignore"):
        x = x.astype(t.numpy)
    x[:len(SPECIALS)] = np.array(SPECIALS).astype(t.numpy)
    return x


def _run(name, t, backend, *inputs):
    names = [f"x{j}" for j in range(len(inputs))]

    def body(k, a):
        def each(inner, idx):
            i = idx["i"]
            a.dst[i] = getattr(inner, name)(*[a.param(n)[i] for n in names])

        k.for_each_1d(axis("i", a.x0.size), each)

    params = {"dst": dynamic_buffer(t), **{n: dynamic_buffer(t) for n in names}}
    dst = np.zeros(len(inputs[0]), t.numpy)
    Program(f"acc_{name}_{t}", params, body).run([dst, *inputs], backend=backend)
    return dst


TYPES = [f16, bf16, f32, f64]


@pytest.mark.parametrize("t", TYPES, ids=str)
@pytest.mark.parametrize("name", UNARY)
def test_math_function_within_documented_ulps(name, t, backend, rng):
    x = _domain(name, t, rng)
    got = _run(name, t, backend, x)
    error = ulps(got, _reference(name, x), t.numpy)
    worst = int(np.argmax(error))
    limit = bound(name, "ptx" if backend == "cuda" else backend, t)
    assert error[worst] <= limit, (f"{name}({x[worst]!r}) on {backend} = {got[worst]!r}, "
                                   f"{error[worst]:.3g} ulp from the reference (bound {limit})")


@pytest.mark.parametrize("t", TYPES, ids=str)
def test_pow_within_documented_ulps(t, backend, rng):
    base = np.concatenate([np.exp(rng.uniform(-6, 6, N // 2)), -rng.integers(1, 9, N - N // 2).astype(float)])
    exponent = np.concatenate([rng.uniform(-12, 12, N // 2), rng.integers(-6, 7, N - N // 2).astype(float)])
    if t.bits == 16:
        base, exponent = np.clip(base, -30, 30), np.clip(exponent, -3, 3)
    base, exponent = base.astype(t.numpy), exponent.astype(t.numpy)
    base[:6], exponent[:6] = np.array([1.0, 0.0, -1.0, 2.0, np.nan, 0.0]), np.array([np.nan, 0.0, np.inf, -1.0, 0.0, -1.0])
    got = _run("pow", t, backend, base, exponent)
    error = ulps(got, _reference("pow", base, exponent), t.numpy)
    worst = int(np.argmax(error))
    limit = bound("pow", "ptx" if backend == "cuda" else backend, t)
    assert error[worst] <= limit, (f"pow({base[worst]!r}, {exponent[worst]!r}) on {backend} = {got[worst]!r}, "
                                   f"{error[worst]:.3g} ulp (bound {limit})")


ATAN2_SPECIALS = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 3.0, -3.0]


@pytest.mark.parametrize("t", TYPES, ids=str)
def test_atan2_within_documented_ulps(t, backend, rng):
    """atan2(y, x) over every octant and magnitude, ratios near 1 (the octants' edges) and
    C's special cases (signed zeros and infinities of either argument, NaN)."""
    big = 700 if t == f64 else 10
    y = np.concatenate([rng.standard_normal(N // 2), np.exp(rng.uniform(-big, big, N // 2)) * rng.choice([-1, 1], N // 2)])
    x = np.concatenate([y[: N // 4] * rng.uniform(0.9, 1.1, N // 4) * rng.choice([-1, 1], N // 4),
                        rng.standard_normal(N // 4), np.exp(rng.uniform(-big, big, N // 2)) * rng.choice([-1, 1], N // 2)])
    with np.errstate(all="ignore"):
        y, x = y.astype(t.numpy), x.astype(t.numpy)
    grid = np.array(ATAN2_SPECIALS)
    sy, sx = (a.ravel().astype(t.numpy) for a in np.meshgrid(grid, grid))
    y[: sy.size], x[: sx.size] = sy, sx
    got = _run("atan2", t, backend, y, x)
    want = _reference("atan2", y, x)
    error = ulps(got, want, t.numpy)
    worst = int(np.argmax(error))
    limit = bound("atan2", "ptx" if backend == "cuda" else backend, t)
    assert error[worst] <= limit, (f"atan2({y[worst]!r}, {x[worst]!r}) on {backend} = {got[worst]!r}, "
                                   f"{error[worst]:.3g} ulp (bound {limit})")
    # the special cases: NaN where C says NaN, and the sign C gives, of a zero too (+-0, +-pi)
    with np.errstate(all="ignore"):
        special, want_special = got[: sy.size], want[: sy.size].astype(t.numpy)
    number = ~np.isnan(want_special)
    assert np.array_equal(np.isnan(special), ~number), (sy, sx, special)
    assert np.array_equal(np.signbit(special[number]), np.signbit(want_special[number])), (sy, sx, special)


def test_docs_state_the_same_bounds():
    """docs/ir.md's accuracy table lists, per function, the bounds this test asserts."""
    text = (pathlib.Path(__file__).parent.parent / "docs" / "ir.md").read_text()
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\| `(\w+)` \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|", line)
        if m:
            rows[m.group(1)] = tuple(float(v) for v in m.groups()[1:])
    for name in (*UNARY, "pow", "atan2"):
        table = MAX_ULP[name]
        assert rows.get(name) == (table["numpy f64"], table["llvm f32"], table["llvm f64"], table["ptx f32"],
                                  table["ptx f64"], _CORRECT), name
