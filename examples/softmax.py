"""Row softmax: one logical thread per output element, two reductions per row.

Each thread (row r, column c) folds over its row twice: once for the row
maximum, once for the sum of exp(x - max). Subtracting the maximum keeps exp
finite for large inputs. Run with ``python examples/softmax.py``.
"""

import numpy as np

from accy import Program, axis, dynamic_buffer, f32, schedule


def softmax_program(rows: int, cols: int) -> Program:
    def body(k, args):
        def each(inner, index):
            r, c = index["row"], index["col"]
            base = r * cols
            # the row maximum: start from the first element, fold over the rest
            row_max = inner.fold_range(1, cols, 1, args.x[base],
                                       lambda inner, j, m: inner.max(m, args.x[base + j]))
            # the softmax denominator
            total = inner.fold_range(0, cols, 1, 0.0,
                                     lambda inner, j, s: s + inner.exp(args.x[base + j] - row_max))
            args.dst[base + c] = inner.exp(args.x[base + c] - row_max) / total

        # x (the fastest-varying axis) runs along a row
        k.for_each_2d(x=axis("col", cols), y=axis("row", rows), body=each)

    program = Program("softmax", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}, body)
    return program.with_schedule(schedule.thread_blocks(32, 4))


def reference(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main() -> None:
    rows, cols = 24, 100
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((rows, cols)) * 10).astype(np.float32)
    program = softmax_program(rows, cols)
    expected = reference(x)
    errors = {}
    for backend in ("numpy", "llvm"):
        dst = np.zeros((rows, cols), np.float32)
        program.run([dst, x], backend=backend)
        np.testing.assert_allclose(dst, expected, rtol=1e-5, atol=1e-7, err_msg=backend)
        errors[backend] = float(np.abs(dst - expected).max())
    summary = ", ".join(f"{b} max abs err {e:.2g}" for b, e in errors.items())
    print(f"softmax {rows}x{cols}: matches NumPy ({summary})")


if __name__ == "__main__":
    main()
