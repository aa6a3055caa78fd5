"""A tensor access's shape guard, seen through on the host (issue 31): a Triton-style masked
``load``/``store`` through index tiles runs row by row from its affine offsets, its indices
checked against the shape once per access, and an active index outside the shape is still an
OutOfBoundsError naming the dimension and the program, the same on every backend."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import accy
from accy import axis, cdiv, f32
from accy.codegen.host.tiles import TileHostLowering
from accy.dsl.ops import Bounds
from accy.errors import OutOfBoundsError
from accy.lowering.tile_access import plan_accesses
from accy.targets import Target

BACKENDS = ("numpy", "llvm", "ptx")


def make_rows(block: int, extra_cols: int = 0, shift: int = 0, extra_rows: int = 0):
    """A program per row: dst[row, c] = 2 x[row, c] under the mask ``cols < C + extra_cols``,
    the columns shifted by ``shift``, over ``R + extra_rows`` programs."""

    @accy.kernel(dst=accy.tensor(f32, 2), x=accy.tensor(f32, 2))
    def rows(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=axis("row", R + extra_rows))
        def program(t, pid):
            row = pid["row"]
            cols = t.arange(block) + shift
            mask = cols < C + extra_cols
            p.dst.store((row, cols), p.x.load((row, cols), mask=mask, other=0.0) * 2.0, mask=mask)

    return rows


def make_boxes(rows_box: int, cols_box: int, row_slack: int = 0, limited: bool = False):
    """A program per box: dst = x + 1 through row and column index tiles and their mask
    (the row bound loosened by ``row_slack``).  ``limited``: the load's columns bounded by a
    scalar ``limit`` (with ``limit`` 0 it lets nothing through), its ``other`` -1 and the
    store's mask the shape's."""
    params = dict(dst=accy.tensor(f32, 2), x=accy.tensor(f32, 2))
    if limited:
        params["limit"] = accy.scalar(accy.index)

    @accy.kernel(**params)
    def boxes(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=(axis("r", cdiv(R, rows_box)), axis("c", cdiv(C, cols_box))))
        def program(t, pid):
            rows = pid["r"] * rows_box + t.arange(rows_box)
            cols = pid["c"] * cols_box + t.arange(cols_box)
            mask = (rows[:, None] < R + row_slack) & (cols[None, :] < (p.limit if limited else C))
            x = p.x.load((rows[:, None], cols[None, :]), mask=mask, other=-1.0 if limited else 0.0)
            shape = (rows[:, None] < R) & (cols[None, :] < C)
            p.dst.store((rows[:, None], cols[None, :]), x + 1.0, mask=shape if limited else mask)

    return boxes


def test_the_host_sees_through_the_shape_guard_of_a_masked_load_and_store():
    for program in (make_rows(128), make_boxes(4, 8)):
        plans = plan_accesses(program.graph.launch_op.regions[0])
        assert len(plans) == 2
        for plan in plans.values():
            assert plan.offsets is not None and plan.box is not None and plan.guard is not None
    lowering = TileHostLowering(make_rows(128).graph, Target.host(), 16)
    built = [str(v.type) for v in lowering.live.values if isinstance(v.type, accy.dsl.types.TileType)]
    assert built == ["tile<f32, 128>"] * len(built)  # no index tile: only the values loaded and stored


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("step", [1, 3], ids=["contiguous", "a view with a step"])
@pytest.mark.parametrize("shape", [(5, 100), (3, 128), (1, 1), (4, 0)])
def test_masked_rows_match_numpy(backend, shape, step):
    """On the host the load is fused into its reader (a masked vector load, or a gather on a view's step)."""
    x = np.random.default_rng(0).standard_normal((shape[0], shape[1] * step)).astype(np.float32)[:, ::step]
    dst = np.full(shape, 7.0, np.float32)
    make_rows(128).run([dst, x], backend=backend)
    np.testing.assert_array_equal(dst, 2 * x)


def test_a_load_read_once_by_chunks_is_fused_where_the_launcher_checks_nothing():
    fused = TileHostLowering(make_rows(128).graph, Target.host(), 16).fused
    assert sorted(v.op.opcode for v in fused) == ["mul", "splat", "tile_load"]
    unchecked = TileHostLowering(make_rows(128).graph, Target.host(checks=False), 16).fused
    assert "tile_load" in {v.op.opcode for v in unchecked}
    check_only = TileHostLowering(make_rows(128).graph, Target.host(), 16)
    check_only._mode(check_only=True)
    assert not check_only.fused  # the check pass loads nothing


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(9, 21), (8, 16), (3, 5)])
def test_masked_boxes_match_numpy_on_a_view(backend, shape):
    base = np.random.default_rng(1).standard_normal((shape[0], 2 * shape[1])).astype(np.float32)
    x = base[:, ::2]
    dst = np.zeros(shape, np.float32)
    make_boxes(4, 8).run([dst, x], backend=backend)
    np.testing.assert_array_equal(dst, x + 1)


# (kernel, message): each fails in its first failing program, naming the dimension
FAILURES = {
    "columns past the end": (lambda: make_rows(128, extra_cols=1),
                             r"load from tensor 'x': the index in dimension 1 is outside its shape \(program row=0\)"),
    "columns below 0": (lambda: make_rows(128, shift=-2),
                        r"load from tensor 'x': the index in dimension 1 is outside its shape \(program row=0\)"),
    "a row past the end": (lambda: make_rows(128, extra_rows=1),
                           r"load from tensor 'x': the index in dimension 0 is outside its shape \(program row=3\)"),
    "box rows past the end": (lambda: make_boxes(4, 8, row_slack=2),
                              r"load from tensor 'x': the index in dimension 0 is outside its shape \(program r=0 c=0\)"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", FAILURES)
def test_an_active_index_outside_the_shape_names_its_dimension_and_program_and_writes_nothing(backend, case):
    make, message = FAILURES[case]
    if backend == "ptx":  # the GPU's programs run at once: any failing one may be the one reported
        message = message.split(r" \(program")[0]
    x = np.ones((3, 100), np.float32)
    dst = np.zeros((3, 100), np.float32)
    with pytest.raises(OutOfBoundsError, match=message):
        make().run([dst, x], backend=backend)
    assert (dst == 0).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failure_in_a_later_program_names_that_program(backend):
    """Rows 0-3 are whole boxes; the box of rows 4-7 reaches row 8 of a 6-row tensor only past
    its mask's loosened bound, so the first failure is program r=1's, at dimension 0."""
    x = np.ones((6, 8), np.float32)
    dst = np.zeros((6, 8), np.float32)
    program = r"\(program r=1 c=0" if backend != "ptx" else ""
    with pytest.raises(OutOfBoundsError, match=r"dimension 0 is outside its shape " + program):
        make_boxes(4, 8, row_slack=1).run([dst, x], backend=backend)
    assert (dst == 0).all()


def make_column_reduce(box_rows: int, box_cols: int, how: str):
    """Down the columns in masked boxes: ``how`` (sum, max or min) of each column."""

    @accy.kernel(out=accy.tensor(f32, 1), x=accy.tensor(f32, 2))
    def column_reduce(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=axis("c", cdiv(C, box_cols)))
        def program(t, pid):
            cols = pid["c"] * box_cols + t.arange(box_cols)
            identity = {"sum": 0.0, "max": float("-inf"), "min": float("inf")}[how]

            def step(t, r0, acc):
                rows = r0 + t.arange(box_rows)
                mask = (rows[:, None] < R) & (cols[None, :] < C)
                x = p.x.load((rows[:, None], cols[None, :]), mask=mask, other=identity)
                part = getattr(t, how)(x, axis=0)
                return acc + part if how == "sum" else (t.maximum if how == "max" else t.minimum)(acc, part)

            total = t.fold_range(0, R, box_rows, t.full((box_cols,), identity, f32), step)
            p.out.store(cols, total, mask=cols < C)

    return column_reduce


@pytest.mark.parametrize("backend", ["numpy", "llvm"])
@pytest.mark.parametrize("how", ["sum", "max", "min"])
@pytest.mark.parametrize("boxes", [(16, 128), (8, 40), (4, 16)])
@pytest.mark.parametrize("shape", [(100, 300), (64, 128), (3, 1)])
def test_a_reduction_down_masked_boxes_matches_numpy(backend, how, boxes, shape):
    """On the host a 2-D load read only by a reduction down its rows is fused into it (each row found at once)."""
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    out = np.zeros(shape[1], np.float32)
    make_column_reduce(*boxes, how).run([out, x], backend=backend)
    want = getattr(x.astype(np.float64), how)(axis=0)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


# -- the tile distribution (ptx, cuda): the guard seen through on the GPU's path ----------------


def make_masked_matmul(bm: int, bn: int, bk: int, stages: int = 2, k_slack: int = 0, m_slack: int = 0,
                       stopped: bool = False):
    """The matmul as Triton users write it, bf16 in and f32 out: masked loads through index
    tiles (A's column bound loosened by ``k_slack``) and a masked store (its row bound
    loosened by ``m_slack``).  ``stopped``: A's mask also holds only while ``k0 < kstop`` (a
    scalar), so that past it A's loosened mask lets nothing through."""
    params = dict(c=accy.tensor(f32, 2), a=accy.tensor(accy.bf16, 2), b=accy.tensor(accy.bf16, 2))
    if stopped:
        params["kstop"] = accy.scalar(accy.index)

    @accy.kernel(**params)
    def matmul(k, p):
        M, K = p.a.shape
        N = p.b.shape[1]

        @k.for_each_tile(grid=(axis("m", cdiv(M, bm)), axis("n", cdiv(N, bn))), warps=4, num_stages=stages)
        def program(t, pid):
            rm = pid["m"] * bm + t.arange(bm)
            rn = pid["n"] * bn + t.arange(bn)

            def step(t, k0, acc):
                rk = k0 + t.arange(bk)
                mask = (rm[:, None] < M) & (rk[None, :] < K + k_slack)
                a = p.a.load((rm[:, None], rk[None, :]), mask=mask & (k0 < p.kstop) if stopped else mask)
                b = p.b.load((rk[:, None], rn[None, :]), mask=(rk[:, None] < K) & (rn[None, :] < N))
                return t.dot(a, b, acc)

            acc = t.fold_range(0, K, bk, t.zeros((bm, bn), f32), step)
            p.c.store((rm[:, None], rn[None, :]), acc, mask=(rm[:, None] < M + m_slack) & (rn[None, :] < N))

    return matmul


def bf16_inputs(m, n, k, seed=3):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16),
            rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16))


def test_the_distribution_sees_through_the_guards_of_a_masked_matmul():
    """Its operands go to shared memory by cp.async on the flat offsets, with no check of their
    own (bounds shape), and its store is vectors: no element computes its guard's code."""
    graph = make_masked_matmul(32, 32, 32).graph_for("cuda", "sm_80")
    copies = [op for op in graph.body.walk() if op.opcode == "async_copy"]
    assert {op.attrs.buffer for op in copies} == {"a", "b"}
    assert sum(op.attrs.bounds is Bounds.SHAPE for op in copies) == 4  # A's and B's: prologue and loop
    stores = [op for op in graph.body.walk() if op.opcode == "store" and op.attrs.get("buffer") == "c"]
    assert any(op.attrs.vec > 1 and op.attrs.bounds is Bounds.SHAPE for op in stores)
    # what is still checked per element is the failure's path alone: one access per guard seen
    # through, each after the loop that finds the first element outside
    checked = [op for op in graph.body.walk() if op.opdef.memory and op.attrs.get("buffer") in ("a", "b", "c")
               and op.attrs.get("bounds") is not Bounds.SHAPE]
    assert checked and all(op.block.parent.opcode == "if" for op in checked)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape, padded", [((40, 35, 72), False), ((33, 48, 70), False), ((64, 64, 64), False),
                                           ((40, 35, 70), True)],
                         ids=["B misaligned", "A misaligned", "whole tiles", "aligned views, K's tail cut"])
def test_a_masked_matmul_matches_numpy(backend, shape, padded):
    """cp.async where a tensor's rows are 16-byte aligned, the element loop where not; views whose
    rows are padded to 16 bytes copy every trip but the last, whose tail of K (70 = 64 + 6) would
    cut a copy: that trip goes element by element."""
    m, n, k = shape
    a, b = bf16_inputs(m, n, k)
    if padded:  # the same values in rows padded to a multiple of 8 elements with NaN (never to be read)
        a = np.pad(a, ((0, 0), (0, -k % 8 + 8)), constant_values=np.nan)[:, :k]
        b = np.pad(b, ((0, 0), (0, -n % 8 + 8)), constant_values=np.nan)[:, :n]
        assert a.strides[0] % 16 == 0 and b.strides[0] % 16 == 0
    c = np.full((m, n), 7.0, np.float32)
    make_masked_matmul(32, 32, 32).run([c, a, b], backend=backend)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bound = k * 2.0**-23 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
    assert np.all(np.abs(c - exact) <= bound)


MATMUL_FAILURES = {
    "A's columns past K": (dict(k_slack=8), r"load from tensor 'a': the index in dimension 1 is outside its shape"),
    "C's rows past M": (dict(m_slack=8), r"store to tensor 'c': the index in dimension 0 is outside its shape"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", MATMUL_FAILURES)
@pytest.mark.parametrize("shape", [(40, 35, 72), (33, 48, 70)], ids=["A aligned", "A misaligned"])
def test_a_masked_matmul_past_its_shape_stops_and_writes_nothing(backend, case, shape):
    slack, message = MATMUL_FAILURES[case]
    m, n, k = shape
    a, b = bf16_inputs(m, n, k)
    c = np.zeros((m, n), np.float32)
    with pytest.raises(OutOfBoundsError, match=message):
        make_masked_matmul(32, 32, 32, **slack).run([c, a, b], backend=backend)
    assert (c == 0).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_loosened_mask_that_lets_nothing_through_fails_nothing(backend):
    """The check of the rows fails, but no element is let through: the load gives ``other``."""
    x = np.ones((6, 40), np.float32)
    dst = np.full((6, 40), 9.0, np.float32)
    make_boxes(4, 32, row_slack=5, limited=True).run([dst, x, 0], backend=backend)
    assert (dst == 0).all()
    with pytest.raises(OutOfBoundsError, match=r"load from tensor 'x': the index in dimension 0 is outside its shape"):
        make_boxes(4, 32, row_slack=5, limited=True).run([dst, x, 3], backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_staged_operand_whose_loosened_mask_lets_nothing_through_reads_zeros(backend):
    """A's check fails in the trip at k0 = 64 (its columns reach K + 8 = 88 of 80), but its mask
    lets nothing through there (k0 < kstop fails): the staged tile is zeros, not the stage's
    last contents (trip 0's A, in a 2-stage pipeline)."""
    m, n, k = 32, 32, 80
    a, b = bf16_inputs(m, n, k, seed=1)
    c = np.zeros((m, n), np.float32)
    make_masked_matmul(32, 32, 32, k_slack=8, stopped=True).run([c, a, b, 64], backend=backend)
    exact = a[:, :64].astype(np.float64) @ b[:64].astype(np.float64)
    bound = 64 * 2.0**-23 * (np.abs(a[:, :64].astype(np.float64)) @ np.abs(b[:64].astype(np.float64)))
    assert np.all(np.abs(c - exact) <= bound)
