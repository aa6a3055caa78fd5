"""Regressions the tile-level fuzzer (tests/test_fuzz_tiles.py) and its adversarial sweeps
found, minimised by hand.  Each test is deterministic and small and names the bug it pins;
a bug whose fix is still open is ``xfail(strict=True)`` with where the fault lies, so the fix
turns it into an XPASS to remove the mark (and the fuzzer's avoidance, fuzz_tiles.KNOWN_BUGS).
"""

import numpy as np
import pytest

import accy
from accy import axis, f32, i32

BACKENDS = ["numpy", "llvm", "ptx"]


def _scan_kernel(shape, axis_, op, dtype):
    n = int(np.prod(shape))

    @accy.kernel(out=accy.dynamic_buffer(dtype), x=accy.dynamic_buffer(dtype))
    def scan(k, p):
        @k.for_each_tile(grid=axis("m", 1), warps=1)
        def body(t, pid):
            i = t.arange(n)
            v = p.x.load(i).reshape(shape)
            p.out.store(i, getattr(t, op)(v, axis_).reshape((n,)))

    return scan


# -- bug 1 (fixed in accy/codegen/host/tiles.py): llvm's scan along a non-last axis dropped the --
# previous row in part of each line.  A (2, 25) i32 cumsum along axis 0 on llvm gave row 1's
# first 7 columns (flat 25..31, up to the next multiple of 16) as x[1, j] alone, not x[0, j] +
# x[1, j]; cummin/cummax the same, any dtype, rank 2 or 3, whenever the elements after the axis
# numbered more than a vector (16 lanes here) and no multiple of it (17..31, 33..47, 100).  The
# scan over an outer axis walks each line in vectors; the last, partial one spans the start of
# the next line, which the first vector had already scanned, and its whole-vector stores wrote
# the unscanned values over it.  Now a partial vector's stores are masked to its own lanes.


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", ["cumsum", "cummin"])
@pytest.mark.parametrize("shape", [(2, 25), (2, 17), (3, 4, 5), (3, 9), (2, 3, 11)], ids=str)
def test_bug1_scan_along_an_outer_axis(backend, op, shape):
    x = (np.arange(int(np.prod(shape))) % 7 - 3).astype(np.int32)
    out = np.zeros_like(x)
    _scan_kernel(shape, 0, op, i32).run(dict(out=out, x=x), backend=backend)
    want = (np.cumsum if op == "cumsum" else np.minimum.accumulate)(x.reshape(shape), axis=0).reshape(-1)
    np.testing.assert_array_equal(out, want)


def test_bug1_f32_cumsum_along_axis_0_on_llvm():
    x = np.arange(1, 51, dtype=np.float32)
    out = np.zeros_like(x)
    _scan_kernel((2, 25), 0, "cumsum", f32).run(dict(out=out, x=x), backend="llvm")
    np.testing.assert_array_equal(out, np.cumsum(x.reshape(2, 25), axis=0).reshape(-1))


# -- bug 2 (fixed in accy/runtime/interpreter/tile_memory.py): the numpy backend crashed on a masked access -
# whose offsets have a huge stride.  Offsets i * s with s = 2**62 a run-time scalar and only
# i == 0 active: every masked-off offset is out of range (allowed: "its offset may be anything"),
# llvm and ptx read/write element 0 only, but the tile interpreter raised a bare OverflowError
# ("Python int too large to convert to C long") from its box plan (plan.boxes -> strided_view: the
# box's byte strides, stride * itemsize, did not fit a C long).  The box the mask leaves is one
# element long along that axis, so its step there is never taken: the plan now makes the step of
# an axis the box holds one element of 0 (a longer box with such a step sticks out of the buffer
# and goes element by element, as before).


def _huge_stride(kind):
    @accy.kernel(out=accy.dynamic_buffer(f32), x=accy.dynamic_buffer(f32), s=accy.scalar(accy.index))
    def huge_stride(k, p):
        @k.for_each_tile(grid=axis("m", 2), warps=1)
        def body(t, pid):
            i = t.arange(4) + pid["m"] * 4
            if kind == "load":
                p.out.store(i, p.x.load(i * p.s, mask=i == 0, other=5.0))
            else:
                p.out.store(i * p.s, t.full((4,), 1.0, f32), mask=i == 0)

    return huge_stride


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["load", "store"])
def test_bug2_masked_access_with_a_huge_stride(backend, kind):
    args = dict(out=np.zeros(8, np.float32), x=np.arange(8, dtype=np.float32), s=2**62)
    _huge_stride(kind).run(args, backend=backend)
    want = [0.0] + [5.0] * 7 if kind == "load" else [1.0] + [0.0] * 7
    np.testing.assert_array_equal(args["out"], want)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["load", "store"])
def test_bug2_masked_row_of_a_2d_access_with_a_huge_stride(backend, kind):
    # offsets (r - 2) * s + c + 3 * pid: the mask keeps row 2's first 3, every other row is wild
    @accy.kernel(out=accy.dynamic_buffer(f32), x=accy.dynamic_buffer(f32), s=accy.scalar(accy.index))
    def row(k, p):
        @k.for_each_tile(grid=axis("m", 3), warps=1)
        def body(t, pid):
            r, c = t.arange(3)[:, None], t.arange(4)[None, :]
            offsets, mask = (r - 2) * p.s + c + pid["m"] * 3, (r == 2) & (c < 3)
            if kind == "load":
                p.out.store(pid["m"] * 12 + r * 4 + c, p.x.load(offsets, mask=mask, other=-1.0))
            else:
                p.out.store(offsets, t.full((3, 4), 1.0, f32) + pid["m"].cast(f32), mask=mask)

    args = dict(out=np.zeros(36, np.float32), x=np.arange(36, dtype=np.float32), s=2**62)
    row.run(args, backend=backend)
    want = np.zeros(36, np.float32)
    if kind == "load":
        want = np.full((3, 3, 4), -1.0, np.float32)
        want[:, 2, :3] = np.arange(9).reshape(3, 3)
    else:
        want[:9] = np.repeat([1, 2, 3], 3)
    np.testing.assert_array_equal(args["out"], want.reshape(-1))


# -- bug 3 (fixed in accy/runtime/interpreter/tile_memory.py): the numpy backend applied a program-independent
# tile atomic once, not per program.  Three programs each atomic_add 1 at offsets arange(2) (the
# same in every program): h must be [3, 3] (every program's adds apply, as on llvm and ptx),
# numpy gave [1, 1]; with duplicates inside the tile (arange(4) // 2) it gave [2, 2] for [6, 6].
# The tile interpreter holds a value that is the same in every program once (a leading axis of
# 1), right for a load and a store, but its atomic took that as one program's update.  Now a
# tile atomic's offsets are broadcast over the programs first, so every program's elements
# apply, program by program as before.


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("duplicates", [False, True])
def test_bug3_program_independent_tile_atomic_applies_once_per_program(backend, duplicates):
    @accy.kernel(h=accy.dynamic_buffer(i32))
    def hist(k, p):
        @k.for_each_tile(grid=axis("m", 3), warps=1)
        def body(t, pid):
            where = t.arange(4) // 2 if duplicates else t.arange(2)
            p.h.atomic_add(where, t.full(where.shape, 1, i32))

    args = dict(h=np.zeros(3, np.int32))
    hist.run(args, backend=backend)
    np.testing.assert_array_equal(args["h"], [6, 6, 0] if duplicates else [3, 3, 0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_bug3_program_independent_masked_tile_atomic_in_a_fold(backend):
    # the same offsets, values and mask in every program and every trip: 6 programs x 2 trips
    @accy.kernel(h=accy.dynamic_buffer(i32))
    def hist(k, p):
        @k.for_each_tile(grid=(axis("m", 3), axis("n", 2)), warps=1)
        def body(t, pid):
            j = t.arange(4)

            def trip(t, r, acc):
                p.h.atomic_add(j // 2, j.cast(i32) + 1, mask=j != 1)
                return acc

            t.fold_range(0, 2, 1, t.zeros((4,), i32), trip)

    args = dict(h=np.zeros(2, np.int32))
    hist.run(args, backend=backend)
    np.testing.assert_array_equal(args["h"], [12, 84])


# -- bug 4 (fixed in accy/dsl/tiles.py): p.x.atomic_add at scalar indices in a tile program ----
# p.x.load and p.x.store take scalar indices in a tile program (one access per program), but
# p.x.atomic_add(0, 1) was a TraceError ("give a tile of indices").  Now it is one scalar
# atomic per program (returning the old value), masked by a scalar condition like a store.


@pytest.mark.parametrize("backend", BACKENDS)
def test_bug4_scalar_atomic_in_a_tile_program_runs_once_per_program(backend):
    @accy.kernel(h=accy.dynamic_buffer(i32), g=accy.tensor(f32, 2))
    def counts(k, p):
        @k.for_each_tile(grid=(axis("m", 3), axis("n", 2)), warps=4)
        def body(t, pid):
            p.h.atomic_add(0, 1)
            p.h.atomic_max(1, pid["m"].cast(i32) * 10, mask=pid["n"] == 1)
            p.h.atomic_add(2, 1, mask=pid["m"] == 0)
            p.g.atomic_add((pid["m"], pid["n"]), 2.5)  # a tensor (a reversed view) at scalar indices

    args = dict(h=np.zeros(3, np.int32), g=np.zeros((3, 2), np.float32)[::-1])
    counts.run(args, backend=backend)
    np.testing.assert_array_equal(args["h"], [6, 20, 2])
    np.testing.assert_array_equal(args["g"], np.full((3, 2), 2.5, np.float32))


# -- bug 5 (fixed in accy/runtime/interpreter/numerics.py): the numpy backend's f64 fma lost the sign of a --
# zero.  fma(-0.0, 2.0, -0.0) is -0.0 * 2.0 + -0.0 = -0.0 exactly (IEEE: a sum of two -0 is -0);
# llvm and ptx gave -0.0, numpy +0.0, in tile programs and SIMT kernels alike (f32, f16 and bf16
# were right).  _fma64 added the round-to-odd tail to the head: th = -0.0 + -0.0 = -0.0, then
# th + (+0.0) = +0.0.  It also took a product that underflows to zero (-2**-600 * 2**-600) for an
# exact one, so fma(-2**-600, 2**-600, +0.0) came out +0.0, not the -0.0 the exact -2**-1200
# rounds to.  Now such products take the exact (Fraction) path, which keeps a rounded value's
# sign, and an exact zero result is the plain a * b + c (the product is exact then: a zero, or
# -c), which has IEEE's sign.  Lanes: both addends -0 (-0), a cancellation (+0), +0 + +0, an
# underflowing product of either sign plus a zero of the other, a cancellation of tiny values.


def _fma64(level, n):
    """out = fma(a, b, c) on n f64 elements, in a tile program or a SIMT kernel."""
    params = {name: accy.dynamic_buffer(accy.f64) for name in ("out", "a", "b", "c")}
    if level == "tile":
        def body(k, p):
            @k.for_each_tile(grid=axis("m", 1), warps=1)
            def program(t, pid):
                i = t.arange(n)
                p.out.store(i, t.fma(p.a.load(i), p.b.load(i), p.c.load(i)))
    else:
        def body(k, p):
            @k.for_each_1d(axis("i", n))
            def each(inner, idx):
                i = idx["i"]
                p.out[i] = inner.fma(p.a[i], p.b[i], p.c[i])
    return accy.Program(f"fma64_{level}_{n}", params, body)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("level", ["tile", "simt"])
def test_bug5_f64_fma_of_negative_zeros(backend, level):
    tiny = 2.0**-600
    args = dict(out=np.full(8, 7.0), a=np.array([-0.0, -0.0, 1.0, -0.0, -tiny, tiny, 2.0**-500, tiny]),
                b=np.array([2.0, 0.0, -1.0, -2.0, tiny, tiny, -2.0**-470, -tiny]),
                c=np.array([-0.0, -0.0, 1.0, 0.0, 0.0, -0.0, 2.0**-970, -0.0]))
    _fma64(level, 8).run(args, backend=backend)
    np.testing.assert_array_equal(np.signbit(args["out"]), [True, True, False, False, True, False, False, True])
    np.testing.assert_array_equal(args["out"], 0.0)


# -- bug 6 (fixed in accy/codegen/nvptx/lowering.py): ptx shifted a 64-bit value by the count's low 32 bits
# 5 << n for index, i64 and u64 counts n = -2**63, 2**32, 2**32 + 1 (outside [0, 64): the rules
# give 0, docs/ir.md) gave 5 and 10 on ptx, and u64's 5 >> n too: the emitted PTX was `cvt.u32.u64`
# of the count then `shl.b64` (PTX clamps a 32-bit count to the width, but the truncation had
# dropped the high bits), the range check llvm.py's _shift makes having been folded into the
# clamping shift by the NVPTX back end.  (A signed >> kept its check, as a select of the count.)
# Every 32-bit type, numpy and llvm were right; tile programs and SIMT kernels alike (the tile
# distribution reuses the SIMT lowering).  Now the NVPTX lowering saturates a 64-bit count that
# is not a constant or an index known to fit 32 bits with an opaque `min.u64 n, 64` (inline PTX,
# which LLVM cannot drop) before the check: the truncation then keeps it, folded or not.


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("level", ["tile", "simt"])
@pytest.mark.parametrize("dtype", ["index", "i64", "u64"])
def test_bug6_64_bit_shift_by_a_count_past_32_bits(backend, level, dtype):
    dt = getattr(accy, dtype)
    params = {name: accy.dynamic_buffer(dt) for name in ("left", "right", "both", "a", "n")}
    if level == "tile":
        def body(k, p):
            @k.for_each_tile(grid=axis("m", 1), warps=1)
            def program(t, pid):
                i = t.arange(4)
                a, n = p.a.load(i), p.n.load(i)
                p.left.store(i, a << n)
                p.right.store(i, a >> n)
                p.both.store(i, (a << n) + (a >> n))
    else:
        def body(k, p):
            @k.for_each_1d(axis("i", 4))
            def each(inner, idx):
                i = idx["i"]
                a, n = p.a[i], p.n[i]
                p.left[i] = a << n
                p.right[i] = a >> n
                p.both[i] = (a << n) + (a >> n)
    program = accy.Program(f"wide_shift_{level}_{dtype}", params, body)
    args = dict(left=np.zeros(4, dt.numpy), right=np.zeros(4, dt.numpy), both=np.zeros(4, dt.numpy),
                a=np.full(4, 5, dt.numpy), n=np.array([-2**63, 2**32, 2**32 + 1, 3], np.int64).astype(dt.numpy))
    program.run(args, backend=backend)
    np.testing.assert_array_equal(args["left"], [0, 0, 0, 40])
    np.testing.assert_array_equal(args["right"], [0, 0, 0, 0])
    np.testing.assert_array_equal(args["both"], [0, 0, 0, 40])


def test_bug6_ptx_saturates_only_counts_that_may_pass_32_bits():
    # a loaded 64-bit count gets the min; a constant count and one known to be small do not
    params = {name: accy.dynamic_buffer(accy.index) for name in ("out", "a", "n")}

    def body(k, p):
        @k.for_each_1d(axis("i", 40))
        def each(inner, idx):
            i = idx["i"]
            p.out[i] = (p.a[i] << i) + (p.a[i] >> (i % 7)) + (p.a[i] << 3) + (p.a[i] << p.n[i])

    ptx = accy.Program("shift_counts", params, body).ptx()
    assert ptx.count("min.u64") == 1
    assert ptx.count("shl.b64") >= 3


# -- bug 7 (fixed in accy/runtime/interpreter/numerics.py): the numpy backend's f64 fma of finite factors ---
# whose product overflows and an infinite c was NaN.  fma(2**1000, 2**1000, -inf) is -inf (the
# exact product is finite, c decides); llvm and ptx gave -inf, numpy NaN: _fma64 sent every lane
# with a non-finite operand to the plain a * b + c, whose rounded product is +inf.  Now finite
# factors with an infinite or NaN c give c.  Found by checking _fma64 against a Fraction
# reference (the fuzzers' fma(a, b, a) cannot draw it).


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("level", ["tile", "simt"])
def test_bug7_f64_fma_of_an_overflowing_product_and_an_infinity(backend, level):
    big = 2.0**1000
    args = dict(out=np.zeros(4), a=np.array([big, -big, big, 2.0**1020]), b=np.array([big, big, big, 32.0]),
                c=np.array([-np.inf, np.inf, np.nan, -np.inf]))
    _fma64(level, 4).run(args, backend=backend)
    np.testing.assert_array_equal(args["out"], [-np.inf, np.inf, np.nan, -np.inf])


# -- bug 8 (fixed in accy/emulator/numerics.py): ptx's f64 fma of zero by a huge factor was NaN --
# fma(-2**1019, 0.0, 5.0) is 5.0 and fma(2**1019, -0.0, -0.0) is -0.0; numpy and llvm were right,
# ptx (the emulator's fma.rn.f64) gave NaN: fma_f64 took every zero product on its fast path, whose
# Dekker split of the other factor (2**27 + 1 times it) overflows past about 2**997.  Now a zero
# product's lanes are the plain a * b + c (exact, with IEEE's sign of a zero sum).  Found with bug 7.


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("level", ["tile", "simt"])
def test_bug8_f64_fma_of_zero_by_a_huge_factor(backend, level):
    args = dict(out=np.zeros(4), a=np.array([-2.0**1019, 2.0**1019, -0.0, 0.0]),
                b=np.array([0.0, -0.0, 2.0**1000, 2.0**1022]), c=np.array([5.0, -0.0, -0.0, 2.0**-1030]))
    _fma64(level, 4).run(args, backend=backend)
    np.testing.assert_array_equal(args["out"], [5.0, 0.0, 0.0, 2.0**-1030])
    np.testing.assert_array_equal(np.signbit(args["out"]), [False, True, True, False])
