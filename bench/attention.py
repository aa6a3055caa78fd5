"""The attention benchmark: every attention entry at named shapes on every backend,
against baselines measured in the same run.

Baselines:
- ``numpy-ref``: plain NumPy ``softmax(Q K^T / sqrt(h)) V`` with matmuls;
- ``numpy-einsum``: the same with ``einsum`` computing each score once per (b, q, k)
  and reusing it over v (the reuse the spec's ``reduction_reuse`` declares), the
  fastest plain NumPy form;
- ``c-naive``: the naive entry's own three-pass loop nest in C, ``gcc -O3
  -march=native``, one core, built now;
- ``torch-sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` on the CPU with
  as many threads as the llvm backend uses, when torch is installed;
- for the ``ptx`` backend, Numba's CUDA simulator running the same naive kernel
  (``bench/numba_sim.py``), when numba is installed.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from accy.library.attention import ScaledDotProduct, reference, scaled_dot_product_f32

from .timing import environment, measure

BUDGET_S = 60.0  # skip what would run longer than this once


SHAPES = {
    "tiny": (2, 2, 3, 2, 2),
    "small": (2, 16, 32, 16, 16),
    "medium": (4, 64, 64, 32, 32),
    "large": (8, 256, 256, 64, 64),
}
def entries():
    """The library's attention kernels, by name."""
    from accy.library import attention

    return {"naive": scaled_dot_product_f32, "fused": attention.scaled_dot_product_fused_f32,
            "flash": attention.scaled_dot_product_flash_f32}


def inputs(shape, seed=0):
    b, q, k, h, v = shape
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s, dtype=np.float32) for s in ((b, q, h), (b, k, h), (b, k, v))]


# -- baselines ----------------------------------------------------------------------------------


def numpy_reference(q, k, v):
    scores = q @ k.transpose(0, 2, 1) / np.float32(np.sqrt(q.shape[-1]))
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return (weights / weights.sum(-1, keepdims=True)) @ v


def numpy_einsum(q, k, v):
    scores = np.einsum("bqh,bkh->bqk", q, k) * np.float32(1 / np.sqrt(q.shape[-1]))
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return np.einsum("bqk,bkv->bqv", weights, v)


C_SOURCE = r"""
#include <math.h>
/* The accy naive entry's loop nest: per output (b, q, v), three passes over the keys. */
static float score(const float *Q, const float *K, long b, long q, long k, long nq, long nk, long nh, float scale) {
    float dot = 0.0f;
    for (long h = 0; h < nh; h++) dot += Q[(b * nq + q) * nh + h] * K[(b * nk + k) * nh + h];
    return dot * scale;
}
void attention(float *out, const float *Q, const float *K, const float *V,
               long nb, long nq, long nk, long nh, long nv) {
    float scale = 1.0f / sqrtf((float)nh);
    for (long b = 0; b < nb; b++)
    for (long q = 0; q < nq; q++)
    for (long v = 0; v < nv; v++) {
        float m = score(Q, K, b, q, 0, nq, nk, nh, scale);
        for (long k = 1; k < nk; k++) { float s = score(Q, K, b, q, k, nq, nk, nh, scale); m = s > m ? s : m; }
        float den = 0.0f;
        for (long k = 0; k < nk; k++) den += expf(score(Q, K, b, q, k, nq, nk, nh, scale) - m);
        float acc = 0.0f;
        for (long k = 0; k < nk; k++)
            acc += expf(score(Q, K, b, q, k, nq, nk, nh, scale) - m) / den * V[(b * nk + k) * nv + v];
        out[(b * nq + q) * nv + v] = acc;
    }
}
"""


def build_c():
    """The C loop nest as a callable, or None (with the reason) where gcc is missing."""
    gcc = shutil.which("gcc")
    if gcc is None:
        return None, "gcc not found"
    tmp = tempfile.mkdtemp(prefix="accy-bench-")
    src, lib = os.path.join(tmp, "attention.c"), os.path.join(tmp, "attention.so")
    with open(src, "w") as f:
        f.write(C_SOURCE)
    subprocess.run([gcc, "-O3", "-march=native", "-shared", "-fPIC", src, "-o", lib, "-lm"], check=True)
    fn = ctypes.CDLL(lib).attention
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_long] * 5

    def run(q, k, v):
        b, nq, h = q.shape
        _, nk, nv = v.shape
        out = np.empty((b, nq, nv), np.float32)
        fn(out.ctypes.data, q.ctypes.data, k.ctypes.data, v.ctypes.data, b, nq, nk, h, nv)
        return out

    return run, None


def torch_sdpa():
    try:
        import torch
    except ImportError:
        return None, "torch not installed"
    torch.set_num_threads(os.cpu_count() or 1)  # as many as the llvm backend uses

    def run(q, k, v):
        with torch.no_grad():
            return torch.nn.functional.scaled_dot_product_attention(
                torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v)).numpy()

    return run, None


# -- timing -------------------------------------------------------------------------------------


def accy_runner(make_entry, shape, backend, **options):
    entry = make_entry(ScaledDotProduct(*shape))
    b, q, _, _, v = shape
    dst = np.zeros((b, q, v), np.float32)

    def run(qa, ka, va):
        entry.run([dst, qa, ka, va], backend=backend, **options)
        return dst

    return run


def backends():
    """(label, backend, options) for each backend that can run here."""
    found = [("numpy", "numpy", {}), ("llvm-1t", "llvm", {"threads": 1}), ("llvm", "llvm", {}), ("ptx", "ptx", {})]
    try:
        from accy.runtime.cuda import default_state

        default_state()
        found.append(("cuda", "cuda", {}))
    except Exception:
        pass
    return found


def bench_kernels(shape_names, quick=False):
    rows = []
    c_naive, c_reason = build_c()
    torch_run, torch_reason = torch_sdpa()
    for name in shape_names:
        shape = SHAPES[name]
        args = inputs(shape)
        expected = reference(*args)
        baseline_fns = {"numpy-ref": numpy_reference, "numpy-einsum": numpy_einsum,
                        "c-naive": c_naive, "torch-sdpa": torch_run}
        reasons = {"c-naive": c_reason, "torch-sdpa": torch_reason}
        baselines = {}
        for label, fn in baseline_fns.items():
            if fn is None:
                rows.append(dict(shape=name, kernel="baseline", backend=label, skipped=reasons[label]))
                continue
            seconds, result = measure(lambda: fn(*args), BUDGET_S)
            baselines[label] = seconds
            rows.append(dict(shape=name, kernel="baseline", backend=label, seconds=seconds,
                             max_error=float(np.abs(result - expected).max()) if seconds else None,
                             skipped=None if seconds else result))
        for kernel, make_entry in entries().items():
            for label, backend, options in backends():
                if quick and kernel == "naive" and label.startswith("llvm") and name == "large":
                    rows.append(dict(shape=name, kernel=kernel, backend=label, skipped="--quick"))
                    continue
                if backend == "ptx" and name == "large":
                    rows.append(dict(shape=name, kernel=kernel, backend=label,
                                     skipped="the PTX emulator checks PTX; it is not for speed at this size"))
                    continue
                run = accy_runner(make_entry, shape, backend, **options)
                seconds, result = measure(lambda: run(*args), BUDGET_S)
                row = dict(shape=name, kernel=kernel, backend=label, seconds=seconds,
                           skipped=None if seconds else result)
                if seconds:
                    row["max_error"] = float(np.abs(result - expected).max())
                    row["ratios"] = {base: seconds / t for base, t in baselines.items() if t}
                rows.append(row)
    return rows


def bench_interpreter(shape_names):
    """Every attention entry on the interpreter (``numpy``) alone, against plain NumPy (einsum)
    measured in the same run: the interpreter's own figures, quick to take (issue 17 asked
    for them, after a slowdown of its hot path)."""
    rows = []
    for name in shape_names:
        shape = SHAPES[name]
        args = inputs(shape)
        expected = reference(*args)
        baseline, _ = measure(lambda: numpy_einsum(*args), BUDGET_S)
        rows.append(dict(shape=name, kernel="baseline", backend="numpy-einsum", seconds=baseline, max_error=0.0))
        for kernel, make_entry in entries().items():
            run = accy_runner(make_entry, shape, "numpy")
            seconds, result = measure(lambda: run(*args), BUDGET_S)
            row = dict(shape=name, kernel=kernel, backend="numpy", seconds=seconds, skipped=None if seconds else result)
            if seconds:
                row["max_error"] = float(np.abs(result - expected).max())
                row["ratios"] = {"numpy-einsum": seconds / baseline}
            rows.append(row)
    return rows


PTX_SHAPE = (2, 16, 16, 16, 16)
PTX_TARGET_SPEEDUP = 10.0  # issue 12: at least 10x faster than Numba's simulator


def bench_ptx_vs_simulator():
    """The naive entry on the ``ptx`` backend (the emulator running the PTX cuda
    would launch) against Numba's CUDA simulator running the same kernel, both
    at PTX_SHAPE and measured now; the simulator in a subprocess, since it must
    be switched on before numba is imported."""
    import importlib.util

    args = inputs(PTX_SHAPE)
    expected = reference(*args)
    run = accy_runner(scaled_dot_product_f32, PTX_SHAPE, "ptx")
    seconds, result = measure(lambda: run(*args), BUDGET_S)
    figure = dict(shape=list(PTX_SHAPE), kernel="naive", ptx_seconds=seconds,
                  ptx_max_error=float(np.abs(result - expected).max()), target_speedup=PTX_TARGET_SPEEDUP)
    if importlib.util.find_spec("numba") is None:
        figure["numba_simulator"] = "skipped: numba not installed (pip install numba)"
        return figure
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    done = subprocess.run([sys.executable, "-m", "bench.numba_sim", ",".join(map(str, PTX_SHAPE))], env=env,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        figure["numba_simulator"] = f"failed: {done.stderr.strip().splitlines()[-1:]}"
        return figure
    simulator = json.loads(done.stdout.strip().splitlines()[-1])
    figure.update(numba_simulator_seconds=simulator["seconds"], numba_simulator_max_error=simulator["max_error"],
                  speedup=simulator["seconds"] / seconds)
    return figure


def compile_entries():
    """Every library entry whose compile path the bench times: the attention entries and the
    tile attention entry."""
    from accy.library import scaled_dot_product_tile

    return {**entries(), "tile": scaled_dot_product_tile}


def cache_in(directory):
    """The compile cache in ``directory`` meanwhile."""
    return environment(ACCY_CACHE_DIR=directory, ACCY_CACHE=None)


COLD_REPEATS = 3


def _host_compile_seconds(graph) -> tuple[float, float]:
    """Wall and CPU seconds of one cold compile of ``graph``'s host launcher."""
    from accy.codegen import machine as codegen
    from accy.targets import Target

    start, cpu = time.perf_counter(), time.process_time()
    codegen._compile_host(graph, Target.host(), False)
    return time.perf_counter() - start, time.process_time() - cpu


def bench_compile():
    """Cold and cached costs of the compile path for each entry at the medium shape: trace,
    passes, NVPTX lowering and PTX (cold and from the disk cache), and the host launcher cold
    (wall and this process's CPU seconds, which other work on the machine inflates less) and
    loaded from the disk cache."""
    from accy.codegen import machine as codegen
    from accy.codegen.machine import lower
    from accy.targets import Target
    from accy.dsl.passes import optimize
    from accy.program import _block_of

    results = {}
    for kernel, make_entry in compile_entries().items():
        spec = ScaledDotProduct(*SHAPES["medium"])
        make_entry.cache_clear() if hasattr(make_entry, "cache_clear") else None
        timings = {}
        with environment(ACCY_TRACE_CACHE="0"):  # a trace of its own, though the entry ran before
            start = time.perf_counter()
            entry = make_entry(spec)
            graph = entry.program.traced_graph
            timings["trace"] = time.perf_counter() - start
        start = time.perf_counter()
        optimised = optimize(graph)
        timings["passes"] = time.perf_counter() - start
        device_graph = entry.program.graph_for("cuda", "sm_80")  # a tile entry's SIMT block launch
        block = _block_of(device_graph, entry.program.threads)
        target = Target.nvptx("sm_80")
        start = time.perf_counter()
        lower(device_graph, target, block)
        timings["llvm_lowering"] = time.perf_counter() - start
        start = time.perf_counter()
        codegen.emit_ptx(device_graph, target, block, use_cache=False)
        timings["ptx_cold"] = time.perf_counter() - start
        with tempfile.TemporaryDirectory() as tmp, cache_in(tmp):
            codegen.emit_ptx(device_graph, target, block)
            start = time.perf_counter()
            codegen.emit_ptx(device_graph, target, block)
            timings["ptx_cache_hit"] = time.perf_counter() - start
        timings["trace_lower_ptx_cold"] = timings["trace"] + timings["passes"] + timings["ptx_cold"]
        # the host launcher compiled (no cache), the least of three: other work on the machine only adds
        timings["host_jit_cold"], timings["host_jit_cold_cpu"] = min(
            _host_compile_seconds(optimised) for _ in range(COLD_REPEATS))
        with tempfile.TemporaryDirectory() as tmp, cache_in(tmp):
            codegen._jit(optimised, Target.host())
            start = time.perf_counter()
            codegen._jit(optimised, Target.host())  # what a later process pays, less the trace
            timings["host_cache_hit"] = time.perf_counter() - start
        results[kernel] = timings
    return results


def print_rows(rows) -> None:
    print(f"{'shape':7} {'kernel':8} {'backend':12} {'median':>11} {'err':>8}  ratio (time / baseline time)")
    for row in rows:
        head = f"{row['shape']:7} {row['kernel']:8} {row['backend']:12}"
        if row.get("skipped"):
            print(f"{head} {'skipped':>11}  {row['skipped']}")
            continue
        err = f"{row['max_error']:.1e}" if row.get("max_error") is not None else ""
        ratios = "  ".join(f"{base} {r:.2f}x" for base, r in row.get("ratios", {}).items())
        print(f"{head} {row['seconds'] * 1e3:9.3f}ms {err:>8}  {ratios}")
