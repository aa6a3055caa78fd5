"""Backends: each runs or lowers the typed SSA graph.

``run(program, args, backend=...)`` is the one entry point, the same for every
backend: it binds and checks the arguments, computes the launch (extents known
only at run time are evaluated here, and the geometry is checked against the
limits), then hands graph, binding and launch to the backend:

- ``numpy``: the reference interpreter (:mod:`accy.runtime.interpreter.simt`);
- ``llvm``: native code for this CPU through LLVM (:mod:`accy.runtime.host`);
- ``ptx``: the PTX ``cuda`` would launch, run on the CPU by an emulator (:mod:`accy.runtime.emulated`);
- ``cuda``: PTX on an NVIDIA GPU through cuda.core or PyCUDA (:mod:`accy.runtime.cuda`).
"""

from __future__ import annotations

import importlib
from typing import Mapping

from ..dsl.ops import BlockUnit
from ..dsl.schedule import Launch, Limits, ThreadBlocks, axes_on_x, gpu_grid
from ..errors import ArgumentError, BackendUnavailableError, LaunchError
from .arguments import Binding, bind_arguments
from .contract import NOT_HANDLED, Backend
from .extents import evaluate_extents
from .tensor_arguments import expand_tensor_arguments
from ..targets import WARP_SIZE

# backend name -> the module defining it as BACKEND (imported on first use; cuda imports its driver only when run)
_MODULES = {"numpy": "interpreter", "llvm": "host", "ptx": "emulated", "cuda": "cuda"}
BACKENDS = tuple(_MODULES)


def get_backend(name: str) -> Backend:
    if name not in _MODULES:
        raise BackendUnavailableError(f"unknown backend {name!r}; available: {', '.join(BACKENDS)}")
    return importlib.import_module(f"{__name__}.{_MODULES[name]}").BACKEND


def resolve_launch(graph, threads: ThreadBlocks, binding: Binding | None, limits: Limits | None) -> Launch:
    """The launch of ``graph`` with blocks of ``threads``: extents computed at run time come
    from the binding's sizes and scalars.  Checked against ``limits`` (CUDA's by default)."""
    extents = graph.static_extents
    if extents is None:
        if binding is None:
            raise LaunchError(f"kernel '{graph.name}': its launch extents are computed from run-time values; "
                              "pass the arguments (program.launch(args=...)) to size the launch")
        extents = evaluate_extents(graph, binding.sizes, binding.scalars)
        for axis_name, extent in zip(graph.launch_op.attrs["axes"], extents):
            if extent < 0:
                raise LaunchError(f"kernel '{graph.name}': axis '{axis_name}' has extent {extent} at run time; "
                                  "extents must be >= 0")
    return launch_for(graph, threads, extents, limits)


def launch_for(graph, threads: ThreadBlocks, extents, limits: Limits | None) -> Launch:
    """The launch covering ``extents``, checked against ``limits``."""
    _check_limits(limits)
    limits = limits or Limits.default
    if graph.is_block_launch or graph.is_tile_launch:  # the extents count blocks (programs); its own shape
        block = graph.block_shape if graph.is_block_launch else (graph.launch_op.attrs.warps * WARP_SIZE,)
        grid = gpu_grid(extents)
        _check_folded_axes(graph, extents, grid[0], limits)
        launch = limits.check(Launch(grid=grid, block=block + (1,) * (3 - len(block)), extents=tuple(extents)))
    else:
        launch = limits.check(threads.launch(extents))
    launch_op = graph.launch_op
    if launch_op.opdef.thread_blocks and launch_op.attrs.unit is BlockUnit.PROGRAM:
        return launch  # a distributed tile program's arrays: sized by the compiler within its target's limit
    shared = sum(op.attrs["count"] * op.attrs["dtype"].itemsize for op in graph.shared_arrays().values())
    if shared > limits.max_shared_bytes:
        raise LaunchError(f"kernel '{graph.name}': its shared arrays take {shared} bytes per block, over the limit "
                          f"of {limits.max_shared_bytes} bytes ({', '.join(graph.shared_arrays())})")
    return launch


def _check_folded_axes(graph, extents, blocks: int, limits: Limits) -> None:
    """A grid of more than three axes folds its first ones onto the GPU's x dimension: their
    product must fit x's limit (said here in the axes' names; Limits.check says the rest)."""
    folded = axes_on_x(len(extents))
    if folded > 1 and blocks > limits.max_grid[0]:
        names = ", ".join(f"'{name}'" for name in graph.launch_op.attrs.axes[:folded])
        product = " * ".join(str(e) for e in extents[:folded])
        raise LaunchError(f"kernel '{graph.name}': grid axes {names} fold onto the GPU's x dimension: {product} = "
                          f"{blocks} blocks, over its limit of {limits.max_grid[0]}")


def run(program, args, *, backend: str = "numpy", limits: Limits | None = None,
        counts: Mapping[str, int] | None = None, shapes: Mapping[str, str] | None = None, **options):
    """Run ``program`` on ``backend``; outputs are written in place into the argument arrays.

    ``options`` go to the backend, each checked against its table (an :class:`ArgumentError`
    names one it does not take): ``checks=False`` (llvm) drops bounds checks;
    ``timing=True`` (cuda) returns the kernel's time in milliseconds.
    """
    if program.tensors:  # each tensor's array -> its span and its shape, strides and offset
        args = expand_tensor_arguments(program.graph, args, on_cuda=get_backend(backend).on_gpu)
    if counts is None and shapes is None:
        # the types too: 2 == 2.0 and True == 1 share a hash, but only one of each pair is taken
        key = (backend, limits, *options.items(), *map(type, options.values()))
        try:
            launcher = program.launchers[key]
        except KeyError:
            launcher = program.launchers[key] = _fast_launcher(program, backend, limits, options)
        except TypeError:  # an option that is not hashable: no fast launcher for it
            launcher = None
        if launcher is not None:
            result = launcher(args)
            if result is not NOT_HANDLED:
                return result
    impl = get_backend(backend)
    options = _checked(impl, limits, options)
    impl.check_available(options)
    graph = program.graph_for(backend, options.get("arch"))
    if graph.static_extents is not None:
        program.launch(limits)  # geometry must fit the device limits before the arguments are looked at
    binding = bind_arguments(graph, args, counts=counts, shapes=shapes, describe=impl.describe)
    launch = resolve_launch(graph, program.threads, binding, limits)
    return impl.execute(graph, binding, launch, **options)


def _checked(impl: Backend, limits, options) -> dict:
    """The options as ``impl`` runs with them, and the limits, checked: an ArgumentError
    naming the first that is not taken."""
    _check_limits(limits)
    return impl.checked_options(options)


def _check_limits(limits) -> None:
    if limits is not None and not isinstance(limits, Limits):
        raise ArgumentError(f"limits={limits!r}: limits takes None (CUDA's) or an accy.Limits (such as "
                            f"Limits.default or Limits.testing), got {type(limits).__name__}")


def _fast_launcher(program, backend: str, limits, options):
    """The backend's fast launcher for these settings (made once; they are checked first), or None."""
    impl = get_backend(backend)
    options = _checked(impl, limits, options)
    if impl.fast is None:
        return None
    impl.check_available(options)
    graph, threads = program.graph_for(backend, options.get("arch")), program.threads
    if graph.static_extents is not None:
        program.launch(limits)  # as the general path does first
    return impl.fast(graph, lambda extents: launch_for(graph, threads, extents, limits), **options)


__all__ = ["run", "bind_arguments", "Binding", "BACKENDS", "get_backend", "resolve_launch", "Backend"]
