"""The naive attention kernel on Numba's CUDA simulator, the baseline for the
``ptx`` backend's speed (the simulator runs each CUDA thread as a Python thread).

Run in a subprocess by ``python -m bench`` (the simulator must be switched on
before numba is imported); prints the median seconds of one launch as JSON.

    NUMBA_ENABLE_CUDASIM=1 python -m bench.numba_sim 2,16,16,16,16
"""

import json
import math
import statistics
import sys
import time

import numpy as np
from numba import cuda


@cuda.jit
def naive_attention(dst, q, k, v):
    """The library's naive entry, thread for thread: one output element per
    thread, three passes over the keys (maximum, denominator, weighted sum)."""
    x, y, z = cuda.grid(3)
    heads, keys, values = q.shape[2], k.shape[1], v.shape[2]
    if x >= values or y >= q.shape[1] or z >= q.shape[0]:
        return
    scale = 1.0 / math.sqrt(heads)
    row_max = -math.inf
    for j in range(keys):
        s = 0.0
        for h in range(heads):
            s += q[z, y, h] * k[z, j, h]
        row_max = max(row_max, s * scale)
    denominator = 0.0
    for j in range(keys):
        s = 0.0
        for h in range(heads):
            s += q[z, y, h] * k[z, j, h]
        denominator += math.exp(s * scale - row_max)
    acc = 0.0
    for j in range(keys):
        s = 0.0
        for h in range(heads):
            s += q[z, y, h] * k[z, j, h]
        acc += math.exp(s * scale - row_max) / denominator * v[z, j, x]
    dst[z, y, x] = acc


def main(shape, repeats=3):
    b, nq, nk, h, nv = shape
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(s, dtype=np.float32) for s in ((b, nq, h), (b, nk, h), (b, nk, nv)))
    dst = np.zeros((b, nq, nv), np.float32)
    block = (8, 8, 1)
    grid = (-(-nv // 8), -(-nq // 8), b)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        naive_attention[grid, block](dst, q, k, v)
        times.append(time.perf_counter() - start)
    scores = np.einsum("bqh,bkh->bqk", q.astype(np.float64), k) / math.sqrt(h)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    expected = (weights / weights.sum(axis=-1, keepdims=True)) @ v
    print(json.dumps({"seconds": statistics.median(times), "max_error": float(np.abs(dst - expected).max())}))


if __name__ == "__main__":
    main(tuple(int(n) for n in sys.argv[1].split(",")))
