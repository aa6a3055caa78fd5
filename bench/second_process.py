"""A later process's first call: each library entry at the medium shape, run once on llvm by a
fresh ``python -c`` (import accy, build the entry, run it), twice on one new cache directory:
the first process compiles and stores the launcher, the second loads it.  Each child reports
its import time apart from its first call (the graph, traced or from the disk, the launcher
from the cache and the run), the run alone (a second call: the first call less it is the
issue's "trace plus cache load"), and how many launchers it compiled and loaded (so a figure
from a process that compiled after all is seen as one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

CHILD = """
import time
start = time.perf_counter()
import json, numpy as np
import accy, accy.runtime.host
from accy import graph_store
from accy.codegen import machine as codegen
from bench.attention import SHAPES, compile_entries, inputs
from accy.library.attention import ScaledDotProduct
imported = time.perf_counter()
shape = SHAPES["medium"]
query, key, value = inputs(shape)
dst = np.zeros((shape[0], shape[1], shape[4]), np.float32)
begin = time.perf_counter()
entry = compile_entries()[{kernel!r}](ScaledDotProduct(*shape))
entry.program.graph
traced = time.perf_counter()
entry.run([dst, query, key, value], backend="llvm")
done = time.perf_counter()
entry.run([dst, query, key, value], backend="llvm")
again = time.perf_counter()
print(json.dumps(dict(import_seconds=imported - start, trace_seconds=traced - begin,
                      first_call_seconds=done - begin, warm_run_seconds=again - done,
                      compiled=codegen.compilations["host"], graph_loaded=graph_store.counts["loaded"],
                      loaded=codegen.compilations["host_loaded"])))
"""

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _child(kernel: str, cache: str) -> dict:
    env = dict(os.environ, ACCY_CACHE_DIR=cache, PYTHONPATH=os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    env.pop("ACCY_CACHE", None)
    done = subprocess.run([sys.executable, "-c", CHILD.format(kernel=kernel)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        return {"failed": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_second_process(repeats: int = 3) -> dict:
    """Per entry: the first process (compiles) and the best of ``repeats`` second processes
    (load from the cache), each as its child reported it."""
    from .attention import compile_entries

    results = {}
    for kernel in compile_entries():
        with tempfile.TemporaryDirectory() as cache:
            first = _child(kernel, cache)
            later = [_child(kernel, cache) for _ in range(repeats)]
        best = min(later, key=lambda r: r.get("first_call_seconds", float("inf")))
        results[kernel] = {"first_process": first, "second_process": best}
    return results


def print_second_process(results: dict) -> None:
    for kernel, runs in results.items():
        parts = []
        for label, run in runs.items():
            if "failed" in run:
                parts.append(f"{label} failed: {run['failed']}")
                continue
            parts.append(f"{label}: import {run['import_seconds'] * 1e3:.0f} ms, first call "
                         f"{run['first_call_seconds'] * 1e3:.1f} ms (graph {run['trace_seconds'] * 1e3:.1f}"
                         f"{', from the disk' if run.get('graph_loaded') else ', traced'}, "
                         f"a warm run {run['warm_run_seconds'] * 1e3:.1f}), "
                         f"compiled {run['compiled']} loaded {run['loaded']}")
        print(f"  {kernel:8} " + "; ".join(parts))
