"""Binding user arguments to kernel parameters, with the checks every backend shares.

Arguments come by position (parameter order) or by name.  A buffer argument is
first described as an :class:`ArrayInfo` (dtype, size, layout, writability and
the byte range it occupies), by NumPy for host arrays or by
``__cuda_array_interface__`` for device arrays; a scalar argument is checked
against its type's range.  Every check runs before anything executes, so a bad
call never writes an output.

On the CPU any C-contiguous array-like is taken without a copy: NumPy arrays (a
subclass such as ``np.matrix`` as the plain array it holds), objects with
``__array_interface__`` or the buffer protocol, and ``__dlpack__`` producers (a
PyTorch CPU tensor), bf16 and fp8 ones included, which NumPy's own DLPack import
refuses: their memory is viewed as the ml_dtypes type.  Outputs are written into
them in place.  A tensor that requires grad is read and written through
``detach()`` (the same memory; autograd does not see the kernel's writes).
"""

from __future__ import annotations

import ctypes
import functools
import math
import numbers
from typing import Callable, Mapping, Sequence

import attrs
import ml_dtypes
import numpy as np

from ..dsl.ir import Graph, Param
from ..dsl.tensors import tensor_parameters
from ..dsl.types import DType, from_numpy
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


@attrs.frozen
class TensorLayout:
    """Where a tensor's elements lie in its span: element ``[i, j, ...]`` is at
    ``offset + i*strides[0] + j*strides[1] + ...`` (strides in elements)."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def span(self) -> int:
        """The span's element count: lowest to highest element, both included."""
        if self.size == 0:
            return 0
        return sum(abs(s) * (n - 1) for n, s in zip(self.shape, self.strides)) + 1

    def fits(self, span: int) -> bool:
        """Do its elements all lie in a span of ``span`` elements?"""
        if min(self.shape) < 0:
            return False
        if self.size == 0:
            return True
        lowest = self.offset + sum(min(0, s * (n - 1)) for n, s in zip(self.shape, self.strides))
        highest = self.offset + sum(max(0, s * (n - 1)) for n, s in zip(self.shape, self.strides))
        return 0 <= lowest and highest < span

    def positions(self) -> np.ndarray:
        """Each element's position in the span, in C order of the tensor's indices."""
        flat = np.full((), self.offset, np.int64)
        for n, s in zip(self.shape, self.strides):
            flat = flat[..., None] + np.arange(n, dtype=np.int64) * s
        return flat.reshape(-1)

    def index_of(self, position: int) -> tuple[int, ...] | None:
        """The index tuple of the element at span ``position`` (the first in C order), or None."""
        found = np.flatnonzero(self.positions() == position)
        return tuple(int(c) for c in np.unravel_index(found[0], self.shape)) if found.size else None

    def overlap(self) -> str | None:
        """Why two index tuples may name one element (an output must not), or None where
        they cannot: a zero stride, or dimensions that, sorted by |stride|, do not each
        step past the extent of the smaller ones (the exact test for every layout NumPy
        slicing and transposing make; a layout it refuses may still be free of overlap)."""
        if self.size == 0:
            return None
        dims = [(abs(s), n, d) for d, (n, s) in enumerate(zip(self.shape, self.strides)) if n > 1]
        for stride, n, d in dims:
            if stride == 0:
                return (f"dimension {d} has stride 0 (a broadcast view?): its {n} indices all name one element, "
                        "so stores to them would collide")
        reach = 0  # how far the smaller dimensions reach, in elements
        for stride, n, d in sorted(dims):
            if stride <= reach:
                return (f"dimension {d}'s stride {stride} is within the {reach + 1} elements the dimensions of "
                        "smaller stride span, so two indices may name one element (accy accepts an output whose "
                        "dimensions, sorted by |stride|, each step past the extent of the smaller ones)")
            reach += stride * (n - 1)
        return None


# DLPack type codes (code, bits) NumPy does not import, and the ml_dtypes type each is
_DLPACK_ML_DTYPES = {(4, 16): ml_dtypes.bfloat16, (10, 8): ml_dtypes.float8_e4m3fn, (12, 8): ml_dtypes.float8_e5m2}
_DLPACK_HOST_DEVICES = (1, 3)  # kDLCPU, kDLCUDAHost: memory this CPU reads and writes


class _DLTensor(ctypes.Structure):
    """DLPack's ``DLTensor``, the head of a legacy ``dltensor`` capsule's ``DLManagedTensor``."""

    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _Borrowed:
    """The producer's memory as ``__array_interface__``; holding the capsule keeps it alive
    (an unconsumed capsule's destructor releases the tensor when the last view goes)."""

    def __init__(self, capsule, interface: dict):
        self.capsule = capsule
        self.__array_interface__ = interface


def _capsule_pointer(capsule) -> int | None:
    api = ctypes.pythonapi
    api.PyCapsule_IsValid.restype, api.PyCapsule_IsValid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
    if not api.PyCapsule_IsValid(capsule, b"dltensor"):
        return None
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return api.PyCapsule_GetPointer(capsule, b"dltensor")


def _dlpack_view(a) -> np.ndarray | None:
    """A view of a DLPack producer's host memory whose type NumPy's ``from_dlpack`` refuses
    and ml_dtypes has (bf16, fp8), or None where ``a`` is no such producer."""
    try:
        device = a.__dlpack_device__()[0] if hasattr(a, "__dlpack_device__") else 1
        capsule = a.__dlpack__() if device in _DLPACK_HOST_DEVICES else None
    except Exception:  # the producer refuses: the caller reports its first error
        return None
    pointer = _capsule_pointer(capsule) if capsule is not None else None
    if not pointer:
        return None
    t = _DLTensor.from_address(pointer)
    dtype = _DLPACK_ML_DTYPES.get((t.code, t.bits))
    if dtype is None or t.lanes != 1:
        return None
    dtype = np.dtype(dtype)
    shape = tuple(t.shape[k] for k in range(t.ndim))
    if math.prod(shape) == 0:
        return np.empty(shape, dtype)
    strides = tuple(t.strides[k] * dtype.itemsize for k in range(t.ndim)) if t.strides else None
    bits = np.dtype(f"u{dtype.itemsize}")  # the same bytes as unsigned integers, then viewed as the type
    interface = {"version": 3, "shape": shape, "typestr": bits.str, "strides": strides,
                 "data": (t.data + t.byte_offset, False)}
    return np.asarray(_Borrowed(capsule, interface)).view(dtype)


def strided_view(memory: np.ndarray, shape, strides, writeable: bool = False) -> np.ndarray:
    """``np.lib.stride_tricks.as_strided`` for every accy type: NumPy cannot rebuild an fp8
    dtype from its array interface ("<f1"), so the view is made of same-width unsigned
    integers and viewed back."""
    bits = memory.view(np.dtype(f"u{memory.itemsize}"))
    view = np.lib.stride_tricks.as_strided(bits, tuple(shape), tuple(strides), writeable=writeable)
    return view.view(memory.dtype)


def as_host_array(name: str, a) -> np.ndarray:
    """A NumPy view of a host array-like (no copy), or an error naming the argument."""
    if type(a) is np.ndarray:
        return a
    if isinstance(a, np.ndarray):
        if isinstance(a, np.ma.MaskedArray):
            raise ArgumentError(f"argument '{name}': a masked array; the kernel would read its masked elements "
                                "too: pass a.filled(value) (or a.data, to ignore the mask)")
        return a.view(np.ndarray)  # np.matrix and other subclasses: the same memory, plain indexing
    if hasattr(a, "__cuda_array_interface__") and not hasattr(a, "__array_interface__"):
        raise ArgumentError(f"argument '{name}': a device array cannot run on a CPU backend; "
                            "pass a NumPy array (or run with backend='cuda')")
    if getattr(a, "requires_grad", False) is True and callable(getattr(a, "detach", None)):
        a = a.detach()  # a torch tensor autograd tracks: the same memory, which NumPy may then view
    try:
        if hasattr(a, "__array_interface__") or hasattr(a, "__array__"):
            view = np.asarray(a)
        elif hasattr(a, "__dlpack__"):
            view = np.from_dlpack(a)
        else:
            view = np.asarray(memoryview(a))  # the buffer protocol
    except (TypeError, ValueError, BufferError, RuntimeError) as e:
        view = _dlpack_view(a)
        if view is None:
            offered = any(hasattr(a, p) for p in ("__array_interface__", "__array__", "__dlpack__"))
            why = f" ({type(e).__name__}: {e})" if offered else ""  # the producer's own reason
            raise ArgumentError(f"argument '{name}': expected an array (a NumPy array, or an object with "
                                f"__array_interface__, the buffer protocol or __dlpack__), got {type(a).__name__}"
                                f"{why}") from None
    if view.dtype == object:
        raise ArgumentError(f"argument '{name}': expected an array of numbers, got {type(a).__name__}")
    return view


def host_info(name: str, a) -> ArrayInfo:
    """Describe a host array-like; anything else is an error naming the argument."""
    a = as_host_array(name, a)
    return ArrayInfo(a.dtype, a.shape, a.flags.c_contiguous, a.flags.writeable,
                     a.__array_interface__["data"][0], "host", a.strides)


def scalar_value(name: str, dtype: DType, value):
    """``value`` as a NumPy scalar of ``dtype``, or an error naming the parameter."""
    if isinstance(value, np.ndarray):
        if value.ndim != 0:
            raise ArgumentError(f"argument '{name}': expected a scalar ({dtype}), got an array of shape {value.shape}")
        value = value[()]
    if isinstance(value, np.generic) and value.dtype.kind in "fV" and not dtype.is_float:
        kind = f"a {value.dtype} scalar"
    else:
        kind = type(value).__name__
    if dtype.is_bool:
        if not isinstance(value, (bool, np.bool_)):
            raise ArgumentError(f"argument '{name}': expected True or False ({dtype}), got {kind} {value!r}")
        return np.bool_(value)
    if isinstance(value, (bool, np.bool_)):
        raise ArgumentError(f"argument '{name}': expected a number ({dtype}), got bool {value!r}")
    if dtype.is_int:
        if not isinstance(value, numbers.Integral):
            raise ArgumentError(f"argument '{name}': expected an integer ({dtype}), got {kind} {value!r}")
        value = int(value)
        if not dtype.min <= value <= dtype.max:
            raise ArgumentError(f"argument '{name}': {value} does not fit {dtype} ({dtype.min}..{dtype.max})")
        return dtype.numpy.type(value)
    if not isinstance(value, numbers.Real) and not (isinstance(value, np.generic) and value.dtype.kind in "fV"):
        raise ArgumentError(f"argument '{name}': expected a number ({dtype}), got {kind} {value!r}")
    try:
        with np.errstate(all="ignore"):
            rounded = np.asarray(value).astype(dtype.numpy)[()]
        overflows = not np.isfinite(rounded) and np.isfinite(float(value))  # f8e4m3 overflows to NaN
    except OverflowError:  # a Python int past any float
        rounded, overflows = None, True
    if overflows:
        shown = f"{float(value)!r}" if rounded is not None else f"an integer of {int(value).bit_length()} bits"
        raise ArgumentError(f"argument '{name}': {shown} overflows {dtype} (largest {dtype.max:g})")
    return rounded


@attrs.frozen
class Binding:
    """Checked arguments: each buffer's array and description, each scalar's value, for
    host arrays their flat (1-D) views, and where a tensor's elements lie in its span."""

    arrays: dict[str, object]  # buffers: NumPy arrays on the host, the caller's objects on a device
    infos: dict[str, ArrayInfo]
    outputs: frozenset[str]
    scalars: dict[str, object] = attrs.field(factory=dict)  # NumPy scalars of the parameters' types
    layouts: dict[str, "TensorLayout"] = attrs.field(factory=dict)  # tensor buffer -> its layout in the span

    @functools.cached_property
    def flat(self) -> dict[str, np.ndarray]:
        return {name: a.reshape(-1) for name, a in self.arrays.items()}

    @property
    def sizes(self) -> dict[str, int]:
        return {name: info.size for name, info in self.infos.items()}

    def scratch(self) -> dict[str, np.ndarray]:
        """Flat host buffers to run on: copies of the outputs, the inputs themselves."""
        return {name: (a.copy() if name in self.outputs else a) for name, a in self.flat.items()}

    def commit(self, scratch: dict[str, np.ndarray]) -> None:
        """The launch succeeded: copy the outputs back into the caller's arrays."""
        for name in self.outputs:
            np.copyto(self.flat[name], scratch[name])


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


def _dtype_text(dtype: np.dtype) -> str:
    accy_type = from_numpy(dtype)
    return f"{dtype} ({accy_type})" if accy_type is not None else str(dtype)


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
    infos, arrays, scalars = {}, {}, {}
    for p in graph.params:
        if p.is_scalar:
            scalars[p.name] = scalar_value(p.name, p.dtype, named[p.name])
            continue
        value = named[p.name]
        if isinstance(value, (numbers.Number, np.generic)):
            raise ArgumentError(f"argument '{p.name}': expected an array of {p.dtype}, got the scalar {value!r}")
        info = infos[p.name] = describe(p.name, value)
        arrays[p.name] = as_host_array(p.name, value) if info.space == "host" else value
        if info.dtype != p.dtype.numpy:
            raise ArgumentError(f"argument '{p.name}': expected dtype {p.dtype.numpy} ({p.dtype}), "
                                f"got {_dtype_text(info.dtype)}")
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
        for p in graph.buffers:
            if p.name != out and infos[out].overlaps(infos[p.name]):
                raise ArgumentError(
                    f"argument '{out}' shares memory with argument '{p.name}'; an output must not alias another argument"
                )
    return Binding(arrays, infos, frozenset(outputs), scalars, _layouts(graph, infos, scalars))


def _layouts(graph: Graph, infos: dict[str, ArrayInfo], scalars: dict) -> dict[str, TensorLayout]:
    """Each tensor's layout, from its bound hidden scalars, checked to lie in its span (they
    come from :func:`accy.backends.tensor_arguments.expand_tensor_arguments`, or by hand)."""
    found = {}
    for t in tensor_parameters(graph.params):
        layout = TensorLayout(tuple(int(scalars[n]) for n in t.shape_names),
                              tuple(int(scalars[n]) for n in t.stride_names), int(scalars[t.offset_name]))
        if not layout.fits(infos[t.name].size):
            raise ArgumentError(f"tensor '{t.name}': shape {layout.shape}, strides {layout.strides} and offset "
                                f"{layout.offset} reach past its span of {infos[t.name].size} elements")
        found[t.name] = layout
    return found
