"""Conversions between f32 and the small float types LLVM has no type for (fp8), in
integer LLVM IR: the same instructions on every target (the host's vectors, NVPTX and
so the PTX emulator), with no fp8 instruction or intrinsic.

A value of such a type (``DType.conversion is Conversion.software``) is held as its
code, an integer of the type's width.  :func:`widen` gives the f32 of a code, exactly;
:func:`narrow` rounds an f32 to the nearest-even code, as ml_dtypes does: a NaN gives
the type's quiet NaN of the same sign (or its one NaN); a value that rounds past the
largest finite one gives infinity, or NaN in a type without infinities (E4M3FN); a
negative one that rounds to zero gives -0, or +0 in a type without -0 (whose code is its
NaN).  Every fact of the encoding comes from its :class:`FloatFormat`.
``saturate=True`` casts are clamped before they get here
(:meth:`accy.dsl.builder.Builder.cast`).

Both work on a scalar or a vector of lanes, whose shape the results take.
"""

from __future__ import annotations

import platform

from llvmlite import ir

from ..dsl.types import FloatFormat

I32 = ir.IntType(32)
F32 = ir.FloatType()
F32_MANTISSA, F32_BIAS = 23, 127


def _shaped(like: ir.Value, element: ir.Type) -> ir.Type:
    ty = like.type
    return ir.VectorType(element, ty.count) if isinstance(ty, ir.VectorType) else element


def _const(like: ir.Value, value) -> ir.Constant:
    """``value`` as a constant of ``like``'s type (a vector's lanes all hold it)."""
    ty = like.type
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [ir.Constant(ty.element, value)] * ty.count)
    return ir.Constant(ty, value)


def widen(b: ir.IRBuilder, code: ir.Value, fmt: FloatFormat) -> ir.Value:
    """The f32 value of ``code`` (exact: f32 holds every value of a narrower format)."""
    c = b.zext(code, _shaped(code, I32))
    sign = b.shl(b.and_(c, _const(c, 1 << (fmt.bits - 1))), _const(c, 32 - fmt.bits))
    magnitude = b.and_(c, _const(c, (1 << (fmt.bits - 1)) - 1))
    # a normal code is the f32's exponent and mantissa, shifted up and rebiased
    normal = b.add(b.shl(magnitude, _const(c, F32_MANTISSA - fmt.mantissa)),
                   _const(c, (F32_BIAS - fmt.bias) << F32_MANTISSA))
    # a subnormal one is its mantissa times the smallest subnormal (exact in f32)
    count = b.uitofp(magnitude, _shaped(c, F32))
    subnormal = b.bitcast(b.fmul(count, _const(count, 2.0**fmt.min_subnormal_exponent)), c.type)
    is_subnormal = b.icmp_unsigned("<", magnitude, _const(c, 1 << fmt.mantissa))
    bits = b.select(is_subnormal, subnormal, normal)
    if fmt.inf_code is None:  # NaN is one code, of either sign or (-0's code) of none
        special = _const(c, 0x7FC00000)
        nan = b.icmp_unsigned("==", magnitude if fmt.signed_nan else c, _const(c, fmt.nan_code))
        bits = b.select(nan, special, bits)
    else:
        special = b.select(b.icmp_unsigned("==", magnitude, _const(c, fmt.inf_code)),
                           _const(c, 0x7F800000), _const(c, 0x7FC00000))
        bits = b.select(b.icmp_unsigned(">=", magnitude, _const(c, fmt.inf_code)), special, bits)
    return b.bitcast(b.or_(bits, sign), _shaped(c, F32))


def narrow(b: ir.IRBuilder, x: ir.Value, fmt: FloatFormat, *, host: bool = False) -> ir.Value:
    """``x`` (f32) rounded to the nearest-even code of ``fmt``, an integer of its width."""
    bits = b.bitcast(x, _shaped(x, I32))
    top = fmt.bits - 1
    sign = b.and_(b.lshr(bits, _const(bits, 32 - fmt.bits)), _const(bits, 1 << top))
    magnitude = b.and_(bits, _const(bits, 0x7FFFFFFF))
    exponent = b.lshr(magnitude, _const(bits, F32_MANTISSA))
    drop = F32_MANTISSA - fmt.mantissa  # mantissa bits a normal result loses
    smallest_normal = F32_BIAS - fmt.bias + 1  # the f32 exponent field of fmt's smallest normal
    is_normal = b.icmp_unsigned(">=", exponent, _const(bits, smallest_normal))
    # normal: rebias in place (the rounding carries into the exponent); subnormal: the
    # mantissa with its leading one, shifted further right (at most 31: past it is zero)
    rebiased = b.sub(magnitude, _const(bits, (F32_BIAS - fmt.bias) << F32_MANTISSA))
    mantissa = b.or_(b.and_(magnitude, _const(bits, (1 << F32_MANTISSA) - 1)), _const(bits, 1 << F32_MANTISSA))
    further = b.sub(_const(bits, drop + smallest_normal), exponent)
    further = b.select(b.icmp_unsigned(">", further, _const(bits, 31)), _const(bits, 31), further)
    value = b.select(is_normal, rebiased, mantissa)
    shift = b.select(is_normal, _const(bits, drop), further)
    odd = b.and_(b.lshr(value, shift), _const(bits, 1))
    half = b.sub(b.shl(_const(bits, 1), b.sub(shift, _const(bits, 1))), _const(bits, 1))
    rounded = b.lshr(b.add(b.add(value, half), odd), shift)
    past = fmt.inf_code if fmt.inf_code is not None else fmt.nan_code  # an infinity, or a finite type's NaN
    code = b.select(b.icmp_unsigned(">", rounded, _const(bits, fmt.max_code)), _const(bits, past), rounded)
    code = b.select(b.icmp_unsigned(">", magnitude, _const(bits, 0x7F800000)), _const(bits, fmt.nan_code), code)
    if not fmt.signed_zero:  # a zero is +0: the sign bit alone is the NaN (which has it already)
        sign = b.select(b.icmp_unsigned("==", code, _const(bits, 0)), _const(bits, 0), sign)
    narrowed = b.trunc(b.or_(code, sign), _shaped(x, ir.IntType(fmt.bits)))
    return _opaque(b, narrowed) if host else narrowed


def _opaque(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """``v`` itself (on the host); a vector through an empty inline asm, so that LLVM 22's x86 backend cannot
    fold its ``trunc`` into a masked store: with a constant mask keeping one lane it stores that
    lane as a whole 32-bit word, over the three elements after it (tests/test_fp8.py pins it)."""
    if not isinstance(v.type, ir.VectorType) or platform.machine().lower() not in ("x86_64", "amd64"):
        return v
    identity = ir.InlineAsm(ir.FunctionType(v.type, [v.type]), "", "=v,0")
    return b.call(identity, [v])
