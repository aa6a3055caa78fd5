"""The op table: every op of the IR, defined once.

An :class:`OpDef` holds everything that is a fact about the op itself: its
operands and type rule, its algebraic traits (pure, commutative, whether it can
fail at run time, identities for folding, the reduction it names) and how a
kernel author spells it (builder and value methods, ``accy.math``).  The
builder's and traced values' methods are generated from this table, and each
backend keeps one table from op name to implementation; a test checks that
every backend table covers exactly these ops.
"""

from __future__ import annotations

from typing import Callable

import attrs

from .types import DType, boolean, index


class OpTypeError(Exception):
    """A type rule rejected its operands; the builder adds the op and source line."""


# -- operand classes ---------------------------------------------------------------------------


@attrs.frozen
class Operands:
    """Which types an operand may have, and how to say so."""

    accepts: Callable[[DType], bool]
    wanted: str


NUMERIC = Operands(lambda t: not t.is_bool, "a number type (an integer, index or float type)")
FLOAT = Operands(lambda t: t.is_float, "a float type (f16, bf16, f32, f64)")
INT = Operands(lambda t: t.is_int, "an integer type (i8..i64, u8..u64, index)")
BITS = Operands(lambda t: t.is_int or t.is_bool, "an integer type or bool")
ANY = Operands(lambda t: True, "any type")


def _hint(op: str, got: DType, operands: Operands) -> str:
    if operands is FLOAT and got.is_int:
        return f"; convert first: cast(value, f32).{op}()"
    if operands is FLOAT and got.is_bool:
        return "; use select(cond, 1.0, 0.0) to get a number"
    if operands is INT and got.is_float:
        return "; floats have floor(), trunc() and cast(value, i32)"
    return ""


def _check_class(op: str, types, operands: Operands) -> None:
    for t in types:
        if not operands.accepts(t):
            raise OpTypeError(f"operand is {t}; needs {operands.wanted}{_hint(op, t, operands)}")


def _check_same(types) -> DType:
    first = types[0]
    for t in types[1:]:
        if t != first:
            raise OpTypeError(f"operand types {first} and {t} differ; convert one with cast(value, {first})")
    return first


def elementwise(operands: Operands, result: DType | None = None):
    """All operands of one type from ``operands``; the result has that type (or ``result``)."""

    def infer(op: str, types, attrs_):
        t = _check_same(types)
        _check_class(op, types, operands)
        return (result or t,)

    return infer


def _select(op, types, attrs_):
    cond, a, b = types
    if not cond.is_bool:
        raise OpTypeError(f"condition is {cond}; select needs a bool condition (use a comparison)")
    if a != b:
        raise OpTypeError(f"branch types {a} and {b} differ; convert one with cast(value, {a})")
    return (a,)


def _cast(op, types, attrs_):
    return (attrs_["dtype"],)


def _const(op, types, attrs_):
    return (attrs_["dtype"],)


def _size(op, types, attrs_):
    return (index,)


def _index_operand(types, role: str = "index") -> None:
    if not types[0].is_index:
        hint = "; convert it with cast(value, index)" if types[0].is_int else ""
        raise OpTypeError(f"{role} is {types[0]}; buffer indices must be index{hint}")


def _load(op, types, attrs_):
    _index_operand(types)
    return (attrs_["dtype"],)


def _store(op, types, attrs_):
    _index_operand(types)
    value, dtype = types[1], attrs_["dtype"]
    if value != dtype:
        raise OpTypeError(f"value is {value} but buffer '{attrs_['buffer']}' holds {dtype}; "
                          f"convert it with cast(value, {dtype})")
    return ()


def _fold(op, types, attrs_):
    start, stop, *inits = types
    for role, t in (("start", start), ("stop", stop)):
        if not t.is_index:
            raise OpTypeError(f"{role} is {t}; loop bounds must be index (cast(value, index))")
    return tuple(inits)


def _if(op, types, attrs_):
    (cond,) = types
    if not cond.is_bool:
        raise OpTypeError(f"condition is {cond}; if_ needs a bool condition (use a comparison)")
    return tuple(attrs_["results"])


def _for_each(op, types, attrs_):
    for t in types:
        if not t.is_index:
            raise OpTypeError(f"launch extent is {t}; extents must be index")
    return ()


def _no_results(op, types, attrs_):
    return ()


# which element types each atomic takes (PTX has no 8- or 16-bit integer atomics)
_ATOMIC_INTS = ("i32", "i64", "u32", "u64", "index")
ATOMIC_DTYPES = {
    "add": _ATOMIC_INTS + ("f16", "bf16", "f32", "f64"),
    "max": _ATOMIC_INTS + ("f32", "f64"),
    "min": _ATOMIC_INTS + ("f32", "f64"),
    "exchange": _ATOMIC_INTS + ("f32", "f64"),
    "cas": _ATOMIC_INTS + ("f32", "f64"),
}


def _atomic(op, types, attrs_):
    kind, dtype = attrs_["op"], attrs_["dtype"]
    _index_operand(types)
    if dtype.name not in ATOMIC_DTYPES[kind]:
        raise OpTypeError(f"atomic_{kind} on {dtype} is not supported; it takes {', '.join(ATOMIC_DTYPES[kind])}")
    for role, t in zip(("value", "value") if kind != "cas" else ("compare", "value"), types[1:]):
        if t != dtype:
            raise OpTypeError(f"{role} is {t} but '{attrs_['buffer']}' holds {dtype}; convert it with cast(value, {dtype})")
    return (dtype,)


def _shuffle(op, types, attrs_):
    value, lane = types
    if not lane.is_index:
        raise OpTypeError(f"the lane operand is {lane}; it must be index")
    return (value,)


# -- constant folding on Python values (integer and bool types only) ---------------------------


def _floor_div(t, a, b):
    return None if b == 0 else a // b


def _mod(t, a, b):
    return None if b == 0 else a % b


def _shl(t, a, n):
    return 0 if not 0 <= n < t.bits else a << n


def _shr(t, a, n):
    if not 0 <= n < t.bits:
        return -1 if a < 0 else 0
    return a >> n  # constants of unsigned types are non-negative, so this is logical for them


def _not(t, a):
    return (not a) if t.is_bool else ~a


# -- the table ---------------------------------------------------------------------------------


@attrs.frozen
class OpDef:
    name: str
    # (op name, operand types, attrs) -> result types; raises OpTypeError
    infer: Callable
    arity: int | None = None  # value operands of a pointwise op; None for structural ops
    pure: bool = True  # no side effects: may be removed if unused, merged if equal
    commutative: bool = False
    # can fail at run time for these operand types (integer division by zero): such an op
    # must not run where the program would not have run it (no hoisting out of a loop)
    can_fail: Callable[[DType], bool] = lambda t: False
    fold: Callable | None = None  # (operand type, *Python values) -> Python value, or None
    identity: int | None = None  # x op identity == x (either side when commutative), integers
    absorbing: int | None = None  # x op absorbing == absorbing, integers
    reduction: str | None = None  # the name a reduction over this op goes by ("sum", "max")
    methods: tuple[str, ...] = ()  # builder and value method names; the first is the main one
    math: bool = False  # also a function of accy.math
    doc: str = ""

    @property
    def pointwise(self) -> bool:
        return self.arity is not None


def _pointwise(name, arity, operands, *, result=None, methods=None, **kw) -> OpDef:
    return OpDef(name, elementwise(operands, result), arity=arity, methods=methods or (name,), **kw)


_NUM, _FLT, _INT, _BITS = NUMERIC, FLOAT, INT, BITS


def _math(name, doc, arity=1):
    return _pointwise(name, arity, _FLT, math=True, doc=doc)


_int_only = lambda t: t.is_int  # noqa: E731

OPS: dict[str, OpDef] = {
    d.name: d
    for d in (
        # structural ops: attributes and regions, spelled by hand-written builder methods
        OpDef("const", _const),
        OpDef("size", _size),  # a buffer's element count
        OpDef("cast", _cast),
        OpDef("select", _select, arity=3, methods=("select", "where"), math=True,
              fold=lambda t, c, a, b: a if c else b,
              doc="if_true where the condition holds, else if_false; both are evaluated"),
        OpDef("load", _load),  # pure unless the kernel stores to its buffer; see passes
        OpDef("store", _store, pure=False),
        OpDef("fold", _fold),  # pure unless its body stores
        OpDef("if", _if),  # pure unless a branch stores
        OpDef("for_each", _for_each, pure=False),
        OpDef("yield", _no_results, pure=False),
        # the block level: blocks of cooperating threads, shared memory, barriers, atomics, warps
        OpDef("for_each_block", _for_each, pure=False),
        OpDef("shared", _no_results, pure=False),  # declares a per-block array (name, dtype, count)
        OpDef("barrier", _no_results, pure=False),
        OpDef("atomic", _atomic, pure=False),  # returns the element's old value
        OpDef("shuffle", _shuffle, can_fail=lambda t: True),  # reads another lane: never moved
        # arithmetic
        _pointwise("add", 2, _NUM, commutative=True, fold=lambda t, a, b: a + b, identity=0, reduction="sum"),
        _pointwise("sub", 2, _NUM, fold=lambda t, a, b: a - b),
        _pointwise("mul", 2, _NUM, commutative=True, fold=lambda t, a, b: a * b, identity=1, absorbing=0,
                   reduction="prod"),
        _pointwise("div", 2, _NUM, fold=_floor_div, can_fail=_int_only,
                   doc="IEEE division for floats; floor division (Python's //) for integers"),
        _pointwise("mod", 2, _NUM, fold=_mod, can_fail=_int_only, methods=("mod", "rem"),
                   doc="remainder with the sign of the divisor, as Python's %"),
        _pointwise("max", 2, _NUM, commutative=True, fold=lambda t, a, b: max(a, b), reduction="max", math=True,
                   doc="NaN propagates; -0.0 < +0.0"),
        _pointwise("min", 2, _NUM, commutative=True, fold=lambda t, a, b: min(a, b), reduction="min", math=True,
                   doc="NaN propagates; -0.0 < +0.0"),
        _pointwise("neg", 1, _NUM, fold=lambda t, a: -a),
        _pointwise("abs", 1, _NUM, fold=lambda t, a: abs(a), math=True,
                   doc="integers wrap: abs of the most negative value is itself"),
        _pointwise("fma", 3, _FLT, math=True, doc="a * b + c, rounded once"),
        _math("pow", "C's pow (powf), with its special cases", arity=2),
        _math("copysign", "the magnitude of a with the sign of b", arity=2),
        # math functions (floats; f16 and bf16 compute in f32 and round once)
        _math("exp", "e**x"),
        _math("exp2", "2**x"),
        _math("expm1", "e**x - 1, accurate near 0"),
        _math("log", "natural logarithm; log(-1) is NaN, log(0) is -inf"),
        _math("log2", "base-2 logarithm"),
        _math("log1p", "log(1 + x), accurate near 0"),
        _math("sqrt", "square root; sqrt(-1) is NaN"),
        _math("rsqrt", "1 / sqrt(x)"),
        _math("erf", "the error function"),
        _math("tanh", "hyperbolic tangent"),
        _math("sigmoid", "1 / (1 + exp(-x))"),
        _math("sin", "sine (radians)"),
        _math("cos", "cosine (radians)"),
        _math("atan", "arctangent (radians, in [-pi/2, pi/2])"),
        _math("atan2", "atan2(y, x): the angle of the point (x, y), in [-pi, pi], with C's special cases "
                       "(NumPy's arctan2)", arity=2),
        _math("floor", "round toward -inf"),
        _math("ceil", "round toward +inf"),
        _math("round", "round to nearest, ties to even (as Python's round and NumPy's rint)"),
        _math("trunc", "round toward zero"),
        _pointwise("isnan", 1, _FLT, result=boolean, math=True),
        _pointwise("isinf", 1, _FLT, result=boolean, math=True),
        # comparisons: ordered for floats (false with a NaN), except ne
        _pointwise("lt", 2, _NUM, result=boolean, fold=lambda t, a, b: a < b),
        _pointwise("le", 2, _NUM, result=boolean, fold=lambda t, a, b: a <= b),
        _pointwise("gt", 2, _NUM, result=boolean, fold=lambda t, a, b: a > b),
        _pointwise("ge", 2, _NUM, result=boolean, fold=lambda t, a, b: a >= b),
        _pointwise("eq", 2, ANY, result=boolean, commutative=True, fold=lambda t, a, b: a == b),
        _pointwise("ne", 2, ANY, result=boolean, commutative=True, fold=lambda t, a, b: a != b,
                   doc="true when either operand is NaN"),
        # bits: logical on bool, bitwise on integers
        _pointwise("and", 2, _BITS, commutative=True, fold=lambda t, a, b: a & b, absorbing=0, reduction="and",
                   methods=("logical_and", "bitwise_and")),
        _pointwise("or", 2, _BITS, commutative=True, fold=lambda t, a, b: a | b, identity=0, reduction="or",
                   methods=("logical_or", "bitwise_or")),
        _pointwise("xor", 2, _BITS, commutative=True, fold=lambda t, a, b: a ^ b, identity=0, reduction="xor",
                   methods=("logical_xor", "bitwise_xor")),
        _pointwise("not", 1, _BITS, fold=_not, methods=("logical_not", "bitwise_not", "invert")),
        _pointwise("shl", 2, _INT, fold=_shl, methods=("shl", "left_shift"),
                   doc="a shift count outside [0, bits) gives 0"),
        _pointwise("shr", 2, _INT, fold=_shr, methods=("shr", "right_shift"),
                   doc="arithmetic for signed types, logical for unsigned; a count outside [0, bits) "
                       "gives 0 (or -1 for a negative signed value)"),
    )
}

# the ops a fold can accumulate with, by reduction name ("sum" -> add)
REDUCTIONS: dict[str, str] = {d.reduction: d.name for d in OPS.values() if d.reduction}


def infer(opcode: str, types, attrs_) -> tuple[DType, ...]:
    """The result types of ``opcode`` on operands of ``types``; raises OpTypeError."""
    return tuple(OPS[opcode].infer(opcode, tuple(types), attrs_))
