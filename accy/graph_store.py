"""Optimised graphs on disk, for programs that can be named across processes.

A :class:`~accy.Program` built with a ``disk_key`` (accy's library entries: the builder and
every argument it was built from) keeps its optimised graph in the compile cache, as its text
with each op's source location, so a later process parses it (3-4 ms for an attention entry)
instead of tracing and optimising it (15-20 ms).  The key holds a digest of the code that
makes graphs (accy's DSL, its library and the modules beside them): a change to any of it
misses.  A user's kernel has no such key: what its body reads (other modules, mutable state)
cannot be named from another process, so it is traced once per process
(:mod:`accy.trace_cache`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from typing import Callable

from .backends import cache
from .dsl.ir import Graph, SourceLocation
from .dsl.parse import parse
from .errors import AccyError

counts = {"stored": 0, "loaded": 0}  # this process's graphs written to and read from the disk


NOT_GRAPH_MAKERS = ("backends", "emulator")  # accy's packages that only read graphs


ROOT = os.path.dirname(os.path.abspath(__file__))


def graph_sources() -> list[str]:
    """accy's modules that may decide a graph, relative to the package (sorted)."""
    paths = []
    for folder, subfolders, names in os.walk(ROOT):
        subfolders[:] = [d for d in subfolders if d not in NOT_GRAPH_MAKERS and not d.startswith("__")]
        paths += [os.path.relpath(os.path.join(folder, n), ROOT) for n in names if n.endswith(".py")]
    return sorted(paths)


@functools.cache
def _source_digest() -> str:
    """A digest of :func:`graph_sources`, once a process."""
    digest = hashlib.sha256()
    for path in graph_sources():
        digest.update(path.encode())
        with open(os.path.join(ROOT, path), "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:16]


def stored_graph(disk_key: str, build: Callable[[], Graph]) -> Graph:
    """The graph stored under ``disk_key``, or ``build()``'s, stored for the next process."""
    if cache.cache_dir() is None:
        return build()
    key = cache.cache_key("graph", disk_key, _source_digest())
    payload = cache.read(key)
    graph = _decoded(payload) if payload is not None else None
    if graph is not None:
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
