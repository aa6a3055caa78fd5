"""Backends: each lowers or executes the typed SSA graph.

``run(program, args, backend=...)`` is the one entry point; it checks the launch
geometry and the arguments, then hands the graph to the backend:

- ``numpy``: the reference interpreter (:mod:`accy.backends.interpreter`);
- ``llvm``: native code for this CPU through LLVM (:mod:`accy.backends.host`);
- ``cuda``: PTX on an NVIDIA GPU through PyCUDA (:mod:`accy.backends.cuda`).
"""

from __future__ import annotations

from typing import Mapping

from ..dsl.schedule import Limits
from ..errors import ArgumentError, BackendUnavailableError
from .arguments import Binding, bind_arguments

BACKENDS = ("numpy", "llvm", "cuda")
# what each backend's run takes besides the arguments
OPTIONS = {
    "numpy": frozenset({"memory_cap", "check_memory", "debug_thread", "debug_cap"}),
    "llvm": frozenset({"checks", "threads"}),
    "cuda": frozenset({"device", "timing"}),
}


def run(program, args, *, backend: str = "numpy", limits: Limits | None = None,
        counts: Mapping[str, int] | None = None, shapes: Mapping[str, str] | None = None, **options):
    """Run ``program`` on ``backend``; outputs are written in place into the argument arrays.

    ``options`` go to the backend: ``checks=False`` (llvm) drops bounds checks;
    ``timing=True`` (cuda) returns the kernel's time in milliseconds.
    """
    if backend not in BACKENDS:
        raise BackendUnavailableError(f"unknown backend {backend!r}; available: {', '.join(BACKENDS)}")
    unknown = sorted(set(options) - OPTIONS[backend])
    if unknown:
        raise ArgumentError(f"backend {backend!r} takes no option {', '.join(map(repr, unknown))}; "
                            f"its options are {', '.join(sorted(OPTIONS[backend])) or 'none'}")
    program.launch(limits)  # geometry must fit the device limits, even on the CPU
    if backend == "cuda":
        from .cuda import run_program

        return run_program(program, args, limits=limits, counts=counts, shapes=shapes, **options)
    binding = bind_arguments(program.graph, args, counts=counts, shapes=shapes)
    if backend == "numpy":
        from .interpreter import run_graph
    else:
        from .host import run_graph
    return run_graph(program.graph, binding, **options)


__all__ = ["run", "bind_arguments", "Binding", "BACKENDS"]
