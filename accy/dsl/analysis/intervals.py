"""Value ranges of index arithmetic: what a lowering can prove about an index before it runs.

``index_ranges(graph)`` gives, for index values, an interval ``(lo, hi)`` (inclusive; None
for unbounded) that holds in every thread and every loop iteration where the value
exists: thread and block indices lie within their static extents, a loop's variable
within its bounds while the body runs, and arithmetic follows.  An access whose whole
range lies inside a shared array (whose size is static) needs no run-time check.
"""

from __future__ import annotations

from ..ir import Graph, Op, Value, constant_of
from ..ops import RegionKind

Interval = tuple[int | None, int | None]
_UNKNOWN: Interval = (None, None)
_LIMIT = 2**62  # beyond this, interval arithmetic could wrap: give up


def _ok(lo, hi) -> Interval:
    if lo is None or hi is None or abs(lo) > _LIMIT or abs(hi) > _LIMIT:
        return _UNKNOWN
    return lo, hi


def _combine(a: Interval, b: Interval, fn) -> Interval:
    if None in a or None in b:
        return _UNKNOWN
    corners = [fn(x, y) for x in a for y in b]
    return _ok(min(corners), max(corners))


class _Ranges:
    def __init__(self, graph: Graph):
        self.ranges: dict[Value, Interval] = {}
        launch = graph.launch_op
        if launch is None:
            return
        self.walk(graph.body.ops, launch)

    def of(self, v: Value) -> Interval:
        if v in self.ranges:
            return self.ranges[v]
        c = constant_of(v)
        if isinstance(c, int) and not isinstance(c, bool):
            return c, c
        return _UNKNOWN

    def walk(self, ops, launch: Op) -> None:
        for op in ops:
            if op is launch:
                region = op.regions[0]
                extents = [constant_of(e) for e in op.operands]
                if op.opdef.thread_blocks:
                    extents += [e for _, e in op.attrs.threads]
                for arg, extent in zip(region.args, extents):
                    self.ranges[arg] = (0, extent - 1) if isinstance(extent, int) and extent > 0 else (0, None)
                self.walk(region.ops, launch)
                continue
            if op.opdef.regions is RegionKind.LOOP:
                region = op.regions[0]
                start, stop = self.of(op.operands[0]), self.of(op.operands[1])
                step = op.attrs.step
                if step > 0:
                    self.ranges[region.args[0]] = _ok(start[0], None if stop[1] is None else stop[1] - 1)
                else:
                    self.ranges[region.args[0]] = _ok(None if stop[0] is None else stop[0] + 1, start[1])
                self.walk(region.ops, launch)
                continue
            for region in op.regions:
                self.walk(region.ops, launch)
            if len(op.results) == 1 and op.result.type.is_index:
                self.ranges[op.result] = self.rule(op)

    def rule(self, op: Op) -> Interval:
        args = [self.of(v) for v in op.operands]
        name = op.opcode
        if name == "const":
            return op.attrs["value"], op.attrs["value"]
        if name == "add":
            return _combine(args[0], args[1], lambda x, y: x + y)
        if name == "sub":
            return _combine(args[0], args[1], lambda x, y: x - y)
        if name == "mul":
            return _combine(args[0], args[1], lambda x, y: x * y)
        if name == "max":  # at least either operand's low end; its high end needs both
            (alo, ahi), (blo, bhi) = args
            lo = max(x for x in (alo, blo) if x is not None) if (alo, blo) != (None, None) else None
            return lo, (max(ahi, bhi) if None not in (ahi, bhi) else None)
        if name == "min":  # at most either operand's high end; its low end needs both
            (alo, ahi), (blo, bhi) = args
            hi = min(x for x in (ahi, bhi) if x is not None) if (ahi, bhi) != (None, None) else None
            return (min(alo, blo) if None not in (alo, blo) else None), hi
        if name in ("div", "mod"):
            (lo_b, hi_b) = args[1]
            if lo_b is None or lo_b != hi_b or lo_b <= 0:
                return _UNKNOWN
            if name == "mod":
                return 0, lo_b - 1
            a = args[0]
            return _UNKNOWN if None in a else (a[0] // lo_b, a[1] // lo_b)
        if name == "and":
            masks = [r for r in args if r[0] is not None and r[0] == r[1] and r[0] >= 0]
            return (0, masks[0][0]) if masks else _UNKNOWN
        if name == "select":
            a, b = args[1], args[2]
            return _UNKNOWN if None in a or None in b else (min(a[0], b[0]), max(a[1], b[1]))
        return _UNKNOWN


def index_ranges(graph: Graph) -> dict[Value, Interval]:
    """The intervals of a graph's index values (those not listed are unbounded)."""
    return _Ranges(graph).ranges


def within(interval: Interval, size: int) -> bool:
    """Every value of ``interval`` indexes an array of ``size`` elements."""
    lo, hi = interval
    return lo is not None and hi is not None and 0 <= lo and hi < size
