"""Kernel signatures and tracing: parameters are declared, a body is called once
with a builder and its arguments, and what it records becomes a graph."""

from __future__ import annotations

import re
from typing import Callable, Mapping

import attrs

from ..errors import TraceError
from .builder import Builder, BufferHandle, Traced
from .ir import Block, Graph, Param, ParamKind
from .passes import verify
from .types import DType, as_dtype

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _dtype(value) -> DType:
    try:
        return as_dtype(value)
    except TypeError as e:
        raise TraceError(str(e)) from None


@attrs.frozen
class BufferSpec:
    """A buffer parameter's declaration: element type and, when fixed, element count."""

    dtype: DType = attrs.field(converter=_dtype)
    count: int | None = None


@attrs.frozen
class ScalarSpec:
    """A scalar parameter's declaration: a value of ``dtype`` passed at run time."""

    dtype: DType = attrs.field(converter=_dtype)


def dynamic_buffer(dtype) -> BufferSpec:
    """A buffer of ``dtype`` whose length is given by the argument at run time."""
    return BufferSpec(dtype)


def buffer(dtype, count: int) -> BufferSpec:
    """A buffer of ``dtype`` holding exactly ``count`` elements (checked at run time)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise TraceError(f"buffer: count must be a non-negative int, got {count!r}")
    return BufferSpec(dtype, count)


def scalar(dtype) -> ScalarSpec:
    """A scalar of ``dtype`` passed by value when the kernel runs (``scalar(index)`` for a size)."""
    return ScalarSpec(dtype)


dynamicBuffer = dynamic_buffer


def parameters(declared: Mapping[str, BufferSpec | ScalarSpec]) -> tuple[Param, ...]:
    """Check declarations by name and turn them into graph parameters."""
    if isinstance(declared, tuple) and all(isinstance(p, Param) for p in declared):
        return declared
    params = []
    for name, spec in dict(declared).items():
        if not isinstance(name, str) or not _IDENT.match(name):
            raise TraceError(f"parameter name {name!r} is not an identifier")
        if isinstance(spec, ScalarSpec):
            params.append(Param(name, spec.dtype, kind=ParamKind.scalar))
        elif isinstance(spec, BufferSpec):
            params.append(Param(name, spec.dtype, spec.count))
        else:
            raise TraceError(f"parameter '{name}': expected dynamic_buffer(dtype), buffer(dtype, n) or "
                             f"scalar(dtype), got {spec!r}")
    return tuple(params)


class KernelArgs:
    """The parameters as a kernel body sees them: ``args.dst`` (a buffer), ``args.n``
    (a scalar's traced value), ``args.param("dst")``, ``args["dst"]``."""

    def __init__(self, params: tuple[Param, ...], scalars: tuple):
        values = iter(scalars)
        self._handles = {p.name: Traced(next(values)) if p.is_scalar else BufferHandle(p) for p in params}

    def param(self, name: str) -> BufferHandle | Traced:
        try:
            return self._handles[name]
        except KeyError:
            raise TraceError(f"no parameter named {name!r}; parameters are {', '.join(self._handles)}") from None

    __getitem__ = param

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return self.param(name)

    def __iter__(self):
        return iter(self._handles.values())


def trace(name: str, params: tuple[Param, ...], body: Callable) -> Graph:
    """Call ``body(k, args)`` once and return the verified graph it recorded."""
    block = Block([p.dtype for p in params if p.is_scalar])
    k = Builder(block)
    try:
        with k:
            body(k, KernelArgs(params, block.args))
    except Exception as e:
        if not isinstance(e, TraceError):
            e.add_note(f"(raised by the body of kernel '{name}' while accy traced it)")
        raise
    graph = Graph(name, params, block)
    if graph.launch_op is None:
        raise TraceError(f"kernel '{name}': the body never opened a launch with for_each_1d/2d/3d")
    return verify(graph)
