"""Float numerics of the LLVM lowering, the same on every target: narrow types (f16, bf16, fp8)
computed in f32 and rounded once, ``cast`` in every direction, and fma rounded once to a
narrow type."""

from __future__ import annotations

from llvmlite import ir

from ..dsl.types import Conversion, DType, f32, f64
from . import minifloat
from .llvm_types import I32, I64, constant, element_type, float_bits, intrinsic_suffix, llvm_type, shaped

F32_PRECISION = f32.format.mantissa + 1  # integers up to 2**24 are exact in f32


class Numerics:
    """The rounding of narrow floats and casts, built with a lowering's builder (``lw.b``)."""

    def __init__(self, lw):
        self.lw = lw

    @property
    def b(self) -> ir.IRBuilder:
        return self.lw.b

    def sign(self, x: ir.Value) -> ir.Value:
        """The sign bit of a float, as an i1."""
        bits = self.b.bitcast(x, shaped(x, ir.IntType(float_bits(x.type))))
        return self.b.icmp_signed("<", bits, constant(bits, 0))

    def in_f32(self, t: DType, fn, args):
        """``fn`` on ``args``, in f32 for a narrow type (f16, bf16, fp8), rounded once back to
        the type: every such op computes this way, on every target, so they all round alike."""
        if not t.is_narrow:
            return fn(*args)
        result = fn(*(self.widen(a, t) for a in args))
        return self.narrow(result, t) if element_type(result.type) == llvm_type(f32) else result

    def widen(self, a: ir.Value, t: DType) -> ir.Value:
        """A value of narrow type ``t`` as f32 (exact), by the type's conversion."""
        if t.conversion is Conversion.software:
            return minifloat.widen(self.b, a, t.format)
        if t.conversion is Conversion.bfloat_bits:  # the bits shifted into place: no flushing of subnormals
            bits = self.b.zext(self.b.bitcast(a, shaped(a, ir.IntType(16))), shaped(a, I32))
            return self.b.bitcast(self.b.shl(bits, constant(bits, 16)), shaped(a, llvm_type(f32)))
        return self.b.fpext(a, shaped(a, llvm_type(f32)))

    def narrow(self, x: ir.Value, t: DType) -> ir.Value:
        """An f32 rounded to nearest-even narrow type ``t``, by the type's conversion.  bf16 and
        fp8 round with integer arithmetic (x86's bf16 instruction flushes subnormals to zero)."""
        if t.conversion is Conversion.software:
            return minifloat.narrow(self.b, x, t.format, host=self.lw.target.name == "host")
        if t.conversion is not Conversion.bfloat_bits:
            return self.b.fptrunc(x, shaped(x, llvm_type(t)))
        native = self.lw.narrow_natively(x, t)
        if native is not None:
            return native
        b = self.b
        bits = b.bitcast(x, shaped(x, I32))
        lsb = b.and_(b.lshr(bits, constant(bits, 16)), constant(bits, 1))
        rounded = b.lshr(b.add(b.add(bits, constant(bits, 0x7FFF)), lsb), constant(bits, 16))
        # a NaN gives the quiet NaN of its sign, as ml_dtypes (the numpy backend) does
        quiet = b.or_(b.and_(b.lshr(bits, constant(bits, 16)), constant(bits, 0x8000)), constant(bits, 0x7FC0))
        is_nan = b.fcmp_unordered("uno", x, x)
        return b.bitcast(b.trunc(b.select(is_nan, quiet, rounded), shaped(x, ir.IntType(16))), shaped(x, llvm_type(t)))

    def round_to_odd_f32(self, x: ir.Value) -> ir.Value:
        """A double rounded to odd at f32 precision, so that rounding it on to a narrow type
        rounds once (f32 has more than two bits beyond each)."""
        b = self.b
        r = b.fptrunc(x, shaped(x, llvm_type(f32)))
        exact = b.fcmp_unordered("ueq", b.fpext(r, x.type), x)  # NaN: leave it
        bits = b.bitcast(r, shaped(x, I32))
        even = b.icmp_unsigned("==", b.and_(bits, constant(bits, 1)), constant(bits, 0))
        # step toward x: down in magnitude if |r| > |x|
        beyond = b.fcmp_ordered(">", self.lw.call("llvm.fabs", [b.fpext(r, x.type)]), self.lw.call("llvm.fabs", [x]))
        step = b.select(beyond, constant(bits, -1), constant(bits, 1))
        fixed = b.add(bits, b.select(b.and_(b.not_(exact), even), step, constant(bits, 0)))
        return b.bitcast(fixed, r.type)

    def narrow_fma(self, t: DType, args) -> ir.Value:
        """fma rounded once to a narrow type: the product is exact in double, the sum is rounded
        to odd (its error from a two-sum), then to f32 and on to the type."""
        b = self.b
        d = shaped(args[0], llvm_type(f64))
        x, y, z = (b.fpext(self.widen(a, t), d) for a in args)
        p = b.fmul(x, y)
        s = b.fadd(p, z)
        bb = b.fsub(s, p)
        error = b.fadd(b.fsub(p, b.fsub(s, bb)), b.fsub(z, bb))
        bits = b.bitcast(s, shaped(d, I64))
        inexact = b.fcmp_ordered("!=", error, constant(d, 0.0))
        even = b.icmp_unsigned("==", b.and_(bits, constant(bits, 1)), constant(bits, 0))
        outward = b.icmp_unsigned("==", b.fcmp_ordered(">", error, constant(d, 0.0)),
                                  b.fcmp_ordered(">", s, constant(d, 0.0)))
        step = b.select(outward, constant(bits, 1), constant(bits, -1))
        odd = b.bitcast(b.add(bits, b.select(b.and_(inexact, even), step, constant(bits, 0))), d)
        return self.narrow(self.round_to_odd_f32(odd), t)

    def convert(self, a: ir.Value, src: DType, dst: DType) -> ir.Value:
        """``cast`` (docs/ir.md): every case rounds once, as the interpreter does."""
        b = self.b
        to = shaped(a, llvm_type(dst))
        wide_f32 = shaped(a, llvm_type(f32))
        if src == dst or (src.llvm == dst.llvm and src.is_int and dst.is_int):
            return a
        if dst.is_bool:
            if src.is_float:  # NaN is true
                return self.in_f32(src, lambda x: b.fcmp_unordered("!=", x, constant(x, 0.0)), [a])
            return b.icmp_unsigned("!=", a, constant(a, 0))
        if src.is_bool:
            if dst.is_float:
                return self.narrow(b.uitofp(a, wide_f32), dst) if dst.is_narrow else b.uitofp(a, to)
            return b.zext(a, to)
        if src.is_int and dst.is_int:
            if dst.bits < src.bits:
                return b.trunc(a, to)
            return b.zext(a, to) if src.is_unsigned else b.sext(a, to)
        if src.is_int:  # to a float
            to_float = b.uitofp if src.is_unsigned else b.sitofp
            if not dst.is_narrow:
                return to_float(a, to)
            wide = to_float(a, wide_f32)  # exact below 2**24; f16 and fp8 overflow long before that
            if src.bits > F32_PRECISION and dst.max >= 2.0**F32_PRECISION:
                wide = self._int_round_to_odd_f32(a, wide, src)
            return self.narrow(wide, dst)
        if dst.is_int:  # from a float: truncate, saturate, NaN -> 0
            if src.is_narrow:
                a, src = self.widen(a, src), f32
            name = "llvm.fptoui.sat" if dst.is_unsigned else "llvm.fptosi.sat"
            return b.call(self.lw.declare(f"{name}.{intrinsic_suffix(to)}.{intrinsic_suffix(a.type)}", to, [a.type]), [a])
        # float to float
        if src.is_narrow:  # exact into f32, then on (or rounded once to a narrow type)
            wide = self.widen(a, src)
            if dst == f32:
                return wide
            out = b.fpext(wide, to) if dst == f64 else self.narrow(wide, dst)
            if src.conversion is Conversion.software and dst.conversion is Conversion.native:
                out = self._quiet_nan(out, wide, dst)
            elif dst.conversion is Conversion.software and src.conversion is not Conversion.software:
                out = self._signed_code(out, a, dst)
            return out
        if dst.is_narrow:  # from f32, or f64 directly (rounded to odd in f32 first: one rounding)
            out = self.narrow(self.round_to_odd_f32(a) if src == f64 else a, dst)
            return self._signed_code(out, a, dst) if dst.conversion is Conversion.software else out
        return b.fpext(a, to) if dst == f64 else b.fptrunc(a, to)

    # fp8 casts are bit-exact with ml_dtypes, whose NaNs keep their sign: an NVPTX conversion
    # instruction gives its own NaN (0x7fff for f16, with no sign), so the sign and the NaN are
    # set here, on every target alike
    def _quiet_nan(self, out: ir.Value, wide: ir.Value, dst: DType) -> ir.Value:
        """``out`` (``wide`` converted to native ``dst``), with the quiet NaN of ``wide``'s sign."""
        b = self.b
        bits = shaped(out, ir.IntType(dst.bits))
        quiet = dst.format.nan_code
        nan = b.select(self.sign(wide), constant(bits, quiet | 1 << (dst.bits - 1)), constant(bits, quiet))
        return b.select(b.fcmp_unordered("uno", wide, wide), b.bitcast(nan, out.type), out)

    def _signed_code(self, code: ir.Value, a: ir.Value, dst: DType) -> ir.Value:
        """``code`` (float ``a`` rounded to software ``dst``) with ``a``'s sign bit, where
        ``dst``'s NaNs have signs (a NaN's sign is all the rounding may have lost)."""
        if not dst.format.signed_nan:
            return code
        top = constant(code, 1 << (dst.bits - 1))
        return self.b.or_(code, self.b.select(self.sign(a), top, constant(code, 0)))

    def _int_round_to_odd_f32(self, a: ir.Value, r: ir.Value, src: DType) -> ir.Value:
        """``r`` (``a`` rounded to nearest f32) rounded to odd instead."""
        b = self.b
        ty = a.type
        name = "llvm.fptoui.sat" if src.is_unsigned else "llvm.fptosi.sat"
        back = b.call(self.lw.declare(f"{name}.{intrinsic_suffix(ty)}.{intrinsic_suffix(r.type)}", ty, [r.type]), [r])
        limit = float(2 ** (src.bits if src.is_unsigned else src.bits - 1))
        compare = b.icmp_unsigned if src.is_unsigned else b.icmp_signed
        above = b.or_(b.fcmp_ordered(">=", r, constant(r, limit)), compare(">", back, a))
        below = compare("<", back, a)
        bits = b.bitcast(r, shaped(r, I32))
        positive = b.fcmp_ordered(">", r, constant(r, 0.0))
        toward_zero = b.select(positive, above, below)
        step = b.select(toward_zero, constant(bits, -1), constant(bits, 1))
        even = b.icmp_unsigned("==", b.and_(bits, constant(bits, 1)), constant(bits, 0))
        fix = b.and_(b.or_(above, below), even)
        return b.bitcast(b.add(bits, b.select(fix, step, constant(bits, 0))), r.type)

    def math(self, name: str, t: DType, args) -> ir.Value:
        """A math function of a float type; a narrow type computes in f32 and rounds once."""
        if t.is_narrow:
            return self.in_f32(t, lambda *xs: self.math(name, f32, xs), args)
        return self.lw.math_function(name, t, args)
