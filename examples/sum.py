"""The sum of 10^7 floats: a grid-stride loop, a block reduce, one atomic per block.

A fixed grid of blocks strides over the whole input, so the launch does not grow with
it; each thread sums its share, the block combines its threads' sums with
``block_reduce``, and one thread per block adds the block's sum to the result with an
atomic. (Which block adds first is not defined on a GPU, so the last bits of a float
sum may differ from run to run there; the interpreter adds in block order.)
Run with ``python examples/sum.py``.
"""

import numpy as np

from accy import axis, dynamic_buffer, f32, kernel

BLOCKS, THREADS = 64, 256


@kernel(total=dynamic_buffer(f32), x=dynamic_buffer(f32))
def vector_sum(k, args):
    @k.for_each_block(grid=axis("b", BLOCKS), threads=axis("t", THREADS))
    def block(inner, block, thread):
        first = block["b"] * THREADS + thread["t"]
        mine = inner.fold_range(first, args.x.size, BLOCKS * THREADS, 0.0, lambda inner, i, acc: acc + args.x[i])
        whole = inner.block_reduce(mine, "sum")
        inner.if_(thread["t"] == 0, lambda inner: inner.atomic_add(args.total, 0, whole))


PROGRAMS = [vector_sum]


def main() -> None:
    x = np.random.default_rng(0).random(10_000_000, dtype=np.float32)
    expected = float(x.astype(np.float64).sum())
    errors = {}
    for backend in ("numpy", "llvm"):
        total = np.zeros(1, np.float32)
        vector_sum.run([total, x], backend=backend)
        errors[backend] = abs(float(total[0]) - expected) / expected
        assert errors[backend] < 1e-5, (backend, total[0], expected)
    summary = ", ".join(f"{b} relative error {e:.1g}" for b, e in errors.items())
    print(f"sum of {x.size} floats: matches NumPy ({summary})")


if __name__ == "__main__":
    main()
