"""Autotuning on llvm: the tile matmul (examples/tile_matmul.py) and the tile attention entry,
each with a few configs, tuned into a fresh store.  Per kernel: the tuning time (every config
traced, compiled and timed), the chosen config, the tuned kernel's time against the first
config's (a ratio measured in one run: the best of 15 runs each, timed in turns, as the tuner
ranks configs by their best run), and a second process's first run, which reads the
stored choice instead of tuning (its record says so).

    python -m bench --sections autotune [--quick]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import accy
from accy import f32, tensor

from .targets import _attention_inputs, _rng, example

# the example's GPU tiles first (the untuned baseline), then CPU-sized ones (bench/tiles.py's
# CPU_MATMUL_TILES among them); num_stages is a GPU's, the CPU ignores it
MATMUL_CONFIGS = [dict(BM=64, BN=64, BK=32, warps=4, num_stages=2), dict(BM=128, BN=128, BK=64, warps=4, num_stages=3),
                  dict(BM=128, BN=64, BK=64, warps=4, num_stages=3), dict(BM=32, BN=32, BK=32, warps=2, num_stages=2)]
# the entry's f32 default (64 x 64, 8 warps) first; every one fits its 32 KiB of dot operands at head dim 64
ATTENTION_CONFIGS = [dict(block_q=64, block_k=64, warps=8), dict(block_q=32, block_k=64, warps=4),
                     dict(block_q=64, block_k=32, warps=4), dict(block_q=16, block_k=64, warps=2)]
ATTENTION_SHAPE = (8, 256, 256, 64, 64)


def tuned_matmul():
    make = example("tile_matmul").make_matmul

    @accy.autotune(configs=MATMUL_CONFIGS, key=("a", "b"))
    @accy.kernel(c=tensor(f32, 2), a=tensor(f32, 2), b=tensor(f32, 2))
    def tile_matmul(k, p, *, BM, BN, BK, warps, num_stages):
        make(bm=BM, bn=BN, bk=BK, warps=warps, num_stages=num_stages).body(k, p)

    return tile_matmul


def tuned_attention():
    """The tile attention entry at ATTENTION_SHAPE with its tiles as the config."""
    from accy.library import AttentionTiles, ScaledDotProduct, scaled_dot_product_tile

    spec = ScaledDotProduct(*ATTENTION_SHAPE)

    @accy.autotune(configs=ATTENTION_CONFIGS, key=("query", "key"))
    @accy.kernel(dst=tensor(f32, 3), query=tensor(f32, 3), key=tensor(f32, 3), value=tensor(f32, 3))
    def attention(k, p, *, block_q, block_k, warps):
        scaled_dot_product_tile(spec, f32, AttentionTiles(block_q, block_k, warps)).program.body(k, p)

    return attention


def workload(name: str, size: int):
    """(kernel, arguments, the output, its reference, the tolerance) for ``name``."""
    if name == "tile matmul":
        rng = _rng()
        a, b = (rng.standard_normal((size, size), dtype=np.float32) for _ in range(2))
        c = np.zeros((size, size), np.float32)
        return tuned_matmul(), [c, a, b], c, a.astype(np.float64) @ b, 1e-5 * np.sqrt(size)
    from accy.library.attention import reference

    inputs = _attention_inputs(ATTENTION_SHAPE)
    b, q, _, _, v = ATTENTION_SHAPE
    dst = np.zeros((b, q, v), np.float32)
    return tuned_attention(), [dst, *inputs], dst, reference(*inputs), 1e-5


def second_process(name: str, size: int, store: str) -> dict:
    """A fresh process's first run with ``store``: its record and how long the run took."""
    env = dict(os.environ, ACCY_CACHE_DIR=store)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = f"from bench.autotune import reuse; reuse({name!r}, {size})"
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True,
                          timeout=600)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"}
    return json.loads(done.stdout.splitlines()[-1])


def reuse(name: str, size: int) -> None:
    kernel, args, *_ = workload(name, size)
    start = time.perf_counter()
    kernel.run(args, backend="llvm")
    seconds = time.perf_counter() - start
    log = kernel.tuning_log(args, backend="llvm")
    print(json.dumps({"seconds": seconds, "from_store": log.from_store, "config": log.config}))


def _interleaved(runs, rounds: int = 5, per_round: int = 3) -> list[float]:
    """Each of ``runs``' best time (after a warm-up run) over ``rounds`` rounds of ``per_round``
    runs that take turns, as the tuner ranks them (its best of a few runs): on a machine
    shared with other work a run's median may be twice its best, and a burst of load slows
    one round, not one of the runs throughout."""
    best = [float("inf")] * len(runs)
    for run in runs:
        run()
    for _ in range(rounds):
        for i, run in enumerate(runs):
            for _ in range(per_round):
                start = time.perf_counter()
                run()
                best[i] = min(best[i], time.perf_counter() - start)
    return best


def bench_one(name: str, size: int, label: str) -> dict:
    kernel, args, out, expected, tolerance = workload(name, size)
    with tempfile.TemporaryDirectory(prefix="accy-autotune-") as store:
        saved = os.environ.get("ACCY_CACHE_DIR")
        os.environ["ACCY_CACHE_DIR"] = store
        try:
            start = time.perf_counter()
            kernel.run(args, backend="llvm")  # tunes: traces, compiles and times every config
            first_call = time.perf_counter() - start
            log = kernel.tuning_log(args, backend="llvm")
            error = float(np.max(np.abs(out - expected)))
            tuned, untuned = _interleaved([lambda: kernel.run(args, backend="llvm"),
                                                    lambda: kernel.programs[0].run(args, backend="llvm")])
            again = second_process(name, size, store)
        finally:
            if saved is None:
                os.environ.pop("ACCY_CACHE_DIR", None)
            else:
                os.environ["ACCY_CACHE_DIR"] = saved
    return {"kernel": name, "size": label, "configs": len(log.results), "tuning_seconds": log.tuning_seconds,
            "first_call_seconds": first_call, "chosen": log.config, "chosen_index": log.chosen,
            "per_config_seconds": log.seconds, "failed": [r.failed for r in log.results if r.failed],
            "tuned_seconds": tuned, "first_config_seconds": untuned, "speedup_over_first_config": untuned / tuned,
            "max_abs_error": error, "within_tolerance": error <= tolerance, "second_process": again}


def bench_autotune(quick: bool = False) -> list[dict]:
    size = 512 if quick else 1024
    return [bench_one("tile matmul", size, f"{size}^3 f32"), bench_one("tile attention", 0, str(ATTENTION_SHAPE))]


def _config(config: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


def print_rows(rows: list[dict]) -> None:
    for r in rows:
        again = r["second_process"]
        reuse_text = (f"error: {again['error']}" if "error" in again else
                      f"{'from the store' if again['from_store'] else 'TUNED AGAIN'}, first run "
                      f"{again['seconds'] * 1e3:.0f} ms")
        print(f"  {r['kernel']} {r['size']}: tuned in {r['tuning_seconds']:.2f} s ({r['configs']} configs; first call "
              f"{r['first_call_seconds']:.2f} s with tracing and compiling), chose {_config(r['chosen'])}")
        versus = (" (the first config won: the same kernel)" if r["chosen_index"] == 0 else "")
        print(f"    tuned {r['tuned_seconds'] * 1e3:.2f} ms vs first config {r['first_config_seconds'] * 1e3:.2f} ms: "
              f"{r['speedup_over_first_config']:.2f}x{versus}; second process: {reuse_text}; "
              f"{'matches' if r['within_tolerance'] else 'DOES NOT MATCH'} the reference "
              f"(max abs error {r['max_abs_error']:.2g})")
        figures = ", ".join("failed" if s is None else f"{s * 1e3:.2f}" for s in r["per_config_seconds"])
        print(f"    per config (ms, the tuner's best run of each): {figures}")
