"""One Jacobi sweep of a 5-point stencil on an n x n grid: each interior point becomes the
mean of its four neighbours; the boundary is copied as it is.

A 2-D launch over the grid, x along rows, so neighbouring threads read neighbouring
elements; ``if_`` keeps the boundary threads' loads inside the grid. n is a scalar: one
compiled kernel for every grid size. Run with ``python examples/jacobi.py``.
"""

import numpy as np

from accy import axis, dynamic_buffer, f32, index, kernel, scalar


@kernel(dst=dynamic_buffer(f32), src=dynamic_buffer(f32), n=scalar(index))
def jacobi(k, a):
    @k.for_each_2d(x=axis("col", a.n), y=axis("row", a.n))
    def each(inner, idx):
        row, col = idx["row"], idx["col"]
        at = row * a.n + col
        interior = (row > 0) & (row < a.n - 1) & (col > 0) & (col < a.n - 1)
        a.dst[at] = inner.if_(interior,
                              lambda inner: 0.25 * (a.src[at - 1] + a.src[at + 1] + a.src[at - a.n] + a.src[at + a.n]),
                              lambda inner: a.src[at])


PROGRAMS = [jacobi]


def reference(src: np.ndarray) -> np.ndarray:
    out = src.copy()
    out[1:-1, 1:-1] = np.float32(0.25) * (src[1:-1, :-2] + src[1:-1, 2:] + src[:-2, 1:-1] + src[2:, 1:-1])
    return out


def main() -> None:
    rng = np.random.default_rng(0)
    for n in (3, 17, 256):
        src = rng.standard_normal((n, n), dtype=np.float32)
        for backend in ("numpy", "llvm"):
            dst = np.zeros_like(src)
            jacobi.run([dst, src, n], backend=backend)
            np.testing.assert_array_equal(dst, reference(src), err_msg=f"{backend} n={n}")
    print("jacobi sweeps of 3x3, 17x17 and 256x256 grids: matches NumPy (numpy and llvm, exactly)")


if __name__ == "__main__":
    main()
