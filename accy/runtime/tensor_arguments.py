"""Tensor arguments: the array a caller passes for a ``tensor(dtype, ndim)`` parameter,
turned into what the graph takes (see :mod:`accy.dsl.tensors`): the array's memory
span as a flat buffer, and its shape, strides (in elements) and offset as ``index``
scalars.  One function, :func:`expand_tensor_arguments`, does it for every entry
point, before anything else looks at the arguments: ``accy.runtime.run`` (for its fast
launchers and the general path alike; ``Program.run``, library entries and
``accy.compare`` go through it) and ``Program.launch(args=)``.
:func:`~accy.runtime.arguments.bind_arguments` takes the graph's own arguments, the
expanded ones, and checks that each tensor's layout lies inside its span.

A host array's span is a NumPy view of the caller's memory from its lowest-addressed
element (so the kernel's stores land in the caller's array); a device array
(``__cuda_array_interface__``, or a CUDA DLPack capsule) gets a small object describing
the same span as a 1-D device array.  The backend's side is known: a device array on a
CPU backend, or a host tensor of another library on ``cuda``, is an error naming both
devices.  An output tensor must not have a zero stride nor overlap itself; that it
does not overlap another argument is the span overlap check of ``bind_arguments``
(conservative: a tensor's span may hold elements of another argument between its own).
"""

from __future__ import annotations

import math
import numbers
import weakref

import attrs
import numpy as np

from ..dsl.ir import Graph, Param
from ..dsl.tensors import TensorParams, declared_parameters, tensor_parameters
from ..errors import ArgumentError
from .arguments import (TensorLayout, _by_name, _dtype_text, as_host_array, device_array, refuse_host_tensor_on_cuda,
                        resolve_lazy_bits, strided_view)


def _rank(n: int) -> str:
    return f"{n}-d"


class DeviceSpan:
    """A device array's span as a 1-D device array (``__cuda_array_interface__``, and
    ``dtype``, which a typestr cannot say for bf16 or fp8); it holds the caller's array (or
    its DLPack capsule), which owns the memory."""

    def __init__(self, base, address: int, count: int, dtype: np.dtype, read_only: bool, stream=None):
        self.base = base
        self.dtype = dtype
        self.__cuda_array_interface__ = {"shape": (count,), "typestr": dtype.str, "data": (address, read_only),
                                         "strides": None, "version": 3}
        if stream is not None:
            self.__cuda_array_interface__["stream"] = stream


def _check(name: str, t: TensorParams, shape, dtype: np.dtype) -> None:
    if len(shape) != t.ndim:
        raise ArgumentError(f"argument '{name}': expected a {_rank(t.ndim)} array (tensor({t.dtype}, {t.ndim})), "
                            f"got a {_rank(len(shape)) if shape else '0-d'} array of shape {tuple(shape)}")
    if dtype != t.dtype.numpy:
        raise ArgumentError(f"argument '{name}': expected dtype {t.dtype.numpy} ({t.dtype}), got {_dtype_text(dtype)}")


def _element_strides(name: str, strides, itemsize: int) -> tuple[int, ...]:
    if any(s % itemsize for s in strides):
        raise ArgumentError(f"argument '{name}': its strides {tuple(strides)} (bytes) are not whole elements of "
                            f"{itemsize} bytes; pass a copy (np.ascontiguousarray(...))")
    return tuple(s // itemsize for s in strides)


def _layout(shape, strides) -> TensorLayout:
    """The layout of an array whose element [0, ...] is at ``strides``' origin."""
    if math.prod(shape) == 0:
        return TensorLayout(tuple(shape), tuple(strides), 0)
    offset = -sum(min(0, s * (n - 1)) for n, s in zip(shape, strides))
    return TensorLayout(tuple(shape), tuple(strides), offset)


def expand_tensor(name: str, t: TensorParams, value, output: bool,
                  on_cuda: bool | None = None) -> tuple[object, TensorLayout]:
    """The span (a flat host view or a :class:`DeviceSpan`) and layout of the array passed
    for tensor ``t``, checked (rank, dtype, device, and for an ``output`` no self-overlap).
    ``on_cuda``: the backend runs on a CUDA device (True) or the CPU (False); None takes the
    array where it is (sizing a launch)."""
    if isinstance(value, (numbers.Number, np.generic)):
        raise ArgumentError(f"argument '{name}': expected a {_rank(t.ndim)} array of {t.dtype}, "
                            f"got the scalar {value!r}")
    value = resolve_lazy_bits(name, value, output)
    device = device_array(name, value) if on_cuda is not False else None
    if device is not None:
        shape, byte_strides, dtype = device.shape, device.strides, device.dtype
    else:
        if on_cuda:
            refuse_host_tensor_on_cuda(name, value)
        value = as_host_array(name, value)  # a device array on a CPU backend: an error naming both devices
        shape, byte_strides, dtype = value.shape, value.strides, value.dtype
    _check(name, t, shape, dtype)
    layout = _layout(shape, _element_strides(name, byte_strides, dtype.itemsize))
    if output:
        why = layout.overlap()
        if why is not None:
            raise ArgumentError(f"argument '{name}': the kernel stores to this tensor, but {why} "
                                f"(shape {tuple(shape)}, strides {layout.strides} in elements); pass a "
                                "writable array without overlap (a copy: np.ascontiguousarray(...))")
    if device is None:
        return _host_span(value, layout), layout
    low = -layout.offset * dtype.itemsize  # the lowest element's byte offset from element [0, ...]
    address = device.address + low if layout.span else device.address
    return DeviceSpan(device.owner, address, layout.span, dtype, device.read_only, device.stream), layout


def _host_span(value: np.ndarray, layout: TensorLayout) -> np.ndarray:
    """The 1-D view of ``value``'s span, from its lowest-addressed element."""
    if value.flags.c_contiguous:  # the common cases first, as plain views (as_strided costs ~10 us)
        return value.reshape(-1)
    if value.flags.f_contiguous:
        return value.T.reshape(-1)
    # turned so every stride is positive, the view starts at the lowest-addressed element
    lowest = value[tuple(slice(None, None, -1) if s < 0 else slice(None) for s in value.strides)] \
        if layout.span else value
    return strided_view(lowest, (layout.span,), (value.dtype.itemsize,), writeable=value.flags.writeable)


@attrs.frozen
class _Plan:
    """What expanding a graph's arguments needs, worked out once per graph."""

    tensors: tuple[tuple[TensorParams, bool, tuple[str, ...]], ...]  # each tensor, stored to?, its hidden names
    declared: tuple[Param, ...]
    names: tuple[str, ...]  # the graph's parameters, in order

    @classmethod
    def of(cls, graph: Graph) -> "_Plan":
        outputs = graph.stored_buffers()
        return cls(tuple((t, t.name in outputs, t.hidden) for t in tensor_parameters(graph.params)),
                   declared_parameters(graph.params), tuple(p.name for p in graph.params))


_PLANS: "weakref.WeakKeyDictionary[Graph, _Plan]" = weakref.WeakKeyDictionary()


def expand_tensor_arguments(graph: Graph, args, on_cuda: bool | None = None):
    """``args`` as the caller passes them (one per declared parameter, by position or by
    name) -> the arguments of ``graph``'s parameters (in parameter order): each tensor's
    array becomes its span and its shape, strides and offset.  Without tensors, ``args``
    itself.  ``on_cuda``: as :func:`expand_tensor` takes it."""
    plan = _PLANS.get(graph)
    if plan is None:
        plan = _PLANS[graph] = _Plan.of(graph)
    if not plan.tensors:
        return args
    named = _by_name(plan.declared, args)
    for t, output, hidden in plan.tensors:
        span, layout = expand_tensor(t.name, t, named[t.name], output, on_cuda)
        named[t.name] = span
        named.update(zip(hidden, (*layout.shape, *layout.strides, layout.offset)))
    return [named[n] for n in plan.names]


__all__ = ["DeviceSpan", "expand_tensor", "expand_tensor_arguments"]
