"""Kernel signatures and tracing: parameters are declared, a body is called once
with a builder and its arguments, and what it records becomes a graph."""

from __future__ import annotations

import functools
import inspect
import linecache
import re
import sys
import threading
from typing import Callable, Mapping, Sequence

import attrs

from ..errors import TraceError
from .builder import Builder
from .constexpr import Constexpr, ConstexprSpec, specialised_scalar, value_text
from .traced import BufferHandle, Traced
from .context import _is_machinery, user_location
from .ir import Block, Graph, Param, ParamKind, SourceLocation
from .passes import verify
from .tensors import TensorHandle, TensorSpec, expand, reserved_name, tensor_parameters
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


def declarations(declared: Mapping[str, BufferSpec | ScalarSpec | TensorSpec | ConstexprSpec],
                 specialize: Sequence[str] = ()) -> tuple[tuple[Param, ...], tuple[Constexpr, ...]]:
    """Check declarations by name and split them: the graph parameters (a tensor becomes its
    buffer followed by its hidden shape, stride and offset scalars, :mod:`accy.dsl.tensors`),
    and the constexpr ones (:mod:`accy.dsl.constexpr`), the scalars ``specialize`` names among them."""
    params, constexprs = [], []
    declared = dict(declared)
    _check_specialize(specialize, declared)
    for position, (name, spec) in enumerate(declared.items()):
        _check_name(name, declared)
        if isinstance(spec, ScalarSpec) and name in specialize:
            spec = specialised_scalar(name, spec.dtype)
        if isinstance(spec, ConstexprSpec):
            constexprs.append(Constexpr(name, spec, position - len(constexprs)))
        elif isinstance(spec, ScalarSpec):
            params.append(Param(name, spec.dtype, kind=ParamKind.scalar))
        elif isinstance(spec, BufferSpec):
            params.append(Param(name, spec.dtype, spec.count))
        elif isinstance(spec, TensorSpec):
            params.extend(expand(name, spec))
        else:
            raise TraceError(f"parameter '{name}': expected dynamic_buffer(dtype), buffer(dtype, n), "
                             f"tensor(dtype, ndim), scalar(dtype) or constexpr(type), got {spec!r}", user_location())
    return tuple(params), tuple(constexprs)


def _check_specialize(specialize, declared: dict) -> None:
    if isinstance(specialize, str) or not isinstance(specialize, (tuple, list)):
        raise TraceError(f"@kernel: specialize= takes a tuple of scalar parameter names, got {specialize!r}",
                         user_location())
    for name in specialize:
        if not isinstance(declared.get(name), ScalarSpec):
            scalars = [n for n, s in declared.items() if isinstance(s, ScalarSpec)]
            raise TraceError(f"@kernel: specialize= names {name!r}, which is not a scalar parameter (the scalars: "
                             f"{', '.join(scalars) or 'none'})", user_location())


def _check_name(name, declared: dict) -> None:
    if not isinstance(name, str) or not _IDENT.match(name):
        raise TraceError(f"parameter name {name!r} is not an identifier", user_location())
    if name.startswith("__") or name == "_handles" or hasattr(KernelArgs, name):
        # args.<name> would find the arguments object's own attribute, never the parameter
        raise TraceError(f"parameter name {name!r} is taken: args.{name} is the kernel arguments' own "
                         f"{'method' if inspect.isfunction(getattr(KernelArgs, name, None)) else 'attribute'}; "
                         "rename the parameter", user_location())
    base = reserved_name(name, declared)
    if base is not None:
        raise TraceError(f"parameter name {name!r} is reserved: <name>__shape<d>, <name>__stride<d> and "
                         f"<name>__offset name a tensor parameter's hidden shape, strides and offset, and "
                         f"'{base}' is a parameter; rename the parameter", user_location())


def parameters(declared: Mapping[str, BufferSpec | ScalarSpec | TensorSpec]) -> tuple[Param, ...]:
    """The graph parameters of declarations that have no constexpr among them (see
    :func:`declarations`); a tuple of parameters is taken as it is."""
    if isinstance(declared, tuple) and all(isinstance(p, Param) for p in declared):
        return declared
    params, constexprs = declarations(declared)
    if constexprs:
        raise TraceError(f"parameter '{constexprs[0].name}': a constexpr parameter is declared with "
                         f"@accy.kernel(...), or given to Program(..., constexprs=...) apart from the graph's "
                         f"parameters", user_location())
    return params


class KernelArgs:
    """The parameters as a kernel body sees them: ``args.dst`` (a buffer), ``args.x`` (a
    tensor's :class:`~accy.dsl.tensors.TensorHandle`), ``args.n`` (a scalar's traced value),
    ``args.window`` (a constexpr's Python value), ``args.param("dst")``, ``args["dst"]``.  A
    tensor's hidden scalars are not among them."""

    def __init__(self, params: tuple[Param, ...], scalars: tuple, constants: tuple[tuple[str, object], ...] = ()):
        values = iter(scalars)
        handles = {p.name: Traced(next(values)) if p.is_scalar else BufferHandle(p) for p in params}
        for t in tensor_parameters(tuple(params)):
            hidden = [handles.pop(n) for n in t.hidden]
            handles[t.name] = TensorHandle(handles[t.name], hidden[:t.ndim], hidden[t.ndim:2 * t.ndim], hidden[-1])
        handles.update(constants)
        self._handles = handles

    def param(self, name: str) -> BufferHandle | TensorHandle | Traced:
        try:
            return self._handles[name]
        except KeyError:
            raise TraceError(f"no parameter named {name!r}; parameters are {', '.join(self._handles)}",
                             user_location()) from None

    __getitem__ = param

    def __getattr__(self, name: str):
        if name.startswith("_"):  # a parameter "_x" is found; other private names are not parameters
            handles = self.__dict__.get("_handles", {})
            if name in handles:
                return handles[name]
            raise AttributeError(name)
        return self.param(name)

    def __iter__(self):
        return iter(self._handles.values())


_tracing = threading.local()  # the bodies this thread is tracing now, innermost last


def _user_frame(frames) -> SourceLocation | None:
    """The innermost of ``frames`` (outermost first) that is the user's code: not accy's,
    nor functools' (``cached_property`` sits between a body and ``Program.graph``)."""
    for frame, line in reversed(frames):
        filename = frame.f_code.co_filename
        if not _is_machinery(filename) and filename != functools.__file__:
            code = linecache.getline(filename, line, frame.f_globals).strip()
            return SourceLocation(filename, line, frame.f_code.co_name, code)
    return None


def _caller_frames() -> list:
    frames, frame = [], sys._getframe(1)
    while frame is not None:
        frames.append((frame, frame.f_lineno))
        frame = frame.f_back
    return frames[::-1]


def _traceback_frames(tb) -> list:
    frames = []
    while tb is not None:
        frames.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return frames


def trace(name: str, params: tuple[Param, ...], body: Callable,
          constants: tuple[tuple[str, object], ...] = ()) -> Graph:
    """Call ``body(k, args)`` once and return the verified graph it recorded; ``constants``
    are the constexpr parameters' values, which the body sees as they are."""
    active = _tracing.__dict__.setdefault("bodies", [])
    if any(b is body for b in active):  # the body asked for its own graph: it would trace itself forever
        raise TraceError(f"kernel '{name}': its body uses its own program's graph (.graph, .traced_graph, "
                         "a run or a launch of it) while accy traces it; a kernel cannot contain itself",
                         _user_frame(_caller_frames()))
    block = Block([p.dtype for p in params if p.is_scalar])
    k = Builder(block)
    active.append(body)
    try:
        with k:
            body(k, KernelArgs(params, block.args, constants))
    except RecursionError as e:
        raise TraceError(f"kernel '{name}': the body recursed past Python's limit of {sys.getrecursionlimit()} "
                         "frames while accy traced it (a helper calling itself without end? a traced value "
                         "cannot stop a Python recursion)", _user_frame(_traceback_frames(e.__traceback__))) from None
    except Exception as e:
        if not isinstance(e, TraceError):
            given = f" with {value_text(constants)}" if constants else ""
            e.add_note(f"(raised by the body of kernel '{name}' while accy traced it{given})")
        raise
    finally:
        active.pop()
    graph = Graph(name, params, block)
    if graph.launch_op is None:
        raise TraceError(f"kernel '{name}': the body never opened a launch with for_each_1d/2d/3d")
    return verify(graph)
