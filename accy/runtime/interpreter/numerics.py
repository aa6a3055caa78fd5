"""The reference numerics, in NumPy: how every op rounds, wraps and saturates.

The interpreter's op table is built from these functions, so each one states
the semantics the other backends must reproduce (docs/ir.md says the same in
words):

* arithmetic rounds once to the result type; f16, bf16 and fp8 arithmetic is
  done in f32 and rounded (correct, since f32 has more than twice their
  precision): the types whose table entry computes in f32;
* ``fma`` is rounded once, exactly, for every float type;
* math functions compute in float64 and round once to f32 or f64, so the
  reference is within half an ulp of the true result for f32 (f64 uses NumPy's
  float64 functions); f16, bf16 and fp8 compute in f32 and round once more;
* casts: float to float and int to float round to nearest even (once: an
  integer wider than 24 bits reaches a narrow type through round-to-odd in f32;
  f64 reaches fp8 directly, in ml_dtypes' conversion); fp8 follows ml_dtypes:
  in a type without infinities (f8e4m3) overflow and infinities give NaN; float
  to int truncates toward zero, saturates, NaN gives 0; int to int wraps;
* integers wrap; shifts by a count outside ``[0, bits)`` give 0 (or -1 for a
  negative value shifted right).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ...dsl.ops import OPS
from ...dsl.types import DTYPES, DType, f32

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
# the NumPy names of the types that compute in f32 (f16, bf16, fp8), from the dtype table (names:
# the dtypes themselves would import ml_dtypes with accy, half a second)
_IN_F32_NAMES = frozenset(t.numpy_name for t in DTYPES.values() if t.compute == f32 and t != f32)


def _narrow(dtype: np.dtype) -> bool:
    """A type whose arithmetic and math go through f32."""
    return dtype.name in _IN_F32_NAMES


_FORMATS = {t.numpy_name: t.format for t in DTYPES.values() if t.is_float}


def flush_subnormal(x):
    """``x``, or a zero of its sign where it is subnormal in its type (+0 where the type has
    no -0): the smallest normal is 2**(1 - bias) of the type's format."""
    x = np.asarray(x)
    form = _FORMATS[x.dtype.name]
    wide = x.astype(F32) if _narrow(x.dtype) else x
    zero = np.zeros_like(wide)
    if form.signed_zero:
        zero = np.copysign(zero, wide)
    out = np.where(np.abs(wide) < math.ldexp(1.0, 1 - form.bias), zero, wide)
    return out.astype(x.dtype)


def rounded(fn):
    """An op that rounds once to its (float) result type, computed in f32 for f16, bf16 and fp8."""

    def op(*xs):
        xs = [np.asarray(x) for x in xs]
        dtype = xs[0].dtype
        if _narrow(dtype):
            return fn(*(x.astype(F32) for x in xs)).astype(dtype)
        return fn(*xs)

    return op


# elements of f32 a math function widens to float64 at a time: the temporaries stay in cache
# (widening a large tile at once costs twice the time, in memory traffic and page faults)
_BLOCK = 1 << 16


def _f32_in_blocks(fn64, x: np.ndarray) -> np.ndarray:
    flat = x.reshape(-1)
    out = np.empty(flat.size, F32)
    for i in range(0, flat.size, _BLOCK):
        out[i:i + _BLOCK] = fn64(flat[i:i + _BLOCK].astype(F64))  # rounds as astype(F32)
    return out.reshape(x.shape)


def math_function(fn64):
    """A math function: float64 ``fn64`` rounded once to f32 or f64; f16 and bf16 compute
    in f32 (so they round twice, as every backend does), and so do fp8 types."""

    def op(*xs):
        xs = [np.asarray(x) for x in xs]
        dtype = xs[0].dtype
        if dtype == F64:
            return fn64(*xs)
        if dtype == F32:
            if len(xs) == 1 and xs[0].size > _BLOCK:
                return _f32_in_blocks(fn64, xs[0])
            return fn64(*(x.astype(F64) for x in xs)).astype(F32)
        return op(*(x.astype(F32) for x in xs)).astype(dtype)

    return op


def _erf64(x):
    flat = np.asarray(x, F64).reshape(-1)
    unique, inverse = np.unique(flat, return_inverse=True)
    values = np.array([math.erf(v) for v in unique.tolist()], F64)
    return values[inverse].reshape(np.shape(x))


def _sigmoid64(x):
    # e^x / (1 + e^x) where x < 0 keeps tiny results accurate
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


# each math function in float64: NumPy's ufunc where the op table names one (np.arctan for atan)
MATH64 = {
    **{name: getattr(np, opdef.numpy) for name, opdef in OPS.items() if opdef.math and opdef.numpy},
    "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x), "erf": _erf64, "sigmoid": _sigmoid64,
}


# -- max and min: IEEE 754-2019 maximum/minimum -------------------------------------------------


def _extremum(pick, zero_sign):
    """As LLVM's llvm.maximum/llvm.minimum: NaN propagates and -0.0 < +0.0 (NumPy's
    maximum returns its second operand on ties, so max(+0.0, -0.0) would be -0.0)."""

    def extremum(a, b):
        result = pick(a, b)
        if np.asarray(result).dtype.kind not in "fV":
            return result
        ties = (np.asarray(a) == 0) & (np.asarray(b) == 0)
        if not np.any(ties):
            return result
        negative = zero_sign(np.signbit(a), np.signbit(b))  # True: the result is -0.0
        zero = np.where(negative, -0.0, 0.0).astype(np.asarray(result).dtype)
        return np.where(ties, zero, result)

    return extremum


maximum = _extremum(np.maximum, np.logical_and)  # -0 only if both are -0
minimum = _extremum(np.minimum, np.logical_or)  # -0 if either is -0


# -- fma: rounded once ----------------------------------------------------------------------------


def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _to_odd(s, error):
    """Round-to-odd of the exact ``s + error`` (|error| below half an ulp of s): where the sum
    is inexact and s's last bit is even, step s one ulp toward the exact value."""
    bits = np.asarray(s, F64).view(np.int64).copy()
    inexact = (error != 0) & np.isfinite(s) & np.isfinite(error)
    step = np.where((error > 0) == (s > 0), 1, -1)  # away from or toward zero, in magnitude
    fix = inexact & ((bits & 1) == 0)
    return np.where(fix, bits + step, bits).view(F64)


def _split(x):
    c = 134217729.0 * x  # 2**27 + 1: Veltkamp's split into two 26-bit halves
    hi = c - (c - x)
    return hi, x - hi


def _fma64(a, b, c):
    """Boldo and Melquiond's emulation: exact product (Dekker), exact sum, round-to-odd of
    the tails, one final rounding.  Lanes where the splits could overflow or the tails
    underflow (a product that underflows included) are computed exactly with fractions.

    A zero result takes IEEE's signs: an exact zero is -0 only where the exact product and c
    are both -0 (a cancellation is +0), a nonzero value rounded to zero keeps its sign.  Where
    an exact zero comes out, a * b is exact (a zero, or -c), so the plain a * b + c has it."""
    a, b, c = np.broadcast_arrays(np.asarray(a, F64), np.asarray(b, F64), np.asarray(c, F64))
    with np.errstate(all="ignore"):
        ph = a * b
        (ah, al), (bh, bl) = _split(a), _split(b)
        pl = ((ah * bh - ph) + ah * bl + al * bh) + al * bl
        th, tl = _two_sum(c, ph)
        v_sum, v_err = _two_sum(tl, pl)
        result = th + _to_odd(v_sum, v_err)
        # the tails' +0 would turn th's -0 into +0; in a safe lane a zero result is an exact zero
        result = np.where(result == 0, ph + c, result)
    finite = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
    safe = finite & (np.abs(a) < 2.0**995) & (np.abs(b) < 2.0**995) & (np.abs(c) < 2.0**1000) & (
        (a == 0) | (b == 0) | (np.abs(ph) > 2.0**-960)) & ((c == 0) | (np.abs(c) > 2.0**-960)) & np.isfinite(result)
    with np.errstate(all="ignore"):
        # a non-finite operand: inf and NaN factors follow the plain formula; finite ones make a
        # finite exact product, which an infinite or NaN c decides (the rounded one may overflow)
        out = np.where(finite, result, np.where(np.isfinite(a) & np.isfinite(b), c, a * b + c))
    flat, fa, fb, fc = out.reshape(-1), a.reshape(-1), b.reshape(-1), c.reshape(-1)  # 0-d operands too
    for i in np.flatnonzero(finite & ~safe):
        x, y, z = float(fa[i]), float(fb[i]), float(fc[i])
        exact = Fraction(x) * Fraction(y) + Fraction(z)
        if exact == 0:
            flat[i] = x * y + z  # the product is exact: IEEE's sign of a zero sum
            continue
        try:
            flat[i] = float(exact)  # Fraction -> float rounds correctly, a tiny value to a signed zero
        except OverflowError:
            flat[i] = math.inf if exact > 0 else -math.inf
    return out


def fma(a, b, c):
    """a * b + c rounded once to the operands' type."""
    a, b, c = np.asarray(a), np.asarray(b), np.asarray(c)
    dtype = a.dtype
    if dtype == F64:
        return _fma64(a, b, c)
    # f32 and narrower: the product is exact in float64; the sum rounded to odd in float64
    # (53 >= 24 + 2 bits) and then to the type is the correctly rounded fma
    x, y, z = a.astype(F64), b.astype(F64), c.astype(F64)
    with np.errstate(all="ignore"):
        s, error = _two_sum(x * y, z)
    return _to_odd(s, error).astype(dtype)


# -- integers: shifts -------------------------------------------------------------------------------


def shift_left(a, n):
    a, n = np.asarray(a), np.asarray(n)
    bits = a.dtype.itemsize * 8
    inside = (n >= 0) & (n < bits)
    return np.where(inside, np.left_shift(a, np.where(inside, n, 0).astype(a.dtype)), 0).astype(a.dtype)


def shift_right(a, n):
    a, n = np.asarray(a), np.asarray(n)
    bits = a.dtype.itemsize * 8
    inside = (n >= 0) & (n < bits)
    outside = np.where(a < 0, -1, 0) if a.dtype.kind == "i" else 0
    return np.where(inside, np.right_shift(a, np.where(inside, n, 0).astype(a.dtype)), outside).astype(a.dtype)


def python_mod(a, b):
    """Remainder with the sign of the divisor (Python's %); for floats a zero remainder
    takes the divisor's sign, as NumPy's remainder."""
    return np.remainder(a, b)


# -- casts -------------------------------------------------------------------------------------------


def _float_to_int(x, dst: DType):
    x = np.asarray(x)
    if _narrow(x.dtype):
        x = x.astype(F32)  # exact
    t = np.trunc(np.nan_to_num(x.astype(F64), nan=0.0, posinf=np.inf, neginf=-np.inf))
    low, high = float(dst.min), float(dst.max)
    if dst.bits < 64:
        return np.clip(t, low, high).astype(dst.numpy)
    # 2**63 - 1 and 2**64 - 1 round up to a power of two in float64: clip below it, fix the top
    top = float(2 ** (63 if dst.is_signed else 64))
    over = t >= top
    clipped = np.clip(t, low, np.nextafter(top, 0)).astype(dst.numpy)
    return np.where(over, dst.numpy.type(dst.max), clipped)


def _int_to_narrow_float(x, src: DType, dst: DType):
    """An integer rounded once to a type that computes in f32: through f32 exactly when the
    integer fits in 24 bits, else rounded to odd in f32 (24 >= 8 + 2 bits) and then to the type."""
    r = np.asarray(x).astype(F32)
    if src.bits <= f32.format.mantissa + 1 or dst.max < 2.0 ** (f32.format.mantissa + 1):
        return r.astype(dst.numpy)  # exact, or far past the type's range (f16, fp8)
    x = np.asarray(x)
    back = _float_to_int(r, src)
    limit = float(2 ** (src.bits - 1 if src.is_signed else src.bits))
    above = (r >= limit) | (back > x)
    below = back < x
    bits = r.view(np.int32).copy()
    toward_zero = np.where(r > 0, above, below)  # the exact value is nearer zero than r
    step = np.where(toward_zero, -1, 1)
    fix = (above | below) & ((bits & 1) == 0)
    return np.where(fix, bits + step, bits).astype(np.int32).view(F32).astype(dst.numpy)


def bitcast(x, dst: DType):
    """The bits of ``x`` read as ``dst`` (a type of the same width)."""
    return np.ascontiguousarray(x).view(dst.numpy)


def cast(x, src: DType, dst: DType):
    x = np.asarray(x)
    if src == dst:
        return x
    if dst.is_bool:
        return x != 0
    if src.is_bool:
        return x.astype(dst.numpy)
    if src.is_float and dst.is_int:
        return _float_to_int(x, dst)
    if src.is_int and dst.is_float and _narrow(dst.numpy):
        return _int_to_narrow_float(x, src, dst)
    with np.errstate(all="ignore"):
        return x.astype(dst.numpy)  # int to int wraps; floats round to nearest even


__all__ = ["rounded", "math_function", "MATH64", "maximum", "minimum", "fma", "shift_left", "shift_right",
           "python_mod", "cast", "bitcast"]
