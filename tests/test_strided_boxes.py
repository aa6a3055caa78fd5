"""Strided boxes: ``load_tile(origin, shape, steps=)`` and ``store_tile(origin, value, steps=)``
read and write every ``steps[d]``-th element along axis d (a pooling stride, a convolution's
dilation), masked at the tensor's edges as a unit-stride box is, on every backend."""

import numpy as np
import pytest

from accy import axis, cdiv, f32, i64, kernel, scalar, tensor
from accy.dsl.types import DTYPES
from accy.errors import TraceError

R, C = 8, 16


def _box_copy(steps, dtype=f32):
    """dst[a, b] = x[oy + a * sy, ox + b * sx] for the box of each program (past the edges: -1)."""

    @kernel(dst=tensor(dtype, 2), x=tensor(dtype, 2), oy=scalar(i64), ox=scalar(i64))
    def box_copy(k, p):
        H, W = p.dst.shape

        @k.for_each_tile(grid=(axis("r", cdiv(H, R)), axis("c", cdiv(W, C))), warps=2)
        def program(t, pid):
            r0, c0 = pid["r"] * R, pid["c"] * C
            sy, sx = steps(p)
            v = p.x.load_tile((p.oy + r0 * sy, p.ox + c0 * sx), (R, C), other=-1, steps=(sy, sx))
            p.dst.store_tile((r0, c0), v)

    return box_copy


def _reference(x, shape, oy, ox, sy, sx, other=-1):
    want = np.full(shape, other, x.dtype)
    for a in range(shape[0]):
        for b in range(shape[1]):
            i, j = oy + a * sy, ox + b * sx
            if 0 <= i < x.shape[0] and 0 <= j < x.shape[1]:
                want[a, b] = x[i, j]
    return want


@pytest.mark.parametrize("sy, sx", [(1, 2), (2, 2), (3, 4), (1, 7), (2, -1), (-3, 3)])
def test_constant_steps_read_every_step_th_element(backend, sy, sx):
    x = np.arange(40 * 60, dtype=np.float32).reshape(40, 60)
    for oy, ox in [(0, 0), (1, 3), (39, 59)]:
        dst = np.zeros((13, 21), np.float32)
        _box_copy(lambda p: (sy, sx)).run([dst, x, oy, ox], backend=backend)
        np.testing.assert_array_equal(dst, _reference(x, dst.shape, oy, ox, sy, sx), err_msg=f"origin {oy, ox}")


def test_run_time_steps_and_a_strided_view(backend):
    @kernel(dst=tensor(f32, 2), x=tensor(f32, 2), oy=scalar(i64), ox=scalar(i64), sy=scalar(i64),
            sx=scalar(DTYPES["i32"]))
    def box_copy(k, p):
        H, W = p.dst.shape

        @k.for_each_tile(grid=(axis("r", cdiv(H, R)), axis("c", cdiv(W, C))), warps=2)
        def program(t, pid):
            r0, c0 = pid["r"] * R, pid["c"] * C
            v = p.x.load_tile((p.oy + r0 * p.sy, p.ox + c0 * p.sx), (R, C), other=-1, steps=(p.sy, p.sx))
            p.dst.store_tile((r0, c0), v)

    base = np.arange(50 * 70, dtype=np.float32).reshape(50, 70)
    for x in (base, base.T[:, ::2]):  # a contiguous tensor, then one whose last stride is not 1
        for sy, sx in [(1, 1), (2, 3), (1, 2)]:
            dst = np.zeros((11, 17), np.float32)
            box_copy.run([dst, x, 2, 1, sy, sx], backend=backend)
            np.testing.assert_array_equal(dst, _reference(x, dst.shape, 2, 1, sy, sx))


@pytest.mark.parametrize("name", ["f16", "i8", "bool", "f64"])
def test_every_element_type(backend, name):
    t = DTYPES[name]
    x = (np.arange(30 * 40) % 7 == 0) if t.is_bool else (np.arange(30 * 40) % 100).astype(t.numpy)
    x = x.reshape(30, 40)
    dst = np.zeros((9, 19), t.numpy)
    other = False if t.is_bool else -1

    @kernel(dst=tensor(t, 2), x=tensor(t, 2))
    def box_copy(k, p):
        @k.for_each_tile(grid=(axis("r", 2), axis("c", 2)), warps=1)
        def program(tb, pid):
            r0, c0 = pid["r"] * R, pid["c"] * C
            v = p.x.load_tile((1 + 3 * r0, 2 * c0), (R, C), other=other, steps=(3, 2))
            p.dst.store_tile((r0, c0), v)

    box_copy.run([dst, x], backend=backend)
    np.testing.assert_array_equal(dst, _reference(x, dst.shape, 1, 0, 3, 2, other))


@pytest.mark.parametrize("sx", [2, 3, 5])
def test_strided_stores_write_only_their_elements(backend, sx):
    @kernel(dst=tensor(f32, 2), x=tensor(f32, 2))
    def scatter(k, p):
        H, W = p.x.shape

        @k.for_each_tile(grid=(axis("r", cdiv(H, R)), axis("c", cdiv(W, C))), warps=2)
        def program(t, pid):
            r0, c0 = pid["r"] * R, pid["c"] * C
            p.dst.store_tile((2 * r0 + 1, sx * c0), p.x.load_tile((r0, c0), (R, C)), steps=(2, sx))

    x = np.random.default_rng(0).standard_normal((13, 19)).astype(np.float32)
    dst = np.full((27, 19 * sx - 2), 7.0, np.float32)
    scatter.run([dst, x], backend=backend)
    want = np.full_like(dst, 7.0)
    rows, cols = np.arange(13) * 2 + 1, np.arange(19) * sx
    keep = cols < dst.shape[1]
    want[np.ix_(rows, cols[keep])] = x[:, keep]
    np.testing.assert_array_equal(dst, want)


def test_a_strided_max_pool_matches_numpy(backend):
    """A 3x3 max-pool with stride 2 and padding 1, the window's offsets unrolled at trace time."""

    @kernel(dst=tensor(f32, 2), x=tensor(f32, 2))
    def max_pool(k, p):
        H, W = p.dst.shape

        @k.for_each_tile(grid=(axis("r", cdiv(H, R)), axis("c", cdiv(W, C))), warps=2)
        def program(t, pid):
            r0, c0 = pid["r"] * R, pid["c"] * C
            best = t.full((R, C), float("-inf"))
            for dy in range(3):
                for dx in range(3):
                    v = p.x.load_tile((2 * r0 + dy - 1, 2 * c0 + dx - 1), (R, C), other=float("-inf"),
                                      steps=(2, 2))
                    best = t.maximum(best, v)
            p.dst.store_tile((r0, c0), best)

    x = np.random.default_rng(2).standard_normal((37, 45)).astype(np.float32)
    out = ((37 + 2 - 3) // 2 + 1, (45 + 2 - 3) // 2 + 1)
    padded = np.pad(x, 1, constant_values=-np.inf)
    want = np.max([padded[dy:dy + 2 * out[0]:2, dx:dx + 2 * out[1]:2] for dy in range(3) for dx in range(3)], axis=0)
    dst = np.zeros(out, np.float32)
    max_pool.run([dst, x], backend=backend)
    np.testing.assert_array_equal(dst, want)


def test_bad_steps_are_trace_errors():
    for steps, message in [((1,), r"steps gives 1 value for a box of 2 dimensions"),
                           ((1, 0), r"each step is a non-zero Python int or an integer scalar, got 0"),
                           ((1, 1.5), r"got 1\.5"), ((True, 1), r"got True")]:
        @kernel(dst=tensor(f32, 2), x=tensor(f32, 2))
        def bad(k, p):
            @k.for_each_tile(grid=axis("r", 1), warps=1)
            def program(t, pid):
                p.dst.store_tile((0, 0), p.x.load_tile((0, 0), (4, 4), steps=steps))

        with pytest.raises(TraceError, match=message):
            bad.graph
