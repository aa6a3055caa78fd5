"""Row argmax as a tile program: each program finds the largest element of 4 rows,
reading 256 columns at a time.

Each tile's maximum and its position (``t.max`` and ``t.argmax`` along the rows: the
first of equal elements, and the first NaN if there is one, as NumPy) are merged into the
running best: a tile replaces it only if its maximum is strictly larger, or is the row's
first NaN, so ties keep the lowest column, exactly as ``np.argmax(x, axis=1)``.
Positions past the right edge load as -inf, after every real column, so they never win
a tie. Run with ``python examples/tile_argmax.py``.
"""

import numpy as np

from accy import axis, cdiv, f32, i64, index, kernel, tensor

ROWS, COLS = 4, 256


def make_argmax(rows: int = ROWS, cols: int = COLS, warps: int = 4):
    """out[r] = np.argmax(x[r]) for a 2-D f32 tensor, as i64."""

    @kernel(out=tensor(i64, 1), x=tensor(f32, 2))
    def tile_argmax(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=(axis("r", cdiv(R, rows)),), warps=warps)
        def body(t, pid):
            r0 = pid["r"] * rows

            def step(t, c0, best):
                value, where = best
                x = p.x.load_tile((r0, c0), (rows, cols), other=float("-inf"))
                top, at = t.max(x, axis=1), t.argmax(x, axis=1) + c0
                better = (top > value) | ((top != top) & (value == value))  # larger, or the first NaN
                return t.where(better, top, value), t.where(better, at, where)

            start = (t.full((rows,), float("-inf"), f32), t.zeros((rows,), index))
            _, where = t.fold_range(0, C, cols, start, step)
            p.out.store_tile((r0,), where.cast(i64))

    return tile_argmax


tile_argmax = make_argmax()
PROGRAMS = [tile_argmax]


def main() -> None:
    rng = np.random.default_rng(0)
    for rows, cols in ((9, 100), (6, 1000), (5, 700)):
        x = rng.integers(-20, 20, (rows, cols)).astype(np.float32)  # many ties
        x[1, 300 % cols] = np.nan  # the first NaN wins, as in NumPy
        x[2, 5:] = np.inf
        x[3] = -np.inf  # all equal: column 0
        for backend in ("numpy", "llvm"):
            out = np.full(rows, -7, np.int64)
            tile_argmax.run([out, x], backend=backend)
            np.testing.assert_array_equal(out, np.argmax(x, axis=1), err_msg=backend)
    print("tile_argmax of 9x100, 6x1000 and 5x700 with ties, NaN and infinities: matches NumPy "
          "(numpy and llvm, exactly)")


if __name__ == "__main__":
    main()
