"""Layer normalisation over the last axis, with a learned scale and shift.

Each thread normalises one element: dst = (x - mean) / sqrt(var + eps) * gamma + beta.
The row's mean and variance come from Welford's one-pass update, a fold carrying
three accumulators (count, mean, sum of squared deviations).  The textbook
E[x^2] - E[x]^2 cancels catastrophically in f32 once the mean is large (off by
1.8 at mean 1000, NaN at 64x1024); Welford's form stays accurate.  The row and
column counts are scalars, so one compiled kernel serves every shape.
Run with ``python examples/layer_norm.py``.
"""

import numpy as np

from accy import axis, dynamic_buffer, f32, index, kernel, scalar

EPS = 1e-5


@kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32), gamma=dynamic_buffer(f32), beta=dynamic_buffer(f32),
        rows=scalar(index), cols=scalar(index))
def layer_norm(k, args):
    def each(inner, idx):
        r, c = idx["r"], idx["c"]
        base = r * args.cols

        def welford(inner, j, acc):
            count, mean, m2 = acc
            v = args.x[base + j]
            count = count + 1.0
            delta = v - mean
            mean = mean + delta / count
            return count, mean, m2 + delta * (v - mean)

        count, mean, m2 = inner.fold_range(0, args.cols, 1, (0.0, 0.0, 0.0), welford)
        normed = (args.x[base + c] - mean) / (m2 / count + EPS).sqrt()
        args.dst[base + c] = normed * args.gamma[c] + args.beta[c]

    k.for_each_2d(x=axis("c", args.cols), y=axis("r", args.rows), body=each)


def reference(x, gamma, beta):
    x = x.astype(np.float64)
    mean = x.mean(axis=1, keepdims=True)
    var = x.var(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * gamma + beta


def main() -> None:
    rng = np.random.default_rng(0)
    errors = {}
    for rows, cols, offset in ((16, 96, 1.0), (64, 1024, 1000.0)):
        x = (rng.standard_normal((rows, cols)) + offset).astype(np.float32)
        gamma = rng.uniform(0.5, 1.5, cols).astype(np.float32)
        beta = rng.standard_normal(cols).astype(np.float32)
        expected = reference(x, gamma, beta)
        for backend in ("numpy", "llvm"):
            dst = np.zeros((rows, cols), np.float32)
            layer_norm.run([dst, x, gamma, beta, rows, cols], backend=backend)
            np.testing.assert_allclose(dst, expected, rtol=1e-3, atol=2e-3, err_msg=f"{backend} {rows}x{cols}")
            errors[backend] = max(errors.get(backend, 0.0), float(np.abs(dst - expected).max()))
    summary = ", ".join(f"{b} max abs err {e:.2g}" for b, e in errors.items())
    print(f"layer_norm 16x96 and 64x1024 at mean 1000: matches NumPy ({summary})")


if __name__ == "__main__":
    main()
