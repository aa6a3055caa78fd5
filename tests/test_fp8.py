"""fp8 (f8e4m3 = OCP E4M3FN, f8e4m3fnuz, f8e5m2) on every backend, bit for bit against
ml_dtypes' own conversions: all 256 codes to every type, a sweep of every other type into fp8
(ties, subnormals, overflow, NaN, -0), ``saturate=True`` (PTX's ``.satfinite`` rule),
arithmetic in f32 rounded once, scalars and constants; the ptx backend at sm_80 and at sm_90."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import accy
from accy import Program, axis, dynamic_buffer, f8e4m3, f8e4m3fnuz, f8e5m2, scalar
from accy.dsl.types import DTYPES, Conversion, FloatFormat, bf16, f16, f32, f64, from_numpy
from accy.errors import TraceError

from conftest import CUDA_PARAM, elementwise

FP8 = (f8e4m3, f8e4m3fnuz, f8e5m2)
RUNS = [pytest.param("numpy", {}, id="numpy"), pytest.param("llvm", {}, id="llvm"),
        pytest.param("ptx", {"arch": "sm_80"}, id="ptx-sm_80"), pytest.param("ptx", {"arch": "sm_90"}, id="ptx-sm_90"),
        pytest.param(CUDA_PARAM.values[0], {}, marks=CUDA_PARAM.marks, id="cuda")]
CODES = np.arange(256, dtype=np.uint8)
UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _bits(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).view(UNSIGNED[np.asarray(a).dtype.itemsize])


def _run_cast(src, dst, x, backend, options, *, saturate=False):
    program = elementwise(f"cast_{src}_{dst}{'_sat' if saturate else ''}",
                          lambda inner, a: inner.cast(a, dst, saturate=saturate), x.size, dtypes=(src,), out=dst)
    out = np.zeros(x.size, dst.numpy)
    program.run([out, x], backend=backend, **options)
    return out


def _assert_same_bits(got, want, x, what, *, any_nan=False):
    """Equal bits; with ``any_nan``, a NaN for a NaN whatever its payload and sign."""
    differ = _bits(got) != _bits(want)
    if any_nan:
        with np.errstate(all="ignore"):
            differ &= ~(np.isnan(got.astype(np.float64)) & np.isnan(want.astype(np.float64)))
    bad = np.flatnonzero(differ)
    shown = [f"{x[i]!r} ({int(_bits(x)[i]):#x}) -> {got[i]!r} ({int(_bits(got)[i]):#x}), "
             f"expected {want[i]!r} ({int(_bits(want)[i]):#x})" for i in bad[:8]]
    assert not bad.size, f"{what}: {bad.size} of {x.size} differ:\n" + "\n".join(shown)


def _int_reference(x: np.ndarray, dst) -> np.ndarray:
    """accy's float to int rule (truncate, saturate, NaN -> 0) on exact float64 values."""
    wide = x.astype(np.float64)
    out = np.array([0 if math.isnan(v) else dst.max if v >= dst.max else dst.min if v <= dst.min else math.trunc(v)
                    for v in wide.tolist()], dtype=object)
    return out.astype(dst.numpy)


# -- the dtype table ----------------------------------------------------------------------------


def test_fp8_entries_are_ml_dtypes_types_computing_in_f32():
    assert accy.f8e4m3 is DTYPES["f8e4m3"] and accy.f8e5m2 is DTYPES["f8e5m2"]
    assert accy.f8e4m3fnuz is DTYPES["f8e4m3fnuz"] and "f8e4m3fnuz" in accy.__all__
    assert f8e4m3.numpy == np.dtype(ml_dtypes.float8_e4m3fn) and f8e5m2.numpy == np.dtype(ml_dtypes.float8_e5m2)
    assert f8e4m3fnuz.numpy == np.dtype(ml_dtypes.float8_e4m3fnuz)
    for t in FP8:
        assert from_numpy(t.numpy) is t
        assert t.is_float and t.is_narrow and t.compute is f32 and t.itemsize == 1
        assert t.conversion is Conversion.software and t.llvm == "i8"
    assert (f8e4m3.max, f8e4m3.min, f8e5m2.max, f8e5m2.min) == (448.0, -448.0, 57344.0, -57344.0)
    assert (f8e4m3.format.nan_code, f8e4m3.format.inf_code, f8e4m3.format.max_code) == (0x7F, None, 0x7E)
    assert (f8e5m2.format.nan_code, f8e5m2.format.inf_code, f8e5m2.format.max_code) == (0x7E, 0x7C, 0x7B)
    assert f8e4m3fnuz.format == FNUZ_FORMATS["float8_e4m3fnuz"] and (f8e4m3fnuz.max, f8e4m3fnuz.min) == (240.0, -240.0)


def test_every_float_format_matches_numpy():
    for t in DTYPES.values():
        if not t.is_float:
            assert t.format is None and t.conversion is None
            continue
        info = ml_dtypes.finfo(t.numpy)
        assert t.format.bits == t.bits == 8 * t.numpy.itemsize
        assert (t.format.mantissa, t.max) == (info.nmant, float(info.max)), t
        assert t.value_of(t.format.max_code) == t.max and math.isnan(t.value_of(t.format.nan_code))
        assert t.code(t.max) == t.format.max_code
        if t.format.inf_code is not None:
            assert t.value_of(t.format.inf_code) == math.inf
        assert t.is_narrow == (t.compute is not t)


# fnuz encodings (no infinities, no -0: -0's code is the one NaN, the bias one more than IEEE's)
FNUZ_FORMATS = {"float8_e4m3fnuz": FloatFormat(4, 3, finite=True, negative_zero_nan=True),
                "float8_e5m2fnuz": FloatFormat(5, 2, finite=True, negative_zero_nan=True)}


@pytest.mark.parametrize("name", FNUZ_FORMATS)
def test_fnuz_formats_state_ml_dtypes_encoding(name):
    fmt, info = FNUZ_FORMATS[name], ml_dtypes.finfo(getattr(ml_dtypes, name))
    assert (fmt.bias, fmt.mantissa, fmt.max_value) == (1 - info.minexp, info.nmant, float(info.max))
    assert (fmt.nan_code, fmt.inf_code, fmt.max_code) == (0x80, None, 0x7F)
    assert not (fmt.signed_zero or fmt.signed_nan) and 2.0**fmt.min_subnormal_exponent == float(info.smallest_subnormal)
    assert f16.format.holds(fmt) and not bf16.format.holds(f16.format) and f32.format.holds(bf16.format)
    with pytest.raises(ValueError, match="finite"):
        FloatFormat(4, 3, negative_zero_nan=True)


def _jit_minifloat(fmt, lanes=64):
    """minifloat's widen and narrow of ``fmt`` compiled for the host, over arrays of ``lanes``."""
    import ctypes

    from llvmlite import ir

    from accy.codegen import machine, minifloat

    module = ir.Module("minifloat")
    code_t, f32_t = ir.VectorType(ir.IntType(fmt.bits), lanes), ir.VectorType(ir.FloatType(), lanes)
    for name, src, dst, convert in (("widen", code_t, f32_t, minifloat.widen),
                                    ("narrow", f32_t, code_t, minifloat.narrow)):
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [src.as_pointer(), dst.as_pointer()]), name)
        b = ir.IRBuilder(fn.append_basic_block())
        b.store(convert(b, b.load(fn.args[0], align=1), fmt), fn.args[1], align=1)  # NumPy aligns less
        b.ret_void()
    engine = machine.jit_host_module(str(module))
    calls = {name: ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(engine.get_function_address(name))
             for name in ("widen", "narrow")}

    def run(name, x, out_dtype):
        x = np.ascontiguousarray(np.concatenate([x, np.zeros(-x.size % lanes, x.dtype)]))
        out = np.zeros(x.size, out_dtype)
        for i in range(0, x.size, lanes):
            calls[name](x[i:].ctypes.data, out[i:].ctypes.data)
        return out

    return engine, run


@pytest.mark.parametrize("name", FNUZ_FORMATS)
def test_minifloat_converts_a_format_from_its_table_facts_alone(name):
    """widen and narrow of fnuz formats no accy type has (yet), bit for bit with ml_dtypes:
    every code to f32, the f32 sweep to codes (-0 and tiny negatives to +0, NaN, infinities
    and overflow to the one NaN)."""
    fmt, dtype = FNUZ_FORMATS[name], np.dtype(getattr(ml_dtypes, name))
    engine, run = _jit_minifloat(fmt)
    wide = run("widen", CODES, np.float32)
    _assert_same_bits(wide, CODES.view(dtype).astype(np.float32), CODES.view(dtype), f"{name} widened")
    x = np.concatenate([_f32_sweep(), np.array([-0.0, -1e-30, np.inf, -np.inf, -np.nan, 1e6, -1e6], np.float32)])
    codes = run("narrow", x.view(np.uint32), np.uint8)[:x.size]
    with np.errstate(all="ignore"):
        _assert_same_bits(codes.view(dtype), x.astype(dtype), x, f"f32 narrowed to {name}")
    assert engine


# -- fp8 to every type: all 256 codes -------------------------------------------------------------


@pytest.mark.parametrize("backend, options", RUNS)
@pytest.mark.parametrize("src", FP8, ids=str)
def test_every_code_casts_to_every_type_as_ml_dtypes(src, backend, options):
    x = CODES.view(src.numpy)
    for dst in DTYPES.values():
        got = _run_cast(src, dst, x, backend, options)
        if dst.is_float:
            want = x.astype(dst.numpy)  # ml_dtypes' conversion, NaN bits included
        elif dst.is_bool:
            want = x.astype(np.float64) != 0
        else:
            want = _int_reference(x, dst)
        # a NaN narrowed to bf16 on NVPTX from sm_80 is the canonical NaN (docs/ir.md's cast rule)
        canonical = dst == bf16 and (backend == "cuda" or backend == "ptx" and int(options["arch"][3:]) >= 80)
        _assert_same_bits(got, want, x, f"{src} -> {dst} on {backend}", any_nan=canonical)


# -- every type to fp8 --------------------------------------------------------------------------------


def _f32_sweep() -> np.ndarray:
    """Every f32 whose top 16 bits vary, with low halves that make exact ties and near-ties at
    fp8's rounding points (all in the top half), and random ones."""
    high = np.arange(1 << 16, dtype=np.uint32) << 16
    low = np.array([0, 1, 0x7FFF, 0x8000, 0xFFFF], np.uint32)
    rng = np.random.default_rng(8)
    bits = np.concatenate([(high[:, None] | low[None]).reshape(-1), rng.integers(0, 2**32, 1 << 14).astype(np.uint32)])
    return bits.view(np.float32)


def _f64_sweep() -> np.ndarray:
    """Each fp8 value and midpoint (ties), a hair either side of it (where rounding through f32
    first would round twice), the f32 sweep, f64's own edges and random doubles."""
    values = np.unique(np.concatenate([CODES.view(t.numpy).astype(np.float64) for t in FP8]))
    values = values[np.isfinite(values)]
    mids = (values[1:] + values[:-1]) / 2
    points = np.concatenate([values, mids])
    near = np.concatenate([points * (1 + s) for s in (2.0**-30, -(2.0**-30), 2.0**-52, -(2.0**-52))])
    edges = np.array([np.inf, -np.inf, np.nan, -np.nan, 1e300, -1e300, 5e-324, -5e-324, 2.0**-1074 * 3, 1e-30,
                      np.finfo(np.float64).max, 2.0**-9 * 0.5, 2.0**-16 * 0.5, 464.0, 61440.0, -0.0,
                      248.0, -248.0, 2.0**-11, -(2.0**-11), -(2.0**-12), -1e-300])
    rng = np.random.default_rng(64)
    rand = rng.standard_normal(4096) * np.exp2(rng.integers(-20, 20, 4096))
    with np.errstate(invalid="ignore"):  # the sweep's signaling NaNs
        return np.concatenate([points, near, edges, _f32_sweep().astype(np.float64), rand])


def _int_values(t) -> np.ndarray:
    if t.bits <= 16:
        return np.arange(t.min, t.max + 1, dtype=np.int64).astype(t.numpy)
    rng = np.random.default_rng(t.bits)
    small = np.arange(-70000, 70000, 7)
    edges = [t.min, t.max, t.min + 1, t.max - 1, 464, 465, 61439, 61440, 61441, -465, 247, 248, -248, 2**24 + 1,
             2**31 - 1]
    values = np.concatenate([small, rng.integers(-(2**40), 2**40, 2048)])
    values = values[(values >= t.min) & (values <= t.max)]
    return np.array(list(values.tolist()) + [v for v in edges if t.min <= v <= t.max], dtype=object).astype(t.numpy)


def _inputs(src) -> np.ndarray:
    if src == f32:
        return _f32_sweep()
    if src == f64:
        return _f64_sweep()
    if src.is_float:  # f16, bf16 and the fp8 types: every code
        return np.arange(2**src.bits, dtype=UNSIGNED[src.itemsize]).view(src.numpy)
    if src.is_bool:
        return np.array([False, True])
    return _int_values(src)


SOURCES = [t for t in DTYPES.values() if not t.is_index]


@pytest.mark.parametrize("backend, options", RUNS)
@pytest.mark.parametrize("src", SOURCES, ids=str)
def test_every_type_casts_to_fp8_as_ml_dtypes(src, backend, options):
    x = _inputs(src)
    for dst in FP8:
        got = _run_cast(src, dst, x, backend, options)
        with np.errstate(all="ignore"):
            want = x.astype(dst.numpy)  # ml_dtypes: f64 rounds once, directly
        _assert_same_bits(got, want, x, f"{src} -> {dst} on {backend}")


def test_f64_rounds_to_fp8_once():
    """The sweep holds values that rounding through f32 first would round twice."""
    x = _f64_sweep()
    for dst in FP8:
        with np.errstate(all="ignore"):
            once, twice = x.astype(dst.numpy), x.astype(np.float32).astype(dst.numpy)
        assert (_bits(once) != _bits(twice)).sum() > 100


# -- saturate=True ---------------------------------------------------------------------------------


def _saturated(x: np.ndarray, src, dst) -> np.ndarray:
    """Round once, then anything past the largest finite value (an infinity too) becomes it;
    NaN stays NaN.  Clipping the exact value first is the same, and exact in float64 here."""
    with np.errstate(all="ignore"):
        wide = x.astype(np.float64)
        clipped = np.where(np.isnan(wide), wide, np.clip(wide, dst.min, dst.max))
        return clipped.astype(dst.numpy)


@pytest.mark.parametrize("backend, options", RUNS)
@pytest.mark.parametrize("src", SOURCES, ids=str)
def test_saturating_casts_clamp_to_the_largest_finite_value(src, backend, options):
    x = _inputs(src)
    if src.is_int and src.bits > 53:  # float64 must hold the inputs exactly for the reference
        x = x[np.abs(x.astype(np.float64)) < 2.0**53]
    for dst in FP8 + (f16,):
        got = _run_cast(src, dst, x, backend, options, saturate=True)
        _assert_same_bits(got, _saturated(x, src, dst), x, f"saturating {src} -> {dst} on {backend}",
                          any_nan=dst not in FP8 or src == dst)  # f16's NaN payloads; an identity keeps them
    # what PTX's .satfinite does
    if src in (f32, f64):
        special = np.array([np.inf, -np.inf, np.nan, 1e9, -1e9, 464.0, 465.0, 61440.0], src.numpy)
        e4, e4nuz, e5 = (_run_cast(src, t, special, backend, options, saturate=True).astype(np.float64) for t in FP8)
        np.testing.assert_array_equal(e4, [448, -448, np.nan, 448, -448, 448, 448, 448])
        np.testing.assert_array_equal(e4nuz, [240, -240, np.nan, 240, -240, 240, 240, 240])
        np.testing.assert_array_equal(e5, [57344, -57344, np.nan, 57344, -57344, 448, 448, 57344])


def test_default_casts_follow_ml_dtypes_on_overflow():
    special = np.array([np.inf, -np.inf, 1e9, 465.0, 61440.0], np.float32)
    e4, e4nuz, e5 = (_run_cast(f32, t, special, "numpy", {}).astype(np.float64) for t in FP8)
    np.testing.assert_array_equal(e4, [np.nan] * 4 + [np.nan])  # E4M3FN has no infinity
    np.testing.assert_array_equal(e4nuz, [np.nan] * 5)
    np.testing.assert_array_equal(e5, [np.inf, -np.inf, np.inf, 448, np.inf])


def test_saturate_is_for_float_types():
    for dst, saturate in ((accy.i32, True), (f8e4m3, "yes")):
        with pytest.raises(TraceError, match="saturate"):
            elementwise("bad", lambda inner, a: inner.cast(a, dst, saturate=saturate), 4, dtypes=(f32,), out=dst).graph


def test_saturate_records_compares_and_selects():
    graph = elementwise("sat", lambda inner, a: inner.cast(a, f8e4m3, saturate=True), 4, dtypes=(f32,),
                        out=f8e4m3).graph
    text = str(graph)
    assert "cast" in text and "select" in text and "448.0 : f8e4m3" in text
    plain = str(elementwise("plain", lambda inner, a: a.cast(f8e4m3), 4, dtypes=(f32,), out=f8e4m3).graph)
    assert "select" not in plain


# -- arithmetic, scalars, constants ------------------------------------------------------------------


def _ieee_max(a, b):
    """IEEE 754-2019 maximum: NaN propagates, +0 > -0."""
    both_zero = (a == 0) & (b == 0)
    return np.where(both_zero, np.where(np.signbit(a) & np.signbit(b), -0.0, 0.0).astype(a.dtype), np.maximum(a, b))


@pytest.mark.parametrize("backend, options", RUNS)
@pytest.mark.parametrize("t", FP8, ids=str)
def test_arithmetic_computes_in_f32_and_rounds_once(t, backend, options):
    a = np.repeat(CODES, 256).view(t.numpy)
    b = np.tile(CODES, 256).view(t.numpy)
    ops = {"add": np.add, "mul": np.multiply, "div": np.divide, "max": _ieee_max}
    for name, fn in ops.items():
        program = elementwise(f"{name}_{t}", lambda inner, x, y, name=name: getattr(inner, name)(x, y), a.size,
                              dtypes=(t, t), out=t)
        got = np.zeros(a.size, t.numpy)
        program.run([got, a, b], backend=backend, **options)
        wide_a, wide_b = a.astype(np.float32), b.astype(np.float32)
        with np.errstate(all="ignore"):
            want = fn(wide_a, wide_b).astype(t.numpy)
        _assert_same_bits(got, want, a, f"{name} of {t} on {backend}", any_nan=True)  # NaN payloads aside


@pytest.mark.parametrize("backend, options", RUNS)
def test_scalars_constants_and_folds_of_fp8(backend, options):
    def body(k, args):
        def each(inner, idx):
            i = idx["i"]
            x = args.x[i]
            total = inner.fold_range(0, 4, 1, inner.constant(0.0, f8e5m2),
                                     body=lambda inner, j, acc: acc + inner.cast(j, f8e5m2) * args.s)
            args.out[i] = inner.cast(x * args.w + 0.3, f8e5m2) + total

        k.for_each_1d(axis("i", args.x.size), each)

    program = Program("fp8_mix", {"out": dynamic_buffer(f8e5m2), "x": dynamic_buffer(f8e4m3), "w": scalar(f8e4m3),
                                  "s": scalar(f8e5m2)}, body)
    x = CODES.view(f8e4m3.numpy)
    out = np.zeros(256, f8e5m2.numpy)
    program.run([out, x, 1.75, 3.0], backend=backend, **options)
    w, s, c = (np.float32(np.asarray(v).astype(d.numpy)) for v, d in ((1.75, f8e4m3), (3.0, f8e5m2), (0.3, f8e4m3)))
    with np.errstate(all="ignore"):
        y = ((x.astype(np.float32) * w).astype(f8e4m3.numpy).astype(np.float32) + c).astype(f8e4m3.numpy)
        total = np.zeros(1, f8e5m2.numpy)
        for j in range(4):
            step = (np.float32(j) * s).astype(f8e5m2.numpy)
            total = (total.astype(np.float32) + step.astype(np.float32)).astype(f8e5m2.numpy)
        want = (y.astype(f8e5m2.numpy).astype(np.float32) + total.astype(np.float32)).astype(f8e5m2.numpy)
    _assert_same_bits(out, want, x, f"fp8 kernel on {backend}", any_nan=True)


# (type, a finite value that rounds past its largest, one that rounds to it, the largest)
FINITE_FP8 = [pytest.param(f8e4m3, 465.0, 464.0, 448.0, id="f8e4m3"),
              pytest.param(f8e4m3fnuz, 248.0, 247.0, 240.0, id="f8e4m3fnuz")]


@pytest.mark.parametrize("t, past, below, biggest", FINITE_FP8)
def test_constant_that_overflows_fp8_is_an_error(t, past, below, biggest):
    with pytest.raises(TraceError, match=f"overflows {t}"):
        elementwise("big", lambda inner, a: a * past, 4, dtypes=(t,), out=t).graph
    assert f"const {biggest} : {t}" in str(elementwise("ok", lambda inner, a: a * below, 4, dtypes=(t,), out=t).graph)


@pytest.mark.parametrize("backend, options", RUNS)
def test_f8e4m3fnuz_has_no_negative_zero_and_one_nan(backend, options):
    """-0 (cast, negated, multiplied, underflowed) is +0, code 0x00; NaN, infinities and overflow
    are the one NaN, 0x80 (the code -0 would have), which stays NaN in every type, as ml_dtypes."""
    t = f8e4m3fnuz
    x = np.array([-0.0, -1e-30, -(2.0**-11), np.nan, -np.nan, np.inf, -np.inf, 248.0, -248.0, 247.0, -1.0, 0.0],
                 np.float32)
    np.testing.assert_array_equal(_bits(_run_cast(f32, t, x, backend, options)),
                                  [0, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7F, 0xC0, 0])
    codes = np.array([0x00, 0x80, 0x08, 0x7F, 0xFF], np.uint8).view(t.numpy)  # 0, NaN, tiny, 240, -240
    ops = {"neg": (lambda inner, a, b: -a, lambda a, b: -a), "mul": (lambda inner, a, b: a * b, np.multiply),
           "sub": (lambda inner, a, b: a - b, np.subtract)}
    others = np.array([0x00, 0x08, 0x88, 0x7F, 0x7F], np.uint8).view(t.numpy)  # 0, tiny, -tiny, 240, 240
    for name, (fn, reference) in ops.items():
        program = elementwise(f"fnuz_{name}", fn, codes.size, dtypes=(t, t), out=t)
        got = np.zeros(codes.size, t.numpy)
        program.run([got, codes, others], backend=backend, **options)
        with np.errstate(all="ignore"):
            want = reference(codes.astype(np.float32), others.astype(np.float32)).astype(t.numpy)
        _assert_same_bits(got, want, codes, f"{name} of {t} on {backend}")
        assert 0x80 not in _bits(got)[[0, 2]]  # -0, -(tiny*tiny) and 0 - 0 are +0
    for dst in (f32, f64, f16, bf16, f8e4m3, accy.i32, accy.boolean):
        nan = _run_cast(t, dst, codes[1:2], backend, options)[0]
        assert (nan if dst.is_bool or dst.is_int else math.isnan(float(nan))) == (not dst.is_int), (dst, nan)


@pytest.mark.parametrize("t", FP8, ids=str)
def test_shared_memory_shuffles_and_block_reductions_of_fp8(t):
    """fp8 through shared memory, a shuffle, block_reduce and block_scan: every backend gives
    the interpreter's bits (and the permutations are the inputs' own bits)."""
    threads, blocks = 64, 4
    outputs = ("mirror", "swap", "top", "scan")

    @accy.kernel(**{name: dynamic_buffer(t) for name in outputs}, x=dynamic_buffer(t))
    def block_ops(k, a):
        @k.for_each_block(grid=axis("b", blocks), threads=axis("t", threads))
        def body(inner, block, thread):
            s = inner.shared(t, threads, "s")
            i, j = block["b"] * threads + thread["t"], thread["t"]
            v = a.x[i]
            s[j] = v
            inner.barrier()
            a.mirror[i] = s[threads - 1 - j]
            a.swap[i] = inner.shuffle_xor(v, 1)
            a.top[i] = inner.block_reduce(v, "max")
            a.scan[i] = inner.block_scan(v * 0.25, "sum")

    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, threads * blocks).astype(np.uint8).view(t.numpy)
    runs = {}
    for backend, options in (("numpy", {}), ("llvm", {}), ("ptx", {"arch": "sm_80"}), ("ptx", {"arch": "sm_90"})):
        outs = {name: np.zeros(x.size, t.numpy) for name in outputs}
        block_ops.run([*outs.values(), x], backend=backend, **options)
        runs[f"{backend}{options}"] = outs
    reference = runs["numpy{}"]
    tiles = _bits(x).reshape(blocks, threads)
    np.testing.assert_array_equal(_bits(reference["mirror"]).reshape(blocks, threads), tiles[:, ::-1])
    np.testing.assert_array_equal(_bits(reference["swap"]).reshape(blocks, threads), tiles.reshape(-1, 2)[:, ::-1]
                                  .reshape(blocks, threads))
    for name, outs in runs.items():
        for out in outputs:
            _assert_same_bits(outs[out], reference[out], x, f"{out} on {name}", any_nan=out in ("top", "scan"))


@pytest.mark.parametrize("t, past, below, biggest", FINITE_FP8)
def test_a_scalar_argument_that_overflows_a_finite_fp8_is_an_error(t, past, below, biggest):
    """E4M3FN (and fnuz) rounds an overflow to NaN, not to an infinity: a finite scalar past its
    largest value (after rounding) is an error, as for every float type, not a silent NaN; an
    infinity stays legal (it is NaN there, as an infinite constant is)."""
    from accy.errors import ArgumentError

    def body(k, args):
        k.for_each_1d(axis("i", args.out.size), lambda inner, idx: args.out.__setitem__(idx["i"], args.s))

    program = Program("fill", {"out": dynamic_buffer(t), "s": scalar(t)}, body)
    out = np.zeros(4, t.numpy)
    for bad in (1000.0, -past, 10**40):
        with pytest.raises(ArgumentError, match=f"overflows {t}"):
            program.run([out, bad])
    assert not out.any()  # untouched
    program.run([out, below])
    assert out.astype(np.float32).tolist() == [biggest] * 4
    program.run([out, math.inf])
    assert np.isnan(out.astype(np.float32)).all()


@pytest.mark.parametrize("name", ["f8e4m3", "f8e4m3fnuz", "f8e5m2"])
def test_a_row_of_one_lane_stores_one_element(name):
    """A 2-D launch whose x extent LLVM folds to 1 stores each row's one fp8 element with a
    masked store of a constant one-lane mask; LLVM 22's x86 backend stored the narrowed lane as a
    32-bit word over the next three elements (the fuzzer found it: [nan, nan] came back [nan, 0])."""
    t = DTYPES[name]

    def body(k, a):
        ex = k.cast(k.cast(k.constant(1, accy.index), f16), accy.index)  # 1, but not a literal until LLVM folds it
        ey = k.cast(k.cast(k.constant(5, accy.index), f16), accy.index)

        def each(inner, idx):
            i = idx["x"] + idx["y"] * ex
            a.out[i] = inner.add(a.out[i], inner.constant(1.0, t))

        k.for_each_2d(x=axis("x", ex), y=axis("y", ey), body=each)

    out = np.full(5, 3.0, np.float32).astype(t.numpy)
    Program("row", {"out": dynamic_buffer(t)}, body).run([out], backend="llvm")
    np.testing.assert_array_equal(out.astype(np.float32), np.full(5, 4.0, np.float32))
