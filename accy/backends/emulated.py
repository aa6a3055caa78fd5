"""The ``ptx`` backend: the PTX the ``cuda`` backend would launch, run on the CPU by the
emulator in :mod:`accy.emulator`.

It compiles exactly as ``backend="cuda"`` does (:func:`accy.backends.gpu.kernel_ptx`:
the same function, options and block shape; ``arch`` defaults to ``sm_80``) and
launches through the same host half (:class:`accy.backends.gpu.DeviceLaunch`:
marshalling, the status word, copy-back on success); only the driver differs: the
emulator behind the same interface as cuda.core and PyCUDA
(:class:`accy.backends.drivers.emulator.EmulatorDriver`).  The emulator checks every
global, shared and local access against its allocation, so a wrong bounds-check
wrapper shows up here as a
:class:`~accy.emulator.PtxMemoryError` naming the PTX line, the address and the
thread, which the kernel's own checks could not catch; and it checks every launch for races
(:mod:`accy.emulator.races`), whatever order (``schedule``) its warps run in.
"""

from __future__ import annotations

import functools
import threading

from ..dsl.ir import Graph
from ..dsl.schedule import Launch
from .arguments import Binding
from .contract import Backend
from .drivers.emulator import EmulatorDriver
from .gpu import DeviceLaunch, kernel_ptx
from ..emulator import Device

_lock = threading.Lock()  # one emulated GPU per process, one launch at a time


@functools.cache
def device() -> Device:
    """The process's emulated GPU."""
    return Device()


def execute(graph: Graph, binding: Binding, launch: Launch, *, arch: str = "sm_80", fast_math: bool = False,
            schedule=None) -> None:
    """Run ``graph``'s PTX for ``arch`` on the emulator, its warps in the order ``schedule`` says
    (:mod:`accy.emulator.schedule`; None: ``ACCY_PTX_SCHEDULE``, else lockstep)."""
    if launch.lanes == 0:
        return None
    ptx = kernel_ptx(graph, launch, arch, fast_math)
    with _lock:
        driver = EmulatorDriver(device(), arch, schedule)
        return DeviceLaunch(driver, graph, binding, launch).run(driver.load(ptx, graph.name))


BACKEND = Backend("ptx", frozenset({"arch", "fast_math", "schedule"}), execute)
