"""The numpy backend's rows masked at their end (``cols < C``, a scalar ``other``) held as their real
columns and a tail value (accy/runtime/interpreter/tile_tails.py): every result bit for bit the
padded array's, which the interpreter builds when the form is switched off here."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import accy
from accy import axis, bf16, f32, i32, i64
from accy.runtime.interpreter import tile_tails
from accy.runtime.interpreter.tile_memory import TileMemory

BLOCK = 16


@pytest.fixture
def counted(monkeypatch):
    """How many reductions, arg reductions and stores the form served (not its fallbacks)."""
    counts = {"reduce": 0, "argreduce": 0, "store": 0}
    for name, method in (("reduce", "reduce"), ("argreduce", "argreduce"), ("store", "store_values")):
        original = getattr(tile_tails.TailOps, method)

        def wrapped(self, *args, _original=original, _name=name):
            result = _original(self, *args)
            counts[_name] += result is not None
            return result

        monkeypatch.setattr(tile_tails.TailOps, method, wrapped)
    return counts


def padded_run(monkeypatch, kernel, arrays):
    """``kernel`` with every masked load's padded array built at the load (the form switched off)."""
    original = TileMemory.op_tile_load

    def load(self, op):
        original(self, op)
        run = self.interpreter
        held = run.lazy.pop(op.result, None)
        if held is not None:
            run.env[op.result] = held.evaluate()

    with monkeypatch.context() as m:
        m.setattr(TileMemory, "op_tile_load", load)
        kernel.run(arrays, backend="numpy")


def same_bits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    bits = np.dtype(f"u{a.itemsize}")
    np.testing.assert_array_equal(a.view(bits), b.view(bits))


def agree(monkeypatch, kernel, outputs, inputs):
    lazy = [o.copy() for o in outputs]
    kernel.run(lazy + inputs, backend="numpy")
    padded = [o.copy() for o in outputs]
    padded_run(monkeypatch, kernel, padded + inputs)
    for a, b in zip(lazy, padded):
        same_bits(a, b)
    return lazy


def make_float(dtype, other):
    @accy.kernel(stats=accy.tensor(dtype, 2), sums=accy.tensor(f32, 1), args=accy.tensor(i64, 2),
                 dst=accy.tensor(dtype, 2), x=accy.tensor(dtype, 2))
    def floats(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=axis("row", R))
        def program(t, pid):
            row = pid["row"]
            cols = t.arange(BLOCK)
            mask = cols < C
            x = p.x.load((row, cols), mask=mask, other=other)
            p.stats.store((row, 0), t.max(x, axis=0))
            p.stats.store((row, 1), t.min(x, axis=0))
            p.args.store((row, 0), t.argmax(x, axis=0).cast(i64))
            p.args.store((row, 1), t.argmin(x, axis=0).cast(i64))
            y = x.cast(f32)
            e = t.exp(y - t.max(y, axis=0))
            p.sums.store(row, t.sum(e, axis=0))  # a float sum: the padded array's
            p.args.store((row, 2), t.argmax(-y * 2.0, axis=0).cast(i64))
            p.args.store((row, 3), t.argmin(y / (y - 1.0), axis=0).cast(i64))  # 0 / 0 in a zero tail
            p.dst.store((row, cols), (e * 3.0 / t.sum(e, axis=0)).cast(dtype), mask=mask)

    return floats


SPECIALS = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -1.0]


def float_rows(cols: int, dtype) -> np.ndarray:
    rng = np.random.default_rng(cols)
    rows = [rng.standard_normal(cols), np.zeros(cols), -np.zeros(cols), np.full(cols, -np.inf),
            np.full(cols, np.inf), np.full(cols, 2.0), np.round(rng.standard_normal(cols))]  # ties
    for s in SPECIALS:
        for where in ({0}, {cols - 1}, {0, cols - 1}, {cols // 2}):
            r = np.round(rng.standard_normal(cols))
            for w in where:
                r[w] = s
            rows.append(r)
    mixed = rng.choice(SPECIALS, (20, cols))
    return np.concatenate([np.array(rows), mixed]).astype(np.float32).astype(dtype)


@pytest.mark.parametrize("dtype", [f32, bf16])
@pytest.mark.parametrize("other", [float("-inf"), float("inf"), float("nan"), -0.0, 0.0, 1.0])
@pytest.mark.parametrize("cols", [0, 1, 7, BLOCK - 1, BLOCK])
def test_float_rows_agree(monkeypatch, counted, dtype, other, cols):
    np_dtype = np.float32 if dtype is f32 else ml_dtypes.bfloat16
    x = float_rows(max(cols, 1), np_dtype)[:, :cols]
    x = np.ascontiguousarray(x)
    rows = x.shape[0]
    outputs = [np.zeros((rows, 2), np_dtype), np.zeros(rows, np.float32), np.zeros((rows, 4), np.int64),
               np.zeros((rows, cols), np_dtype)]
    agree(monkeypatch, make_float(dtype, other), outputs, [x])
    if 0 < cols < BLOCK:  # the form held the row (C = 0 and C = BLOCK have no tail to hold)
        assert counted["argreduce"] and counted["store"]


def make_int(other):
    @accy.kernel(stats=accy.tensor(i32, 2), args=accy.tensor(i64, 2), dst=accy.tensor(i32, 2),
                 x=accy.tensor(i32, 2))
    def ints(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=axis("row", R))
        def program(t, pid):
            row = pid["row"]
            cols = t.arange(BLOCK)
            mask = cols < C
            x = p.x.load((row, cols), mask=mask, other=other)
            p.stats.store((row, 0), t.max(x, axis=0))
            p.stats.store((row, 1), t.min(x, axis=0))
            p.stats.store((row, 2), t.sum(x, axis=0))
            p.stats.store((row, 3), t.prod(x, axis=0))
            p.stats.store((row, 4), t.xor_sum(x, axis=0))
            p.stats.store((row, 5), t.sum(x * x - t.max(x, axis=0), axis=0))
            p.args.store((row, 0), t.argmax(x, axis=0).cast(i64))
            p.args.store((row, 1), t.argmin(x, axis=0).cast(i64))
            positive = (x > 0).cast(i32)  # through a bool tile with a tail
            p.args.store((row, 2), t.argmax(positive, axis=0).cast(i64))
            p.args.store((row, 3), t.argmin(positive, axis=0).cast(i64))
            p.stats.store((row, 6), t.sum(t.where(x > 1, positive, x), axis=0))
            p.dst.store((row, cols), x * 7 + 1, mask=mask)

    return ints


@pytest.mark.parametrize("other", [0, 1, -1, 3, 2**31 - 1, -(2**31)])
@pytest.mark.parametrize("cols", [0, 1, 5, BLOCK - 1, BLOCK])
def test_int_rows_agree(monkeypatch, counted, other, cols):
    rng = np.random.default_rng(cols)
    x = np.concatenate([rng.integers(-3, 4, (30, cols)), rng.integers(-(2**31), 2**31, (10, cols)),
                        np.full((2, cols), 2**31 - 1), np.zeros((2, cols), np.int64)]).astype(np.int32)
    rows = x.shape[0]
    outputs = [np.zeros((rows, 7), np.int32), np.zeros((rows, 4), np.int64), np.zeros((rows, cols), np.int32)]
    agree(monkeypatch, make_int(other), outputs, [x])
    if 0 < cols < BLOCK:
        assert counted["reduce"] and counted["argreduce"] and counted["store"]


def test_store_past_the_real_columns_writes_the_tail(monkeypatch):
    """A store whose mask reaches past the loaded row's end writes the tail value there."""

    @accy.kernel(dst=accy.tensor(f32, 2), x=accy.tensor(f32, 2))
    def widen(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=axis("row", R))
        def program(t, pid):
            row = pid["row"]
            cols = t.arange(BLOCK)
            x = p.x.load((row, cols), mask=cols < C, other=-0.0)
            p.dst.store((row, cols), x + 1.0, mask=cols < C + 3)

    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    (dst,) = agree(monkeypatch, widen, [np.zeros((2, 9), np.float32)], [x])
    np.testing.assert_array_equal(dst[:, 6:], 1.0)
    np.testing.assert_array_equal(dst[:, :6], x + 1)


def test_one_program_and_a_written_buffer(monkeypatch):
    """One program (its box the same in every program), and a load from a buffer the launch then
    writes (its real columns a copy, not a view a later store would change)."""

    @accy.kernel(x=accy.tensor(f32, 2), out=accy.tensor(i64, 1))
    def inplace(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=axis("row", R))
        def program(t, pid):
            row = pid["row"]
            cols = t.arange(BLOCK)
            x = p.x.load((row, cols), mask=cols < C, other=float("-inf"))
            p.x.store((row, cols), x * 0.0, mask=cols < C)
            p.out.store(row, t.argmax(x, axis=0).cast(i64))

    for rows in (1, 3):
        x = np.random.default_rng(rows).standard_normal((rows, 10)).astype(np.float32)
        x_lazy, out = agree(monkeypatch, inplace, [x, np.zeros(rows, np.int64)], [])
        np.testing.assert_array_equal(out, np.argmax(x, axis=1))


def test_two_dimensional_tiles_and_shape_ops(monkeypatch, counted):
    """A box of rows masked at its columns' end, reduced along either axis; a row reshaped,
    broadcast to several rows and transposed (the last two keep or drop the form)."""
    ROWS = 4

    @accy.kernel(stats=accy.tensor(f32, 2), rows_out=accy.tensor(f32, 2), x=accy.tensor(f32, 2))
    def boxes(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=axis("box", R // ROWS))
        def program(t, pid):
            rows = pid["box"] * ROWS + t.arange(ROWS)
            cols = t.arange(BLOCK)
            x = p.x.load((rows[:, None], cols[None, :]), mask=cols[None, :] < C, other=float("-inf"))
            p.rows_out.store((rows, 0), t.max(x, axis=1))
            p.rows_out.store((rows, 1), t.argmax(x, axis=1).cast(f32))
            p.rows_out.store((rows, 2), t.max(t.trans(x), axis=0))
            row = p.x.load((pid["box"] * ROWS, cols), mask=cols < C, other=0.5)
            wide = t.broadcast_to(t.reshape(row, (1, BLOCK)), (ROWS, BLOCK)) + x
            p.stats.store((pid["box"], cols), t.max(wide, axis=0), mask=cols < BLOCK)
            p.stats.store((pid["box"], BLOCK), t.min(t.max(wide, axis=1), axis=0))

    rng = np.random.default_rng(3)
    for cols, nan in ((1, False), (9, False), (9, True)):
        x = np.round(rng.standard_normal((3 * ROWS, cols)) * 2).astype(np.float32)
        if nan:  # a NaN maximum: the padded array's (which NaN is NumPy's to say)
            x[1, 0] = np.nan
        outputs = [np.zeros((3, BLOCK + 1), np.float32), np.zeros((3 * ROWS, 3), np.float32)]
        agree(monkeypatch, boxes, outputs, [x])
        assert counted["reduce"] and counted["argreduce"]
