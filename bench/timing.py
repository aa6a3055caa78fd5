"""Timing and the machine: medians of repeated runs, and what else was using the CPU."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

TARGET_S = 1.0  # time spent measuring one combination, roughly


def measure(fn, budget: float, target: float = TARGET_S):
    """(median seconds, result) of ``fn()`` after a warm-up run (which compiles, for the JIT
    backends), or (None, reason) when that one run exceeds ``budget`` seconds."""
    start = time.perf_counter()
    result = fn()
    first = time.perf_counter() - start
    if first > budget:
        return None, f"one run took {first:.1f} s (over the {budget:.0f} s budget)"
    times = []
    repeats = int(min(50, max(3, target / max(first, 1e-6))))
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def machine() -> dict:
    """The machine and the software the figures were measured with."""
    info = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "python": sys.version.split()[0], "numpy": np.__version__}
    try:
        import llvmlite.binding as llvm

        info["llvm_cpu"] = llvm.get_host_cpu_name()
        from accy.backends.spmd import host_vector_width

        info["vector_width"] = host_vector_width()
    except Exception:  # pragma: no cover - informational only
        pass
    try:
        import torch

        info["torch"] = torch.__version__
    except ImportError:
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
