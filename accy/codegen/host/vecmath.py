"""A vector math library emitted as inline LLVM IR.

The host backend calls :func:`emit` to evaluate an elementary function on a
``float``, ``double``, ``<N x float>`` or ``<N x double>`` value.  Each routine is
defined once per (function, type) in the caller's module as an ``internal
alwaysinline`` function, so a kernel that calls ``exp`` five times holds one
copy, and the O3 pipeline inlines it into straight-line vector code.

Design
------
* **f32 exp, exp2 and sigmoid compute in float** (:mod:`.vecmath_f32`, ``NATIVE_F32``):
  a 16-entry table of 2^(j/16) as float pairs, read by an in-register permute, and
  error-free transformations (FMA products, Fast2Sum) for the terms large enough to
  matter, so the value is good to about 2^-34.5 before its one rounding and the bound
  stays 0.501 ulp; a vector with a lane whose result is a subnormal float takes the
  double route on a branch not taken otherwise.  A <16 x float> stays one vector.
* **The other float (f32) routines compute in double.**  Each f32 lane is widened to
  double, the function is evaluated with a polynomial fitted to about 2^-34
  relative error (far fewer terms than a double-accurate one), and the result
  is rounded to float once.  The error is then 0.5 ulp plus a few thousandths,
  overflow and gradual underflow through the float subnormals fall out of the
  final ``fptrunc`` at exactly the right thresholds, and the same algorithms
  serve f32 and f64 with different coefficient sets.  The cost is twice the
  vector work of a pure-float formulation (a <16 x float> becomes two
  <8 x double> halves, converted both ways).  f32 routines call nothing external:
  no libm, no other symbol.
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
  sin 1.6, cos 1.7 ns/element.  AMD EPYC znver4, 2 * 10^6 elements, one run, load 4 on
  2 cores: f32 exp 0.39 computed in float against 0.56 through double (NumPy 0.46), exp2
  0.43 / 0.54 (NumPy 0.22), sigmoid 0.76 / 0.82 (NumPy 0.90).

Coefficients
------------
Every polynomial (:mod:`.vecmath_tables`) was derived for this module by Chebyshev
interpolation (``mpmath.chebyfit``, 60 digits, which is within a small factor of
minimax) of the smooth remainder function named in its comment, on the stated
interval, then rounded to double; the relative error of the whole approximation with
the rounded coefficients was then measured on a 400-point grid in 60-digit arithmetic
and is stated as "rel".  Its ``_fit`` reproduces a set (it needs mpmath, which is not
a dependency: it is a maintainer's tool, no test calls it).

Modules: this one holds the entry points and the documented errors; the routines, by
family, are :mod:`.vecmath_exp` (exp, log and kin), :mod:`.vecmath_trig` (sin, cos,
atan, atan2) and :mod:`.vecmath_special` (tanh, sigmoid, erf, pow, rsqrt), built with
:mod:`.vecmath_ir`'s helper, and :mod:`.vecmath_f32` (f32 exp, exp2, sigmoid in float).
"""

from __future__ import annotations

import llvmlite.ir as ir

from .vecmath_exp import ExpLog
from .vecmath_f32 import FloatArith, SingleExp
from .vecmath_ir import DoubleArith, is_float_type, mangle
from .vecmath_special import Special
from .vecmath_trig import Arctangent, Trig

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
# f32 exp, exp2 and sigmoid computed in float (NATIVE_F32; znver4): every float32 of magnitude
# below 104 (exp2: 151; past it every result is 0, 1 or inf), 2.2 billion inputs each.
MEASURED = {
    "f32": {"exp": 0.5006, "exp2": 0.5006, "expm1": 0.5002, "log": 0.5001, "log2": 0.5002,
            "log1p": 0.5002, "erf": 0.5000, "tanh": 0.5001, "sigmoid": 0.5005, "sin": 0.5002,
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


def _routines(m: DoubleArith) -> dict:
    """Each function's routine, built with ``m``."""
    exp_log, trig, arctangent = ExpLog(m), Trig(m), Arctangent(m)
    special = Special(m, exp_log)
    return {
        "exp": exp_log.exp, "exp2": exp_log.exp2, "expm1": exp_log.expm1, "log": exp_log.log, "log2": exp_log.log2,
        "log1p": exp_log.log1p, "erf": special.erf, "tanh": special.tanh, "sigmoid": special.sigmoid,
        "sin": trig.sin, "cos": trig.cos, "pow": special.pow, "rsqrt": special.rsqrt, "atan": arctangent.atan,
        "atan2": arctangent.atan2,
    }


# The f32 routines computed in float (:mod:`.vecmath_f32`); the others widen to double.
NATIVE_F32 = ("exp", "exp2", "sigmoid")


def _native_f32(m: FloatArith, wide) -> dict:
    single = SingleExp(m, wide)
    return {"exp": single.exp, "exp2": single.exp2, "sigmoid": single.sigmoid}


# --------------------------------------------------------------------------------------
# Public entry point


def routine(module: ir.Module, name: str, ty, *, via_double: bool = False) -> ir.Function:
    """The ``internal alwaysinline`` function that computes ``name`` on ``ty`` in
    ``module``, defined on first use.  ``via_double``: an f32 routine of ``NATIVE_F32`` by
    the double route all the same (for comparisons: bench/vecmath.py)."""
    _check_name(name)
    if not is_float_type(ty):
        raise TypeError(f"vecmath.{name}: expected float, double or a vector of them, got {ty}")
    native = name in NATIVE_F32 and not via_double
    fname = f"accy.vecmath.{name}{'' if native or name not in NATIVE_F32 else '.via_double'}.{mangle(ty)}"
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

    def wide(wide_name, *args):
        """The double route of ``wide_name`` on float ``args``, at the builder's position."""
        ext = [builder.fpext(a, dty) for a in args]
        return builder.fptrunc(_routines(DoubleArith(builder, dty))[wide_name](*ext, 32), ty)

    if isinstance(el, ir.FloatType) and native:
        builder.ret(_native_f32(FloatArith(builder, ty), wide)[name](*fn.args))
    elif isinstance(el, ir.FloatType):
        builder.ret(wide(name, *fn.args))
    else:
        builder.ret(_routines(DoubleArith(builder, ty))[name](*fn.args, 64))
    return fn


def emit(builder: ir.IRBuilder, name: str, args, *, via_double: bool = False) -> ir.Value:
    """Emit ``name(*args)`` at ``builder``'s position; returns a value of the arguments' type.

    ``args``: a list of ``ir.Value`` of one type, ``float``, ``double``, ``<N x float>``
    or ``<N x double>`` (two for ``pow`` and ``atan2``, one otherwise).  ``via_double``:
    see :func:`routine`."""
    _check_name(name)
    args = list(args)
    want = _ARITY.get(name, 1)
    if len(args) != want:
        raise TypeError(f"vecmath.{name} takes {want} argument(s), got {len(args)}")
    ty = args[0].type
    if any(a.type != ty for a in args):
        raise TypeError(f"vecmath.{name}: arguments differ in type: {', '.join(str(a.type) for a in args)}")
    fn = routine(builder.module, name, ty, via_double=via_double)
    return builder.call(fn, args)
