"""Scaled dot-product attention from the kernel library: softmax(Q K^T / sqrt(h)) V.

Builds the prebuilt entry for one shape, runs it on the NumPy interpreter and
the LLVM host backend, and checks both against a NumPy einsum reference.
Run with ``python examples/attention.py``.
"""

import numpy as np

from accy.library.attention import ScaledDotProduct, Threads3D, scaled_dot_product_f32


def reference(query, key, value):
    q, k, v = (a.astype(np.float64) for a in (query, key, value))
    scores = np.einsum("bqh,bkh->bqk", q, k) / np.sqrt(q.shape[-1])
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return np.einsum("bqk,bkv->bqv", weights, v)


def main() -> None:
    b, q, k, h, v = 2, 8, 24, 16, 12
    entry = scaled_dot_product_f32(ScaledDotProduct(batch=b, queries=q, keys=k, qk=h, value=v,
                                                    threads=Threads3D(16, 8, 1)))
    rng = np.random.default_rng(0)
    query = rng.standard_normal((b, q, h), dtype=np.float32)
    key = rng.standard_normal((b, k, h), dtype=np.float32)
    value = rng.standard_normal((b, k, v), dtype=np.float32)
    expected = reference(query, key, value)
    errors = {}
    for backend in ("numpy", "llvm"):
        dst = np.zeros((b, q, v), np.float32)
        entry.run([dst, query, key, value], backend=backend)
        np.testing.assert_allclose(dst, expected, rtol=1e-5, atol=1e-5, err_msg=backend)
        errors[backend] = float(np.abs(dst - expected).max())
    summary = ", ".join(f"{name} max abs err {e:.2g}" for name, e in errors.items())
    print(f"attention {entry.specialization.equation} B={b} Q={q} K={k} H={h} V={v}: matches NumPy ({summary}); "
          f"{entry.launch()}")


if __name__ == "__main__":
    main()
