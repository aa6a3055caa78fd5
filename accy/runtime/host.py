"""The LLVM host backend: the graph compiled to native code for this CPU.

The launcher (:mod:`accy.codegen.host.spmd`) runs a launch as units of work (chunks of
threads as vector lanes, or blocks); a native call runs a contiguous range of units,
and a launch big enough to pay for it is shared between the caller and a persistent pool
of worker threads, one per core (ctypes releases the GIL for the call): each thread claims
the next slice of units until none remain, so a thread slowed down by another process
does less of the work, and a worker that has not started when the work is done is not
waited for.

Nothing is half-written.  The launcher's ``prepare`` entry computes the extents and
checks, once for the whole launch, every access whose index it can bound (a tile launch
that reads nothing it writes: its ``check`` entry checks every program first, in slices).  Where that
covers every check of the kernel and holds, the launch cannot fail, and the kernel
writes the caller's arrays directly.  Otherwise outputs are written to scratch copies,
checked against the status word, and copied back only on success, as the interpreter
does.

A launch is interruptible: its units run in native calls of about SLICE_SECONDS each,
so Ctrl-C (or any signal whose handler raises) lands between two of them, and a pool
worker stops before its next slice.  An interrupted or failed launch waits for every worker
before it raises, so none writes after it.  A launch on scratch copies leaves the
outputs untouched; one that ran in place on the caller's arrays may have written part
of them, and its exception says so in a note.

:func:`fast_launcher` is the same for repeated calls with plain NumPy arrays and Python
numbers, checked with a few attribute reads; anything else takes the general path.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import functools
import os
import struct
import threading
import time
import weakref

import numpy as np

from .. import time_limit
from ..dsl.ir import Graph
from ..dsl.schedule import Launch
from ..codegen.abi import STATUS_WORDS, scalar_words, status_error
from .arguments import Binding
from ..codegen.machine import HostKernel, host_kernel
from .contract import NOT_HANDLED, Backend
from ..targets import Target

_EMPTY = np.zeros(1, np.int64)  # an empty buffer still points at 8 readable bytes (the ABI's promise)
SPLIT_SECONDS = 100e-6  # a launch expected to take longer is split between the cores
SLICE_SECONDS = 10e-3  # the longest a native call should run: how late an interrupt may land
TAIL_SECONDS = 25e-6  # the least a slice near a split launch's end should run: a call costs microseconds
LAUNCHES_KEPT = 256  # a fast launcher keeps the checked launches of the sizes it ran last


CORES = os.cpu_count() or 1


@functools.cache
def _pool() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(max_workers=CORES, thread_name_prefix="accy-host")


class _Timing:
    """One kernel's seconds per unit of work on one thread: the least a launch on one thread
    took (a first launch touching fresh pages takes longer).  A split launch's time times
    the threads that ran a slice of it bounds it from above, the split's overhead included,
    so it may only lower it."""

    FIRST_ON_ONE = 2  # launches timed on one thread before any split
    RECHECK = 64  # a kernel that splits runs every RECHECK-th launch on one thread again
    KEPT = 64  # argument sizes whose own time per unit is kept (for the slices)

    def __init__(self):
        self.per_unit: float | None = None
        self.on_one = 0
        self.launches = 0
        # (scalars, counts) -> the least seconds per unit at those arguments: a unit's work
        # depends on them (a trip count, a row length), so only they size a launch's slices
        self.at: dict[tuple, float] = {}

    def record(self, seconds: float, units: int, threads: int, key: tuple) -> None:
        self.launches += 1
        sample = seconds * threads / units
        if threads == 1:
            self.on_one += 1
            self.per_unit = sample if self.per_unit is None else min(self.per_unit, sample)
        elif self.per_unit is not None:
            self.per_unit = min(self.per_unit, sample)
        if key not in self.at and len(self.at) >= self.KEPT:
            self.at.clear()
        self.at[key] = min(self.at.get(key, sample), sample)


# by kernel, weakly: a timing goes with its kernel
_timings: "weakref.WeakKeyDictionary[HostKernel, _Timing]" = weakref.WeakKeyDictionary()


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
            threads: int | None, fits: bool, in_place: str | None = None) -> None:
    """Run ``units`` units of ``kernel`` (its launcher for whether prepare said the launch
    ``fits``): on this thread, or shared with the pool, each thread claiming the next slice
    of units until none remain; ``in_place`` names the kernel when it writes the caller's
    arrays (said if interrupted)."""
    call = kernel.launcher(fits)
    limit = time_limit.current()  # this thread's, for the workers too
    n = _threads_for(kernel, units, threads)
    address = _address(status)
    timing = _timings.get(kernel)
    key = (*scalars, *counts)
    per_unit = timing.at.get(key) if timing is not None else None  # None: new sizes, slices grow from one unit
    start = time.perf_counter()
    if n == 1 and per_unit is not None and per_unit * units <= SLICE_SECONDS:
        call(pointers, counts, scalars, address, 0, units)  # short: one call
        ran_on = 1
    else:
        work = _Units(units, n)
        stop = _Stop()
        try:
            for _ in range(n - 1):
                _pool().submit(_worker_share, call, pointers, counts, scalars, address, work, per_unit, limit, stop)
            _run_share(call, pointers, counts, scalars, address, work, per_unit, limit, stop)
            # a worker that has not started by now would find nothing left: it is not waited for
            stop.wait()
            if stop.error is not None:
                raise stop.error
        except BaseException as e:  # Ctrl-C between two slices, the time limit, or a worker's error
            # none of them may write once this raises (scratch copies are freed)
            stop.stop_and_wait()
            if in_place is not None:
                e.add_note(f"accy: kernel '{in_place}' ran in place on the caller's arrays (it could not fail), "
                           "so its outputs may be partly written")
            raise
        ran_on = work.threads
    if timing is None:
        timing = _timings.setdefault(kernel, _Timing())
    timing.record(time.perf_counter() - start, units, ran_on, key)


class _Units:
    """A launch's units ``[0, units)``, claimed in order a slice at a time by the ``threads``
    that share it, so that a thread slowed down (another process on its core) just claims
    fewer; near the end a slice is at most a part of what is left, so that they finish together."""

    def __init__(self, units: int, threads: int):
        self._lock = threading.Lock()
        self._next, self._units, self._threads = 0, units, threads
        self.threads = 0  # how many threads ran a slice (the launch's time is theirs)

    def claim(self, step: int, least: int, first: bool) -> tuple[int, int]:
        """The next ``[lo, hi)`` of at most ``step`` units, and near the end at most a part of
        what is left but at least ``least``; empty once none remain.  ``first``: the calling
        thread's first claim."""
        with self._lock:
            lo = self._next
            left = self._units - lo
            if self._threads > 1:
                step = min(step, max(least, -(-left // (2 * self._threads))))
            hi = self._next = lo + min(step, left)
            if first and hi > lo:
                self.threads += 1
            return lo, hi


def _run_share(call, pointers, counts, scalars, address: int, work: _Units,
               per_unit: float | None, limit: time_limit.Limit | None, stop) -> None:
    """Slices of ``work`` claimed one after another, each run in one native call of about
    SLICE_SECONDS (sized from the time per unit at these arguments, else growing from one
    unit, then by each call's own time), until none remain or ``stop`` is set; near the end
    of a split launch, slices of at least TAIL_SECONDS, so that the calls' own cost stays small.
    Between two calls the main thread takes a pending signal: Ctrl-C raises there; and past
    ``limit`` (:mod:`accy.time_limit`), TimeLimitError."""
    step = max(1, int(SLICE_SECONDS / per_unit)) if per_unit else 1
    least = max(1, int(TAIL_SECONDS / per_unit)) if per_unit else 1
    first = True
    while not stop.is_set():
        if limit is not None:
            limit.check()
        lo, hi = work.claim(step, least, first)
        if lo == hi:
            return
        first = False
        began = time.perf_counter()
        call(pointers, counts, scalars, address, lo, hi)
        took = time.perf_counter() - began
        least = max(1, int(TAIL_SECONDS * (hi - lo) / took)) if took > 0 else least
        if took < SLICE_SECONDS / 4:
            step = max(step, 4 * (hi - lo))
        elif took > 2 * SLICE_SECONDS:
            step = max(1, (hi - lo) // 2)


class _Stop:
    """A split launch's stop flag, the workers running under it and the first one's error:
    once :meth:`wait` or :meth:`stop_and_wait` returns, no worker runs, and none starts."""

    def __init__(self):
        self._cond = threading.Condition()
        self._stopped = False
        self._running = 0
        self.error: BaseException | None = None

    def is_set(self) -> bool:
        return self._stopped

    def fail(self, error: BaseException) -> None:
        """A worker's ``error``: the launch stops, and raises the first."""
        with self._cond:
            self._stopped = True
            if self.error is None:
                self.error = error

    def enter(self) -> bool:
        """A worker may start (it must :meth:`leave`), or the launch stopped first."""
        with self._cond:
            if self._stopped:
                return False
            self._running += 1
            return True

    def leave(self) -> None:
        with self._cond:
            self._running -= 1
            self._cond.notify_all()

    def wait(self) -> None:
        """Stop (a worker yet to start finds nothing to do) and wait for the running ones;
        Ctrl-C raises here as between two slices."""
        with self._cond:
            self._stopped = True
            while self._running:
                self._cond.wait()

    def stop_and_wait(self) -> None:
        """As :meth:`wait`, for a launch that is raising: another Ctrl-C does not cut it short."""
        with self._cond:
            self._stopped = True
            while self._running:
                try:
                    self._cond.wait()
                except BaseException:  # another Ctrl-C: the workers still use this launch's memory
                    pass


def _worker_share(*args) -> None:
    """A pool worker's :func:`_run_share`, counted by its stop flag: its error stops the other
    threads, and the caller raises it."""
    stop = args[-1]
    if not stop.enter():
        return
    try:
        _run_share(*args)
    except BaseException as e:
        stop.fail(e)
    finally:
        stop.leave()


def _check_whole(kernel: HostKernel, pointers, counts, scalars, status: np.ndarray, units: int) -> bool:
    """A tile launch's check-only pass over its ``units`` programs, on this thread in slices
    as a launch's (an interrupt lands between two; nothing is written yet), in program order
    so the first failure recorded is the first program's; stops there.  Whether all passed."""
    stop = threading.Event()

    def check(*args) -> None:
        kernel.check(*args)
        if status[0]:
            stop.set()

    _run_share(check, pointers, counts, scalars, _address(status), _Units(units, 1), None,
               time_limit.current(), stop)
    return not status[0]


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
    extents = np.zeros(len(graph.axes), np.int64)  # prepare writes one per grid axis
    pointers = [_address(a) for a in arrays]
    counts = [a.size for a in arrays]
    fits = kernel.prepare(pointers, counts, scalars, status.ctypes.data, extents.ctypes.data)
    units = kernel.plan.chunking.units(launch.extents)
    if getattr(kernel.plan, "checked_whole", False):  # every program is checked before it runs (tile_host)
        fits = fits and _check_whole(kernel, pointers, counts, scalars, status, units)
        if status[0]:
            raise status_error(graph, kernel.ordinals, status, binding.sizes, launch.extents)
    if kernel.plan.infallible and fits and not status[0]:  # nothing can fail: run on the caller's arrays
        _launch(kernel, pointers, counts, scalars, status, units, threads, True, in_place=graph.name)
        return
    _run_on_scratch(kernel, graph, binding, launch, scalars, units, threads, fits)


def _run_on_scratch(kernel: HostKernel, graph: Graph, binding: Binding, launch: Launch, scalars,
                    units: int, threads: int | None, fits: bool) -> None:
    scratch = binding.scratch()
    arrays = [scratch[p.name] for p in graph.buffers]
    status = np.zeros(STATUS_WORDS, np.int64)
    pointers = [_address(a) for a in arrays]
    counts = [a.size for a in arrays]
    _launch(kernel, pointers, counts, scalars, status, units, threads, fits)
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
    checks of :func:`accy.runtime.arguments.bind_arguments` for that case, done with
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
        # extents -> the checked launch (None: a negative extent, the general path's error);
        # bounded: a launcher called with ever new sizes keeps only the last LAUNCHES_KEPT
        self.launch_for = functools.lru_cache(maxsize=LAUNCHES_KEPT)(
            lambda extents: None if extents and min(extents) < 0 else resolve(extents))
        self.infallible = self.kernel.plan.infallible
        self.checked_whole = getattr(self.kernel.plan, "checked_whole", False)

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
        status = np.zeros(STATUS_WORDS + self.rank, np.int64)  # the status word, then the extents
        status_address = _address(status)
        fits = self.kernel.prepare(pointers, counts, scalars, status_address, status_address + 8 * STATUS_WORDS)
        if status[0]:
            return NOT_HANDLED  # the extents cannot be computed: the general path says why
        extents = tuple(status[STATUS_WORDS:STATUS_WORDS + self.rank].tolist())
        launch = self.launch_for(extents)
        if launch is None:
            return NOT_HANDLED
        if launch.lanes == 0:
            return None
        units = self.kernel.plan.chunking.units(extents)
        if fits and self.checked_whole and not _check_whole(self.kernel, pointers, counts, scalars, status, units):
            return NOT_HANDLED  # the general path checks again and raises the failure
        if fits and self.infallible:
            _launch(self.kernel, pointers, counts, scalars, status, units, self.threads, True,
                    in_place=self.graph.name)
            return None
        scratch = [a.copy() if spec[3] else a for a, spec in zip(arrays, self.buffers)]
        _launch(self.kernel, [_address(a) for a in scratch], counts, scalars, status, units,
                self.threads, fits)
        if status[0]:
            sizes = {p.name: a.size for p, a in zip(self.graph.buffers, arrays)}
            raise status_error(self.graph, self.kernel.ordinals, status, sizes, extents)
        for k in self.outputs:
            np.copyto(arrays[k], scratch[k])
        return None


def fast_launcher(graph: Graph, resolve, *, checks: bool = True, threads: int | None = None,
                  vector_width: int = 0) -> FastLauncher:
    return FastLauncher(graph, resolve, Target.host(checks=checks, vector_width=vector_width), threads)


BACKEND = Backend("llvm", frozenset({"checks", "threads", "vector_width"}), run_graph, fast=fast_launcher,
                  target=lambda arch: Target.host())
