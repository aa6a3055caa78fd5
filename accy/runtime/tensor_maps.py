"""Tensor maps at launch: what a ``tma_load`` (:mod:`accy.dsl.ops`) needs of the tensor it copies
from, decided once per launch and per map.

A map's compile-time half (:class:`~accy.dsl.ops.TensorMapAttrs`: tensor, element type, box,
swizzle) is in the graph; the launch adds the tensor's address, shape and strides.  The hardware
takes a tensor only where ``cuTensorMapEncodeTiled`` does (CUDA driver API reference): the first
element 16-byte aligned, the innermost axis contiguous, every other stride a positive multiple of
16 bytes under 2**40, every extent 1 to 2**32.  :func:`describe` gives the map's fields where
those hold and the reason where they do not; the kernel then copies that tensor with
``cp.async`` instead (its ``tma_ready`` is false), so every layout a caller passes runs.

Each driver encodes the fields its own way (:meth:`~accy.runtime.drivers.Driver.tensor_map`):
the GPU drivers through ``cuTensorMapEncodeTiled``, the emulator in its own format
(:mod:`accy.emulator.tensor_map`).  A map and its flag are kernel parameters
(:mod:`accy.codegen.abi`).
"""

from __future__ import annotations

import numpy as np

from ..dsl.ops import TensorMapAttrs
from ..dsl.types import DType
from ..emulator.tensor_map import ElementType, Swizzle, TensorMapFields

ALIGN = 16  # bytes: the first element's alignment and every stride's multiple
MAX_STRIDE = 2**40
MAX_EXTENT = 2**32

_FLOATS = {"bf16": ElementType.BFLOAT16, "f16": ElementType.FLOAT16, "f32": ElementType.FLOAT32,
           "f64": ElementType.FLOAT64}
_BY_SIZE = {1: ElementType.UINT8, 2: ElementType.UINT16, 4: ElementType.UINT32, 8: ElementType.UINT64}


def element_type(dtype: DType) -> ElementType:
    """The map's element type: the float types the hardware names, any other by its width (a
    copy moves bits; fp8 moves as bytes)."""
    return _FLOATS.get(dtype.name, _BY_SIZE[dtype.itemsize])


def static_reason(m: TensorMapAttrs) -> str | None:
    """Why the box itself cannot be a map's (None: it can): at most 256 elements an axis, the
    inner axis whole 16-byte units and, swizzled, within the swizzle's span."""
    inner = m.box[-1] * m.dtype.itemsize
    if any(n > 256 for n in m.box):
        return f"box {m.box} has an axis over 256 elements"
    if inner % 16:
        return f"the box's inner axis is {inner} bytes, not a multiple of 16"
    if m.swizzle and inner > m.swizzle:
        return f"the box's inner axis is {inner} bytes, wider than the {m.swizzle}-byte swizzle"
    return None


def describe(m: TensorMapAttrs, address: int, shape, strides, offset: int) -> TensorMapFields | str:
    """The map of tensor ``m.tensor`` whose span starts at ``address`` (element strides and
    offset as the graph's hidden scalars give them, outermost axis first), or why the
    hardware cannot take it."""
    shape, strides = [int(n) for n in shape], [int(s) for s in strides]
    itemsize = m.dtype.itemsize
    reason = static_reason(m)
    if reason is not None:
        return reason
    if len(shape) != len(m.box):
        return f"a {len(shape)}-d tensor for a {len(m.box)}-d box"
    first = address + int(offset) * itemsize
    if first % ALIGN:
        return f"its first element's address is not a multiple of {ALIGN} bytes"
    if any(not 1 <= n <= MAX_EXTENT for n in shape):
        return f"its shape {tuple(shape)} has an extent outside 1..2**32"
    if strides[-1] != 1:
        return f"its innermost stride is {strides[-1]} elements, not 1"
    outer = [s * itemsize for s in strides[:-1]]
    if any(s <= 0 or s % ALIGN or s >= MAX_STRIDE for s in outer):
        return f"its strides {tuple(outer)} (bytes) are not all positive multiples of {ALIGN} under 2**40"
    return TensorMapFields(element_type=element_type(m.dtype), address=first, dims=tuple(reversed(shape)),
                           strides=tuple(reversed(outer)), box=tuple(reversed(m.box)),
                           element_strides=(1,) * len(shape), swizzle=Swizzle(_SWIZZLE[m.swizzle]))


_SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}


def tensor_layout(name: str, scalars: dict, rank: int) -> tuple[list, list, int]:
    """A tensor parameter's shape, strides and offset from the launch's hidden scalars."""
    shape = [int(np.asarray(scalars[f"{name}__shape{d}"])) for d in range(rank)]
    strides = [int(np.asarray(scalars[f"{name}__stride{d}"])) for d in range(rank)]
    return shape, strides, int(np.asarray(scalars[f"{name}__offset"]))
