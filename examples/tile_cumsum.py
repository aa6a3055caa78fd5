"""Row cumsum as a tile program: each program scans 4 rows, 256 columns at a time.

``t.cumsum(x, axis=1)`` scans one tile; the running total of the row so far, carried by
``fold_range``, is added to every element of the next tile. The same kernel scans i32
rows exactly (wrapping as int32 does) and f32 rows within the float bound for a sum of
j + 1 terms. Run with ``python examples/tile_cumsum.py``.
"""

import numpy as np

from accy import axis, cdiv, f32, i32, kernel, tensor

ROWS, COLS = 4, 256


def make_cumsum(dtype=f32, rows: int = ROWS, cols: int = COLS, warps: int = 4):
    """dst = np.cumsum(x, axis=1) for 2-D tensors of ``dtype``."""

    name = "tile_cumsum" if dtype == f32 else f"tile_cumsum_{dtype}"

    @kernel(name, dst=tensor(dtype, 2), x=tensor(dtype, 2))
    def tile_cumsum(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=(axis("r", cdiv(R, rows)),), warps=warps)
        def body(t, pid):
            r0 = pid["r"] * rows

            def step(t, c0, carry):
                x = p.x.load_tile((r0, c0), (rows, cols))  # zeros past the edge: the total is unchanged
                p.dst.store_tile((r0, c0), t.cumsum(x, axis=1) + carry[:, None])
                return carry + t.sum(x, axis=1)

            t.fold_range(0, C, cols, t.zeros((rows,), dtype), step)

    return tile_cumsum


tile_cumsum = make_cumsum(f32)
tile_cumsum_i32 = make_cumsum(i32)
PROGRAMS = [tile_cumsum, tile_cumsum_i32]


def sum_bound(x: np.ndarray) -> np.ndarray:
    """How far an f32 running sum may be from the exact one at column j: gamma_{j+1} * sum |x[:j+1]|."""
    u = 2.0 ** -24
    n = np.arange(1, x.shape[1] + 1)
    return n * u / (1 - n * u) * np.cumsum(np.abs(x.astype(np.float64)), axis=1)


def main() -> None:
    rng = np.random.default_rng(0)
    worst = 0.0
    for rows, cols in ((9, 100), (6, 1000)):
        x = rng.standard_normal((rows, cols), dtype=np.float32)
        xi = rng.integers(-2**31, 2**31, (rows, cols), dtype=np.int64).astype(np.int32)  # wraps
        for backend in ("numpy", "llvm"):
            dst = np.full((rows, cols), np.nan, np.float32)
            tile_cumsum.run([dst, x], backend=backend)
            error = np.abs(dst - np.cumsum(x.astype(np.float64), axis=1)) / sum_bound(x)
            assert error.max() <= 1.0, f"f32 cumsum on {backend}: {error.max():.3g}x the bound"
            worst = max(worst, float(error.max()))
            dst = np.zeros((rows, cols), np.int32)
            tile_cumsum_i32.run([dst, xi], backend=backend)
            np.testing.assert_array_equal(dst, np.cumsum(xi, axis=1, dtype=np.int32), err_msg=backend)
    print(f"tile_cumsum of 9x100 and 6x1000 rows: matches NumPy (numpy and llvm; i32 exactly, "
          f"f32 within {worst:.2g}x the gamma_n bound)")


if __name__ == "__main__":
    main()
