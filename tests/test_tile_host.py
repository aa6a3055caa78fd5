"""The llvm backend's native tile path (accy/codegen/host/tiles.py, tile_access.py): every kernel
of tests/tile_kernels.py against its NumPy reference on llvm, the access paths (whole tiles,
masked edges, run-time strides, strided gathers, gathers by an index tile), the checks (bounds
and division errors name the buffer, index, program and line, and nothing is written, whether
prepare's check-only pass or the scratch run finds them), the grouped program order, and what
the access analysis reads off the graph (so the fast paths cannot quietly turn off)."""

from __future__ import annotations

import numpy as np
import pytest

import accy
from accy import axis, bf16, cdiv, f16, f32, i32, index
from accy.codegen.machine import host_kernel
from accy.targets import Target
from accy.lowering.tile_access import plan_accesses
from accy.codegen.host.tiles import TileHostLowering
from accy.errors import ExecutionError, OutOfBoundsError

from tile_kernels import CASES, run_case
from test_tile_interpreter import _faulty


@pytest.mark.parametrize("case", CASES, ids=str)
def test_kernel_matches_numpy_on_llvm(case):
    run_case(case, "llvm", np.random.default_rng(18))


@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("reductions", "scans", "dot_f32", "masked_edges")],
                         ids=str)
def test_kernel_matches_numpy_on_llvm_without_checks(case):
    run_case(case, "llvm", np.random.default_rng(5), checks=False)


# -- matmul at odd sizes: edge tiles and whole tiles ---------------------------------------------


def make_matmul(dtype, bm=64, bn=64, bk=32):
    @accy.kernel(f"host_mm_{dtype}_{bm}_{bn}_{bk}", c=accy.dynamic_buffer(f32), a=accy.dynamic_buffer(dtype),
                 b=accy.dynamic_buffer(dtype), M=accy.scalar(index), N=accy.scalar(index), K=accy.scalar(index))
    def mm(k, p):
        M, N, K = p.M, p.N, p.K

        @k.for_each_tile(grid=(axis("m", cdiv(M, bm)), axis("n", cdiv(N, bn))))
        def body(t, pid):
            rm = pid["m"] * bm + t.arange(bm)
            rn = pid["n"] * bn + t.arange(bn)

            def step(t, k0, acc):
                rk = k0 + t.arange(bk)
                a = p.a.load(rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K))
                b = p.b.load(rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N))
                return t.dot(a, b, acc)

            acc = t.fold_range(0, K, bk, t.zeros((bm, bn), f32), step)
            p.c.store(rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))

    return mm


@pytest.mark.parametrize("dtype", [f32, bf16, f16], ids=str)
def test_matmul_at_odd_sizes_within_the_dot_bound(dtype):
    M, N, K = 333, 517, 129
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K)).astype(dtype.numpy)
    b = rng.standard_normal((K, N)).astype(dtype.numpy)
    c = np.full(M * N, np.nan, np.float32)
    make_matmul(dtype).run([c, a.ravel(), b.ravel(), M, N, K], backend="llvm")
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    u = 2.0**-24
    bound = K * u / (1 - K * u) * (np.abs(a64) @ np.abs(b64))
    assert (np.abs(c.reshape(M, N) - a64 @ b64) <= bound).all()


def test_matmul_of_whole_tiles_only_and_a_tile_smaller_than_the_micro_kernel():
    rng = np.random.default_rng(1)
    for (M, N, K), tiles in (((128, 128, 64), (64, 64, 32)), ((5, 3, 7), (4, 2, 8))):
        a = rng.standard_normal((M, K), dtype=np.float32)
        b = rng.standard_normal((K, N), dtype=np.float32)
        c = np.full(M * N, np.nan, np.float32)
        make_matmul(f32, *tiles).run([c, a.ravel(), b.ravel(), M, N, K], backend="llvm")
        np.testing.assert_allclose(c.reshape(M, N), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)


# -- the access paths --------------------------------------------------------------------------------


@accy.kernel(out=accy.dynamic_buffer(f32), x=accy.dynamic_buffer(f32), idx=accy.dynamic_buffer(index),
             R=accy.scalar(index), C=accy.scalar(index), mode=accy.scalar(index))
def access_paths(k, p):
    """out[r, c] = x[r, c] read four ways: rows of consecutive elements, a column walk (x^T's
    rows: a strided gather), through an index tile, and with a mask that is no box."""

    @k.for_each_tile(grid=(axis("r", cdiv(p.R, 8)), axis("c", cdiv(p.C, 16))))
    def body(t, pid):
        r = pid["r"] * 8 + t.arange(8)
        c = pid["c"] * 16 + t.arange(16)
        inside = (r[:, None] < p.R) & (c[None, :] < p.C)
        flat = r[:, None] * p.C + c[None, :]
        rows = p.x.load(flat, mask=inside)
        columns = t.trans(p.x.load(c[:, None] + r[None, :] * p.C, mask=(c[:, None] < p.C) & (r[None, :] < p.R)))
        gathered = p.x.load(p.idx.load(flat, mask=inside, other=0), mask=inside)
        odd = inside & ((c[None, :] % 2) == 1)  # every other column: not a box
        sparse = p.x.load(flat, mask=odd, other=0.0) + p.x.load(flat, mask=inside & ~odd, other=0.0)
        value = t.where(p.mode == 0, rows, t.where(p.mode == 1, columns, t.where(p.mode == 2, gathered, sparse)))
        p.out.store(flat, value, mask=inside)


def test_each_access_path_reads_the_same_elements():
    R, C = 19, 37
    x = np.random.default_rng(2).standard_normal(R * C, dtype=np.float32)
    for mode in range(4):
        out = np.full(R * C, np.nan, np.float32)
        access_paths.run(dict(out=out, x=x, idx=np.arange(R * C), R=R, C=C, mode=mode), backend="llvm")
        np.testing.assert_array_equal(out, x, err_msg=f"mode {mode}")


def test_the_analysis_finds_affine_offsets_unit_strides_and_boxes():
    plans = plan_accesses(access_paths.graph.launch_op.regions[0])
    forms = [(plan.offsets is not None, plan.contiguous, plan.box is not None) for plan in plans.values()]
    # rows, columns, the index load, its gather, the two halves of the sparse read, the store
    assert forms == [(True, True, True), (True, False, True), (True, True, True), (False, False, False),
                     (True, True, False), (True, True, False), (True, True, True)]


def test_index_tiles_only_accesses_read_are_never_built():
    lowering = TileHostLowering(make_matmul(f32).graph, Target.host(), 16)
    built = {str(v.type) for v in lowering.live.values if isinstance(v.type, accy.dsl.types.TileType)}
    assert built == {"tile<f32, 64x32>", "tile<f32, 32x64>", "tile<f32, 64x64>"}
    lowering._mode(check_only=True)  # the check-only pass builds no tile at all: no dot, no loads
    assert not [v for v in lowering.live.values if isinstance(v.type, accy.dsl.types.TileType)]


def test_a_tensor_view_with_a_step_takes_the_strided_path_and_a_contiguous_one_the_vector_path():
    @accy.kernel(y=accy.tensor(f32, 2), x=accy.tensor(f32, 2))
    def copy2d(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=(axis("r", cdiv(R, 4)), axis("c", cdiv(C, 32))))
        def body(t, pid):
            p.y.store_tile((pid["r"] * 4, pid["c"] * 32), p.x.load_tile((pid["r"] * 4, pid["c"] * 32), (4, 32)) * 2.0)

    big = np.random.default_rng(3).standard_normal((9, 2 * 45), dtype=np.float32)
    for x in (np.ascontiguousarray(big[:, :45]), big[:, ::2], big[:, ::-2]):
        y = np.full(x.shape, np.nan, np.float32)
        copy2d.run([y, x], backend="llvm")
        np.testing.assert_array_equal(y, x * 2)


# -- checks -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("access, verb, buffer", [
    ("load", "load from", "x"), ("store", "store to", "out"), ("atomic", "atomic_add on", "hist"),
    ("scalar store", "store to", "out")])
def test_an_access_out_of_bounds_names_buffer_index_program_and_line_and_writes_nothing(access, verb, buffer):
    out, hist, x = np.full(128, -7.0, np.float32), np.zeros(128, np.int32), np.arange(128, dtype=np.float32)
    with pytest.raises(OutOfBoundsError) as info:
        _faulty(access).run(dict(out=out, hist=hist, x=x, d=1), backend="llvm")
    message = str(info.value)
    assert f"{verb} '{buffer}': index 1112 is out of bounds for 128 elements (program m=3 n=1)" in message
    assert "test_tile_interpreter.py:" in message and "nothing was written" in message
    assert (out == -7.0).all() and (hist == 0).all()


def test_integer_division_by_zero_names_the_program_on_llvm():
    out = np.full(128, -7.0, np.float32)
    with pytest.raises(ExecutionError, match=r"division by zero in program m=0 n=0 at .*test_tile_interpreter.py"):
        _faulty("division").run(dict(out=out, hist=np.zeros(128, np.int32), x=np.zeros(128, np.float32), d=0),
                                backend="llvm")
    assert (out == -7.0).all()


@accy.kernel(y=accy.dynamic_buffer(f32), x=accy.dynamic_buffer(f32), n=accy.scalar(index),
             shift=accy.scalar(index), at=accy.scalar(index))
def shifted_rows(k, p):
    """y[i] = x[i + shift] in rows of 16 (a whole tile everywhere but the edge); program ``at``
    alone reads 1000 past its own elements."""

    @k.for_each_tile(grid=(axis("m", cdiv(p.n, 16)), axis("n", 3)))
    def body(t, pid):
        i = pid["m"] * 16 + t.arange(16)
        far = (pid["m"] + pid["n"] * cdiv(p.n, 16) == p.at).cast(index) * 1000
        inside = i < p.n
        p.y.store(pid["n"] * p.n + i, p.x.load(i + p.shift + far, mask=inside), mask=inside)


@pytest.mark.parametrize("at, program", [(5, "m=5 n=0"), (16, "m=2 n=2"), (13, "m=6 n=1")])
def test_a_whole_tile_past_the_end_fails_in_its_program_and_nothing_is_written(at, program):
    n = 103  # 7 programs along m: groups of 4 and of 3
    x = np.arange(n + 32, dtype=np.float32)
    y = np.full(3 * n, -1.0, np.float32)
    with pytest.raises(OutOfBoundsError, match=rf"load from 'x': index \d+ is out of bounds for {x.size} elements "
                                               rf"\(program {program}\)"):
        shifted_rows.run(dict(y=y, x=x, n=n, shift=16, at=at), backend="llvm")
    assert (y == -1.0).all()
    shifted_rows.run(dict(y=y, x=x, n=n, shift=16, at=-1), backend="llvm")  # no program far: runs
    np.testing.assert_array_equal(y, np.tile(x[16:16 + n], 3))


def test_a_kernel_that_reads_what_it_writes_runs_on_scratch_copies_and_is_right():
    @accy.kernel(x=accy.dynamic_buffer(f32), n=accy.scalar(index))
    def double(k, p):
        @k.for_each_tile(grid=axis("i", cdiv(p.n, 32)))
        def body(t, pid):
            i = pid["i"] * 32 + t.arange(32)
            p.x.store(i, p.x.load(i, mask=i < p.n) * 2.0, mask=i < p.n)

    x = np.arange(77, dtype=np.float32)
    double.run([x, 77], backend="llvm")
    np.testing.assert_array_equal(x, np.arange(77) * 2.0)
    with pytest.raises(OutOfBoundsError, match=r"load from 'x': index 77 is out of bounds for 77 elements"):
        double.run([x, 78], backend="llvm")
    np.testing.assert_array_equal(x, np.arange(77) * 2.0)  # untouched


@accy.kernel(dst=accy.dynamic_buffer(f32), x=accy.dynamic_buffer(f32), n=accy.scalar(index),
             trips=accy.scalar(index))
def gathered_sums(k, p):
    """dst[i] = the sum of x[(i + j) % n] for j < trips: a checked gather inside a fold, so the
    launch's check-only pass runs the fold in every program."""

    @k.for_each_tile(grid=axis("g", cdiv(p.n, 64)))
    def body(t, pid):
        r = pid["g"] * 64 + t.arange(64)
        acc = t.fold_range(0, p.trips, 1, t.zeros((64,), f32),
                           lambda t, j, acc: acc + p.x.load((r + j) % p.n, mask=r < p.n))
        p.dst.store(r, acc, mask=r < p.n)


def test_the_check_pass_of_a_long_launch_is_interrupted_between_slices_and_writes_nothing():
    import _thread
    import threading
    import time

    n = 100_000
    x, dst = np.ones(n, np.float32), np.full(n, -1.0, np.float32)
    gathered_sums.run([dst[:64], x[:64], 64, 3], backend="llvm")  # compile
    np.testing.assert_array_equal(dst[:64], 3.0)
    dst[:64] = -1.0
    # 12000 trips: ~2.5 s of check-only pass, then as long again to run; before, the whole pass
    # was one native call, so the interrupt landed only after it
    timer = threading.Timer(0.2, _thread.interrupt_main)
    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        timer.start()
        try:
            gathered_sums.run([dst, x, n, 12_000], backend="llvm")
        finally:
            timer.cancel()
    assert time.perf_counter() - start < 2.0  # below the ~2.5 s pass it interrupts, with room for a loaded machine
    assert (dst == -1.0).all()  # it landed in the check pass: nothing written


# -- the program order ------------------------------------------------------------------------------


@pytest.mark.parametrize("grid", [(7, 5), (1, 3), (4, 4), (9, 2, 3)])
def test_every_program_runs_once_in_the_grouped_order(grid):
    names = ("a", "b", "c")[:len(grid)]

    @accy.kernel(f"which_{'x'.join(map(str, grid))}", out=accy.dynamic_buffer(i32))
    def which(k, p):
        @k.for_each_tile(grid=tuple(axis(n, e) for n, e in zip(names, grid)))
        def body(t, pid):
            linear, stride = pid[names[0]] * 0, 1
            for n, e in zip(names, grid):
                linear = linear + pid[n] * stride
                stride *= e
            p.out.atomic_add(linear + t.arange(1), t.full((1,), 1, i32))

    out = np.zeros(int(np.prod(grid)), np.int32)
    which.run([out], backend="llvm")
    assert (out == 1).all()


def test_a_tile_kernel_compiles_once_per_process():
    kernel = make_matmul(f32, 32, 32, 16)
    assert host_kernel(kernel.graph, Target.host()) is host_kernel(kernel.graph, Target.host())


@pytest.mark.parametrize("width", [4, 8])
@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("elementwise", "reductions", "argreductions", "scans",
                                                                  "dot_f32", "dot_f64", "dot_i8", "masked_edges",
                                                                  "gather_scatter", "shapes")], ids=str)
def test_kernel_matches_numpy_at_narrower_vectors(case, width):
    run_case(case, "llvm", np.random.default_rng(7), vector_width=width)


@accy.kernel(top=accy.dynamic_buffer(index), low=accy.dynamic_buffer(index), x=accy.dynamic_buffer(f32),
             R=accy.scalar(index), C=accy.scalar(index))
def long_argmax(k, p):
    @k.for_each_tile(grid=axis("r", cdiv(p.R, 4)))
    def body(t, pid):
        r = pid["r"] * 4 + t.arange(4)
        c = t.arange(1024)
        inside = (r[:, None] < p.R) & (c[None, :] < p.C)
        x = p.x.load(r[:, None] * p.C + c[None, :], mask=inside, other=float("nan"))
        x = t.where(inside, x, float("-inf"))  # past the row: never the first maximum or the first NaN
        p.top.store(r, t.argmax(x, axis=1), mask=r < p.R)
        p.low.store(r, t.argmin(t.where(inside, x, float("inf")), axis=1), mask=r < p.R)


def test_argmax_of_long_rows_ties_to_the_lowest_position_and_finds_the_first_nan():
    """Rows long enough for the unrolled chains of compares: ties and NaNs in different chains."""
    R, C = 7, 1000
    x = np.random.default_rng(4).integers(-3, 4, (R, C)).astype(np.float32)  # many ties
    x[1, [700, 900]] = np.nan
    x[2, [3, 17, 999]] = np.nan
    x[3, :] = 1.0
    x[4, 999] = 9.0
    x[5, [0, 16, 32, 48]] = -0.0  # zeros of both signs tie
    x[5, :] = np.where(x[5] == 0, 0.0, -5.0)
    x[5, 48] = -0.0
    top, low = np.zeros(R, np.int64), np.zeros(R, np.int64)
    long_argmax.run(dict(top=top, low=low, x=x.ravel(), R=R, C=C), backend="llvm")
    np.testing.assert_array_equal(top, np.argmax(x, axis=1))
    np.testing.assert_array_equal(low, np.argmin(x, axis=1))


def make_row_extrema(dtype):
    @accy.kernel(f"row_extrema_{dtype}", top=accy.dynamic_buffer(dtype), low=accy.dynamic_buffer(dtype),
                 x=accy.dynamic_buffer(dtype), R=accy.scalar(index), C=accy.scalar(index))
    def row_extrema(k, p):
        @k.for_each_tile(grid=axis("r", cdiv(p.R, 4)))
        def body(t, pid):
            r = pid["r"] * 4 + t.arange(4)
            c = t.arange(512)
            inside = (r[:, None] < p.R) & (c[None, :] < p.C)
            x = p.x.load(r[:, None] * p.C + c[None, :], mask=inside, other=float("nan"))
            p.top.store(r, t.max(t.where(inside, x, float("-inf")), axis=1), mask=r < p.R)
            p.low.store(r, t.min(t.where(inside, x, float("inf")), axis=1), mask=r < p.R)

    return row_extrema


@pytest.mark.parametrize("dtype", [f32, f16, accy.f64], ids=str)
def test_row_max_and_min_propagate_nans_and_order_signed_zeros(dtype):
    """Long rows (the unrolled, keyed path): NaNs of either sign anywhere, zeros of both signs,
    infinities; every other element bit for bit as the scalar max and min fold."""
    from tile_kernels import assert_output, ieee_max, ieee_min

    R, C = 9, 500
    x = np.random.default_rng(6).standard_normal((R, C)).astype(dtype.numpy)
    x[1, 300] = np.nan
    x[2, 7] = -np.array(np.nan, dtype.numpy)  # a NaN with its sign set
    x[3, :] = 0.0
    x[3, 250] = -0.0
    x[4, :] = -0.0
    x[4, 499] = 0.0
    x[5, 100], x[5, 200] = np.inf, -np.inf
    x[6, :] = -np.inf
    x[7, :] = -0.0
    top, low = np.zeros(R, dtype.numpy), np.zeros(R, dtype.numpy)
    make_row_extrema(dtype).run(dict(top=top, low=low, x=x.ravel(), R=R, C=C), backend="llvm")
    assert_output("max", top, ieee_max(x, axis=1).astype(dtype.numpy))
    assert_output("min", low, ieee_min(x, axis=1).astype(dtype.numpy))


@pytest.mark.parametrize("dtype, shape", [(f32, (32, 48)), (accy.i64, (16, 16)), (f16, (16, 32)), (f32, (12, 20))],
                         ids=str)
def test_transpose_by_register_blocks_and_by_gathers(dtype, shape):
    R, C = shape

    @accy.kernel(f"transpose_{dtype}_{R}x{C}", y=accy.dynamic_buffer(dtype), x=accy.dynamic_buffer(dtype))
    def transpose(k, p):
        @k.for_each_tile(grid=axis("i", 1))
        def body(t, pid):
            x = p.x.load(t.arange(R)[:, None] * C + t.arange(C)[None, :])
            p.y.store(t.arange(C)[:, None] * R + t.arange(R)[None, :], x.T)

    x = np.arange(R * C).astype(dtype.numpy)
    y = np.zeros(R * C, dtype.numpy)
    transpose.run([y, x], backend="llvm")
    np.testing.assert_array_equal(y.reshape(C, R), x.reshape(R, C).T)


@accy.kernel(y=accy.dynamic_buffer(f32), total=accy.dynamic_buffer(f32), x=accy.dynamic_buffer(f32),
             n=accy.scalar(index))
def branches(k, p):
    """An if_ on a program-uniform condition returning a tile and a scalar, inside a fold that
    carries a tile and a scalar."""

    @k.for_each_tile(grid=axis("i", cdiv(p.n, 16)))
    def body(t, pid):
        i = pid["i"] * 16 + t.arange(16)
        x = p.x.load(i, mask=i < p.n)

        def step(t, j, carry):
            tile, count = carry
            odd = (pid["i"] + j) % 2 == 1
            new, extra = t.if_(odd, lambda t: (tile * 2.0, count + 1.0), lambda t: (tile + x, count))
            return new, extra

        tile, count = t.fold_range(0, 3, 1, (x, t.sum(x * 0.0)), step)  # a scalar f32 0 to count in
        p.y.store(i, tile, mask=i < p.n)
        p.total[pid["i"]] = count


def test_if_with_tile_and_scalar_results_inside_a_fold():
    n = 40
    x = np.arange(n, dtype=np.float32)
    y, total = np.zeros(n, np.float32), np.zeros(3, np.float32)
    branches.run(dict(y=y, total=total, x=x, n=n), backend="llvm")
    want, counts = x.copy(), []
    for program in range(3):
        part, count = x[program * 16:(program + 1) * 16].copy(), 0.0
        for j in range(3):
            if (program + j) % 2 == 1:
                part, count = part * 2, count + 1
            else:
                part = part + x[program * 16:(program + 1) * 16]
        want[program * 16:(program + 1) * 16] = part
        counts.append(count)
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(total, counts)


@accy.kernel(y=accy.tensor(f32, 2), x=accy.tensor(f32, 2))
def rows_past_the_shape(k, p):
    @k.for_each_tile(grid=axis("i", 2))
    def body(t, pid):
        r = pid["i"] * 4 + t.arange(4)
        c = t.arange(8)
        p.y.store((r[:, None], c[None, :]), p.x.load((r[:, None], c[None, :])))  # unmasked: rows 6 and 7 are out


@pytest.mark.parametrize("step", [1, 2], ids=["contiguous", "a view with a step"])
def test_an_unmasked_tensor_index_outside_its_shape_names_the_dimension_and_writes_nothing(step):
    x = np.ones((6, 8 * step), np.float32)[:, ::step]
    y = np.zeros((8, 8), np.float32)
    with pytest.raises(OutOfBoundsError, match=r"load from tensor 'x': the index in dimension 0 is outside its shape "
                                               r"\(program i=1\)"):
        rows_past_the_shape.run([y, x], backend="llvm")
    assert (y == 0).all()


@accy.kernel(dst=accy.tensor(f32, 2), x=accy.tensor(f32, 2))
def fused_softmax(k, p):
    R, C = p.x.shape

    @k.for_each_tile(grid=axis("row", R))
    def program(t, pid):
        cols = t.arange(64)
        x = p.x.load((pid["row"], cols), mask=cols < C, other=float("-inf"))
        e = t.exp(x - t.max(x, axis=0))
        p.dst.store((pid["row"], cols), e / t.sum(e, axis=0), mask=cols < C)


def test_pointwise_chains_are_fused_into_their_reader_and_splats_get_no_array():
    lowering = TileHostLowering(fused_softmax.graph, Target.host(), 16)
    fused = sorted(v.op.opcode for v in lowering.fused)
    # x - m into exp (e is read twice: built), e / s into the store; the splats of m and s; the load
    # into its two readers, the max and the subtraction, each reading the row (the arange and
    # the mask are read through the accesses' forms: not even fused)
    assert fused == ["div", "splat", "splat", "sub", "tile_load"]
    built = [v.op.opcode for v in lowering.live.values
             if isinstance(v.type, accy.dsl.types.TileType) and v not in lowering.fused]
    assert built == ["exp"]
    x = np.random.default_rng(0).standard_normal((5, 50)).astype(np.float32) * 4
    dst = np.zeros_like(x)
    fused_softmax.run([dst, x], backend="llvm")
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(dst, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


@accy.kernel(out=accy.tensor(f32, 2), x=accy.tensor(f32, 2))
def carried_sums(k, p):
    R, C = p.x.shape

    @k.for_each_tile(grid=axis("row", R))
    def program(t, pid):
        def step(t, c0, carry):
            acc, previous = carry
            cols = c0 + t.arange(32)
            x = p.x.load((pid["row"], cols), mask=cols < C, other=0.0)
            kept = acc * 1.0  # read before acc + x overwrites acc: both written in place
            late = acc + x
            return late, kept + acc * 0.0  # ... but acc read after acc + x: that one gets its own array

        acc, previous = t.fold_range(0, C, 32, (t.zeros((32,), f32), t.zeros((32,), f32)), step)
        cols = t.arange(32)
        p.out.store((pid["row"], cols), acc + previous * 1000.0, mask=cols < 32)


def test_a_carry_updated_by_a_pointwise_op_that_reads_it_last_is_written_in_place():
    lowering = TileHostLowering(carried_sums.graph, Target.host(), 16)
    fold = next(op for op in lowering.region.walk() if op.opcode == "fold")
    body = fold.regions[0]
    acc, previous = body.args[1:]
    updated, copied = body.terminator.operands
    slots = lowering.storage.slot_of
    assert slots[updated] != slots[acc]  # acc is read after acc + x: its own array
    assert slots[copied] == slots[previous]  # the last reader of previous (none reads it) writes over it
    x = np.random.default_rng(0).standard_normal((3, 100)).astype(np.float32)
    out = np.zeros((3, 32), np.float32)
    carried_sums.run([out, x], backend="llvm")
    padded = np.zeros((3, 128), np.float64)
    padded[:, :100] = x
    blocks = padded.reshape(3, 4, 32)
    want = blocks.sum(axis=1) + blocks[:, :3].sum(axis=1) * 1000  # previous: acc before the last trip
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)


@accy.kernel(out=accy.tensor(f32, 1), x=accy.tensor(f32, 2))
def row_block_sums(k, p):
    R, C = p.x.shape

    @k.for_each_tile(grid=axis("row", R))
    def program(t, pid):
        def step(t, c0, acc):
            cols = c0 + t.arange(32)
            return acc + p.x.load((pid["row"], cols), mask=cols < C, other=0.0)

        p.out.store(pid["row"], t.sum(t.fold_range(0, C, 32, t.zeros((32,), f32), step), axis=0))


def test_a_running_sum_s_carry_is_updated_in_place():
    lowering = TileHostLowering(row_block_sums.graph, Target.host(), 16)
    fold = next(op for op in lowering.region.walk() if op.opcode == "fold")
    (acc,), (updated,) = fold.regions[0].args[1:], fold.regions[0].terminator.operands
    assert lowering.storage.slot_of[updated] == lowering.storage.slot_of[acc]
    x = np.random.default_rng(1).standard_normal((5, 77)).astype(np.float32)
    out = np.zeros(5, np.float32)
    row_block_sums.run([out, x], backend="llvm")
    np.testing.assert_allclose(out, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)
