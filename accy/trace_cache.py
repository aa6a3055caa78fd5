"""Tracing once per process: two Programs with the same name, parameters and body give the
same graph objects, so the second is neither traced nor optimised again (and the backends,
which keep compiled code per graph, find it at once).

A body's key is what a trace of it can read: its code, its closure's values, its defaults, and
the module-level names its code (and the functions it defines) uses, each by value, and
functions among them by the same key, recursively.  Only values that cannot change count: None,
numbers (NumPy's scalars too), strings, bytes, enum members, classes, modules, built-in functions, frozen attrs
instances (DTypes, specs) and tuples and frozensets of them.  A body that reaches anything
else (a list, a dict, an object with state) has no key and is traced every time.

What the key cannot see, the cache cannot either: a body whose graph depends on the state of a
module it reads an attribute of (``config.block = 64`` between two traces), on an environment
variable, a file or a random draw gets the first trace's graph again.  (Across processes only
accy's own library entries keep their graphs, on disk: :mod:`accy.graph_store`.)  ``ACCY_TRACE_CACHE=0``
turns the cache off.
"""

from __future__ import annotations

import collections
import enum
import os
import threading
import types
from typing import Hashable

import attrs
import numpy as np

KEPT = 256  # graphs kept: the least recently used go first
_PLAIN = (type(None), bool, int, float, complex, str, bytes, np.generic, types.ModuleType,
          types.BuiltinFunctionType, type, enum.Enum)


class Unkeyable(Exception):
    """A value a trace may read that could change between two traces."""


def _frozen_attrs(value) -> bool:
    cls = type(value)
    return attrs.has(cls) and getattr(cls.__setattr__, "__name__", "") == "_frozen_setattrs"


def _value_key(value, seen: set) -> Hashable:
    if isinstance(value, _PLAIN):
        return (type(value), value)
    if isinstance(value, (tuple, frozenset)):
        return (type(value), tuple(_value_key(v, seen) for v in value))
    if isinstance(value, types.FunctionType):
        return _function_key(value, seen)
    if _frozen_attrs(value):
        hash(value)  # a frozen attrs instance holding a list is not hashable: Unkeyable below
        return (type(value), value)
    raise Unkeyable(type(value).__name__)


def _code_names(code: types.CodeType):
    """The global names ``code`` and the code objects nested in it may read."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_names(const)


def _function_key(fn: types.FunctionType, seen: set) -> Hashable:
    if id(fn) in seen:  # recursion: its key is being built
        return ("recursive", fn.__code__)
    seen.add(id(fn))
    closure = tuple(_value_key(cell.cell_contents, seen) for cell in fn.__closure__ or ())
    defaults = _value_key(fn.__defaults__, seen)
    kwdefaults = _value_key(tuple(sorted((fn.__kwdefaults__ or {}).items())), seen)
    names = sorted({n for n in _code_names(fn.__code__) if n in fn.__globals__})
    globals_ = tuple((n, _value_key(fn.__globals__[n], seen)) for n in names)
    return (fn.__code__, closure, defaults, kwdefaults, globals_)


def body_key(body) -> Hashable | None:
    """The key of ``body`` (see the module's doc), or None when it has none."""
    if not isinstance(body, types.FunctionType):
        return None
    try:
        key = _function_key(body, set())
        hash(key)
    except (Unkeyable, TypeError, ValueError):
        return None
    return key


def enabled() -> bool:
    return os.environ.get("ACCY_TRACE_CACHE", "1").lower() not in ("0", "false", "no", "off")


class TraceCache:
    """``(name, parameters, body key)`` -> what was built from it, the least recently used
    dropped past ``KEPT``."""

    def __init__(self):
        self._graphs: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()
        self.traces = 0  # how many graphs were built, not found (tests count them)

    def get(self, key: Hashable | None, build):
        """``build()``'s result, built once per ``key`` (every time for None)."""
        if key is None or not enabled():
            self.traces += 1
            return build()
        with self._lock:
            if key in self._graphs:
                self._graphs.move_to_end(key)
                return self._graphs[key]
        graph = build()  # outside the lock: a body may build another Program's graph
        self.traces += 1
        with self._lock:
            self._graphs[key] = graph
            while len(self._graphs) > KEPT:
                self._graphs.popitem(last=False)
        return graph


TRACED = TraceCache()  # (name, parameters, body key) -> the traced graph
OPTIMISED = TraceCache()  # the same -> the optimised graph
