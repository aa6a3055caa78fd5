"""Value ranges of index arithmetic: what a lowering can prove about an index before it runs.

``index_ranges(graph)`` gives, for index values (and signed integers: i32 index arithmetic
after :mod:`accy.lowering.narrow_indices`), an interval ``(lo, hi)`` (inclusive; None for
unbounded) that holds in every thread and every loop iteration where the value exists:
thread and block indices lie within their static extents, a loop's variable within its
bounds while the body runs, a loop-carried index within the fixpoint of what its body
yields, and arithmetic follows.  An access whose whole range lies inside a shared array
(whose size is static) needs no run-time check.  Given ``known`` (the exact values of a
launch's run-time scalars, buffer sizes and extents) the intervals hold for that launch.
"""

from __future__ import annotations

from typing import Mapping

from ..ir import Graph, Op, Value, constant_of
from ..ops import RegionKind
from ..types import DType

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
_WRAPS = frozenset({"add", "sub", "mul", "neg", "shl"})  # the rules whose exact result may wrap at run time
_FIXPOINT_PASSES = 8  # a loop's carried indices: passes over its body before they count as unbounded


def _tracked(t) -> bool:
    """Values the rules follow: index and the signed integer types (each wraps at its width)."""
    return isinstance(t, DType) and t.is_int and t.is_signed


def _limits(t: DType) -> tuple[int, int]:
    """Where a value of ``t`` stops being exact: 64-bit types give up well before wrapping."""
    return (-_LIMIT, _LIMIT) if t.bits >= 64 else (t.min, t.max)


def _union(a: Interval, b: Interval) -> Interval:
    if None in a or None in b:
        return _UNKNOWN
    return min(a[0], b[0]), max(a[1], b[1])


class _Ranges:
    def __init__(self, graph: Graph, known: Mapping[Value, int] | None = None):
        self.known = dict(known or {})
        self.ranges: dict[Value, Interval] = {v: (k, k) for v, k in self.known.items()}
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
                extents = [self.exact(e) for e in op.operands]
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
                    # no trip: the body never runs, so any interval holds there
                    self.ranges[region.args[0]] = _ok(min(start[0], last), max(start[0], last)) if trips else start
                elif step > 0:
                    self.ranges[region.args[0]] = _ok(start[0], None if stop[1] is None else stop[1] - 1)
                else:
                    self.ranges[region.args[0]] = _ok(None if stop[0] is None else stop[0] + 1, start[1])
                self.carried(op, launch)
                continue
            for region in op.regions:
                self.walk(region.ops, launch)
            if op.opdef.regions is RegionKind.BRANCH and len(op.regions) == 2:  # either region's yield
                for i, r in enumerate(op.results):
                    if _tracked(r.type):
                        then, other = (region.terminator.operands[i] for region in op.regions)
                        self.ranges[r] = _union(self.of(then), self.of(other))
                continue
            if len(op.results) == 1 and op.result in self.known:
                continue  # a size or a launch extent the caller gave
            if len(op.results) == 1 and _tracked(op.result.type):
                self.ranges[op.result] = self.rule(op)

    def exact(self, v: Value) -> int | None:
        lo, hi = self.of(v)
        return lo if lo is not None and lo == hi else None

    def carried(self, op: Op, launch: Op) -> None:
        """A loop's body, its carried values within what they start at and every trip yields:
        from the inits, widened by the yields, until a pass changes nothing (then the intervals
        hold in every trip) or the passes run out (then they are unbounded)."""
        region = op.regions[0]
        carries = [(arg, init, i) for i, (arg, init) in enumerate(zip(region.args[1:], op.operands[2:]))
                   if _tracked(arg.type)]
        inductions = self.inductions(op, carries)
        carries = [c for c in carries if c[0] not in inductions]
        for arg, (within, after, i) in inductions.items():
            self.ranges[arg] = within
            self.ranges[op.results[i]] = after
        current = {arg: self.of(init) for arg, init, _ in carries}
        for _ in range(_FIXPOINT_PASSES if carries else 0):
            self.ranges.update(current)
            self.walk(region.ops, launch)
            yielded = region.terminator.operands
            grown = {arg: _union(current[arg], self.of(yielded[i])) for arg, _, i in carries}
            if grown == current:
                break
            current = grown
        else:
            current = {arg: _UNKNOWN for arg in current}
        self.ranges.update(current)
        self.walk(region.ops, launch)  # the body's intervals with its carries' final ones
        for arg, _, i in carries:
            self.ranges[op.results[i]] = current[arg]

    def inductions(self, op: Op, carries) -> dict:
        """The carries that add one value from outside the loop each trip (``x + d``, a carried
        offset, a strength-reduced product): bounded by the trips the loop's bounds allow,
        ``init + n * d`` for n below them inside the loop and up to them after it; each
        ``arg -> (inside, after, result index)``."""
        region = op.regions[0]
        (start_lo, start_hi), (stop_lo, stop_hi) = self.of(op.operands[0]), self.of(op.operands[1])
        step = op.attrs.step
        reach = (None if stop_hi is None or start_lo is None else stop_hi - start_lo) if step > 0 else \
            (None if start_hi is None or stop_lo is None else start_hi - stop_lo)
        if reach is None:
            return {}
        trips = max(0, -(-reach // abs(step)))
        inside = set(region.args) | {r for o in region.walk() for r in o.results}
        found = {}
        for arg, init, i in carries:
            grown = region.terminator.operands[i].op
            if grown is None or grown.opcode != "add" or arg not in grown.operands:
                continue
            d = grown.operands[1] if grown.operands[0] is arg else grown.operands[0]
            (d_lo, d_hi), (lo, hi) = self.of(d), self.of(init)
            if d in inside or None in (d_lo, d_hi, lo, hi):
                continue
            reached = lambda n: _ok(lo + min(0, d_lo * n), hi + max(0, d_hi * n))  # noqa: E731
            after = reached(trips)
            low, high = _limits(arg.type)
            if None in after or not low <= after[0] <= after[1] <= high:
                continue  # it may wrap in its type: the fixpoint decides (unbounded)
            found[arg] = (reached(max(trips - 1, 0)), after, i)
        return found

    def rule(self, op: Op) -> Interval:
        name = op.opcode
        if name == "const":
            return op.attrs["value"], op.attrs["value"]
        if name == "shuffle":  # another lane's value (or its own): the value's interval holds in every lane
            return self.of(op.operands[0])
        if name == "setmaxnreg":  # the thread's index passes through
            return self.of(op.operands[0])
        if name == "cast":  # from an integer or bool: its value, where the new type holds all of it
            source = op.operands[0].type
            if not isinstance(source, DType) or not (source.is_int or source.is_bool):
                return _UNKNOWN
            if _tracked(source):
                lo, hi = self.of(op.operands[0])
                if lo is None or hi is None:
                    lo, hi = source.min, source.max
            elif source.bits < 64:  # unsigned or bool (not followed): anywhere in its type
                lo, hi = 0, int(source.max)
            else:
                return _UNKNOWN
            t = op.result.type
            return (lo, hi) if t.min <= lo and hi <= t.max and source.bits <= 64 else _UNKNOWN
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
        elif name == "neg":
            lo, hi = -args[0][1], -args[0][0]
        elif name == "shl":  # by a constant count n: times 2**n
            n, hi_n = args[1]
            if n != hi_n or not 0 <= n < 62:
                return _UNKNOWN
            lo, hi = RULES["mul"](_INTS, args[0], (2 ** int(n), 2 ** int(n)))
        elif name == "shr":  # by a constant count n: floor division by 2**n (an index shifts arithmetically)
            n, hi_n = args[1]
            if n != hi_n or not 0 <= n < 63:
                return _UNKNOWN
            lo, hi = BY_CONSTANT["div"](_INTS, args[0], 2 ** int(n))
        elif name == "and":  # with a non-negative constant mask m: within [0, m]
            masks = [lo for lo, hi in args if lo == hi and lo >= 0]
            return (0, masks[0]) if masks else _UNKNOWN
        elif name in ("or", "xor"):  # of non-negative values: within their bits (a swizzle's unit)
            if any(lo < 0 or hi == _INF for lo, hi in args):
                return _UNKNOWN
            return 0, (1 << int(max(hi for _, hi in args)).bit_length()) - 1
        else:
            return _UNKNOWN
        low, high = _limits(op.result.type)
        if name in _WRAPS and any(not low <= x <= high for x in (lo, hi) if abs(x) != _INF):
            return _UNKNOWN  # the arithmetic could wrap
        return (None if lo == -_INF else lo), (None if hi == _INF else hi)


def index_ranges(graph: Graph, known: Mapping[Value, int] | None = None) -> dict[Value, Interval]:
    """The intervals of a graph's index values (those not listed are unbounded); ``known``
    gives values fixed for one launch (scalar parameters, ``size`` results, launch extents)
    their exact ints."""
    return _Ranges(graph, known).ranges


def within(interval: Interval, size: int) -> bool:
    """Every value of ``interval`` indexes an array of ``size`` elements."""
    lo, hi = interval
    return lo is not None and hi is not None and 0 <= lo and hi < size
