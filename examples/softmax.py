"""Row softmax: one block of threads per row, the row's statistics shared with block_reduce.

Each block's threads stride along their row: each folds its share of the elements
into a local maximum, the block combines them with ``block_reduce(..., "max")``, then
the same for the sum of exp(x - max), and every thread writes its elements.
Subtracting the maximum keeps exp finite for large inputs; the row length is a
scalar, so one compiled kernel serves every shape. Run with ``python examples/softmax.py``.
"""

import numpy as np

from accy import axis, dynamic_buffer, f32, index, kernel, scalar

THREADS = 128


@kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32), cols=scalar(index))
def softmax(k, args):
    @k.for_each_block(grid=axis("row", args.x.size // args.cols), threads=axis("t", THREADS))
    def row(inner, block, thread):
        base, t = block["row"] * args.cols, thread["t"]
        local_max = inner.fold_range(t, args.cols, THREADS, float("-inf"),
                                     lambda inner, j, m: inner.max(m, args.x[base + j]))
        row_max = inner.block_reduce(local_max, "max")
        local_sum = inner.fold_range(t, args.cols, THREADS, 0.0,
                                     lambda inner, j, s: s + (args.x[base + j] - row_max).exp())
        total = inner.block_reduce(local_sum, "sum")
        inner.for_range(t, args.cols, THREADS,
                        lambda inner, j: args.dst.__setitem__(base + j, (args.x[base + j] - row_max).exp() / total))


PROGRAMS = [softmax]


def reference(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main() -> None:
    rng = np.random.default_rng(0)
    errors = {}
    for rows, cols in ((24, 100), (7, 1000)):
        x = (rng.standard_normal((rows, cols)) * 10).astype(np.float32)
        expected = reference(x)
        for backend in ("numpy", "llvm"):
            dst = np.zeros((rows, cols), np.float32)
            softmax.run([dst, x, cols], backend=backend)
            np.testing.assert_allclose(dst, expected, rtol=1e-5, atol=1e-7, err_msg=backend)
            errors[backend] = max(errors.get(backend, 0.0), float(np.abs(dst - expected).max()))
    summary = ", ".join(f"{b} max abs err {e:.2g}" for b, e in errors.items())
    print(f"softmax 24x100 and 7x1000, a block per row: matches NumPy ({summary})")


if __name__ == "__main__":
    main()
