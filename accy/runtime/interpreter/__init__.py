"""The numpy backend: the reference semantics, for SIMT launches (:mod:`.interpreter`) and
tile programs (:mod:`.tile_interpreter`, which evaluates elementwise ops with the former's table)."""

from __future__ import annotations

from ...dsl.ir import Graph
from ...dsl.schedule import Launch
from ..arguments import Binding, host_info
from ..contract import Backend
from .simt import DEFAULT_MEMORY_CAP, run_graph
from .tiles import run_tiles


def run(graph: Graph, binding: Binding, launch: Launch, **options):
    """Execute ``graph`` on checked arguments; outputs are written only on success."""
    if graph.is_tile_launch:
        return run_tiles(graph, binding, launch, debug_thread=options.get("debug_thread"),
                         check_memory=options.get("check_memory"),
                         memory_cap=options.get("memory_cap", DEFAULT_MEMORY_CAP))
    return run_graph(graph, binding, launch, **options)


BACKEND = Backend("numpy", frozenset({"memory_cap", "check_memory", "debug_thread", "debug_cap"}), run, host_info)
