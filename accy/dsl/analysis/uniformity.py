"""Uniformity: which values may differ between the threads that run together.

Seeds (a block's thread coordinates, or the lanes' own launch indices on the host) vary;
so do shuffles' and atomics' results (each thread gets its own), and whatever is
computed from a varying value.  The one rule, :func:`inputs`, says which values decide
whether a value varies: the builder asks it value by value while a kernel is traced
(:func:`varies`, to refuse a barrier not every thread reaches), the host lowering for a
whole launch body at once (:func:`varying_values`, to keep uniform values scalar).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from ...errors import BarrierError
from ..ir import Block, Value
from ..ops import OPS, IfKind, RegionKind

ALWAYS = None  # inputs() of a value that varies whatever its operands


def inputs(value: Value, sources: Mapping[Value, tuple[Value, ...]] | None = None) -> tuple[Value, ...] | None:
    """The values that decide whether ``value`` varies (it does if any of them does), or
    :data:`ALWAYS`.  ``sources`` answers for the arguments of a loop still being traced
    (its op does not exist yet)."""
    op = value.op
    if op is None:  # a block argument
        block = value.owner
        loop = block.parent if isinstance(block, Block) else None
        if loop is None or loop.opdef.regions is not RegionKind.LOOP:
            return (sources or {}).get(value, ())  # a launch's own arguments are seeds or uniform
        start, stop, *inits = loop.operands
        iv, *accs = block.args
        if value is iv:
            return (start,)  # the lanes count from their own start, one step at a time
        k = accs.index(value)
        return start, stop, inits[k], block.terminator.operands[k]  # different trip counts differ too
    if op.opdef.own_result:  # shuffles, atomics: each thread gets its own
        return ALWAYS
    if op.opdef.regions is RegionKind.LOOP:
        start, stop, *inits = op.operands
        k = op.results.index(value)
        return start, stop, inits[k], op.regions[0].terminator.operands[k]
    if op.opdef.regions is RegionKind.BRANCH:
        k = op.results.index(value)
        return (op.operands[0], *(region.terminator.operands[k] for region in op.regions))
    return tuple(op.operands)


def varies(value: Value, seeds: Callable[[Value], bool],
           sources: Mapping[Value, tuple[Value, ...]] | None = None) -> bool:
    """Whether ``value`` may vary, given which values vary from the start (``seeds``)."""
    seen: set[Value] = set()
    todo = [value]
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        if seeds(v):
            return True
        decided_by = inputs(v, sources)
        if decided_by is ALWAYS:
            return True
        todo.extend(decided_by)
    return False


def varying_values(region: Block, seeds: Iterable[Value]) -> set[Value]:
    """Every value of ``region`` (and of the regions inside it) that may vary."""
    varying = set(seeds)
    values = [arg for op in region.walk() for r in op.regions for arg in r.args]
    values += [result for op in region.walk() for result in op.results]
    while True:
        size = len(varying)
        for v in values:
            if v not in varying:
                decided_by = inputs(v)
                if decided_by is ALWAYS or any(x in varying for x in decided_by):
                    varying.add(v)
        if len(varying) == size:
            return varying


def divergent_synchronisation(graph) -> tuple | None:
    """``(loop or branch, barrier or shuffle inside it)`` for the first synchronising op of a
    block launch that sits in a loop whose bounds, or a branch whose condition, may differ
    between the block's threads: not every thread would reach it.  The builder refuses
    these; a graph read from text may hold one."""
    launch = graph.launch_op
    if launch is None or not OPS[launch.opcode].thread_blocks:
        return None
    region = launch.regions[0]
    varying = varying_values(region, region.args[len(launch.operands):])
    for op in region.walk():
        if op.opcode == "if" and op.attrs.kind is IfKind.ROLES:
            continue  # whole warps take each side, whose barriers name their threads
        guards = {"fold": op.operands[:2], "if": op.operands[:1]}.get(op.opcode, ())
        if any(v in varying for v in guards):
            inner = next((o for o in op.walk() if o is not op and OPS[o.opcode].synchronises is not None), None)
            if inner is not None:
                return op, inner
    return None


def refuse_divergent_synchronisation(graph, why: str) -> None:
    """Raise a :class:`~accy.errors.BarrierError` for :func:`divergent_synchronisation`'s
    find; ``why`` says what this backend would do with it."""
    found = divergent_synchronisation(graph)
    if found is None:
        return
    op, inner = found
    at = f" at {inner.location}" if inner.location is not None else ""
    where = "a fold_range whose bounds depend" if op.opcode == "fold" else "an if_ whose condition depends"
    raise BarrierError(f"{inner.opcode}{at} inside {where} on the thread: not every thread of the block would "
                       f"reach it ({why})")


__all__ = ["ALWAYS", "inputs", "varies", "varying_values", "divergent_synchronisation",
           "refuse_divergent_synchronisation"]
