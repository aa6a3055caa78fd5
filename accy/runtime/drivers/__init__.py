"""The drivers a device launch goes through, behind one small interface (:class:`Driver`).

Three implement it: NVIDIA's ``cuda.core`` (:mod:`.cuda_core`, wheels only: it loads PTX with
the driver alone) and PyCUDA (:mod:`.pycuda_driver`, built against the CUDA toolkit), which
drive a GPU for ``backend="cuda"``, and accy's PTX emulator (:mod:`.emulator`), which
``backend="ptx"`` launches on.  Everything else about a launch (staging the arguments,
marshalling the parameters, the status word, copy-back) is
:class:`accy.runtime.gpu.DeviceLaunch`, the same code for all three.

``ACCY_CUDA_DRIVER=cuda-core|pycuda`` picks the GPU driver; unset, the first of them that
imports.  Nothing here imports either library until :func:`open_driver` is called.
"""

from __future__ import annotations

import importlib
import os
from typing import Protocol

import attrs
import numpy as np

from ...errors import ArgumentError, BackendUnavailableError

ENV = "ACCY_CUDA_DRIVER"

# struct-module codes of the parameter widths the ABI uses (PyCUDA's prepared calls take them)
_STRUCT_CODES = {(1, "u"): "B", (2, "u"): "H", (4, "u"): "I", (8, "u"): "Q", (8, "i"): "q"}


@attrs.frozen
class KernelLaunch:
    """One kernel launch as a driver receives it: the geometry and the parameters, each a NumPy
    scalar of exactly its ``.param``'s width (pointers ``uint64``, counts ``int64``, scalars as
    unsigned bits), in the ABI's order."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    params: tuple[np.generic, ...]
    shared_bytes: int = 0  # dynamic shared memory per block

    @property
    def struct_format(self) -> str:
        """The parameters' layout as :mod:`struct` codes (what PyCUDA's ``prepare`` takes), a
        tensor map (``np.void`` of 128 bytes) at its 64-byte alignment after explicit padding."""
        out, offset = [], 0
        for p in self.params:
            size = p.dtype.itemsize
            if p.dtype.kind == "V":
                pad = -offset % MAP_ALIGN
                out.append(f"{pad}x{size}s" if pad else f"{size}s")
                offset += pad
            else:
                offset += -offset % size
                out.append(_STRUCT_CODES[size, p.dtype.kind])
            offset += size
        return "".join(out)

    @property
    def has_maps(self) -> bool:
        return any(p.dtype.kind == "V" for p in self.params)


MAP_ALIGN = 64


def encode_tiled(cu, fields) -> bytes:
    """A tensor map's 128 bytes from ``cuTensorMapEncodeTiled`` (``cu``: ``cuda.bindings.driver``),
    for the GPU drivers; ``fields``: a :class:`~accy.emulator.tensor_map.TensorMapFields`."""
    import struct

    error, encoded = cu.cuTensorMapEncodeTiled(
        cu.CUtensorMapDataType(int(fields.element_type)), fields.rank, fields.address, list(fields.dims),
        list(fields.strides), list(fields.box), list(fields.element_strides),
        cu.CUtensorMapInterleave(int(fields.interleave)), cu.CUtensorMapSwizzle(int(fields.swizzle)),
        cu.CUtensorMapL2promotion(int(fields.l2_promotion)), cu.CUtensorMapFloatOOBfill(int(fields.oob_fill)))
    if error != cu.CUresult.CUDA_SUCCESS:
        raise ArgumentError(f"cuTensorMapEncodeTiled refused a tensor map ({getattr(error, 'name', error)}): {fields}")
    return struct.pack("<16Q", *encoded.opaque)


class Driver(Protocol):
    """What :class:`~accy.runtime.gpu.DeviceLaunch` and the ``cuda`` backend's state ask of a
    device.  Addresses are ints; ``stream`` is the driver's own stream object (what
    :meth:`stream` returns), and every call on it is ordered on it."""

    name: str  # ACCY_CUDA_DRIVER's value for it ("emulator" for the emulator)
    arch: str  # the device's sm_NN

    def push_context(self) -> None: ...  # make the device current on this thread
    def pop_context(self) -> None: ...
    def stream(self, obj) -> object: ...  # the native stream for the ``stream=`` option (None: the default)
    def load(self, ptx: str, entry: str) -> object: ...  # a kernel handle for launch()
    def alloc(self, nbytes: int) -> int: ...
    def free(self, address: int) -> None: ...
    def copy_to_device(self, address: int, host: np.ndarray, stream) -> None: ...
    def copy_from_device(self, host: np.ndarray, address: int, stream) -> None: ...  # done on return
    def copy_device(self, dst: int, src: int, nbytes: int, stream) -> None: ...
    def memset(self, address: int, value: int, nbytes: int, stream) -> None: ...
    def launch(self, kernel, spec: KernelLaunch, stream) -> None: ...
    def tensor_map(self, fields) -> bytes: ...  # a TensorMapFields as the device reads it (128 bytes)
    def synchronize(self, stream) -> None: ...
    def record(self, stream) -> object: ...  # an event (for timing)
    def elapsed_ms(self, start, end) -> float: ...


def foreign_stream_handle(obj) -> int | None:
    """The ``CUstream`` handle of a stream another library made, or None if ``obj`` is none:
    the CUDA stream protocol's ``__cuda_stream__()`` (cuda.core, recent PyTorch), PyTorch's
    ``.cuda_stream``, CuPy's ``.ptr``."""
    protocol = getattr(type(obj), "__cuda_stream__", None)
    if protocol is not None:
        value = obj.__cuda_stream__() if callable(protocol) else obj.__cuda_stream__  # early versions: a property
        return int(value[1])  # (protocol version, handle)
    handle = getattr(obj, "cuda_stream", None)  # torch.cuda.Stream
    if isinstance(handle, int) and not isinstance(handle, bool):
        return handle
    if type(obj).__module__.startswith("cupy") and isinstance(getattr(obj, "ptr", None), int):
        return obj.ptr
    return None


def stream_error(driver: str, obj, takes: str) -> ArgumentError:
    return ArgumentError(f"option 'stream': the {driver} driver takes {takes}, or None for the default stream; "
                         f"got {type(obj).__name__}")


@attrs.frozen
class DriverChoice:
    """A GPU driver ``ACCY_CUDA_DRIVER`` can name."""

    name: str  # the variable's value
    module: str  # what must import for it
    install: str  # how to get it
    implementation: str  # "module:Class" in this package

    def import_error(self) -> str | None:
        """Why :attr:`module` does not import, or None when it does."""
        try:
            importlib.import_module(self.module)
        except Exception as e:  # ImportError, or a broken install raising its own
            return str(e) or type(e).__name__
        return None

    def open(self, device: int) -> Driver:
        module, cls = self.implementation.split(":")
        return getattr(importlib.import_module(f"{__name__}.{module}"), cls)(device)


DRIVERS = (
    DriverChoice("cuda-core", "cuda.core", "pip install 'accy[cuda]' (NVIDIA's cuda-core and cuda-bindings "
                 "wheels; nothing is compiled)", "cuda_core:CudaCoreDriver"),
    DriverChoice("pycuda", "pycuda.driver", "pip install 'accy[pycuda]' (pycuda builds against the CUDA "
                 "toolkit)", "pycuda_driver:PycudaDriver"),
)


def choose(value: str | None = None) -> DriverChoice:
    """The driver ``value`` names (default: ``$ACCY_CUDA_DRIVER``); unset or empty, the first of
    :data:`DRIVERS` that imports.  Raises :class:`BackendUnavailableError` saying which driver is
    missing and how to install it."""
    value = (os.environ.get(ENV, "") if value is None else value).strip()
    if value:
        choice = next((d for d in DRIVERS if d.name == value), None)
        if choice is None:
            raise BackendUnavailableError(
                f"backend 'cuda': {ENV}={value!r} names no driver; expected one of "
                f"{', '.join(d.name for d in DRIVERS)}, or unset for the one installed (cuda-core first)")
        error = choice.import_error()
        if error is not None:
            raise BackendUnavailableError(f"backend 'cuda' with {ENV}={value} needs {choice.module}, which could "
                                          f"not be imported ({error}): {choice.install}")
        return choice
    errors = []
    for choice in DRIVERS:
        error = choice.import_error()
        if error is None:
            return choice
        errors.append(error)
    raise BackendUnavailableError(
        f"backend 'cuda' needs cuda.core or pycuda, and neither could be imported ({'; '.join(errors)}): "
        + "; or ".join(d.install for d in DRIVERS) + ", on a machine with an NVIDIA driver and GPU")


def open_driver(device: int = 0, name: str | None = None) -> Driver:
    """The GPU driver :func:`choose` picks, opened on ``device``."""
    return choose(name).open(device)
