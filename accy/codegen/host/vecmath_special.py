"""tanh, sigmoid, erf, pow and rsqrt of :mod:`.vecmath`: each built from an exponential or
logarithm of :class:`.ExpLog` (but rsqrt), with the corrections that keep the error of
the quotient or product near one rounding.

Each routine takes double-typed arguments and ``t`` (32 where the caller's type is float:
the value is rounded to float afterwards; 64 for double) and returns a double-typed value."""

from __future__ import annotations

from .vecmath_exp import ExpLog
from .vecmath_ir import DoubleArith
from .vecmath_tables import (
    ERF_LARGE_F32, ERF_SMALL_F32, TANH_F64,
)


class Special:
    """tanh, sigmoid, erf, pow and rsqrt, built with ``m`` and ``exp_log``'s routines."""

    def __init__(self, m: DoubleArith, exp_log: ExpLog):
        self.m = m
        self.exp_log = exp_log

    def tanh(self, x, t):
        m = self.m
        ax = m.fabs(x)
        if t == 32:
            em = self.exp_log.expm1(m.mul(m.clamp(ax, 0.0, 10.0), 2.0), 32)   # tanh(10) rounds to 1 in float
            res = m.div(em, m.add(em, 2.0))
        else:
            em = self.exp_log.expm1(m.mul(m.clamp(ax, 0.0, 20.0), 2.0), 64)   # tanh(20) rounds to 1
            d, de = m.two_sum(em, m.c(2.0))
            q = m.div(em, d)
            rem = m.fma(m.neg(q), d, em)                    # em - q d, exactly
            large = m.add(q, m.div(m.sub(rem, m.mul(q, de)), d))      # em / (d + de)
            z = m.mul(ax, ax)
            small = m.mad(m.mul(ax, z), m.poly(z, TANH_F64), ax)
            res = m.sel(m.lt(ax, 0.55), small, large)
        res = m.copysign(res, x)
        return m.nan_in(x, res)

    def sigmoid(self, x, t):
        m = self.m
        e = self.exp_log.exp(m.neg(m.fabs(x)), t)                    # in (0, 1]
        num = m.sel(m.ge(x, 0.0), 1.0, e)
        if t == 32:
            res = m.div(num, m.add(e, 1.0))
        else:  # num / (d + dl) with 1 + e = d + dl exactly, and the quotient's remainder
            d, dl = m.two_sum(m.c(1.0), e)
            q = m.div(num, d)
            rem = m.fma(m.neg(q), d, num)
            res = m.add(q, m.div(m.sub(rem, m.mul(q, dl)), d))
        return m.nan_in(x, res)

    def erf(self, x, t):
        m = self.m
        if t == 64:
            return m.per_lane_call("erf", [x])
        ax = m.fabs(x)
        z = m.mul(ax, ax)
        small = m.mad(ax, m.poly(z, ERF_SMALL_F32), ax)     # x (1 + E(x^2))
        xl = m.clamp(ax, 0.84375, 3.95)                     # erf(3.95) rounds to 1 in float
        erfc = self.exp_log.exp(m.sub(m.poly(xl, ERF_LARGE_F32), m.mul(xl, xl)), 32)
        large = m.sub(1.0, erfc)
        res = m.copysign(m.sel(m.lt(ax, 0.84375), small, large), x)
        return m.nan_in(x, res)

    def pow(self, x, y, t):
        m = self.m
        if t == 64:
            return m.per_lane_call("pow", [x, y])
        a = m.fabs(x)
        lg = self.exp_log.log_specials(a, self.exp_log.log2_parts(a))         # about 1 ulp of double
        v = self.exp_log.exp2(m.mul(y, lg), 32)                      # |y log2 a| < 152 where it matters
        yint = m.eq(m.rint(y), y)                           # true for +-inf too
        half = m.mul(y, 0.5)
        yodd = m.and_(yint, m.ne(m.rint(half), half))
        neg = m.signbit(x)
        res = m.sel(m.and_(neg, yodd), m.neg(v), v)
        bad = m.and_(m.and_(m.lt(x, 0.0), m.not_(m.isinf(x))), m.not_(yint))   # negative ** non-integer
        res = m.sel(bad, float("nan"), res)
        one = m.or_(m.eq(x, 1.0), m.eq(y, 0.0))            # pow(1, y) = pow(x, +-0) = 1, even for NaN
        one = m.or_(one, m.and_(m.eq(x, -1.0), m.isinf(y)))
        return m.sel(one, 1.0, res)

    def rsqrt(self, x, t):
        m = self.m
        y = m.div(1.0, m.sqrt(x))
        if t == 32:                          # two roundings in double, then one to float
            return y
        # one Newton step on the residual 1 - x y^2, formed as 1 - (u + ul) y with u + ul = x y
        # exactly (u ~ sqrt(x) cannot overflow); 0, inf, NaN and negatives keep y
        u = m.mul(x, y)
        ul = m.fma(x, y, m.neg(u))
        r = m.sub(m.fma(m.neg(u), y, 1.0), m.mul(ul, y))
        ref = m.mad(m.mul(y, 0.5), r, y)
        return m.sel(m.isnan(ref), y, ref)
