"""The numpy backend's tile interpreter (accy/runtime/interpreter/tiles.py): every kernel of
tests/tile_kernels.py against its independent NumPy reference, tf32 rounding bit for bit,
and the errors a tile launch raises (naming the buffer, the index, the program and the line)
with its outputs untouched."""

from __future__ import annotations

import numpy as np
import pytest

import accy
from accy import axis, cdiv, f16, f32, i8, i32, index
from accy.runtime.interpreter import tiles as tile_interpreter
from accy.dsl.ops import SIMT_OPS, TILE_OPS
from accy.errors import ArgumentError, ExecutionError, OutOfBoundsError

from tile_kernels import CASES, CASES_BY_NAME, ieee_max, ieee_min, make_matmul, run_case, tf32_reference


@pytest.mark.parametrize("case", CASES, ids=str)
def test_kernel_matches_numpy(case):
    run_case(case, "numpy", np.random.default_rng(18))


def test_every_tile_op_and_every_scalar_op_a_program_may_hold_is_implemented():
    threads_only = {"for_each", "for_each_block", "shared", "barrier", "shuffle"}
    assert tile_interpreter.IMPLEMENTED == TILE_OPS | (SIMT_OPS - threads_only)


def test_tf32_rounding_is_bit_exact():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    low = bits & np.uint32(0xFFFFE000)
    # every tie, both sides of it, each sign, subnormals, the largest finite values, inf and NaN
    special = np.concatenate([low | np.uint32(0x1000), low | np.uint32(0x0FFF), low | np.uint32(0x1001),
                              np.array([0x7F7FFFFF, 0xFF7FFFFF, 0x7F7FEFFF, 0x00001000, 0x80001000, 0x00000FFF,
                                        0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0, 0x80000000], np.uint32)])
    x = np.concatenate([bits, special]).view(np.float32)
    got, want = tile_interpreter.round_to_tf32(x), tf32_reference(x)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan])
    assert np.array_equal(got.view(np.uint32)[nan], x.view(np.uint32)[nan])  # NaN unchanged, payload too
    assert got[x.view(np.uint32) == 0x7F7FFFFF][0] == np.inf  # the largest finite rounds away, to inf


# -- errors ---------------------------------------------------------------------------------


def _faulty(access: str):
    """A 4x2 grid where program m=3 n=1 makes an access past the end of its buffer, after every
    program stored to ``out``."""

    @accy.kernel(out=accy.dynamic_buffer(f32), hist=accy.dynamic_buffer(i32), x=accy.dynamic_buffer(f32),
                 d=accy.scalar(index))
    def faulty(k, p):
        @k.for_each_tile(grid=(axis("m", 4), axis("n", 2)))
        def body(t, pid):
            program = pid["n"] * 4 + pid["m"]
            offsets = program * 16 + t.arange(16)
            p.out.store(offsets, t.full((16,), 1.0, f32))
            bad = offsets + ((pid["m"] == 3) & (pid["n"] == 1)).cast(index) * 1000
            if access == "load":
                p.out.store(offsets, p.x.load(bad))
            elif access == "store":
                p.out.store(bad, t.full((16,), 2.0, f32))
            elif access == "atomic":
                p.hist.atomic_add(bad, 1)
            elif access == "scalar store":
                where = program * 16 + ((pid["m"] == 3) & (pid["n"] == 1)).cast(index) * 1000
                p.out[where] = t.sum(p.x.load(offsets))  # a scalar store, once per program
            elif access == "division":
                p.out.store(offsets, (offsets // (offsets * 0 + p.d)).cast(f32))

    return faulty


@pytest.mark.parametrize("access, verb, buffer, index", [
    ("load", "load from", "x", 1112), ("store", "store to", "out", 1112), ("atomic", "atomic_add on", "hist", 1112),
    ("scalar store", "store to", "out", 1112)])
def test_an_access_out_of_bounds_names_buffer_index_program_and_line_and_writes_nothing(access, verb, buffer, index):
    out, hist, x = np.full(128, -7.0, np.float32), np.zeros(128, np.int32), np.arange(128, dtype=np.float32)
    with pytest.raises(OutOfBoundsError) as info:
        _faulty(access).run(dict(out=out, hist=hist, x=x, d=1))
    message = str(info.value)
    assert f"{verb} '{buffer}': index {index} is out of bounds for 128 elements (program m=3 n=1)" in message
    assert "test_tile_interpreter.py:" in message and "nothing was written" in message
    assert (out == -7.0).all() and (hist == 0).all()  # the stores before the fault were not committed


def test_integer_division_by_zero_names_the_program():
    out = np.full(128, -7.0, np.float32)
    with pytest.raises(ExecutionError, match=r"division by zero in program m=0 n=0 at .*test_tile_interpreter.py"):
        _faulty("division").run(dict(out=out, hist=np.zeros(128, np.int32), x=np.zeros(128, np.float32), d=0))
    assert (out == -7.0).all()


def test_masked_off_offsets_outside_the_buffer_are_never_read_or_written():
    @accy.kernel(out=accy.dynamic_buffer(f32), x=accy.dynamic_buffer(f32), n=accy.scalar(index))
    def shifted(k, p):
        @k.for_each_tile(grid=axis("i", 2))
        def body(t, pid):
            i = pid["i"] * 64 - 10 + t.arange(64)  # from -10: past both ends
            inside = (i >= 0) & (i < p.n)
            p.out.store(i, p.x.load(i, mask=inside, other=-1.0) + 1.0, mask=inside)

    out, x = np.zeros(100, np.float32), np.arange(100, dtype=np.float32)
    shifted.run(dict(out=out, x=x, n=100))
    np.testing.assert_array_equal(out, x + 1)


def test_an_empty_grid_runs_nothing():
    case = next(c for c in CASES if c.name == "elementwise")
    out = np.full(4, 3.0, np.float32)
    case.program.run(dict(out=out, half=np.zeros(4, np.float16), x=np.zeros(4, np.float32),
                          r=np.zeros(4, np.float32), c=np.zeros(1, np.float32), M=0, N=4))
    assert (out == 3.0).all()


def test_debug_thread_is_refused_for_programs():
    case = next(c for c in CASES if c.name == "scalar_stores")
    with pytest.raises(ArgumentError, match="for_each_tile kernel has programs, not threads"):
        case.program.run(dict(sums=np.zeros(12, np.float32), count=np.zeros(1, np.int32),
                              x=np.zeros(12 * 64, np.float32)), debug_thread={"m": 0, "n": 0})


def test_a_fold_yielding_a_lazily_held_index_tile_sees_each_iteration():
    # the yielded offsets are an Affine tile made anew each iteration: the previous
    # iteration's evaluation of it must not be read back
    @accy.kernel(out=accy.dynamic_buffer(index))
    def last_offsets(k, p):
        @k.for_each_tile(grid=axis("i", 2))
        def body(t, pid):
            r = t.fold_range(0, 3, 1, t.zeros((4,), index), lambda t, i, c: pid["i"] * 10 + i + t.arange(4))
            p.out.store(pid["i"] * 4 + t.arange(4), r)

    out = np.zeros(8, np.int64)
    last_offsets.run(dict(out=out))
    np.testing.assert_array_equal(out, [2, 3, 4, 5, 12, 13, 14, 15])


# -- folds whose trips run at once ----------------------------------------------------------------

counts = tile_interpreter.fold_counts


@pytest.fixture(autouse=True)
def _fresh_fold_counts():
    counts.reset()


def _chunk_cap(program, programs: int, trips: int) -> int:
    """A memory cap that makes the program's one vectorisable fold run ``trips`` trips per chunk."""
    (plan,) = tile_interpreter._fold_plans_of(program.graph).values()
    return trips * programs * plan.trip_bytes


@pytest.mark.parametrize("name", [c.name for c in CASES if c.name.startswith("dot_") and c.name != "dot_tf32_exact"])
def test_a_dot_fold_runs_every_trip_at_once(name):
    # K = 39 in steps of 16: three trips, the last one partly masked; i8 and u8 wrap in i32
    run_case(CASES_BY_NAME[name], "numpy", np.random.default_rng(5))
    assert (counts.vectorised, counts.looped, counts.rerun) == (1, 0, 0)


def test_an_i8_dot_fold_wraps_exactly_as_the_loop_does():
    program = make_matmul(i8, i32, bm=16, bn=16, bk=8)
    rng = np.random.default_rng(2)
    M, N, K = 21, 19, 45  # six trips, the last one of five
    a = rng.integers(-128, 128, (M, K)).astype(np.int8)
    b = rng.integers(-128, 128, (K, N)).astype(np.int8)
    c = rng.integers(2**31 - 2**15, 2**31, (M, N)).astype(np.int32)  # the sums wrap past the top
    want = (c.astype(np.int64) + a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)
    results = []
    for cap in (None, 1, _chunk_cap(program, 4, 4)):  # every trip at once; trip by trip; 4 then 2
        out = c.reshape(-1).copy()
        program.run(dict(c=out, a=a.reshape(-1), b=b.reshape(-1), M=M, N=N, K=K),
                    **({} if cap is None else {"memory_cap": cap}))
        results.append(out)
        np.testing.assert_array_equal(out.reshape(M, N), want)
    assert counts.vectorised == 2 and counts.looped == 1


def _combining_fold(bn: int = 16):
    """Per program (a row block): the columnwise max and min of x's rows, trip by trip, and a
    running sum of each trip's whole sum (a scalar carry), carried in one fold."""

    @accy.kernel(hi=accy.dynamic_buffer(f32), lo=accy.dynamic_buffer(f32), total=accy.dynamic_buffer(f32),
                 x=accy.dynamic_buffer(f32), M=accy.scalar(index), N=accy.scalar(index))
    def combining(k, p):
        @k.for_each_tile(grid=axis("j", cdiv(p.N, bn)))
        def body(t, pid):
            cols = pid["j"] * bn + t.arange(bn)

            def step(t, r, carry):
                hi, lo, total = carry
                rows = r + t.arange(4)
                inside = (rows[:, None] < p.M) & (cols[None, :] < p.N)
                x = p.x.load(rows[:, None] * p.N + cols[None, :], mask=inside, other=float("nan"))
                x = t.where(inside, x, -0.0)  # masked-off: a zero of the sign that loses a max to +0.0
                return t.maximum(hi, t.max(x, axis=0)), t.minimum(t.min(x, axis=0), lo), total + t.sum(x)

            init = (t.full((bn,), float("-inf"), f32), t.full((bn,), float("inf"), f32), t.constant(0.0, f32))
            hi, lo, total = t.fold_range(0, p.M, 4, init, step)
            p.hi.store(cols, hi, mask=cols < p.N)
            p.lo.store(cols, lo, mask=cols < p.N)
            p.total[pid["j"]] = total

    return combining


def test_a_max_min_and_sum_fold_runs_every_trip_at_once_and_matches_the_loop_bit_for_bit():
    rng = np.random.default_rng(4)
    M, N = 43, 37  # 11 trips, the last of 3 rows; 3 programs, the last of 5 columns
    x = rng.standard_normal((M, N)).astype(np.float32)
    x[5, 3], x[17, 9] = np.nan, np.nan  # NaN propagates through max and min
    x[:, 12] = np.where(rng.random(M) < 0.5, 0.0, -0.0).astype(np.float32)  # signed zeros: -0.0 < +0.0
    x[:, 13] = -0.0
    program = _combining_fold()
    results = []
    for cap in (None, 1, _chunk_cap(program, 3, 3)):  # every trip at once; trip by trip; chunks of 3 trips
        out = dict(hi=np.zeros(N, np.float32), lo=np.zeros(N, np.float32), total=np.zeros(3, np.float32))
        program.run(dict(**out, x=x.reshape(-1), M=M, N=N), **({} if cap is None else {"memory_cap": cap}))
        results.append(out)
    assert counts.vectorised == 2 and counts.looped == 1
    rows = np.concatenate([x, np.full((1, N), -0.0, np.float32)])  # the last trip's masked-off rows add -0.0
    for name, want in (("hi", ieee_max(rows, axis=0)), ("lo", ieee_min(x, axis=0))):
        got = results[0][name]
        assert np.array_equal(np.isnan(got), np.isnan(want)), name
        np.testing.assert_array_equal(np.signbit(got[~np.isnan(want)]), np.signbit(want[~np.isnan(want)]))
        np.testing.assert_array_equal(got, want.astype(np.float32))
    for vectorised in (results[0], results[2]):  # the same sums, rounded in the same order
        for name in ("hi", "lo", "total"):
            np.testing.assert_array_equal(vectorised[name].view(np.uint32), results[1][name].view(np.uint32))


def _late_fault():
    """A fold over 8 trips of 4x2 programs whose loads go past x's end: ``x`` in program m=3 n=1
    at trip 6 and m=0 n=0 at trip 7; ``y`` (a later load of the body) in program m=1 n=0 at trip
    ``y_trip``; every program stores to ``out`` before the fold."""

    # fp_fusion off: acc + a * b stays a sum of terms, which the interpreter runs for every trip at
    # once (fused, fma(a, b, acc) is a chain it runs trip by trip)
    @accy.kernel(out=accy.dynamic_buffer(f32), x=accy.dynamic_buffer(f32), y=accy.dynamic_buffer(f32),
                 y_trip=accy.scalar(index), fp_fusion=False)
    def late_fault(k, p):
        @k.for_each_tile(grid=(axis("m", 4), axis("n", 2)))
        def body(t, pid):
            program = pid["n"] * 4 + pid["m"]
            p.out.store(program * 16 + t.arange(16), t.full((16,), 1.0, f32))

            def step(t, i, acc):
                late = ((pid["m"] == 3) & (pid["n"] == 1) & (i == 6)) | ((program == 0) & (i == 7))
                a = p.x.load(i * 16 + t.arange(16) + late.cast(index) * 1000)
                wrong = (pid["m"] == 1) & (pid["n"] == 0) & (i == p.y_trip)
                b = p.y.load(i * 16 + t.arange(16) + wrong.cast(index) * 2000)
                return acc + a * b

            acc = t.fold_range(0, 8, 1, t.zeros((16,), f32), step)
            p.out.store(program * 16 + t.arange(16), acc)

    return late_fault


@pytest.mark.parametrize("y_trip, buffer, index, program", [
    (99, "x", 1096, "m=3 n=1"),  # x fails first: at trip 6, in m=3 n=1 (not m=0 n=0, whose fault is at trip 7)
    (3, "y", 2048, "m=1 n=0"),  # y, read after x in the body, fails at an earlier trip: its error comes out
])
def test_a_fault_in_a_late_trip_of_a_vectorised_fold_names_the_first_failing_program_and_writes_nothing(
        y_trip, buffer, index, program):
    out = np.full(128, -7.0, np.float32)
    x, y = np.ones(128, np.float32), np.ones(128, np.float32)
    with pytest.raises(OutOfBoundsError) as info:
        _late_fault().run(dict(out=out, x=x, y=y, y_trip=y_trip))
    message = str(info.value)
    assert f"load from '{buffer}': index {index} is out of bounds for 128 elements (program {program})" in message
    assert "test_tile_interpreter.py:" in message and "nothing was written" in message
    assert (out == -7.0).all()
    assert counts.vectorised == 1 and counts.rerun == 1  # all trips at once, then trip by trip for the error


def test_a_fold_whose_body_stores_or_reads_its_carry_elsewhere_loops():
    @accy.kernel(out=accy.dynamic_buffer(f32), x=accy.dynamic_buffer(f32))
    def loops(k, p):
        @k.for_each_tile(grid=axis("i", 2))
        def body(t, pid):
            e = pid["i"] * 8 + t.arange(8)

            def stores(t, j, acc):
                p.out.store(e, acc)
                return acc + p.x.load(j * 16 + e)

            def reads(t, j, acc):
                return acc + p.x.load(j * 16 + e) * t.max(acc)  # the term depends on the carry

            a = t.fold_range(0, 4, 1, t.zeros((8,), f32), stores)
            b = t.fold_range(0, 4, 1, t.zeros((8,), f32), reads)
            p.out.store(e, a + b)

    x = np.arange(64, dtype=np.float32)
    out = np.zeros(16, np.float32)
    loops.run(dict(out=out, x=x))
    assert counts.vectorised == 0 and counts.looped == 2
    a = x.reshape(4, 16).sum(axis=0)
    b = np.zeros(16)
    for j in range(4):
        b = b + x.reshape(4, 16)[j] * np.concatenate([b[:8].max(initial=0) * np.ones(8), b[8:].max() * np.ones(8)])
    np.testing.assert_array_equal(out, (a + b).astype(np.float32))
