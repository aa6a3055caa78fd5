"""Triton's spellings a port brings, taken as Triton means them (t.arange(start, end), x.to,
keep_dims, tie_break_left, can_reorder, t.cdiv, randn4x), and the ones accy has no op for
answered with what to write instead."""

import numpy as np
import pytest

from accy import axis, f32, i32, index, kernel, tensor
from accy.errors import TraceError, UnknownOpError

from test_random import philox, uniform


def test_the_spellings_run_as_tritons(backend):
    @kernel(ints=tensor(i32, 1), sums=tensor(f32, 2), best=tensor(index, 1), normal=tensor(f32, 2), x=tensor(f32, 2))
    def spelled(k, p):
        @k.for_each_tile(grid=axis("i", 1), warps=1)
        def program(t, pid):
            x = p.x.load_tile((0, 0), (4, 8))
            p.ints.store_tile((0,), t.arange(3, 11).to(i32) + t.cdiv(t.arange(8), 3).to(i32))
            row_sums = t.sum(x, axis=1, keep_dims=True) + t.max(x, axis=1, keep_dims=True)
            p.sums.store_tile((0, 0), t.cat(row_sums.broadcast_to((4, 4)), x[:, 4:], 1, can_reorder=True))
            p.best.store_tile((0,), t.argmax(x, 1, tie_break_left=True))
            for j, n in enumerate(t.randn4x(7, t.arange(8))):
                p.normal.store((j, t.arange(8)), n)

    x = np.random.default_rng(5).integers(0, 5, (4, 8)).astype(np.float32)
    ints, sums, best, normal = np.zeros(8, np.int32), np.zeros((4, 8), np.float32), np.zeros(4, np.int64), \
        np.zeros((4, 8), np.float32)
    spelled.run([ints, sums, best, normal, x], backend=backend)
    np.testing.assert_array_equal(ints, np.arange(3, 11) + -(-np.arange(8) // 3))
    row = x.sum(axis=1, keepdims=True) + x.max(axis=1, keepdims=True)
    np.testing.assert_array_equal(sums, np.concatenate([np.broadcast_to(row, (4, 4)), x[:, 4:]], axis=1))
    np.testing.assert_array_equal(best, x.argmax(axis=1))
    words = philox(7, np.arange(8, dtype=np.uint64), np.zeros(8, np.uint64))
    for j, (a, b) in enumerate([(0, 1), (0, 1), (2, 3), (2, 3)]):
        u1 = np.maximum(uniform(words[a]), np.float32(1e-7)).astype(np.float64)
        angle = (uniform(words[b]) * np.float32(6.283185307179586)).astype(np.float64)
        turn = np.cos(angle) if j % 2 == 0 else np.sin(angle)
        np.testing.assert_allclose(normal[j], np.sqrt(-2 * np.log(u1)) * turn, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("body, message", [
    (lambda t, p, x: x + t.program_id(0), r"no op named 'program_id'.*pid\[\"name\"\]"),
    (lambda t, p, x: p.x + t.arange(8), r"'x' is a kernel parameter, not a pointer: read its elements with "
                                         r"p\.x\.load\(offsets"),
    (lambda t, p, x: x[:p.x.shape[0]], r"\[:n\]: tile slices are static"),
    (lambda t, p, x: t.argmax(x, 0, tie_break_left=False), r"tie_break_left=False is not there"),
    (lambda t, p, x: x + t.arange(2, p.x.shape[0]), r"arange\(start, end\): both are Python ints"),
])
def test_what_a_triton_spelling_without_an_op_says(body, message):
    @kernel(out=tensor(f32, 1), x=tensor(f32, 1))
    def ported(k, p):
        @k.for_each_tile(grid=axis("i", 1))
        def program(t, pid):
            p.out.store_tile((0,), body(t, p, p.x.load_tile((0,), (8,))))

    with pytest.raises((TraceError, UnknownOpError), match=message):
        ported.graph
