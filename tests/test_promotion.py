"""Type promotion (docs/ir.md, "Type promotion"): operands of different types meet in one
type by one table, recorded as casts, so every backend computes the same; Python numbers are
weak; a store converts to the destination's type; ``/`` of integers is f32 true division."""

import ml_dtypes
import numpy as np
import pytest

import accy
from accy import Program, axis, dynamic_buffer, f16, f32, i32, kernel, tensor
from accy.dsl.types import DTYPES
from accy.errors import TraceError

# the table, written out (not computed with accy.dsl.promotion): (a, b) -> result
TABLE = {
    ("f16", "bf16"): "f32", ("f16", "f32"): "f32", ("bf16", "f32"): "f32", ("f32", "f64"): "f64",
    ("f16", "f64"): "f64", ("bf16", "bf16"): "bf16", ("f16", "i32"): "f16", ("bf16", "i32"): "f32",
    ("f32", "i64"): "f32", ("f64", "u8"): "f64", ("f32", "index"): "f32", ("f16", "index"): "f16",
    ("f8e4m3", "f8e5m2"): "f16", ("f8e4m3", "f16"): "f16", ("f8e4m3", "bf16"): "f32", ("f8e5m2", "i8"): "f16",
    ("f8e4m3", "f32"): "f32",
    ("i8", "i32"): "i32", ("u8", "i32"): "i32", ("u32", "i32"): "u32", ("u32", "i64"): "i64",
    ("u64", "i64"): "u64", ("u8", "u16"): "u16", ("i64", "index"): "index", ("i32", "index"): "index",
    ("u64", "index"): "u64", ("u32", "index"): "index",
    ("bool", "i8"): "i8", ("bool", "f16"): "f16",
}


def _trace(expression, *dtypes):
    """The result type of ``expression`` on scalars loaded from buffers of ``dtypes``."""
    found = []
    params = {f"x{i}": dynamic_buffer(DTYPES[d]) for i, d in enumerate(dtypes)}

    def body(k, args):
        def each(inner, idx):
            values = [getattr(args, f"x{i}")[idx["i"]] for i in range(len(dtypes))]
            found.append(expression(*values).type)

        k.for_each_1d(axis("i", 1), each)

    Program("promote", params, body).traced_graph
    return found[0]


@pytest.mark.parametrize("a, b", sorted(TABLE), ids=[f"{a}-{b}" for a, b in sorted(TABLE)])
def test_the_table_both_ways(a, b):
    assert str(_trace(lambda x, y: x + y, a, b)) == TABLE[a, b]
    assert str(_trace(lambda x, y: y * x, a, b)) == TABLE[a, b]
    assert str(_trace(lambda x, y: x < y, a, b)) == "bool"


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_python_numbers_are_weak(dtype):
    t = DTYPES[dtype]
    if t.is_bool:
        assert str(_trace(lambda x: x + 1, dtype)) == "index"
        return
    assert _trace(lambda x: x + 1, dtype) == t and _trace(lambda x: 2 * x, dtype) == t
    assert str(_trace(lambda x: x * 0.5, dtype)) == (dtype if t.is_float else "f32")
    # / of integers, and of floats narrower than f32, is f32 (as Triton's); a tiny float is f64 next to integers
    assert str(_trace(lambda x: x / 2, dtype)) == (dtype if t.is_float and t.bits >= 32 else "f32")
    assert str(_trace(lambda x: x % 3, dtype)) == (dtype if not t.is_float or t.bits >= 32 else "f32")
    assert str(_trace(lambda x: x * 1e-50, dtype)) == (dtype if t.is_float else "f64")


def test_constants_still_fit_their_type_and_floor_division_wants_integers():
    with pytest.raises(TraceError, match=r"constant 300 is outside the u8 range"):
        _trace(lambda x: x + 300, "u8")
    with pytest.raises(TraceError, match=r"constant -1 is outside the u32 range"):
        _trace(lambda x: x - (-1), "u32")
    with pytest.raises(TraceError, match=r"f16 // i32: // is integer division"):
        _trace(lambda x, y: x // y, "f16", "i32")
    with pytest.raises(TraceError, match=r"i32 // u8: operands of different signedness"):
        _trace(lambda x, y: x // y, "i32", "u8")


def _promoting_kernel():
    @kernel(q=tensor(f32, 1), s=tensor(i32, 1), h=tensor(f16, 1), a=tensor(i32, 1), b=tensor(accy.u8, 1),
            x=tensor(f16, 1), y=tensor(accy.bf16, 1), z=tensor(f32, 1), j=tensor(accy.i64, 1))
    def promoting(k, p):
        (n,) = p.a.shape

        @k.for_each_tile(grid=axis("i", (n + 63) // 64), warps=2)
        def program(t, pid):
            i = pid["i"] * 64 + t.arange(64)
            m = i < n
            a, b, x, y, z, j = (v.load(i, mask=m) for v in (p.a, p.b, p.x, p.y, p.z, p.j))
            gathered = p.z.load(j, mask=m)            # i64 indices
            quotient = a / (b + 1)                    # i32 / i32 -> f32
            mixed = x * y + quotient                  # f16 * bf16 -> f32
            p.q.store(i, mixed + gathered, mask=m)
            p.s.store(i, z * 1000, mask=m)            # f32 -> i32: truncated, saturated, NaN 0
            p.h.store(i, z, mask=m)                   # f32 -> f16: rounded to nearest even

    return promoting


def test_promotion_and_converting_stores_agree_with_numpy(backend):
    rng = np.random.default_rng(3)
    n = 100
    a = rng.integers(-1000, 1000, n).astype(np.int32)
    b = rng.integers(0, 256, n).astype(np.uint8)
    x = rng.standard_normal(n).astype(np.float16)
    y = rng.standard_normal(n).astype(ml_dtypes.bfloat16)
    z = (rng.standard_normal(n) * 3e6).astype(np.float32)
    z[:4] = [np.nan, np.inf, -np.inf, 70000.0]
    j = rng.integers(0, n, n).astype(np.int64)
    q, s, h = np.zeros(n, np.float32), np.zeros(n, np.int32), np.zeros(n, np.float16)
    _promoting_kernel().run([q, s, h, a, b, x, y, z, j], backend=backend)
    quotient = a.astype(np.float32) / (b.astype(np.int32) + 1).astype(np.float32)
    mixed = x.astype(np.float32) * y.astype(np.float32) + quotient
    np.testing.assert_array_equal(q, mixed + z[j])
    with np.errstate(over="ignore"):
        scaled = (z * np.float32(1000)).astype(np.float64)  # the product is f32
    saturated = np.clip(np.trunc(np.nan_to_num(scaled, posinf=2**31, neginf=-2**32)), -2**31, 2**31 - 1)
    np.testing.assert_array_equal(s, np.where(np.isnan(scaled), 0, saturated).astype(np.int32))
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(h, z.astype(np.float16))


def test_the_simt_level_promotes_too(backend):
    def body(k, args):
        def each(inner, idx):
            i = idx["i"]
            args.dst[i] = args.a[i] / 4 + args.b[i] * 0.5   # i32 / int -> f32; u8 * float -> f32

        k.for_each_1d(axis("i", args.a.size), each)

    program = Program("simt", {"dst": dynamic_buffer(accy.i32), "a": dynamic_buffer(i32),
                               "b": dynamic_buffer(accy.u8)}, body)
    a = np.arange(-8, 8, dtype=np.int32)
    b = np.arange(16, dtype=np.uint8)
    dst = np.zeros(16, np.int32)
    program.run([dst, a, b], backend=backend)
    np.testing.assert_array_equal(dst, np.trunc(a / np.float32(4) + b * np.float32(0.5)).astype(np.int32))


@pytest.mark.parametrize("dtype", ["i32", "i8", "u16", "f32", "f16", "f64"])
def test_fmod_and_truncdiv_are_cs_and_percent_and_floor_division_pythons(backend, dtype):
    t = DTYPES[dtype]

    @kernel(r=tensor(t, 1), q=tensor(t, 1), pr=tensor(t, 1), a=tensor(t, 1), b=tensor(t, 1))
    def division(k, p):
        (n,) = p.a.shape

        @k.for_each_tile(grid=axis("i", (n + 31) // 32), warps=1)
        def program(tb, pid):
            at = (pid["i"] * 32,)
            a, b = p.a.load_tile(at, (32,)), p.b.load_tile(at, (32,), other=1)
            p.r.store_tile(at, tb.fmod(a, b))
            p.pr.store_tile(at, a % b)
            if not t.is_float:
                p.q.store_tile(at, tb.truncdiv(a, b))

    rng = np.random.default_rng(5)
    if t.is_float:
        a = (rng.standard_normal(64) * 40).astype(t.numpy)
        b = (rng.standard_normal(64) * 5).astype(t.numpy)
        a[:6] = [-0.0, 0.0, np.inf, 5.0, -7.5, 1e-3]
        b[:6] = [3.0, -3.0, 2.0, np.inf, 2.0, -0.0]
    else:
        lo, hi = (max(t.min, -100), min(t.max, 100))
        a = rng.integers(lo, hi, 64).astype(t.numpy)
        b = rng.integers(lo, hi, 64).astype(t.numpy)
        b[b == 0] = 1
        a[0], b[0] = t.min, (-1 if not t.is_unsigned else 1)
    r, q, pr = (np.zeros(64, t.numpy) for _ in range(3))
    division.run([r, q, pr, a, b], backend=backend)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(r, np.fmod(a, b))
        signed = ~np.isnan(r)  # a NaN's sign is unspecified
        np.testing.assert_array_equal(np.signbit(r)[signed], np.signbit(np.fmod(a, b))[signed])
        np.testing.assert_array_equal(pr, np.remainder(a, b))
        if not t.is_float:  # C's quotient: a - fmod(a, b) divided exactly by b, wrapping at min / -1
            np.testing.assert_array_equal(q, ((a.astype(np.int64) - np.fmod(a, b)) // np.where(b == 0, 1, b))
                                          .astype(t.numpy))


@pytest.mark.parametrize("src, dst", [("f32", "i32"), ("f32", "u32"), ("i32", "f32"), ("f16", "i16"),
                                      ("bf16", "u16"), ("u16", "bf16"), ("f64", "i64"), ("index", "f64"),
                                      ("f8e4m3", "u8"), ("i8", "f8e5m2")])
def test_bitcast_keeps_the_bits(backend, src, dst):
    s, d = DTYPES[src], DTYPES[dst]

    @kernel(out=tensor(d, 1), scalar_out=tensor(d, 1), x=tensor(s, 1))
    def bits(k, p):
        @k.for_each_tile(grid=axis("i", 1), warps=1)
        def program(t, pid):
            x = p.x.load_tile((0,), (64,))
            p.out.store_tile((0,), x.cast(d, bitcast=True))
            p.scalar_out.store(0, t.bitcast(p.x.load(3), d))

    rng = np.random.default_rng(4)
    raw = rng.integers(0, 256, 64 * s.itemsize, dtype=np.uint8)
    if s.is_float:  # keep NaNs out: their payloads may be quieted on the way through a register
        raw = np.linspace(-3, 3, 64).astype(s.numpy).view(np.uint8)
    x = raw.view(s.numpy).copy()
    out, scalar_out = np.zeros(64, d.numpy), np.zeros(64, d.numpy)
    bits.run([out, scalar_out, x], backend=backend)
    np.testing.assert_array_equal(out.view(np.uint8), x.view(np.uint8))
    assert scalar_out[:1].view(np.uint8).tolist() == x[3:4].view(np.uint8).tolist()


def test_a_bitcast_between_widths_is_a_trace_error():
    with pytest.raises(TraceError, match=r"a bitcast keeps the bits: f32 \(32 bits\) and i16 \(16 bits\)"):
        _trace(lambda x: x.cast(accy.i16, bitcast=True), "f32")
    with pytest.raises(TraceError, match=r"bool excepted"):
        _trace(lambda x: x.cast(accy.boolean, bitcast=True), "u8")


def test_stores_and_other_convert_numbers_a_type_does_not_hold(backend):
    """``other=-1`` for u8 is 255 and ``other=1e5`` for f16 is inf, as a cast of them (Triton's)."""

    @kernel(small=tensor(accy.u8, 1), wrapped=tensor(accy.u8, 1), half=tensor(f16, 1), x=tensor(accy.u8, 1),
            h=tensor(f16, 1))
    def converting(k, p):
        @k.for_each_tile(grid=axis("i", 1), warps=1)
        def program(t, pid):
            p.small.store_tile((0,), p.x.load_tile((0,), (8,), other=-1))
            p.half.store_tile((0,), p.h.load_tile((0,), (8,), other=1e5))
            p.wrapped.store(t.arange(2), 300)   # wraps: 44

    small, wrapped, half = np.zeros(8, np.uint8), np.zeros(2, np.uint8), np.zeros(8, np.float16)
    converting.run([small, wrapped, half, np.ones(4, np.uint8), np.ones(4, np.float16)], backend=backend)
    np.testing.assert_array_equal(small, [1, 1, 1, 1, 255, 255, 255, 255])
    np.testing.assert_array_equal(wrapped, [44, 44])
    np.testing.assert_array_equal(half, [1, 1, 1, 1] + [np.inf] * 4)


def test_narrow_integer_sums_are_i32_as_tritons(backend):
    @kernel(total=tensor(i32, 1), running=tensor(accy.u32, 1), x=tensor(accy.i8, 1), y=tensor(accy.u8, 1))
    def sums(k, p):
        @k.for_each_tile(grid=axis("i", 1), warps=1)
        def program(t, pid):
            p.total.store(0, t.sum(p.x.load_tile((0,), (8,))))
            p.running.store_tile((0,), t.cumsum(p.y.load_tile((0,), (8,))))

    total, running = np.zeros(1, np.int32), np.zeros(8, np.uint32)
    x, y = np.full(8, 100, np.int8), np.arange(250, 258).astype(np.uint8)
    sums.run([total, running, x, y], backend=backend)
    assert total[0] == 800
    np.testing.assert_array_equal(running, np.cumsum(y.astype(np.uint32)))
