"""Reductions, scans and dot products over stacks of tiles, ``(P, *tile_shape)`` arrays (the
tile interpreter's, :mod:`.tile_interpreter`): each result as the scalar op folded, or rounded
as the GPU rounds it (tf32 inputs)."""

from __future__ import annotations

import numpy as np

from ...dsl.combines import COMBINES, Combine
from ...dsl.ops import Precision
from . import numerics

F32 = np.dtype(np.float32)


# ----------------------------------------------------------------------------- reductions


def _as_f32(x: np.ndarray) -> tuple[np.ndarray, bool]:
    """f16, bf16 and fp8 elements as f32 (exactly), and whether they were converted."""
    if numerics._narrow(x.dtype):
        return x.astype(F32), True
    return x, False


def _zero_signs(result: np.ndarray, x: np.ndarray, combine: Combine, axis: int, running: bool) -> np.ndarray:
    """Max and min order -0.0 below +0.0, as the scalar max and min (numerics.maximum):
    NumPy's ufuncs keep whichever zero comes second.  A zero result of max is +0.0 if any
    +0.0 took part, of min -0.0 if any -0.0 did (over the prefix, for a scan)."""
    zero = result == 0
    if result.dtype.kind != "f" or not np.any(zero):
        return result
    wanted = (x == 0) & (np.signbit(x) == (combine is Combine.MIN))  # the zero that wins ties
    seen = np.logical_or.accumulate(wanted, axis=axis) if running else np.any(wanted, axis=axis)
    winner, loser = (0.0, -0.0) if combine is Combine.MAX else (-0.0, 0.0)
    return np.where(zero, np.where(seen, winner, loser).astype(result.dtype), result)


def reduce_along(x: np.ndarray, combine: Combine, axis: int, *, running: bool = False) -> np.ndarray:
    """``x`` reduced (``running``: scanned) along ``axis`` with ``combine``, as the scalar op
    folded: integers wrap; f16, bf16 and fp8 compute in f32 (exact for max and min) and each
    result rounds once to the element type."""
    dtype = x.dtype
    y, widened = _as_f32(x)
    ufunc = COMBINES[combine].ufunc
    kwargs = {} if widened or dtype.kind == "b" else {"dtype": dtype}  # integers accumulate in their type
    result = (ufunc.accumulate if running else ufunc.reduce)(y, axis=axis, **kwargs)
    if COMBINES[combine].orders:
        result = _zero_signs(result, y, combine, axis, running)
    return result.astype(dtype, copy=False)


def arg_along(x: np.ndarray, combine: Combine, axis: int) -> np.ndarray:
    """np.argmax / np.argmin along ``axis``: the first of equals, the first NaN if any."""
    y, _ = _as_f32(x)
    return COMBINES[combine].arg_reference(y, axis=axis).astype(np.int64, copy=False)


# ----------------------------------------------------------------------------- dot


def round_to_tf32(x: np.ndarray) -> np.ndarray:
    """f32 values rounded to tf32 as ``cvt.rna.tf32.f32``: 10 mantissa bits, to nearest, ties
    away from zero (on the bits: add half of the dropped part, then drop it); NaN and
    infinities unchanged."""
    bits = np.ascontiguousarray(x, F32).view(np.uint32)
    finite = (bits & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
    rounded = (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    return np.where(finite, rounded, bits).view(F32)


def dot(a: np.ndarray, b: np.ndarray, acc: np.ndarray, precision: Precision) -> np.ndarray:
    """``acc + a @ b`` over stacks of programs: inputs converted exactly to the accumulator's
    type, products and sums in it (integers wrap in i32)."""
    c = acc.dtype
    if precision is Precision.TF32:
        a, b = round_to_tf32(a), round_to_tf32(b)
    a, b = a.astype(c, copy=False), b.astype(c, copy=False)
    if a.shape[0] == 1 and b.shape[0] == 1:  # the same in every program: one product
        product = (a[0] @ b[0])[None]
    else:
        product = np.matmul(a, b)
    return np.add(acc, product, dtype=c)
