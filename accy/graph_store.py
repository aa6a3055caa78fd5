"""Optimised graphs on disk, for program bodies that can be named across processes.

accy's library builders name each body they make (:func:`name_body`: the builder and every
argument it was built from); a :class:`~accy.Program` of such a body keeps its optimised graph
in the compile cache, as its text with each op's source location, so a later process parses it
(3-4 ms for an attention entry) instead of tracing and optimising it (15-20 ms).  The key holds
the body's name, the program's name and parameters, accy's and Python's versions and a digest
of the code that makes graphs (accy's DSL, its library and the modules beside them, read when
accy is imported): a change to any of them misses.  A name belongs to the body object itself,
so a Program made with another body (``attrs.evolve(program, body=...)``) has none.  A user's
kernel has no name: what its body reads (other modules, mutable state) cannot be named from
another process, so it is traced once per process (:mod:`accy.trace_cache`).  The store
follows ``ACCY_CACHE`` and ``ACCY_CACHE_DIR`` like the rest of the compile cache.
"""

from __future__ import annotations

import json
import os
import sys
import weakref
from typing import Callable

from . import cache
from .dsl.ir import Graph, Param, SourceLocation
from .dsl.parse import parse
from .errors import AccyError
from .version import __version__

counts = {"stored": 0, "loaded": 0}  # this process's graphs written to and read from the disk
NOT_GRAPH_MAKERS = ("lowering", "codegen", "runtime", "emulator", "backends")  # accy's packages that only read graphs
ROOT = os.path.dirname(os.path.abspath(__file__))

_NAMES: "weakref.WeakKeyDictionary[Callable, str]" = weakref.WeakKeyDictionary()


def name_body(body: Callable, builder: Callable, *args) -> Callable:
    """``body``, named in every process by its ``builder`` and the arguments it was built from
    (frozen attrs values and the like, whose repr holds every field)."""
    _NAMES[body] = f"{builder.__module__}.{builder.__qualname__}{args!r}"
    return body


def body_name(body: Callable) -> str | None:
    """The name :func:`name_body` gave ``body``, or None."""
    try:
        return _NAMES.get(body)
    except TypeError:  # not weakly referable: never named
        return None


def graph_sources() -> list[str]:
    """accy's modules that may decide a graph, relative to the package (sorted)."""
    paths = []
    for folder, subfolders, names in os.walk(ROOT):
        subfolders[:] = [d for d in subfolders if d not in NOT_GRAPH_MAKERS and not d.startswith("__")]
        paths += [os.path.relpath(os.path.join(folder, n), ROOT) for n in names if n.endswith(".py")]
    return sorted(paths)


# read with accy (about 1 ms), not at the first graph: a file edited after the process imported
# it must not name a graph built from the code it runs
SOURCE_DIGEST = cache.files_digest(ROOT, graph_sources())


def stored_graph(name: str, program_name: str, parameters: tuple[Param, ...], build: Callable[[], Graph]) -> Graph:
    """The graph stored for body ``name`` in a program of ``program_name`` and ``parameters``,
    or ``build()``'s, stored for the next process."""
    if cache.cache_dir() is None:
        return build()
    key = cache.cache_key("graph", name, program_name, repr(parameters), SOURCE_DIGEST, f"accy-{__version__}",
                          f"python-{sys.version_info.major}.{sys.version_info.minor}")
    payload = cache.read(key)
    graph = _decoded(payload) if payload is not None else None
    if graph is not None and graph.name == program_name and graph.params == parameters:
        counts["loaded"] += 1
        return graph
    graph = build()
    cache.write(key, _encoded(graph))
    counts["stored"] += 1
    return graph


def _encoded(graph: Graph) -> bytes:
    locations = [None if op.location is None else
                 [op.location.filename, op.location.lineno, op.location.function, op.location.code]
                 for op in graph.body.walk()]
    return json.dumps({"text": graph.text(), "locations": locations}).encode()


def _decoded(payload: bytes) -> Graph | None:
    """The stored graph with its ops' locations; None (built again) where it does not read back."""
    try:
        stored = json.loads(payload)
        graph = parse(stored["text"])
        ops = list(graph.body.walk())
        if len(ops) != len(stored["locations"]):
            raise ValueError(f"{len(stored['locations'])} locations for {len(ops)} ops")
        for op, where in zip(ops, stored["locations"]):
            op.location = None if where is None else SourceLocation(*where)  # before anyone sees the graph
        graph._fact("text", lambda: stored["text"])  # what it was parsed from: the key of its compiled code
        return graph
    except (AccyError, ValueError, KeyError, TypeError) as e:
        cache.warn(f"a stored graph does not read back ({e}); tracing it again")
        return None
