"""The numpy backend's tile interpreter on tensor accesses as Triton users write them (a row or a box
of index tiles and a mask, ``p.x.load((rows, cols), mask=...)``): the shape guard each access puts
on its offsets is held unevaluated (accy/runtime/interpreter/tile_memory.py's Sum, Select), so a
masked row or box is copied through a strided view of the tensor, never gathered element by
element; an active index outside the shape still raises naming the dimension and the program,
and masked-off lanes outside it are never read."""

from __future__ import annotations

import numpy as np
import pytest

import accy
from accy import axis, cdiv, f32, index
from accy.errors import OutOfBoundsError
from accy.runtime.interpreter import tile_memory

pytestmark = pytest.mark.filterwarnings("error")


@pytest.fixture
def no_gathers(monkeypatch):
    """Fails the test if an access gathers element by element or forms a guarded offsets tile."""
    def refuse(*args, **kwargs):
        raise AssertionError("an access evaluated its offsets instead of copying boxes")

    monkeypatch.setattr(tile_memory.TileMemory, "_gather", refuse)
    monkeypatch.setattr(tile_memory.Select, "evaluate", refuse)


def make_softmax(block: int):
    @accy.kernel(dst=accy.tensor(f32, 2), x=accy.tensor(f32, 2))
    def softmax(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=axis("row", R))
        def program(t, pid):
            row = pid["row"]
            cols = t.arange(block)
            mask = cols < C
            x = p.x.load((row, cols), mask=mask, other=float("-inf"))
            e = t.exp(x - t.max(x, axis=0))
            p.dst.store((row, cols), e / t.sum(e, axis=0), mask=mask)

    return softmax


def make_box_copy(box: int, widen: int = 0):
    """dst = x + 1 in ``box`` x ``box`` programs; ``widen``: the mask lets that many columns past
    the tensor's through (an active index outside its shape)."""

    @accy.kernel(dst=accy.tensor(f32, 2), x=accy.tensor(f32, 2))
    def box_copy(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=(axis("r", cdiv(R, box)), axis("c", cdiv(C, box))))
        def program(t, pid):
            rows, cols = pid["r"] * box + t.arange(box), pid["c"] * box + t.arange(box)
            mask = (rows[:, None] < R) & (cols[None, :] < C + widen)
            x = p.x.load((rows[:, None], cols[None, :]), mask=mask)
            p.dst.store((rows[:, None], cols[None, :]), x + 1.0, mask=mask)

    return box_copy


def make_column_sum(box_rows: int, box_cols: int):
    @accy.kernel(out=accy.tensor(f32, 1), x=accy.tensor(f32, 2))
    def column_sum(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=axis("c", cdiv(C, box_cols)))
        def program(t, pid):
            cols = pid["c"] * box_cols + t.arange(box_cols)

            def step(t, r0, acc):
                rows = r0 + t.arange(box_rows)
                mask = (rows[:, None] < R) & (cols[None, :] < C)
                return acc + t.sum(p.x.load((rows[:, None], cols[None, :]), mask=mask, other=0.0), axis=0)

            p.out.store(cols, t.fold_range(0, R, box_rows, t.zeros((box_cols,), f32), step), mask=cols < C)

    return column_sum


def test_a_masked_row_is_copied_not_gathered(no_gathers):
    x = np.random.default_rng(0).standard_normal((37, 50)).astype(np.float32)
    dst = np.zeros_like(x)
    make_softmax(64).run([dst, x], backend="numpy")
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(dst, e / e.sum(axis=1, keepdims=True), rtol=1e-6)


@pytest.mark.parametrize("shape", [(64, 96), (70, 45), (5, 130)])
def test_masked_boxes_at_the_edges_are_copied_not_gathered(shape, no_gathers):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    dst = np.zeros_like(x)
    make_box_copy(32).run([dst, x], backend="numpy")
    np.testing.assert_array_equal(dst, x + 1)


def test_a_view_with_steps_is_read_through_its_strides(no_gathers):
    base = np.random.default_rng(2).standard_normal((40, 90)).astype(np.float32)
    x = base[::2, ::3]  # (20, 30), strides of 2 rows and 3 elements
    dst = np.zeros((20, 30), np.float32)
    make_box_copy(16).run([dst, x], backend="numpy")
    np.testing.assert_array_equal(dst, x + 1)


def test_boxes_in_a_vectorised_fold_are_copied_not_gathered(no_gathers):
    x = np.random.default_rng(3).standard_normal((100, 40)).astype(np.float32)
    out = np.zeros(40, np.float32)
    make_column_sum(16, 16).run([out, x], backend="numpy")
    np.testing.assert_allclose(out, x.sum(axis=0), rtol=1e-5, atol=1e-5)


def test_an_active_column_outside_the_shape_names_dimension_1_and_the_program_and_writes_nothing():
    x = np.ones((40, 40), np.float32)
    dst = np.zeros_like(x)
    with pytest.raises(OutOfBoundsError, match=r"load from tensor 'x': the index in dimension 1 is outside its shape "
                                               r"\(program r=0 c=1\)"):
        make_box_copy(32, widen=1).run([dst, x], backend="numpy")
    assert (dst == 0).all()


def test_an_active_index_outside_the_shape_but_inside_the_buffer_still_raises():
    # x is a view of a wider array: column 30 is memory the buffer holds, yet outside x's shape
    base = np.ones((32, 40), np.float32)
    dst = np.zeros((32, 30), np.float32)
    with pytest.raises(OutOfBoundsError, match=r"the index in dimension 1 is outside its shape \(program r=0 c=0\)"):
        make_box_copy(32, widen=1).run([dst, base[:, :30]], backend="numpy")
    assert (dst == 0).all()


@accy.kernel(y=accy.tensor(f32, 2), x=accy.tensor(f32, 2))
def rows_past_the_shape(k, p):
    @k.for_each_tile(grid=axis("i", 2))
    def body(t, pid):
        r = pid["i"] * 4 + t.arange(4)
        c = t.arange(8)
        p.y.store((r[:, None], c[None, :]), p.x.load((r[:, None], c[None, :])))  # unmasked: rows 6 and 7 are out


def test_an_unmasked_row_outside_the_shape_names_dimension_0_and_writes_nothing():
    x, y = np.ones((6, 8), np.float32), np.zeros((8, 8), np.float32)
    with pytest.raises(OutOfBoundsError, match=r"load from tensor 'x': the index in dimension 0 is outside its shape "
                                               r"\(program i=1\)"):
        rows_past_the_shape.run([y, x], backend="numpy")
    assert (y == 0).all()


@accy.kernel(out=accy.dynamic_buffer(index))
def equal_sums(k, p):
    @k.for_each_tile(grid=axis("i", 1))
    def body(t, pid):
        big = t.arange(4) * (2**62)  # 0, 2**62, 2**63 (wrapped), 3 * 2**62 (wrapped)
        four = big + big + big + big  # 2**64 wraps to 0 at element 1
        cols = t.arange(4)
        diff = (cols + 1) - (t.zeros((4,), index) + 2)  # terms of both signs: 0 at element 1
        p.out.store(cols, t.where(four == 0, 1, 0) + t.where(diff == 0, 10, 0))


def test_index_equality_of_sums_that_wrap_or_mix_signs_is_the_wrapped_comparison():
    out = np.zeros(4, np.int64)
    equal_sums.run([out], backend="numpy")
    four = (np.arange(4, dtype=np.uint64) * np.uint64(2**62) * np.uint64(4)).astype(np.int64)  # wraps mod 2**64
    np.testing.assert_array_equal(out, (four == 0) * 1 + (np.arange(4) == 1) * 10)


@accy.kernel(out=accy.dynamic_buffer(index))
def broadcast_one(k, p):
    @k.for_each_tile(grid=axis("i", 1))
    def body(t, pid):
        p.out.store(t.arange(8), t.arange(1) + t.zeros((8,), index))  # arange(1) broadcast to 8: all 0


def test_an_index_tile_of_one_element_broadcast_is_the_same_everywhere():
    out = np.full(8, -1, np.int64)
    broadcast_one.run([out], backend="numpy")
    np.testing.assert_array_equal(out, np.zeros(8, np.int64))


@pytest.mark.parametrize("name", ["exp", "tanh", "sqrt"])
def test_a_math_function_on_a_large_f32_tile_rounds_once_from_float64_in_every_block(name):
    from accy.runtime.interpreter import numerics
    from accy.runtime.interpreter.pointwise import EVAL

    rng = np.random.default_rng(7)
    x = (np.abs(rng.standard_normal((3, 5 * numerics._BLOCK // 4 + 3))) * 4).astype(np.float32)
    x[0, :7] = [np.inf, -np.inf, np.nan, 0.0, -0.0, 88.7, 1e-40]
    for arg in (x, x[:, ::2], x.T):  # contiguous, strided, transposed: more elements than one block
        with np.errstate(all="ignore"):  # as the interpreter runs: NaN is a result, not a warning
            got = EVAL[name](arg)
            want = numerics.MATH64[name](arg.astype(np.float64)).astype(np.float32)
        assert got.shape == arg.shape and got.dtype == np.float32
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@accy.kernel(dst=accy.tensor(f32, 2), x=accy.tensor(f32, 2))
def ragged_rows(k, p):
    """Each row's first (row * row) % 37 elements plus one, doubled: a box of its own for most rows."""
    R, C = p.x.shape

    @k.for_each_tile(grid=axis("row", R))
    def program(t, pid):
        row = pid["row"]
        cols = t.arange(64)
        mask = cols < (row * row) % 37 + 1
        p.dst.store((row, cols), p.x.load((row, cols), mask=mask, other=-1.0) * 2.0, mask=mask)


@pytest.mark.parametrize("rows", [5, 40], ids=["a box per program", "more boxes than are copied"])
def test_ragged_boxes_in_irregular_programs_load_and_store_only_their_elements(rows):
    x = np.random.default_rng(8).standard_normal((rows, 64)).astype(np.float32)
    dst = np.full_like(x, 7.0)
    ragged_rows.run([dst, x], backend="numpy")
    keep = np.arange(64)[None, :] < (np.arange(rows)[:, None] ** 2 % 37 + 1)
    np.testing.assert_array_equal(dst, np.where(keep, x * 2, 7.0))


@accy.kernel(y=accy.tensor(f32, 2), x=accy.tensor(f32, 2))
def rows_past_the_shape_in_a_branch(k, p):
    @k.for_each_tile(grid=axis("i", 3))
    def body(t, pid):
        r = pid["i"] * 4 + t.arange(4)
        c = t.arange(8)
        # unmasked: program 2's rows 8..11 are outside the shape, but it takes the other branch
        t.if_(pid["i"] < 2, lambda t: p.y.store((r[:, None], c[None, :]), p.x.load((r[:, None], c[None, :]))))


def test_programs_outside_the_shape_that_do_not_run_the_access_raise_nothing():
    x = np.random.default_rng(9).standard_normal((8, 8)).astype(np.float32)
    y = np.zeros((8, 8), np.float32)
    rows_past_the_shape_in_a_branch.run([y, x], backend="numpy")
    np.testing.assert_array_equal(y, x)
    with pytest.raises(OutOfBoundsError, match=r"dimension 0 is outside its shape \(program i=1\)"):
        rows_past_the_shape_in_a_branch.run([np.zeros((6, 8), np.float32), x[:6]], backend="numpy")


@accy.kernel(dst=accy.tensor(f32, 2), x=accy.tensor(f32, 2))
def bump_in_place(k, p):
    R, C = p.x.shape

    @k.for_each_tile(grid=axis("row", R))
    def program(t, pid):
        cols = t.arange(16)
        x = p.x.load((pid["row"], cols), mask=cols < C)  # whole rows: a box each
        p.x.store((pid["row"], cols), x + 1.0, mask=cols < C)
        p.dst.store((pid["row"], cols), x, mask=cols < C)  # the values loaded, before the store


def test_a_load_from_a_buffer_the_launch_writes_keeps_the_values_it_read():
    x = np.random.default_rng(10).standard_normal((6, 16)).astype(np.float32)
    before, dst = x.copy(), np.zeros_like(x)
    bump_in_place.run([dst, x], backend="numpy")
    np.testing.assert_array_equal(dst, before)
    np.testing.assert_array_equal(x, before + 1)
