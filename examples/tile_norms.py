"""Layer norm and RMSNorm over rows as tile programs: each program normalises 4 rows,
256 columns at a time.

Layer norm makes three passes over its rows: the sum (for the mean), the sum of squared
deviations from the mean (for the variance: two passes keep it accurate where
E[x^2] - E[x]^2 would cancel), and the write of (x - mean) * rstd * w + b. RMSNorm makes
two: the sum of squares, and the write of x * rstd * w. A column mask keeps the padding
past the right edge (which ``load_tile`` reads as 0) out of the variance, where x - mean
would not be 0. Run with ``python examples/tile_norms.py``.
"""

import numpy as np

from accy import axis, cdiv, f32, kernel, scalar, tensor

ROWS, COLS = 4, 256


def make_layer_norm(rows: int = ROWS, cols: int = COLS, warps: int = 4):
    """y = (x - mean) / sqrt(var + eps) * w + b along each row of a 2-D f32 tensor."""

    @kernel(y=tensor(f32, 2), x=tensor(f32, 2), w=tensor(f32, 1), b=tensor(f32, 1), eps=scalar(f32))
    def tile_layer_norm(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=(axis("r", cdiv(R, rows)),), warps=warps)
        def body(t, pid):
            r0 = pid["r"] * rows
            n = t.cast(C, f32)

            def add(t, c0, total):
                return total + t.sum(p.x.load_tile((r0, c0), (rows, cols)), axis=1)

            mean = t.fold_range(0, C, cols, t.zeros((rows,), f32), add) / n

            def add_squares(t, c0, total):
                inside = c0 + t.arange(cols) < C  # which columns are inside the row
                d = t.where(inside[None, :], p.x.load_tile((r0, c0), (rows, cols)) - mean[:, None], 0.0)
                return total + t.sum(d * d, axis=1)

            var = t.fold_range(0, C, cols, t.zeros((rows,), f32), add_squares) / n
            rstd = t.rsqrt(var + p.eps)

            def write(t, c0):
                x = p.x.load_tile((r0, c0), (rows, cols))
                w = p.w.load_tile((c0,), (cols,))
                b = p.b.load_tile((c0,), (cols,))
                p.y.store_tile((r0, c0), (x - mean[:, None]) * rstd[:, None] * w[None, :] + b[None, :])

            t.for_range(0, C, cols, write)

    return tile_layer_norm


def make_rms_norm(rows: int = ROWS, cols: int = COLS, warps: int = 4):
    """y = x / sqrt(mean(x^2) + eps) * w along each row of a 2-D f32 tensor."""

    @kernel(y=tensor(f32, 2), x=tensor(f32, 2), w=tensor(f32, 1), eps=scalar(f32))
    def tile_rms_norm(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=(axis("r", cdiv(R, rows)),), warps=warps)
        def body(t, pid):
            r0 = pid["r"] * rows

            def add_squares(t, c0, total):
                x = p.x.load_tile((r0, c0), (rows, cols))  # the padding is 0 and adds nothing
                return total + t.sum(x * x, axis=1)

            ms = t.fold_range(0, C, cols, t.zeros((rows,), f32), add_squares) / t.cast(C, f32)
            rstd = t.rsqrt(ms + p.eps)

            def write(t, c0):
                x = p.x.load_tile((r0, c0), (rows, cols))
                w = p.w.load_tile((c0,), (cols,))
                p.y.store_tile((r0, c0), x * rstd[:, None] * w[None, :])

            t.for_range(0, C, cols, write)

    return tile_rms_norm


tile_layer_norm = make_layer_norm()
tile_rms_norm = make_rms_norm()
PROGRAMS = [tile_layer_norm, tile_rms_norm]
EPS = 1e-5


def layer_norm_reference(x, w, b, eps=EPS):
    x = x.astype(np.float64)
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def rms_norm_reference(x, w, eps=EPS):
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * w


def main() -> None:
    rng = np.random.default_rng(0)
    worst = 0.0
    for rows, cols in ((9, 100), (6, 1000)):
        # rows offset from 0: a one-pass variance would lose digits here
        x = (rng.standard_normal((rows, cols)) * 2 + 50).astype(np.float32)
        w, b = rng.standard_normal(cols, dtype=np.float32), rng.standard_normal(cols, dtype=np.float32)
        for backend in ("numpy", "llvm"):
            y = np.full((rows, cols), np.nan, np.float32)
            tile_layer_norm.run([y, x, w, b, EPS], backend=backend)
            expected = layer_norm_reference(x, w, b)
            np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4, err_msg=f"layer norm on {backend}")
            worst = max(worst, float(np.abs(y - expected).max()))
            y = np.full((rows, cols), np.nan, np.float32)
            tile_rms_norm.run([y, x, w, EPS], backend=backend)
            expected = rms_norm_reference(x, w)
            np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6, err_msg=f"rms norm on {backend}")
            worst = max(worst, float(np.abs(y - expected).max()))
    print(f"tile_layer_norm and tile_rms_norm 9x100 and 6x1000: matches NumPy "
          f"(numpy and llvm, max abs err {worst:.2g})")


if __name__ == "__main__":
    main()
