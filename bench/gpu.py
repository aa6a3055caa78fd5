"""The GPU half of the benchmark and of the GPU check.

    python -m bench.gpu [--json results.json]          # attention entries on cuda vs torch SDPA
    python -m bench.gpu --compare [--json out.json]    # every library entry: cuda vs ptx vs numpy
    python -m bench.gpu --compare --backends numpy,ptx # the same without a GPU (a dry run)

The timing uses CUDA events around the kernel alone (inputs already on the device);
torch's scaled_dot_product_attention runs on the same GPU when torch is installed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from accy.compare import compare
from accy.library.attention import (
    ScaledDotProduct,
    reference,
    scaled_dot_product_f32,
    scaled_dot_product_flash_f32,
    scaled_dot_product_fused_f32,
)

SHAPES = {"medium": (4, 64, 64, 32, 32), "large": (8, 256, 256, 64, 64), "xl": (16, 512, 512, 64, 64)}
ENTRIES = {"naive": scaled_dot_product_f32, "fused": scaled_dot_product_fused_f32, "flash": scaled_dot_product_flash_f32}
COMPARE_SHAPES = [(1, 1, 1, 1, 1), (2, 5, 7, 3, 5), (2, 37, 50, 16, 20), (2, 64, 96, 64, 64)]


def _inputs(shape, seed=0):
    b, q, k, h, v = shape
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s, dtype=np.float32) for s in ((b, q, h), (b, k, h), (b, k, v))]


def bench_accy(entry, shape, repeats=20):
    inputs = _inputs(shape)
    b, q, _, _, v = shape
    dst = np.zeros((b, q, v), np.float32)
    start = time.perf_counter()
    entry.run([dst, *inputs], backend="cuda")  # compile, load, first launch
    first = time.perf_counter() - start
    error = float(np.abs(dst - reference(*inputs)).max())
    try:  # the inputs already on the device, as torch tensors (any __cuda_array_interface__ array would do)
        import torch

        device = [torch.from_numpy(a).cuda() for a in (dst, *inputs)]
    except ImportError:  # host arrays: the copies fall outside the timed events all the same
        device = [dst, *inputs]
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


def benchmark() -> dict:
    results = {}
    for name, shape in SHAPES.items():
        spec = ScaledDotProduct(*shape)
        torch_result = bench_torch(shape)
        row = {"shape": shape, "torch_sdpa": torch_result}
        for kind, make in ENTRIES.items():
            if kind == "naive" and name == "xl":
                continue  # minutes of GPU time for nothing new
            result = bench_accy(make(spec), shape)
            if torch_result:
                result["over_torch"] = result["kernel_ms_median"] / torch_result["kernel_ms_median"]
            row[kind] = result
            ratio = f"  {result['over_torch']:.1f}x torch" if torch_result else ""
            print(f"{name:7s} {kind:6s} B{shape[0]} Q{shape[1]} K{shape[2]} H{shape[3]} V{shape[4]}: "
                  f"{result['kernel_ms_median']:.3f} ms (max err {result['max_error']:.2g}, first call "
                  f"{result['first_call_s'] * 1e3:.0f} ms){ratio}")
        results[name] = row
    return results


def compare_entries(backends) -> dict:
    """Every library entry, causal and not, at a few shapes, on each backend; agreement per case."""
    cases = {}
    for shape in COMPARE_SHAPES:
        for causal in (False, True):
            for kind, make in ENTRIES.items():
                entry = make(ScaledDotProduct(*shape, causal=causal))
                b, q, _, _, v = shape
                report = compare(entry, [np.zeros((b, q, v), np.float32), *_inputs(shape, 1)], backends,
                                 rtol=2e-5, atol=2e-6)
                key = f"{kind}{'-causal' if causal else ''} {'x'.join(map(str, shape))}"
                cases[key] = {"agree": report.agree, "ran": report.ran, "failed": report.failed,
                              "max_abs": max((p.max_abs for p in report.pairs), default=0.0)}
                print(f"{key:32s} {'agree' if report.agree else 'DISAGREE'} ({', '.join(report.ran)})"
                      + (f" failed: {report.failed}" if report.failed else ""))
    return cases


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu")
    parser.add_argument("--json", help="write results here")
    parser.add_argument("--compare", action="store_true", help="compare every library entry across backends")
    parser.add_argument("--backends", default="numpy,ptx,cuda", help="for --compare (default numpy,ptx,cuda)")
    ns = parser.parse_args(argv)
    if ns.compare:
        results = compare_entries([b.strip() for b in ns.backends.split(",")])
        ok = all(case["agree"] for case in results.values())
    else:
        results, ok = benchmark(), True
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
