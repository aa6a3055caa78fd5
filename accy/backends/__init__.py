"""Backends: each lowers or executes the typed SSA graph.

``run(program, args, backend=...)`` is the one entry point; it checks the
arguments and the launch geometry, then hands the graph to the backend.
"""

from __future__ import annotations

from typing import Mapping

from ..dsl.schedule import Limits
from ..errors import BackendUnavailableError
from .arguments import Binding, bind_arguments

BACKENDS = ("numpy", "llvm")


def run(program, args, *, backend: str = "numpy", limits: Limits | None = None,
        counts: Mapping[str, int] | None = None, shapes: Mapping[str, str] | None = None) -> None:
    """Run ``program`` on ``backend``; outputs are written in place into the argument arrays."""
    graph = program.graph
    program.launch(limits)  # geometry must fit the device limits, even on the CPU
    binding = bind_arguments(graph, args, counts=counts, shapes=shapes)
    if backend == "numpy":
        from .interpreter import run_graph

        run_graph(graph, binding)
        return None
    if backend == "llvm":
        from .host import run_graph

        run_graph(graph, binding)
        return None
    raise BackendUnavailableError(f"unknown backend {backend!r}; available: {', '.join(BACKENDS)}")


__all__ = ["run", "bind_arguments", "Binding", "BACKENDS"]
