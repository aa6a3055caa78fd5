"""Vector add as a tile program: each program adds one tile of 1024 elements.

The program for one tile loads a whole tile of ``x`` and of ``y`` with ``load_tile``
(positions past the end of the arrays read 0 and are never touched), adds them as
NumPy would, and stores the sum with ``store_tile`` (positions past the end are not
written). Tensors take any layout: the same compiled kernel adds a reversed view and a
strided slice. Run with ``python examples/tile_vector_add.py``.
"""

import numpy as np

from accy import axis, cdiv, f32, kernel, tensor

BLOCK = 1024


def make_vector_add(block: int = BLOCK):
    """dst = x + y for 1-D tensors of one length, ``block`` elements per program."""

    @kernel(dst=tensor(f32, 1), x=tensor(f32, 1), y=tensor(f32, 1))
    def tile_vector_add(k, p):
        (n,) = p.x.shape

        @k.for_each_tile(grid=(axis("i", cdiv(n, block)),), warps=4)
        def body(t, pid):
            start = pid["i"] * block
            x = p.x.load_tile((start,), (block,))
            y = p.y.load_tile((start,), (block,))
            p.dst.store_tile((start,), x + y)

    return tile_vector_add


tile_vector_add = make_vector_add()
PROGRAMS = [tile_vector_add]


def main() -> None:
    rng = np.random.default_rng(0)
    for n in (1, 1000, 98_432):
        x, y = (rng.standard_normal(n, dtype=np.float32) for _ in range(2))
        for backend in ("numpy", "llvm"):
            dst = np.zeros(n, np.float32)
            tile_vector_add.run([dst, x, y], backend=backend)
            np.testing.assert_array_equal(dst, x + y, err_msg=backend)
    # any layout: a reversed view and every third element of a longer array
    x = rng.standard_normal(3000, dtype=np.float32)
    y = rng.standard_normal(1000, dtype=np.float32)
    for backend in ("numpy", "llvm"):
        dst = np.zeros(1000, np.float32)
        tile_vector_add.run([dst, x[::3], y[::-1]], backend=backend)
        np.testing.assert_array_equal(dst, x[::3] + y[::-1], err_msg=backend)
    print("tile_vector_add of 1, 1000 and 98432 floats and of strided views: matches NumPy "
          "(numpy and llvm, exactly)")


if __name__ == "__main__":
    main()
