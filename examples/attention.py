"""Scaled dot-product attention from the kernel library: softmax(Q K^T / sqrt(h)) V.

Builds the three prebuilt entries for one shape (the naive one, a thread per output
element; the fused one, a thread per query row with an online softmax; the flash one,
blocks of threads with K and V tiles in shared memory), runs each on the NumPy
interpreter and the LLVM host backend, and checks them against a NumPy einsum
reference. Run with ``python examples/attention.py``.
"""

import numpy as np

from accy.library.attention import (
    ScaledDotProduct,
    ThreadBlocks,
    scaled_dot_product_f32,
    scaled_dot_product_flash_f32,
    scaled_dot_product_fused_f32,
)

SPEC = ScaledDotProduct(batch=2, queries=8, keys=24, qk=16, value=12, threads=ThreadBlocks(16, 8, 1))
ENTRIES = [scaled_dot_product_f32(SPEC), scaled_dot_product_fused_f32(SPEC), scaled_dot_product_flash_f32(SPEC)]
PROGRAMS = [entry.program for entry in ENTRIES]


def reference(query, key, value):
    q, k, v = (a.astype(np.float64) for a in (query, key, value))
    scores = np.einsum("bqh,bkh->bqk", q, k) / np.sqrt(q.shape[-1])
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return np.einsum("bqk,bkv->bqv", weights, v)


def main() -> None:
    b, q, k, h, v = SPEC.batch, SPEC.queries, SPEC.keys, SPEC.qk, SPEC.value
    rng = np.random.default_rng(0)
    query = rng.standard_normal((b, q, h), dtype=np.float32)
    key = rng.standard_normal((b, k, h), dtype=np.float32)
    value = rng.standard_normal((b, k, v), dtype=np.float32)
    expected = reference(query, key, value)
    worst = 0.0
    for entry in ENTRIES:
        for backend in ("numpy", "llvm"):
            dst = np.zeros((b, q, v), np.float32)
            entry.run([dst, query, key, value], backend=backend)
            np.testing.assert_allclose(dst, expected, rtol=1e-5, atol=1e-5, err_msg=f"{entry.target} {backend}")
            worst = max(worst, float(np.abs(dst - expected).max()))
    print(f"attention {ENTRIES[0].specialization.equation} B={b} Q={q} K={k} H={h} V={v}, naive, fused and flash "
          f"entries: matches NumPy (numpy and llvm, max abs err {worst:.2g})")


if __name__ == "__main__":
    main()
