"""The ``ptx`` backend: the PTX the ``cuda`` backend would launch, run on the CPU by the
emulator in :mod:`accy.emulator`.

It compiles exactly as ``backend="cuda"`` does (:func:`accy.runtime.gpu.kernel_ptx`:
the same function, options and block shape; ``arch`` defaults to ``sm_80``) and
launches through the same host half (:class:`accy.runtime.gpu.DeviceLaunch`:
marshalling, the status word, copy-back on success); only the driver differs: the
emulator behind the same interface as cuda.core and PyCUDA
(:class:`accy.runtime.drivers.emulator.EmulatorDriver`).  The emulator checks every
global, shared and local access against its allocation, so a wrong bounds-check
wrapper shows up here as a
:class:`~accy.emulator.PtxMemoryError` naming the PTX line, the address and the
thread, which the kernel's own checks could not catch; and it checks every launch for races
(:mod:`accy.emulator.races`), whatever order (``schedule``) its warps run in.
"""

from __future__ import annotations

import functools
import threading

import attrs

from ..dsl.ir import Graph
from ..dsl.schedule import Launch
from .arguments import Binding
from .contract import Backend
from .drivers.emulator import EmulatorDriver
from .gpu import DeviceLaunch, kernel_ptx, launch_graph
from ..targets import Target
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
    graph = launch_graph(graph, binding, launch)  # the cuda backend's choice, 32-bit indices where they fit
    ptx = kernel_ptx(graph, launch, arch, fast_math)
    with _lock:
        driver = EmulatorDriver(device(), arch, schedule)
        return DeviceLaunch(driver, graph, binding, launch).run(driver.load(ptx, graph.name))


def _estimate(program, args, options, limits) -> float:
    """A run's time on the GPU ``options``' arch, as accy profile estimates it: the emulator's own
    wall time says nothing of a GPU's."""
    return program.profile(args, arch=options.get("arch", "sm_80"), limits=limits).estimated_seconds


BACKEND = Backend("ptx", frozenset({"arch", "fast_math", "schedule"}), execute,
                  target=lambda arch: Target.nvptx(arch or "sm_80"),
                  device=lambda options: f"ptx {options.get('arch', 'sm_80')}", estimate=_estimate)


def profile(program, args, *, arch: str = "sm_90", gpu=None, sample: int | None = None, limits=None,
            counts=None, shapes=None):
    """``program`` on the emulator as ``backend="ptx"`` runs it for ``arch``, counting (see
    :mod:`accy.emulator.profile`): its outputs go to scratch buffers, the caller's arrays are
    untouched.  Returns the :class:`~accy.emulator.profile.Profile` for ``gpu`` (a name or a
    GPU; None: the arch's, an A100 for sm_8x, an H200 for sm_90)."""
    import numpy as np

    from ..emulator.profile import LaunchCounters, build_profile, default_gpu, gpu_named, run_counted
    from ..codegen.abi import STATUS_WORDS, status_error
    from .arguments import bind_arguments
    from .tensor_arguments import expand_tensor_arguments
    from . import resolve_launch

    options = BACKEND.checked_options({"arch": arch})
    arch = options["arch"]
    gpu = default_gpu(arch) if gpu is None else gpu_named(gpu)
    graph = program.graph_for("ptx", arch)
    if program.tensors:
        args = expand_tensor_arguments(program.graph, args)
    if graph.static_extents is not None:
        program.launch(limits)
    binding = bind_arguments(graph, args, counts=counts, shapes=shapes, describe=BACKEND.describe)
    launch = resolve_launch(graph, program.threads, binding, limits)
    dev = device()
    if launch.lanes == 0:
        return build_profile(None, LaunchCounters(), (), kernel=graph.name, arch=arch, gpu=gpu, grid=launch.grid,
                             block=launch.block, gmem=dev.gmem)
    graph = launch_graph(graph, binding, launch)
    ptx = kernel_ptx(graph, launch, arch)
    with _lock:
        driver = EmulatorDriver(dev, arch)
        function = driver.load(ptx, graph.name)
        staged = DeviceLaunch(driver, graph, binding, launch)
        try:
            spec, _, status = staged.parameters()
            counters, chosen = run_counted(function, spec.grid, spec.block, spec.params, spec.shared_bytes, sample,
                                           gpu=gpu, arch=arch)
            words = np.zeros(STATUS_WORDS, np.int64)
            driver.copy_from_device(words, status, None)
            error = status_error(graph, tuple(graph.body.walk()), words, binding.sizes, launch.extents)
            if error is not None:
                raise error
            built = build_profile(function, counters, chosen, kernel=graph.name, arch=arch, gpu=gpu, grid=spec.grid,
                                  block=spec.block, gmem=dev.gmem)
            return attrs.evolve(built, ptx=ptx)
        finally:
            for address in staged.allocations:
                driver.free(address)
