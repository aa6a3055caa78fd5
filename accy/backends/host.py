"""The LLVM host backend: the graph compiled to native code for this CPU.

The logical grid runs in native calls of the JIT-compiled launcher, each over a
contiguous range of lanes (a block launch: of blocks, each block on one core); big
launches are split across one thread per core (ctypes releases the GIL for the call).  Outputs are written to scratch copies,
checked against the status word, and copied back only on success, exactly as
in the interpreter.
"""

from __future__ import annotations

import concurrent.futures
import functools
import math
import os

import numpy as np

from ..dsl.ir import Graph
from ..dsl.schedule import Launch
from .abi import STATUS_WORDS, scalar_words, status_error
from .arguments import Binding
from .codegen import host_kernel
from .contract import Backend
from .llvm import Target

_EMPTY = np.zeros(1, np.int64)
# below this many (lanes x ops in the graph), a second thread costs more than it saves
PARALLEL_WORK = 200_000


@functools.cache
def _pool() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="accy-host")


def _thread_count(graph: Graph, lanes: int, threads: int | None) -> int:
    """How many host threads share ``lanes`` (logical threads, or a block launch's blocks)."""
    if threads is not None:
        return max(1, min(int(threads), lanes))
    work = lanes * graph.op_count * math.prod(graph.block_shape)
    return 1 if work < PARALLEL_WORK else max(1, min(os.cpu_count() or 1, lanes))


def run_graph(graph: Graph, binding: Binding, launch: Launch, *, checks: bool = True,
              threads: int | None = None) -> None:
    """Run ``graph`` natively; ``threads`` fixes the thread count (default: one per
    core for big launches, else one)."""
    lanes = launch.lanes
    if lanes == 0:
        return
    kernel = host_kernel(graph, Target.host(checks=checks))
    scratch = binding.scratch()
    arrays = [scratch[p.name] for p in graph.buffers]
    status = np.zeros(STATUS_WORDS, np.int64)
    # an empty buffer still points at 8 readable bytes (the ABI's promise to checked loads)
    pointers = [a.ctypes.data if a.size else _EMPTY.ctypes.data for a in arrays]
    counts = [a.size for a in arrays]
    scalars = scalar_words(graph, binding.scalars)
    units = kernel.chunking.units(launch.extents)
    n = _thread_count(graph, lanes, threads)
    n = min(n, units)
    bounds = [units * i // n for i in range(n + 1)]
    if n == 1:
        kernel(pointers, counts, scalars, status.ctypes.data, 0, units)
    else:
        futures = [_pool().submit(kernel, pointers, counts, scalars, status.ctypes.data, lo, hi)
                   for lo, hi in zip(bounds, bounds[1:])]
        for f in futures:
            f.result()
    error = status_error(graph, kernel.ordinals, status, binding.sizes, launch.extents)
    if error is not None:
        raise error
    binding.commit(scratch)


BACKEND = Backend("llvm", frozenset({"checks", "threads"}), run_graph)
