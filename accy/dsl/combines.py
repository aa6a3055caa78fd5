"""The combine operations, defined once: what every reduction and scan folds with.

A :class:`CombineRule` holds the facts of one :class:`Combine`: the scalar op that folds two
values (the graph's binary op of that name), its identity for each element type, the NumPy
ufunc that is its reference, which element types it takes, whether it orders values (an arg
reduction), and the names the tile builder spells it by (``t.sum``, ``t.cumsum``).  The tile
builder's methods, the op's type rule, the interpreter, the host's tile lowering and the tile
distribution all read :data:`COMBINES`; a combine added here is a reduction on every backend.
"""

from __future__ import annotations

import enum
import math
from typing import Callable

import attrs
import numpy as np

from .types import DType


class Combine(enum.StrEnum):
    """What a tile reduction or scan combines with (the scalar op of :data:`COMBINES`)."""

    SUM = "sum"
    PROD = "prod"
    MAX = "max"
    MIN = "min"
    AND = "and"
    OR = "or"
    XOR = "xor"


def _zero(dtype: DType):
    return False if dtype.is_bool else 0


def _sum_identity(dtype: DType):
    return -0.0 if dtype.is_float else _zero(dtype)  # x + -0.0 is x for every x, -0.0 too


def _one(dtype: DType):
    return 1.0 if dtype.is_float else 1


def _lowest(dtype: DType):
    """-inf, or the lowest finite value of a float type that has no infinity (e4m3fn)."""
    if dtype.is_float:
        with np.errstate(all="ignore"):
            low = float(np.asarray(-math.inf).astype(dtype.numpy))
        return low if math.isinf(low) else dtype.min
    return False if dtype.is_bool else dtype.min


def _highest(dtype: DType):
    if dtype.is_float:
        with np.errstate(all="ignore"):
            high = float(np.asarray(math.inf).astype(dtype.numpy))
        return high if math.isinf(high) else dtype.max
    return True if dtype.is_bool else dtype.max


def _all_ones(dtype: DType):
    return True if dtype.is_bool else (-1 if dtype.is_signed else dtype.max)


@attrs.frozen
class CombineRule:
    """The facts of one combine operation."""

    combine: Combine
    scalar_op: str  # the graph's binary op that folds two values
    identity: Callable[[DType], object]  # the value that leaves every element as it is
    ufunc: np.ufunc  # the NumPy reference: ufunc.reduce and ufunc.accumulate
    bits_only: bool = False  # integer and bool elements only (bool elements: the bitwise ones only)
    rounds: bool = False  # a float result rounds: narrow floats (f16, bf16, fp8) accumulate in f32
    idempotent: bool = False  # x op x == x: a replica of an element counted twice changes nothing
    orders: bool = False  # picks one of its operands: argmax/argmin reduce with it
    reduction: str | None = None  # the tile builder's reduction method (t.sum), None: none
    scan: str | None = None  # the tile builder's scan method (t.cumsum), None: none
    arg_reduction: str | None = None  # the tile builder's arg reduction (t.argmax), None: none
    arg_reference: Callable | None = None  # its NumPy reference (np.argmax)


COMBINES: dict[Combine, CombineRule] = {rule.combine: rule for rule in (
    CombineRule(Combine.SUM, "add", _sum_identity, np.add, rounds=True, reduction="sum", scan="cumsum"),
    CombineRule(Combine.PROD, "mul", _one, np.multiply, rounds=True, reduction="prod", scan="cumprod"),
    CombineRule(Combine.MAX, "max", _lowest, np.maximum, idempotent=True, orders=True, reduction="max",
                scan="cummax", arg_reduction="argmax", arg_reference=np.argmax),
    CombineRule(Combine.MIN, "min", _highest, np.minimum, idempotent=True, orders=True, reduction="min",
                scan="cummin", arg_reduction="argmin", arg_reference=np.argmin),
    CombineRule(Combine.AND, "and", _all_ones, np.bitwise_and, bits_only=True, idempotent=True),
    CombineRule(Combine.OR, "or", _zero, np.bitwise_or, bits_only=True, idempotent=True),
    CombineRule(Combine.XOR, "xor", _zero, np.bitwise_xor, bits_only=True, reduction="xor_sum"),
)}


def accumulator_type(combine: Combine, dtype: DType) -> DType:
    """The type a reduction or scan of ``dtype`` elements accumulates in."""
    return dtype.compute if COMBINES[combine].rounds and dtype.is_float else dtype
