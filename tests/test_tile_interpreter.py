"""The numpy backend's tile interpreter (accy/backends/tile_interpreter.py): every kernel of
tests/tile_kernels.py against its independent NumPy reference, tf32 rounding bit for bit,
and the errors a tile launch raises (naming the buffer, the index, the program and the line)
with its outputs untouched."""

from __future__ import annotations

import numpy as np
import pytest

import accy
from accy import axis, f32, i32, index
from accy.backends import tile_interpreter
from accy.dsl.ops import SIMT_OPS, TILE_OPS
from accy.errors import ArgumentError, ExecutionError, OutOfBoundsError

from tile_kernels import CASES, run_case, tf32_reference


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
