"""Exact floating-point arithmetic on NumPy arrays: what NumPy lacks to give,
bit for bit, the results PTX defines.

NumPy computes +, -, *, / and sqrt in float32 and float64 rounded to nearest
even, which is what ``.rn`` asks for.  Everything else is built here:

* ``fma.rn.f32``: the product of two f32 is exact in f64; the sum is made
  *round-to-odd* (an error-free TwoSum tells whether it was exact) so that the
  final rounding to f32 (any mode) is a single correct rounding.
* ``fma.rn.f64``: Dekker's exact product and Boldo-Melquiond's round-to-odd
  emulation of FMA; inputs whose exponents would make the splitting inexact
  (or overflow) take an exact path through Python's rationals.
* directed roundings ``.rz .rm .rp`` for add/sub/mul/div/sqrt/fma and
  conversions: from the round-to-nearest result and the sign of the exact error.
* f16 / bf16 arithmetic computed exactly (or round-to-odd) in f64 and rounded
  once; bf16 is held as its uint16 bit pattern.
* ``.ftz`` flushing of subnormal inputs and outputs to sign-preserving zero,
  float-to-integer conversions with saturation and NaN -> 0, and the rest of
  the conversions.

NaN results: an f32 arithmetic instruction returns the canonical NaN 0x7fffffff
(and f16/bf16 ones 0x7fff) whatever the inputs' payloads; NumPy propagates
payloads instead, so every f32/f16 arithmetic result goes through
:func:`canon_f32` / :func:`canon_f16`.  Moves, loads, stores, ``selp`` and
``copysign`` keep bits unchanged, as on the GPU.  f64 NaNs are left as IEEE/x86
propagate them (the CUDA documentation does not pin them down).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

U8, U16, U32, U64 = np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.uint32), np.dtype(np.uint64)
I8, I16, I32, I64 = np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32), np.dtype(np.int64)
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
BOOL = np.dtype(np.bool_)

CANON_F32 = np.uint32(0x7FFFFFFF)
CANON_F16 = np.uint16(0x7FFF)
CANON_BF16 = np.uint16(0x7FFF)
_F32_TINY = np.float32(2.0 ** -126)
_F64_TINY = 2.0 ** -1022
_F16_TINY = np.float16(2.0 ** -14)

# -- NaN canonicalisation -------------------------------------------------------------------


def canon_f32(x):
    """f32 values with every NaN replaced by the GPU's canonical NaN (0x7fffffff): what an
    f32 arithmetic instruction returns for any NaN result.  (One reduction when there is none.)"""
    if np.ndim(x) == 0:
        return np.uint32(CANON_F32).view(F32) if x != x else x
    if x.size == 0 or x.max() == x.max():
        return x
    x = x.copy()
    x.view(U32)[np.isnan(x)] = CANON_F32
    return x


def canon_f16(x):
    if np.ndim(x) == 0:
        return np.uint16(CANON_F16).view(F16) if x != x else x
    if x.size == 0 or x.max() == x.max():
        return x
    x = x.copy()
    x.view(U16)[np.isnan(x)] = CANON_F16
    return x


def f32_bits(x):
    """The bit pattern of f32 values, NaNs canonical."""
    return canon_f32(x).view(U32) if np.ndim(x) else np.asarray(canon_f32(x)).view(U32)[()]


def f16_bits(x):
    return canon_f16(x).view(U16) if np.ndim(x) else np.asarray(canon_f16(x)).view(U16)[()]


# -- bf16 (held as uint16 bits) -------------------------------------------------------------


def bf16_to_f32(bits):
    """bf16 bit patterns (uint16) to f32 values (exact)."""
    if np.ndim(bits) == 0:
        return np.uint32(int(bits) << 16).view(F32)
    return (bits.astype(U32) << np.uint32(16)).view(F32)


def ro_f64_to_f32(x):
    """f64 -> f32 rounded to odd (a sticky last bit), so that a second rounding to a
    narrower format is correct.  NaN stays NaN."""
    y = np.asarray(x, F64).astype(F32)
    back = y.astype(F64)
    inexact = (back != x) & ~np.isnan(back)
    bits = y.view(U32).copy() if y.ndim else np.asarray(y).reshape(1).view(U32).copy()
    flat_inexact = np.asarray(inexact).reshape(bits.shape)
    even = (bits & np.uint32(1)) == 0
    fix = flat_inexact & even
    if fix.any():
        down = np.asarray(np.abs(back) > np.abs(x)).reshape(bits.shape)  # y is further from 0 than x
        bits[fix & down] -= np.uint32(1)
        bits[fix & ~down] += np.uint32(1)
    out = bits.view(F32)
    return out if y.ndim else out[0]


def f32_to_bf16_bits(x, mode: str = "rn"):
    """f32 values to bf16 bit patterns with the rounding ``mode``; NaN -> canonical."""
    x = np.asarray(x, F32)
    bits = x.view(U32).astype(U32)
    nan = np.isnan(x)
    if mode == "rn":
        r = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    else:
        trunc = bits >> np.uint32(16)
        rem = (bits & np.uint32(0xFFFF)) != 0
        neg = (bits >> np.uint32(31)) != 0
        finite = np.isfinite(x)
        if mode == "rz":
            r = trunc
        elif mode == "rm":
            r = trunc + (rem & neg & finite).astype(U32)
        elif mode == "rp":
            r = trunc + (rem & ~neg & finite).astype(U32)
        else:
            raise ValueError(mode)
    r = r.astype(U16)
    if np.ndim(r) == 0:
        return np.uint16(CANON_BF16) if nan else r[()]
    r[nan] = CANON_BF16
    return r


def f64_to_bf16_bits(x, mode: str = "rn"):
    return f32_to_bf16_bits(ro_f64_to_f32(np.asarray(x, F64)), mode)


# -- error-free transforms and round-to-odd -------------------------------------------------------


def two_sum(a, b):
    """s = RN(a + b) and the exact error e = a + b - s (when nothing overflows)."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


_SPLIT = 134217729.0  # 2**27 + 1


def _split(a):
    c = _SPLIT * a
    hi = c - (c - a)
    return hi, a - hi


def two_prod(a, b):
    """p = RN(a * b) and the exact error (valid when the exponents are in range)."""
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


def make_odd(s, e):
    """Round-to-odd from (s = RN(x), sign of e = x - s): if x was inexact and s has an
    even last bit, step s one ulp toward x (giving the odd neighbour)."""
    s = np.asarray(s, F64)
    fix = (e != 0) & np.isfinite(s)
    if not fix.any():
        return s
    bits = s.view(U64).copy() if s.ndim else np.asarray(s).reshape(1).view(U64).copy()
    fix = np.asarray(fix).reshape(bits.shape) & ((bits & np.uint64(1)) == 0)
    if fix.any():
        away = np.asarray((e > 0) == (s > 0)).reshape(bits.shape)  # x is further from zero than s
        bits[fix & away] += np.uint64(1)
        bits[fix & ~away] -= np.uint64(1)
    out = bits.view(F64)
    return out if s.ndim else out[0]


def ro_add(a, b):
    """a + b rounded to odd (f64 arrays)."""
    s, e = two_sum(a, b)
    return make_odd(s, e)


# -- rounding to a format with a mode -------------------------------------------------------------


def _step(y, toward):
    """``np.nextafter`` for f16/f32/f64 arrays (elementwise toward ``toward``)."""
    return np.nextafter(y, np.asarray(toward, y.dtype))


def round_f64(x, dtype, mode: str):
    """Round f64 values ``x`` (exact or round-to-odd) to ``dtype`` (f16, f32) with ``mode``."""
    y = np.asarray(x, F64).astype(dtype)
    if mode == "rn":
        return y
    back = y.astype(F64)
    if mode == "rz":
        fix = np.abs(back) > np.abs(x)
        target = 0.0
        return np.where(fix, _step(y, np.zeros_like(y)), y) if np.ndim(y) else (_step(y, target) if fix else y)
    if mode == "rm":
        fix = back > x
        return np.where(fix, _step(y, np.full_like(y, -np.inf)), y) if np.ndim(y) else (
            _step(y, -np.inf) if fix else y)
    if mode == "rp":
        fix = back < x
        return np.where(fix, _step(y, np.full_like(y, np.inf)), y) if np.ndim(y) else (
            _step(y, np.inf) if fix else y)
    raise ValueError(mode)


def directed_f64(s, e, mode: str, overflowed=None):
    """Round the exact value s + e (s = RN of it) to f64 with ``mode``."""
    if mode == "rn":
        return s
    s = np.asarray(s, F64)
    inf = np.full_like(s, np.inf)
    if mode == "rm":
        out = np.where(e < 0, np.nextafter(s, -inf), s)
    elif mode == "rp":
        out = np.where(e > 0, np.nextafter(s, inf), s)
    elif mode == "rz":
        out = np.where((e != 0) & ((e < 0) == (s > 0)), np.nextafter(s, np.zeros_like(s)), s)
    else:
        raise ValueError(mode)
    if overflowed is not None and np.any(overflowed):
        big = np.finfo(F64).max
        pos = s > 0
        if mode == "rz":
            repl = np.where(pos, big, -big)
        elif mode == "rm":
            repl = np.where(pos, big, -np.inf)
        else:
            repl = np.where(pos, np.inf, -big)
        out = np.where(overflowed, repl, out)
    return out


# -- exact rational fallback ----------------------------------------------------------------------


_FORMATS = {  # precision (with the hidden bit), minimum normal exponent, maximum exponent
    "f64": (53, -1022, 1023), "f32": (24, -126, 127), "f16": (11, -14, 15), "bf16": (8, -126, 127),
}


def round_fraction(q: Fraction, fmt: str, mode: str, negative_zero: bool = False) -> float:
    """The value of the rational ``q`` rounded to ``fmt`` with ``mode`` (as a Python float,
    which holds every value of these formats exactly)."""
    p, emin, emax = _FORMATS[fmt]
    if q == 0:
        return -0.0 if negative_zero else 0.0
    sign = -1 if q < 0 else 1
    m = abs(q)
    e = m.numerator.bit_length() - m.denominator.bit_length()
    if Fraction(2) ** e > m:
        e -= 1
    quantum = max(e, emin) - (p - 1)
    scaled = m / (Fraction(2) ** quantum)
    n = scaled.numerator // scaled.denominator
    rem = scaled - n
    if rem:
        if mode == "rn":
            if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2 == 1):
                n += 1
        elif mode == "rz":
            pass
        elif (mode == "rp" and sign > 0) or (mode == "rm" and sign < 0):
            n += 1
        elif mode not in ("rp", "rm"):
            raise ValueError(mode)
    largest = math.ldexp((1 << p) - 1, emax - p + 1)
    if n and quantum + n.bit_length() - 1 > emax:
        overflow = True
    else:
        value = math.ldexp(n, quantum)
        overflow = value > largest
    if overflow:
        if mode == "rn" or (mode == "rp" and sign > 0) or (mode == "rm" and sign < 0):
            value = math.inf
        else:
            value = largest
    return sign * value


def fma_exact(a: float, b: float, c: float, fmt: str, mode: str) -> float:
    """fma of Python floats through rationals (special values handled as IEEE does)."""
    if not (math.isfinite(a) and math.isfinite(b)):
        return a * b + c  # the exact product is infinite or NaN
    if not math.isfinite(c):
        return c
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:
        prod_neg = (math.copysign(1, a) * math.copysign(1, b)) < 0
        c_neg = math.copysign(1, c) < 0
        if mode == "rm":
            neg = prod_neg or c_neg
        else:
            neg = prod_neg and c_neg
        return -0.0 if neg else 0.0
    return round_fraction(exact, fmt, mode)


# -- f32 ----------------------------------------------------------------------------------------------


def ftz32(x):
    """Flush f32 subnormals to sign-preserving zero."""
    if np.ndim(x) == 0:
        return np.float32(math.copysign(0.0, x)) if 0 < abs(x) < _F32_TINY else x
    small = np.abs(x) < _F32_TINY
    return np.where(small, np.copysign(np.float32(0), x), x)


def ftz64(x):
    if np.ndim(x) == 0:
        return math.copysign(0.0, x) if 0 < abs(x) < _F64_TINY else x
    small = np.abs(x) < _F64_TINY
    return np.where(small, np.copysign(0.0, x), x)


def ftz16(x):
    if np.ndim(x) == 0:
        return np.float16(math.copysign(0.0, x)) if 0 < abs(x) < _F16_TINY else x
    small = np.abs(x) < _F16_TINY
    return np.where(small, np.copysign(np.float16(0), x), x)


def _zero_sign_rm(r, a, b):
    """Under round-toward-minus-infinity an exact zero sum is -0 unless both addends are +0."""
    zero = r == 0
    if not np.any(zero):
        return r
    both_pos = ~np.signbit(a) & ~np.signbit(b)
    return np.where(zero & ~both_pos, -np.abs(r), r)


def add_f32(a, b, mode="rn"):
    if mode == "rn":
        return np.add(a, b, dtype=F32)
    a64, b64 = np.float64(a) if np.ndim(a) == 0 else a.astype(F64), np.float64(b) if np.ndim(b) == 0 else b.astype(F64)
    r = round_f64(ro_add(a64, b64), F32, mode)
    return _zero_sign_rm(r, a, b) if mode == "rm" else r


def sub_f32(a, b, mode="rn"):
    return add_f32(a, -b if np.ndim(b) else np.float32(-b), mode)


def mul_f32(a, b, mode="rn"):
    if mode == "rn":
        return np.multiply(a, b, dtype=F32)
    p = np.multiply(np.asarray(a, F64), np.asarray(b, F64))  # exact
    return round_f64(p, F32, mode)


def fma_f32(a, b, c, mode="rn"):
    a64, b64, c64 = (np.asarray(v, F64) for v in (a, b, c))
    p = a64 * b64  # exact: 48 significant bits, no overflow or underflow in f64
    s = ro_add(p, c64)
    r = round_f64(s, F32, mode)
    if mode == "rm":
        r = _exact_zero_rm(r, s, p, c64)
    return r


def _exact_zero_rm(r, s, x, y):
    """Round-toward-minus-infinity: an exact zero sum x + y is -0 unless both are +0."""
    zero = s == 0
    if not np.any(zero):
        return r
    both_pos = ~np.signbit(x) & ~np.signbit(y)
    return np.where(zero & ~both_pos, -np.abs(r), r)


def div_f32(a, b, mode="rn"):
    q = np.divide(np.asarray(a, F64), np.asarray(b, F64))  # exact quotient or strictly inside an f32 interval
    return round_f64(q, F32, mode)


def sqrt_f32(a, mode="rn"):
    a = np.asarray(a, F32)
    y = np.sqrt(a)
    if mode == "rn":
        return y
    y64 = y.astype(F64)
    sq = y64 * y64  # exact
    a64 = a.astype(F64)
    if mode in ("rz", "rm"):
        return np.where(np.isfinite(y) & (sq > a64), np.nextafter(y, np.float32(0)), y)
    return np.where(np.isfinite(y) & (sq < a64), np.nextafter(y, np.float32(np.inf)), y)


def rcp_f32(a, mode="rn"):
    return div_f32(np.float32(1), a, mode)


# -- f64 ----------------------------------------------------------------------------------------------


def _frexp_exp(x):
    return np.frexp(x)[1]


def add_f64(a, b, mode="rn"):
    a, b = np.asarray(a, F64), np.asarray(b, F64)
    s = a + b
    if mode == "rn":
        return s
    _, e = two_sum(a, b)
    over = np.isinf(s) & np.isfinite(a) & np.isfinite(b)
    e = np.where(np.isfinite(s), e, 0.0)
    r = directed_f64(s, e, mode, over)
    return _zero_sign_rm(r, a, b) if mode == "rm" else r


def sub_f64(a, b, mode="rn"):
    return add_f64(a, -np.asarray(b, F64), mode)


def _elementwise_exact(mask, fn, *arrays):
    """Apply a Python-float function to the elements where ``mask`` is set."""
    out = {}
    idx = np.flatnonzero(mask)
    cols = [np.broadcast_to(np.asarray(a, F64), np.shape(mask)).reshape(-1) for a in arrays]
    for i in idx:
        out[i] = fn(*(float(c[i]) for c in cols))
    return idx, np.array([out[i] for i in idx], F64)


def mul_f64(a, b, mode="rn"):
    a, b = np.asarray(a, F64), np.asarray(b, F64)
    p = a * b
    if mode == "rn":
        return p
    shape = np.broadcast(a, b).shape
    ea, eb = _frexp_exp(a), _frexp_exp(b)
    safe = np.isfinite(a) & np.isfinite(b) & (ea + eb > -960) & (np.abs(a) < 2.0 ** 995) & (np.abs(b) < 2.0 ** 995)
    safe |= ~(np.isfinite(a) & np.isfinite(b)) | (a == 0) | (b == 0)
    _, e = two_prod(a, b)
    e = np.where(np.isfinite(p), e, 0.0)
    over = np.isinf(p) & np.isfinite(a) & np.isfinite(b)
    r = np.array(directed_f64(p, e, mode, over), F64).reshape(shape)
    bad = ~np.broadcast_to(safe, shape)
    if bad.any():
        idx, vals = _elementwise_exact(bad, lambda x, y: round_fraction(Fraction(x) * Fraction(y), "f64", mode,
                                                                         (x < 0) != (y < 0)), a, b)
        r = r.reshape(-1)
        r[idx] = vals
        r = r.reshape(shape)
    return r if r.ndim else r[()]


def fma_f64(a, b, c, mode="rn"):
    """Correctly rounded a * b + c in f64 (Boldo-Melquiond's emulation with round-to-odd,
    and an exact rational path for extreme exponents, non-finite products and directed modes)."""
    a, b, c = np.asarray(a, F64), np.asarray(b, F64), np.asarray(c, F64)
    shape = np.broadcast(a, b, c).shape
    a, b, c = (np.broadcast_to(v, shape) for v in (a, b, c))
    finite = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
    ea, eb = _frexp_exp(a), _frexp_exp(b)
    zero_prod = (a == 0) | (b == 0)
    fast = finite & (((ea + eb > -960) & (ea + eb < 1000) & (np.abs(a) < 2.0 ** 995) & (np.abs(b) < 2.0 ** 995)
                      & (np.abs(c) < 2.0 ** 1000)) | zero_prod)
    uh, ul = two_prod(a, b)
    th, tl = two_sum(c, uh)
    v = ro_add(tl, ul)
    r = np.where(v == 0, th, th + v)
    # a zero product is exact, and the plain sum has IEEE's sign (two_prod's splits of a huge
    # other factor would overflow to NaN)
    r = np.where(zero_prod, a * b + c, r)
    if mode != "rn":
        fast = np.zeros(shape, bool)
    special = ~finite
    if special.any():
        # a non-finite operand: the exact product is finite when a and b are, so c decides
        naive = a * b + c
        prod_finite = np.isfinite(a) & np.isfinite(b)
        r = np.where(special, np.where(prod_finite & ~np.isnan(c), c, naive), r)
        fast |= special
    slow = ~fast
    if slow.any():
        idx, vals = _elementwise_exact(slow, lambda x, y, z: fma_exact(x, y, z, "f64", mode), a, b, c)
        r = np.array(r, F64).reshape(-1)
        r[idx] = vals
        r = r.reshape(shape)
    return r if np.ndim(r) else np.float64(r)


def div_f64(a, b, mode="rn"):
    a, b = np.asarray(a, F64), np.asarray(b, F64)
    q = a / b
    if mode == "rn":
        return q
    shape = q.shape
    a, b = np.broadcast_to(a, shape), np.broadcast_to(b, shape)
    ph, pl = two_prod(q, b)
    rem = (a - ph) - pl  # sign of a - q * b
    sign = np.sign(rem) * np.sign(b)
    finite = np.isfinite(q) & np.isfinite(a) & np.isfinite(b) & (b != 0)
    eq, eb = _frexp_exp(q), _frexp_exp(b)
    safe = ~finite | (a == 0) | ((eq + eb > -960) & (np.abs(q) < 2.0 ** 995) & (np.abs(b) < 2.0 ** 995))
    e = np.where(finite, sign, 0.0)
    over = np.isinf(q) & np.isfinite(a) & np.isfinite(b) & (b != 0)
    r = np.array(directed_f64(q, e, mode, over), F64).reshape(shape)
    if (~safe).any():
        idx, vals = _elementwise_exact(~safe, lambda x, y: round_fraction(Fraction(x) / Fraction(y), "f64", mode,
                                                                          (x < 0) != (y < 0)), a, b)
        r = r.reshape(-1)
        r[idx] = vals
        r = r.reshape(shape)
    return r if r.ndim else r[()]


def sqrt_f64(a, mode="rn"):
    a = np.asarray(a, F64)
    y = np.sqrt(a)
    if mode == "rn":
        return y
    ph, pl = two_prod(y, y)
    d = (ph - a) + pl  # sign of y*y - a
    ok = np.isfinite(y) & (y > 0) & (np.abs(y) > 2.0 ** -480)
    if mode in ("rz", "rm"):
        r = np.where(ok & (d > 0), np.nextafter(y, 0.0), y)
    else:
        r = np.where(ok & (d < 0), np.nextafter(y, np.inf), y)
    bad = np.isfinite(y) & (y > 0) & (np.abs(y) <= 2.0 ** -480)
    if np.any(bad):
        r = np.array(r, F64).reshape(-1)
        for i in np.flatnonzero(np.asarray(bad).reshape(-1)):
            x = float(np.asarray(a).reshape(-1)[i])
            yy = float(np.asarray(y).reshape(-1)[i])
            sq = Fraction(yy) ** 2
            if (mode in ("rz", "rm") and sq > Fraction(x)):
                yy = float(np.nextafter(yy, 0.0))
            elif mode == "rp" and sq < Fraction(x):
                yy = float(np.nextafter(yy, np.inf))
            r[i] = yy
        r = r.reshape(np.shape(y))
    return r


def rcp_f64(a, mode="rn"):
    return div_f64(1.0, a, mode)


def approx_hi_f64(x):
    """Keep the high 32 bits of f64 values (what the hardware's 64-bit approximate
    reciprocal and reciprocal square root return: about 20 significant bits)."""
    x = np.asarray(x, F64)
    bits = x.view(U64) if x.ndim else x.reshape(1).view(U64)
    out = (bits & np.uint64(0xFFFFFFFF00000000)).view(F64)
    return out if x.ndim else out[0]


# -- f16 ----------------------------------------------------------------------------------------------


def _round16(x64, mode):
    return round_f64(x64, F16, mode)


def add_f16(a, b, mode="rn"):
    r = _round16(np.asarray(a, F64) + np.asarray(b, F64), mode)  # the f64 sum of two f16 is exact
    return _zero_sign_rm(r, a, b) if mode == "rm" else r


def sub_f16(a, b, mode="rn"):
    return add_f16(a, -np.asarray(b), mode)


def mul_f16(a, b, mode="rn"):
    return _round16(np.asarray(a, F64) * np.asarray(b, F64), mode)


def fma_f16(a, b, c, mode="rn"):
    p = np.asarray(a, F64) * np.asarray(b, F64)
    c64 = np.asarray(c, F64)
    s = ro_add(p, c64)
    r = _round16(s, mode)
    return _exact_zero_rm(r, s, p, c64) if mode == "rm" else r


# -- bf16 (bits in, bits out) --------------------------------------------------------------------


def _bf(x):
    return bf16_to_f32(x).astype(F64)


def add_bf16(a, b, mode="rn"):
    a64, b64 = _bf(a), _bf(b)
    s = ro_add(a64, b64)
    if mode == "rm":
        s = _exact_zero_rm(s, s, a64, b64)
    return f64_to_bf16_bits(s, mode)


def sub_bf16(a, b, mode="rn"):
    return add_bf16(a, np.asarray(b, U16) ^ np.uint16(0x8000), mode)


def mul_bf16(a, b, mode="rn"):
    return f64_to_bf16_bits(_bf(a) * _bf(b), mode)


def fma_bf16(a, b, c, mode="rn"):
    p = _bf(a) * _bf(b)
    c64 = _bf(c)
    s = ro_add(p, c64)
    if mode == "rm":
        s = _exact_zero_rm(s, s, p, c64)
    return f64_to_bf16_bits(s, mode)


def ftz_bf16(bits):
    """Flush bf16 subnormals (bits) to sign-preserving zero."""
    bits = np.asarray(bits, U16)
    sub = ((bits & np.uint16(0x7F80)) == 0) & ((bits & np.uint16(0x7F)) != 0)
    return np.where(sub, bits & np.uint16(0x8000), bits).astype(U16)


# -- min / max ---------------------------------------------------------------------------------------


def fmin(a, b, nan_propagate: bool = False):
    """PTX min for floats: a NaN operand is ignored (the other is returned) unless both are
    NaN, or ``.NaN`` is given (then any NaN gives NaN); -0.0 is less than +0.0."""
    r = np.minimum(a, b) if nan_propagate else np.fmin(a, b)
    zero = r == 0
    if np.any(zero):
        neg_zero = ((a == 0) & np.signbit(a)) | ((b == 0) & np.signbit(b))
        r = np.where(zero, np.where(neg_zero, -np.abs(r), np.abs(r)), r)
    return r


def fmax(a, b, nan_propagate: bool = False):
    """PTX max for floats (see :func:`fmin`); +0.0 is greater than -0.0."""
    r = np.maximum(a, b) if nan_propagate else np.fmax(a, b)
    zero = r == 0
    if np.any(zero):
        pos_zero = ((a == 0) & ~np.signbit(a)) | ((b == 0) & ~np.signbit(b))
        r = np.where(zero, np.where(pos_zero, np.abs(r), -np.abs(r)), r)
    return r


def xorsign_abs(fn, a, b, nan_propagate: bool):
    """min/max of |a| and |b| with the sign of a XOR the sign of b (NaN results stay NaN)."""
    r = fn(np.abs(a), np.abs(b), nan_propagate)
    neg = np.signbit(a) ^ np.signbit(b)
    return np.where(np.isnan(r), r, np.where(neg, -np.abs(r), np.abs(r)))


# -- approximate functions --------------------------------------------------------------------------
# Computed in f64 and rounded once: within half an ulp of the exact result (plus the f64
# function's own tiny error), inside every bound the ISA documents for the .approx forms.


def approx_f32(fn, x):
    return np.asarray(fn(np.asarray(x, F64))).astype(F32)


def approx_f16(fn, x):
    return np.asarray(fn(np.asarray(x, F64))).astype(F16)


def rsqrt_f32(x):
    x64 = np.asarray(x, F64)
    return np.asarray(1.0 / np.sqrt(x64)).astype(F32)


def rsqrt_f64(x):
    x = np.asarray(x, F64)
    return 1.0 / np.sqrt(x)


def div_approx_f32(a, b):
    """div.approx.f32: a * (1/b) to within 2 ulp; for 2**126 < |b| < 2**128 the reciprocal
    underflows and the result is zero (as the ISA documents)."""
    q = np.asarray(np.asarray(a, F64) / np.asarray(b, F64)).astype(F32)
    huge = (np.abs(b) > np.float32(2.0 ** 126)) & np.isfinite(b)
    if np.any(huge):
        q = np.where(huge, np.asarray(a, F32) * np.copysign(np.float32(0), b), q)
    return q


# -- conversions --------------------------------------------------------------------------------------


INT_RANGES = {
    U8: (0, 255), U16: (0, 65535), U32: (0, 2**32 - 1), U64: (0, 2**64 - 1),
    I8: (-128, 127), I16: (-32768, 32767), I32: (-2**31, 2**31 - 1), I64: (-2**63, 2**63 - 1),
}


def float_to_int(x, dtype, irnd: str):
    """Float -> integer: round by ``irnd`` (rni/rzi/rmi/rpi), saturate to the range, NaN -> 0."""
    x = np.asarray(x, F64)
    if irnd == "rni":
        r = np.rint(x)
    elif irnd == "rzi":
        r = np.trunc(x)
    elif irnd == "rmi":
        r = np.floor(x)
    elif irnd == "rpi":
        r = np.ceil(x)
    else:
        raise ValueError(irnd)
    lo, hi = INT_RANGES[np.dtype(dtype)]
    nan = np.isnan(r)
    r = np.where(nan, 0.0, r)
    too_low = r <= float(lo)
    too_high = r >= float(hi)
    inside = np.where(too_low | too_high, 0.0, r)
    if np.dtype(dtype) == U64:
        out = np.where(inside >= 2.0**63, (inside - 2.0**63).astype(I64).astype(U64) + np.uint64(2**63),
                       inside.astype(I64).astype(U64)) if np.ndim(inside) else np.uint64(int(inside))
    else:
        out = inside.astype(I64).astype(dtype) if np.ndim(inside) else np.dtype(dtype).type(int(inside))
    if np.ndim(out) == 0:
        return np.dtype(dtype).type(lo if too_low else hi if too_high else int(out))
    out = np.where(too_low, np.dtype(dtype).type(lo), out)
    out = np.where(too_high, np.dtype(dtype).type(hi), out)
    return out.astype(dtype)


def int_to_f64_ro(x):
    """Integers (any width) to f64, rounded to odd (exactly when they fit in 53 bits)."""
    x = np.asarray(x)
    if x.dtype.itemsize < 8:
        return x.astype(F64)
    if x.dtype == U64:
        hi = (x >> np.uint64(32)).astype(F64) * 4294967296.0
        lo = (x & np.uint64(0xFFFFFFFF)).astype(F64)
    else:
        hi = (x >> np.int64(32)).astype(F64) * 4294967296.0
        lo = (x & np.int64(0xFFFFFFFF)).astype(F64)
    return ro_add(hi, lo)


def int_to_float(x, dtype, mode: str):
    """Integer -> f16/f32/f64 (or "bf16" bits) with rounding ``mode``."""
    x = np.asarray(x)
    if dtype == "bf16":
        return f64_to_bf16_bits(int_to_f64_ro(x), mode)
    dtype = np.dtype(dtype)
    if dtype == F64:
        if x.dtype.itemsize < 8:
            return x.astype(F64)
        if x.dtype == U64:
            hi = (x >> np.uint64(32)).astype(F64) * 4294967296.0
            lo = (x & np.uint64(0xFFFFFFFF)).astype(F64)
        else:
            hi = (x >> np.int64(32)).astype(F64) * 4294967296.0
            lo = (x & np.int64(0xFFFFFFFF)).astype(F64)
        s, e = two_sum(hi, lo)
        return directed_f64(s, e, mode) if mode != "rn" else s
    return round_f64(int_to_f64_ro(x), dtype, mode)


def f64_to_f32(x, mode: str):
    return round_f64(x, F32, mode)


def round_int_float(x, irnd: str):
    """Round to an integral value in the same float format (cvt.rni.f32.f32 ...)."""
    if irnd == "rni":
        return np.rint(x)
    if irnd == "rzi":
        return np.trunc(x)
    if irnd == "rmi":
        return np.floor(x)
    if irnd == "rpi":
        return np.ceil(x)
    raise ValueError(irnd)


def saturate(x):
    """``.sat`` on a float result: clamp to [0, 1], NaN -> +0."""
    one = np.asarray(1, np.asarray(x).dtype)
    zero = np.asarray(0, np.asarray(x).dtype)
    r = np.minimum(np.maximum(x, zero), one)
    r = np.where(np.isnan(x), zero, r)
    # -0.0 clamps to +0.0
    return np.where(r == 0, zero, r)


def relu(x):
    """``.relu``: negative values (-0.0 included) to +0, NaN stays NaN (canonicalised by the caller)."""
    zero = np.asarray(0, np.asarray(x).dtype)
    return np.where(np.isnan(x), x, np.where(np.signbit(x), zero, x))


def exactly_rounded(fn, x, dtype):
    """An elementary function computed in f64 and rounded to ``dtype`` (within half an ulp
    of the f32 result for the functions used here)."""
    return np.asarray(fn(np.asarray(x, F64)), F64).astype(dtype)


def int_saturate(x, dtype):
    """Clamp integers to the range of ``dtype`` (``cvt.sat`` between integer types)."""
    x = np.asarray(x)
    dtype = np.dtype(dtype)
    src_lo, src_hi = INT_RANGES[x.dtype]
    lo, hi = INT_RANGES[dtype]
    if hi < src_hi:
        x = np.minimum(x, x.dtype.type(hi))
    if lo > src_lo:
        x = np.maximum(x, x.dtype.type(lo))
    return x.astype(dtype)


def satfinite(x):
    """``.satfinite``: infinities clamp to the largest finite value of the type; NaN stays NaN."""
    x = np.asarray(x)
    big = np.finfo(x.dtype).max
    return np.where(np.isinf(x), np.copysign(big, x).astype(x.dtype), x).astype(x.dtype)


_BF16_MAX = np.float32(np.uint32(0x7F7F0000).view(F32))


def satfinite_bf16(x):
    x = np.asarray(x, F32)
    return np.where(np.isinf(x), np.copysign(_BF16_MAX, x), x).astype(F32)


def to_tf32(x, mode: str, satfinite_: bool = False):
    """f32 -> tf32 (an f32 bit pattern with the low 13 mantissa bits zero)."""
    x = np.asarray(x, F32)
    bits = x.view(U32).astype(U32)
    if mode == "rna":
        r = (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    elif mode == "rn":
        r = (bits + np.uint32(0xFFF) + ((bits >> np.uint32(13)) & np.uint32(1))) & np.uint32(0xFFFFE000)
    else:
        r = bits & np.uint32(0xFFFFE000)
    r = np.where(np.isinf(x), bits, r)
    if satfinite_:
        big = np.uint32(0x7F7FE000)
        r = np.where((r & np.uint32(0x7FFFFFFF)) == np.uint32(0x7F800000),
                     (r & np.uint32(0x80000000)) | big, r)
    return np.where(np.isnan(x), CANON_F32, r).astype(U32)


# -- sums rounded once (mma) ----------------------------------------------------------------------


def sum_rounded_f32(terms):
    """The exact sum of the float64 ``terms`` along the last axis, rounded once to f32 (to
    nearest even); what ``mma`` computes from its exact products and its accumulator.

    Every term must be exact and below 2**1000 in magnitude (products of f16, bf16 and tf32
    values and f32 accumulators are).  A sum whose terms' significant bits all fit in one
    float64 window (the common case) is exact in float64 in any order, so it is rounded
    straight to f32; any other row is summed exactly as a Shewchuk expansion and rounded to
    odd in float64 first, which makes the final rounding to f32 a single correct one.  A row
    with an infinity or a NaN gets what IEEE arithmetic gives (inf - inf is NaN); an exact
    zero is -0 only when every term is -0."""
    t = np.asarray(terms, F64)
    shape, n = t.shape[:-1], t.shape[-1]
    t = t.reshape(-1, n)
    with np.errstate(all="ignore"):
        out = t.sum(axis=1)
        finite = np.isfinite(t).all(axis=1)
        m, e = np.frexp(np.where(np.isfinite(t), t, 0.0))
        mant = np.abs(m * 2.0 ** 53).astype(np.int64)  # the significand as an integer (0 for 0)
        low = mant & -mant
        nonzero = mant != 0
        trailing = np.log2(np.where(nonzero, low, 1)).astype(np.int64)
        top = np.where(nonzero, e, np.iinfo(np.int64).min).max(axis=1)  # every |term| < 2**top
        bottom = np.where(nonzero, e - 53 + trailing, np.iinfo(np.int64).max).min(axis=1)
        spread = top + int(math.ceil(math.log2(max(n, 1)))) - bottom
        inexact = finite & nonzero.any(axis=1) & (spread > 53)
        if inexact.any():
            out[inexact] = _expansion_sum_to_odd(t[inexact])
        zero = out == 0
        if zero.any():
            negative = ((t == 0) & np.signbit(t)).all(axis=1)
            out[zero] = np.where(negative[zero], -0.0, 0.0)
        return out.astype(F32).reshape(shape)


def _expansion_sum_to_odd(t):
    """Rows of finite float64 terms: their exact sums rounded to odd in float64."""
    parts: list = []  # a nonoverlapping expansion, smallest component first (Shewchuk's Grow-Expansion)
    for j in range(t.shape[1]):
        q = t[:, j]
        grown = []
        for h in parts:
            q, err = two_sum(q, h)
            grown.append(err)
        grown.append(q)
        parts = grown
    # from the largest component down: hi = RN(sum) and the sign of the remainder; the first
    # inexact step decides, since every smaller component is below its error's last bit
    hi = parts[-1].copy()
    rest = np.zeros_like(hi)
    open_ = np.ones(len(hi), bool)
    for h in reversed(parts[:-1]):
        s, err = two_sum(hi, h)
        hi = np.where(open_, s, hi)
        rest = np.where(open_, err, rest)
        open_ &= err == 0
    return make_odd(hi, rest)
