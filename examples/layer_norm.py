"""Layer normalisation over the last axis, with a learned scale and shift.

One fold carries two accumulators (a tuple): the row sum and the row sum of
squares. Each thread then normalises its own element:
dst = (x - mean) / sqrt(var + eps) * gamma + beta.
Run with ``python examples/layer_norm.py``.
"""

import numpy as np

from accy import Program, axis, dynamic_buffer, f32

EPS = 1e-5


def layer_norm_program(rows: int, cols: int) -> Program:
    def body(k, args):
        def each(inner, index):
            r, c = index["r"], index["c"]
            base = r * cols

            def moments(inner, j, acc):
                total, squares = acc
                v = args.x[base + j]
                return total + v, squares + v * v

            total, squares = inner.fold_range(0, cols, 1, (0.0, 0.0), moments)
            mean = total / float(cols)
            var = squares / float(cols) - mean * mean
            normed = (args.x[base + c] - mean) / inner.sqrt(var + EPS)
            args.dst[base + c] = normed * args.gamma[c] + args.beta[c]

        k.for_each_2d(x=axis("c", cols), y=axis("r", rows), body=each)

    params = {name: dynamic_buffer(f32) for name in ("dst", "x", "gamma", "beta")}
    return Program("layer_norm", params, body)


def reference(x, gamma, beta):
    x = x.astype(np.float64)
    mean = x.mean(axis=1, keepdims=True)
    var = x.var(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * gamma + beta


def main() -> None:
    rows, cols = 16, 96
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((rows, cols)) + 1.0).astype(np.float32)
    gamma = rng.uniform(0.5, 1.5, cols).astype(np.float32)
    beta = rng.standard_normal(cols).astype(np.float32)
    expected = reference(x, gamma, beta)
    program = layer_norm_program(rows, cols)
    errors = {}
    for backend in ("numpy", "llvm"):
        dst = np.zeros((rows, cols), np.float32)
        program.run([dst, x, gamma, beta], backend=backend)
        np.testing.assert_allclose(dst, expected, rtol=1e-4, atol=1e-4, err_msg=backend)
        errors[backend] = float(np.abs(dst - expected).max())
    summary = ", ".join(f"{b} max abs err {e:.2g}" for b, e in errors.items())
    print(f"layer_norm {rows}x{cols}: matches NumPy ({summary})")


if __name__ == "__main__":
    main()
