"""Every dtype x every exact op x every backend, against references computed element by
element in plain Python (integers, Fractions, float64), bit for bit; and every cast."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from accy.dsl.ops import OPS, OpTypeError, infer
from accy.dsl.types import DTYPES, DType

from conftest import elementwise
from numeric_reference import round_to, values

N = 64


def _nan(x) -> bool:
    return isinstance(x, float) and math.isnan(x)


def _ieee_max(a, b):
    if _nan(a) or _nan(b):
        return math.nan
    if a == b == 0:
        return a if math.copysign(1, a) > 0 else b
    return max(a, b)


def _ieee_min(a, b):
    if _nan(a) or _nan(b):
        return math.nan
    if a == b == 0:
        return a if math.copysign(1, a) < 0 else b
    return min(a, b)


def _shl(t, a, n):
    return 0 if not 0 <= n < t.bits else a << n


def _shr(t, a, n):
    if not 0 <= n < t.bits:
        return -1 if a < 0 else 0
    return a >> n


def _float_mod(a, b):
    if b == 0 or not math.isfinite(a) or _nan(b):
        return math.nan
    return a % b  # Python's float %: the sign of the divisor




def _round_half_even(a):
    return a if not math.isfinite(a) else math.copysign(float(round(a)), a)


def _signed_zero(fn):
    """floor/ceil/trunc keep the sign of a zero result (ceil(-0.5) is -0.0)."""
    return lambda a: a if not math.isfinite(a) else math.copysign(float(fn(a)), a)


# op -> reference on Python values: for integers (t, *ints) -> int (wrapped after), for floats
# (*floats) -> exact value (Fraction or float) rounded to the type once
INT_REFERENCE = {
    "add": lambda t, a, b: a + b,
    "sub": lambda t, a, b: a - b,
    "mul": lambda t, a, b: a * b,
    "div": lambda t, a, b: a // b,
    "mod": lambda t, a, b: a % b,
    "max": lambda t, a, b: max(a, b),
    "min": lambda t, a, b: min(a, b),
    "neg": lambda t, a: -a,
    "abs": lambda t, a: abs(a),
    "and": lambda t, a, b: a & b,
    "or": lambda t, a, b: a | b,
    "xor": lambda t, a, b: a ^ b,
    "not": lambda t, a: ~a,
    "shl": _shl,
    "shr": _shr,
    "lt": lambda t, a, b: a < b, "le": lambda t, a, b: a <= b, "gt": lambda t, a, b: a > b,
    "ge": lambda t, a, b: a >= b, "eq": lambda t, a, b: a == b, "ne": lambda t, a, b: a != b,
}
def _exact(exact, rounded):
    """The exact rational result where operands are finite; its zero takes the sign IEEE
    gives it, which the float64 operation (exact for a zero result) shows."""
    def reference(*xs):
        if not all(math.isfinite(x) for x in xs):
            return rounded(*(np.float64(x) for x in xs))
        value = exact(*(Fraction(x) for x in xs))
        return rounded(*(np.float64(x) for x in xs)) if value == 0 else value

    return reference


FLOAT_REFERENCE = {
    "add": _exact(lambda a, b: a + b, lambda a, b: a + b),
    "sub": _exact(lambda a, b: a - b, lambda a, b: a - b),
    "mul": _exact(lambda a, b: a * b, lambda a, b: a * b),
    "div": lambda a, b: (_exact(lambda a, b: a / b, lambda a, b: a / b) if b != 0 else
                         lambda a, b: np.float64(a) / np.float64(b))(a, b),
    "mod": _float_mod,
    "max": _ieee_max,
    "min": _ieee_min,
    "neg": lambda a: -a,
    "abs": abs,
    "copysign": math.copysign,
    "fma": _exact(lambda a, b, c: a * b + c, lambda a, b, c: a * b + c),
    "floor": _signed_zero(math.floor),
    "ceil": _signed_zero(math.ceil),
    "trunc": _signed_zero(math.trunc),
    "round": _round_half_even,
    "sqrt": lambda a: math.sqrt(a) if a >= 0 and math.isfinite(a) else float(np.sqrt(np.float64(a))),
    "isnan": lambda a: math.isnan(a),
    "isinf": lambda a: math.isinf(a),
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
}
BOOL_REFERENCE = {
    "and": lambda a, b: a and b, "or": lambda a, b: a or b, "xor": lambda a, b: a != b, "not": lambda a: not a,
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
}


def _reference_table(t: DType):
    return BOOL_REFERENCE if t.is_bool else INT_REFERENCE if t.is_int else FLOAT_REFERENCE


def _cases():
    for name, opdef in OPS.items():
        if not opdef.pointwise or name == "select":
            continue
        for t in DTYPES.values():
            try:
                (result,) = infer(name, [t] * opdef.arity, {})
            except OpTypeError:
                continue
            if name in _reference_table(t):
                yield pytest.param(name, t, result, id=f"{name}-{t}")


def _sqrt_exact(a, dtype):
    """sqrt rounded once, exactly: the float64 sqrt of a narrower type is correctly rounded twice,
    which is innocuous (53 >= 2 * 24 + 2 bits); f64 needs the integer square root."""
    if not math.isfinite(a) or a <= 0 or dtype != np.float64:
        return float(np.sqrt(np.float64(a)))
    f = Fraction(a)
    scale = 2 ** 1200  # enough bits that the integer root decides the rounding
    root = math.isqrt(f.numerator * scale * scale // f.denominator)
    return Fraction(root, scale) + (Fraction(1, 4 * scale))  # beyond it, never a tie


def _expected(name, t: DType, result: DType, operands):
    if not t.is_float:
        value = _reference_table(t)[name](t, *operands) if t.is_int else _reference_table(t)[name](*operands)
        if result.is_bool:
            return bool(value)
        return result.wrap(int(value))
    if name == "sqrt":
        exact = _sqrt_exact(operands[0], t.numpy)
    else:
        exact = FLOAT_REFERENCE[name](*operands)
    if result.is_bool:
        return bool(exact)
    return round_to(exact if isinstance(exact, Fraction) else float(exact), t.numpy)


def _python(x):
    return x.item() if not isinstance(x, np.ndarray) else x


def _same(expected, got, dtype: DType) -> bool:
    if dtype.is_float:
        e, g = np.float64(expected), np.float64(got)
        return (np.isnan(e) and np.isnan(g)) or (e == g and np.signbit(e) == np.signbit(g))
    return expected == got


@pytest.mark.parametrize("name, t, result", list(_cases()))
def test_op_matches_python_reference_bit_for_bit(name, t, result, backend, rng):
    arity = OPS[name].arity
    inputs = [values(t, N, rng) for _ in range(arity)]
    if arity >= 2:  # pair every edge with every other: roll the second operand
        inputs[1] = np.roll(inputs[1], 5)
    if name in ("div", "mod") and t.is_int:
        inputs[1][inputs[1] == 0] = 3  # division by zero is a checked error (test_bad_inputs)
    if name in ("shl", "shr"):
        inputs[1] = np.array([(v % (t.bits + 3)) - (1 if t.is_signed and v % 7 == 0 else 0)
                              for v in inputs[1].tolist()]).astype(t.numpy)
    method = OPS[name].methods[0]
    program = elementwise(f"{name}_{t}", lambda inner, *xs: getattr(inner, method)(*xs), N,
                          dtypes=(t,) * arity, out=result)
    dst = np.zeros(N, result.numpy)
    program.run([dst, *inputs], backend=backend)
    bad = []
    for k in range(N):
        operands = [_python(x[k]) for x in inputs]
        operands = [float(v) if t.is_float else v for v in operands]
        with np.errstate(all="ignore"):
            want = _expected(name, t, result, operands)
        if not _same(want, _python(dst[k]), result):
            bad.append(f"{name}{tuple(operands)} = {dst[k]!r}, expected {want!r}")
    assert not bad, f"{len(bad)} of {N} wrong on {backend}:\n" + "\n".join(bad[:10])


# -- casts ------------------------------------------------------------------------------------------


def _cast_reference(x, src: DType, dst: DType):
    if dst.is_bool:
        return bool(x != 0) or (src.is_float and math.isnan(x))
    if src.is_bool:
        x = int(x)
    if dst.is_int:
        if src.is_float:
            if math.isnan(x):
                return 0
            if math.isinf(x):
                return dst.max if x > 0 else dst.min
            return max(dst.min, min(dst.max, math.trunc(x)))
        return dst.wrap(int(x))
    # to a float: one rounding of the exact value
    return round_to(x if isinstance(x, float) else Fraction(x), dst.numpy)


CAST_CASES = [pytest.param(s, d, id=f"{s}-to-{d}") for s in DTYPES.values() for d in DTYPES.values()]


@pytest.mark.parametrize("src, dst", CAST_CASES)
def test_cast_matches_python_reference(src, dst, backend, rng):
    x = values(src, N, rng)
    if src.is_int and src.bits >= 32 and dst.is_float:  # integers that round (ties, round-to-odd cases)
        x[-8:] = np.array([2**25 + 1, 2**24 + 3, (1 << 40) + (1 << 32) + 1, 2**31 - 1, -(2**31) + 1,
                           (1 << 30) + (1 << 22) + 1, 12345678, 16777217], dtype=np.int64).astype(src.numpy)
    program = elementwise(f"cast_{src}_{dst}", lambda inner, a: inner.cast(a, dst), N, dtypes=(src,), out=dst)
    out = np.zeros(N, dst.numpy)
    program.run([out, x], backend=backend)
    bad = []
    for k in range(N):
        value = _python(x[k])
        value = float(value) if src.is_float else value
        want = _cast_reference(value, src, dst)
        if not _same(want, _python(out[k]), dst):
            bad.append(f"cast({value!r}: {src} -> {dst}) = {out[k]!r}, expected {want!r}")
    assert not bad, f"{len(bad)} of {N} wrong on {backend}:\n" + "\n".join(bad[:10])


def test_every_dtype_is_exported_and_round_trips_numpy():
    import accy

    for name, t in DTYPES.items():
        exported = getattr(accy, "boolean" if name == "bool" else name)
        assert exported is t
        assert np.zeros(2, t.numpy).dtype == t.numpy


def test_every_op_and_cast_lowers_to_ptx_that_ptxas_accepts():
    """One kernel per dtype computing every op and cast the type allows, for sm_80 and sm_90
    (conftest's listener assembles each PTX with ptxas)."""
    from accy import Program, axis, dynamic_buffer

    for t in DTYPES.values():
        def body(k, args, t=t):
            def each(inner, idx):
                i = idx["i"]
                a, b, c = args.a[i], args.b[i], args.c[i]
                for name, opdef in OPS.items():
                    if not opdef.pointwise or name == "select":
                        continue
                    try:
                        (result,) = infer(name, [t] * opdef.arity, {})
                    except OpTypeError:
                        continue
                    value = getattr(inner, opdef.methods[0])(*[a, b, c][:opdef.arity])
                    args.param(f"out_{result}")[i] = value
                for other in DTYPES.values():
                    args.param(f"out_{other}")[i] = inner.cast(a, other)

            k.for_each_1d(axis("i", 64), each)

        params = {f"out_{o}": dynamic_buffer(o) for o in DTYPES.values()}
        params.update({name: dynamic_buffer(t) for name in "abc"})
        program = Program(f"all_ops_{t}", params, body)
        for arch in ("sm_80", "sm_90"):
            assert f".target {arch}" in program.ptx(arch)


def test_ml_dtypes_is_imported_only_for_a_type_that_needs_it():
    """ml_dtypes takes about half a second to import: an f32 kernel on every CPU backend never
    imports it; a bf16 array does."""
    import subprocess
    import sys

    code = """
import sys
import numpy as np
from accy.library.attention import ScaledDotProduct, scaled_dot_product_f32
entry = scaled_dot_product_f32(ScaledDotProduct(1, 2, 3, 2, 2))
args = [np.zeros((1, 2, 2), np.float32), np.ones((1, 2, 2), np.float32), np.ones((1, 3, 2), np.float32),
        np.ones((1, 3, 2), np.float32)]
for backend in ("numpy", "llvm", "ptx"):
    entry.run(args, backend=backend)
assert "ml_dtypes" not in sys.modules, "an f32 kernel imported ml_dtypes"
import accy
assert accy.bf16.numpy.name == "bfloat16" and "ml_dtypes" in sys.modules
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
