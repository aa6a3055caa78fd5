"""An oversized block on the host (issue 31): a 1-D tile whose lanes past a box-masked load's end
all hold one value is built only up to there, its readers supply the rest, and reductions
combine that value once (or once per chunk where repeating it matters).  Every form here is
checked against the numpy backend and a float64 or exact NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest

import accy
from accy import axis, f32, i32
from accy.codegen.host.tiles import TileHostLowering
from accy.targets import Target

BLOCK = 256


def make_row_stats(other: float, shift: int = 0):
    """Per row: the sum, max and min of the loaded row (``other`` past its end), and the row
    times 2 stored back from column ``shift`` on."""

    @accy.kernel(stats=accy.tensor(f32, 2), dst=accy.tensor(f32, 2), x=accy.tensor(f32, 2))
    def row_stats(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=axis("row", R))
        def program(t, pid):
            row = pid["row"]
            cols = t.arange(BLOCK)
            x = p.x.load((row, cols), mask=cols < C, other=other)
            y = x * 2.0 + 1.0
            p.stats.store((row, 0), t.sum(y, axis=0))
            p.stats.store((row, 1), t.max(y, axis=0))
            p.stats.store((row, 2), t.min(y, axis=0))
            p.stats.store((row, 3), t.sum(t.exp(x - t.max(x, axis=0)), axis=0))
            out = cols - shift
            inside = (out >= 0) & (out < C)
            p.dst.store((row, out), y, mask=inside)

    return row_stats


def expected(x: np.ndarray, other: float, shift: int):
    rows, cols = x.shape
    padded = np.full((rows, BLOCK), other, np.float64)
    padded[:, :cols] = x
    y = padded * 2 + 1
    e = np.exp(padded - padded.max(axis=1, keepdims=True))
    stats = np.stack([y.sum(axis=1), y.max(axis=1), y.min(axis=1), e.sum(axis=1)], axis=1)
    dst = np.zeros_like(x, dtype=np.float64)
    for c in range(BLOCK):  # past the row's end too: the stored value's tail
        if 0 <= c - shift < cols:
            dst[:, c - shift] = y[:, c]
    return stats, dst


@pytest.mark.parametrize("backend", ["numpy", "llvm"])
@pytest.mark.parametrize("other", [0.0, -0.0, 1.5, float("-inf")])
@pytest.mark.parametrize("cols", [1, 100, 255, 256])
@pytest.mark.parametrize("shift", [0, 5])
def test_a_row_in_an_oversized_block_matches_the_padded_reference(backend, other, cols, shift):
    x = np.random.default_rng(cols).standard_normal((3, cols)).astype(np.float32)
    stats, dst = np.zeros((3, 4), np.float32), np.zeros((3, cols), np.float32)
    make_row_stats(other, shift).run([stats, dst, x], backend=backend)
    want_stats, want_dst = expected(x, other, shift)
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(stats, want_stats, rtol=2e-6, atol=1e-6)
    np.testing.assert_array_equal(dst, want_dst.astype(np.float32))


def test_the_sum_of_negative_zeros_and_a_zero_tail_is_positive_zero():
    """NumPy's sum of [-0.0, ..., +0.0] is +0.0: the tail is added, once."""
    x = np.full((1, 10), -0.0, np.float32)
    stats, dst = np.full((1, 4), 7.0, np.float32), np.zeros((1, 10), np.float32)
    make_row_stats(0.0).run([stats, dst, x], backend="llvm")
    assert stats[0, 0] == 1.0 * BLOCK and not np.signbit(np.float32(stats[0, 0]))
    x_only_zeros = np.full((1, BLOCK), -0.0, np.float32)  # no tail: every lane is -0.0
    stats, dst = np.zeros((1, 4), np.float32), np.zeros((1, BLOCK), np.float32)
    make_row_stats(0.0).run([stats, dst, x_only_zeros], backend="llvm")
    assert stats[0, 0] == BLOCK


@accy.kernel(out=accy.tensor(i32, 1), x=accy.tensor(i32, 2))
def int_and_bool_rows(k, p):
    R, C = p.x.shape

    @k.for_each_tile(grid=axis("row", R))
    def program(t, pid):
        cols = t.arange(BLOCK)
        x = p.x.load((pid["row"], cols), mask=cols < C, other=3)
        positive = (x > 0).cast(i32)
        p.out.store(pid["row"], t.sum(x * 2, axis=0) + t.sum(positive, axis=0) * 1000)


@pytest.mark.parametrize("backend", ["numpy", "llvm"])
def test_integer_and_bool_tails_count_every_lane(backend):
    x = np.random.default_rng(0).integers(-5, 5, (4, 70)).astype(np.int32)
    out = np.zeros(4, np.int32)
    int_and_bool_rows.run([out, x], backend=backend)
    padded = np.full((4, BLOCK), 3, np.int64)
    padded[:, :70] = x
    np.testing.assert_array_equal(out, (padded * 2).sum(axis=1) + (padded > 0).sum(axis=1) * 1000)


def test_the_host_builds_a_row_s_tiles_only_up_to_their_tails():
    lowering = TileHostLowering(make_row_stats(0.0).graph, Target.host(), 16)
    assert {v.op.opcode for v in lowering.tails} >= {"tile_load", "exp"}
