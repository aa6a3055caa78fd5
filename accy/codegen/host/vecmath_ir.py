"""The IR helper of :mod:`.vecmath`'s routines: float and integer arithmetic, comparisons and
selects on one double type (``double`` or ``<N x double>``), constants splatted as needed."""

from __future__ import annotations

import llvmlite.ir as ir

from .vecmath_tables import SHIFT


def mangle(ty) -> str:
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{mangle(ty.element)}"
    if isinstance(ty, ir.DoubleType):
        return "f64"
    if isinstance(ty, ir.FloatType):
        return "f32"
    if isinstance(ty, ir.IntType):
        return f"i{ty.width}"
    raise TypeError(f"vecmath: unsupported type {ty}")


def is_float_type(ty) -> bool:
    el = ty.element if isinstance(ty, ir.VectorType) else ty
    return isinstance(el, (ir.FloatType, ir.DoubleType)) and not isinstance(el, ir.HalfType)


class DoubleArith:
    """Arithmetic on one double type (``double`` or ``<N x double>``) for the routines, with
    ``builder``."""

    def __init__(self, builder: ir.IRBuilder, ty):
        self.b = builder
        self.ty = ty
        self.n = ty.count if isinstance(ty, ir.VectorType) else None
        self.ity = self._vec(ir.IntType(64))
        self.module = builder.module

    def _vec(self, el):
        return ir.VectorType(el, self.n) if self.n else el

    # constants
    def c(self, v):
        if isinstance(v, ir.Value):
            return v
        k = ir.Constant(ir.DoubleType(), float(v))
        return ir.Constant(self.ty, [k] * self.n) if self.n else k

    def ci(self, v):
        if isinstance(v, ir.Value):
            return v
        v = int(v)
        if v >= 1 << 63:
            v -= 1 << 64
        k = ir.Constant(ir.IntType(64), v)
        return ir.Constant(self.ity, [k] * self.n) if self.n else k

    def intrinsic(self, name, *args):
        args = [self.c(a) for a in args]
        full = f"llvm.{name}.{mangle(args[0].type)}"
        fn = self.module.globals.get(full)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(args[0].type, [a.type for a in args]), name=full)
        return self.b.call(fn, args)

    # float arithmetic
    def add(self, a, b): return self.b.fadd(self.c(a), self.c(b))
    def sub(self, a, b): return self.b.fsub(self.c(a), self.c(b))
    def mul(self, a, b): return self.b.fmul(self.c(a), self.c(b))
    def div(self, a, b): return self.b.fdiv(self.c(a), self.c(b))
    def neg(self, a): return self.b.fneg(a)
    def fma(self, a, b, c): return self.intrinsic("fma", a, b, c)          # exact fused
    def mad(self, a, b, c): return self.intrinsic("fmuladd", a, b, c)      # fused if cheap
    def fabs(self, a): return self.intrinsic("fabs", a)
    def sqrt(self, a): return self.intrinsic("sqrt", a)
    def rint(self, a):
        """Round to the nearest integer, ties to even, without llvm.rint (which is a libm
        call below SSE4.1): (|a| + 2^52) - 2^52 for |a| < 2^52; larger doubles are integers."""
        m = self.fabs(a)
        r = self.copysign(self.sub(self.add(m, 2.0 ** 52), 2.0 ** 52), a)
        return self.sel(self.lt(m, 2.0 ** 52), r, a)
    def copysign(self, a, b): return self.intrinsic("copysign", a, b)

    def poly(self, x, coeffs):
        """Horner's rule, ascending coefficients."""
        p = self.c(coeffs[-1])
        for k in reversed(coeffs[:-1]):
            p = self.mad(p, x, k)
        return p

    # comparisons (ordered unless named otherwise) and selection
    def lt(self, a, b): return self.b.fcmp_ordered("<", self.c(a), self.c(b))
    def le(self, a, b): return self.b.fcmp_ordered("<=", self.c(a), self.c(b))
    def gt(self, a, b): return self.b.fcmp_ordered(">", self.c(a), self.c(b))
    def ge(self, a, b): return self.b.fcmp_ordered(">=", self.c(a), self.c(b))
    def eq(self, a, b): return self.b.fcmp_ordered("==", self.c(a), self.c(b))
    def ne(self, a, b): return self.b.fcmp_unordered("!=", self.c(a), self.c(b))
    def ult(self, a, b): return self.b.fcmp_unordered("<", self.c(a), self.c(b))
    def isnan(self, a): return self.b.fcmp_unordered("uno", a, a)
    def isinf(self, a): return self.eq(self.fabs(a), float("inf"))

    def nan_in(self, x, res):
        """res, but a NaN x comes back as x + x: quiet, as C's libm returns it."""
        return self.sel(self.isnan(x), self.add(x, x), res)
    def sel(self, cond, a, b): return self.b.select(cond, self.c(a), self.c(b))
    def and_(self, a, b): return self.b.and_(a, b)
    def or_(self, a, b): return self.b.or_(a, b)
    def not_(self, a): return self.b.not_(a)

    def clamp(self, x, lo, hi):
        """min(max(x, lo), hi); NaN becomes lo (callers restore NaN at the end)."""
        x = self.sel(self.gt(x, lo), x, lo)
        return self.sel(self.lt(x, hi), x, hi)

    # integer views
    def bits(self, a): return self.b.bitcast(a, self.ity)
    def flt(self, i): return self.b.bitcast(i, self.ty)
    def iadd(self, a, b): return self.b.add(self.ci(a), self.ci(b))
    def isub(self, a, b): return self.b.sub(self.ci(a), self.ci(b))
    def iand(self, a, b): return self.b.and_(self.ci(a), self.ci(b))
    def ixor(self, a, b): return self.b.xor(self.ci(a), self.ci(b))
    def shl(self, a, b): return self.b.shl(self.ci(a), self.ci(b))
    def ashr(self, a, b): return self.b.ashr(self.ci(a), self.ci(b))
    def lshr(self, a, b): return self.b.lshr(self.ci(a), self.ci(b))
    def ieq(self, a, b): return self.b.icmp_signed("==", self.ci(a), self.ci(b))
    def ilt(self, a, b): return self.b.icmp_signed("<", self.ci(a), self.ci(b))
    def isel(self, cond, a, b): return self.b.select(cond, self.ci(a), self.ci(b))
    def itof(self, i): return self.b.sitofp(i, self.ty)
    def signbit(self, a): return self.ilt(self.bits(a), 0)

    def pow2(self, n):
        """2^n for an integer vector n with -1022 <= n <= 1023."""
        return self.flt(self.shl(self.iadd(n, 1023), 52))

    def round_int(self, y):
        """(rint(y) as double, rint(y) as int64) for |y| < 2^51, by the shifter trick."""
        k = self.add(y, SHIFT)
        return self.sub(k, SHIFT), self.isub(self.bits(k), self.bits(self.c(SHIFT)))

    def any(self, cond):
        """An i1: whether any lane of ``cond`` is true."""
        if not self.n:
            return cond
        mask = self.b.bitcast(cond, ir.IntType(self.n))
        return self.b.icmp_unsigned("!=", mask, ir.Constant(ir.IntType(self.n), 0))


    def branch_merge(self, cond, slow, fast_values, name: str = "vm.slow"):
        """If any lane of ``cond``: run ``slow()`` (returns values like ``fast_values``) in
        its own block; merge with phis.  Leaves the builder in the merge block."""
        b = self.b
        start = b.block
        slow_block = b.append_basic_block(name)
        merge = b.append_basic_block("vm.merge")
        b.cbranch(self.any(cond), slow_block, merge)
        b.position_at_end(slow_block)
        slow_values = slow()
        slow_end = b.block
        b.branch(merge)
        b.position_at_end(merge)
        out = []
        for fv, sv in zip(fast_values, slow_values):
            phi = b.phi(fv.type)
            phi.add_incoming(fv, start)
            phi.add_incoming(sv, slow_end)
            out.append(phi)
        return out
    def two_sum(self, a, b):
        s = self.add(a, b)
        bb = self.sub(s, a)
        err = self.add(self.sub(a, self.sub(s, bb)), self.sub(b, bb))
        return s, err

    def per_lane_call(self, fname, args):
        """The C library's ``fname`` on each lane (f64 fallbacks only)."""
        fnty = ir.FunctionType(ir.DoubleType(), [ir.DoubleType()] * len(args))
        fn = self.module.globals.get(fname)
        if fn is None:
            fn = ir.Function(self.module, fnty, name=fname)
        if not self.n:
            return self.b.call(fn, args)
        out = ir.Constant(self.ty, ir.Undefined)
        for lane in range(self.n):
            idx = ir.Constant(ir.IntType(32), lane)
            out = self.b.insert_element(out, self.b.call(fn, [self.b.extract_element(a, idx) for a in args]), idx)
        return out
