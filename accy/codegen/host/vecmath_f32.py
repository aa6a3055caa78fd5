"""exp, exp2 and sigmoid of :mod:`.vecmath` for float computed in float: no lane is widened
to double on the common path, so a <16 x float> stays one vector (the double route of the
other f32 routines splits it into two <8 x double> halves and converts both ways).

Accuracy without double (the bound is 0.501 ulp: the value before the last rounding must be
good to about 2^-34.5): exp(x) = 2^e T_j e^r, x = (16 e + j) ln2/16 + u + ul, where u = x -
n ln2_hi/16 is exact (one FMA), ul = -n ln2_lo/16 (|ul| < 2^-18), |u| < 2^-5.5, and T_j =
2^(j/16) a 16-entry table of float pairs hi + lo good to 2^-48 (an in-register permute:
one vpermps per table at 16 lanes, no gather).  Then T e^(u+ul) = hi + hi u + tail with

    tail = hi Q + lo (1 + u),  Q = u^2 P(u) + ul (1 + u + u^2/2)  (|Q| < 2^-11.9),

P the Taylor polynomial of (e^u - 1 - u)/u^2 to u^3 (truncation 2^-42).  hi u is split
exactly (a product and its FMA remainder) and hi + (hi u) by Fast2Sum, so only the small
terms are rounded, each to 2^-36 or so of the result, and the sum is rounded once at the
end: below 0.5007 ulp in the worst case; over every float32 argument 0.50051 (exp2
0.50053, sigmoid 0.50041).  exp2 shares it, with u + ul = (x - n/16) ln2 (the difference
exact, the product split by an FMA).  At 8 lanes each lookup is two 8-entry permutes and a
select (AVX2 has no 16-entry permute); every width gives the same bits.

A result that is a subnormal float (x in (-104, -87) for exp) would be rounded twice (to 24
bits, then to the subnormal's fewer), so a vector with such a lane takes the double routine
on a branch that is not taken otherwise; lanes below -104 and -inf are +0 directly.
Overflow is a compare against the last x whose exponential rounds to a finite float.

sigmoid(x) = e/(1 + e) or 1/(1 + e) with e = exp(-|x|) kept as the unrounded pair (the
last sum's Fast2Sum), and the quotient corrected by its exact remainder; below x = -40,
e/(1 + e) rounds as e does (they differ by a factor 1 - 2^-57): it is exp(x) there.
"""

from __future__ import annotations

import decimal
import struct
from fractions import Fraction

import llvmlite.ir as ir

from .vecmath_ir import DoubleArith
from .vecmath_tables import _LN2

TABLE_BITS = 4
TABLE_SIZE = 1 << TABLE_BITS


def _f32(v: float) -> float:
    """v rounded to float (to nearest even), as a Python float."""
    return struct.unpack("f", struct.pack("f", v))[0]


def _f32_split(value: decimal.Decimal) -> tuple[float, float]:
    hi = _f32(float(value))
    return hi, _f32(float(value - decimal.Decimal(hi)))


def _exp2_table() -> tuple[list[float], list[float]]:
    """2^(j/16) for j < 16 as float pairs hi + lo (lo rounded: 2^-48 relative)."""
    ctx = decimal.Context(prec=40)
    ln2 = decimal.Decimal(_LN2.numerator) / decimal.Decimal(_LN2.denominator)
    his, los = [], []
    for j in range(TABLE_SIZE):
        hi, lo = _f32_split(ctx.exp(ctx.multiply(ln2, decimal.Decimal(j) / TABLE_SIZE)))
        his.append(hi)
        los.append(lo)
    return his, los


EXP2_HI, EXP2_LO = _exp2_table()
INV_STEP = _f32(TABLE_SIZE / float(_LN2))         # 16/ln2: only picks n, need not be exact
_STEP = _LN2 / TABLE_SIZE
STEP_HI = _f32(float(_STEP))                        # x - n STEP_HI is exact in an FMA (it fits 24 bits)
STEP_LO = _f32(float(_STEP - Fraction(STEP_HI)))
LN2_F32_HI = _f32(float(_LN2))
LN2_F32_LO = _f32(float(_LN2 - Fraction(LN2_F32_HI)))
EXP_TAYLOR = [0.5, 1.0 / 6.0, 1.0 / 24.0, 1.0 / 120.0]   # (e^u - 1 - u)/u^2 to u^3: 2^-42 at |u| < 2^-5.5
SHIFT_F32 = 1.5 * 2.0**23                           # y + SHIFT - SHIFT rounds |y| < 2^22 to an integer
EXP_OVERFLOW = 88.72283172607421875                 # the largest float whose exp rounds to a finite float
EXP_SUBNORMAL = -87.0                               # below: the result may be subnormal (exp(-87.34) = 2^-126)
EXP_ZERO = -104.0                                   # exp(-104) < 2^-150: rounds to +0
SIGMOID_EXP = -40.0                                 # below: sigmoid(x) rounds as exp(x)


class FloatArith(DoubleArith):
    """:class:`.DoubleArith`'s operations on one float type (``float`` or ``<N x float>``),
    integers as i32 (but ``rint``, ``round_int`` and ``per_lane_call``, which are double's:
    :meth:`round_mul` rounds here), and the table lookups of the float routines."""

    def __init__(self, builder: ir.IRBuilder, ty):
        super().__init__(builder, ty)
        self.ity = self._vec(ir.IntType(32))

    def c(self, v):
        if isinstance(v, ir.Value):
            return v
        k = ir.Constant(ir.FloatType(), _f32(float(v)))
        return ir.Constant(self.ty, [k] * self.n) if self.n else k

    def ci(self, v):
        if isinstance(v, ir.Value):
            return v
        v = int(v)
        if v >= 1 << 31:
            v -= 1 << 32
        k = ir.Constant(ir.IntType(32), v)
        return ir.Constant(self.ity, [k] * self.n) if self.n else k

    def pow2(self, n):
        """2^n for an integer vector n with -126 <= n <= 127."""
        return self.flt(self.shl(self.iadd(n, 127), 23))

    def round_mul(self, x, k):
        """(rint(x k) as float, as i32) for |x k| < 2^22: one rounding of the product."""
        s = self.fma(x, k, SHIFT_F32)
        return self.sub(s, SHIFT_F32), self.isub(self.bits(s), self.bits(self.c(SHIFT_F32)))

    def lookup(self, values: list[float], idx):
        """``values[idx]`` per lane: lane by lane from a constant vector, which LLVM lowers to
        one variable permute (vpermps) where the table is as wide as the vector; a wider table
        is read in pieces of the vector's width, picked by select (at 8 lanes, AVX2 has no
        16-entry permute and would otherwise get lane-by-lane scalar code)."""
        n = self.n
        if n and len(values) > n and n & (n - 1) == 0:
            out = self.lookup(values[:n], self.iand(idx, n - 1))
            for start in range(n, len(values), n):
                piece = self.lookup(values[start:start + n], self.iand(idx, n - 1))
                out = self.b.select(self.ieq(self.iand(idx, -n), start), piece, out)
            return out
        table = ir.Constant(ir.VectorType(ir.FloatType(), len(values)), [ir.Constant(ir.FloatType(), v) for v in values])
        if not n:
            return self.b.extract_element(table, idx)
        out = ir.Constant(self.ty, ir.Undefined)
        for lane in range(self.n):
            k = ir.Constant(ir.IntType(32), lane)
            out = self.b.insert_element(out, self.b.extract_element(table, self.b.extract_element(idx, k)), k)
        return out


class SingleExp:
    """exp, exp2 and sigmoid on float types, built with ``m``; ``wide(name, *args)`` emits
    the double route of ``name`` (the subnormal-result branch)."""

    def __init__(self, m: FloatArith, wide):
        self.m = m
        self.wide = wide

    def _table(self, ni):
        """(e, hi, lo): n = 16 e + j, T_j = hi + lo."""
        m = self.m
        j = m.iand(ni, TABLE_SIZE - 1)
        return m.ashr(ni, TABLE_BITS), m.lookup(EXP2_HI, j), m.lookup(EXP2_LO, j)

    def _core(self, x, exp2: bool):
        """exp(x) (2^x where ``exp2``) as 2^e (s + tail), Fast2Sum-normalised but for the last
        sum: |tail| < 2^-11 |s|.  For x where the result is a normal float; garbage elsewhere
        (huge, infinite or NaN x), which the callers' selects replace."""
        m = self.m
        if exp2:
            n, ni = m.round_mul(x, float(TABLE_SIZE))
            r = m.fma(n, -1.0 / TABLE_SIZE, x)                  # exact, |r| <= 1/32
            u = m.mul(r, LN2_F32_HI)                            # r ln2 = u + ul, |ul| < 2^-30
            ul = m.mad(r, LN2_F32_LO, m.fma(r, LN2_F32_HI, m.neg(u)))
        else:
            n, ni = m.round_mul(x, INV_STEP)
            u = m.fma(n, -STEP_HI, x)                           # exact
            ul = m.mul(n, -STEP_LO)
        e, hi, lo = self._table(ni)
        u2 = m.mul(u, u)
        p = m.poly(u, EXP_TAYLOR)
        q = m.fma(u2, p, m.mad(ul, m.mad(u2, 0.5, u), ul))     # e^(u+ul) - 1 - u
        a = m.mul(hi, u)
        al = m.fma(hi, u, m.neg(a))                             # hi u = a + al exactly
        s = m.add(hi, a)
        sl = m.add(m.sub(hi, s), a)                             # hi + a = s + sl exactly
        tail = m.add(m.add(sl, al), m.fma(hi, q, m.mad(lo, u, lo)))
        return e, s, tail

    def _finish(self, x, e, s, tail, wide_name):
        """2^e (s + tail) rounded once; the double route where the result may be subnormal,
        +0 below that, inf past overflow, NaN kept."""
        m = self.m
        v = m.add(s, tail)
        res = m.flt(m.iadd(m.bits(v), m.shl(e, 23)))            # e <= 128 only where v < 1
        if wide_name == "exp":
            finite, low, zero = m.le(x, EXP_OVERFLOW), EXP_SUBNORMAL, EXP_ZERO
        else:
            finite, low, zero = m.lt(x, 128.0), -126.0, -151.0
        res = m.sel(finite, res, m.mul(x, float("inf")))         # inf, or NaN for NaN
        res = m.sel(m.lt(x, low), 0.0, res)
        return self._branch(m.and_(m.lt(x, low), m.gt(x, zero)), res, lambda: self.wide(wide_name, x))

    def _branch(self, cond, fast, slow):
        """fast, but in the lanes of ``cond`` slow(), computed only where some lane needs it."""
        m = self.m
        (merged,) = m.branch_merge(cond, lambda: [m.sel(cond, slow(), fast)], [fast], "vm.subnormal")
        return merged

    def exp(self, x):
        e, s, tail = self._core(x, exp2=False)
        return self._finish(x, e, s, tail, "exp")

    def exp2(self, x):
        e, s, tail = self._core(x, exp2=True)
        return self._finish(x, e, s, tail, "exp2")

    def sigmoid(self, x):
        m = self.m
        neg = m.neg(m.fabs(x))
        # -87 keeps 2^e normal for x > 87 (where 1/(1 + e) rounds to 1 all the same)
        e, s, tail = self._core(m.sel(m.gt(neg, EXP_SUBNORMAL), neg, EXP_SUBNORMAL), exp2=False)
        far = self._finish(neg, e, s, tail, "exp")          # exp(-|x|): sigmoid's value below -40
        scale = m.pow2(e)                                   # exact products (e >= -58 where it matters)
        v = m.add(s, tail)
        vl = m.add(m.sub(s, v), tail)                       # exp(-|x|) = (v + vl) scale
        v, vl = m.mul(v, scale), m.mul(vl, scale)
        d = m.add(v, 1.0)                                   # 1 + v = d + dl exactly (Fast2Sum)
        dl = m.add(m.add(m.sub(1.0, d), v), vl)
        pos = m.ge(x, 0.0)
        num, numl = m.sel(pos, 1.0, v), m.sel(pos, 0.0, vl)
        rd = m.div(1.0, d)                                  # one division: q = num rd is within an ulp,
        q = m.mul(num, rd)                                  # so its remainder is exact, and the
        rem = m.fma(m.neg(q), d, num)                       # correction makes up the difference
        res = m.mad(m.sub(m.add(rem, numl), m.mul(q, dl)), rd, q)
        return m.nan_in(x, m.sel(m.lt(x, SIGMOID_EXP), far, res))
