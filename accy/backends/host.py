"""The LLVM host backend: the graph compiled to native code for this CPU.

The launcher (:mod:`accy.backends.spmd`) runs a launch as units of work (chunks of
threads as vector lanes, or blocks); a native call runs a contiguous range of units,
and a launch big enough to pay for it is split between a persistent pool of worker
threads, one per core (ctypes releases the GIL for the call).

Nothing is half-written.  The launcher's ``prepare`` entry computes the extents and
checks, once for the whole launch, every access whose index it can bound.  Where that
covers every check of the kernel and holds, the launch cannot fail, and the kernel
writes the caller's arrays directly.  Otherwise outputs are written to scratch copies,
checked against the status word, and copied back only on success, as the interpreter
does.

:func:`fast_launcher` is the same for repeated calls with plain NumPy arrays and Python
numbers, checked with a few attribute reads; anything else takes the general path.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import functools
import os
import struct
import time

import numpy as np

from ..dsl.ir import Graph
from ..dsl.schedule import Launch
from .abi import STATUS_WORDS, scalar_words, status_error
from .arguments import Binding
from .codegen import HostKernel, host_kernel
from .contract import NOT_HANDLED, Backend
from .targets import Target

_EMPTY = np.zeros(1, np.int64)  # an empty buffer still points at 8 readable bytes (the ABI's promise)
SPLIT_SECONDS = 100e-6  # a launch expected to take longer is split between the cores


CORES = os.cpu_count() or 1


@functools.cache
def _pool() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(max_workers=CORES, thread_name_prefix="accy-host")


class _Timing:
    """One kernel's seconds per unit of work on one thread: the least a launch on one thread
    took (a first launch touching fresh pages takes longer).  A split launch's time times
    its threads bounds it from above, the split's overhead included, so it may only lower it."""

    FIRST_ON_ONE = 2  # launches timed on one thread before any split
    RECHECK = 64  # a kernel that splits runs every RECHECK-th launch on one thread again

    def __init__(self):
        self.per_unit: float | None = None
        self.on_one = 0
        self.launches = 0

    def record(self, seconds: float, units: int, threads: int) -> None:
        self.launches += 1
        sample = seconds * threads / units
        if threads == 1:
            self.on_one += 1
            self.per_unit = sample if self.per_unit is None else min(self.per_unit, sample)
        elif self.per_unit is not None:
            self.per_unit = min(self.per_unit, sample)


_timings: dict[HostKernel, _Timing] = {}  # kernels are compiled once per process and kept


def _threads_for(kernel: HostKernel, units: int, threads: int | None) -> int:
    """How many host threads share ``units``: ``threads`` when given, else one per core for a
    launch expected (from this kernel's launches on one thread) to take over SPLIT_SECONDS."""
    if threads is not None:
        return max(1, min(int(threads), units))
    timing = _timings.get(kernel)
    if timing is None or timing.on_one < _Timing.FIRST_ON_ONE or timing.per_unit * units <= SPLIT_SECONDS:
        return 1
    return 1 if timing.launches % _Timing.RECHECK == 0 else min(CORES, units)


def _launch(kernel: HostKernel, pointers, counts, scalars, status, units: int,
            threads: int | None) -> None:
    """Run ``units`` units of ``kernel``: on this thread, or split between the pool and this one."""
    n = _threads_for(kernel, units, threads)
    address = _address(status)
    start = time.perf_counter()
    if n == 1:
        kernel(pointers, counts, scalars, address, 0, units)
    else:
        bounds = [units * i // n for i in range(n + 1)]
        futures = [_pool().submit(kernel, pointers, counts, scalars, address, lo, hi)
                   for lo, hi in zip(bounds[1:-1], bounds[2:])]
        kernel(pointers, counts, scalars, address, bounds[0], bounds[1])  # the first share on this thread
        for f in futures:
            f.result()
    timing = _timings.get(kernel)
    if timing is None:
        timing = _timings.setdefault(kernel, _Timing())
    timing.record(time.perf_counter() - start, units, n)


def _address(a: np.ndarray) -> int:
    if a.size == 0:
        return _EMPTY.ctypes.data
    if a.flags.writeable and a.dtype.isbuiltin == 1:  # the fast way, where the buffer protocol allows it
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    return a.__array_interface__["data"][0]


def run_graph(graph: Graph, binding: Binding, launch: Launch, *, checks: bool = True,
              threads: int | None = None, vector_width: int = 0) -> None:
    """Run ``graph`` natively; ``threads`` fixes the thread count (default: as many as pay),
    ``vector_width`` the threads per vector (default: the CPU's widest)."""
    if launch.lanes == 0:
        return
    kernel = host_kernel(graph, Target.host(checks=checks, vector_width=vector_width))
    scalars = scalar_words(graph, binding.scalars)
    arrays = [binding.flat[p.name] for p in graph.buffers]
    status = np.zeros(STATUS_WORDS, np.int64)
    extents = np.zeros(3, np.int64)
    pointers = [_address(a) for a in arrays]
    counts = [a.size for a in arrays]
    fits = kernel.prepare(pointers, counts, scalars, status.ctypes.data, extents.ctypes.data)
    units = kernel.plan.chunking.units(launch.extents)
    if kernel.plan.infallible and fits and not status[0]:  # nothing can fail: run on the caller's arrays
        _launch(kernel, pointers, counts, scalars, status, units, threads)
        return
    _run_on_scratch(kernel, graph, binding, launch, scalars, units, threads)


def _run_on_scratch(kernel: HostKernel, graph: Graph, binding: Binding, launch: Launch, scalars,
                    units: int, threads: int | None) -> None:
    scratch = binding.scratch()
    arrays = [scratch[p.name] for p in graph.buffers]
    status = np.zeros(STATUS_WORDS, np.int64)
    pointers = [_address(a) for a in arrays]
    counts = [a.size for a in arrays]
    _launch(kernel, pointers, counts, scalars, status, units, threads)
    error = status_error(graph, kernel.ordinals, status, binding.sizes, launch.extents)
    if error is not None:
        raise error
    binding.commit(scratch)


# -- the fast path ------------------------------------------------------------------------------


def _scalar_word(dtype):
    """A function from a plain Python number to the ABI word of ``dtype``, or None where
    the general path must check it (it raises NotImplementedError for values it leaves)."""
    if dtype.is_int and not dtype.is_bool:
        low, high, mask = dtype.min, dtype.max, (1 << dtype.bits) - 1

        def word(value):
            if type(value) is not int or not low <= value <= high:
                raise NotImplementedError
            return value & mask

        return word
    if dtype.is_float and dtype.bits in (32, 64):
        pack, unpack = (("<f", "<I") if dtype.bits == 32 else ("<d", "<Q"))

        def word(value):
            if type(value) not in (float, int) or type(value) is bool:
                raise NotImplementedError
            try:  # rounds to nearest even, as NumPy does; overflow is the general path's error
                return struct.unpack(unpack, struct.pack(pack, value))[0]
            except (OverflowError, struct.error):
                raise NotImplementedError from None

        return word
    return None


class FastLauncher:
    """Repeated launches of one graph with NumPy arrays and Python numbers: the argument
    checks of :func:`accy.backends.arguments.bind_arguments` for that case, done with
    attribute reads, then ``prepare`` and the kernel.  Anything it does not handle (other
    array-likes, a check that fails, a kernel that may fail) goes to the general path,
    which does it again in full and words any error."""

    def __init__(self, graph: Graph, resolve, target: Target, threads: int | None):
        self.graph = graph
        self.resolve = resolve  # extents -> the checked Launch (raises what the general path raises)
        self.threads = threads
        self.kernel = host_kernel(graph, target)
        outputs = graph.stored_buffers()
        self.buffers = []  # (position, dtype, declared count or None, is an output)
        self.scalars = []  # (position, word function)
        self.handled = True
        for position, p in enumerate(graph.params):
            if p.is_scalar:
                word = _scalar_word(p.dtype)
                self.handled &= word is not None
                self.scalars.append((position, word))
            else:
                self.buffers.append((position, p.dtype.numpy, p.count, p.name in outputs))
        self.outputs = [k for k, spec in enumerate(self.buffers) if spec[3]]
        self.arity = len(graph.params)
        self.rank = len(graph.axes)
        self.launches: dict[tuple, Launch] = {}  # extents -> the checked launch
        self.infallible = self.kernel.plan.infallible

    def __call__(self, args):
        if not self.handled or type(args) not in (list, tuple) or len(args) != self.arity:
            return NOT_HANDLED
        arrays = []
        for position, dtype, count, output in self.buffers:
            a = args[position]
            if (type(a) is not np.ndarray or a.dtype != dtype or not a.flags.c_contiguous or a.size == 0
                    or (count is not None and a.size != count) or (output and not a.flags.writeable)):
                return NOT_HANDLED
            arrays.append(a)
        for k in self.outputs:
            for j, other in enumerate(arrays):
                if j != k and np.may_share_memory(arrays[k], other):
                    return NOT_HANDLED
        try:
            scalars = [word(args[position]) for position, word in self.scalars]
        except NotImplementedError:
            return NOT_HANDLED
        pointers = [_address(a) for a in arrays]
        counts = [a.size for a in arrays]
        status = np.zeros(STATUS_WORDS + 3, np.int64)  # the status word, then the extents
        status_address = _address(status)
        fits = self.kernel.prepare(pointers, counts, scalars, status_address, status_address + 8 * STATUS_WORDS)
        if status[0]:
            return NOT_HANDLED  # the extents cannot be computed: the general path says why
        extents = tuple(status[STATUS_WORDS:STATUS_WORDS + self.rank].tolist())
        launch = self.launches.get(extents)
        if launch is None:
            if extents and min(extents) < 0:
                return NOT_HANDLED
            launch = self.launches[extents] = self.resolve(extents)
        if launch.lanes == 0:
            return None
        units = self.kernel.plan.chunking.units(extents)
        if fits and self.infallible:
            _launch(self.kernel, pointers, counts, scalars, status, units, self.threads)
            return None
        scratch = [a.copy() if spec[3] else a for a, spec in zip(arrays, self.buffers)]
        _launch(self.kernel, [_address(a) for a in scratch], counts, scalars, status, units,
                self.threads)
        if status[0]:
            sizes = {p.name: a.size for p, a in zip(self.graph.buffers, arrays)}
            raise status_error(self.graph, self.kernel.ordinals, status, sizes, extents)
        for k in self.outputs:
            np.copyto(arrays[k], scratch[k])
        return None


def fast_launcher(graph: Graph, resolve, *, checks: bool = True, threads: int | None = None,
                  vector_width: int = 0) -> FastLauncher:
    return FastLauncher(graph, resolve, Target.host(checks=checks, vector_width=vector_width), threads)


BACKEND = Backend("llvm", frozenset({"checks", "threads", "vector_width"}), run_graph, fast=fast_launcher)
