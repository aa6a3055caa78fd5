"""A 2-D five-point stencil as a tile program, on strided views: each program computes
one 32x32 tile of the output.

The program loads five tiles of the input: the tile itself and the four shifted by one
row or column (``load_tile`` at origin (i - 1, j) and so on reads 0 past every edge,
the top and left ones included, so the border needs no case of its own). Input and
output are views with steps of a larger array (``big[::2, 1::2]``): the tensors' strides
are run-time values, and one compiled kernel serves every layout.
Run with ``python examples/tile_stencil.py``.
"""

import numpy as np

from accy import axis, cdiv, f32, kernel, tensor

BM, BN = 32, 32


def make_stencil(bm: int = BM, bn: int = BN, warps: int = 4):
    """dst = 0.5 x + 0.125 (up + down + left + right), zero outside x (2-D f32 tensors)."""

    @kernel(dst=tensor(f32, 2), x=tensor(f32, 2))
    def tile_stencil(k, p):
        M, N = p.x.shape

        @k.for_each_tile(grid=(axis("i", cdiv(M, bm)), axis("j", cdiv(N, bn))), warps=warps)
        def body(t, pid):
            i, j = pid["i"] * bm, pid["j"] * bn

            def at(di, dj):
                return p.x.load_tile((i + di, j + dj), (bm, bn))

            around = ((at(-1, 0) + at(1, 0)) + at(0, -1)) + at(0, 1)
            p.dst.store_tile((i, j), at(0, 0) * 0.5 + around * 0.125)

    return tile_stencil


tile_stencil = make_stencil()
PROGRAMS = [tile_stencil]


def reference(x: np.ndarray) -> np.ndarray:
    """The same float32 operations in the same order (each rounded once): bit for bit."""
    z = np.pad(x, 1)
    around = ((z[:-2, 1:-1] + z[2:, 1:-1]) + z[1:-1, :-2]) + z[1:-1, 2:]
    return x * np.float32(0.5) + around * np.float32(0.125)


def main() -> None:
    rng = np.random.default_rng(0)
    big = rng.standard_normal((203, 130), dtype=np.float32)
    x = big[::2, 1::2]  # 102 x 65, strides (260, 2) elements
    for backend in ("numpy", "llvm"):
        out = np.full((310, 140), np.nan, np.float32)
        dst = out[1::3, ::2][:x.shape[0], :x.shape[1]]  # a view with steps too
        tile_stencil.run([dst, x], backend=backend)
        np.testing.assert_array_equal(dst, reference(x), err_msg=backend)
        untouched = np.ones(out.shape, bool)
        untouched[1::3, ::2][:x.shape[0], :x.shape[1]] = False
        assert np.isnan(out[untouched]).all(), f"{backend} wrote outside the output view"
    print(f"tile_stencil of a {x.shape[0]}x{x.shape[1]} strided view into another: matches NumPy "
          "(numpy and llvm, exactly)")


if __name__ == "__main__":
    main()
