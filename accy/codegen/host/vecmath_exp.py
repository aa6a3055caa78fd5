"""exp, exp2, expm1, log, log2 and log1p of :mod:`.vecmath`: exponentials reduced by n ln2
(Cody-Waite, 2^n built in the exponent bits), logarithms by x = 2^e m with m in
[sqrt(1/2), sqrt(2)) and log m = 2 atanh(s).

Each routine takes double-typed arguments and ``t`` (32 where the caller's type is float:
the value is rounded to float afterwards; 64 for double) and returns a double-typed value."""

from __future__ import annotations

from .vecmath_ir import DoubleArith
from .vecmath_tables import (
    EXP2_F32, EXP2_F64, EXP_F32, EXP_F64, LN2_F64, LN2_HI, LN2_HI42, LN2_LO, LN2_LO42, LOG2E_HI, LOG2E_LO,
    LOG_F32, LOG_F64, SQRT_HALF_BITS,
)


class ExpLog:
    """The exponentials and logarithms, built with ``m``."""

    def __init__(self, m: DoubleArith):
        self.m = m

    def exp(self, x, t):
        m = self.m
        # exp(x) = 2^n * exp(r), n = rint(x/ln2), r = x - n*ln2 in |r| <= ln2/2.
        if t == 32:
            xc = m.clamp(x, -104.0, 89.0)   # exp(-104) < 2^-150: rounds to 0; exp(89) > FLT_MAX
            n, ni = m.round_int(m.mul(xc, LOG2E_HI))
            r = m.fma(n, -LN2_F64, xc)      # error <= 2^-53 * |n ln2|: far below float's need
            p = m.add(1.0, m.mad(m.mul(r, r), m.poly(r, EXP_F32), r))
            res = m.flt(m.iadd(m.bits(p), m.shl(ni, 52)))   # p * 2^n, normal in double
        else:
            xc = m.clamp(x, -746.0, 710.0)  # exp(-746) < 2^-1075 rounds to 0; exp(710) > DBL_MAX
            n, ni = m.round_int(m.mul(xc, LOG2E_HI))
            r, t, c = self._exp_reduced(xc, n)
            h = m.add(1.0, r)                           # 1 + r = h + l exactly (Fast2Sum)
            l = m.add(m.sub(1.0, h), r)
            # e^(r+c) = 1 + r + t + c (1 + r + t): one rounding of the sum, nearly
            p = m.add(h, m.add(l, m.add(t, m.mad(c, m.add(r, t), c))))
            res = self._scale(p, ni)
        return m.nan_in(x, res)

    def _exp_reduced(self, x, n):
        """f64: x = n ln2 + r + c (c the rounding error of r); returns (r, t, c) with
        expm1(r) = r + t to the polynomial's accuracy."""
        m = self.m
        rh = m.fma(n, -LN2_HI, x)           # exact: the product is exact in the fma, the difference small
        r = m.fma(n, -LN2_LO, rh)
        c = m.fma(n, -LN2_LO, m.sub(rh, r))  # rh - r is exact (Sterbenz)
        return r, m.mul(m.mul(r, r), m.poly(r, EXP_F64)), c

    def _scale(self, p, ni):
        """p * 2^ni for -1080 <= ni <= 1025 with one rounding: two exact factors 2^(ni/2)."""
        m = self.m
        n1 = m.ashr(ni, 1)
        n2 = m.isub(ni, n1)
        return m.mul(m.mul(p, m.pow2(n1)), m.pow2(n2))

    def exp2(self, x, t):
        m = self.m
        lo, hi = (-152.0, 130.0) if t == 32 else (-1080.0, 1025.0)
        xc = m.clamp(x, lo, hi)
        n, ni = m.round_int(xc)
        r = m.sub(xc, n)                   # exact, |r| <= 1/2
        if t == 32:
            p = m.add(1.0, m.mul(r, m.mad(r, m.poly(r, EXP2_F32), LN2_F64)))
            res = m.flt(m.iadd(m.bits(p), m.shl(ni, 52)))
        else:
            # 1 + r ln2 + r^2 h(r) = (1 + a) + (al + tail), with r ln2_hi = a + al exactly and
            # 1 + a = h + l exactly (Fast2Sum), so the sum is rounded about once
            tail = m.mul(r, m.mad(r, m.poly(r, EXP2_F64), LN2_LO))
            a = m.mul(r, LN2_HI)
            al = m.fma(r, LN2_HI, m.neg(a))
            h = m.add(1.0, a)
            l = m.add(m.sub(1.0, h), a)
            p = m.add(h, m.add(l, m.add(al, tail)))
            res = self._scale(p, ni)
        return m.nan_in(x, res)

    def expm1(self, x, t):
        m = self.m
        # expm1(x) = 2^n (1 + q) - 1 = 2^n q + (2^n - 1), q = expm1(r); r as for exp.  n = 0
        # leaves q itself, so small x keeps full relative accuracy.
        if t == 32:
            xc = m.clamp(x, -40.0, 89.0)
            n, ni = m.round_int(m.mul(xc, LOG2E_HI))
            r = m.fma(n, -LN2_F64, xc)
            q = m.mad(m.mul(r, r), m.poly(r, EXP_F32), r)
            s = m.pow2(ni)
            res = m.fma(s, q, m.sub(s, 1.0))
        else:
            xc = m.clamp(x, -40.0, 710.0)   # expm1(-40) rounds to -1
            n, ni = m.round_int(m.mul(xc, LOG2E_HI))
            r, t, c = self._exp_reduced(xc, n)
            q = m.add(r, t)                 # expm1(r) = q + ql exactly (Fast2Sum, |t| < |r|)
            ql = m.add(m.sub(r, q), t)
            big = m.ieq(ni, 1024)           # 2^1024 is not a double: use 2^1023 and double the result
            s = m.pow2(m.isel(big, 1023, ni))
            # s q + (s - 1) + s (ql + c (1 + q)): the main sum exactly (two TwoSums: s - 1 is
            # not a double for n > 53 or n < -53; s q is exact), then the small terms, so the
            # result is rounded about once even where n = 1 cancels
            s1, s1l = m.two_sum(s, m.c(-1.0))
            hi, lo = m.two_sum(m.mul(s, q), s1)
            res = m.add(hi, m.add(m.add(lo, s1l), m.mul(s, m.add(ql, m.mad(c, q, c)))))
            res = m.mul(res, m.sel(big, 2.0, 1.0))
        res = m.sel(m.eq(x, 0.0), x, res)   # expm1(-0) = -0
        return m.nan_in(x, res)

    def _log_reduce(self, x, t):
        """x = 2^e * (1 + f), 1 + f in [sqrt(1/2), sqrt(2)).  Returns (e as double, f).
        f64: subnormal x are first scaled by 2^54."""
        m = self.m
        ix = m.bits(x)
        adj = None
        if t == 64:
            sub = m.lt(x, 2.0 ** -1022)
            ix = m.b.select(sub, m.bits(m.mul(x, 2.0 ** 54)), ix)
            adj = m.isel(sub, -54, 0)
        ix = m.isub(ix, SQRT_HALF_BITS)
        e = m.ashr(ix, 52)
        if adj is not None:
            e = m.iadd(e, adj)
        mant = m.flt(m.iadd(m.iand(ix, (1 << 52) - 1), SQRT_HALF_BITS))
        return m.itof(e), m.sub(mant, 1.0)

    def _log1p_f(self, f, t):
        """log(1+f) for f in [sqrt(1/2)-1, sqrt(2)-1], as (f, hfsq, tail) for f64, so that
        log(1+f) = f - hfsq + tail; or as one double for the f32 target."""
        m = self.m
        s = m.div(f, m.add(f, 2.0))
        z = m.mul(s, s)
        if t == 32:
            return m.mad(m.mul(s, z), m.poly(z, LOG_F32), m.add(s, s))
        # 2s = f - f^2/(2+f) = f - hfsq + s*hfsq, so log(1+f) = f - hfsq + s*(hfsq + z R(z))
        hfsq = m.mul(m.mul(f, f), 0.5)
        tail = m.mul(s, m.mad(z, m.poly(z, LOG_F64), hfsq))
        return hfsq, tail

    def log_specials(self, x, res):
        m = self.m
        res = m.sel(m.eq(x, float("inf")), x, res)
        res = m.sel(m.ult(x, 0.0), float("nan"), res)   # negative or NaN
        return m.sel(m.eq(x, 0.0), float("-inf"), res)

    def log(self, x, t):
        m = self.m
        e, f = self._log_reduce(x, t)
        if t == 32:
            res = m.mad(e, LN2_F64, self._log1p_f(f, t))
        else:
            hfsq, tail = self._log1p_f(f, t)
            # e ln2_hi + (f - (hfsq - (tail + e ln2_lo))): e*LN2_HI42 is exact
            inner = m.sub(hfsq, m.mad(e, LN2_LO42, tail))
            res = m.add(m.mul(e, LN2_HI42), m.sub(f, inner))
        return self.log_specials(x, res)

    def log2_parts(self, x):
        """log2(x) for finite x > 0 in double to about 1 ulp (f64 path; also pow's f32 path)."""
        m = self.m
        e, f = self._log_reduce(x, 64)
        hfsq, tail = self._log1p_f(f, 64)
        h = m.sub(f, hfsq)                                  # log(1+f) = h + l
        l = m.add(m.sub(m.sub(f, h), hfsq), tail)           # f - h - hfsq is exact
        vh = m.mul(h, LOG2E_HI)                             # (h + l) / ln2 = vh + vl
        vl = m.add(m.fma(h, LOG2E_HI, m.neg(vh)), m.mad(h, LOG2E_LO, m.mul(l, LOG2E_HI)))
        w = m.add(e, vh)                                    # e + vh + vl, |e| >= |vh| or e = 0
        vl = m.add(vl, m.add(m.sub(e, w), vh))
        return m.add(w, vl)

    def log2(self, x, t):
        m = self.m
        if t == 32:
            e, f = self._log_reduce(x, t)
            res = m.mad(self._log1p_f(f, t), LOG2E_HI, e)
        else:
            res = self.log2_parts(x)
        return self.log_specials(x, res)

    def log1p(self, x, t):
        m = self.m
        # log1p(x) = log(u) + c/u with u = 1 + x rounded and c = (1 + x) - u exactly
        u = m.add(x, 1.0)
        c = m.sel(m.lt(u, 2.0), m.sub(x, m.sub(u, 1.0)), m.sub(1.0, m.sub(u, x)))
        cu = m.div(c, u)
        e, f = self._log_reduce(u, 64 if t == 64 else 32)
        if t == 32:
            res = m.add(m.mad(e, LN2_F64, self._log1p_f(f, t)), cu)
        else:
            hfsq, tail = self._log1p_f(f, t)
            inner = m.sub(hfsq, m.add(tail, m.mad(e, LN2_LO42, cu)))
            res = m.add(m.mul(e, LN2_HI42), m.sub(f, inner))
        res = m.sel(m.eq(x, float("inf")), x, res)
        res = m.sel(m.ult(x, -1.0), float("nan"), res)
        res = m.sel(m.eq(x, -1.0), float("-inf"), res)
        return m.sel(m.eq(x, 0.0), x, res)                 # log1p(-0) = -0
