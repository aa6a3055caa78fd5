"""How the host groups a launch's threads into chunks of vector lanes (see
:mod:`accy.codegen.host.spmd`), and which values differ between a chunk's lanes."""

from __future__ import annotations

import enum
import functools
import math
import os

import attrs
import llvmlite.binding as llvm
from llvmlite import ir

from ...dsl.analysis import uniformity
from ...dsl.ir import Graph, Value, constant_of
from ...errors import CompileError
from ...targets import VECTOR_WIDTHS


def host_vector_width() -> int:
    """Lanes per chunk on this CPU: its widest vector register in 32-bit lanes
    (``ACCY_VECTOR_WIDTH`` overrides it for the process: the tests run narrow widths)."""
    forced = os.environ.get("ACCY_VECTOR_WIDTH")
    if not forced:
        return _cpu_vector_width()
    if forced not in {str(w) for w in VECTOR_WIDTHS[1:]}:
        raise CompileError(f"ACCY_VECTOR_WIDTH must be one of {', '.join(map(str, VECTOR_WIDTHS[1:]))}, "
                           f"got {forced!r}")
    return int(forced)


@functools.cache
def _cpu_vector_width() -> int:
    features = llvm.get_host_cpu_features()
    if features.get("avx512f"):
        return 16
    if features.get("avx2") or features.get("avx"):
        return 8
    return 4


@attrs.frozen
class Linear:
    """An index ``base + stride * lane`` (``base`` a scalar i64, ``lane`` 0..W-1): a thread
    index along x and what adding uniform values and scaling by constants makes of it."""

    base: ir.Value
    stride: int


SEGMENT = 64  # row chunks: a unit of work is up to this many chunks of one row, in an inner loop


class Chunks(enum.Enum):
    """How a launch's threads are grouped into chunks of ``W`` lanes (see the module doc)."""

    row = "row"
    flat = "flat"
    block = "block"


@attrs.frozen
class Chunking:
    kind: Chunks
    width: int

    def units(self, extents, block_shape=()) -> int:
        """How many units of work (chunks, or blocks) a launch of ``extents`` has: the host
        splits ``[0, units)`` between its threads."""
        if self.kind is Chunks.block:
            return math.prod(extents)
        if self.kind is Chunks.flat:
            return -(-math.prod(extents) // self.width)
        return -(-extents[0] // (self.width * SEGMENT)) * math.prod(extents[1:])


def chunking(graph: Graph, width: int) -> Chunking:
    if graph.is_block_launch:
        return Chunking(Chunks.block, width)
    x = graph.axes[0].extent
    return Chunking(Chunks.flat if x is not None and x < width else Chunks.row, width)


def varying_values(graph: Graph, kind: Chunks) -> set[Value]:
    """The values of the launch body that may differ between the lanes of a chunk."""
    launch = graph.launch_op
    region = launch.regions[0]
    if kind is Chunks.block:
        seeds = region.args[len(launch.operands):]  # the thread coordinates; block indices are uniform
    elif kind is Chunks.flat:
        seeds = region.args
    else:
        seeds = region.args[:1]  # x; a row's y and z are uniform
    return uniformity.varying_values(region, seeds)


def is_vector(x) -> bool:
    return isinstance(x, ir.Value) and isinstance(x.type, ir.VectorType)


def uniform_index(entry):
    """A scalar index where ``entry`` is the same in every lane, else None."""
    if isinstance(entry, Linear):
        return entry.base if entry.stride == 0 else None
    return None if is_vector(entry) else entry


def index_constant(v: Value):
    """The value of an integer constant, else None."""
    return constant_of(v) if v.type.is_int else None


def untyped(pointer: ir.Value) -> ir.Value:
    """An alloca as a plain ``ptr`` (llvmlite types it; the module's pointers are opaque), so
    that it is indexed like a buffer, by element, with scalar or vector indices."""
    pointer.type = ir.PointerType()
    return pointer
