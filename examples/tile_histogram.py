"""Histogram as a tile program: each program counts a tile of 1024 values into the bins
with one ``atomic_add`` of a tile of bin indices.

The values are the bin indices; a value outside [0, bins) and the positions past the end
of the input are masked off, so they count nowhere. Equal indices within one tile all
count (an atomic add of a tile is one atomic add per element). The number of bins is the
output's length, known at run time. Run with ``python examples/tile_histogram.py``.
"""

import numpy as np

from accy import axis, cdiv, i32, index, kernel, tensor

BLOCK = 1024


def make_histogram(block: int = BLOCK, warps: int = 4):
    """hist[v] += 1 for each value v of x with 0 <= v < len(hist) (i32)."""

    @kernel(hist=tensor(i32, 1), x=tensor(i32, 1))
    def tile_histogram(k, p):
        (n,) = p.x.shape
        (bins,) = p.hist.shape

        @k.for_each_tile(grid=(axis("i", cdiv(n, block)),), warps=warps)
        def body(t, pid):
            start = pid["i"] * block
            inside = start + t.arange(block) < n
            v = p.x.load_tile((start,), (block,)).cast(index)
            p.hist.atomic_add(v, 1, mask=inside & (v >= 0) & (v < bins))

    return tile_histogram


tile_histogram = make_histogram()
PROGRAMS = [tile_histogram]
BINS = 256


def reference(x: np.ndarray, bins: int) -> np.ndarray:
    return np.bincount(x[(x >= 0) & (x < bins)], minlength=bins).astype(np.int32)


def main() -> None:
    rng = np.random.default_rng(0)
    for n in (1, 1000, 100_000):
        x = rng.integers(-10, BINS + 10, n).astype(np.int32)  # some outside the bins
        for backend in ("numpy", "llvm"):
            hist = np.zeros(BINS, np.int32)
            tile_histogram.run([hist, x], backend=backend)
            np.testing.assert_array_equal(hist, reference(x, BINS), err_msg=backend)
    print(f"tile_histogram of 1, 1000 and 100000 int32 values into {BINS} bins: matches NumPy "
          "(numpy and llvm, exactly)")


if __name__ == "__main__":
    main()
