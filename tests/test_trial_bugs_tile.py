"""Tile-level bugs found by outside trials of accy, each pinned by a small deterministic test."""

import numpy as np
import pytest

import accy
from accy import axis, i32, i64, u32
from accy.errors import ExecutionError

BACKENDS = ["numpy", "llvm", "ptx"]

# -- integer division of tiles loaded from a tensor ------------------------------------------------
# llvm's prepare pass (which checks a launch whole before it runs on the caller's arrays) skipped
# the loads of a tensor box (load_tile, or any masked load with a run-time stride) that lies
# wholly inside the tensor, "a whole tile needs no check", even where a division's check reads
# the loaded values: the divisor was read from an unwritten stack array and a false "remainder by
# zero" came out (reliably from 15 elements on, here).


def _divide(shape, dtype):
    @accy.kernel(q=accy.tensor(dtype, 2), r=accy.tensor(dtype, 2), x=accy.tensor(dtype, 2), y=accy.tensor(dtype, 2))
    def divide(k, p):
        @k.for_each_tile(grid=axis("m", 1), warps=1)
        def body(t, pid):
            a = p.x.load_tile((0, 0), shape)
            b = p.y.load_tile((0, 0), shape, other=1)
            p.q.store_tile((0, 0), a // b)
            p.r.store_tile((0, 0), a % b)

    return divide


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [i32, u32, i64], ids=str)
@pytest.mark.parametrize("shape", [(1, 15), (1, 16), (1, 17), (4, 16), (1, 1000), (4, 5)], ids=str)
def test_integer_division_of_a_tensor_box_has_no_false_zero(backend, dtype, shape):
    n = int(np.prod(shape))
    x = (np.arange(n) * 37 - 500).astype(dtype.numpy).reshape(shape)  # negative dividends where signed
    y = (np.arange(n) % 7 + 1).astype(dtype.numpy).reshape(shape)
    if not dtype.is_unsigned:
        y[:, ::3] *= -1
    q, r = np.zeros_like(x), np.zeros_like(x)
    _divide(shape, dtype).run(dict(q=q, r=r, x=x, y=y), backend=backend)
    np.testing.assert_array_equal(q, x // y)
    np.testing.assert_array_equal(r, x % y)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [i32, u32, i64], ids=str)
@pytest.mark.parametrize("shape", [(1, 15), (1, 16), (4, 16)], ids=str)
def test_a_zero_divisor_in_a_tensor_box_is_still_reported(backend, dtype, shape):
    n = int(np.prod(shape))
    x = np.arange(n).astype(dtype.numpy).reshape(shape)
    y = np.ones(shape, dtype.numpy)
    y[-1, -2] = 0
    q, r = np.zeros_like(x), np.zeros_like(x)
    with pytest.raises(ExecutionError, match=r"(div: .* division|mod: .* remainder) by zero in program m=0"):
        _divide(shape, dtype).run(dict(q=q, r=r, x=x, y=y), backend=backend)
    assert not q.any() and not r.any()  # a failing launch writes nothing


# -- a masked load's default `other` -----------------------------------------------------------------
# `other` defaulted to the Python int 0, an index constant, so a masked load of a bool parameter
# without `other` was refused ("other is index, but 'x' holds bool"); it is now a zero of the
# parameter's own dtype: False for bool.


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", ["load", "load_tile"])
def test_a_masked_bool_load_reads_false_where_masked_off(backend, how):
    @accy.kernel(out=accy.tensor(accy.boolean, 1), x=accy.tensor(accy.boolean, 1), n=accy.scalar(accy.index))
    def masked_bool(k, p):
        @k.for_each_tile(grid=axis("m", 1), warps=1)
        def body(t, pid):
            i = t.arange(32)
            v = p.x.load(i, mask=i < p.n) if how == "load" else p.x.load_tile((0,), (32,))
            p.out.store(i, v)

    x = np.ones(32 if how == "load" else 20, bool)  # load_tile masks past the tensor's edge, at 20
    out = np.ones(32, bool)
    masked_bool.run(dict(out=out, x=x, n=20), backend=backend)
    np.testing.assert_array_equal(out, np.arange(32) < 20)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [accy.u8, i32, accy.f16, accy.f32], ids=str)
def test_a_masked_load_reads_a_zero_of_its_dtype_by_default(backend, dtype):
    @accy.kernel(out=accy.dynamic_buffer(dtype), x=accy.dynamic_buffer(dtype))
    def masked(k, p):
        @k.for_each_tile(grid=axis("m", 1), warps=1)
        def body(t, pid):
            i = t.arange(16)
            p.out.store(i, p.x.load(i, mask=i % 2 == 0))

    x = np.arange(1, 17).astype(dtype.numpy)
    out = np.ones(16, dtype.numpy)
    masked.run(dict(out=out, x=x), backend=backend)
    np.testing.assert_array_equal(out, np.where(np.arange(16) % 2 == 0, x, 0).astype(dtype.numpy))


# -- an enclosing body's builder used inside a fold_range body ---------------------------------------
# `t.where(...)` with the program's `t` inside `def step(inner, i, acc)` recorded into the program's
# block, where the fold body's values are not visible: "defined inside another region ... return it
# from that body", which did not apply.  (And an op whose operands all came from outside, such as an
# atomic, was recorded once before the loop instead of once a trip.)  An enclosing body's builder
# now records into the innermost body being traced, as that body's own builder would.


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_programs_builder_works_inside_a_fold_body(backend):
    @accy.kernel(out=accy.dynamic_buffer(accy.f32), x=accy.dynamic_buffer(accy.f32))
    def outer_where(k, p):
        @k.for_each_tile(grid=axis("m", 1), warps=1)
        def body(t, pid):
            i = t.arange(16)
            x = p.x.load(i)

            def trip(inner, j, acc):
                def twice(inner2, m, acc2):  # a fold opened with the program's builder, two bodies in
                    return acc2 + t.where(x > 0, x, 0.0)

                acc = t.fold_range(0, 2, 1, acc, twice)
                return acc + t.where(acc > 4.0, 1.0, 0.0)

            p.out.store(i, t.fold_range(0, 3, 1, t.zeros((16,), accy.f32), trip))

    x = (np.arange(16) - 8).astype(np.float32)
    out = np.zeros(16, np.float32)
    outer_where.run(dict(out=out, x=x), backend=backend)
    want = np.zeros(16, np.float32)
    for _ in range(3):
        want = want + 2 * np.maximum(x, 0)
        want = want + (want > 4)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_launch_bodys_builder_works_inside_a_simt_fold_body(backend):
    @accy.kernel(out=accy.dynamic_buffer(accy.f32), count=accy.dynamic_buffer(i32), x=accy.dynamic_buffer(accy.f32))
    def outer_select(k, p):
        @k.for_each_1d(axis("i", 8))
        def each(inner, idx):
            i = idx["i"]
            x = p.x[i]

            def trip(inner2, j, acc):
                inner.atomic_add(p.count, i, np.int32(1))  # every trip, not once before the loop
                return acc + inner.select(acc > x, 1.0, 2.0)

            p.out[i] = inner.fold_range(0, 4, 1, 0.0, trip)

    x = np.arange(8, dtype=np.float32)
    out, count = np.zeros(8, np.float32), np.zeros(8, np.int32)
    outer_select.run(dict(out=out, count=count, x=x), backend=backend)
    want = np.zeros(8, np.float32)
    for _ in range(4):
        want = want + np.where(want > x, 1.0, 2.0)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(count, np.full(8, 4))


def test_an_enclosing_builder_inside_a_loop_still_obeys_the_block_rules():
    def kernel(what):
        @accy.kernel(out=accy.dynamic_buffer(accy.f32), n=accy.scalar(accy.index))
        def block_rules(k, p):
            @k.for_each_block(grid=axis("b", 1), threads=axis("t", 32))
            def body(inner, block, thread):
                def trip(inner2, j):
                    if what == "barrier":
                        inner.barrier()
                    else:
                        inner.shared(accy.f32, 32)

                inner.for_range(0, thread["t"] if what == "barrier" else 2, 1, trip)

        return block_rules

    with pytest.raises(accy.errors.TraceError, match="barrier inside a fold_range whose bounds depend on the thread"):
        kernel("barrier").graph
    with pytest.raises(accy.errors.TraceError, match="shared arrays are allocated at the top of the block body"):
        kernel("shared").graph


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_enclosing_builders_op_of_outer_values_runs_every_trip(backend):
    @accy.kernel(count=accy.dynamic_buffer(i32))
    def every_trip(k, p):
        @k.for_each_1d(axis("i", 4))
        def each(inner, idx):  # was silently recorded once, before the loop
            inner.for_range(0, 3, 1, lambda inner2, j: inner.atomic_add(p.count, idx["i"], np.int32(1)))

    count = np.zeros(4, np.int32)
    every_trip.run(dict(count=count), backend=backend)
    np.testing.assert_array_equal(count, [3, 3, 3, 3])


# -- a Python `if` on a traced value in a tile program ------------------------------------------------
# The message suggested select and if_ (the SIMT level's answers); a tile program chooses element by
# element with t.where.


def test_a_python_if_in_a_tile_program_suggests_t_where():
    @accy.kernel(out=accy.dynamic_buffer(accy.f32), x=accy.dynamic_buffer(accy.f32))
    def python_if(k, p):
        @k.for_each_tile(grid=axis("m", 1), warps=1)
        def body(t, pid):
            i = t.arange(16)
            x = p.x.load(i)
            p.out.store(i, x if x > 0 else -x)

    with pytest.raises(accy.errors.TraceError) as caught:
        python_if.graph
    message = str(caught.value)
    assert "Use t.where(cond, a, b)" in message and "t.maximum(a, b)" in message
    assert "select(" not in message and "if_(" not in message


def test_a_python_if_in_a_simt_kernel_still_suggests_select_and_if_():
    @accy.kernel(out=accy.dynamic_buffer(accy.f32), x=accy.dynamic_buffer(accy.f32))
    def python_if(k, p):
        @k.for_each_1d(axis("i", 16))
        def each(inner, idx):
            x = p.x[idx["i"]]
            p.out[idx["i"]] = x if x > 0 else -x

    with pytest.raises(accy.errors.TraceError, match=r"Use select\(cond, a, b\) or if_\(cond, then, otherwise\) for a "
                                                     r"choice .* use inner\.max\(a, b\)"):
        python_if.graph


# -- check_memory on a tile launch -------------------------------------------------------------------
# numpy's check_memory=True was taken on a for_each_tile kernel and checked nothing (the memory
# checks are the SIMT interpreter's).  It is refused now, pointing to the ptx backend, whose
# emulator checks every launch for races.


def _racy_tile_kernel():
    @accy.kernel(out=accy.dynamic_buffer(accy.f32), x=accy.dynamic_buffer(accy.f32))
    def racy(k, p):
        @k.for_each_tile(grid=axis("m", 2), warps=1)
        def body(t, pid):
            i = t.arange(16)
            p.out.store(i, p.x.load(i + pid["m"] * 16))  # both programs write out[0:16]

    return racy


def test_check_memory_on_a_tile_launch_is_refused_and_points_to_ptx():
    x, out = np.arange(32, dtype=np.float32), np.zeros(16, np.float32)
    with pytest.raises(accy.errors.ArgumentError, match=r"check_memory=True checks SIMT launches .* backend='ptx'"):
        _racy_tile_kernel().run(dict(out=out, x=x), backend="numpy", check_memory=True)
    assert not out.any()
    _racy_tile_kernel().run(dict(out=out, x=x), backend="numpy", check_memory=False)  # no check asked for
    with pytest.raises(accy.errors.RaceError, match="between threads of different blocks"):
        _racy_tile_kernel().run(dict(out=np.zeros(16, np.float32), x=x), backend="ptx")
