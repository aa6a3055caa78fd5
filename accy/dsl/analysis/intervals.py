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
_INF = float("inf")  # an interval's unknown end, while the rules compute


def _ok(lo, hi) -> Interval:
    if lo is None or hi is None or abs(lo) > _LIMIT or abs(hi) > _LIMIT:
        return _UNKNOWN
    return lo, hi


# -- the rules: one per index op, over any domain of bounds ------------------------------------
# A domain computes with bounds: Python ints here (before anything runs), LLVM values in the
# host's launch proof (accy.codegen.host.launch_proof, once per launch).  It offers add, sub,
# mul, min, max (of a list), floor_div by a positive constant and const; a rule returns
# the (lo, hi) of its op's result from its operands' (lo, hi), or None where it knows nothing.


def _add(d, x, y):
    return d.add(x[0], y[0]), d.add(x[1], y[1])


def _sub(d, x, y):
    return d.sub(x[0], y[1]), d.sub(x[1], y[0])


def _mul(d, x, y):
    corners = [d.mul(p, q) for p in x for q in y]
    return d.min(corners), d.max(corners)


def _min(d, x, y):
    return d.min([x[0], y[0]]), d.min([x[1], y[1]])


def _max(d, x, y):
    return d.max([x[0], y[0]]), d.max([x[1], y[1]])


def _select(d, cond, x, y):  # either side: their union
    return d.min([x[0], y[0]]), d.max([x[1], y[1]])


RULES = {"add": _add, "sub": _sub, "mul": _mul, "min": _min, "max": _max, "select": _select}
# x // c and x % c, for a constant c > 0 (floor division, Python's remainder)
BY_CONSTANT = {"div": lambda d, x, c: (d.floor_div(x[0], c), d.floor_div(x[1], c)),
               "mod": lambda d, x, c: (d.const(0), d.const(c - 1))}


class _Ints:
    """The domain of :func:`index_ranges`: exact ints, with -inf for an unknown low bound and
    +inf for an unknown high one (an interval's unknown end)."""

    const = staticmethod(lambda c: c)
    add = staticmethod(lambda x, y: x + y)
    sub = staticmethod(lambda x, y: x - y)
    min = staticmethod(min)
    max = staticmethod(max)

    @staticmethod
    def mul(x, y):
        return 0 if 0 in (x, y) else x * y  # the values are finite: 0 times any of them is 0

    @staticmethod
    def floor_div(x, c):
        return x if x in (_INF, -_INF) else x // c

_INTS = _Ints()
_WRAPS = frozenset({"add", "sub", "mul"})  # the rules whose exact result may wrap at run time


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
                if start[0] is not None and start == (start[0], start[0]) and stop[0] is not None \
                        and stop == (stop[0], stop[0]):  # constant bounds: the last index the steps reach
                    trips = max(0, -(-(stop[0] - start[0]) // step))
                    last = start[0] + (trips - 1) * step
                    self.ranges[region.args[0]] = _ok(min(start[0], last), max(start[0], last)) if trips else _UNKNOWN
                elif step > 0:
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
        name = op.opcode
        if name == "const":
            return op.attrs["value"], op.attrs["value"]
        args = [(-_INF if lo is None else lo, _INF if hi is None else hi) for lo, hi in map(self.of, op.operands)]
        if name in _WRAPS and any(abs(x) == _INF for a in args for x in a):
            return _UNKNOWN  # an unbounded operand may wrap the result past any bound
        if name in RULES:
            lo, hi = RULES[name](_INTS, *args)
        elif name in BY_CONSTANT:
            c, hi_c = args[1]  # a divisor known to be one positive number
            if c != hi_c or not 0 < c < _INF:
                return _UNKNOWN
            lo, hi = BY_CONSTANT[name](_INTS, args[0], c)
        elif name == "shr":  # by a constant count n: floor division by 2**n (an index shifts arithmetically)
            n, hi_n = args[1]
            if n != hi_n or not 0 <= n < 63:
                return _UNKNOWN
            lo, hi = BY_CONSTANT["div"](_INTS, args[0], 2 ** int(n))
        elif name == "and":  # with a non-negative constant mask m: within [0, m]
            masks = [lo for lo, hi in args if lo == hi and lo >= 0]
            return (0, masks[0]) if masks else _UNKNOWN
        else:
            return _UNKNOWN
        if name in _WRAPS and any(abs(x) > _LIMIT for x in (lo, hi) if abs(x) != _INF):
            return _UNKNOWN  # the arithmetic could wrap
        return (None if lo == -_INF else lo), (None if hi == _INF else hi)


def index_ranges(graph: Graph) -> dict[Value, Interval]:
    """The intervals of a graph's index values (those not listed are unbounded)."""
    return _Ranges(graph).ranges


def within(interval: Interval, size: int) -> bool:
    """Every value of ``interval`` indexes an array of ``size`` elements."""
    lo, hi = interval
    return lo is not None and hi is not None and 0 <= lo and hi < size
