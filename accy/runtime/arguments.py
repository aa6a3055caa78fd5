"""Binding user arguments to kernel parameters, with the checks every backend shares.

Arguments come by position (parameter order) or by name.  A buffer argument is
first described as an :class:`ArrayInfo` (dtype, size, layout, writability and
the byte range it occupies), by NumPy for host arrays or by
``__cuda_array_interface__`` or a CUDA DLPack capsule for device arrays; a scalar
argument is checked against its type's range.  Every check runs before anything
executes, so a bad call never writes an output.

On the CPU any C-contiguous array-like is taken without a copy: NumPy arrays (a
subclass such as ``np.matrix`` as the plain array it holds), objects with
``__array_interface__`` or the buffer protocol, and ``__dlpack__`` producers (a
PyTorch CPU tensor), bf16 and fp8 ones included, which NumPy's own DLPack import
refuses: their memory is viewed as the ml_dtypes type (DLPack 1.x capsules are asked for
first, so a read-only producer is seen to be one).  Outputs are written into them in
place.  A tensor that requires grad is read and written through ``detach()`` (the same
memory; autograd does not see the kernel's writes).  A torch tensor with the negative or
conjugate bit set (``torch._neg_view(x)``, ``z.conj().imag``: memory that holds other values
than the tensor reads as) is read through a resolved copy, and refused as an output.  An
array in another device's memory (``__dlpack_device__``, ``__cuda_array_interface__``) is an
error naming its device, and on ``cuda`` a host tensor of another library is one too
(:func:`refuse_host_tensor_on_cuda`).
"""

from __future__ import annotations

import ctypes
import functools
import math
import numbers
from typing import Callable, Mapping, Sequence

import attrs
import numpy as np

from ..dsl.ir import Graph, Param
from ..dsl.tensors import tensor_parameters
from ..dsl.types import DTYPES, DType, from_numpy, numpy_dtype
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


# DLPack type codes (code, bits) NumPy does not import, from the dtype table, and the ml_dtypes type
# each is (by name: ml_dtypes takes half a second to import, paid only when such an array comes)
_DLPACK_ML_DTYPES = {(t.dlpack_code, t.bits): t.numpy_name for t in DTYPES.values() if t.dlpack_code is not None}
_DLPACK_HOST_DEVICES = (1, 3)  # kDLCPU, kDLCUDAHost: memory this CPU reads and writes
_DLPACK_CUDA_DEVICES = (2, 13)  # kDLCUDA, kDLCUDAManaged: memory a CUDA kernel reads and writes
_DLPACK_DEVICE_NAMES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal", 9: "vpi",
                        10: "rocm", 11: "rocm_host", 12: "ext_dev", 13: "cuda_managed", 14: "oneapi", 15: "webgpu",
                        16: "hexagon", 17: "maia"}
_DLPACK_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY, in a versioned capsule's flags


class _DLTensor(ctypes.Structure):
    """DLPack's ``DLTensor``: the head of a legacy ``dltensor`` capsule's ``DLManagedTensor``."""

    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensorVersioned(ctypes.Structure):
    """DLPack 1.x's ``DLManagedTensorVersioned``, what a ``dltensor_versioned`` capsule holds."""

    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


@attrs.frozen
class DLPackTensor:
    """What a DLPack capsule says of its tensor.  ``capsule`` is held, not consumed: while it
    lives the producer keeps the memory (its destructor releases the tensor)."""

    capsule: object
    device: tuple[int, int]  # (DLPack device type, device id)
    address: int  # element [0, ...]: data + byte_offset
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None  # in elements; None: C-contiguous
    type_code: tuple[int, int, int]  # (code, bits, lanes)
    read_only: bool

    @property
    def dtype(self) -> np.dtype | None:
        """The NumPy (or ml_dtypes) type of its elements, or None where there is none."""
        code, bits, lanes = self.type_code
        if lanes != 1:
            return None
        if (code, bits) in _DLPACK_ML_DTYPES:
            return numpy_dtype(_DLPACK_ML_DTYPES[code, bits])
        kind = {0: "i", 1: "u", 2: "f", 5: "c", 6: "b"}.get(code)
        try:
            return np.dtype(f"{kind}{bits // 8}") if kind and bits % 8 == 0 else None
        except TypeError:  # a width NumPy has no type of (complex32)
            return None

    def byte_strides(self, itemsize: int) -> tuple[int, ...]:
        if self.strides is not None:
            return tuple(s * itemsize for s in self.strides)
        return c_strides(self.shape, itemsize)


def c_strides(shape, itemsize: int) -> tuple[int, ...]:
    """The byte strides of a C-contiguous array of ``shape``."""
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.insert(0, step)
        step *= max(n, 1)
    return tuple(strides)


def _capsule_pointer(capsule, name: bytes) -> int | None:
    api = ctypes.pythonapi
    api.PyCapsule_IsValid.restype, api.PyCapsule_IsValid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
    if not api.PyCapsule_IsValid(capsule, name):
        return None
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return api.PyCapsule_GetPointer(capsule, name)


def parse_dlpack_capsule(capsule) -> DLPackTensor | None:
    """Read an unconsumed DLPack capsule, versioned (DLPack 1.x, with its read-only flag) or
    legacy, without consuming it; None where it is neither."""
    pointer = _capsule_pointer(capsule, b"dltensor_versioned")
    if pointer:
        managed = _DLManagedTensorVersioned.from_address(pointer)
        t, read_only = managed.dl_tensor, bool(managed.flags & _DLPACK_READ_ONLY)
    else:
        pointer = _capsule_pointer(capsule, b"dltensor")
        if not pointer:
            return None
        t, read_only = _DLTensor.from_address(pointer), False
    shape = tuple(int(t.shape[k]) for k in range(t.ndim))
    strides = tuple(int(t.strides[k]) for k in range(t.ndim)) if t.strides else None
    return DLPackTensor(capsule, (int(t.device_type), int(t.device_id)), (t.data or 0) + t.byte_offset, shape,
                        strides, (t.code, t.bits, t.lanes), read_only)


def dlpack_tensor(a) -> DLPackTensor | None:
    """The DLPack tensor ``a`` exports (versioned where it can), or None where it refuses."""
    try:
        try:
            capsule = a.__dlpack__(max_version=(1, 0))
        except TypeError:  # a producer from before DLPack 1.0: no max_version
            capsule = a.__dlpack__()
    except Exception:  # the producer refuses: the caller reports its first error
        return None
    return parse_dlpack_capsule(capsule)


def _cuda_interface(a) -> dict | None:
    """``a.__cuda_array_interface__``, or None where it has none or refuses (torch's for bf16)."""
    try:
        return a.__cuda_array_interface__
    except Exception:
        return None


def dlpack_device(a) -> tuple[int, int] | None:
    """Where ``a``'s memory is, as a DLPack (device type, id), or None where it does not say
    (NumPy arrays and array-likes: host memory)."""
    if hasattr(a, "__dlpack_device__"):
        try:
            device_type, device_id = a.__dlpack_device__()
            return int(device_type), int(device_id)
        except Exception:
            return None
    if not hasattr(a, "__array_interface__") and _cuda_interface(a) is not None:
        return 2, getattr(getattr(a, "device", None), "index", None) or 0
    return None


def device_text(device: tuple[int, int]) -> str:
    """``cuda:0``, ``cpu``: a device as torch names it."""
    name = _DLPACK_DEVICE_NAMES.get(device[0], f"DLPack device type {device[0]}")
    return name if name == "cpu" else f"{name}:{device[1]}"


def is_host_device(device: tuple[int, int] | None) -> bool:
    return device is None or device[0] in _DLPACK_HOST_DEVICES


def is_cuda_device(device: tuple[int, int] | None) -> bool:
    return device is not None and device[0] in _DLPACK_CUDA_DEVICES


def _type_name(a) -> str:
    """``torch.Tensor``, ``jaxlib.ArrayImpl``: the library and the class."""
    return f"{type(a).__module__.split('.')[0]}.{type(a).__qualname__}".removeprefix("builtins.")


def _on_another_device(name: str, a, device: tuple[int, int]) -> ArgumentError:
    return ArgumentError(f"argument '{name}' is on {device_text(device)} ({_type_name(a)}), but the CPU backends "
                         "(numpy, llvm, ptx) run on the cpu, in host memory: pass a CPU tensor (x.cpu()) or a "
                         "NumPy array, or run a CUDA tensor with backend='cuda'")


def refuse_host_tensor_on_cuda(name: str, a) -> None:
    """On ``cuda``, a NumPy array is copied to the device and back, but a tensor of another
    library in host memory (a torch CPU tensor) is refused, naming both devices: the caller
    chose its device, and a silent copy would hide the cost (and the place of the result)."""
    if isinstance(a, np.ndarray):
        return
    device = dlpack_device(a)
    if device is not None and not is_cuda_device(device):
        raise ArgumentError(f"argument '{name}' is on {device_text(device)} ({_type_name(a)}), but backend "
                            "'cuda' runs on a CUDA device (cuda:N): pass a CUDA tensor (x.cuda()), or run a CPU "
                            "tensor on a CPU backend (llvm)")


@attrs.frozen
class DeviceArray:
    """A CUDA array as its ``__cuda_array_interface__`` or its CUDA DLPack capsule describes it;
    ``owner`` (the capsule, or the array) keeps its memory alive."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in bytes
    dtype: np.dtype
    address: int  # element [0, ...]
    read_only: bool
    owner: object
    stream: int | None = None  # the stream the producer's interface names (CAI version 3)

    @property
    def c_contiguous(self) -> bool:
        dense = c_strides(self.shape, self.dtype.itemsize)
        return all(n == 1 or s == c for n, s, c in zip(self.shape, self.strides, dense))


def device_array(name: str, a) -> DeviceArray | None:
    """``a`` described as a CUDA array, from ``__cuda_array_interface__`` (torch, CuPy, PyCUDA)
    or else a CUDA DLPack capsule (JAX; torch bf16, whose interface refuses the type); None
    where ``a`` is not in CUDA memory."""
    if isinstance(a, np.ndarray) or hasattr(a, "__array_interface__"):
        return None
    interface = _cuda_interface(a)
    if interface is not None:
        return _from_cuda_interface(name, a, interface)
    device = dlpack_device(a)
    if not is_cuda_device(device):
        return None
    tensor = dlpack_tensor(a)
    if tensor is None:
        raise ArgumentError(f"argument '{name}': {_type_name(a)} on {device_text(device)} refused to export "
                            "itself through __dlpack__")
    if tensor.dtype is None:
        code, bits, lanes = tensor.type_code
        raise ArgumentError(f"argument '{name}': its DLPack type (code {code}, {bits} bits, {lanes} lanes) has no "
                            "accy type")
    return DeviceArray(tensor.shape, tensor.byte_strides(tensor.dtype.itemsize), tensor.dtype, tensor.address,
                       tensor.read_only, tensor.capsule)


def _from_cuda_interface(name: str, a, interface: dict) -> DeviceArray:
    if interface.get("mask") is not None:
        raise ArgumentError(f"argument '{name}': a masked device array; pass one without a mask")
    shape = tuple(int(n) for n in interface["shape"])
    own = getattr(a, "dtype", None)  # accy's spans and CuPy say it; a typestr cannot say bf16 or fp8
    dtype = own if isinstance(own, np.dtype) else np.dtype(interface["typestr"])
    strides = interface.get("strides")
    strides = tuple(int(s) for s in strides) if strides is not None else c_strides(shape, dtype.itemsize)
    address, read_only = interface["data"]
    return DeviceArray(shape, strides, dtype, int(address or 0), bool(read_only), a, interface.get("stream"))


class _Borrowed:
    """The producer's memory as ``__array_interface__``; holding the capsule keeps it alive
    (an unconsumed capsule's destructor releases the tensor when the last view goes)."""

    def __init__(self, capsule, interface: dict):
        self.capsule = capsule
        self.__array_interface__ = interface


def _dlpack_view(a) -> np.ndarray | None:
    """A view of a DLPack producer's host memory read from its capsule (for what NumPy's
    ``from_dlpack`` refuses: bf16 and fp8, as the ml_dtypes type), or None where ``a`` is no
    such producer."""
    tensor = dlpack_tensor(a)
    if tensor is None or not is_host_device(tensor.device) or tensor.dtype is None:
        return None
    dtype = tensor.dtype
    if math.prod(tensor.shape) == 0:
        return np.empty(tensor.shape, dtype)
    bits = np.dtype(f"u{dtype.itemsize}")  # the same bytes as unsigned integers, then viewed as the type
    interface = {"version": 3, "shape": tensor.shape, "typestr": bits.str,
                 "strides": tensor.byte_strides(dtype.itemsize), "data": (tensor.address, tensor.read_only)}
    return np.asarray(_Borrowed(tensor.capsule, interface)).view(dtype)


def strided_view(memory: np.ndarray, shape, strides, writeable: bool = False) -> np.ndarray:
    """``np.lib.stride_tricks.as_strided`` for every accy type: NumPy cannot rebuild an fp8
    dtype from its array interface ("<f1"), so the view is made of same-width unsigned
    integers and viewed back."""
    bits = memory.view(np.dtype(f"u{memory.itemsize}"))
    view = np.lib.stride_tricks.as_strided(bits, tuple(shape), tuple(strides), writeable=writeable)
    return view.view(memory.dtype)


# torch's lazy views: a tensor whose memory holds x but that reads as -x (torch._neg_view,
# z.conj().imag) or as conj(x) (z.conj()); DLPack and the memory say x, so accy resolves them
_LAZY_BITS = (("is_neg", "resolve_neg", "negative bit"), ("is_conj", "resolve_conj", "conjugate bit"))


def resolve_lazy_bits(name: str, a, output: bool):
    """``a`` as its values read: a torch tensor with the negative or conjugate bit set is an
    input resolved into a copy (as torch's own ops do), and refused as an output (the kernel
    would write the memory without the negation, so the tensor would read back negated)."""
    if type(a) is np.ndarray:
        return a
    for test, resolve, bit in _LAZY_BITS:
        method = getattr(a, test, None)
        if not callable(method) or method() is not True:
            continue
        if output:
            raise ArgumentError(f"argument '{name}': the kernel stores to this tensor, but it has the {bit} set "
                                f"(a lazy view: its memory holds other values than it reads as); pass a tensor "
                                f"without it (t.{resolve}() is a copy) and copy the result back")
        a = getattr(a, resolve)()
    return a


def as_host_array(name: str, a) -> np.ndarray:
    """A NumPy view of a host array-like (no copy), or an error naming the argument.  A torch
    tensor with the negative or conjugate bit set is read through a resolved copy."""
    if type(a) is np.ndarray:
        return a
    a = resolve_lazy_bits(name, a, False)
    if isinstance(a, np.ndarray):
        if isinstance(a, np.ma.MaskedArray):
            raise ArgumentError(f"argument '{name}': a masked array; the kernel would read its masked elements "
                                "too: pass a.filled(value) (or a.data, to ignore the mask)")
        return a.view(np.ndarray)  # np.matrix and other subclasses: the same memory, plain indexing
    device = dlpack_device(a)
    if not is_host_device(device):
        raise _on_another_device(name, a, device)
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
        overflows = not np.isfinite(rounded) and np.isfinite(float(value))  # a finite type's overflow: NaN
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
        value = resolve_lazy_bits(p.name, value, p.name in outputs)  # resolved once: one copy is described and run
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
            raise ArgumentError(f"argument '{p.name}' is not C-contiguous ({_layout_text(info)}); pass a contiguous "
                                f"copy ({_contiguous_copy(value)})")
        if p.name in outputs and not info.writeable:
            raise ArgumentError(f"argument '{p.name}' is read-only, but the kernel stores to it")
    for out in sorted(outputs):
        for p in graph.buffers:
            if p.name != out and infos[out].overlaps(infos[p.name]):
                raise ArgumentError(
                    f"argument '{out}' shares memory with argument '{p.name}'; an output must not alias another argument"
                )
    return Binding(arrays, infos, frozenset(outputs), scalars, _layouts(graph, infos, scalars))


def _layout_text(info: ArrayInfo) -> str:
    """Shape and strides in elements, as torch and a kernel count them (NumPy's are in bytes)."""
    if info.strides is None:
        return f"shape {info.shape}"
    if any(s % info.dtype.itemsize for s in info.strides):
        return f"shape {info.shape}, strides {info.strides} in bytes"
    return f"shape {info.shape}, strides {tuple(s // info.dtype.itemsize for s in info.strides)} in elements"


def _contiguous_copy(value) -> str:
    """How to copy ``value`` contiguously, in its own library's words."""
    if callable(getattr(value, "contiguous", None)):  # a torch tensor
        return "x.contiguous()"
    return "np.ascontiguousarray(x)"


def _layouts(graph: Graph, infos: dict[str, ArrayInfo], scalars: dict) -> dict[str, TensorLayout]:
    """Each tensor's layout, from its bound hidden scalars, checked to lie in its span (they
    come from :func:`accy.runtime.tensor_arguments.expand_tensor_arguments`, or by hand)."""
    found = {}
    for t in tensor_parameters(graph.params):
        layout = TensorLayout(tuple(int(scalars[n]) for n in t.shape_names),
                              tuple(int(scalars[n]) for n in t.stride_names), int(scalars[t.offset_name]))
        if not layout.fits(infos[t.name].size):
            raise ArgumentError(f"tensor '{t.name}': shape {layout.shape}, strides {layout.strides} and offset "
                                f"{layout.offset} reach past its span of {infos[t.name].size} elements")
        found[t.name] = layout
    return found
