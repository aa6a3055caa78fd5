"""The element-wise op table of the LLVM lowering (:data:`LOWER`): arithmetic, comparisons,
bit operations, casts and math calls, one emitter per op, shared by every target.

Each entry takes ``(lowering, op, operands)`` and returns the op's LLVM value; it builds with
the lowering's builder, computes narrow floats through its :class:`~accy.codegen.numerics.Numerics`
and asks the target's hooks (``math_function``, ``float_remainder``, ``float_divide``,
``shift_count``) where targets differ.
"""

from __future__ import annotations

import math

from llvmlite import ir

from ..dsl.ir import Op, constant_of
from ..dsl.ops import OPS
from .abi import STATUS_DIV_ZERO
from .llvm_types import I1, I64, constant, llvm_type, shaped


def _by_kind(int_method: str, float_method: str):
    def lower(lw, op, args):
        t = op.operands[0].type
        if t.is_float:
            return lw.numerics.in_f32(t, getattr(lw.b, float_method), args)
        return getattr(lw.b, int_method)(*args)

    return lower


def _extremum(name: str):
    def lower(lw, op, args):
        t = op.operands[0].type
        if t.is_float:
            return lw.numerics.in_f32(t, lambda *xs: lw.call(f"llvm.{name}imum", xs), args)
        prefix = "u" if t.is_unsigned else "s"
        return lw.call(f"llvm.{prefix}{name}", args)

    return lower


_ICMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


def _compare(name: str):
    def lower(lw, op, args):
        t = op.operands[0].type
        if t.is_float:
            if name == "ne":  # the unordered one: true with a NaN
                return lw.numerics.in_f32(t, lambda a, b: lw.b.fcmp_unordered("!=", a, b), args)
            return lw.numerics.in_f32(t, lambda a, b: lw.b.fcmp_ordered(_ICMP[name], a, b), args)
        if t.is_unsigned or t.is_bool:
            return lw.b.icmp_unsigned(_ICMP[name], *args)
        return lw.b.icmp_signed(_ICMP[name], *args)

    return lower


def _neg(lw, op, args):
    t = op.result.type
    return lw.numerics.in_f32(t, lw.b.fneg, args) if t.is_float else lw.b.neg(args[0])


def _abs(lw, op, args):
    t = op.result.type
    if t.is_float:
        return lw.numerics.in_f32(t, lambda x: lw.call("llvm.fabs", [x]), args)
    if t.is_unsigned:
        return args[0]
    return lw.call("llvm.abs", [args[0], ir.Constant(I1, 0)])  # wraps: abs(min) == min


def _intrinsic(name: str):
    """An exact float intrinsic (floor, copysign, ...): f16 and bf16 go through f32."""
    return lambda lw, op, args: lw.numerics.in_f32(op.result.type, lambda *xs: lw.call(f"llvm.{name}", xs), args)


def _flush_subnormal(lw, op, args):
    """A value of magnitude below its type's smallest normal becomes a zero of its sign (+0
    where the type has no -0); a target may fuse it with the op before (``lw.flushed``)."""
    fused = lw.flushed(op)
    if fused is not None:
        return fused
    t = op.result.type
    form = t.format

    def flush(x):
        small = lw.b.fcmp_ordered("<", lw.call("llvm.fabs", [x]), constant(x, math.ldexp(1.0, 1 - form.bias)))
        zero = constant(x, 0.0)
        if form.signed_zero:
            zero = lw.call("llvm.copysign", [zero, x])
        return lw.b.select(small, zero, x)

    return lw.numerics.in_f32(t, flush, args)


def _isnan(lw, op, args):
    return lw.numerics.in_f32(op.operands[0].type, lambda a: lw.b.fcmp_unordered("uno", a, a), args)


def _isinf(lw, op, args):
    def isinf(a):
        return lw.b.fcmp_ordered("==", lw.call("llvm.fabs", [a]), constant(a, math.inf))

    return lw.numerics.in_f32(op.operands[0].type, isinf, args)


def _shift(left: bool):
    def lower(lw, op, args):
        a, n = args
        t = op.result.type
        n = lw.shift_count(op, n)
        inside = lw.b.icmp_unsigned("<", n, constant(a, t.bits))  # a negative count is huge unsigned
        safe = lw.b.select(inside, n, constant(a, 0))
        if left:
            return lw.b.select(inside, lw.b.shl(a, safe), constant(a, 0))
        if t.is_unsigned:
            return lw.b.select(inside, lw.b.lshr(a, safe), constant(a, 0))
        return lw.b.select(inside, lw.b.ashr(a, safe), lw.b.ashr(a, constant(a, t.bits - 1)))

    return lower


def _fma(lw, op, args):
    t = op.result.type
    if t.is_narrow:
        return lw.numerics.narrow_fma(t, args)
    return lw.call("llvm.fma", args)


def _mod(lw, op, args):
    t = op.result.type
    if t.is_int:
        return _integer_division(lw, op, args, remainder=True)

    def mod(a, b):
        bld = lw.b
        ty = a.type
        r = lw.float_remainder(a, b)
        zero = constant(ty, 0.0)
        # Python's %: a non-zero remainder takes the divisor's sign; a zero one too
        differs = bld.and_(bld.fcmp_ordered("!=", r, zero),
                           bld.icmp_unsigned("!=", lw.numerics.sign(r), lw.numerics.sign(b)))
        adjusted = bld.select(differs, bld.fadd(r, b), r)
        return bld.select(bld.fcmp_ordered("==", r, zero), lw.call("llvm.copysign", [zero, b]), adjusted)

    return lw.numerics.in_f32(t, mod, args)


def _integer_division(lw, op: Op, args, *, remainder: bool) -> ir.Value:
    """Floor division and Python's remainder for integers, checked for a zero divisor;
    ``min // -1`` wraps to ``min`` and ``min % -1`` is 0."""
    a, b_ = args
    bld = lw.b
    t = op.result.type
    ty = a.type
    zero, one = constant(ty, 0), constant(ty, 1)
    is_zero = bld.icmp_unsigned("==", b_, zero)
    # a constant other than 0 needs no check (an element of a host tile op is no graph op)
    divisor = constant_of(op.operands[1]) if isinstance(op, Op) else None
    if lw.target.checks and op not in lw.unchecked and (not isinstance(divisor, int) or divisor == 0):
        wide = shaped(a, I64)
        lw.check(op, bld.not_(is_zero), STATUS_DIV_ZERO, bld.sext(a, wide) if ty != wide else a)
    if t.is_unsigned:
        safe = bld.select(is_zero, one, b_)
        result = bld.urem(a, safe) if remainder else bld.udiv(a, safe)
        return bld.select(is_zero, zero, result)
    minus_one = constant(ty, -1)
    # sdiv traps on x / 0 and min / -1: divide by 1 there and fix up after
    is_minus_one = bld.icmp_signed("==", b_, minus_one)
    safe = bld.select(bld.or_(is_zero, is_minus_one), one, b_)
    quotient, rest = bld.sdiv(a, safe), bld.srem(a, safe)
    # floor: round toward -inf when the remainder's sign differs from the divisor's
    adjust = bld.and_(bld.icmp_signed("!=", rest, zero), bld.icmp_signed("<", bld.xor(rest, safe), zero))
    if remainder:
        result = bld.select(adjust, bld.add(rest, safe), rest)
        return bld.select(bld.or_(is_zero, is_minus_one), zero, result)
    floor = bld.sub(quotient, bld.zext(adjust, ty))
    return bld.select(is_zero, zero, bld.select(is_minus_one, bld.neg(a), floor))


def _div(lw, op, args):
    t = op.result.type
    if t.is_float:
        return lw.float_divide(t, args)
    return _integer_division(lw, op, args, remainder=False)


def _math(name: str):
    def lower(lw, op, args):
        return lw.numerics.math(name, op.result.type, args)

    return lower


def _select(lw, op, args):
    return lw.b.select(*args)


def _cast(lw, op, args):
    return lw.numerics.convert(args[0], op.operands[0].type, op.result.type)


def _bitcast(lw, op, args):
    (a,) = args
    ty = llvm_type(op.result.type)
    if isinstance(a.type, ir.VectorType):
        ty = ir.VectorType(ty, a.type.count)
    return a if a.type == ty else lw.b.bitcast(a, ty)


LOWER = {
    "add": _by_kind("add", "fadd"),
    "sub": _by_kind("sub", "fsub"),
    "mul": _by_kind("mul", "fmul"),
    "div": _div,
    "mod": _mod,
    "max": _extremum("max"),  # llvm.maximum: NaN propagates, -0 < +0
    "min": _extremum("min"),
    "neg": _neg,
    "abs": _abs,
    "fma": _fma,
    "copysign": _intrinsic("copysign"),
    "flush_subnormal": _flush_subnormal,
    "floor": _intrinsic("floor"),
    "ceil": _intrinsic("ceil"),
    "round": _intrinsic("roundeven"),
    "trunc": _intrinsic("trunc"),
    "isnan": _isnan,
    "isinf": _isinf,
    **{name: _compare(name) for name in _ICMP},
    "and": lambda lw, op, args: lw.b.and_(*args),
    "or": lambda lw, op, args: lw.b.or_(*args),
    "xor": lambda lw, op, args: lw.b.xor(*args),
    "not": lambda lw, op, args: lw.b.not_(*args),
    "shl": _shift(left=True),
    "shr": _shift(left=False),
    "select": _select,
    "cast": _cast,
    "bitcast": _bitcast,
}
# math functions: libdevice's name for each (__nv_<name>[f]; the host inlines vecmath's
# routine of the op's name); None where the target's lowering composes it (math_function)
_COMPOSED = frozenset({"sqrt", "rsqrt", "sigmoid"})
MATH = {name: None if name in _COMPOSED else name for name, opdef in OPS.items() if opdef.inexact or name == "sqrt"}
LOWER.update({name: _math(name) for name in MATH})
