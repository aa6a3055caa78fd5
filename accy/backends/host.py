"""The LLVM host backend: the graph compiled to native code for this CPU.

The whole logical grid runs in one native call of the JIT-compiled launcher.
Outputs are written to scratch copies, checked against the status word, and
copied back only on success, exactly as in the interpreter.
"""

from __future__ import annotations

import numpy as np

from ..dsl.ir import Graph
from .arguments import Binding
from .codegen import host_kernel
from .llvm import STATUS_WORDS, Target, status_error, total_lanes


def run_graph(graph: Graph, binding: Binding, *, checks: bool = True) -> None:
    lanes = total_lanes(graph)
    if lanes == 0:
        return
    kernel = host_kernel(graph, Target.host(checks=checks))
    scratch = {name: (a.copy() if name in binding.outputs else a) for name, a in binding.flat.items()}
    arrays = [scratch[p.name] for p in graph.params]
    status = np.zeros(STATUS_WORDS, np.int64)
    kernel([a.ctypes.data for a in arrays], [a.size for a in arrays], status.ctypes.data, 0, lanes)
    error = status_error(graph, kernel.ordinals, status, {p.name: a.size for p, a in zip(graph.params, arrays)})
    if error is not None:
        raise error
    for name in binding.outputs:
        np.copyto(binding.flat[name], scratch[name])
