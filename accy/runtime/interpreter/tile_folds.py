"""The tile interpreter's folds (a :class:`FoldRunner`, a part of :class:`.tiles.TileInterpreter`):
a fold runs trip by trip, or, where its plan allows, every trip at once in chunks (vectorised) and
its terms combined into the carries in trip order; where its trips differ between programs it
runs under an active mask until the longest is done."""

from __future__ import annotations

import math
import weakref

import attrs
import numpy as np

from ... import time_limit
from ...dsl.ir import Block, Graph, Op, Value
from ...dsl.ops import REDUCTIONS, Precision
from ...dsl.types import TileType, element_type
from ...errors import ExecutionError, OutOfBoundsError
from . import numerics
from .pointwise import EVAL, WIDE
from .shared import divergent_fold
from .simt_control import uses
from .tile_memory import _WRITES, _compact
from .tile_numerics import round_to_tf32

# ----------------------------------------------------------------------------- folds run for all trips at once
#
# A fold whose carried values are each only combined with a term of the trip (``dot(a, b, acc)``,
# ``acc + x``, max, min, ...), in a body that writes no memory, runs its body once for a chunk of
# trips: each (trip, program) pair is a program of its own (numbered trip-major, so the first
# failing pair is the first failing program of the first failing trip), and the terms are then
# combined into the carries in trip order.


@attrs.frozen
class _Combine:
    """How one carried value takes its trip's term: by ``op`` (a dot: acc + terms[0] @ terms[1];
    else ``fn(acc, terms[0])``, or ``fn(terms[0], acc)`` where the carry is the second operand)."""

    op: Op
    terms: tuple[Value, ...]
    fn: object  # elementwise: the EVAL entry (its plain function where the type is wider than f16/bf16)
    carry_first: bool


@attrs.frozen
class _FoldPlan:
    """A fold that may run all its trips at once (see above)."""

    combines: tuple[_Combine, ...]  # one per carried value
    skipped: frozenset[Op]  # the combining ops: applied after the body, not in it
    captured: tuple[Value, ...]  # outer values the body reads: repeated for every trip
    defined: frozenset[Value]  # the values the body defines (nested regions' too)
    trip_bytes: int  # the bytes one trip of one program holds, views and unevaluated values aside (sizes chunks)


# A chunk's temporaries stay near a cache's size whatever the memory cap: trips whose data is larger
# than that already spend far longer in NumPy than in Python (a layer norm's row sweeps), and running
# them at once only adds memory traffic and page faults.
_CHUNK_BYTES = 16 * 2**20
_COMBINING = frozenset(REDUCTIONS.values())


def _bytes(value: Value) -> int:
    t = value.type
    if isinstance(t, TileType):
        return math.prod(t.shape) * element_type(t).numpy.itemsize
    return element_type(t).numpy.itemsize


_VIEWS = frozenset({"arange", "splat", "broadcast", "reshape", "trans"})


def _held(op: Op) -> bool:
    """Whether the tile interpreter holds ``op``'s result as a view of another value or unevaluated
    (tile_memory's Affine, Sum, Select, Conjunction: index tiles and the masks made of them, read
    so by the accesses), or as its operand itself (a cast to its own type): no memory of its own."""
    if op.opcode in _VIEWS:
        return True
    if len(op.results) != 1 or not isinstance(op.result.type, TileType):
        return False
    if op.opcode == "cast":
        return op.operands[0].type == op.result.type
    dtype = op.result.type.dtype
    if op.opcode in ("add", "sub", "select"):
        return dtype.is_index
    return (op.opcode == "eq" and op.operands[0].type.dtype.is_index) or (op.opcode == "and" and dtype.is_bool)


def _fold_plan(op: Op) -> _FoldPlan | None:
    """The plan for running fold ``op``'s trips at once, or None where it must loop: its body
    writes memory, or a carried value is read by anything but the one op combining it with a
    term, or that op's result by anything but the yield."""
    (region,) = op.regions
    ops = list(region.walk())
    carries = region.args[1:]
    if not carries or any(inner.opcode in _WRITES for inner in ops):
        return None
    defined = set(region.args)
    for inner in ops:
        defined.update(inner.results)
        defined.update(a for nested in inner.regions for a in nested.args)
    readers: dict[Value, list[Op]] = {}
    for inner in ops:
        for v in inner.operands:
            readers.setdefault(v, []).append(inner)
    terminator = region.terminator
    combines = []
    for carry, y in zip(carries, terminator.operands):
        owner = y.op
        if owner is None or owner.block is not region or readers.get(carry) != [owner] or readers.get(y) != [
                terminator] or terminator.operands.count(y) != 1:
            return None
        if owner.opcode == "dot":
            a, b, acc = owner.operands
            if acc is not carry or carry in (a, b):
                return None
            combines.append(_Combine(owner, (a, b), None, True))
        elif owner.opcode in _COMBINING and len(owner.operands) == 2 and owner.operands.count(carry) == 1:
            first = owner.operands[0] is carry
            fn = EVAL[owner.opcode]
            if not numerics._narrow(element_type(carry.type).numpy):
                fn = WIDE.get(fn, fn)  # a ufunc then combines in place
            combines.append(_Combine(owner, (owner.operands[1 if first else 0],), fn, first))
        else:
            return None
    trip_bytes = 8  # the trip's index
    for inner in ops:
        if not _held(inner):
            trip_bytes += sum(_bytes(r) for r in inner.results)
        if inner.opcode == "dot":  # its inputs converted to the accumulator's type
            item = element_type(inner.result.type).numpy.itemsize
            trip_bytes += sum(math.prod(v.type.shape) * item for v in inner.operands[:2])
    captured = tuple(sorted(uses(region) - defined, key=id))
    return _FoldPlan(tuple(combines), frozenset(c.op for c in combines), captured, frozenset(defined), trip_bytes)


_fold_plans: "weakref.WeakKeyDictionary[Graph, dict]" = weakref.WeakKeyDictionary()


def _fold_plans_of(graph: Graph) -> dict[Op, _FoldPlan]:
    plans = _fold_plans.get(graph)
    if plans is None:
        plans = {op: plan for op in graph.body.walk() if op.opcode == "fold" and (plan := _fold_plan(op)) is not None}
        _fold_plans[graph] = plans
    return plans


def _repeated(x, trips: int, programs: int):
    """A value of every program as the value of every (trip, program) pair, trip-major (values
    the same in every program, and broadcast axes, stay as compact as they were)."""
    if np.ndim(x) == 0 or np.shape(x)[0] != programs or programs == 1:
        return x
    compact = _compact(np.asarray(x))
    shape = (trips * programs,) + np.shape(x)[1:]
    if compact.shape[0] == 1:
        return np.broadcast_to(compact, shape)
    tiled = np.broadcast_to(compact, (trips,) + compact.shape).reshape((trips * programs,) + compact.shape[1:])
    return np.broadcast_to(tiled, shape)


@attrs.define
class FoldCounts:
    """How many folds ran each way since the last reset (tests read it to see that a fold took
    the path meant for it): ``vectorised`` (every trip at once, in chunks), ``looped`` (trip by
    trip, the same trips in every program), ``divergent`` (trips that differ between programs,
    under an active mask) and ``rerun`` (vectorised ones that raised, run again trip by trip so
    that the error is the one a loop meets first)."""

    vectorised: int = 0
    looped: int = 0
    divergent: int = 0
    rerun: int = 0

    def reset(self) -> None:
        self.vectorised = self.looped = self.divergent = self.rerun = 0


fold_counts = FoldCounts()
_ABSENT = object()


class FoldRunner:
    """The folds of ``interpreter``'s launch: looped, vectorised (every trip at once) or divergent
    (under an active mask); ``plans``: the folds that may run vectorised, how."""

    def __init__(self, interpreter, plans: dict[Op, _FoldPlan], memory_cap: int):
        self.interpreter = interpreter
        self.plans = plans
        self.memory_cap = memory_cap  # bytes of temporaries a vectorised fold's chunk may hold

    def _iterate(self, region: Block, i, accs) -> list:
        run = self.interpreter
        env = run.env
        env[region.args[0]] = i
        for a, v in zip(region.args[1:], accs):
            env[a] = v
        return run.region_values(region)

    def op_fold(self, op: Op) -> None:
        run = self.interpreter
        start, stop, *accs = (run.env[v] for v in op.operands)
        step = op.attrs["step"]
        (region,) = op.regions
        if np.ndim(start) == 0 and np.ndim(stop) == 0:  # the same trips in every program
            trips = range(int(start), int(stop), step)
            plan = self.plans.get(op)
            budget = min(self.memory_cap, _CHUNK_BYTES)
            chunk = 0 if plan is None else min(len(trips), budget // max(1, run.programs * plan.trip_bytes))
            if chunk >= 2:  # chunks of one size (two of 32 trips, not 62 and 2)
                chunk = -(-len(trips) // -(-len(trips) // chunk))
            if chunk >= 2:
                fold_counts.vectorised += 1
                accs = self._vectorised_fold(trips, chunk, region, plan, accs)
            else:
                fold_counts.looped += 1
                accs = self._looped(trips, region, accs)
        else:  # until the longest is done; a program that is done keeps its values and does nothing
            fold_counts.divergent += 1
            accs = divergent_fold(run, start, stop, step, lambda i, a: self._iterate(region, i, a), accs, run.merge)
        for r, value in zip(op.results, accs):
            run.env[r] = value

    def _looped(self, trips: range, region: Block, accs) -> list:
        for i in trips:
            accs = self._iterate(region, np.int64(i), accs)
        return accs

    def _vectorised_fold(self, trips: range, chunk: int, region: Block, plan: _FoldPlan, accs) -> list:
        """The fold's trips ``chunk`` at a time, each chunk's terms combined in trip order.  A
        chunk that raises runs again trip by trip from its start (its body writes nothing): the
        error is then the one the first failing trip meets first, as a loop raises it."""
        run = self.interpreter
        accs = list(accs)
        for first in range(0, len(trips), chunk):
            time_limit.check()  # a run past its limit stops between two chunks
            part = trips[first:first + chunk]
            try:
                terms = self._all_trips(region, plan, part)
            except (OutOfBoundsError, ExecutionError):
                fold_counts.rerun += 1
                for v in plan.defined:
                    run.env.pop(v, None)
                    run.lazy.pop(v, None)
                return self._looped(trips[first:], region, accs)
            accs = [self._combined(c, acc, t, len(part)) for c, acc, t in zip(plan.combines, accs, terms)]
        return accs

    def _all_trips(self, region: Block, plan: _FoldPlan, part: range) -> list:
        """Run the body once for every trip of ``part``: each combine's terms, (trip, program) first."""
        run = self.interpreter
        env, lazy, handlers = run.env, run.lazy, run.handlers
        programs, active, trips = run.programs, run.active, len(part)
        saved = []
        if programs > 1:
            for v in plan.captured:
                held, value = lazy.get(v), dict.get(env, v, _ABSENT)
                saved.append((v, held, value))
                env.pop(v, None)
                if held is not None:
                    lazy[v] = held.per_program(lambda x: _repeated(x, trips, programs))
                elif value is not _ABSENT:
                    env[v] = _repeated(value, trips, programs)
            if active is not None:
                run.active = np.tile(active, trips)
        run.programs = trips * programs
        try:
            env[region.args[0]] = np.repeat(np.arange(part.start, part.stop, part.step, dtype=np.int64), programs)
            for op, handler, fn, result, dead in run.steps[region]:
                if op in plan.skipped:  # its dead values are the terms: read below
                    continue
                if handler is None:
                    env[result] = fn(*[env[v] for v in op.operands])
                else:
                    handlers[handler](op)
                for v in dead:
                    env.pop(v, None)
                    lazy.pop(v, None)
            return [[env[t] for t in c.terms] for c in plan.combines]
        finally:
            run.programs, run.active = programs, active
            for v, held, value in saved:
                env.pop(v, None)
                lazy.pop(v, None)
                if held is not None:
                    lazy[v] = held
                if value is not _ABSENT:
                    env[v] = value
            for c in plan.combines:
                for t in c.terms:
                    if t in plan.defined:
                        env.pop(t, None)
                        lazy.pop(t, None)

    def _per_trip(self, term, trips: int):
        """A term as (trips, ...): its rows per (trip, program) pair, or the same every trip."""
        run = self.interpreter
        pairs = trips * run.programs
        if np.ndim(term) and np.shape(term)[0] == pairs and pairs > 1:
            return np.reshape(term, (trips, run.programs) + np.shape(term)[1:])
        return np.broadcast_to(term, (trips,) + np.shape(term))

    def _combined(self, combine: _Combine, acc, terms, trips: int):
        """``acc`` with every trip's term combined into it, in trip order (float sums round as a loop's)."""
        if combine.op.opcode == "dot":
            a, b = terms
            c = np.asarray(acc).dtype
            if combine.op.attrs.precision is Precision.TF32:
                a, b = round_to_tf32(a), round_to_tf32(b)
            a, b = a.astype(c, copy=False), b.astype(c, copy=False)
            shape = (a.shape[1], b.shape[2])
            if a.shape[0] == 1 and b.shape[0] == 1:  # the same product every trip, in every program
                total = np.array(np.broadcast_to(acc, np.shape(acc)), c)
                product = a[0] @ b[0]
                for _ in range(trips):
                    np.add(total, product, out=total)
                return total
            # a product per (trip, program) pair, trip by trip into one buffer (a fresh array of every
            # trip's products costs more in page faults than the products); integers wrap in i32
            a, b = self._per_trip(a, trips), self._per_trip(b, trips)
            lead = max(a.shape[1], b.shape[1])
            total = np.array(np.broadcast_to(acc, np.broadcast_shapes(np.shape(acc), (lead,) + shape)), c)
            product = np.empty((lead,) + shape, c)
            for x, y in zip(a, b):
                np.matmul(x, y, out=product)
                np.add(total, product, out=total)
            return total
        (term,) = terms
        per = self._per_trip(term, trips)
        dtype = np.asarray(acc).dtype
        total = np.array(np.broadcast_to(acc, np.broadcast_shapes(np.shape(acc), per.shape[1:])), dtype)
        fn, first = combine.fn, combine.carry_first
        if isinstance(fn, np.ufunc):  # in place: no fresh array per trip
            for t in per:
                fn(total, t, out=total) if first else fn(t, total, out=total)
        else:
            for t in per:
                total = np.asarray(fn(total, t) if first else fn(t, total)).astype(dtype, copy=False)
        return total if total.ndim else total[()]
