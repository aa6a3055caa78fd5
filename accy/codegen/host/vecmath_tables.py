"""The constants of :mod:`.vecmath`'s routines: the coefficient sets of their polynomials,
ln 2 and pi split for exact reductions (computed here from integer arithmetic), the
Payne-Hanek table of f32 sin and cos, and the ranges where a reduction holds."""

from __future__ import annotations

from fractions import Fraction

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


PH_FIRST = 32


def _payne_hanek_table() -> list[float]:
    """For an f32 argument x = M * 2^(k-23) (M a 24-bit integer, 32 <= k <= 127):
    (2^(k-23) * 2/pi) mod 4 as hi + lo doubles, entry k - 32.  M times it, mod 4,
    is x*2/pi mod 4 with an error below 2^24 * 2^-150."""
    two_over_pi = 2 / _PI
    table = []
    for k in range(PH_FIRST, 128):
        v = Fraction(2) ** (k - 23) * two_over_pi
        v -= 4 * (v.numerator // (4 * v.denominator))
        hi, lo = _split(v, 2)
        table += [hi, lo]
    return table


PAYNE_HANEK = _payne_hanek_table()

TRIG_F64_LIMIT = 2.0 ** 30
TRIG_F32_LIMIT = 2.0 ** 32   # x*2/pi rounds by < 2^-21 there, so |r| stays in the fitted range
