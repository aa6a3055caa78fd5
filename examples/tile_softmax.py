"""Row softmax as a tile program: each program normalises 4 rows, 256 columns at a time.

A row of any length is read in tiles of 4x256. The first loop keeps, per row, the
running maximum ``m`` and the sum ``s`` of exp(x - m) (when a tile raises the maximum,
the sum so far is rescaled by exp(m_old - m_new): the "online" softmax); the second
loop writes exp(x - m) / s. Positions past the right edge load as -inf, so they add
exp(-inf) = 0 to the sum, and are never stored. One compiled kernel serves every shape.
Run with ``python examples/tile_softmax.py``.
"""

import numpy as np

from accy import axis, cdiv, f32, kernel, tensor

ROWS, COLS = 4, 256


def make_softmax(rows: int = ROWS, cols: int = COLS, warps: int = 4):
    """dst = softmax(x, axis=1) for 2-D f32 tensors, ``rows`` rows per program, ``cols``
    columns per tile."""

    @kernel(dst=tensor(f32, 2), x=tensor(f32, 2))
    def tile_softmax(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=(axis("r", cdiv(R, rows)),), warps=warps)
        def body(t, pid):
            r0 = pid["r"] * rows

            def stats(t, c0, carry):
                m, s = carry
                x = p.x.load_tile((r0, c0), (rows, cols), other=float("-inf"))
                m_new = t.maximum(m, t.max(x, axis=1))
                s = s * t.exp(m - m_new) + t.sum(t.exp(x - m_new[:, None]), axis=1)
                return m_new, s

            start = (t.full((rows,), float("-inf"), f32), t.zeros((rows,), f32))
            m, s = t.fold_range(0, C, cols, start, stats)

            def write(t, c0):
                x = p.x.load_tile((r0, c0), (rows, cols))
                p.dst.store_tile((r0, c0), t.exp(x - m[:, None]) / s[:, None])

            t.for_range(0, C, cols, write)

    return tile_softmax


tile_softmax = make_softmax()
PROGRAMS = [tile_softmax]


def reference(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main() -> None:
    rng = np.random.default_rng(0)
    worst = {}
    for rows, cols in ((24, 100), (7, 1000), (37, 781)):
        x = (rng.standard_normal((rows, cols)) * 10).astype(np.float32)
        expected = reference(x)
        for backend in ("numpy", "llvm"):
            dst = np.full((rows, cols), np.nan, np.float32)
            tile_softmax.run([dst, x], backend=backend)
            np.testing.assert_allclose(dst, expected, rtol=1e-5, atol=1e-7, err_msg=backend)
            worst[backend] = max(worst.get(backend, 0.0), float(np.abs(dst - expected).max()))
    summary = ", ".join(f"{b} max abs err {e:.2g}" for b, e in worst.items())
    print(f"tile_softmax 24x100, 7x1000 and 37x781, 4 rows a program: matches NumPy ({summary})")


if __name__ == "__main__":
    main()
