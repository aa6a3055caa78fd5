"""GPU benchmark: the attention entry on the cuda backend, timed with CUDA events,
against PyTorch's scaled_dot_product_attention on the same GPU when torch is there.

    python -m bench.gpu [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from accy.library.attention import ScaledDotProduct, reference, scaled_dot_product_f32

SHAPES = {"medium": (4, 64, 64, 32, 32), "large": (8, 256, 256, 64, 64)}


def _inputs(shape, seed=0):
    b, q, k, h, v = shape
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s, dtype=np.float32) for s in ((b, q, h), (b, k, h), (b, k, v))]


def bench_accy(shape, repeats=20):
    from accy.backends.cuda import default_state

    entry = scaled_dot_product_f32(ScaledDotProduct(*shape))
    inputs = _inputs(shape)
    b, q, _, _, v = shape
    dst = np.zeros((b, q, v), np.float32)
    start = time.perf_counter()
    entry.run([dst, *inputs], backend="cuda")  # compile, load, first launch
    first = time.perf_counter() - start
    error = float(np.abs(dst - reference(*inputs)).max())
    import pycuda.gpuarray as gpuarray

    with default_state():
        device = [gpuarray.to_gpu(a) for a in (dst, *inputs)]
    kernel_ms = [entry.run(device, backend="cuda", timing=True) for _ in range(repeats)]
    return {"first_call_s": first, "kernel_ms_median": statistics.median(kernel_ms), "max_error": error}


def bench_torch(shape, repeats=20):
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    q, k, v = (torch.from_numpy(a).cuda() for a in _inputs(shape))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for _ in range(3):
        sdpa(q, k, v)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        sdpa(q, k, v)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return {"kernel_ms_median": statistics.median(times)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu")
    parser.add_argument("--json", help="write results here")
    ns = parser.parse_args(argv)
    results = {}
    for name, shape in SHAPES.items():
        accy_result = bench_accy(shape)
        torch_result = bench_torch(shape)
        row = {"shape": shape, "accy_naive": accy_result, "torch_sdpa": torch_result}
        if torch_result:
            row["accy_over_torch"] = accy_result["kernel_ms_median"] / torch_result["kernel_ms_median"]
        results[name] = row
        ratio = f"  {row['accy_over_torch']:.1f}x torch" if torch_result else ""
        print(f"{name:7s} B{shape[0]} Q{shape[1]} K{shape[2]} H{shape[3]} V{shape[4]}: accy naive "
              f"{accy_result['kernel_ms_median']:.3f} ms (max err {accy_result['max_error']:.2g}, first call "
              f"{accy_result['first_call_s'] * 1e3:.0f} ms){ratio}")
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
