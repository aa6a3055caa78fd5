"""Binding user arguments to kernel parameters, with the checks every backend shares.

Arguments come by position (parameter order) or by name.  Every check runs
before anything executes, so a bad call never writes an output.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import attrs
import numpy as np

from ..dsl.ir import Graph, Param
from ..errors import ArgumentError


@attrs.frozen
class Binding:
    """Checked arguments: each parameter's array and its flat (1-D) view."""

    arrays: dict[str, np.ndarray]
    flat: dict[str, np.ndarray]
    outputs: frozenset[str]


def _by_name(params: Sequence[Param], args) -> dict[str, object]:
    names = [p.name for p in params]
    if isinstance(args, Mapping):
        unknown = [k for k in args if k not in names]
        missing = [n for n in names if n not in args]
        if unknown or missing:
            parts = []
            if missing:
                parts.append(f"missing {', '.join(map(repr, missing))}")
            if unknown:
                parts.append(f"unknown {', '.join(map(repr, unknown))}")
            raise ArgumentError(f"arguments by name: {'; '.join(parts)}; parameters are ({', '.join(names)})")
        return {n: args[n] for n in names}
    if isinstance(args, np.ndarray) or not isinstance(args, Sequence):
        raise ArgumentError(
            f"arguments must be a sequence in parameter order ({', '.join(names)}) or a mapping by name, "
            f"got {type(args).__name__}"
        )
    if len(args) != len(names):
        raise ArgumentError(f"expected {len(names)} arguments ({', '.join(names)}), got {len(args)}")
    return dict(zip(names, args))


def bind_arguments(
    graph: Graph,
    args,
    *,
    counts: Mapping[str, int] | None = None,
    shapes: Mapping[str, str] | None = None,
) -> Binding:
    """Check ``args`` against ``graph``'s parameters.

    ``counts`` overrides the parameters' declared element counts (a library entry
    knows its shapes); ``shapes`` describes them in messages (``b=3 q=2 h=5``).
    """
    outputs = graph.stored_buffers()
    named = _by_name(graph.params, args)
    arrays, flat = {}, {}
    for p in graph.params:
        a = named[p.name]
        if not isinstance(a, np.ndarray):
            raise ArgumentError(f"argument '{p.name}': expected a numpy.ndarray of {p.dtype.numpy}, got {type(a).__name__}")
        if a.dtype != p.dtype.numpy:
            raise ArgumentError(f"argument '{p.name}': expected dtype {p.dtype.numpy} ({p.dtype}), got {a.dtype}")
        count = (counts or {}).get(p.name, p.count)
        if count is not None and a.size != count:
            described = f" ({shapes[p.name]})" if shapes and p.name in shapes else ""
            raise ArgumentError(f"argument '{p.name}': expected {count} elements{described}, got {a.size} (shape {a.shape})")
        if not a.flags.c_contiguous:
            raise ArgumentError(
                f"argument '{p.name}' is not C-contiguous (strides {a.strides}); pass np.ascontiguousarray(...)"
            )
        if p.name in outputs and not a.flags.writeable:
            raise ArgumentError(f"argument '{p.name}' is read-only, but the kernel stores to it")
        arrays[p.name] = a
        flat[p.name] = a.reshape(-1)
    for out in sorted(outputs):
        for p in graph.params:
            if p.name != out and np.shares_memory(arrays[out], arrays[p.name]):
                raise ArgumentError(
                    f"argument '{out}' shares memory with argument '{p.name}'; an output must not alias another argument"
                )
    return Binding(arrays, flat, frozenset(outputs))
