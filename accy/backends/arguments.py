"""Binding user arguments to kernel parameters, with the checks every backend shares.

Arguments come by position (parameter order) or by name.  Each argument is first
described as an :class:`ArrayInfo` (dtype, size, layout, writability and the
byte range it occupies), by NumPy for host arrays or by ``__cuda_array_interface__``
for device arrays, and every check runs on that description before anything
executes, so a bad call never writes an output.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Mapping, Sequence

import attrs
import numpy as np

from ..dsl.ir import Graph, Param
from ..errors import ArgumentError


@attrs.frozen
class ArrayInfo:
    """What the checks need to know about one argument, host or device."""

    dtype: np.dtype
    shape: tuple[int, ...]
    c_contiguous: bool
    writeable: bool
    address: int  # first byte
    space: str  # "host" or "cuda": memory ranges only alias within one space
    strides: tuple[int, ...] | None = None

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def overlaps(self, other: "ArrayInfo") -> bool:
        if self.space != other.space or not self.nbytes or not other.nbytes:
            return False
        return self.address < other.address + other.nbytes and other.address < self.address + self.nbytes


def host_info(name: str, a) -> ArrayInfo:
    """Describe a NumPy array; anything else is an error naming the argument."""
    if not isinstance(a, np.ndarray):
        kind = "a device array" if hasattr(a, "__cuda_array_interface__") else type(a).__name__
        raise ArgumentError(f"argument '{name}': expected a numpy.ndarray, got {kind}")
    return ArrayInfo(a.dtype, a.shape, a.flags.c_contiguous, a.flags.writeable,
                     a.__array_interface__["data"][0], "host", a.strides)


@attrs.frozen
class Binding:
    """Checked arguments: each parameter's array, its description, and for host
    arrays its flat (1-D) view."""

    arrays: dict[str, object]
    infos: dict[str, ArrayInfo]
    outputs: frozenset[str]

    @functools.cached_property
    def flat(self) -> dict[str, np.ndarray]:
        return {name: a.reshape(-1) for name, a in self.arrays.items()}


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
    describe: Callable[[str, object], ArrayInfo] = host_info,
) -> Binding:
    """Check ``args`` against ``graph``'s parameters.

    ``counts`` overrides the parameters' declared element counts (a library entry
    knows its shapes); ``shapes`` describes them in messages (``b=3 q=2 h=5``);
    ``describe`` turns an argument into an :class:`ArrayInfo` (host arrays by default).
    """
    outputs = graph.stored_buffers()
    named = _by_name(graph.params, args)
    infos = {}
    for p in graph.params:
        info = infos[p.name] = describe(p.name, named[p.name])
        if info.dtype != p.dtype.numpy:
            raise ArgumentError(f"argument '{p.name}': expected dtype {p.dtype.numpy} ({p.dtype}), got {info.dtype}")
        count = (counts or {}).get(p.name, p.count)
        if count is not None and info.size != count:
            described = f" ({shapes[p.name]})" if shapes and p.name in shapes else ""
            raise ArgumentError(
                f"argument '{p.name}': expected {count} elements{described}, got {info.size} (shape {info.shape})"
            )
        if not info.c_contiguous:
            raise ArgumentError(
                f"argument '{p.name}' is not C-contiguous (strides {info.strides}); pass a contiguous copy "
                "(np.ascontiguousarray(...))"
            )
        if p.name in outputs and not info.writeable:
            raise ArgumentError(f"argument '{p.name}' is read-only, but the kernel stores to it")
    for out in sorted(outputs):
        for p in graph.params:
            if p.name != out and infos[out].overlaps(infos[p.name]):
                raise ArgumentError(
                    f"argument '{out}' shares memory with argument '{p.name}'; an output must not alias another argument"
                )
    return Binding(named, infos, frozenset(outputs))
