"""accy.codegen.host.vecmath: accuracy in ulp, special values, IR shape.

Every routine is JIT-compiled into a small kernel that maps arrays through it
(scalar, <8 x float>, <16 x float>, <4 x double>, <8 x double>; the arrays are
padded to a whole number of vectors).

References: for float, NumPy float64 of the float32 input (its own error, about
1e-16 relative, is 2^-29 of a float ulp, so the measured ulp are those of the
routine); for double, Python's decimal module at 60 digits (exp, ln and sqrt
are correctly rounded there; sin, cos and erf are summed as Taylor series in
60 digits after an exact reduction), so the reference error is below 1e-40
relative, far below a double ulp.
"""

from __future__ import annotations

import decimal
import importlib
import math
import platform
import re

import llvmlite.binding as llvm
import llvmlite.ir as ir
import numpy as np
import pytest

from accy.codegen.host import vecmath
from accy.codegen.host.vecmath_f32 import EXP_OVERFLOW, INV_STEP
from accy.codegen.machine import host_machine, optimised_host_module

from host_math import compile_routine, kernel

F32_WIDTHS = (1, 8, 16)
F64_WIDTHS = (1, 4, 8)
NP = {"f32": np.float32, "f64": np.float64}
REQUIRED = ("exp", "exp2", "expm1", "log", "log2", "log1p", "erf", "tanh", "sigmoid",
            "sin", "cos", "pow", "rsqrt", "atan", "atan2")
BINARY = ("pow", "atan2")


# ------------------------------------------------------------------------------------
# ulp measurement


def ulp_error(got, ref, dtype: str) -> np.ndarray:
    """|got - ref| in ulp of ``dtype`` at ref (ref in float64).  A reference that rounds
    to +-inf in ``dtype`` must be met by that infinity exactly (error 0, else inf); NaN
    must be met by NaN."""
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    p, emin = (24, -126) if dtype == "f32" else (53, -1022)
    overflow = float.fromhex("0x1.ffffffp127") if dtype == "f32" else math.inf
    _, e = np.frexp(ref)
    ulp = np.ldexp(1.0, np.maximum(e - 1, emin) - (p - 1))
    with np.errstate(all="ignore"):
        err = np.abs(got - ref) / ulp
    to_inf = np.abs(ref) >= overflow
    same = (got == ref) | (to_inf & np.isinf(got) & (np.sign(got) == np.sign(ref)))
    err = np.where(same, 0.0, err)
    err = np.where(to_inf & ~same, np.inf, err)
    nan = np.isnan(ref) | np.isnan(got)
    return np.where(nan, np.where(np.isnan(ref) == np.isnan(got), 0.0, np.inf), err)


# ------------------------------------------------------------------------------------
# References


def _sigmoid64(x):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


_erf64 = np.vectorize(math.erf, otypes=[np.float64])

NUMPY_REF = {
    "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log2": np.log2,
    "log1p": np.log1p, "erf": _erf64, "tanh": np.tanh, "sigmoid": _sigmoid64, "sin": np.sin,
    "cos": np.cos, "pow": np.power, "rsqrt": lambda x: 1.0 / np.sqrt(x), "atan": np.arctan,
    "atan2": np.arctan2,
}


def numpy_ref(name, *xs):
    with np.errstate(all="ignore"):
        return NUMPY_REF[name](*[np.asarray(x, np.float64) for x in xs])


CTX = decimal.Context(prec=60, Emax=10**6, Emin=-10**6, traps=[])
WIDE = decimal.Context(prec=1200, Emax=10**6, Emin=-10**6, traps=[])   # exact sums of doubles
D = decimal.Decimal


def _pi(digits: int) -> D:
    """pi by Machin's formula, 16 atan(1/5) - 4 atan(1/239)."""
    with decimal.localcontext(decimal.Context(prec=digits + 10)):
        def atan_inv(n):
            x = D(1) / n
            total, power, k = D(0), x, 1
            while power > D(10) ** -(digits + 5):
                total += power / k if k % 4 == 1 else -power / k
                power *= x * x
                k += 2
            return total
        return 16 * atan_inv(5) - 4 * atan_inv(239)


PI = _pi(400)
assert str(PI).startswith("3.14159265358979323846264338327950288419716939937510")


def _sin_cos_small(r: D) -> tuple[D, D]:
    """sin r, cos r for |r| <= 1 by their Taylor series in 80 digits."""
    with decimal.localcontext(decimal.Context(prec=80)):
        s, c, term, k = D(0), D(0), D(1), 0
        while abs(term) > D(10) ** -85 or k < 2:
            if k % 2 == 0:
                c += term if k % 4 == 0 else -term
            else:
                s += term if k % 4 == 1 else -term
            k += 1
            term = term * r / k
        return s, c


def _dec_trig(x: float, cos: bool) -> D:
    with decimal.localcontext(decimal.Context(prec=400)):
        half_pi = PI / 2
        k = int((D(x) / half_pi).to_integral_value())
        r = D(x) - k * half_pi
    s, c = _sin_cos_small(r)
    return [s, c, -s, -c][(k + (1 if cos else 0)) % 4]


def _dec_erf(x: float) -> D:
    if abs(x) > 6.5:
        return D(1) if x > 0 else D(-1)   # 1 - erf(6.5) < 1e-19: erf rounds to +-1 in double
    with decimal.localcontext(decimal.Context(prec=90, Emin=-10**6, Emax=10**6)):
        xd = D(x)
        total, term, n = D(0), xd, 0      # term = (-1)^n x^(2n+1) / n!
        while True:
            add = term / (2 * n + 1)
            total += add
            if add == 0 or abs(add) < abs(total) * D(10) ** -80:
                break
            n += 1
            term = -term * xd * xd / n
        return 2 * total / PI.sqrt()


def _dec_atan(x: D) -> D:
    """atan x in 90 digits: atan x = pi/2 - atan(1/x) above 1, then halvings
    atan x = 2 atan(x / (1 + sqrt(1 + x^2))) down to |x| < 0.01, then its Taylor series."""
    with decimal.localcontext(decimal.Context(prec=90, Emin=-10**6, Emax=10**6)):
        if x < 0:
            return -_dec_atan(-x)
        if x > 1:
            return PI / 2 - _dec_atan(1 / x)
        halvings = 0
        while x > D("0.01"):
            x = x / (1 + (1 + x * x).sqrt())
            halvings += 1
        total, power, k = D(0), x, 1
        while power > abs(total) * D(10) ** -88 or k == 1:
            total += power / k if k % 4 == 1 else -power / k
            power *= x * x
            k += 2
        return total * 2**halvings


def _dec_atan2(y: float, x: float) -> D:
    """C's atan2 at y, x (not NaN)."""
    with decimal.localcontext(decimal.Context(prec=90, Emin=-10**6, Emax=10**6)):
        sign = -1 if math.copysign(1.0, y) < 0 else 1
        if math.isinf(y):
            return sign * PI * (2 if math.isinf(x) and x > 0 else 6 if math.isinf(x) else 4) / 8
        if math.isinf(x):
            return D(0).copy_sign(D(y)) if x > 0 else sign * PI
        if x == 0:
            return sign * PI / 2 if y != 0 else (D(0).copy_sign(D(y)) if math.copysign(1.0, x) > 0 else sign * PI)
        a = _dec_atan(D(y) / D(x))
        if x > 0:
            return a if y != 0 else D(0).copy_sign(D(y))
        return a + sign * PI


def _dec(name: str, x: float, y: float | None = None):
    """The exact value of ``name`` at double ``x`` to 60 digits (None for NaN)."""
    if math.isnan(x) or (y is not None and math.isnan(y)):
        return None
    if name == "sin":
        return _dec_trig(x, False)
    if name == "cos":
        return _dec_trig(x, True)
    if name == "erf":
        return _dec_erf(x)
    if name == "atan":
        return _dec_atan(D(x))
    if name == "atan2":
        return _dec_atan2(x, y)
    xd = D(x)
    with decimal.localcontext(CTX):
        if name == "exp":
            return xd.exp()
        if name == "exp2":
            if x == int(x) and abs(x) < 1100:
                return WIDE.power(D(2), int(x))      # exact, so ties (2^-1075) round to even
            return (xd * D(2).ln()).exp()
        if name == "expm1":
            return WIDE.subtract(xd.exp(), 1) if abs(x) > 1e-3 else _expm1_series(xd)
        if name == "log":
            return xd.ln()
        if name == "log2":
            return xd.ln() / D(2).ln()
        if name == "log1p":
            return WIDE.add(xd, 1).ln()
        if name == "tanh":
            if x == 0:
                return xd
            e = (-2 * abs(xd)).exp()
            return ((1 - e) / (1 + e)).copy_sign(xd) if abs(x) > 1e-3 else _tanh_series(xd)
        if name == "sigmoid":
            return 1 / (1 + (-xd).exp())
        if name == "rsqrt":
            return 1 / xd.sqrt()
        if name == "pow":  # finite x != 0, finite y; a negative x with an integer y
            v = (D(y) * abs(xd).ln()).exp()
            return -v if x < 0 and int(y) % 2 else v
    raise AssertionError(name)


def _expm1_series(x: D) -> D:
    total, term, k = D(0), x, 1
    while abs(term) > abs(x) * D(10) ** -70:
        total += term
        k += 1
        term = term * x / k
    return total


def _tanh_series(x: D) -> D:
    s = _expm1_series(2 * x)
    return s / (s + 2)


def decimal_ulp_error(got: float, ref: D | None) -> float:
    if ref is None:
        return 0.0 if math.isnan(got) else math.inf
    fref = float(ref)
    if math.isinf(fref) or math.isinf(got):
        return 0.0 if got == fref else math.inf
    if ref == 0:
        return 0.0 if got == 0 else math.inf
    _, e = math.frexp(fref)
    if abs(ref) < D(math.ldexp(1.0, e - 1)):   # float(ref) rounded up to a power of 2
        e -= 1
    ulp = math.ldexp(1.0, max(e - 1, -1022) - 52)
    return float(abs(D(got) - ref) / D(ulp))


# ------------------------------------------------------------------------------------
# Samples


def _bits_sample(rng, dtype: str, n: int) -> np.ndarray:
    """Uniformly random bit patterns (every exponent, subnormals, both signs), NaN dropped."""
    if dtype == "f32":
        x = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    else:
        x = rng.integers(0, 2**63, n, dtype=np.int64).view(np.float64)
        x = x[np.isfinite(x)]
        return x * rng.choice([-1.0, 1.0], len(x))
    return x[np.isfinite(x)]


def _around(points, rel: float, n: int, rng) -> np.ndarray:
    points = np.asarray(points, np.float64)
    return (np.repeat(points, n) * (1 + rng.uniform(-rel, rel, len(points) * n)))


def sample(name: str, dtype: str, n: int, seed: int = 7) -> list[np.ndarray]:
    """A dense sample of ``name``'s domain for ``dtype``: uniform pieces, near thresholds,
    subnormals, random bit patterns.  A list with one array per argument."""
    rng = np.random.default_rng(seed)
    f32 = dtype == "f32"
    u = lambda lo, hi, k=n: rng.uniform(lo, hi, k)  # noqa: E731
    logu = lambda lo, hi, k=n: np.exp2(rng.uniform(lo, hi, k))  # noqa: E731
    tiny = np.array([2.0**-149, 2.0**-140, 2.0**-127, 2.0**-126] if f32
                    else [5e-324, 2.0**-1070, 2.0**-1023, 2.0**-1022])
    tiny = np.concatenate([tiny, -tiny])
    bits = _bits_sample(rng, dtype, n)
    if name in ("exp", "sigmoid"):
        edges = [88.72283935546875, -87.33654, -103.97208, -103.27893] if f32 else \
                [709.782712893384, -708.3964185322641, -745.1332191019411, -744.4400719213812]
        lim = 110 if f32 else 760
        parts = [u(-lim, lim), u(-1, 1), _around(edges, 1e-4, n // 8, rng), logu(-60, 0, n // 4) * rng.choice([-1, 1], n // 4)]
    elif name == "exp2":
        edges = [128, -126, -149, -150, -151] if f32 else [1024, -1022, -1074, -1075, -1076]
        lim = 160 if f32 else 1100
        parts = [u(-lim, lim), u(-1, 1), _around(edges, 1e-4, n // 8, rng), logu(-60, 0, n // 4)]
    elif name == "expm1":
        edges = [88.72283935546875] if f32 else [709.782712893384]
        parts = [u(-50, 100 if f32 else 720), u(-1, 1), logu(-60, 0, n // 2) * rng.choice([-1, 1], n // 2),
                 _around(edges, 1e-4, n // 8, rng), u(-0.4, 0.4)]
    elif name in ("log", "log2", "rsqrt"):
        emin, emax = (-149, 128) if f32 else (-1074, 1024)
        parts = [logu(emin, emax), u(0.5, 2.0), u(0.99, 1.01), np.abs(bits), np.abs(tiny)]
    elif name == "log1p":
        emin, emax = (-149, 128) if f32 else (-1074, 1024)
        parts = [logu(emin, emax), -logu(-60, 0), u(-1, 1), u(-1e-3, 1e-3), -1 + logu(-24 if f32 else -53, -1),
                 np.abs(bits), tiny]
    elif name == "tanh":
        parts = [u(-12, 12) if f32 else u(-25, 25), u(-1, 1), u(0.5, 0.6), logu(-60, 3, n // 2), tiny, bits]
    elif name == "erf":
        parts = [u(-5, 5) if f32 else u(-7, 7), u(-1, 1), u(0.8, 0.9), logu(-60, 2, n // 2), tiny, bits]
    elif name in ("sin", "cos"):
        k = np.arange(1, 200000, 7, dtype=np.float64)
        near = _around(k[: n // 2] * (np.pi / 2), 1e-7, 1, rng)
        parts = [u(-10, 10), u(-2.0**17, 2.0**17), logu(17, 30, n // 4) * rng.choice([-1, 1], n // 4),
                 near, logu(-40, 0, n // 4), tiny]
        if f32:
            parts += [bits, logu(32, 127.9, n // 4)]          # up to FLT_MAX: the Payne-Hanek path
        else:
            parts += [logu(30, 1000, n // 8)]                  # the C library fallback
    elif name == "atan":  # the reductions' edges (tan(pi/8), 1), every magnitude
        parts = [u(-3, 3), _around([0.41421356237309503, 1.0, -1.0], 1e-5, n // 8, rng),
                 logu(-60, 60, n // 2) * rng.choice([-1, 1], n // 2), tiny, bits]
    elif name == "atan2":  # y, x: every octant, ratios near 1 and tan(pi/8), every magnitude
        lim = 120 if f32 else 1000
        y = np.concatenate([logu(-lim, lim) * rng.choice([-1, 1], n), u(-3, 3)])
        ratio = np.concatenate([u(-4, 4, n // 2), _around([1.0, -1.0, 2.414213562373095, 0.41421356237309503],
                                                          1e-5, n // 8, rng), logu(-lim, lim, n)])
        x = y * np.resize(ratio, len(y)) * rng.choice([-1, 1], len(y))
        if f32:
            other = _bits_sample(rng, dtype, n)
            k = min(len(bits), len(other))
            y, x = np.concatenate([y, bits[:k]]), np.concatenate([x, other[:k]])
        with np.errstate(all="ignore"):
            y, x = y.astype(NP[dtype]), x.astype(NP[dtype])
        ok = np.isfinite(y) & np.isfinite(x)
        return [y[ok], x[ok]]
    elif name == "pow":
        if f32:
            x = np.concatenate([logu(-20, 20), u(0, 4), logu(-149, 128, n // 2), -u(0, 3, n // 2)])
            y = np.concatenate([u(-30, 30), u(-50, 50), u(-1.5, 1.5, n // 2), rng.integers(-40, 40, n // 2)])
        else:
            x = np.concatenate([logu(-20, 20), u(0, 4)])
            y = np.concatenate([u(-30, 30), u(-50, 50)])
        x, y = x.astype(NP[dtype]), y.astype(NP[dtype])
        return [x, y]
    else:
        raise AssertionError(name)
    x = np.concatenate(parts).astype(NP[dtype])
    return [x[np.isfinite(x)]]


# ------------------------------------------------------------------------------------
# The API


def test_functions_and_bounds():
    for name in REQUIRED:
        assert name in vecmath.FUNCTIONS
        assert vecmath.arity(name) == (2 if name in BINARY else 1)
        for dtype in ("f32", "f64"):
            bound = vecmath.max_ulp(name, dtype)
            assert 0 < bound <= (1 if name in ("exp", "exp2", "log", "log2", "sin", "cos") else 2)
    with pytest.raises(ValueError):
        vecmath.max_ulp("exp", "f16")
    with pytest.raises(ValueError):
        vecmath.max_ulp("gamma", "f32")


def test_emit_rejects_bad_arguments():
    module = ir.Module()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.FloatType(), ir.DoubleType(), ir.IntType(32)]), "f")
    b = ir.IRBuilder(fn.append_basic_block())
    with pytest.raises(TypeError):
        vecmath.emit(b, "pow", [fn.args[0], fn.args[1]])       # mixed types
    with pytest.raises(TypeError):
        vecmath.emit(b, "exp", [fn.args[2]])                   # an integer
    with pytest.raises(TypeError):
        vecmath.emit(b, "exp", [fn.args[0], fn.args[0]])       # too many
    with pytest.raises(ValueError):
        vecmath.emit(b, "gamma", [fn.args[0]])


def test_one_definition_per_type_shared_by_functions():
    """Calls from several functions share one internal alwaysinline definition per
    (name, type); the module verifies, and float routines call no external symbol."""
    module = ir.Module()
    v16 = ir.VectorType(ir.FloatType(), 16)
    for fname in ("k1", "k2"):
        fn = ir.Function(module, ir.FunctionType(v16, [v16, v16]), fname)
        b = ir.IRBuilder(fn.append_basic_block())
        x = fn.args[0]
        for name in vecmath.FUNCTIONS:
            args = [x, fn.args[1]] if vecmath.arity(name) == 2 else [x]
            x = vecmath.emit(b, name, args)
            x = vecmath.emit(b, name, args)
        b.ret(x)
    defined = [f for f in module.functions if not f.is_declaration]
    routines = [f for f in defined if f.name.startswith("accy.vecmath.")]
    assert len(routines) == len(vecmath.FUNCTIONS)
    for f in routines:
        assert f.linkage == "internal" and "alwaysinline" in f.attributes
    external = [f.name for f in module.functions if f.is_declaration and not f.name.startswith("llvm.")]
    assert external == []
    parsed = optimised_host_module(str(module))
    assert {f.name for f in parsed.functions if not f.is_declaration} == {"k1", "k2"}   # all inlined


# ------------------------------------------------------------------------------------
# Special values


SNAN32 = np.array([0x7FA00000], np.uint32).view(np.float32)[0]   # signalling NaN
SNAN64 = np.array([0x7FF4000000000000], np.uint64).view(np.float64)[0]
SPECIAL = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0]


def _specials(dtype):
    lim = np.finfo(NP[dtype])
    extra = [float(lim.max), -float(lim.max), float(lim.smallest_subnormal), -float(lim.smallest_subnormal),
             float(lim.smallest_normal), -float(lim.smallest_normal)]
    out = np.array(SPECIAL + extra + [0.0], NP[dtype])
    out[-1] = SNAN32 if dtype == "f32" else SNAN64
    return out


def _bounded_elsewhere(name, dtype, got, ref, exact, *xs):
    """The non-special results within the documented bound (f64 against decimal)."""
    if dtype == "f32":
        err = ulp_error(got, ref, dtype)[~exact]
    else:
        err = np.array([decimal_ulp_error(float(g), _dec(name, *map(float, a)))
                        for g, *a in zip(got[~exact], *[x[~exact] for x in xs])])
    assert np.all(err <= vecmath.max_ulp(name, dtype)), ([x[~exact] for x in xs], got[~exact], err)


def _check_exact(got, ref, dtype, what):
    """Where ref (rounded to dtype) is NaN, +-inf, +-0 or +-1 the result must be that exactly,
    sign of zero included; elsewhere within the documented bound."""
    with np.errstate(over="ignore"):
        ref_t = np.asarray(ref, np.float64).astype(NP[dtype])
    got = np.asarray(got)
    exact = np.isnan(ref_t) | np.isinf(ref_t) | (ref_t == 0) | (np.abs(ref_t) == 1)
    for g, r, ex, w in zip(got, ref_t, exact, what):
        if not ex:
            continue
        if np.isnan(r):
            assert np.isnan(g), f"{w}: got {g!r}, want NaN"
            quiet = 1 << (22 if dtype == "f32" else 51)
            bits = np.array([g]).view(np.uint32 if dtype == "f32" else np.uint64)[0]
            assert int(bits) & quiet, f"{w}: a signalling NaN {g!r}"
        else:
            assert g == r and np.signbit(g) == np.signbit(r), f"{w}: got {g!r}, want {r!r}"
    return exact


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("name", [n for n in REQUIRED if n not in BINARY])
def test_special_values(name, dtype):
    x = _specials(dtype)
    ref = numpy_ref(name, x)
    for width in (F32_WIDTHS if dtype == "f32" else F64_WIDTHS):
        got = kernel(name, dtype, width)(x)
        exact = _check_exact(got, ref, dtype, [f"{name}.{dtype}x{width}({v!r})" for v in x])
        _bounded_elsewhere(name, dtype, got, ref, exact, x)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("name", BINARY)
def test_binary_special_values(name, dtype):
    """C99 pow: pow(x, +-0) = 1 and pow(1, y) = 1 even for NaN, pow(-1, +-inf) = 1, signed
    zeros and infinities for odd integer y, NaN for a negative base and non-integer y.
    C99 atan2(y, x): +-0 or +-pi for a zero y (by the sign of x, a zero's too), +-pi/2 for a
    zero x, +-pi/4 and +-3pi/4 for two infinities, the signs of y's zero kept."""
    vals = np.array(SPECIAL + [4.0, -4.0, 0.25, -0.25, 2.5, -2.5, 7.0, -7.0, 1e10, -1e10], NP[dtype])
    x, y = (a.ravel() for a in np.meshgrid(vals, vals))
    ref = numpy_ref(name, x, y)
    for width in (F32_WIDTHS if dtype == "f32" else F64_WIDTHS):
        got = kernel(name, dtype, width)(x, y)
        exact = _check_exact(got, ref, dtype, [f"{name}.{dtype}x{width}({a!r}, {b!r})" for a, b in zip(x, y)])
        if name == "atan2":  # every result's sign is C's (of +-pi and +-pi/2 too)
            number = ~np.isnan(ref)
            assert np.array_equal(np.signbit(got[number]), np.signbit(ref[number])), (x, y, got)
        _bounded_elsewhere(name, dtype, got, ref, exact, x, y)


def _neighbours(points, dtype, k=40):
    """The ``k`` consecutive values of ``dtype`` either side of each point."""
    t = NP[dtype]
    out = []
    for p in points:
        v = t(p)
        lo = hi = v
        for _ in range(k):
            lo, hi = np.nextafter(lo, t(-np.inf)), np.nextafter(hi, t(np.inf))
            out += [lo, hi]
        out.append(v)
    return np.array(out, t)


THRESHOLDS = {  # overflow, the last normal result, the last nonzero (subnormal) result
    ("exp", "f32"): [88.72283935546875, -87.336544750553, -103.27892990343185, -103.97207708399179],
    ("exp", "f64"): [709.782712893384, -708.3964185322641, -744.4400719213812, -745.1332191019411],
    ("exp2", "f32"): [128.0, -126.0, -149.0, -150.0], ("exp2", "f64"): [1024.0, -1022.0, -1074.0, -1075.0],
    ("expm1", "f32"): [88.72283935546875], ("expm1", "f64"): [709.782712893384],
    ("sigmoid", "f32"): [-87.336544750553, -103.97207708399179],
    ("sigmoid", "f64"): [-708.3964185322641, -745.1332191019411],
    ("log", "f32"): [2.0**-149, 2.0**-126], ("log", "f64"): [5e-324, 2.0**-1022],
    ("log2", "f32"): [2.0**-149, 2.0**-126], ("log2", "f64"): [5e-324, 2.0**-1022],
}


@pytest.mark.parametrize("name,dtype", sorted(THRESHOLDS))
def test_overflow_underflow_thresholds(name, dtype):
    """Around each threshold, consecutive inputs overflow to inf and underflow through the
    subnormals to 0 exactly where the correctly rounded result does."""
    x = _neighbours(THRESHOLDS[name, dtype], dtype)
    x = x[x > 0] if name.startswith("log") else x
    width = 16 if dtype == "f32" else 8
    got = kernel(name, dtype, width)(x)
    if dtype == "f32":
        ref = numpy_ref(name, x)
        with np.errstate(over="ignore"):
            want = ref.astype(np.float32)
        err = ulp_error(got, ref, dtype)
    else:
        refs = [_dec(name, float(v)) for v in x]
        want = np.array([float(r) for r in refs])
        err = np.array([decimal_ulp_error(float(g), r) for g, r in zip(got, refs)])
    assert np.array_equal(np.isinf(got), np.isinf(want)), x[np.isinf(got) != np.isinf(want)]
    assert np.array_equal(got == 0, want == 0), x[(got == 0) != (want == 0)]
    assert err.max() <= vecmath.max_ulp(name, dtype), (x[np.argmax(err)], err.max())


# ------------------------------------------------------------------------------------
# Accuracy: float


def _max_err_f32(name, width, xs):
    got = kernel(name, "f32", width)(*xs)
    err = ulp_error(got, numpy_ref(name, *xs), "f32")
    i = int(np.argmax(err))
    return float(err[i]), [float(x[i]) for x in xs]


@pytest.mark.parametrize("width", F32_WIDTHS)
@pytest.mark.parametrize("name", REQUIRED)
def test_accuracy_f32(name, width):
    xs = sample(name, "f32", 20000 if width == 16 else 4000, seed=width)
    worst, at = _max_err_f32(name, width, xs)
    assert worst <= vecmath.max_ulp(name, "f32"), f"{name} f32 x{width}: {worst:.3f} ulp at {at}"


@pytest.mark.parametrize("name", ["exp", "log", "sin", "cos", "atan"])
def test_strided_sweep_f32(name):
    """Every 997th float32 bit pattern (4.3 million inputs), at 16 lanes."""
    bits = np.arange(0, 2**32, 997, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    got = kernel(name, "f32", 16)(x)
    ref = numpy_ref(name, x)
    err = ulp_error(got, ref, "f32")
    i = int(np.argmax(err))
    assert err[i] <= vecmath.max_ulp(name, "f32"), f"{name}: {err[i]:.3f} ulp at {x[i]!r} (got {got[i]!r}, want {ref[i]!r})"


def test_sin_cos_mixed_lanes_f32():
    """A vector whose lanes mix the fast reduction and the Payne-Hanek one."""
    x = np.array([0.5, 1e30, -3.0, 2.0**60, 1e5, -3.4e38, 7.0, np.inf, 1.0, -2.0**52, 0.0, -0.0,
                  2.0**50, 2.0**50 * 0.999, 100.0, np.nan], np.float32)
    for name in ("sin", "cos"):
        got = kernel(name, "f32", 16)(x)
        err = ulp_error(got, numpy_ref(name, x), "f32")
        assert np.all(err <= vecmath.max_ulp(name, "f32")), (name, x, got, err)


# ------------------------------------------------------------------------------------
# f32 routines computed in float (vecmath_f32)

# past these magnitudes every result is 0, 1 or inf (test_special_values checks those)
NATIVE_RANGE = {"exp": 104.0, "exp2": 151.0, "sigmoid": 104.0}


def _f32_magnitudes_below(top: float, step: int) -> np.ndarray:
    """Every ``step``-th float32 bit pattern from +0 up to ``top``, with both signs."""
    top_bits = int(np.array([top], np.float32).view(np.uint32)[0])
    bits = np.arange(0, top_bits, step, dtype=np.uint32)
    return np.concatenate([bits, bits | np.uint32(1 << 31)]).view(np.float32)


def test_native_f32_names():
    assert set(vecmath.NATIVE_F32) == set(NATIVE_RANGE)
    module = ir.Module()
    v16 = ir.VectorType(ir.FloatType(), 16)
    for name in vecmath.NATIVE_F32:   # the double route on request, a routine of its own
        native, wide = vecmath.routine(module, name, v16), vecmath.routine(module, name, v16, via_double=True)
        assert native is not wide and "double" in str(wide) and "double" not in str(native).split("vm.subnormal")[0]
    assert np.float32(EXP_OVERFLOW) == EXP_OVERFLOW
    with np.errstate(over="ignore"):   # the last float whose exp rounds to a finite float
        assert np.isfinite(np.float32(np.exp(np.float64(EXP_OVERFLOW))))
        assert np.isinf(np.float32(np.exp(np.float64(np.nextafter(np.float32(EXP_OVERFLOW), np.float32(np.inf))))))


@pytest.mark.parametrize("name", vecmath.NATIVE_F32)
def test_native_f32_sweep(name):
    """Every 331st float32 of magnitude below the range's end (13 to 14 million inputs, subnormal
    arguments and results included), at 16 lanes, against float64 NumPy.  (Swept at every
    float32 when written: see vecmath.MEASURED.)"""
    x = _f32_magnitudes_below(NATIVE_RANGE[name], 331)
    got = kernel(name, "f32", 16)(x)
    ref = numpy_ref(name, x)
    err = ulp_error(got, ref, "f32")
    i = int(np.argmax(err))
    assert err[i] <= vecmath.max_ulp(name, "f32"), f"{name}: {err[i]:.4f} ulp at {x[i]!r} (got {got[i]!r})"


@pytest.mark.parametrize("name", vecmath.NATIVE_F32)
def test_native_f32_widths_agree(name):
    """Scalar, 8 and 16 lanes give the same bits (kernels run at the host's width, the fuzzer's
    interpreter at 8): every 4099th float32 bit pattern, NaNs, infinities and subnormals too."""
    x = np.arange(0, 2**32, 4099, dtype=np.uint64).astype(np.uint32).view(np.float32)
    bits = [kernel(name, "f32", width)(x).view(np.uint32) for width in F32_WIDTHS]
    for other in bits[1:]:
        differ = np.flatnonzero(other != bits[0])
        assert len(differ) == 0, (x[differ[:5]], bits[0][differ[:5]], other[differ[:5]])


@pytest.mark.parametrize("name", vecmath.NATIVE_F32)
def test_native_f32_reduction_edges(name):
    """The 12 floats either side of each point where the reduction's n steps (|u| largest,
    the table index wraps, the exponent moves), over the whole range, at 16 and 8 lanes."""
    k = np.arange(-2420, 2060) + 0.5
    points = k / 16 if name == "exp2" else k / INV_STEP
    points = points[np.abs(points) < NATIVE_RANGE[name]]
    x = _neighbours(points, "f32", k=12)
    ref = numpy_ref(name, x)
    for width in (8, 16):
        err = ulp_error(kernel(name, "f32", width)(x), ref, "f32")
        i = int(np.argmax(err))
        assert err[i] <= vecmath.max_ulp(name, "f32"), f"{name} x{width}: {err[i]:.4f} ulp at {x[i]!r}"


@pytest.mark.parametrize("name", vecmath.NATIVE_F32)
def test_native_f32_mixed_lanes(name):
    """Lanes whose results are subnormal (the double route, on its branch) beside lanes that are
    not, in one vector: each lane is its own function's value, zeros and infinities exact."""
    sub = {"exp": [-87.5, -95.0, -103.9, -100.0], "exp2": [-126.5, -140.0, -149.5, -150.5],
           "sigmoid": [-87.5, -95.0, -103.9, -100.0]}[name]
    x = np.array(sub[:2] + [0.5, -0.0, 3.0, np.inf, -np.inf, np.nan, -1.0, 200.0, -200.0, 1e-30]
                 + sub[2:] + [80.0, -80.0], np.float32)
    for perm in (x, x[::-1].copy(), np.roll(x, 5)):
        got = kernel(name, "f32", 16)(perm)
        ref = numpy_ref(name, perm)
        exact = _check_exact(got, ref, "f32", [f"{name}({v!r})" for v in perm])
        _bounded_elsewhere(name, "f32", got, ref, exact, perm)


def _assembly_for(cpu: str, module) -> str:
    """``module`` optimised and compiled for ``cpu`` (any x86-64 CPU: only assembly is made)."""
    host_machine()                                   # initialises LLVM's targets
    machine = llvm.Target.from_default_triple().create_target_machine(cpu=cpu, features="", opt=3)
    parsed = llvm.parse_assembly(str(module))
    parsed.triple, parsed.data_layout = machine.triple, str(machine.target_data)
    builder = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(speed_level=3))
    builder.getModulePassManager().run(parsed, builder)
    return machine.emit_assembly(parsed)


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="reads x86 assembly")
@pytest.mark.parametrize("name", vecmath.NATIVE_F32)
def test_native_f32_stays_in_float(name):
    """At 16 lanes the common path is <16 x float> code: no double in the entry block (the
    double route is only on the subnormal branch), every call an LLVM vector intrinsic.  The
    table lookups are permutes, not gathers or lane-by-lane scalar code: one vpermps each with
    AVX-512 at 16 lanes, two 8-entry ones each with AVX2 at 8 lanes."""
    modules = {}
    for width in (8, 16):
        module = modules[width] = ir.Module()
        vty = ir.VectorType(ir.FloatType(), width)
        fn = ir.Function(module, ir.FunctionType(vty, [vty]), "k")
        b = ir.IRBuilder(fn.append_basic_block())
        b.ret(vecmath.emit(b, name, [fn.args[0]]))
    parsed = optimised_host_module(str(modules[16]))
    blocks = [str(block) for block in parsed.get_function("k").blocks]
    assert "<16 x float>" in blocks[0] and "double" not in blocks[0], blocks[0]
    assert any("<16 x double>" in block for block in blocks[1:])
    calls = re.findall(r"call [^@]*@([\w.]+)\(", str(parsed))
    assert calls and all(c.startswith("llvm.") and (".v16f32" in c or ".v16f64" in c) for c in calls), calls
    for cpu, width, permutes in (("skylake-avx512", 16, 2), ("haswell", 8, 4)):
        asm = _assembly_for(cpu, modules[width])
        assert asm.count("vpermps") == permutes, (cpu, asm)
        assert not re.search(r"gather|call|vinsertps|vextractps", asm), (cpu, asm)


# ------------------------------------------------------------------------------------
# Accuracy: double


# the worst points found by wider sweeps, where the bound is tight
F64_WORST = {"sigmoid": [-6.23782440651906, -4.846338325452385, -2.0691398873323177]}


def _f64_points(name):
    xs = sample(name, "f64", 1000, seed=11)
    keep = 2500
    rng = np.random.default_rng(5)
    if len(xs[0]) > keep:
        idx = rng.choice(len(xs[0]), keep, replace=False)
        xs = [x[idx] for x in xs]
    if name in F64_WORST:
        xs = [np.concatenate([xs[0], F64_WORST[name]])]
    return xs


@pytest.mark.parametrize("name", REQUIRED)
def test_accuracy_f64(name):
    xs = _f64_points(name)
    refs = [_dec(name, *map(float, args)) for args in zip(*xs)]
    for width in F64_WIDTHS:
        got = kernel(name, "f64", width)(*xs)
        errs = [decimal_ulp_error(float(g), r) for g, r in zip(got, refs)]
        i = int(np.argmax(errs))
        assert errs[i] <= vecmath.max_ulp(name, "f64"), \
            f"{name} f64 x{width}: {errs[i]:.3f} ulp at {[float(x[i]) for x in xs]}: got {got[i]!r}, want {refs[i]}"


# ------------------------------------------------------------------------------------
# The tests catch a wrong routine


@pytest.mark.parametrize("family,table,index,name,dtype", [
    ("exp", "EXP_F32", 2, "exp", "f32"), ("trig", "SIN_F32", 1, "sin", "f32"), ("exp", "LOG_F64", 2, "log", "f64"),
    ("trig", "ATAN_F32", 1, "atan", "f32"), ("trig", "ATAN_F32", 2, "atan2", "f32"),
    ("f32", "EXP_TAYLOR", 0, "exp", "f32"), ("f32", "EXP_TAYLOR", 0, "exp2", "f32"),
    ("f32", "EXP_TAYLOR", 0, "sigmoid", "f32"), ("exp", "EXP_F32", 2, "expm1", "f32"),
])
def test_a_wrong_coefficient_is_caught(monkeypatch, family, table, index, name, dtype):
    """A coefficient off in its fifth digit (one part in 10^4) pushes the measured error past the bound."""
    routines = importlib.import_module(f"accy.codegen.host.vecmath_{family}")  # the family's module reads the table
    coeffs = list(getattr(routines, table))
    coeffs[index] *= 1 + 1e-4
    monkeypatch.setattr(routines, table, coeffs)
    width = 16 if dtype == "f32" else 8
    run = compile_routine(name, dtype, width)          # not the cached kernel: a fresh module
    xs = sample(name, dtype, 5000 if dtype == "f32" else 300)
    if dtype == "f32":
        err = ulp_error(run(*xs), numpy_ref(name, *xs), dtype)
    else:
        x = xs[0][:400]
        err = [decimal_ulp_error(float(g), _dec(name, float(v))) for g, v in zip(run(x), x)]
    assert max(err) > vecmath.max_ulp(name, dtype)
