"""Constexpr parameters: ``accy.constexpr(int)`` in ``@accy.kernel(...)``, or a scalar named in
``specialize=``.

A constexpr parameter is passed at the call like any argument, but it is not a parameter of
the graph: the body sees its value as a plain Python value (an ``int`` can size a tile, bound
a Python loop, choose a branch), and each distinct value is traced into a graph of its own
(:meth:`accy.Program.specialized`).  A value is checked here, at the call, against what its
parameter takes; a specialised ``scalar(dtype)`` keeps its dtype's range check.
"""

from __future__ import annotations

import numbers

import attrs
import numpy as np

from ..errors import ArgumentError, TraceError
from .types import DType

KINDS = (int, bool, float)  # what a constexpr may hold: values that print exactly and compare exactly


def _kind(value) -> type:
    if value not in KINDS:
        raise TraceError(f"constexpr: expected int, bool or float (the Python type of the values it takes), "
                         f"got {value!r}")
    return value


@attrs.frozen
class ConstexprSpec:
    """A constexpr parameter's declaration: the Python type of its values, and for a
    specialised scalar the dtype whose range an int must fit."""

    kind: type = attrs.field(converter=_kind)
    dtype: DType | None = None

    def __str__(self) -> str:
        return f"constexpr({self.kind.__name__})" if self.dtype is None else f"specialised scalar({self.dtype})"

    def checked(self, name: str, value):
        """``value`` as this parameter holds it (a NumPy scalar becomes the Python one), or an
        ArgumentError naming the parameter."""
        if isinstance(value, np.generic) and not isinstance(value, (np.void, np.str_, np.bytes_)):
            value = value.item()
        if self.kind is bool:
            ok = isinstance(value, bool)
        elif self.kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok:
            got = f"{type(value).__name__} {value!r}" if isinstance(value, (numbers.Number, str)) else _described(value)
            wanted = f"{'an int' if self.kind is int else 'True or False' if self.kind is bool else 'a float'} ({self})"
            raise ArgumentError(f"argument '{name}': expected {wanted}, got {got}; a constexpr's value is known "
                                f"when the kernel is called, and each value is traced on its own")
        value = self.kind(value)
        if self.dtype is not None and self.dtype.is_int and not self.dtype.min <= value <= self.dtype.max:
            raise ArgumentError(f"argument '{name}': {value} does not fit {self.dtype} "
                                f"({self.dtype.min}..{self.dtype.max})")
        return value


def _described(value) -> str:
    if isinstance(value, np.ndarray):
        return f"a NumPy array of shape {value.shape} (pass a Python number: int(x), float(x), bool(x))"
    if type(value).__module__.startswith("accy."):
        return f"a traced value ({type(value).__name__}), which is known only when the kernel runs"
    return f"a {type(value).__name__}"


@attrs.frozen
class Constexpr:
    """A declared constexpr parameter not bound yet: its ``name``, its ``spec``, and
    ``position``, how many of the declared graph parameters (a tensor counting once) come
    before it (where it goes among the arguments of a call by position)."""

    name: str
    spec: ConstexprSpec
    position: int


def constexpr(kind: type = int) -> ConstexprSpec:
    """A parameter whose value is fixed when the kernel is called: ``constexpr(int)`` (the
    default), ``constexpr(bool)`` or ``constexpr(float)``.  The body sees the Python value;
    each distinct value traces and compiles the kernel once (:meth:`accy.Program.specialized`)."""
    return ConstexprSpec(kind)


def specialised_scalar(name: str, dtype: DType) -> ConstexprSpec:
    """What ``specialize=`` makes of the integer or boolean ``scalar(dtype)`` ``name``."""
    if not (dtype.is_int or dtype.is_bool):
        raise TraceError(f"@kernel: specialize= names '{name}', a scalar({dtype}); only integer and boolean scalars "
                         f"are specialised (declare constexpr(float) for a float the body reads as a Python value)")
    return ConstexprSpec(bool if dtype.is_bool else int, dtype)


def value_text(values) -> str:
    """``window=3, stride=2``: bound constexpr values, as messages and cache keys show them."""
    return ", ".join(f"{name}={value!r}" for name, value in values)
