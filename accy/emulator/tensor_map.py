"""The emulated driver's tensor map: the 128 bytes a ``cp.async.bulk.tensor`` names.

The hardware's map (``CUtensorMap``) is opaque: ``cuTensorMapEncodeTiled`` writes it and only
the GPU reads it.  The emulator has no such format to follow, so its driver encodes the same
fields, the ones ``cuTensorMapEncodeTiled`` takes, in a layout of its own (:data:`LAYOUT`),
which the emulator reads back (:func:`decode`) and ``tensormap.replace`` edits field by field.
Every field is little-endian:

====== ===== ===================================================================
offset bytes field
====== ===== ===================================================================
0      4     magic ``b"ACTM"`` (a map the driver did not encode is refused)
4      1     rank, 1 to 5
5      1     element type (``CUtensorMapDataType``'s numbering, :class:`ElementType`)
6      1     interleave (``CUtensorMapInterleave``: 0 none, 1 16 bytes, 2 32 bytes)
7      1     swizzle (``CUtensorMapSwizzle``: 0 none, 1 32 bytes, 2 64 bytes, 3 128 bytes)
8      1     L2 promotion (``CUtensorMapL2promotion``; a hint, not emulated)
9      1     out-of-bounds fill (``CUtensorMapFloatOOBfill``: 0 zeros, 1 NaN)
16     8     global address of element [0, ..., 0]
24     4x5   global dimensions, innermost first
48     8x4   global strides in bytes of dimensions 1 .. rank-1 (dimension 0 is contiguous)
80     4x5   box dimensions, innermost first
100    4x5   element strides, innermost first
====== ===== ===================================================================
"""

from __future__ import annotations

import enum
import struct

import attrs

MAP_BYTES = 128
MAP_ALIGN = 64
MAGIC = b"ACTM"
MAX_RANK = 5


class ElementType(enum.IntEnum):
    """``CUtensorMapDataType``: what one element of the tensor is (fp8 moves as UINT8)."""

    UINT8 = 0
    UINT16 = 1
    UINT32 = 2
    INT32 = 3
    UINT64 = 4
    INT64 = 5
    FLOAT16 = 6
    FLOAT32 = 7
    FLOAT64 = 8
    BFLOAT16 = 9
    FLOAT32_FTZ = 10
    TFLOAT32 = 11
    TFLOAT32_FTZ = 12

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]


_ITEMSIZE = {ElementType.UINT8: 1, ElementType.UINT16: 2, ElementType.UINT32: 4, ElementType.INT32: 4,
             ElementType.UINT64: 8, ElementType.INT64: 8, ElementType.FLOAT16: 2, ElementType.FLOAT32: 4,
             ElementType.FLOAT64: 8, ElementType.BFLOAT16: 2, ElementType.FLOAT32_FTZ: 4,
             ElementType.TFLOAT32: 4, ElementType.TFLOAT32_FTZ: 4}


class Swizzle(enum.IntEnum):
    """``CUtensorMapSwizzle``: the shared-memory swizzle a copy writes (or a store reads) in."""

    NONE = 0
    B32 = 1
    B64 = 2
    B128 = 3

    @property
    def span(self) -> int:
        """The bytes its pattern repeats over (0: none)."""
        return 0 if self is Swizzle.NONE else 16 << self


class Interleave(enum.IntEnum):
    NONE = 0
    B16 = 1
    B32 = 2


class OobFill(enum.IntEnum):
    ZEROS = 0
    NAN = 1  # CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA


@attrs.frozen
class TensorMapFields:
    """The arguments of ``cuTensorMapEncodeTiled``, innermost dimension first."""

    element_type: ElementType
    address: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]  # bytes, dimensions 1 .. rank-1
    box: tuple[int, ...]
    element_strides: tuple[int, ...]
    interleave: Interleave = Interleave.NONE
    swizzle: Swizzle = Swizzle.NONE
    l2_promotion: int = 0
    oob_fill: OobFill = OobFill.ZEROS

    @property
    def rank(self) -> int:
        return len(self.dims)


# name (as tensormap.replace spells its field) -> (offset, struct format of one entry, entries)
LAYOUT = {
    "rank": (4, "<B", 1),
    "elemtype": (5, "<B", 1),
    "interleave_layout": (6, "<B", 1),
    "swizzle_mode": (7, "<B", 1),
    "l2_promotion": (8, "<B", 1),
    "fill_mode": (9, "<B", 1),
    "global_address": (16, "<Q", 1),
    "global_dim": (24, "<I", MAX_RANK),
    "global_stride": (48, "<Q", MAX_RANK - 1),
    "box_dim": (80, "<I", MAX_RANK),
    "element_stride": (100, "<I", MAX_RANK),
}


def encode(f: TensorMapFields) -> bytes:
    """The 128 bytes of ``f``'s map."""
    out = bytearray(MAP_BYTES)
    out[0:4] = MAGIC

    def put(name, values):
        offset, fmt, _ = LAYOUT[name]
        size = struct.calcsize(fmt)
        for k, v in enumerate(values):
            struct.pack_into(fmt, out, offset + k * size, v)

    put("rank", [f.rank])
    put("elemtype", [f.element_type])
    put("interleave_layout", [f.interleave])
    put("swizzle_mode", [f.swizzle])
    put("l2_promotion", [f.l2_promotion])
    put("fill_mode", [f.oob_fill])
    put("global_address", [f.address])
    put("global_dim", f.dims)
    put("global_stride", f.strides)
    put("box_dim", f.box)
    put("element_stride", f.element_strides)
    return bytes(out)


def decode(data: bytes) -> TensorMapFields:
    """The fields of a map :func:`encode` wrote; ValueError for anything else."""
    data = bytes(data)
    if len(data) != MAP_BYTES or data[0:4] != MAGIC:
        raise ValueError("not a tensor map the emulated driver encoded (its magic is missing)")

    def get(name, count=None):
        offset, fmt, entries = LAYOUT[name]
        size = struct.calcsize(fmt)
        n = entries if count is None else count  # (a rank-1 map has no strides: count 0)
        return tuple(struct.unpack_from(fmt, data, offset + k * size)[0] for k in range(n))

    (rank,) = get("rank")
    if not 1 <= rank <= MAX_RANK:
        raise ValueError(f"tensor map of rank {rank}: expected 1 to {MAX_RANK}")
    return TensorMapFields(
        element_type=ElementType(get("elemtype")[0]), address=get("global_address")[0], dims=get("global_dim", rank),
        strides=get("global_stride", rank - 1), box=get("box_dim", rank),
        element_strides=get("element_stride", rank), interleave=Interleave(get("interleave_layout")[0]),
        swizzle=Swizzle(get("swizzle_mode")[0]), l2_promotion=get("l2_promotion")[0],
        oob_fill=OobFill(get("fill_mode")[0]))
