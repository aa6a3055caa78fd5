"""Timing and the machine: medians of repeated runs, and what else was using the CPU."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

TARGET_S = 1.0  # time spent measuring one combination, roughly


def measure(fn, budget: float, target: float = TARGET_S, statistic=statistics.median):
    """(median seconds, or ``statistic`` of them, result) of ``fn()`` after a warm-up run (which
    compiles, for the JIT backends), or (None, reason) when one run exceeds ``budget`` seconds.
    A second run, not the first, sizes the repeats: the first includes the compile."""
    for _ in range(2):
        start = time.perf_counter()
        result = fn()
        once = time.perf_counter() - start
        if once > budget:
            return None, f"one run took {once:.1f} s (over the {budget:.0f} s budget)"
    times = []
    repeats = int(min(50, max(3, target / max(once, 1e-6))))
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistic(times), result


def machine() -> dict:
    """The machine and the software the figures were measured with."""
    info = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "python": sys.version.split()[0], "numpy": np.__version__}
    try:
        import llvmlite.binding as llvm

        info["llvm_cpu"] = llvm.get_host_cpu_name()
        from accy.codegen.host.chunking import host_vector_width

        info["vector_width"] = host_vector_width()
    except Exception:  # pragma: no cover - informational only
        pass
    try:  # the version only: importing torch slows every later ctypes call in the process
        info["torch"] = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        pass
    return info


def contention() -> dict:
    """The load average and the other processes using the CPU right now: figures measured
    while something else runs are slower, and ratios between them less so."""
    load = os.getloadavg()
    others = []
    try:
        out = subprocess.run(["ps", "-eo", "pid,pcpu,comm", "--sort=-pcpu"], capture_output=True, text=True,
                             timeout=5).stdout.splitlines()[1:]
        for line in out:
            pid, cpu, command = line.split(None, 2)
            if int(pid) != os.getpid() and float(cpu) >= 5.0:
                others.append(f"{command.strip()} ({cpu}% cpu)")
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    return {"load_average": [round(x, 2) for x in load], "other_processes": others[:8]}


@contextlib.contextmanager
def environment(**values):
    """The environment variables ``values`` set (None: unset) meanwhile."""
    saved = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)
        yield
    finally:
        for name, value in saved.items():
            os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)
