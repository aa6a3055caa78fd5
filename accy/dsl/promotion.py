"""Type promotion: the one table by which operands of different types meet (docs/ir.md,
"Type promotion").

The builder applies it before it records an op, as explicit ``cast`` ops, so the graph's ops
still take operands of one type and every backend computes the same thing. The rules are
Triton's (which are C's for integers), with one exception the language issue asked for:
f16 with bf16 is f32 (neither holds the other's values), where Triton 3.9 gives f16.

Python numbers are weak, as in NumPy 2 and Triton: an int takes the type of the values it
meets, a float takes their float type, and only a float next to integers changes the result's
kind (to f32).
"""

from __future__ import annotations

import math
import numbers
from functools import reduce
from typing import Iterable

import numpy as np

from .types import DType, bf16, f16, f32, f64, index


def promote(a: DType, b: DType) -> DType:
    """The type two operands of types ``a`` and ``b`` compute in."""
    if a == b:
        return a
    if a.is_bool or b.is_bool:  # bool counts as the smallest integer
        return b if a.is_bool else a
    if a.is_float or b.is_float:
        return _float_promote(a, b)
    return _integer_promote(a, b)


def _float_promote(a: DType, b: DType) -> DType:
    for wide in ("f64", "f32"):
        if wide in (a.name, b.name):
            return a if a.name == wide else b
    if {a, b} == {f16, bf16}:
        return f32
    if f16 in (a, b):  # f16 with an integer or an fp8 type
        return f16
    if bf16 in (a, b):  # bf16 with an integer or an fp8 type: as Triton, f32
        return f32
    # an fp8 type with another fp8 type or an integer: f16 holds every fp8 value exactly
    return f16


def _integer_promote(a: DType, b: DType) -> DType:
    """C's usual arithmetic conversions; ``index`` ranks above ``i64`` (a sum with an address
    stays an address)."""
    if a.is_unsigned == b.is_unsigned:
        if a.bits != b.bits:
            return a if a.bits > b.bits else b
        return index if index in (a, b) else a
    unsigned, signed = (a, b) if a.is_unsigned else (b, a)
    return unsigned if unsigned.bits >= signed.bits else signed


def is_weak(x) -> bool:
    """A Python or NumPy number: it takes the type of the values it meets."""
    return isinstance(x, (numbers.Number, np.generic)) and not isinstance(x, (bool, np.bool_))


def computation_type(types: Iterable[DType], weak: Iterable = ()) -> DType | None:
    """The type that values of ``types`` and the weak numbers ``weak`` compute in (None when
    there are neither)."""
    types = list(types)
    common = reduce(promote, types) if types else None
    weak = list(weak)
    fractions = [x for x in weak if not isinstance(x, numbers.Integral)]  # NumPy's integers are Integral
    if fractions:
        if common is None or not common.is_float:  # f64 for a number f32 cannot hold, as Triton's
            common = f32 if all(_f32_holds(float(x)) for x in fractions) else f64
    elif weak and (common is None or common.is_bool):
        common = index
    return common


def _f32_holds(x: float) -> bool:
    """Triton's test: 0, an infinity, NaN or a magnitude in f32's normal range."""
    return x == 0 or not math.isfinite(x) or 2.0**-126 <= abs(x) <= f32.max


def division_type(t: DType, true_division: bool) -> DType:
    """The type ``a / b`` (``true_division``) or ``a % b`` computes in once the operands meet in
    ``t``: as Triton, floats narrower than f32 divide in f32, and ``/`` of integers is f32."""
    if t.is_float:
        return t if t.bits >= 32 else f32
    return f32 if true_division else t


def mixed_signedness(types: Iterable[DType]) -> bool:
    """Integers of both signednesses (``//`` and ``%`` refuse them, as Triton does)."""
    ints = [t for t in types if t.is_int]
    return len({t.is_unsigned for t in ints}) > 1

