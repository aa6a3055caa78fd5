"""The GPU half of the benchmark and of the GPU check (scripts/gpu_check.sh).

    python -m bench.gpu [--json results.json]            # the f32 attention entries on cuda vs torch SDPA
    python -m bench.gpu --tile-bench [--json out.json]   # tile kernels vs cuBLAS, flash SDPA and Triton
    python -m bench.gpu --estimates [--json out.json]    # accy profile's estimate of each --tile-bench kernel
    python -m bench.gpu --compare [--json out.json]      # every library entry: cuda vs ptx vs numpy
    python -m bench.gpu --tiles [--json out.json]        # every tile kernel: cuda vs ptx vs numpy
    python -m bench.gpu --compare --backends numpy,ptx   # the same without a GPU (a dry run)

The timing uses CUDA events around the kernel alone, on inputs already on the device (torch
CUDA tensors, which accy runs in place); torch and, where it is importable, Triton (its kernels
for the same jobs, bench.triton_kernels) run the baselines on the same GPU.  The
estimates run on the CPU (the emulator) and need no GPU.  Every JSON file is rewritten after
each case, so a step cut short by its time limit keeps what it finished.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from accy import bf16, f16, f32, i8
from accy.compare import compare
from accy.library import ScaledDotProduct, scaled_dot_product_tile
from accy.library.attention import (
    reference,
    scaled_dot_product_f32,
    scaled_dot_product_flash_f32,
    scaled_dot_product_fused_f32,
)

from .gpu_kernels import BENCH, HOPPER, random_array, tile_matmul

SHAPES = {"medium": (4, 64, 64, 32, 32), "large": (8, 256, 256, 64, 64), "xl": (16, 512, 512, 64, 64)}
ENTRIES = {"naive": scaled_dot_product_f32, "fused": scaled_dot_product_fused_f32, "flash": scaled_dot_product_flash_f32}
COMPARE_SHAPES = [(1, 1, 1, 1, 1), (2, 5, 7, 3, 5), (2, 37, 50, 16, 20), (2, 64, 96, 64, 64)]
TARGET = 0.5  # issue 19 §5: accy's throughput at least half of cuBLAS's / torch's flash SDPA's
# issue 35 on a lent H200: the Hopper jobs' matmuls at 0.9x cuBLAS, attention at 1.0x torch's
# flash SDPA and 0.8x FlashAttention-3 (where it is importable)
HOPPER_TARGETS = {"matmul": 0.9, "attention": 1.0}
FA3_TARGET = 0.8
CASES = {**BENCH, **HOPPER}
GPU_ARCH = "sm_90a"  # the H100 and H200 the check is written for (wgmma); the cuda backend's own when it runs
U32 = 2.0 ** -24  # f32's unit roundoff
# the inputs' unit roundoff: P is cast to it before P @ V, and so is the output (tests/test_attention_tile.py)
UNIT_ROUNDOFF = {"f32": U32, "bf16": 2.0 ** -8, "f16": 2.0 ** -11}


def _write(path, results) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(results, f, indent=2)


def _workers(requested: int | None, cases: int) -> int:
    if requested:
        return max(1, min(requested, cases))
    return max(1, min(cases, (os.cpu_count() or 1) // 2))


def _pool(workers: int) -> ProcessPoolExecutor:
    # spawn: a fresh interpreter per worker, whatever threads (LLVM, CUDA) the parent started
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))


# -- the f32 library entries (the benchmark and the comparison of earlier issues) --------------------


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
    return {"kernel_ms_median": _time_torch(torch, lambda: sdpa(q, k, v), repeats)}


def benchmark(path=None) -> dict:
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
        _write(path, results)
    return results


def compare_entries(backends, path=None) -> dict:
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
                _write(path, cases)
    return cases


# -- 1. every tile kernel on cuda against ptx and numpy ------------------------------------------------

# (input type, tiles bm x bn x bk on warps, precision): tensor cores for each type t.dot puts on them,
# at the GPU benchmark's tile sizes and smaller, and f32 on FMAs
TILE_MATMULS = [
    (bf16, (128, 128, 32, 8), "ieee"),
    (bf16, (64, 64, 32, 4), "ieee"),
    (f16, (64, 64, 32, 4), "ieee"),
    (f32, (64, 64, 32, 4), "tf32"),
    (i8, (64, 64, 64, 4), "ieee"),
    (f32, (64, 64, 32, 4), "ieee"),
]
# (b, q, k, h, v), input types, causal: every type and mask at an odd shape and at head dim 64; head
# dim 128 (the benchmark's other shape) in the 16-bit types
TILE_ATTENTION = [
    *(((1, 37, 53, 32, 16), d, c) for d in (bf16, f16, f32) for c in (False, True)),
    *(((2, 64, 96, 64, 64), d, c) for d in (bf16, f16, f32) for c in (False, True)),
    ((1, 50, 40, 128, 128), bf16, False), ((1, 50, 40, 128, 128), bf16, True), ((1, 50, 40, 128, 128), f16, False),
]


def gamma(n: int, unit: float) -> float:
    """gamma_n = n u / (1 - n u): the relative bound of a sum of n products rounded at each step."""
    return n * unit / (1 - n * unit)


def _compare_summary(report, extra: dict) -> dict:
    return {"agree": report.agree, "ran": list(report.ran), "failed": report.failed, "skipped": report.skipped,
            "max_abs": max((p.max_abs for p in report.pairs), default=0.0), "atol": report.atol,
            "pairs": {" vs ".join(p.backends): p.max_abs for p in report.pairs}, **extra}


def compare_tile_matmul(dtype, tiles, precision, backends, arch) -> dict:
    """The tile matmul on ``backends`` at a shape with edges in every dimension, each pair within
    the sum of the two backends' dot bounds (the IR reference rounds each partial sum, u = 2^-24;
    tensor cores may not, 2u), and the numpy backend against the float64 product within its bound."""
    bm, bn, bk, warps = tiles
    program = tile_matmul(dtype, bm, bn, bk, warps, precision)
    m, n, k = 2 * bm + 3, 2 * bn - 5, 3 * bk - 7
    rng = np.random.default_rng(5)
    tf32 = precision == "tf32"
    a, b = random_array((m, k), dtype, rng, tf32=tf32), random_array((k, n), dtype, rng, tf32=tf32)
    exact = a.astype(np.float64) @ b.astype(np.float64)  # i8: exact in float64 (|sum| < 2^53)
    if dtype == i8:
        bound, atol = np.zeros_like(exact), 0.0
    else:
        magnitude = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
        bound = gamma(k, U32) * magnitude
        atol = float(((gamma(k, U32) + gamma(k, 2 * U32)) * magnitude).max())
    c = np.zeros((m, n), np.int32 if dtype == i8 else np.float32)
    report = compare(program, [c, a, b], backends, rtol=0.0, atol=atol, options={"ptx": {"arch": arch}})
    program.run([c, a, b], backend="numpy")
    error = np.abs(c.astype(np.float64) - exact)
    over = float(np.max(error / np.maximum(bound, np.finfo(np.float64).tiny))) if dtype != i8 else float(error.max())
    return _compare_summary(report, {"numpy_vs_float64": over, "numpy_within_bound": bool(over <= 1.0 if dtype != i8
                                                                                        else over == 0.0)})


def compare_tile_attention(shape, dtype, causal, backends, arch) -> dict:
    """The tile attention entry on ``backends``, each pair within twice the reference's bound
    (P and the output rounded once each to the inputs' type, f32 scores: (2 u + 1e-5) max|v|), and
    the numpy backend against the float64 reference within that bound."""
    entry = scaled_dot_product_tile(ScaledDotProduct(*shape, causal=causal), dtype)
    b, q, k, h, v = shape
    rng = np.random.default_rng(11)
    query, key, value = (random_array(s, dtype, rng) for s in ((b, q, h), (b, k, h), (b, k, v)))
    tolerance = (2 * UNIT_ROUNDOFF[dtype.name] + 1e-5) * float(np.abs(value.astype(np.float64)).max())
    dst = np.zeros((b, q, v), dtype.numpy)
    report = compare(entry, [dst, query, key, value], backends, rtol=0.0, atol=2 * tolerance,
                     options={"ptx": {"arch": arch}})
    entry.run([dst, query, key, value], backend="numpy")
    error = float(np.abs(dst.astype(np.float64) - reference(query, key, value, causal=causal)).max())
    return _compare_summary(report, {"numpy_vs_float64": error / tolerance, "numpy_within_bound": error <= tolerance})


def _tile_case(job):
    kind, params, backends, arch = job
    try:
        if kind == "matmul":
            return compare_tile_matmul(*params, backends, arch)
        return compare_tile_attention(*params, backends, arch)
    except Exception as e:  # not a backend's AccyError (compare records those): the case fails, the rest go on
        return {"agree": False, "ran": [], "failed": {"case": f"{type(e).__name__}: {e}"}, "skipped": {},
                "max_abs": None, "atol": None, "pairs": {}, "numpy_vs_float64": None, "numpy_within_bound": False}


def tile_jobs(backends, arch, matmuls=TILE_MATMULS, attention=TILE_ATTENTION) -> dict:
    jobs = {}
    for dtype, tiles, precision in matmuls:
        name = f"matmul {dtype}{'-tf32' if precision == 'tf32' else ''} {'x'.join(map(str, tiles[:3]))}w{tiles[3]}"
        jobs[name] = ("matmul", (dtype, tiles, precision), tuple(backends), arch)
    for shape, dtype, causal in attention:
        name = f"attention {dtype}{'-causal' if causal else ''} {'x'.join(map(str, shape))}"
        jobs[name] = ("attention", (shape, dtype, causal), tuple(backends), arch)
    return jobs


def compare_tiles(backends, arch=GPU_ARCH, path=None, workers=None, jobs=None) -> dict:
    """Every tile kernel on each backend (``ptx`` as the PTX for ``arch``), each case in a worker
    process; agreement per case, in the order of :func:`tile_jobs`."""
    jobs = tile_jobs(backends, arch) if jobs is None else jobs
    results = {}

    def record(name, result):
        results[name] = result
        verdict = "agree" if result["agree"] and result["numpy_within_bound"] else "DISAGREE"
        detail = "" if result["max_abs"] is None else (
            f"; max abs {result['max_abs']:.3g} of {result['atol']:.3g}; numpy vs float64 "
            f"{result['numpy_vs_float64']:.3g} of the bound")
        print(f"{name:40s} {verdict} ({', '.join(result['ran'])}{detail})"
              + (f" failed: {result['failed']}" if result["failed"] else ""), flush=True)
        _write(path, {k: results[k] for k in jobs if k in results})

    count = _workers(workers, len(jobs))
    if count == 1:
        for name, job in jobs.items():
            record(name, _tile_case(job))
        return results
    with _pool(count) as pool:
        futures = {name: pool.submit(_tile_case, job) for name, job in jobs.items()}
        for name, future in futures.items():
            record(name, future.result())
    return {k: results[k] for k in jobs}


# -- 2. the GPU benchmark: tile kernels against cuBLAS and torch's flash SDPA ------------------------


def _time_torch(torch, fn, repeats) -> float:
    """The median of ``repeats`` CUDA-event timings of ``fn`` (ms), after three warm-up calls."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


class _Bf16View:
    """A bf16 torch CUDA tensor as accy reads it in place.  torch spells bf16's typestr '<V2'
    (2-byte voids: no type), which accy reads as a void and refuses for a bf16 parameter; this
    view describes the same memory with the ml_dtypes dtype as its typestr (accy reads the typestr
    through ``np.dtype``, which takes a dtype as well as its text)."""

    def __init__(self, tensor):
        self.tensor = tensor  # keeps the memory alive
        strides = None if tensor.is_contiguous() else tuple(s * tensor.element_size() for s in tensor.stride())
        self.__cuda_array_interface__ = {"shape": tuple(tensor.shape), "typestr": np.dtype(bf16.numpy),
                                         "data": (tensor.data_ptr(), False), "strides": strides, "version": 2}


def accy_argument(tensor):
    """``tensor`` (a torch CUDA tensor) as an argument accy runs in place."""
    import torch

    return _Bf16View(tensor) if tensor.dtype == torch.bfloat16 else tensor


def _torch_dtype(torch, dtype):
    return {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32, "i32": torch.int32,
            "i8": torch.int8, "f8e4m3": getattr(torch, "float8_e4m3fn", None),
            "f8e5m2": getattr(torch, "float8_e5m2", None)}[dtype.name]


def _tensors(torch, case, seed=0):
    """The case's arguments on the GPU: a zero output, standard normal inputs (16-bit floats;
    fp8 ones rounded from f32's)."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    (out_shape, out_type), *ins = case.shapes
    out = torch.zeros(out_shape, dtype=_torch_dtype(torch, out_type), device="cuda")
    inputs = [torch.randn(s, dtype=torch.float32, device="cuda", generator=generator).to(_torch_dtype(torch, d))
              if d.name.startswith("f8") else
              torch.randn(s, dtype=_torch_dtype(torch, d), device="cuda", generator=generator) for s, d in ins]
    return [out, *inputs]


FP8_PROMOTION_BOUND = 4 * 2.0 ** -13  # Hopper's fp8 accumulation per promoted chunk (accy.lowering.warpgroups)


def _check_matmul(torch, c, a, b, transposed: bool = False) -> dict:
    """accy's f32 product against an f32 cuBLAS product without tf32 (each within gamma_K of the
    exact product: accy's tensor cores with 2u, cuBLAS's f32 with u; fp8 wgmma's partial sums
    add their own), relative to that bound; ``transposed``: b is n x k."""
    k = a.shape[1]
    a, b = a.float(), (b.float().T if transposed else b.float())
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        exact = torch.matmul(a, b)
        magnitude = torch.matmul(a.abs(), b.abs())
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    fp8 = FP8_PROMOTION_BOUND if c.dtype == torch.float32 and transposed else 0.0
    bound = (fp8 + gamma(k, 2 * U32) + 2 * gamma(k, U32)) * magnitude  # cuBLAS's error in both, and accy's
    over = float(((c - exact).abs() / bound.clamp_min(torch.finfo(torch.float32).tiny)).max())
    return {"max_error_over_bound": over, "ok": over <= 1.0}


def _check_attention(torch, dst, q, k, v, sdpa) -> dict:
    """accy's output against torch's math SDPA in f32 on the same inputs, within the tile entry's
    bound ((2 u + 1e-5) max|v|, u the inputs' unit roundoff) plus 1e-5 max|v| for the f32 reference."""
    with sdpa.sdpa_kernel(sdpa.SDPBackend.MATH):
        want = torch.nn.functional.scaled_dot_product_attention(q[None].float(), k[None].float(), v[None].float())[0]
    tolerance = (2 * 2.0 ** -8 + 2e-5) * float(v.float().abs().max())
    error = float((dst.float() - want).abs().max())
    return {"max_error": error, "tolerance": tolerance, "ok": error <= tolerance}


def bench_tile_case(case, repeats: int = 20) -> dict:
    """One benchmark kernel on the GPU: the first call (compile and load), the kernel's median
    time over ``repeats`` CUDA-event timings on device-resident inputs, its accuracy, and the
    same job in torch (cuBLAS's bf16 matmul; SDPA with the flash backend) and in Triton
    (:func:`bench_triton`) timed the same way."""
    import torch
    import torch.nn.attention as sdpa

    tensors = _tensors(torch, case)
    stream = torch.cuda.current_stream()
    args = [accy_argument(t) for t in tensors]
    fp8 = case.shapes[1][1].name.startswith("f8")
    transposed = case.kind == "matmul" and case.shapes[2][0][0] != case.shapes[1][0][1]
    torch.cuda.synchronize()
    start = time.perf_counter()
    case.program.run(args, backend="cuda", stream=stream)
    first = time.perf_counter() - start
    times = [case.program.run(args, backend="cuda", timing=True, stream=stream) for _ in range(repeats)]
    ms = statistics.median(times)
    result = {"what": case.what, "flops": case.flops, "first_call_s": first, "kernel_ms_median": ms,
              "kernel_ms_min": min(times), "tflops": case.flops / (ms * 1e-3) / 1e12}
    fa3 = None
    if case.kind == "matmul" and fp8:
        c, a, b = tensors
        result["accuracy"] = _check_matmul(torch, c, a, b, transposed)
        one = torch.ones((), device="cuda")
        baseline = "torch._scaled_mm (cuBLAS fp8, f32 out)"
        fn = lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.float32)  # noqa: E731
    elif case.kind == "matmul":
        c, a, b = tensors
        result["accuracy"] = _check_matmul(torch, c, a, b, transposed)
        baseline, fn = "torch.matmul (cuBLAS, bf16 out)", lambda: torch.matmul(a, b.t() if transposed else b)
    else:
        dst, q, k, v = tensors
        result["accuracy"] = _check_attention(torch, dst, q, k, v, sdpa)
        q4, k4, v4 = q[None], k[None], v[None]  # (1, B*H, tokens, head dim): the flash kernel wants 4-D

        def fn():
            with sdpa.sdpa_kernel(sdpa.SDPBackend.FLASH_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(q4, k4, v4)

        baseline = "torch SDPA, flash backend"
        fa3 = bench_fa3(torch, case, q, k, v, repeats)
    result["triton"] = bench_triton(torch, sdpa, case, tensors, repeats)
    if fa3 is not None:
        result["fa3"] = fa3
        if "kernel_ms_median" in fa3:
            result["fraction_of_fa3"] = fa3["kernel_ms_median"] / ms
            result["fa3_target"] = FA3_TARGET
    if "kernel_ms_median" in result["triton"]:
        result["fraction_of_triton"] = result["triton"]["kernel_ms_median"] / ms
    try:
        torch_ms = _time_torch(torch, fn, repeats)
    except RuntimeError as e:  # e.g. no flash kernel for this GPU or shape
        result["torch"] = {"baseline": baseline, "error": str(e).splitlines()[0]}
        return result
    result["torch"] = {"baseline": baseline, "kernel_ms_median": torch_ms,
                       "tflops": case.flops / (torch_ms * 1e-3) / 1e12}
    result["fraction_of_torch"] = torch_ms / ms  # accy's throughput over torch's
    target = HOPPER_TARGETS[case.kind] if case.key in HOPPER else TARGET
    result["target"] = target
    result["meets_target"] = result["fraction_of_torch"] >= target and result.get(
        "fraction_of_fa3", FA3_TARGET) >= FA3_TARGET
    return result


def bench_fa3(torch, case, q, k, v, repeats: int) -> dict:
    """FlashAttention-3 (its Hopper build, ``flash_attn_interface``) on the same job, where it is
    importable: timed as the others, its output checked as accy's."""
    try:
        from flash_attn_interface import flash_attn_func
    except Exception as e:
        return {"error": f"FlashAttention-3 not importable: {type(e).__name__}: {e}"}
    q4, k4, v4 = (x.unsqueeze(2) for x in (q, k, v))  # (batch = B*H, tokens, 1 head, head dim)

    def fn():
        out = flash_attn_func(q4, k4, v4)
        return out[0] if isinstance(out, tuple) else out

    try:
        fa3_ms = _time_torch(torch, fn, repeats)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    return {"kernel_ms_median": fa3_ms, "tflops": case.flops / (fa3_ms * 1e-3) / 1e12}


def bench_triton(torch, sdpa, case, tensors, repeats: int = 20) -> dict:
    """The same job by Triton's kernel (bench.triton_kernels: written as Triton users write it, at
    Triton's own tiling for it), on the same device tensors, timed and checked as accy's is; or
    why there is none (Triton not importable, not a bf16 job, its launch failed)."""
    if case.shapes[1][1] != bf16:
        return {"error": "Triton's kernels here are the bf16 jobs only"}
    try:
        from . import triton_kernels
    except Exception as e:  # not installed (the bench extra), or no driver it can use
        return {"error": f"Triton not importable: {type(e).__name__}: {e}"}
    out = torch.zeros_like(tensors[0])
    if case.kind == "matmul":
        _, a, b = tensors
        fn, tiles = (lambda: triton_kernels.launch_matmul(a, b, out)), triton_kernels.MATMUL_TILES
    else:
        _, q, k, v = tensors
        tiles = triton_kernels.ATTENTION_TILES.get(q.shape[-1])
        if tiles is None:
            return {"error": f"no Triton tiling here for head dim {q.shape[-1]}"}
        fn = lambda: triton_kernels.launch_attention(q, k, v, out)  # noqa: E731
    try:
        first = time.perf_counter()
        fn()  # compiles
        torch.cuda.synchronize()
        first = time.perf_counter() - first
        triton_ms = _time_torch(torch, fn, repeats)
    except Exception as e:  # a compile or launch failure leaves accy's and torch's figures
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    accuracy = _check_matmul(torch, out, a, b) if case.kind == "matmul" else \
        _check_attention(torch, out, q, k, v, sdpa)
    constants, warps, stages = tiles
    return {"kernel_ms_median": triton_ms, "tflops": case.flops / (triton_ms * 1e-3) / 1e12, "first_call_s": first,
            "accuracy": accuracy, "tiles": {**constants, "warps": warps, "stages": stages}}


def tile_benchmark(path=None, keys=None, repeats: int = 20) -> dict:
    results = {}
    for key in keys or CASES:
        case = CASES[key]
        try:
            result = bench_tile_case(case, repeats)
        except Exception as e:  # one kernel's failure (an accy error, a CUDA error) leaves the others
            result = {"what": case.what, "error": f"{type(e).__name__}: {e}"}
        results[key] = result
        if "error" in result:
            print(f"{key:28s} FAILED: {result['error']}", flush=True)
        else:
            t, tri = result.get("torch", {}), result.get("triton", {})
            vs = (f"; {t['baseline']} {t['kernel_ms_median']:.3f} ms, {t['tflops']:.1f} TFLOP/s: accy at "
                  f"{result['fraction_of_torch']:.2f}x (target {TARGET}x)") if "kernel_ms_median" in t else \
                f"; torch: {t.get('error')}"
            vs += (f"; Triton {tri['kernel_ms_median']:.3f} ms, {tri['tflops']:.1f} TFLOP/s, accuracy "
                   f"{'ok' if tri['accuracy']['ok'] else 'WRONG'}: accy at {result['fraction_of_triton']:.2f}x") \
                if "kernel_ms_median" in tri else f"; Triton: {tri.get('error')}"
            fa3 = result.get("fa3", {})
            vs += (f"; FA3 {fa3['kernel_ms_median']:.3f} ms: accy at {result['fraction_of_fa3']:.2f}x "
                   f"(target {FA3_TARGET}x)") if "kernel_ms_median" in fa3 else \
                (f"; FA3: {fa3['error']}" if "error" in fa3 else "")
            print(f"{key:28s} {result['kernel_ms_median']:.3f} ms, {result['tflops']:.1f} TFLOP/s, accuracy "
                  f"{'ok' if result['accuracy']['ok'] else 'WRONG'}{vs}", flush=True)
        _write(path, results)
    return results


# -- the estimates beside them: accy profile on the emulator (CPU) -------------------------------------


def estimate_case(key: str, arch: str = GPU_ARCH, sample: int | None = None) -> dict:
    """:func:`estimate` of the benchmark kernel ``key`` (an error, caught, as {"error": ...})."""
    try:
        return estimate(CASES[key], arch, sample)
    except Exception as e:
        return {"what": CASES[key].what, "error": f"{type(e).__name__}: {e}"}


def estimate(case, arch: str = GPU_ARCH, sample: int | None = None) -> dict:
    """``Program.profile`` of ``case`` (at the benchmark's full size, a sample of its programs
    run on the emulator) for each Hopper GPU the check may get."""
    from accy.emulator.profile import GPUS, Pipe, roofline

    start = time.perf_counter()
    profile = case.program.profile(case.arguments(zeros=True), arch=arch, gpu="h200", sample=sample)
    counts = profile.to_dict()
    result = {"what": case.what, "flops": case.flops, "seconds_to_profile": time.perf_counter() - start,
              "arch": arch, "blocks": profile.blocks, "blocks_run": profile.blocks_run, "sampled": profile.sampled,
              **{k: counts[k] for k in ("instructions", "mma_instructions", "global_requests", "global_sectors",
                                        "global_load_sector_efficiency", "shared_wavefronts", "bank_conflicts",
                                        "dram_bytes", "flops")},
              "gpus": {}}
    # the H200's: the profile's, the roofline or the latency model's critical path, whichever is
    # longer; the H100's: its roofline from the same counts (the latency model ran for the H200)
    flops = {Pipe(p): v for p, v in profile.flops_by_pipe.items()}
    h100 = roofline(GPUS["h100"], flops, profile.instructions, profile.shared_wavefronts, profile.dram_bytes,
                    blocks=profile.blocks, warps_per_block=-(-math.prod(profile.block) // 32))
    result["gpus"]["h200"] = {"estimated_seconds": profile.estimated_seconds, "bound": profile.bound,
                              "limiter": profile.limiter,
                              "latency": None if profile.latency is None else profile.latency.describe()}
    result["gpus"]["h100"] = {"estimated_seconds": h100.estimated_seconds, "bound": h100.bound,
                              "limiter": f"{h100.limiter} (roofline alone)"}
    peak = HOPPER_PEAKS.get(case.shapes[1][1].name)
    for g in result["gpus"].values():
        g["tflops"] = case.flops / g["estimated_seconds"] / 1e12
        if peak is not None:
            g["fraction_of_peak"] = g["tflops"] * 1e12 / peak
    return result


# the dense tensor peaks (H100/H200 SXM datasheets) issue 35's targets are fractions of
HOPPER_PEAKS = {"bf16": 989.4e12, "f16": 989.4e12, "f8e4m3": 1978.9e12, "f8e5m2": 1978.9e12}


def estimates(path=None, arch: str = GPU_ARCH, workers=None, sample=None, keys=None) -> dict:
    keys = list(keys or CASES)
    results = {}

    def record(key, result):
        results[key] = result
        _write(path, {k: results[k] for k in keys if k in results})
        if "error" in result:
            print(f"{key:28s} FAILED: {result['error']}", flush=True)
            return
        h = result["gpus"]["h200"]
        peak = f", {h['fraction_of_peak']:.0%} of peak" if "fraction_of_peak" in h else ""
        print(f"{key:28s} estimate {h['estimated_seconds'] * 1e3:.3f} ms on an H200 ({h['bound']}-bound, "
              f"{h['limiter']}; {h['tflops']:.0f} TFLOP/s{peak}), {result['blocks_run']} of {result['blocks']} "
              f"programs emulated in {result['seconds_to_profile']:.0f} s", flush=True)

    count = _workers(workers, len(keys))
    if count == 1:
        for key in keys:
            record(key, estimate_case(key, arch, sample))
    else:
        with _pool(count) as pool:
            futures = {key: pool.submit(estimate_case, key, arch, sample) for key in keys}
            for key, future in futures.items():
                record(key, future.result())
    return {k: results[k] for k in keys}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu")
    parser.add_argument("--json", help="write results here")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--compare", action="store_true", help="compare every library entry across backends")
    what.add_argument("--tiles", action="store_true", help="compare every tile kernel across backends")
    what.add_argument("--tile-bench", action="store_true", help="time the tile kernels against torch (GPU)")
    what.add_argument("--estimates", action="store_true", help="accy profile's estimate of each --tile-bench kernel")
    parser.add_argument("--backends", default="numpy,ptx,cuda",
                        help="for --compare and --tiles (default numpy,ptx,cuda)")
    parser.add_argument("--arch", default=GPU_ARCH,
                        help=f"the PTX ptx runs and the profile counts (default {GPU_ARCH})")
    parser.add_argument("--workers", type=int, help="processes for --tiles and --estimates (default: half the cores)")
    parser.add_argument("--sample", type=int, help="--estimates: programs to emulate (default: the profile's choice)")
    ns = parser.parse_args(argv)
    backends = [b.strip() for b in ns.backends.split(",")]
    if ns.compare:
        results = compare_entries(backends, ns.json)
        ok = all(case["agree"] for case in results.values())
    elif ns.tiles:
        results = compare_tiles(backends, ns.arch, ns.json, ns.workers)
        ok = all(case["agree"] and case["numpy_within_bound"] for case in results.values())
    elif ns.tile_bench:
        results = tile_benchmark(ns.json)
        ok = all("error" not in r and r["accuracy"]["ok"] for r in results.values())
    elif ns.estimates:
        results = estimates(ns.json, ns.arch, ns.workers, ns.sample)
        ok = all("error" not in r and math.isfinite(r["gpus"]["h200"]["estimated_seconds"]) for r in results.values())
    else:
        results, ok = benchmark(ns.json), True
    _write(ns.json, results)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
