"""Which tiles of a tile program the host builds with no array, or only in part, planned
with the access plans and liveness of :mod:`.tile_access`.

Fusion (:func:`plan_fusion`): a splat or arange read only chunk by chunk, and a pointwise op
whose one use reads it chunk by chunk in the same block, get no array: their consumer
computes each chunk of them where it reads it (``exp(x - m)`` summed is one loop, in registers).

Tails (:func:`plan_tails`): a 1-D tile whose lanes from some run-time position on all hold
one value (a box-masked load's ``other`` past the box, a splat, a pointwise op of such tiles)
is computed only up to there where every reader reads it through vectors that supply the
rest: an oversized block costs what its real elements cost.
"""

from __future__ import annotations

import math

from ..dsl.ir import Block, Op, Value
from ..dsl.types import TileType, shape_of
from .tile_access import _EFFECTS, Liveness, is_checked_division, is_pointwise


def _readers(region: Block) -> dict[Value, list]:
    """Each value's readers in ``region``: (op, operand position) pairs."""
    out: dict[Value, list] = {}
    for op in region.walk():
        for k, v in enumerate(op.operands):
            out.setdefault(v, []).append((op, k))
    return out


def _reads_by_chunks(user: Op, k: int) -> bool:
    """Whether ``user`` reads its operand ``k`` only as vectors of consecutive elements (at any
    offset), never through its array: a pointwise op, a stored value, a reduction or arg
    reduction (along any axis, each element once)."""
    if is_pointwise(user):
        return True
    if user.opcode == "tile_store":
        return k == 1
    return user.opcode in ("reduce", "argreduce")


def _along_rows(user: Op, k: int) -> bool:
    """Whether ``user`` reads its operand ``k`` row by row (a fused load then finds its row once
    per chunk; a reduction along another axis reads a chunk of each row in turn, and a load
    into an array for it is cheaper)."""
    if user.opcode in ("reduce", "argreduce"):
        shape = shape_of(user.operands[0].type)
        down_rows = user.opcode == "reduce" and len(shape) == 2 and user.attrs.axis == 0  # finds each row at once
        return down_rows or math.prod(shape[user.attrs.axis + 1:]) == 1
    return True


def _fusable_load(op: Op, live: Liveness, lanes: int, written: frozenset) -> bool:
    """A load that checks nothing where it runs (a launch checked whole before it), from affine
    offsets with its mask a box, whose chunks never straddle two rows, from a buffer the launch
    never writes (read at its reader, it must not see a store between them)."""
    plan = live.plans.get(op)
    if op.opcode != "tile_load" or plan is None or plan.offsets is None or plan.box is None \
            or op.attrs.buffer in written:
        return False
    shape = shape_of(op.result.type)
    return len(shape) == 1 or shape[-1] % lanes == 0


def plan_fusion(region: Block, live: Liveness, lanes: int, unchecked_loads: bool = False) -> frozenset[Value]:
    """The tiles computed where they are read, chunk by chunk, instead of into an array: splats
    and aranges every live use of which reads them by chunks (a vector each: nothing to keep), and
    pointwise ops (a checked division apart: its check runs where it is computed) and, with
    ``unchecked_loads``, box-masked affine loads (:func:`_fusable_load`) whose one use does, in
    their own block (computed once, as they would be); a load may have several such readers,
    each reading memory again rather than an array the load wrote."""
    uses = _readers(region)
    # without checks a launch may read a buffer it writes (with them, such a launch fuses no load)
    written = frozenset(op.attrs.buffer for op in region.walk() if op.opcode in _EFFECTS)
    fused = set()
    for op in region.walk():
        if op not in live.ops or not op.results or not isinstance(op.results[0].type, TileType):
            continue
        v = op.results[0]
        readers = [(u, k) for u, k in uses.get(v, []) if u in live.ops or u.opcode == "yield"]
        if not readers or not all(u.opcode != "yield" and _reads_by_chunks(u, k) for u, k in readers):
            continue
        if op.opcode in ("splat", "arange"):
            fused.add(v)
        elif len(uses[v]) == 1 and readers[0][0].block is op.block and is_pointwise(op) \
                and not is_checked_division(op):
            fused.add(v)
        elif unchecked_loads and _fusable_load(op, live, lanes, written) and len(readers) == len(uses[v]) \
                and all(u.block is op.block and _along_rows(u, k) for u, k in readers):
            fused.add(v)  # each reader loads it again: a row read twice is in L1 the second time
    return frozenset(fused)


def plan_tails(region: Block, live: Liveness, lanes: int) -> frozenset[Value]:
    """The 1-D tiles (of whole vectors) that may be built only up to a run-time extent, all
    lanes past it holding one value (a tail): box-masked affine loads, splats and pointwise ops
    (not a checked division: every lane's check must run), every live reader of which reads
    them as vectors (a pointwise op, a reduction, a stored value)."""
    readers = _readers(region)
    out = set()
    for op in region.walk():
        if op not in live.ops or not op.results or not isinstance(op.results[0].type, TileType):
            continue
        v = op.results[0]
        shape = shape_of(v.type)
        if len(shape) != 1 or shape[0] % lanes:
            continue
        if op.opcode == "tile_load":
            plan = live.plans.get(op)
            if plan is None or plan.offsets is None or plan.box is None:
                continue
        elif op.opcode != "splat" and not (is_pointwise(op) and not is_checked_division(op)):
            continue
        uses = readers.get(v, [])
        if uses and all(u.opcode != "yield" and _reads_by_chunks(u, k) for u, k in uses):
            out.add(v)
    return frozenset(out)
