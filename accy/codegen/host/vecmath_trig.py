"""sin, cos, atan and atan2 of :mod:`.vecmath`: sin and cos reduced by j pi/2 (a three-part
pi/2 with FMA; f32 arguments from 2^32 up by a Payne-Hanek table, f64 ones from 2^30 up by
the C library, each on a branch taken only when a lane needs it); atan reduced to [0, 1]
and then by tan(pi/8), atan2 by the octant.

Each routine takes double-typed arguments and ``t`` (32 where the caller's type is float:
the value is rounded to float afterwards; 64 for double) and returns a double-typed value."""

from __future__ import annotations

import llvmlite.ir as ir

from .vecmath_ir import DoubleArith
from .vecmath_tables import (
    ATAN_F32, COS_F32, COS_F64, PAYNE_HANEK, PIO2_1, PIO2_2, PIO2_3, PIO2_F64, PIO4_F64, PI_F64, SIN_F32,
    SIN_F64, TAN_PI_8, TRIG_F32_LIMIT, TRIG_F64_LIMIT, TWO_OVER_PI, PH_FIRST,
)


class Trig:
    """sin and cos, built with ``m``."""

    def __init__(self, m: DoubleArith):
        self.m = m

    def _trig_reduce(self, x, t):
        """x = j*pi/2 + r: returns (j mod 4 as int64, r_hi, r_lo) for |x| below the limit."""
        m = self.m
        j, ji = m.round_int(m.mul(x, TWO_OVER_PI))
        d = m.fma(j, -PIO2_1, x)                            # exact
        if t == 32:
            r = m.fma(j, -PIO2_2, d)
            r = m.fma(j, -PIO2_3, r)
            return m.iand(ji, 3), r, None
        p = m.mul(j, PIO2_2)
        pe = m.fma(j, PIO2_2, m.neg(p))                     # j*P2 = p + pe exactly
        s, se = m.two_sum(d, m.neg(p))
        lo = m.fma(j, -PIO2_3, m.sub(se, pe))
        rh = m.add(s, lo)
        rl = m.sub(lo, m.sub(rh, s))
        return m.iand(ji, 3), rh, rl

    def _trig_reduce_f32_huge(self, x):
        """Payne-Hanek for float arguments 2^32 <= |x| < 2^128 (exact: x = M 2^(k-23))."""
        m = self.m
        ix = m.bits(m.fabs(x))
        k = m.isub(m.lshr(ix, 52), 1023)
        idx = m.isub(k, PH_FIRST)
        idx = m.isel(m.ilt(idx, 0), 0, idx)
        idx = m.isel(m.ilt(idx, 127 - PH_FIRST), idx, 127 - PH_FIRST)
        mant = m.itof(m.lshr(m.b.or_(m.iand(ix, (1 << 52) - 1), m.ci(1 << 52)), 29))   # M, exact
        table = _ph_global(m.module)
        hi, lo = self._gather_pair(table, idx)
        p = m.mul(mant, hi)
        pe = m.fma(mant, hi, m.neg(p))
        jd, ji = m.round_int(p)                            # p < 2^26
        f = m.add(m.sub(p, jd), m.mad(mant, lo, pe))        # x*2/pi mod 4 - j, |f| <= 1/2 + 2^-27
        r = m.mul(f, PIO2_F64)
        sign = m.signbit(x)
        r = m.sel(sign, m.neg(r), r)
        ji = m.isel(sign, m.isub(0, ji), ji)
        return m.iand(ji, 3), r

    def _gather_pair(self, table, idx):
        """table[2*idx], table[2*idx + 1] per lane (scalar loads: the rare path only)."""
        m = self.m
        b = m.b
        zero = ir.Constant(ir.IntType(32), 0)

        def load(i):
            return b.load(b.gep(table, [zero, i], inbounds=True))

        if not m.n:
            i2 = b.shl(idx, m.ci(1))
            return load(i2), load(b.add(i2, m.ci(1)))
        hi = lo = ir.Constant(m.ty, ir.Undefined)
        for lane in range(m.n):
            li = ir.Constant(ir.IntType(32), lane)
            i2 = b.shl(b.extract_element(idx, li), ir.Constant(ir.IntType(64), 1))
            hi = b.insert_element(hi, load(i2), li)
            lo = b.insert_element(lo, load(b.add(i2, ir.Constant(ir.IntType(64), 1))), li)
        return hi, lo

    def _sincos_kernel(self, q, rh, rl, t, cos: bool):
        m = self.m
        z = m.mul(rh, rh)
        if t == 32:
            sinv = m.mad(m.mul(rh, z), m.poly(z, SIN_F32), rh)
            cosv = m.mad(m.mul(z, z), m.poly(z, COS_F32), m.mad(z, -0.5, 1.0))
        else:
            # sin(rh + rl) = sin rh + rl cos rh; cos(rh + rl) = cos rh - rl sin rh
            small = m.mad(m.mul(rh, z), m.poly(z, SIN_F64), m.mad(m.mul(rl, z), -0.5, rl))
            sinv = m.add(rh, small)
            zl = m.fma(rh, rh, m.neg(z))                     # rh^2 = z + zl
            hz = m.mul(z, 0.5)
            w = m.sub(1.0, hz)
            corr = m.sub(m.sub(m.sub(1.0, w), hz), m.mul(zl, 0.5))   # 1 - rh^2/2 - w, exactly but for zl's rounding
            corr = m.add(corr, m.sub(m.mul(m.mul(z, z), m.poly(z, COS_F64)), m.mul(rh, rl)))
            cosv = m.add(w, corr)
        if cos:
            q = m.iadd(q, 1)
        v = m.b.select(m.ieq(m.iand(q, 1), 1), cosv, sinv)
        return m.flt(m.ixor(m.bits(v), m.shl(m.iand(q, 2), 62)))

    def _trig(self, x, t, cos: bool):
        m = self.m
        q, rh, rl = self._trig_reduce(x, t)
        limit = TRIG_F32_LIMIT if t == 32 else TRIG_F64_LIMIT
        big = m.ge(m.fabs(x), limit)
        if t == 32:
            def slow():
                hq, hr = self._trig_reduce_f32_huge(x)
                return [m.b.select(big, hq, q), m.sel(big, hr, rh)]
            q, rh = self.m.branch_merge(big, slow, [q, rh])
            res = self._sincos_kernel(q, rh, None, t, cos)
            res = m.sel(m.isinf(x), float("nan"), res)
        else:
            res = self._sincos_kernel(q, rh, rl, t, cos)
            fast = res

            def slow():
                lib = m.per_lane_call("cos" if cos else "sin", [x])
                return [m.sel(big, lib, fast)]
            (res,) = self.m.branch_merge(big, slow, [res])
        if not cos:
            res = m.sel(m.eq(x, 0.0), x, res)               # sin(-0) = -0
        return res

    def sin(self, x, t):
        m = self.m
        return self._trig(x, t, cos=False)

    def cos(self, x, t):
        m = self.m
        return self._trig(x, t, cos=True)


def _ph_global(module):
    name = "accy.vecmath.payne_hanek_f32"
    g = module.globals.get(name)
    if g is None:
        arr = ir.ArrayType(ir.DoubleType(), len(PAYNE_HANEK))
        g = ir.GlobalVariable(module, arr, name=name)
        g.linkage = "internal"
        g.global_constant = True
        g.initializer = ir.Constant(arr, [ir.Constant(ir.DoubleType(), v) for v in PAYNE_HANEK])
    return g


class Arctangent:
    """atan and atan2, built with ``m``."""

    def __init__(self, m: DoubleArith):
        self.m = m

    def _atan_unit(self, q):
        """atan(q) for q in [0, 1] (double, to about 2^-38 relative): above tan(pi/8),
        atan q = pi/4 + atan r with r = (q - 1) / (q + 1), so |r| <= tan(pi/8)."""
        m = self.m
        far = m.gt(q, TAN_PI_8)
        r = m.sel(far, m.div(m.sub(q, 1.0), m.add(q, 1.0)), q)
        z = m.mul(r, r)
        a = m.mad(m.mul(r, z), m.poly(z, ATAN_F32), r)
        return m.sel(far, m.add(a, PIO4_F64), a)

    def atan(self, x, t):
        m = self.m
        if t == 64:
            return m.per_lane_call("atan", [x])
        a = m.fabs(x)
        big = m.gt(a, 1.0)                               # atan a = pi/2 - atan(1/a); inf gives pi/2
        v = self._atan_unit(m.sel(big, m.div(1.0, a), a))
        v = m.sel(big, m.sub(PIO2_F64, v), v)
        return m.nan_in(x, m.copysign(v, x))             # atan(-0) = -0

    def atan2(self, y, x, t):
        """atan2(y, x), C99's special cases: the smaller magnitude over the larger (0 where both
        are 0, 1 where both are infinite), reflected by the octant; the sign of x's zero picks
        +-0 or +-pi, y's sign the result's."""
        m = self.m
        if t == 64:
            return m.per_lane_call("atan2", [y, x])
        ay, ax = m.fabs(y), m.fabs(x)
        steep = m.gt(ay, ax)
        num, den = m.sel(steep, ax, ay), m.sel(steep, ay, ax)
        q = m.div(num, den)
        q = m.sel(m.eq(den, 0.0), 0.0, q)
        q = m.sel(m.and_(m.isinf(ax), m.isinf(ay)), 1.0, q)
        v = self._atan_unit(q)
        v = m.sel(steep, m.sub(PIO2_F64, v), v)
        v = m.sel(m.signbit(x), m.sub(PI_F64, v), v)
        res = m.copysign(v, y)
        return m.sel(m.or_(m.isnan(x), m.isnan(y)), m.add(y, x), res)
