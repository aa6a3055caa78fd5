"""Histogram of int32 values into 256 bins: privatised bins in shared memory, then one
global atomic per bin per block.

Each block clears its own bins, barriers, counts its share of the input into them with
shared-memory atomics, barriers again, and adds each bin to the global histogram with
one atomic. (The tempting ``hist[x[i]] = hist[x[i]] + 1`` is a race: run it with
``check_memory=True`` and the interpreter names the threads.) Run with
``python examples/histogram.py``.
"""

import numpy as np

from accy import axis, dynamic_buffer, i32, index, kernel

BINS = 256
THREADS = 256
PER_THREAD = 8  # inputs each thread counts: fewer blocks, fewer global atomics


@kernel(hist=dynamic_buffer(i32), x=dynamic_buffer(i32))
def histogram(k, args):
    chunk = THREADS * PER_THREAD

    @k.for_each_block(grid=axis("b", (args.x.size + chunk - 1) // chunk), threads=axis("t", THREADS))
    def count(inner, block, thread):
        bins = inner.shared(i32, BINS, "bins")
        t = thread["t"]
        bins[t] = 0  # THREADS == BINS: one bin per thread
        inner.barrier()

        def one(inner, i):
            inner.if_(i < args.x.size, lambda inner: inner.atomic_add(bins, inner.cast(args.x[i], index), 1))

        inner.for_range(block["b"] * chunk + t, (block["b"] + 1) * chunk, THREADS, one)
        inner.barrier()
        inner.atomic_add(args.hist, t, bins[t])


PROGRAMS = [histogram]


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, BINS, 100_000).astype(np.int32)
    expected = np.bincount(x, minlength=BINS)
    for backend in ("numpy", "llvm"):
        hist = np.zeros(BINS, np.int32)
        histogram.run([hist, x], backend=backend)
        np.testing.assert_array_equal(hist, expected, err_msg=backend)
    print(f"histogram of {x.size} int32 values into {BINS} bins: matches NumPy (numpy and llvm, exactly)")


if __name__ == "__main__":
    main()
