"""A vector math library emitted as inline LLVM IR.

The host backend calls :func:`emit` to evaluate an elementary function on a
``float``, ``double``, ``<N x float>`` or ``<N x double>`` value.  Each routine is
defined once per (function, type) in the caller's module as an ``internal
alwaysinline`` function, so a kernel that calls ``exp`` five times holds one
copy, and the O3 pipeline inlines it into straight-line vector code.

Design
------
* **float (f32) routines compute in double.**  Each f32 lane is widened to
  double, the function is evaluated with a polynomial fitted to about 2^-34
  relative error (far fewer terms than a double-accurate one), and the result
  is rounded to float once.  The error is then 0.5 ulp plus a few thousandths,
  overflow and gradual underflow through the float subnormals fall out of the
  final ``fptrunc`` at exactly the right thresholds, and the same algorithms
  serve f32 and f64 with different coefficient sets.  The cost is twice the
  vector work of a pure-float formulation (a <16 x float> becomes two
  <8 x double> halves); it measures well under 1 ns per element (bench/vecmath.py).
  f32 routines call nothing external: no libm, no other symbol.
* **double (f64) routines** use the same range reductions with extra-precision
  steps (Cody-Waite with FMA, double-double corrections) and longer
  polynomials.  ``erf``, ``pow``, ``atan`` and ``atan2`` in f64, and ``sin``/``cos``
  of f64 arguments with ``|x| >= 2^30``, call the C library per lane (a branch that
  is not taken unless some lane needs it, for sin/cos).
* Range reduction: exp/exp2/expm1 by n*ln2 (Cody-Waite, 2^n built in the
  exponent bits); log/log2/log1p by splitting x = 2^e * m with m in
  [sqrt(1/2), sqrt(2)) and log(m) = 2 atanh(s), s = (m-1)/(m+1); sin/cos by
  j*pi/2 with a three-part pi/2 and FMA for |x| < 2^32 (f32) or 2^30 (f64); f32
  arguments from 2^32 up are reduced exactly with a Payne-Hanek table of
  (2^k * 2/pi) mod 4 (per-lane loads, on a branch taken only when a lane
  needs it); atan by atan x = pi/2 - atan(1/x) above 1 and pi/4 + atan((x-1)/(x+1))
  above tan(pi/8); atan2 by the smaller magnitude over the larger, reflected by octant.
* Special values follow C99 Annex F (NaN in, NaN out; signed zeros; infinities;
  pow's special cases), checked by ``tests/test_vecmath.py``.
* Polynomial evaluation uses ``llvm.fmuladd`` (fused where the target has FMA);
  the steps that need an exact fused multiply-add (Cody-Waite, error-free
  products, division remainders) use ``llvm.fma``, which on a host without FMA
  LLVM lowers to a call of ``fma``.  Every x86 CPU with AVX2 has FMA; compiled
  for haswell or znver5 the f32 routines contain no call at all, and the f64 ones
  only the C-library fallbacks named above.
* Speed (bench/vecmath.py, AMD EPYC znver5, 16 f32 / 8 f64 lanes, 10^7 elements
  streamed): f32 exp 0.35, log 0.33, sin 0.47, cos 0.45 ns/element (scalar libm
  1.4 / 1.6 / 7.4 / 7.3; NumPy 0.64 / 0.50 / 1.23 / 1.24); f64 exp 0.71, log 0.64,
  sin 1.6, cos 1.7 ns/element.

Coefficients
------------
Every polynomial below was derived for this module by Chebyshev interpolation
(``mpmath.chebyfit``, 60 digits, which is within a small factor of minimax) of
the smooth remainder function named in its comment, on the stated interval,
then rounded to double; the relative error of the whole approximation with the
rounded coefficients was then measured on a 400-point grid in 60-digit
arithmetic and is stated as "rel".  :func:`_fit` reproduces a set (it needs
mpmath, which is not a dependency: it is a maintainer's tool, no test calls it).
"""

from __future__ import annotations

from fractions import Fraction

import llvmlite.ir as ir

__all__ = ["FUNCTIONS", "MEASURED", "LIBM_F64", "arity", "emit", "max_ulp", "routine"]

FUNCTIONS = ("exp", "exp2", "expm1", "log", "log2", "log1p", "erf", "tanh", "sigmoid",
             "sin", "cos", "pow", "rsqrt", "atan", "atan2")

_ARITY = {"pow": 2, "atan2": 2}

# The documented largest error in ulp (of the result type, at the exact value): the
# measured maximum, rounded up.  MEASURED is what the sweeps found when the routines were
# written (AMD znver5), with the kernels, samples and ulp measure of
# tests/test_vecmath.py driven by scratch scripts: f32 over every 7th float32 bit pattern
# (600 million inputs per function; pow: 4 million random pairs) plus that file's dense
# samples, against NumPy float64; f64 over about 100000 inputs per function from the
# same sample generator, against mpmath at 150 bits.  The tests assert these bounds on
# smaller samples (every 997th float32 for exp, log, sin, cos).  The f32 routines round
# a value good to about 2^-34 once, so they are correctly rounded but for rare near-ties.
# f64 erf, pow, atan and atan2 (all arguments) and sin/cos with |x| >= 2^30 are the C library's
# (glibc documents 1 ulp for them), measured here with glibc.  f64 sigmoid of a negative x
# is e / (1 + e) with e = exp(x): exp's error counts double where e and the result lie in
# different binades (1.49 ulp over 10 million random x in [-40, -0.5], against long double).
# atan and atan2 (written later, swept on a shared machine): f32 atan over every 7th float32
# bit pattern, atan2 over 16 million random pairs (half of them of ratio in [-4, 4]) against
# NumPy float64; f64 (the C library's, glibc) over 20000 inputs against mpmath at 150 bits.
MEASURED = {
    "f32": {"exp": 0.5000, "exp2": 0.5000, "expm1": 0.5002, "log": 0.5001, "log2": 0.5002,
            "log1p": 0.5002, "erf": 0.5000, "tanh": 0.5001, "sigmoid": 0.5000, "sin": 0.5002,
            "cos": 0.5002, "pow": 0.5000, "rsqrt": 0.5000, "atan": 0.5001, "atan2": 0.5001},
    "f64": {"exp": 0.7483, "exp2": 0.7497, "expm1": 0.7829, "log": 0.7681, "log2": 0.7059,
            "log1p": 0.7521, "erf": 0.8790, "tanh": 0.7522, "sigmoid": 1.4902, "sin": 0.6769,
            "cos": 0.6974, "pow": 0.5031, "rsqrt": 0.5000, "atan": 0.5103, "atan2": 0.5038},
}
_MAX_ULP = {
    "f32": dict.fromkeys(MEASURED["f32"], 0.501),
    "f64": {"exp": 0.8, "exp2": 0.8, "expm1": 0.85, "log": 0.8, "log2": 0.75, "log1p": 0.8,
            "erf": 1.0, "tanh": 0.8, "sigmoid": 1.5, "sin": 1.0, "cos": 1.0, "pow": 1.0,
            "rsqrt": 0.51, "atan": 1.0, "atan2": 1.0},
}

# The f64 routines that are the C library's, called per lane, and the C function:
# for all arguments erf, pow, atan and atan2; for |x| >= TRIG_F64_LIMIT only, sin and cos.
LIBM_F64 = {"erf": "erf", "pow": "pow", "sin": "sin", "cos": "cos", "atan": "atan", "atan2": "atan2"}
TRIG_F64_LIMIT = 2.0 ** 30
TRIG_F32_LIMIT = 2.0 ** 32   # x*2/pi rounds by < 2^-21 there, so |r| stays in the fitted range


def arity(name: str) -> int:
    """How many arguments ``name`` takes (2 for pow and atan2, else 1)."""
    _check_name(name)
    return _ARITY.get(name, 1)


def max_ulp(name: str, dtype: str) -> float:
    """The documented largest error of ``name`` in ``dtype`` ("f32" or "f64"), in ulp
    of the result type at the exact value."""
    _check_name(name)
    if dtype not in _MAX_ULP:
        raise ValueError(f"dtype must be 'f32' or 'f64', got {dtype!r}")
    return _MAX_ULP[dtype][name]


def _check_name(name: str) -> None:
    if name not in FUNCTIONS:
        raise ValueError(f"unknown vecmath function {name!r}; supported: {', '.join(FUNCTIONS)}")


# --------------------------------------------------------------------------------------
def _hx(text: str) -> list[float]:
    return [float.fromhex(t) for t in text.split()]


# Coefficient sets (ascending powers).  f32 sets are for evaluation in double with a
# target of about 2^-34 relative error; f64 sets aim at 2^-57 or better.

# (e^r - 1 - r) / r^2 on |r| <= ln2/2 + 1e-3; expm1(r) = r + r^2 g(r), exp = 1 + that.
EXP_F32 = _hx("""
    0x1.0000000000000p-1 0x1.55555567a0b8bp-3 0x1.5555555ca616bp-5
    0x1.1110c55c07591p-7 0x1.6c1684dfde978p-10 0x1.a1533738c378ep-13
    0x1.a114843980dd4p-16""")  # 7 terms, rel 2^-36.5
EXP_F64 = _hx("""
    0x1.0000000000000p-1 0x1.5555555555557p-3 0x1.5555555555556p-5
    0x1.111111111007ep-7 0x1.6c16c16c1629fp-10 0x1.a01a01ac1adebp-13
    0x1.a01a01a6f59a9p-16 0x1.71de0190b33a1p-19 0x1.27e4db08819d2p-22
    0x1.af4f375ba602bp-26 0x1.1f73c205d8d57p-29""")  # 11 terms, rel 2^-60.3
# (2^r - 1 - r ln2) / r^2 on |r| <= 0.501; 2^r = 1 + r ln2 + r^2 h(r).
EXP2_F32 = _hx("""
    0x1.ebfbdff82c58fp-3 0x1.c6b08d8887c96p-5 0x1.3b2ab7025cf35p-7
    0x1.5d879de8126f4p-10 0x1.4308dd707e6f5p-13 0x1.00a645ec3373dp-16
    0x1.639554a4ce61cp-20""")  # rel 2^-37.7
EXP2_F64 = _hx("""
    0x1.ebfbdff82c58fp-3 0x1.c6b08d704a0c2p-5 0x1.3b2ab6fba4e78p-7
    0x1.5d87fe78a5220p-10 0x1.430912f86bf30p-13 0x1.ffcbfc673a9fdp-17
    0x1.62c022402d57ap-20 0x1.b524fa5dd26a3p-24 0x1.e4cf1c64949f7p-28
    0x1.e9d50e594c8e7p-32 0x1.c4904e1e94586p-36""")  # rel 2^-58.1
# (log((1+s)/(1-s)) - 2s) / s^3 as a polynomial in z = s^2 on [0, 0.0295] (|s| <= 3-2sqrt2).
LOG_F32 = _hx("""
    0x1.5555554b9d547p-1 0x1.9999ebe5e8b5fp-2 0x1.245c07223544ap-2
    0x1.dddba97136f27p-3""")  # rel 2^-35.8
LOG_F64 = _hx("""
    0x1.5555555555555p-1 0x1.9999999999a3ap-2 0x1.249249247670ap-2
    0x1.c71c7201fc0e6p-3 0x1.745cf8c09a9d4p-3 0x1.3b1c43c68eb6dp-3
    0x1.0fbd140544b63p-3 0x1.0c135adcf3011p-3""")  # rel 2^-60.7
# (sin r - r) / r^3 in z = r^2 on [0, 0.6170] ((pi/4)^2 = 0.61685).
SIN_F32 = _hx("""
    -0x1.555555545dcd6p-3 0x1.11110dee98fb5p-7 -0x1.a013a6ca5789cp-13
    0x1.6dbdc6f2b85e2p-19""")  # rel 2^-35.6
SIN_F64 = _hx("""
    -0x1.5555555555555p-3 0x1.1111111111110p-7 -0x1.a01a01a019936p-13
    0x1.71de3a5460533p-19 -0x1.ae64541251e39p-26 0x1.61217eaffbfdbp-33
    -0x1.ab179e14267cdp-41""")  # rel 2^-57.1
# (cos r - 1 + r^2/2) / r^4 in z = r^2 on [0, 0.6170].
COS_F32 = _hx("""
    0x1.5555555502badp-5 -0x1.6c16bf548391dp-10 0x1.a015c3f71c2f7p-16
    -0x1.2524228ea066dp-22""")  # rel 2^-39.5
COS_F64 = _hx("""
    0x1.5555555555555p-5 -0x1.6c16c16c16966p-10 0x1.a01a019f4e7d9p-16
    -0x1.27e4fa179895fp-22 0x1.1eeb68a508535p-29 -0x1.907d724680d4ep-37""")  # rel 2^-59.5
# (tanh x - x) / x^3 in z = x^2 on [0, 0.3026] (|x| <= 0.55).
TANH_F64 = _hx("""
    -0x1.5555555555555p-2 0x1.1111111111032p-3 -0x1.ba1ba1b9feb3cp-5
    0x1.664f48770be76p-6 -0x1.226e32eebbb26p-7 0x1.d6d338edc6017p-9
    -0x1.7d97cb7a94b76p-10 0x1.34c57de48a611p-11 -0x1.ec0e9550d42c9p-13
    0x1.64f707d11ba4fp-14 -0x1.59962093e21d1p-16""")  # rel 2^-57.0
# (atan r - r) / r^3 in z = r^2 on [0, 0.17158] (|r| <= tan(pi/8) = 0.41421, plus 1e-6).
ATAN_F32 = _hx("""
    -0x1.5555555502186p-2 0x1.9999982594c54p-3 -0x1.2491c08b053bap-3
    0x1.c6f6872eedce2p-4 -0x1.71d3c09a8068fp-4 0x1.24434c19c0a31p-4
    -0x1.4b3887bc46e6dp-5""")  # rel 2^-38.3
# erf(x)/x - 1 in z = x^2 on [0, 0.7120] (|x| <= 0.84375).
ERF_SMALL_F32 = _hx("""
    0x1.06eba82137a74p-3 -0x1.812746a87799dp-2 0x1.ce2f1e0b48cfcp-4
    -0x1.b82c412e54045p-6 0x1.564db6469e54bp-8 -0x1.bed6b1da95743p-11
    0x1.e759d8ca5b6ecp-14 -0x1.6f15c418757d9p-17""")  # rel 2^-38.5
# log(erfc x) + x^2 in x on [0.84375, 3.95]; erfc x = exp(that - x^2), rel error of erfc 2^-36.5.
ERF_LARGE_F32 = _hx("""
    0x1.eb3f71ab1aebcp-19 -0x1.20df03a3eb67cp+0 0x1.742a367e3941fp-2
    -0x1.a53dd83d2cb0bp-4 0x1.39067629b5893p-6 0x1.abef9e585b16cp-12
    -0x1.0ab6aa8bde774p-9 0x1.ea9fd7c67b193p-11 -0x1.1905513c03d54p-12
    0x1.c6104f8789b55p-15 -0x1.04864b491e9e1p-17 0x1.9692f47b8c8ccp-21
    -0x1.83e222129f86dp-25 0x1.55c3dd754cf4dp-30""")


def _fit(g, interval, terms, digits=60):  # pragma: no cover - maintainer's tool, needs mpmath
    """Chebyshev-interpolation coefficients (ascending, rounded to double) of ``g`` on
    ``interval`` with ``terms`` terms, as used for the tables above.  For example
    EXP_F32 is ``_fit(lambda r: (mp.exp(r) - 1 - r) / r**2, [-L, L], 7)`` with
    L = ln2/2 + 1e-3 (define g's removable singularity at 0 by its limit)."""
    import mpmath as mp

    with mp.workdps(digits):
        return [float(c) for c in mp.chebyfit(g, interval, terms, asc=True)]


# --------------------------------------------------------------------------------------
# Exact constants, computed here from integer arithmetic: pi to 480 bits by Machin's
# formula, and ln 2 from its atanh series.

_PREC = 480


def _atan_inv(n: int, one: int) -> int:
    """atan(1/n) * one, by its Taylor series in integers."""
    total, term, k, sign = 0, one // n, 1, 1
    n2 = n * n
    while term:
        total += sign * (term // k)
        term //= n2
        k += 2
        sign = -sign
    return total


def _atanh_inv(n: int, one: int) -> int:
    total, term, k = 0, one // n, 1
    n2 = n * n
    while term:
        total += term // k
        term //= n2
        k += 2
    return total


_ONE = 1 << (_PREC + 32)
_PI = Fraction(16 * _atan_inv(5, _ONE) - 4 * _atan_inv(239, _ONE), _ONE)   # Machin
_LN2 = Fraction(2 * _atanh_inv(3, _ONE), _ONE)                             # 2 atanh(1/3)


def _split(value: Fraction, parts: int, bits: int = 53) -> list[float]:
    """``value`` as a sum of ``parts`` doubles, each the rounding of what is left
    (optionally to fewer than 53 significant bits, so products with small
    integers are exact)."""
    out = []
    for _ in range(parts):
        f = float(value)
        if bits < 53 and f != 0.0:
            m, e = _frexp_fraction(value)
            f = float(Fraction(round(m * (1 << bits)), 1 << bits) * Fraction(2) ** e)
        out.append(f)
        value -= Fraction(f)
    return out


def _frexp_fraction(v: Fraction) -> tuple[Fraction, int]:
    e = v.numerator.bit_length() - v.denominator.bit_length()
    m = v / Fraction(2) ** e
    while abs(m) >= 1:
        m /= 2
        e += 1
    while abs(m) < Fraction(1, 2):
        m *= 2
        e -= 1
    return m, e


LN2_F64 = float(_LN2)
LN2_HI, LN2_LO = _split(_LN2, 2)                 # for fma Cody-Waite: x - n*LN2_HI is exact
LN2_HI42, LN2_LO42 = _split(_LN2, 2, bits=42)    # e*LN2_HI42 exact for |e| < 2^11
LOG2E_HI, LOG2E_LO = _split(1 / _LN2, 2)
PIO2_1, PIO2_2, PIO2_3 = _split(_PI / 2, 3)
TWO_OVER_PI = float(2 / _PI)
PIO2_F64 = float(_PI / 2)
PI_F64, PIO4_F64 = float(_PI), float(_PI / 4)
TAN_PI_8 = 0.41421356237309503                  # tan(pi/8) = sqrt(2) - 1, rounded: where atan reduces
SQRT_HALF_BITS = 0x3FE6A09E667F3BCD             # the double nearest sqrt(1/2)
SHIFT = float.fromhex("0x1.8p52")                                # x + SHIFT - SHIFT rounds x to an integer


_PH_FIRST = 32


def _payne_hanek_table() -> list[float]:
    """For an f32 argument x = M * 2^(k-23) (M a 24-bit integer, 32 <= k <= 127):
    (2^(k-23) * 2/pi) mod 4 as hi + lo doubles, entry k - 32.  M times it, mod 4,
    is x*2/pi mod 4 with an error below 2^24 * 2^-150."""
    two_over_pi = 2 / _PI
    table = []
    for k in range(_PH_FIRST, 128):
        v = Fraction(2) ** (k - 23) * two_over_pi
        v -= 4 * (v.numerator // (4 * v.denominator))
        hi, lo = _split(v, 2)
        table += [hi, lo]
    return table


PAYNE_HANEK = _payne_hanek_table()


# --------------------------------------------------------------------------------------
# IR helpers


def _mangle(ty) -> str:
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{_mangle(ty.element)}"
    if isinstance(ty, ir.DoubleType):
        return "f64"
    if isinstance(ty, ir.FloatType):
        return "f32"
    if isinstance(ty, ir.IntType):
        return f"i{ty.width}"
    raise TypeError(f"vecmath: unsupported type {ty}")


def _is_float_type(ty) -> bool:
    el = ty.element if isinstance(ty, ir.VectorType) else ty
    return isinstance(el, (ir.FloatType, ir.DoubleType)) and not isinstance(el, ir.HalfType)


class _M:
    """Arithmetic on one double type (``double`` or ``<N x double>``) for the routines."""

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
        full = f"llvm.{name}.{_mangle(args[0].type)}"
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


# --------------------------------------------------------------------------------------
# The routines.  Each takes the helper, double-typed arguments and ``t`` (32 when the
# caller's type is float: the value is rounded to float afterwards; 64 for double) and
# returns a double-typed value.


def _exp(m: _M, x, t):
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
        r, t, c = _exp_reduced(m, xc, n)
        h = m.add(1.0, r)                           # 1 + r = h + l exactly (Fast2Sum)
        l = m.add(m.sub(1.0, h), r)
        # e^(r+c) = 1 + r + t + c (1 + r + t): one rounding of the sum, nearly
        p = m.add(h, m.add(l, m.add(t, m.mad(c, m.add(r, t), c))))
        res = _scale(m, p, ni)
    return m.nan_in(x, res)


def _exp_reduced(m: _M, x, n):
    """f64: x = n ln2 + r + c (c the rounding error of r); returns (r, t, c) with
    expm1(r) = r + t to the polynomial's accuracy."""
    rh = m.fma(n, -LN2_HI, x)           # exact: the product is exact in the fma, the difference small
    r = m.fma(n, -LN2_LO, rh)
    c = m.fma(n, -LN2_LO, m.sub(rh, r))  # rh - r is exact (Sterbenz)
    return r, m.mul(m.mul(r, r), m.poly(r, EXP_F64)), c


def _scale(m: _M, p, ni):
    """p * 2^ni for -1080 <= ni <= 1025 with one rounding: two exact factors 2^(ni/2)."""
    n1 = m.ashr(ni, 1)
    n2 = m.isub(ni, n1)
    return m.mul(m.mul(p, m.pow2(n1)), m.pow2(n2))


def _exp2(m: _M, x, t):
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
        res = _scale(m, p, ni)
    return m.nan_in(x, res)


def _expm1(m: _M, x, t):
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
        r, t, c = _exp_reduced(m, xc, n)
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


def _log_reduce(m: _M, x, t):
    """x = 2^e * (1 + f), 1 + f in [sqrt(1/2), sqrt(2)).  Returns (e as double, f).
    f64: subnormal x are first scaled by 2^54."""
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


def _log1p_f(m: _M, f, t):
    """log(1+f) for f in [sqrt(1/2)-1, sqrt(2)-1], as (f, hfsq, tail) for f64, so that
    log(1+f) = f - hfsq + tail; or as one double for the f32 target."""
    s = m.div(f, m.add(f, 2.0))
    z = m.mul(s, s)
    if t == 32:
        return m.mad(m.mul(s, z), m.poly(z, LOG_F32), m.add(s, s))
    # 2s = f - f^2/(2+f) = f - hfsq + s*hfsq, so log(1+f) = f - hfsq + s*(hfsq + z R(z))
    hfsq = m.mul(m.mul(f, f), 0.5)
    tail = m.mul(s, m.mad(z, m.poly(z, LOG_F64), hfsq))
    return hfsq, tail


def _log_specials(m: _M, x, res):
    res = m.sel(m.eq(x, float("inf")), x, res)
    res = m.sel(m.ult(x, 0.0), float("nan"), res)   # negative or NaN
    return m.sel(m.eq(x, 0.0), float("-inf"), res)


def _log(m: _M, x, t):
    e, f = _log_reduce(m, x, t)
    if t == 32:
        res = m.mad(e, LN2_F64, _log1p_f(m, f, t))
    else:
        hfsq, tail = _log1p_f(m, f, t)
        # e ln2_hi + (f - (hfsq - (tail + e ln2_lo))): e*LN2_HI42 is exact
        inner = m.sub(hfsq, m.mad(e, LN2_LO42, tail))
        res = m.add(m.mul(e, LN2_HI42), m.sub(f, inner))
    return _log_specials(m, x, res)


def _log2_parts(m: _M, x):
    """log2(x) for finite x > 0 in double to about 1 ulp (f64 path; also pow's f32 path)."""
    e, f = _log_reduce(m, x, 64)
    hfsq, tail = _log1p_f(m, f, 64)
    h = m.sub(f, hfsq)                                  # log(1+f) = h + l
    l = m.add(m.sub(m.sub(f, h), hfsq), tail)           # f - h - hfsq is exact
    vh = m.mul(h, LOG2E_HI)                             # (h + l) / ln2 = vh + vl
    vl = m.add(m.fma(h, LOG2E_HI, m.neg(vh)), m.mad(h, LOG2E_LO, m.mul(l, LOG2E_HI)))
    w = m.add(e, vh)                                    # e + vh + vl, |e| >= |vh| or e = 0
    vl = m.add(vl, m.add(m.sub(e, w), vh))
    return m.add(w, vl)


def _log2(m: _M, x, t):
    if t == 32:
        e, f = _log_reduce(m, x, t)
        res = m.mad(_log1p_f(m, f, t), LOG2E_HI, e)
    else:
        res = _log2_parts(m, x)
    return _log_specials(m, x, res)


def _log1p(m: _M, x, t):
    # log1p(x) = log(u) + c/u with u = 1 + x rounded and c = (1 + x) - u exactly
    u = m.add(x, 1.0)
    c = m.sel(m.lt(u, 2.0), m.sub(x, m.sub(u, 1.0)), m.sub(1.0, m.sub(u, x)))
    cu = m.div(c, u)
    e, f = _log_reduce(m, u, 64 if t == 64 else 32)
    if t == 32:
        res = m.add(m.mad(e, LN2_F64, _log1p_f(m, f, t)), cu)
    else:
        hfsq, tail = _log1p_f(m, f, t)
        inner = m.sub(hfsq, m.add(tail, m.mad(e, LN2_LO42, cu)))
        res = m.add(m.mul(e, LN2_HI42), m.sub(f, inner))
    res = m.sel(m.eq(x, float("inf")), x, res)
    res = m.sel(m.ult(x, -1.0), float("nan"), res)
    res = m.sel(m.eq(x, -1.0), float("-inf"), res)
    return m.sel(m.eq(x, 0.0), x, res)                 # log1p(-0) = -0


# sin and cos ------------------------------------------------------------------------


def _trig_reduce(m: _M, x, t):
    """x = j*pi/2 + r: returns (j mod 4 as int64, r_hi, r_lo) for |x| below the limit."""
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


def _trig_reduce_f32_huge(m: _M, x):
    """Payne-Hanek for float arguments 2^32 <= |x| < 2^128 (exact: x = M 2^(k-23))."""
    ix = m.bits(m.fabs(x))
    k = m.isub(m.lshr(ix, 52), 1023)
    idx = m.isub(k, _PH_FIRST)
    idx = m.isel(m.ilt(idx, 0), 0, idx)
    idx = m.isel(m.ilt(idx, 127 - _PH_FIRST), idx, 127 - _PH_FIRST)
    mant = m.itof(m.lshr(m.b.or_(m.iand(ix, (1 << 52) - 1), m.ci(1 << 52)), 29))   # M, exact
    table = _ph_global(m.module)
    hi, lo = _gather_pair(m, table, idx)
    p = m.mul(mant, hi)
    pe = m.fma(mant, hi, m.neg(p))
    jd, ji = m.round_int(p)                            # p < 2^26
    f = m.add(m.sub(p, jd), m.mad(mant, lo, pe))        # x*2/pi mod 4 - j, |f| <= 1/2 + 2^-27
    r = m.mul(f, PIO2_F64)
    sign = m.signbit(x)
    r = m.sel(sign, m.neg(r), r)
    ji = m.isel(sign, m.isub(0, ji), ji)
    return m.iand(ji, 3), r


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


def _gather_pair(m: _M, table, idx):
    """table[2*idx], table[2*idx + 1] per lane (scalar loads: the rare path only)."""
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


def _branch_merge(m: _M, cond, slow, fast_values):
    """If any lane of ``cond``: run ``slow()`` (returns values like ``fast_values``) in
    its own block; merge with phis.  Leaves the builder in the merge block."""
    b = m.b
    start = b.block
    slow_block = b.append_basic_block("vm.slow")
    merge = b.append_basic_block("vm.merge")
    b.cbranch(m.any(cond), slow_block, merge)
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


def _sincos_kernel(m: _M, q, rh, rl, t, cos: bool):
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


def _trig(m: _M, x, t, cos: bool):
    q, rh, rl = _trig_reduce(m, x, t)
    limit = TRIG_F32_LIMIT if t == 32 else TRIG_F64_LIMIT
    big = m.ge(m.fabs(x), limit)
    if t == 32:
        def slow():
            hq, hr = _trig_reduce_f32_huge(m, x)
            return [m.b.select(big, hq, q), m.sel(big, hr, rh)]
        q, rh = _branch_merge(m, big, slow, [q, rh])
        res = _sincos_kernel(m, q, rh, None, t, cos)
        res = m.sel(m.isinf(x), float("nan"), res)
    else:
        res = _sincos_kernel(m, q, rh, rl, t, cos)
        fast = res

        def slow():
            lib = m.per_lane_call("cos" if cos else "sin", [x])
            return [m.sel(big, lib, fast)]
        (res,) = _branch_merge(m, big, slow, [res])
    if not cos:
        res = m.sel(m.eq(x, 0.0), x, res)               # sin(-0) = -0
    return res


def _sin(m, x, t):
    return _trig(m, x, t, cos=False)


def _cos(m, x, t):
    return _trig(m, x, t, cos=True)


# tanh, sigmoid, erf ------------------------------------------------------------------


def _tanh(m: _M, x, t):
    ax = m.fabs(x)
    if t == 32:
        em = _expm1(m, m.mul(m.clamp(ax, 0.0, 10.0), 2.0), 32)   # tanh(10) rounds to 1 in float
        res = m.div(em, m.add(em, 2.0))
    else:
        em = _expm1(m, m.mul(m.clamp(ax, 0.0, 20.0), 2.0), 64)   # tanh(20) rounds to 1
        d, de = m.two_sum(em, m.c(2.0))
        q = m.div(em, d)
        rem = m.fma(m.neg(q), d, em)                    # em - q d, exactly
        large = m.add(q, m.div(m.sub(rem, m.mul(q, de)), d))      # em / (d + de)
        z = m.mul(ax, ax)
        small = m.mad(m.mul(ax, z), m.poly(z, TANH_F64), ax)
        res = m.sel(m.lt(ax, 0.55), small, large)
    res = m.copysign(res, x)
    return m.nan_in(x, res)


def _sigmoid(m: _M, x, t):
    e = _exp(m, m.neg(m.fabs(x)), t)                    # in (0, 1]
    num = m.sel(m.ge(x, 0.0), 1.0, e)
    if t == 32:
        res = m.div(num, m.add(e, 1.0))
    else:  # num / (d + dl) with 1 + e = d + dl exactly, and the quotient's remainder
        d, dl = m.two_sum(m.c(1.0), e)
        q = m.div(num, d)
        rem = m.fma(m.neg(q), d, num)
        res = m.add(q, m.div(m.sub(rem, m.mul(q, dl)), d))
    return m.nan_in(x, res)


def _erf(m: _M, x, t):
    if t == 64:
        return m.per_lane_call("erf", [x])
    ax = m.fabs(x)
    z = m.mul(ax, ax)
    small = m.mad(ax, m.poly(z, ERF_SMALL_F32), ax)     # x (1 + E(x^2))
    xl = m.clamp(ax, 0.84375, 3.95)                     # erf(3.95) rounds to 1 in float
    erfc = _exp(m, m.sub(m.poly(xl, ERF_LARGE_F32), m.mul(xl, xl)), 32)
    large = m.sub(1.0, erfc)
    res = m.copysign(m.sel(m.lt(ax, 0.84375), small, large), x)
    return m.nan_in(x, res)


# atan and atan2 ----------------------------------------------------------------------


def _atan_unit(m: _M, q):
    """atan(q) for q in [0, 1] (double, to about 2^-38 relative): above tan(pi/8),
    atan q = pi/4 + atan r with r = (q - 1) / (q + 1), so |r| <= tan(pi/8)."""
    far = m.gt(q, TAN_PI_8)
    r = m.sel(far, m.div(m.sub(q, 1.0), m.add(q, 1.0)), q)
    z = m.mul(r, r)
    a = m.mad(m.mul(r, z), m.poly(z, ATAN_F32), r)
    return m.sel(far, m.add(a, PIO4_F64), a)


def _atan(m: _M, x, t):
    if t == 64:
        return m.per_lane_call("atan", [x])
    a = m.fabs(x)
    big = m.gt(a, 1.0)                               # atan a = pi/2 - atan(1/a); inf gives pi/2
    v = _atan_unit(m, m.sel(big, m.div(1.0, a), a))
    v = m.sel(big, m.sub(PIO2_F64, v), v)
    return m.nan_in(x, m.copysign(v, x))             # atan(-0) = -0


def _atan2(m: _M, y, x, t):
    """atan2(y, x), C99's special cases: the smaller magnitude over the larger (0 where both
    are 0, 1 where both are infinite), reflected by the octant; the sign of x's zero picks
    +-0 or +-pi, y's sign the result's."""
    if t == 64:
        return m.per_lane_call("atan2", [y, x])
    ay, ax = m.fabs(y), m.fabs(x)
    steep = m.gt(ay, ax)
    num, den = m.sel(steep, ax, ay), m.sel(steep, ay, ax)
    q = m.div(num, den)
    q = m.sel(m.eq(den, 0.0), 0.0, q)
    q = m.sel(m.and_(m.isinf(ax), m.isinf(ay)), 1.0, q)
    v = _atan_unit(m, q)
    v = m.sel(steep, m.sub(PIO2_F64, v), v)
    v = m.sel(m.signbit(x), m.sub(PI_F64, v), v)
    res = m.copysign(v, y)
    return m.sel(m.or_(m.isnan(x), m.isnan(y)), m.add(y, x), res)


# pow and rsqrt -----------------------------------------------------------------------


def _pow(m: _M, x, y, t):
    if t == 64:
        return m.per_lane_call("pow", [x, y])
    a = m.fabs(x)
    lg = _log_specials(m, a, _log2_parts(m, a))         # about 1 ulp of double
    v = _exp2(m, m.mul(y, lg), 32)                      # |y log2 a| < 152 where it matters
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


def _rsqrt(m: _M, x, t):
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


_IMPL = {
    "exp": _exp, "exp2": _exp2, "expm1": _expm1, "log": _log, "log2": _log2, "log1p": _log1p,
    "erf": _erf, "tanh": _tanh, "sigmoid": _sigmoid, "sin": _sin, "cos": _cos, "pow": _pow,
    "rsqrt": _rsqrt, "atan": _atan, "atan2": _atan2,
}


# --------------------------------------------------------------------------------------
# Public entry point


def routine(module: ir.Module, name: str, ty) -> ir.Function:
    """The ``internal alwaysinline`` function that computes ``name`` on ``ty`` in
    ``module``, defined on first use."""
    _check_name(name)
    if not _is_float_type(ty):
        raise TypeError(f"vecmath.{name}: expected float, double or a vector of them, got {ty}")
    fname = f"accy.vecmath.{name}.{_mangle(ty)}"
    fn = module.globals.get(fname)
    if fn is not None:
        return fn
    n_args = _ARITY.get(name, 1)
    fn = ir.Function(module, ir.FunctionType(ty, [ty] * n_args), name=fname)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    fn.attributes.add("nounwind")
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    el = ty.element if isinstance(ty, ir.VectorType) else ty
    n = ty.count if isinstance(ty, ir.VectorType) else None
    dty = ir.VectorType(ir.DoubleType(), n) if n else ir.DoubleType()
    m = _M(builder, dty)
    if isinstance(el, ir.FloatType):
        args = [builder.fpext(a, dty) for a in fn.args]
        builder.ret(builder.fptrunc(_IMPL[name](m, *args, 32), ty))
    else:
        builder.ret(_IMPL[name](m, *fn.args, 64))
    return fn


def emit(builder: ir.IRBuilder, name: str, args) -> ir.Value:
    """Emit ``name(*args)`` at ``builder``'s position; returns a value of the arguments' type.

    ``args``: a list of ``ir.Value`` of one type, ``float``, ``double``, ``<N x float>``
    or ``<N x double>`` (two for ``pow`` and ``atan2``, one otherwise)."""
    _check_name(name)
    args = list(args)
    want = _ARITY.get(name, 1)
    if len(args) != want:
        raise TypeError(f"vecmath.{name} takes {want} argument(s), got {len(args)}")
    ty = args[0].type
    if any(a.type != ty for a in args):
        raise TypeError(f"vecmath.{name}: arguments differ in type: {', '.join(str(a.type) for a in args)}")
    fn = routine(builder.module, name, ty)
    return builder.call(fn, args)
