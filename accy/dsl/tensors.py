"""N-d tensor parameters: ``accy.tensor(dtype, ndim)``.

A tensor parameter is desugared when the kernel is traced into ordinary graph
parameters, so every backend runs it unchanged.  Tensor ``x`` of rank n becomes,
in this order, right where ``x`` is declared:

- the buffer ``x``: the array's memory span, the contiguous run of elements from
  its lowest-addressed element to its highest (for a C-contiguous array, the array);
- ``scalar(index)`` parameters ``x__shape0 .. x__shape{n-1}``, ``x__stride0 ..
  x__stride{n-1}`` (in elements; negative or zero where the view has them) and
  ``x__offset`` (where element ``[0, ..., 0]`` lies in the span).

The names ``<p>__shape<d>``, ``<p>__stride<d>`` and ``<p>__offset`` are reserved
whenever ``p`` is another parameter, so the graph's parameters alone say which
came from a tensor (:func:`tensor_parameters`): a parsed graph or a hand-built
parameter tuple keeps its tensors.  The backends' argument binding
(:mod:`accy.runtime.tensor_arguments`) turns each array the caller passes into the
span and those scalars.
"""

from __future__ import annotations

import functools
import numbers
import re

import attrs
import numpy as np

from ..errors import TraceError
from . import context
from .ir import Param, ParamKind
from .traced import BufferHandle, TileAccess, Traced, _error
from .types import DType, as_dtype, index

MAX_NDIM = 5

# a reserved hidden-scalar name: <tensor>__shape<d>, <tensor>__stride<d>, <tensor>__offset
_HIDDEN = re.compile(r"(?P<base>.+?)__(?:(?:shape|stride)(?P<dim>\d+)|offset)\Z")

# The flat index a tensor access uses when some index is outside its dimension:
# OUT_OF_SHAPE + sum(c_d * 3**d), c_d = 1 or 2 for each such dimension d (0 for the others),
# never inside any span, so today's flat
# bounds check fires on every backend and the message can say which dimensions
# (:func:`out_of_shape_dimensions`).  Far below any span, yet far enough from the index
# type's minimum that the host's launch proof computes with it without overflow.
OUT_OF_SHAPE = -(2**61)


def out_of_shape_dimensions(flat_index: int) -> tuple[int, ...]:
    """The dimensions whose index was outside a tensor's shape, when ``flat_index`` is the
    marker a tensor access put in its place; else ()."""
    code = int(flat_index) - OUT_OF_SHAPE
    if not 0 < code < 3**MAX_NDIM:
        return ()
    return tuple(d for d in range(MAX_NDIM) if code // 3**d % 3)


def _dtype(value) -> DType:
    try:
        return as_dtype(value)
    except TypeError as e:
        raise TraceError(f"tensor: {e}", context.user_location()) from None


def _ndim(instance, attribute, value) -> None:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) \
            or not 1 <= value <= MAX_NDIM:
        raise TraceError(f"tensor: ndim must be an int from 1 to {MAX_NDIM}, got {value!r}", context.user_location())


@attrs.frozen
class TensorSpec:
    """A tensor parameter's declaration: element type and number of dimensions."""

    dtype: DType = attrs.field(converter=_dtype)
    ndim: int = attrs.field(validator=_ndim, converter=lambda n: int(n) if isinstance(n, np.integer) else n)


def tensor(dtype, ndim: int) -> TensorSpec:
    """An N-d array of ``dtype`` (1 <= ``ndim`` <= 4) of any shape and layout, known at run
    time: C or Fortran order, a slice with steps, a transposed view, negative strides, and
    (for an input) broadcast dimensions.  One compile serves every shape and layout."""
    return TensorSpec(dtype, ndim)


@attrs.frozen
class TensorParams:
    """Which graph parameters one tensor parameter became: the buffer ``name`` and its
    hidden ``index`` scalars."""

    name: str
    dtype: DType
    ndim: int

    @property
    def shape_names(self) -> tuple[str, ...]:
        return tuple(f"{self.name}__shape{d}" for d in range(self.ndim))

    @property
    def stride_names(self) -> tuple[str, ...]:
        return tuple(f"{self.name}__stride{d}" for d in range(self.ndim))

    @property
    def offset_name(self) -> str:
        return f"{self.name}__offset"

    @property
    def hidden(self) -> tuple[str, ...]:
        """The hidden scalars' names, in parameter order."""
        return (*self.shape_names, *self.stride_names, self.offset_name)

    @property
    def spec(self) -> TensorSpec:
        return TensorSpec(self.dtype, self.ndim)

    def graph_params(self) -> tuple[Param, ...]:
        return (Param(self.name, self.dtype), *(Param(n, index, kind=ParamKind.scalar) for n in self.hidden))


def reserved_name(name: str, declared) -> str | None:
    """The parameter whose hidden scalars ``name`` would be taken for, if ``name`` has that
    form (``x__shape0``, ``x__stride1``, ``x__offset``) and ``x`` is in ``declared``; else None."""
    match = _HIDDEN.match(name)
    if match is None or match["base"] not in declared:
        return None
    return match["base"]


def expand(name: str, spec: TensorSpec) -> tuple[Param, ...]:
    """The graph parameters a tensor parameter becomes (see the module's docstring)."""
    return TensorParams(name, spec.dtype, spec.ndim).graph_params()


@functools.lru_cache(maxsize=512)
def tensor_parameters(params: tuple[Param, ...]) -> tuple[TensorParams, ...]:
    """The tensors among ``params``: each buffer followed by its complete set of hidden
    index scalars (which :func:`accy.dsl.trace.parameters` reserves for tensors)."""
    params = tuple(params)
    found = []
    for k, p in enumerate(params):
        if p.is_scalar or p.count is not None:
            continue
        ndim = 0
        while ndim < MAX_NDIM and _hidden_at(params, k + 1 + ndim, f"{p.name}__shape{ndim}"):
            ndim += 1
        if ndim == 0:
            continue
        group = TensorParams(p.name, p.dtype, ndim)
        if params[k:k + 1 + len(group.hidden)] == group.graph_params():
            found.append(group)
    return tuple(found)


def _hidden_at(params, k: int, name: str) -> bool:
    return k < len(params) and params[k].name == name and params[k].is_scalar and params[k].dtype == index


def hidden_names(params: tuple[Param, ...]) -> frozenset[str]:
    """The names of every tensor's hidden scalars among ``params``."""
    return frozenset(n for t in tensor_parameters(tuple(params)) for n in t.hidden)


def declared_parameters(params: tuple[Param, ...]) -> tuple[Param, ...]:
    """The parameters as the user declared them (tensor buffers standing for their tensors),
    in declaration order: what a caller passes one argument for."""
    hidden = hidden_names(params)
    return tuple(p for p in params if p.name not in hidden)


# ----------------------------------------------------------------------------- the kernel's view


class TensorHandle(TileAccess):
    """A tensor parameter as the body sees it: ``x[i, j]`` loads, ``x[i, j] = v`` stores
    (through the strides, each index checked against its dimension; the builder's ``load``,
    ``store`` and atomics take a tensor and an index tuple too), ``x.shape``, ``x.strides``,
    ``x.offset`` and ``x.size`` (traced ``index`` values), ``x.ndim``, ``x.dtype``, and
    ``x.buffer``, the flat span underneath; the tile level's accesses (``x.load_tile``, ...)
    come from :class:`~accy.dsl.traced.TileAccess`."""

    __slots__ = ("buffer", "shape", "strides", "offset")
    kind = "tensor"
    space = "global"

    def __init__(self, buffer: BufferHandle, shape: tuple[Traced, ...], strides: tuple[Traced, ...],
                 offset: Traced):
        self.buffer, self.shape, self.strides, self.offset = buffer, tuple(shape), tuple(strides), offset

    name = property(lambda self: self.buffer.name)
    dtype = property(lambda self: self.buffer.dtype)
    ndim = property(lambda self: len(self.shape))

    @property
    def size(self) -> Traced:
        """The element count: the product of the shape (an ``index``, known when the kernel runs)."""
        size = self.shape[0]
        for extent in self.shape[1:]:
            size = size * extent
        return size

    def flat_index(self, idx) -> Traced:
        """The position in the span of element ``idx`` (a tuple of ``ndim`` indices): where an
        index is outside its dimension, :data:`OUT_OF_SHAPE` plus a digit per such dimension,
        outside every span, so the access fails with the backends' bounds error (which names
        the dimensions).

        The test is arithmetic (``min``, ``max``, ``+``, ``-``, ``*``), not compares and a
        ``select``: the host's launch proof bounds those, so where the indices are a launch's
        own (``i`` over ``axis("i", x.shape[0])``) it proves the whole launch in bounds once and
        runs with no per-access checks and no scratch copies."""
        k = context.current()
        indices = idx if isinstance(idx, tuple) else (idx,)
        if len(indices) != self.ndim:
            raise _error(f"tensor '{self.name}' has {self.ndim} dimension{'s' if self.ndim > 1 else ''}, "
                         f"indexed with {len(indices)} ind{'ices' if len(indices) != 1 else 'ex'}; "
                         f"write {self.name}[{', '.join('ijkl'[:self.ndim])}]")
        indices = tuple(self._index(k, i, d) for d, i in enumerate(indices))
        flat, code = self.offset, 0
        for d, (i, n, stride) in enumerate(zip(indices, self.shape, self.strides)):
            flat = flat + i * stride
            # 1 where i >= n (i - n + 1 cannot wrap for i >= 0; for i < 0 it may, and gives 0 or 1)
            above = k.min(k.max(i - (n - 1), 0), 1)
            below = k.max(k.min(i, 0), -1)  # -1 where i < 0 (no negation of i: it could wrap)
            code = code + (above - below) * 3**d  # a base-3 digit per dimension: 0 inside, 1 or 2 outside
        # flat where every index is inside, else exactly OUT_OF_SHAPE + code (the wrap cancels)
        return flat + (OUT_OF_SHAPE + code - flat) * k.min(code, 1)

    def _index(self, k, i, d: int) -> Traced:
        if isinstance(i, Traced):
            if not i.type.is_index:
                raise _error(f"tensor '{self.name}': the index in dimension {d} is {i.type}; indices are index "
                             f"values: cast(value, index)")
            return i
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, numbers.Integral):
            what = "a slice" if isinstance(i, slice) else repr(i)
            raise _error(f"tensor '{self.name}': the index in dimension {d} must be an index value or a Python "
                         f"int, got {what}")
        return k.constant(int(i), index)

    def __getitem__(self, idx) -> Traced:
        return context.current().load(self, idx)

    def __setitem__(self, idx, value) -> None:
        context.current().store(self, value, idx)

    def __iter__(self):
        raise _error(f"iterating over tensor '{self.name}' is not possible while tracing; "
                     "loop with fold_range or launch a thread per element")

    def __len__(self):
        raise _error(f"len({self.name}): Python's len() must return an int, but a tensor's shape is only "
                     f"known when the kernel runs; use {self.name}.shape[0] (an index value)")

    def __repr__(self) -> str:
        return f"<tensor {self.name}: {self.dtype}, {self.ndim}-d>"
