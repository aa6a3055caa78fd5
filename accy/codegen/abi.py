"""The kernel ABI, in one place: how a compiled kernel takes its arguments and how it
reports a failure.

Parameters, in order: one pointer per buffer (in parameter order; each points at
8 readable bytes even when the buffer is empty), one ``i64`` element count per
buffer, each scalar by value as the unsigned integer of its width (its bits;
a bool is one byte), and a pointer to the status word.  The host launcher adds
the range of units of work it runs, two ``i64`` (see :mod:`accy.codegen.host.spmd`).
A GPU kernel whose graph copies with the tensor memory accelerator adds, per tensor map
(:func:`tensor_maps`), the map's 128 bytes (``.param .align 64 .b8 [128]``, read in place), then
per map a ``u32`` that is 1 where the launch could describe the tensor (see
:mod:`accy.runtime.tensor_maps`).

The status word is 4 x i64, zeroed before the launch: ``kind, op ordinal,
detail, lane``.  The first failing check records itself with a compare-and-swap
and skips its access; a non-zero ``kind`` after the launch means it failed, and
:func:`status_error` words it exactly as the interpreter would.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np

from ..dsl.ir import Axis, Graph, Op
from ..dsl.ops import BlockUnit
from ..dsl.types import DType
from ..diagnostics import division_by_zero, out_of_bounds, thread_text
from ..targets import STATIC_SHARED_BYTES

ABI = ("accy-v2: ptr buffer[n] (8 readable bytes even if empty), i64 count[n], "
       "scalar[m] as uN of its width (bool: u8), ptr status[4 x i64]; NVPTX: map[k] (128 bytes, align 64), u32 ready[k]")

STATUS_OK, STATUS_LOAD_OOB, STATUS_STORE_OOB, STATUS_DIV_ZERO = 0, 1, 2, 3
STATUS_WORDS = 4


def shared_offsets(graph: Graph) -> tuple[dict[str, int], int]:
    """Each shared array's byte offset in one block's shared memory (in declaration order, each
    at a multiple of its alignment, 16 bytes or more) and the bytes they take together."""
    offsets, end = {}, 0
    for name, op in graph.shared_arrays().items():
        align = op.attrs.align
        offsets[name] = end = -(-end // align) * align
        end += -(-op.attrs["count"] * op.attrs["dtype"].itemsize // 16) * 16
    return offsets, end


def tensor_maps(graph: Graph) -> tuple:
    """The tensor maps a graph's ``tma_load`` and ``tma_ready`` ops name
    (:class:`~accy.dsl.ops.TensorMapAttrs`), in the order they first appear: their parameters'."""
    seen = {}
    for op in graph.body.walk():
        if op.opcode == "tma_load":
            seen.setdefault(op.attrs.map, None)
        elif op.opcode == "tma_ready":
            seen.setdefault(op.attrs, None)
    return tuple(seen)


def dynamic_shared_bytes(graph: Graph) -> int:
    """The dynamic shared memory a GPU launch of ``graph`` gives each block: 0 where its shared
    arrays fit the static limit (they are declared as static arrays), else all of them (the
    kernel declares one dynamic array and places them in it; the driver opts the kernel in)."""
    total = shared_offsets(graph)[1]
    return total if total > STATIC_SHARED_BYTES else 0


def scalar_bits(dtype: DType) -> int:
    """The width a scalar of ``dtype`` is passed in (a bool takes a byte)."""
    return max(dtype.bits, 8)


_UNSIGNED = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
_CTYPES = {8: ctypes.c_uint8, 16: ctypes.c_uint16, 32: ctypes.c_uint32, 64: ctypes.c_uint64}


def scalar_words(graph: Graph, scalars: dict) -> list[int]:
    """Each scalar's bits as a Python int, in ABI order."""
    words = []
    for p in graph.scalars:
        value = np.asarray(scalars[p.name], p.dtype.numpy)
        words.append(int(value.astype(np.uint8) if p.dtype.is_bool else value.view(_UNSIGNED[p.dtype.bits])))
    return words


def _parameters(graph: Graph) -> list:
    n = len(graph.buffers)
    scalars = [_CTYPES[scalar_bits(p.dtype)] for p in graph.scalars]
    return [ctypes.c_void_p] * n + [ctypes.c_int64] * n + scalars + [ctypes.c_void_p]


def host_signature(graph: Graph):
    """The ctypes type of a host launcher: the ABI's parameters, then ``unit_begin, unit_end``."""
    return ctypes.CFUNCTYPE(None, *_parameters(graph), ctypes.c_int64, ctypes.c_int64)


def prepare_signature(graph: Graph):
    """The ctypes type of a host launcher's ``prepare`` entry: the ABI's parameters, then a
    pointer to the extents it writes; returns whether the whole launch fits."""
    return ctypes.CFUNCTYPE(ctypes.c_bool, *_parameters(graph), ctypes.c_void_p)


def status_error(graph: Graph, ordinals: tuple[Op, ...], status, sizes: dict[str, int],
                 extents: tuple[int, ...]) -> Exception | None:
    """The error a non-zero status word stands for, worded as the interpreter words it."""
    kind, ordinal, detail, lane = (int(w) for w in status[:STATUS_WORDS])
    if kind == STATUS_OK:
        return None
    op = ordinals[ordinal]
    thread = thread_text(graph.lane_axes(extents), lane)
    who = "program" if graph.is_tile_launch else "thread"  # a tile launch's lane is its program number
    launch = graph.launch_op
    if launch.opdef.thread_blocks and launch.attrs.unit is BlockUnit.PROGRAM:  # a tile launch, distributed
        per_block = math.prod(n for _, n in launch.attrs.threads)
        grid = tuple(Axis(name, e) for name, e in zip(launch.attrs.axes, extents))
        who, thread = "program", f"{thread_text(grid, lane // per_block)}, thread {lane % per_block}"
    if kind == STATUS_DIV_ZERO:
        return division_by_zero(op, thread, who=who)
    if op.attrs.get("space", "global") == "shared":
        size = graph.shared_arrays()[op.attrs["buffer"]].attrs["count"]
    else:
        size = sizes[op.attrs["buffer"]]
    return out_of_bounds(op, detail, size, thread, who=who)
