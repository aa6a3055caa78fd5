"""Matrix multiply: a 2-D launch, one logical thread per output element.

Thread (i, j) folds over the shared dimension: dst[i, j] = sum_t lhs[i, t] * rhs[t, j].
Buffers are flat; the kernel does the row-major index arithmetic itself.
Run with ``python examples/matmul.py``.
"""

import numpy as np

from accy import Program, axis, dynamic_buffer, f32, schedule


def matmul_program(m: int, n: int, k: int) -> Program:
    def body(kb, args):
        def each(inner, index):
            i, j = index["i"], index["j"]
            dot = inner.fold_range(0, k, 1, 0.0,
                                   lambda inner, t, acc: acc + args.lhs[i * k + t] * args.rhs[t * n + j])
            args.dst[i * n + j] = dot

        kb.for_each_2d(x=axis("j", n), y=axis("i", m), body=each)

    params = {"dst": dynamic_buffer(f32), "lhs": dynamic_buffer(f32), "rhs": dynamic_buffer(f32)}
    return Program("matmul", params, body).with_schedule(schedule.thread_blocks(16, 16))


def main() -> None:
    m, n, k = 33, 47, 64
    rng = np.random.default_rng(0)
    lhs = rng.standard_normal((m, k)).astype(np.float32)
    rhs = rng.standard_normal((k, n)).astype(np.float32)
    expected = lhs.astype(np.float64) @ rhs.astype(np.float64)
    program = matmul_program(m, n, k)
    errors = {}
    for backend in ("numpy", "llvm"):
        dst = np.zeros((m, n), np.float32)
        program.run({"dst": dst, "lhs": lhs, "rhs": rhs}, backend=backend)  # arguments by name
        np.testing.assert_allclose(dst, expected, rtol=1e-4, atol=1e-4, err_msg=backend)
        errors[backend] = float(np.abs(dst - expected).max())
    launch = program.launch()
    summary = ", ".join(f"{b} max abs err {e:.2g}" for b, e in errors.items())
    print(f"matmul {m}x{k} @ {k}x{n}: matches NumPy ({summary}); GPU launch grid={launch.grid} block={launch.block}")


if __name__ == "__main__":
    main()
