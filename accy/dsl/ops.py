"""The op table: each op's operand signature, type rule and algebraic traits.

This is the single definition of what ops exist.  Backends keep their own table
from opcode to implementation; the NumPy interpreter's table is the reference
semantics (see docs/ir.md).
"""

from __future__ import annotations

from typing import Callable

import attrs

from .types import DType, boolean


class OpTypeError(Exception):
    """A type rule rejected its operands; the builder adds the op and source line."""


@attrs.frozen
class OpDef:
    name: str
    # types of the operands (and attrs) -> result types; raises OpTypeError
    infer: Callable[[tuple[DType, ...], dict], tuple[DType, ...]]
    pure: bool = True  # no side effects: may be removed if unused, merged if equal
    commutative: bool = False
    # fold on constant Python values -> Python value (only for index/bool results)
    fold: Callable | None = None


def _same_numeric(name):
    def infer(types, attrs):
        a, b = types
        if a != b:
            raise OpTypeError(f"operand types {a} and {b} differ; convert one with cast(value, dtype)")
        if a.is_bool:
            raise OpTypeError(f"operands are {a}; {name} needs index or a float type")
        return (a,)

    return infer


def _unary(*, float_only: bool):
    def infer(types, attrs):
        (a,) = types
        if a.is_bool or (float_only and not a.is_float):
            wanted = "a float type" if float_only else "index or a float type"
            raise OpTypeError(f"operand is {a}; needs {wanted}")
        return (a,)

    return infer


def _compare(allow_bool: bool):
    def infer(types, attrs):
        a, b = types
        if a != b:
            raise OpTypeError(f"operand types {a} and {b} differ; convert one with cast(value, dtype)")
        if a.is_bool and not allow_bool:
            raise OpTypeError("operands are bool; order comparisons need index or a float type")
        return (boolean,)

    return infer


def _logic(types, attrs):
    if any(not t.is_bool for t in types):
        raise OpTypeError(f"operands are {', '.join(map(str, types))}; logical ops need bool (use a comparison)")
    return (boolean,)


def _select(types, attrs):
    cond, a, b = types
    if not cond.is_bool:
        raise OpTypeError(f"condition is {cond}; select needs a bool condition (use a comparison)")
    if a != b:
        raise OpTypeError(f"branch types {a} and {b} differ")
    return (a,)


def _cast(types, attrs):
    target: DType = attrs["dtype"]
    if target.is_bool:
        raise OpTypeError("cannot cast to bool; compare with a value instead")
    return (target,)


def _const(types, attrs):
    return (attrs["dtype"],)


def _load(types, attrs):
    (idx,) = types
    if not idx.is_int:
        raise OpTypeError(f"index is {idx}; buffer indices must be index")
    return (attrs["dtype"],)


def _store(types, attrs):
    idx, value = types
    if not idx.is_int:
        raise OpTypeError(f"index is {idx}; buffer indices must be index")
    if value != attrs["dtype"]:
        raise OpTypeError(f"value is {value} but buffer '{attrs['buffer']}' holds {attrs['dtype']}")
    return ()


def _fold(types, attrs):
    start, stop, *inits = types
    for role, t in (("start", start), ("stop", stop)):
        if not t.is_int:
            raise OpTypeError(f"{role} is {t}; loop bounds must be index")
    return tuple(inits)


def _no_results(types, attrs):
    return ()


def _floor_div(a: int, b: int):
    return None if b == 0 else a // b


OPS: dict[str, OpDef] = {
    d.name: d
    for d in (
        OpDef("const", _const),
        OpDef("add", _same_numeric("add"), commutative=True, fold=lambda a, b: a + b),
        OpDef("sub", _same_numeric("sub"), fold=lambda a, b: a - b),
        OpDef("mul", _same_numeric("mul"), commutative=True, fold=lambda a, b: a * b),
        OpDef("div", _same_numeric("div"), fold=_floor_div),
        OpDef("max", _same_numeric("max"), commutative=True, fold=max),
        OpDef("min", _same_numeric("min"), commutative=True, fold=min),
        OpDef("neg", _unary(float_only=False), fold=lambda a: -a),
        OpDef("exp", _unary(float_only=True)),
        OpDef("sqrt", _unary(float_only=True)),
        OpDef("lt", _compare(False), fold=lambda a, b: a < b),
        OpDef("le", _compare(False), fold=lambda a, b: a <= b),
        OpDef("gt", _compare(False), fold=lambda a, b: a > b),
        OpDef("ge", _compare(False), fold=lambda a, b: a >= b),
        OpDef("eq", _compare(True), commutative=True, fold=lambda a, b: a == b),
        OpDef("ne", _compare(True), commutative=True, fold=lambda a, b: a != b),
        OpDef("and", _logic, commutative=True, fold=lambda a, b: a and b),
        OpDef("or", _logic, commutative=True, fold=lambda a, b: a or b),
        OpDef("not", _logic, fold=lambda a: not a),
        OpDef("select", _select, fold=lambda c, a, b: a if c else b),
        OpDef("cast", _cast),
        OpDef("load", _load),  # purity depends on the buffer; see passes.cse
        OpDef("store", _store, pure=False),
        OpDef("fold", _fold),  # pure unless its body stores
        OpDef("for_each", _no_results, pure=False),
        OpDef("yield", _no_results, pure=False),
    )
}

