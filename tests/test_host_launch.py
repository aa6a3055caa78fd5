"""How the llvm backend shares a launch's units between threads (accy/runtime/host.py): every
thread, the caller and the pool workers, claims the next slice of units until none remain,
so every unit runs exactly once, a thread slowed down does less, and a worker that has not
started when the work is done is not waited for."""

from __future__ import annotations

import threading
import time
import weakref

import numpy as np
import pytest

import accy
from accy import axis, dynamic_buffer, i32
from accy.codegen.machine import HostKernel
from accy.errors import TimeLimitError
from accy.runtime import host
from accy.time_limit import time_limit

# unit counts that are multiples of nothing in particular (primes, and fewer units than threads)
UNITS = (1, 2, 3, 7, 61, 997, 4099)


@accy.kernel(out=dynamic_buffer(i32))
def count_programs(k, p):
    """out[program] += 1, atomically: a unit run twice, or by two threads at once, counts 2."""

    @k.for_each_tile(grid=axis("program", p.out.size))
    def body(t, pid):
        p.out.atomic_add(pid["program"] + t.arange(1), t.full((1,), 1, i32))


@accy.kernel(out=dynamic_buffer(i32))
def count_lanes(k, p):
    """The same per thread of a 1-D launch, whose units are chunks of vector lanes."""
    k.for_each_1d(axis("i", p.out.size), lambda inner, idx: inner.atomic_add(p.out, idx["i"], 1))


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("units", UNITS)
def test_a_split_launch_runs_every_program_once(threads, units):
    for _ in range(3):  # the first launch at a size grows its slices from one unit, later ones from its time
        out = np.zeros(units, np.int32)
        count_programs.run([out], backend="llvm", threads=threads)
        assert (out == 1).all(), np.flatnonzero(out != 1)


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("lanes", [1, 5, 1001, 100_003])
def test_a_split_1d_launch_runs_every_lane_once(threads, lanes):
    for _ in range(3):
        out = np.zeros(lanes, np.int32)
        count_lanes.run([out], backend="llvm", threads=threads)
        assert (out == 1).all(), np.flatnonzero(out != 1)


class _Calls:
    """Every native call of the launches while installed, as (lo, hi, thread); ``hold`` makes the
    main thread's first call wait until a worker has called too, so a test sees the units shared."""

    def __init__(self, monkeypatch, hold: bool = False, fail_on_worker: int | None = None,
                 worker_delay: float = 0.0):
        self.calls: list[tuple[int, int, str]] = []
        self.running = 0
        self.records: list[int] = []  # the thread count each launch's time was recorded for
        self._lock = threading.Lock()
        self._worker_called = threading.Event()
        original_launcher, original_record = HostKernel.launcher, host._Timing.record
        # no launch timed yet: slices grow from one unit (a kernel this small, once timed, runs
        # its units in a few slices of TAIL_SECONDS)
        monkeypatch.setattr(host, "_timings", weakref.WeakKeyDictionary())

        def launcher(kernel, fits):
            call = original_launcher(kernel, fits)

            def recorded(pointers, counts, scalars, address, lo, hi):
                main = threading.current_thread() is threading.main_thread()
                with self._lock:
                    self.calls.append((lo, hi, threading.current_thread().name))
                    self.running += 1
                    first_on_main = main and sum(c[2] == threading.main_thread().name for c in self.calls) == 1
                    worker_calls = sum(c[2] != threading.main_thread().name for c in self.calls)
                try:
                    if not main:
                        self._worker_called.set()
                        if fail_on_worker is not None and worker_calls >= fail_on_worker:
                            raise MemoryError("a worker failed")
                        time.sleep(worker_delay)  # as if another process shared its core
                    elif hold and first_on_main:
                        assert self._worker_called.wait(10), "no worker joined the launch"
                    call(pointers, counts, scalars, address, lo, hi)
                finally:
                    with self._lock:
                        self.running -= 1

            return recorded

        def record(timing, seconds, units, threads, key):
            self.records.append(threads)
            original_record(timing, seconds, units, threads, key)

        monkeypatch.setattr(HostKernel, "launcher", launcher)
        monkeypatch.setattr(host._Timing, "record", record)

    def covered(self, units: int) -> None:
        """The calls' slices cover ``[0, units)`` exactly once."""
        slices = sorted((lo, hi) for lo, hi, _ in self.calls)
        assert slices[0][0] == 0 and slices[-1][1] == units
        assert all(lo < hi for lo, hi in slices)
        assert all(a[1] == b[0] for a, b in zip(slices, slices[1:])), slices

    def threads(self) -> set[str]:
        return {name for _, _, name in self.calls}


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("units", [61, 4099])
def test_the_threads_of_a_launch_claim_slices_that_cover_the_units_once(monkeypatch, threads, units):
    count_programs.run([np.zeros(units, np.int32)], backend="llvm", threads=1)  # compiled
    calls = _Calls(monkeypatch, hold=True)
    out = np.zeros(units, np.int32)
    count_programs.run([out], backend="llvm", threads=threads)
    assert (out == 1).all()
    calls.covered(units)
    assert threading.main_thread().name in calls.threads() and len(calls.threads()) >= 2
    assert calls.records == [len(calls.threads())]  # the launch's time is that of the threads that ran it


@pytest.mark.parametrize("threads", [2, 3])
def test_a_thread_slowed_down_does_less_of_the_work(monkeypatch, threads):
    units = 997
    count_programs.run([np.zeros(units, np.int32)], backend="llvm", threads=1)
    calls = _Calls(monkeypatch, hold=True, worker_delay=0.05)
    out = np.zeros(units, np.int32)
    count_programs.run([out], backend="llvm", threads=threads)
    assert (out == 1).all()
    calls.covered(units)
    on_main = sum(hi - lo for lo, hi, name in calls.calls if name == threading.main_thread().name)
    assert on_main > units * 3 // 4  # before: a fixed share each, the main thread's 1 / threads


def test_a_worker_that_has_not_started_when_the_work_is_done_is_not_waited_for(monkeypatch):
    """Every pool thread is busy (another launch, another caller): the caller does all the work
    alone and returns, and the worker's task, once it runs, finds the launch over."""
    units = 997
    count_programs.run([np.zeros(units, np.int32)], backend="llvm", threads=1)
    started, release = threading.Semaphore(0), threading.Event()

    def busy():
        started.release()
        release.wait(20)

    blockers = [host._pool().submit(busy) for _ in range(host.CORES)]
    try:
        for _ in blockers:
            assert started.acquire(timeout=10)
        calls = _Calls(monkeypatch)
        out = np.zeros(units, np.int32)
        began = time.perf_counter()
        count_programs.run([out], backend="llvm", threads=2)
        assert time.perf_counter() - began < 5  # before: until the blockers ended (20 s)
        assert (out == 1).all()
        calls.covered(units)
        assert calls.threads() == {threading.main_thread().name}
        assert calls.records == [1]
    finally:
        release.set()
        for b in blockers:
            b.result()
    host._pool().submit(lambda: None).result()  # the pool has run the queued worker too
    assert calls.threads() == {threading.main_thread().name}  # which did nothing


@pytest.mark.parametrize("threads", [2, 3])
def test_a_workers_error_stops_the_launch_and_is_raised_once_no_call_runs(monkeypatch, threads):
    units = 4099
    count_programs.run([np.zeros(units, np.int32)], backend="llvm", threads=1)
    calls = _Calls(monkeypatch, hold=True, fail_on_worker=1)  # a worker's first call fails, the caller's waits
    out = np.zeros(units, np.int32)
    with pytest.raises(MemoryError, match="a worker failed") as err:
        count_programs.run([out], backend="llvm", threads=threads)
    assert calls.running == 0
    assert sum(hi - lo for lo, hi, _ in calls.calls) < units  # the caller stopped too
    assert not getattr(err.value, "__notes__", None) and (out == 0).all()  # it ran on scratch copies (atomics)
    made = len(calls.calls)
    time.sleep(0.2)
    assert len(calls.calls) == made  # no thread claimed a slice after the raise
    assert calls.records == []


def test_a_split_launch_past_its_time_limit_is_stopped_between_slices():
    program = _slow_program()
    n = 1 << 16
    dst, x = np.zeros(n, np.float32), np.ones(n, np.float32)
    program.run([dst[:64], x[:64], 10], backend="llvm", threads=1)  # compiled
    began = time.perf_counter()
    with pytest.raises(TimeLimitError, match="ran past its time limit"):
        with time_limit(0.2, "the slow launch"):
            program.run([dst, x, 400_000], backend="llvm", threads=2)  # seconds, uninterrupted
    assert time.perf_counter() - began < 3
    written = dst.copy()
    time.sleep(0.2)
    assert (dst == written).all() and not dst.all()  # stopped part-way, and nothing wrote after


def _slow_program():
    """dst[i] = a loop of ``trips`` steps from x[i]: a launch as long as one likes."""

    @accy.kernel(dst=dynamic_buffer(accy.f32), x=dynamic_buffer(accy.f32), trips=accy.scalar(accy.index))
    def slow_steps(k, a):
        @k.for_each_1d(axis("i", a.dst.size))
        def each(inner, idx):
            i = idx["i"]
            a.dst[i] = inner.fold_range(0, a.trips, 1, a.x[i], lambda inner, j, acc: acc * 0.999 + 0.5)

    return slow_steps
