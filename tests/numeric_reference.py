"""Independent references for the test suite: exact rounding of rational values to each
float type, ulps, and each dtype's interesting values.  Nothing here uses accy's numerics."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from accy.dsl.types import DType


def _bits_type(dtype: np.dtype):
    return {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[dtype.itemsize]


def _step(x, dtype: np.dtype, delta: int):
    """The value ``delta`` steps of the bit pattern away from ``x`` (adjacent magnitudes)."""
    bits = np.array(x, dtype).view(_bits_type(dtype)).astype(np.int64) + delta
    return np.array(bits).astype(_bits_type(dtype)).view(dtype)[()]


def round_to(value, dtype: np.dtype):
    """``value`` (a Fraction, int or float) rounded to nearest-even in ``dtype``, exactly."""
    import ml_dtypes

    dtype = np.dtype(dtype)
    if isinstance(value, float) and (not math.isfinite(value) or value == 0):
        return np.array(value).astype(dtype)[()]  # infinities, NaN and signed zeros as they are
    value = Fraction(value)
    biggest = np.array(ml_dtypes.finfo(dtype).max, dtype)[()]
    ulp_top = Fraction(float(biggest)) - Fraction(float(_step(biggest, dtype, -1)))
    if abs(value) >= Fraction(float(biggest)) + ulp_top / 2:  # past the last rounding boundary
        return np.array(math.inf if value > 0 else -math.inf, np.float64).astype(dtype)[()]
    approx = np.array(float(value), np.float64).astype(dtype)[()]  # at most one step off
    candidates = []
    for delta in (-1, 0, 1):
        c = _step(approx, dtype, delta)
        if np.isfinite(c):
            bits = int(np.array(c, dtype).view(_bits_type(dtype)))
            candidates.append((abs(Fraction(float(c)) - value), bits & 1, c))
    result = min(candidates, key=lambda t: (t[0], t[1]))[2]
    if result == 0:  # a tiny value rounds to a zero of its own sign
        result = np.array(-0.0 if value < 0 else 0.0, np.float64).astype(dtype)[()]
    return result


def ulps(got, reference, dtype: np.dtype) -> np.ndarray:
    """|got - reference| in units of the last place of ``dtype`` at the reference (0 where both are
    the same non-finite value)."""
    dtype = np.dtype(dtype)
    reference = np.asarray(reference)
    wide = np.longdouble if reference.dtype == np.longdouble else np.float64  # f64 needs a wider reference
    reference = reference.astype(wide)
    got = np.asarray(got).astype(wide)
    with np.errstate(all="ignore"):
        nearest = reference.astype(dtype)
    bits = nearest.view(_bits_type(dtype)).astype(np.int64)
    with np.errstate(all="ignore"):
        above = (bits + 1).astype(_bits_type(dtype)).view(dtype).astype(wide)
        below = (bits - 1).astype(_bits_type(dtype)).view(dtype).astype(wide)
        near = nearest.astype(wide)
        spacing = np.where(np.isfinite(above - near), np.abs(above - near), np.abs(near - below))
        error = np.abs(got - reference) / spacing
    # equal, both NaN, or an infinity where the reference rounds to it (overflow)
    same = (got == reference) | (np.isnan(got) & np.isnan(reference)) | (np.isinf(got) & (got == near))
    return np.where(same, 0.0, np.where(np.isnan(error), np.inf, error)).astype(np.float64)


def edges(t: DType) -> list:
    """Values that probe each type's corners."""
    if t.is_bool:
        return [False, True]
    if t.is_int:
        values = [0, 1, -1, 2, -2, 7, -7, t.max, t.min, t.max - 1, t.min + 1, 100, -100, 3, 13]
        return [v for v in values if t.min <= v <= t.max]
    info = np.finfo(t.numpy)
    return [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.25, 1e-3, -7.0, float(info.max), -float(info.max),
            float(info.tiny), float(info.smallest_subnormal), math.inf, -math.inf, math.nan, 100.5, -0.75]


def values(t: DType, n: int, rng) -> np.ndarray:
    """``n`` values of ``t``: its edges first, then random ones of moderate size."""
    if t.is_bool:
        out = rng.integers(0, 2, n).astype(bool)
    elif t.is_int:
        lo, hi = max(t.min, -(2**40)), min(t.max, 2**40)
        out = rng.integers(lo, hi, n, endpoint=True, dtype=np.int64 if t.is_signed else np.uint64).astype(t.numpy)
        small = rng.integers(max(t.min, -50), min(t.max, 50) + 1, n // 2).astype(t.numpy)
        out[n - n // 2:] = small
    else:
        with np.errstate(all="ignore"):
            out = (rng.standard_normal(n) * 8).astype(t.numpy)
    e = edges(t)
    with np.errstate(all="ignore"):
        out[:len(e)] = np.array(e, dtype=object).astype(np.float64 if t.is_float else object).astype(t.numpy)
    return out
