"""Review of the host's shape guards, fusion and tails (issue 31): inputs where the llvm
backend disagreed with the numpy backend, each the smallest kernel that showed it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import accy
from accy import axis, cdiv, f32, i32, index
from accy.codegen.host.tiles import TileHostLowering
from accy.errors import OutOfBoundsError
from accy.targets import Target

BLOCK = 32


@accy.kernel(y=accy.tensor(f32, 2), x=accy.tensor(f32, 2))
def load_then_overwrite(k, p):
    """A row of x loaded, x's row overwritten, then the loaded row stored to y."""
    R, C = p.x.shape

    @k.for_each_tile(grid=axis("row", R))
    def program(t, pid):
        row = pid["row"]
        cols = t.arange(BLOCK)
        mask = cols < C
        x = p.x.load((row, cols), mask=mask, other=0.0)
        p.x.store((row, cols), t.full((BLOCK,), 7.0), mask=mask)
        p.y.store((row, cols), x, mask=mask)


@pytest.mark.parametrize("options", [{"backend": "numpy"}, {"backend": "llvm"},
                                     {"backend": "llvm", "checks": False}], ids=["numpy", "llvm", "llvm-no-checks"])
def test_a_load_keeps_the_values_it_read_before_a_store_to_its_buffer(options):
    """Without checks a launch may read a buffer it writes: a load fused into its reader read
    x after the store (7s, not x) on the host."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.zeros_like(x)
    load_then_overwrite.run([y, x.copy()], **options)
    np.testing.assert_array_equal(y, x)


def test_a_load_from_a_buffer_the_launch_writes_is_not_fused():
    fused = TileHostLowering(load_then_overwrite.graph, Target.host(checks=False), 16).fused
    assert {v.op.opcode for v in fused} == {"splat"}


# -- a property: shifted, lower- and upper-bounded masks, any other, through tails and guards --

ROW_BLOCK = 64


@accy.kernel(stats=accy.tensor(f32, 2), dst=accy.tensor(f32, 2), x=accy.tensor(f32, 2), shift=accy.scalar(i32),
             low=accy.scalar(i32), high=accy.scalar(i32), other=accy.scalar(f32), out_shift=accy.scalar(i32))
def bounded_rows(k, p):
    """Per row: columns ``arange + shift`` loaded where ``low <= col < high`` (``other``
    elsewhere), reduced every way, and stored ``out_shift`` further along where inside."""
    R, C = p.x.shape

    @k.for_each_tile(grid=axis("row", R))
    def program(t, pid):
        row = pid["row"]
        cols = t.arange(ROW_BLOCK) + t.cast(p.shift, index)
        mask = (cols >= t.cast(p.low, index)) & (cols < t.cast(p.high, index))
        x = p.x.load((row, cols), mask=mask, other=p.other)
        y = x * 0.5 + p.other
        for j, value in enumerate((t.sum(x, axis=0), t.max(x, axis=0), t.min(x, axis=0), t.sum(y, axis=0),
                                   t.max(y, axis=0), t.argmax(x, axis=0).cast(f32), t.argmin(y, axis=0).cast(f32))):
            p.stats.store((row, j), value)
        out = cols + t.cast(p.out_shift, index)
        p.dst.store((row, out), t.where(x > 0.0, y, x), mask=(out >= 0) & (out < C))


def _outcome(backend: str, x: np.ndarray, args: tuple, **options):
    stats, dst = np.full((x.shape[0], 7), 9.0, np.float32), np.zeros(x.shape, np.float32)
    try:
        bounded_rows.run([stats, dst, x, *args], backend=backend, **options)
    except OutOfBoundsError as e:
        assert (stats == 9.0).all() and (dst == 0.0).all(), "written before the failure"
        return str(e)
    return stats, dst


@settings(max_examples=60, deadline=None, database=None, derandomize=True)
@given(rows=st.integers(0, 3), cols=st.sampled_from([0, 1, 15, 16, 17, 40, 63, 64]),
       shift=st.integers(-20, 20), low=st.integers(-5, 70), high=st.integers(-5, 70),
       other=st.sampled_from([0.0, -0.0, 2.5, -np.inf, np.inf, np.nan]), out_shift=st.integers(-3, 3),
       view=st.sampled_from(["contiguous", "step", "transposed"]), checks=st.booleans())
def test_bounded_rows_on_the_host_match_numpy(rows, cols, shift, low, high, other, out_shift, view, checks):
    rng = np.random.default_rng(rows * 100 + cols)
    if view == "contiguous":
        x = rng.standard_normal((rows, cols)).astype(np.float32)
    elif view == "step":
        x = rng.standard_normal((rows, 2 * cols)).astype(np.float32)[:, ::2]
    else:
        x = rng.standard_normal((cols, rows)).astype(np.float32).T
    args = (shift, low, high, other, out_shift)
    want = _outcome("numpy", x, args)
    if isinstance(want, str) and not checks:
        return  # an access outside the shape without checks: nothing is promised
    got = _outcome("llvm", x, args, checks=checks)
    if isinstance(want, str):
        assert got == want
        return
    assert not isinstance(got, str), got
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[1], want[1])


@accy.kernel(sums=accy.tensor(f32, 2), dst=accy.tensor(f32, 2), x=accy.tensor(f32, 2), row_shift=accy.scalar(i32),
             col_shift=accy.scalar(i32), row_high=accy.scalar(i32), col_low=accy.scalar(i32), col_high=accy.scalar(i32))
def bounded_boxes(k, p):
    """4 x 32 boxes at shifted origins, masked by run-time bounds that may pass the shape in
    one dimension: row sums, and the box times 2 stored back."""
    R, C = p.x.shape

    @k.for_each_tile(grid=(axis("r", cdiv(R, 4)), axis("c", cdiv(C, 32))))
    def program(t, pid):
        rows = pid["r"] * 4 + t.arange(4) + t.cast(p.row_shift, index)
        cols = pid["c"] * 32 + t.arange(32) + t.cast(p.col_shift, index)
        mask = (rows[:, None] >= 0) & (rows[:, None] < t.cast(p.row_high, index)) \
            & (cols[None, :] >= t.cast(p.col_low, index)) & (cols[None, :] < t.cast(p.col_high, index))
        x = p.x.load((rows[:, None], cols[None, :]), mask=mask, other=0.5)
        p.sums.store((pid["r"] * 4 + t.arange(4), pid["c"] + t.arange(4) * 0), t.sum(x, axis=1),
                     mask=pid["r"] * 4 + t.arange(4) < R)
        p.dst.store((rows[:, None], cols[None, :]), x * 2.0, mask=mask)


@settings(max_examples=60, deadline=None, database=None, derandomize=True)
@given(shape=st.sampled_from([(0, 5), (3, 0), (5, 20), (8, 64), (9, 33)]), row_shift=st.integers(-3, 3),
       col_shift=st.integers(-8, 8), row_slack=st.integers(-2, 1), col_low=st.integers(-4, 10),
       col_slack=st.integers(-5, 2), view=st.sampled_from(["contiguous", "step", "transposed"]))
def test_bounded_boxes_on_the_host_match_numpy(shape, row_shift, col_shift, row_slack, col_low, col_slack, view):
    rows, cols = shape
    rng = np.random.default_rng(rows * 100 + cols)
    x = {"contiguous": lambda: rng.standard_normal((rows, cols)),
         "step": lambda: rng.standard_normal((rows, 2 * cols))[:, ::2],
         "transposed": lambda: rng.standard_normal((cols, rows)).T}[view]().astype(np.float32)
    args = (row_shift, col_shift, rows + row_slack, col_low, cols + col_slack)
    outcomes = []
    for backend in ("numpy", "llvm"):
        sums, dst = np.full((rows, -(-cols // 32)), 9.0, np.float32), np.zeros((rows, cols), np.float32)
        try:
            bounded_boxes.run([sums, dst, x, *args], backend=backend)
        except OutOfBoundsError as e:
            assert (sums == 9.0).all() and (dst == 0.0).all(), "written before the failure"
            outcomes.append(str(e))
            continue
        outcomes.append((sums, dst))
    want, got = outcomes
    if isinstance(want, str) or isinstance(got, str):
        assert got == want
        return
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[1], want[1])
