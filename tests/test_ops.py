"""Every op, run on every CPU backend, against plain NumPy."""

import numpy as np
import pytest

from accy import Program, axis, schedule, boolean, buffer, dynamic_buffer, f32, index

from conftest import elementwise

N = 37  # not a multiple of any block size

FLOAT_EDGES = np.array([0.0, -0.0, 1.0, -1.5, 3.25, 1e-30, -1e30, np.inf, -np.inf, np.nan], np.float32)


def floats(rng, n=N):
    x = rng.standard_normal(n).astype(np.float32) * 4
    x[: len(FLOAT_EDGES)] = FLOAT_EDGES
    return x


BINARY_F32 = {
    "add": (lambda inner, a, b: inner.add(a, b), np.add),
    "sub": (lambda inner, a, b: inner.sub(a, b), np.subtract),
    "mul": (lambda inner, a, b: inner.mul(a, b), np.multiply),
    "div": (lambda inner, a, b: inner.div(a, b), np.divide),
    "max": (lambda inner, a, b: inner.max(a, b), np.maximum),
    "min": (lambda inner, a, b: inner.min(a, b), np.minimum),
}


@pytest.mark.parametrize("op", sorted(BINARY_F32))
def test_binary_f32(op, backend, rng):
    fn, ref = BINARY_F32[op]
    a, b = floats(rng), np.roll(floats(rng), 3)
    dst = np.zeros(N, np.float32)
    elementwise(f"f32_{op}", fn, N).run([dst, a, b], backend=backend)
    with np.errstate(all="ignore"):
        expected = ref(a, b)
    np.testing.assert_array_equal(dst, expected)


UNARY_F32 = {
    "neg": (lambda inner, a: inner.neg(a), np.negative),
    "exp": (lambda inner, a: inner.exp(a), np.exp),
    "sqrt": (lambda inner, a: inner.sqrt(a), np.sqrt),
}


@pytest.mark.parametrize("op", sorted(UNARY_F32))
def test_unary_f32(op, backend, rng):
    fn, ref = UNARY_F32[op]
    a = floats(rng)
    dst = np.zeros(N, np.float32)
    elementwise(f"f32_{op}", fn, N, dtypes=(f32,)).run([dst, a], backend=backend)
    with np.errstate(all="ignore"):
        expected = ref(a)
    np.testing.assert_allclose(dst, expected, rtol=2e-6, atol=0, equal_nan=True)


def index_operands(rng, n=N):
    a = rng.integers(-50, 50, n).astype(np.int64)
    b = rng.integers(-7, 8, n).astype(np.int64)
    b[b == 0] = 3
    a[:4] = [np.iinfo(np.int64).max, np.iinfo(np.int64).min, -7, 7]
    b[:4] = [1, -1, 2, -2]
    return a, b


BINARY_INDEX = {
    "add": (lambda inner, a, b: inner.add(a, b), np.add),
    "sub": (lambda inner, a, b: inner.sub(a, b), np.subtract),
    "mul": (lambda inner, a, b: inner.mul(a, b), np.multiply),
    "div": (lambda inner, a, b: inner.div(a, b), np.floor_divide),
    "max": (lambda inner, a, b: inner.max(a, b), np.maximum),
    "min": (lambda inner, a, b: inner.min(a, b), np.minimum),
}


@pytest.mark.parametrize("op", sorted(BINARY_INDEX))
def test_binary_index(op, backend, rng):
    fn, ref = BINARY_INDEX[op]
    a, b = index_operands(rng)
    dst = np.zeros(N, np.int64)
    elementwise(f"index_{op}", fn, N, dtypes=(index, index), out=index).run([dst, a, b], backend=backend)
    with np.errstate(all="ignore"):
        expected = ref(a, b)  # 64-bit wrap-around, as LLVM's i64
    np.testing.assert_array_equal(dst, expected)


def test_index_div_is_floor_division(backend):
    a = np.array([7, -7, 7, -7, 0, -1], np.int64)
    b = np.array([2, 2, -2, -2, 5, 3], np.int64)
    dst = np.zeros(6, np.int64)
    elementwise("floordiv", lambda inner, x, y: x // y, 6, dtypes=(index, index), out=index).run([dst, a, b], backend=backend)
    assert dst.tolist() == [3, -4, -4, 3, 0, -1]


def test_index_neg(backend):
    a = np.array([0, 5, -5, np.iinfo(np.int64).min], np.int64)
    dst = np.zeros(4, np.int64)
    elementwise("ineg", lambda inner, x: -x, 4, dtypes=(index,), out=index).run([dst, a], backend=backend)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(dst, -a)


COMPARES = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal}


@pytest.mark.parametrize("op", sorted(COMPARES))
@pytest.mark.parametrize("dtype", [f32, index])
def test_compare_and_select(op, dtype, backend, rng):
    if dtype == f32:
        a, b = floats(rng), np.roll(floats(rng), 1)
        b[5] = a[5]  # some equal pairs
    else:
        a, b = index_operands(rng)
        b[6] = a[6]
    one = 1.0 if dtype == f32 else 1
    zero = 0.0 if dtype == f32 else 0

    def fn(inner, x, y):
        return inner.select(getattr(inner, op)(x, y), one, zero)

    dst = np.zeros(N, dtype.numpy)
    elementwise(f"cmp_{op}", fn, N, dtypes=(dtype, dtype), out=dtype).run([dst, a, b], backend=backend)
    np.testing.assert_array_equal(dst, COMPARES[op](a, b).astype(dtype.numpy))


def test_logical_ops(backend, rng):
    a, b = floats(rng), np.roll(floats(rng), 2)

    def fn(inner, x, y):
        p, q = x > 0.0, y < 1.0
        both = inner.select(p & q, 1.0, 0.0)
        either = inner.select(p | q, 2.0, 0.0)
        neither = inner.select(~(p | q), 4.0, 0.0)
        return both + either + neither

    dst = np.zeros(N, np.float32)
    elementwise("logic", fn, N).run([dst, a, b], backend=backend)
    p, q = a > 0, b < 1
    expected = (p & q) * 1.0 + (p | q) * 2.0 + ~(p | q) * 4.0
    np.testing.assert_array_equal(dst, expected.astype(np.float32))


def test_casts(backend):
    x = np.array([0.0, 1.9, -1.9, 2.5, np.nan, np.inf, -np.inf, 1e30], np.float32)
    dst = np.zeros(8, np.int64)
    elementwise("f2i", lambda inner, v: inner.cast(v, index), 8, dtypes=(f32,), out=index).run([dst, x], backend=backend)
    big = np.iinfo(np.int64)
    assert dst.tolist() == [0, 1, -1, 2, 0, big.max, big.min, big.max]

    i = np.array([0, -3, 2**40 + 1, 2**62], np.int64)
    out = np.zeros(4, np.float32)
    elementwise("i2f", lambda inner, v: inner.cast(v, f32), 4, dtypes=(index,), out=f32).run([out, i], backend=backend)
    np.testing.assert_array_equal(out, i.astype(np.float32))

    flags = np.zeros(4, np.float32)
    elementwise("b2f", lambda inner, v: inner.cast(v > 0, f32), 4, dtypes=(index,), out=f32).run([flags, i], backend=backend)
    assert flags.tolist() == [0.0, 0.0, 1.0, 1.0]


def test_constants_and_python_numbers(backend):
    def fn(inner, x):
        c = inner.constantFloat(f32, 0.5) + inner.constant_float(0.25)
        return x * 2 + c - 1.0  # Python int becomes an f32 constant next to an f32 value

    x = np.arange(5, dtype=np.float32)
    dst = np.zeros(5, np.float32)
    elementwise("consts", fn, 5, dtypes=(f32,)).run([dst, x], backend=backend)
    np.testing.assert_array_equal(dst, x * 2 + 0.75 - 1.0)


def test_fold_range_sums_and_steps(backend):
    n = 6

    def body(k, args):
        def each(inner, idx):
            i = idx["i"]
            up = inner.fold_range(0, i, 1, 0, lambda inner, j, acc: acc + j)          # 0+..+(i-1)
            down = inner.fold_range(i, -1, -2, 0, lambda inner, j, acc: acc + j)      # i, i-2, ...
            empty = inner.fold_range(5, 2, 1, 100, lambda inner, j, acc: acc + j)     # no iterations
            args.dst[i] = up * 10000 + down * 100 + empty
        k.for_each_1d(axis("i", n), each)

    dst = np.zeros(n, np.int64)
    Program("folds", {"dst": dynamic_buffer(index)}, body).run([dst], backend=backend)
    expected = [sum(range(i)) * 10000 + sum(range(i, -1, -2)) * 100 + 100 for i in range(n)]
    assert dst.tolist() == expected


def test_fold_with_tuple_accumulator(backend):
    def body(k, args):
        def each(inner, idx):
            i = idx["i"]

            def step(inner, j, acc):
                lo, hi = acc
                x = args.x[i * 4 + j]
                return inner.min(lo, x), inner.max(hi, x)

            lo, hi = inner.fold_range(0, 4, 1, (float("inf"), float("-inf")), step)
            args.dst[i] = hi - lo
        k.for_each_1d(axis("i", 3), each)

    x = np.random.default_rng(0).standard_normal(12).astype(np.float32)
    dst = np.zeros(3, np.float32)
    Program("minmax", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}, body).run([dst, x], backend=backend)
    r = x.reshape(3, 4)
    np.testing.assert_array_equal(dst, r.max(1) - r.min(1))


def test_nested_folds_with_thread_dependent_bounds(backend):
    """A triangular loop nest: the inner bound depends on the thread and the outer index."""
    def body(k, args):
        def each(inner, idx):
            i = idx["i"]

            def outer(inner, a, acc):
                return inner.fold_range(0, a + 1, 1, acc, lambda inner, b, acc2: acc2 + args.x[b])

            args.dst[i] = inner.fold_range(0, i, 1, 0.0, outer)
        k.for_each_1d(axis("i", 7), each)

    x = np.arange(1, 8, dtype=np.float32)
    dst = np.zeros(7, np.float32)
    Program("tri", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}, body).run([dst, x], backend=backend)
    expected = [sum(x[: a + 1].sum() for a in range(i)) for i in range(7)]
    np.testing.assert_allclose(dst, expected)


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_launch_1d_2d_3d_ragged(dims, backend):
    extents = {1: (13,), 2: (5, 7), 3: (3, 5, 2)}[dims]
    names = ("x_", "y_", "z_")[:dims]
    total = int(np.prod(extents))

    def body(k, args):
        def each(inner, idx):
            flat = 0
            stride = 1
            for name, extent in zip(names, extents):
                flat = idx[name] * stride + flat
                stride *= extent
            args.dst[flat] = inner.cast(flat, f32) * 2.0
        axes = [axis(n, e) for n, e in zip(names, extents)]
        if dims == 1:
            k.for_each_1d(axes[0], each)
        elif dims == 2:
            k.for_each_2d(x=axes[0], y=axes[1], body=each)
        else:
            k.for_each_3d({"x": axes[0], "y": axes[1], "z": axes[2]}, each)

    dst = np.full(total, -1.0, np.float32)
    program = Program(f"launch{dims}", {"dst": buffer(f32, total)}, body)
    program = program.with_schedule(schedule.thread_blocks(4, 2, 1))
    program.run([dst], backend=backend)
    np.testing.assert_array_equal(dst, np.arange(total, dtype=np.float32) * 2)


def test_load_after_store_sees_the_stored_value(backend):
    def body(k, args):
        def each(inner, idx):
            i = idx["i"]
            args.dst[i] = args.x[i] + 1.0
            args.dst[i] = args.dst[i] * 3.0
        k.for_each_1d(axis("i", 4), each)

    x = np.arange(4, dtype=np.float32)
    dst = np.zeros(4, np.float32)
    Program("rw", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}, body).run([dst, x], backend=backend)
    np.testing.assert_array_equal(dst, (x + 1) * 3)


def test_zero_sized_launch_does_nothing(backend):
    def body(k, args):
        k.for_each_1d(axis("i", 0), lambda inner, idx: args.dst.store(inner, 1.0, idx["i"]))

    dst = np.zeros(0, np.float32)
    Program("empty", {"dst": dynamic_buffer(f32)}, body).run([dst], backend=backend)


def test_bool_type_is_exposed():
    assert boolean.is_bool and not boolean.is_float


def test_vectorised_folds_agree_with_loops_under_any_memory_cap(rng):
    """Chunking a vectorised fold (here down to one iteration per chunk) changes nothing."""
    from accy.library.attention import ScaledDotProduct, scaled_dot_product_f32

    entry = scaled_dot_product_f32(ScaledDotProduct(2, 5, 9, 4, 3))
    args = [rng.standard_normal(s, dtype=np.float32) for s in ((2, 5, 4), (2, 9, 4), (2, 9, 3))]
    roomy, tight = np.zeros((2, 5, 3), np.float32), np.zeros((2, 5, 3), np.float32)
    entry.run([roomy, *args], backend="numpy")
    entry.run([tight, *args], backend="numpy", memory_cap=1)
    np.testing.assert_array_equal(roomy, tight)


def test_vectorised_float_sums_round_like_a_sequential_loop():
    """A summed fold matches the LLVM backend's sequential loop bit for bit."""
    def body(k, args):
        k.for_each_1d(axis("i", 2), lambda inner, idx: args.dst.store(
            inner, inner.fold_range(0, 1000, 1, 0.0, lambda inner, j, acc: acc + args.x[j]), idx["i"]))

    x = (np.random.default_rng(5).standard_normal(1000) * 1e4).astype(np.float32)
    program = Program("seqsum", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}, body)
    interpreted, native = np.zeros(2, np.float32), np.zeros(2, np.float32)
    program.run([interpreted, x], backend="numpy")
    program.run([native, x], backend="llvm")
    expected = np.float32(0)
    for value in x:
        expected = np.float32(expected + value)
    assert interpreted.tolist() == native.tolist() == [expected, expected]
