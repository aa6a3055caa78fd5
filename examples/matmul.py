"""Tiled matrix multiply: each block computes a TILE x TILE tile of the output, staging
tiles of both operands in shared memory so every loaded element is used TILE times, and
each thread computes ROWS elements of a column of it (register blocking: ROWS independent
sums, each element of ``b`` read from shared memory once for all of them).

Barriers order the staging: the tiles are complete before any thread reads them, and
read by every thread before the next are staged. M, N and K are scalars: one
compiled kernel for every shape. Run with ``python examples/matmul.py``.
"""

import numpy as np

from accy import axis, dynamic_buffer, f32, index, kernel, scalar

TILE = 64  # a block computes a TILE x TILE tile of c (two TILE x TILE f32 tiles: 32 KiB of shared memory)
ROWS = 8  # rows of it per thread
STRIDE = TILE // ROWS  # threads along y; a thread's rows are ty, ty + STRIDE, ...


@kernel(c=dynamic_buffer(f32), a=dynamic_buffer(f32), b=dynamic_buffer(f32),
        m=scalar(index), n=scalar(index), k=scalar(index))
def matmul(kb, p):
    @kb.for_each_block(grid=(axis("bx", (p.n + TILE - 1) // TILE), axis("by", (p.m + TILE - 1) // TILE)),
                       threads=(axis("tx", TILE), axis("ty", STRIDE)))
    def tile(inner, block, thread):
        a_tile = inner.shared(f32, TILE * TILE, "a_tile")
        b_tile = inner.shared(f32, TILE * TILE, "b_tile")
        tx, ty = thread["tx"], thread["ty"]
        first_row, col = block["by"] * TILE, block["bx"] * TILE + tx

        def step(inner, k0, sums):
            for r in range(ROWS):  # stage one tile of each operand (zeros past the edges)
                t = ty + r * STRIDE
                a_row, b_row, a_col = first_row + t, k0 + t, k0 + tx
                a_tile[t * TILE + tx] = inner.if_((a_row < p.m) & (a_col < p.k),
                                                  lambda inner: p.a[a_row * p.k + a_col], lambda inner: 0.0)
                b_tile[t * TILE + tx] = inner.if_((b_row < p.k) & (col < p.n),
                                                  lambda inner: p.b[b_row * p.n + col], lambda inner: 0.0)
            inner.barrier()

            def dot(inner, j, sums):  # then multiply them
                b = b_tile[j * TILE + tx]
                return tuple(s + a_tile[(ty + r * STRIDE) * TILE + j] * b for r, s in enumerate(sums))

            sums = inner.fold_range(0, TILE, 1, sums, dot)
            inner.barrier()
            return sums

        totals = inner.fold_range(0, p.k, TILE, (0.0,) * ROWS, step)
        for r, total in enumerate(totals):
            row = first_row + ty + r * STRIDE
            inner.if_((row < p.m) & (col < p.n), lambda inner: p.c.__setitem__(row * p.n + col, total))


PROGRAMS = [matmul]


def main() -> None:
    rng = np.random.default_rng(0)
    errors = {}
    for m, n, k in ((33, 47, 64), (5, 3, 100)):
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        expected = a.astype(np.float64) @ b.astype(np.float64)
        for backend in ("numpy", "llvm"):
            c = np.zeros((m, n), np.float32)
            matmul.run({"c": c, "a": a, "b": b, "m": m, "n": n, "k": k}, backend=backend)  # arguments by name
            np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4, err_msg=backend)
            errors[backend] = max(errors.get(backend, 0.0), float(np.abs(c - expected).max()))
    summary = ", ".join(f"{b} max abs err {e:.2g}" for b, e in errors.items())
    print(f"tiled matmul 33x64 @ 64x47 and 5x100 @ 100x3: matches NumPy ({summary})")


if __name__ == "__main__":
    main()
