"""Vector add: one thread per element, the length taken from the arguments.

The simplest kernel there is, and the one that shows what a launch costs: on the llvm
backend each chunk of threads is one vector load of each operand and one vector store.
Run with ``python examples/vector_add.py``.
"""

import numpy as np

from accy import axis, dynamic_buffer, f32, kernel


@kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32), y=dynamic_buffer(f32))
def vector_add(k, args):
    @k.for_each_1d(axis("i", args.x.size))
    def each(inner, idx):
        i = idx["i"]
        args.dst[i] = args.x[i] + args.y[i]


PROGRAMS = [vector_add]


def main() -> None:
    rng = np.random.default_rng(0)
    for n in (1, 17, 98_432):
        x, y = (rng.standard_normal(n, dtype=np.float32) for _ in range(2))
        for backend in ("numpy", "llvm"):
            dst = np.zeros(n, np.float32)
            vector_add.run([dst, x, y], backend=backend)
            np.testing.assert_array_equal(dst, x + y, err_msg=backend)
    print("vector_add of 1, 17 and 98432 floats: matches NumPy (numpy and llvm, exactly)")


if __name__ == "__main__":
    main()
