"""What every backend is: a name, the options its runs take, how it describes an
argument, and one function that executes a graph.

:func:`accy.backends.run` calls every backend the same way: it binds the arguments
(``describe`` turns each into an :class:`~accy.backends.arguments.ArrayInfo`,
host arrays or device arrays), computes the launch (extents, grid and block,
checked against the limits), then calls ``execute(graph, binding, launch,
**options)``.
"""

from __future__ import annotations

from typing import Callable

import attrs

from .arguments import ArrayInfo, host_info


NOT_HANDLED = object()  # a fast launcher's answer for a call the general path must take


@attrs.frozen
class Backend:
    name: str
    options: frozenset[str]
    # execute(graph, binding, launch, **options) -> what the run returns (a timing, a trace), usually None
    execute: Callable
    describe: Callable[[str, object], ArrayInfo] = host_info
    # raises BackendUnavailableError when the backend cannot run here (checked before the arguments)
    check_available: Callable[[dict], None] = lambda options: None
    # fast(graph, resolve, **options) -> a launcher for repeated calls: launcher(args) runs them and
    # returns the result, or NOT_HANDLED for a call the general path must take
    fast: Callable | None = None
