"""The NumPy interpreter: the reference semantics of every accy op.

The graph runs once for all logical threads at the same time, and each SSA value
is evaluated only over the axes it depends on.  A launch's axis indices are
NumPy arrays shaped to broadcast against each other (for a 3-D launch ``x`` has
shape ``(1, 1, nx)``, ``y`` ``(1, ny, 1)``, ``z`` ``(nz, 1, 1)``), so a value that
depends on ``b`` and ``q`` but not on ``v`` is computed once per ``(b, q)`` and
broadcast: NumPy's broadcasting *is* the dependence analysis.  A launch costs a
number of NumPy calls proportional to the ops executed, never to the thread count.

Folds run in one of three ways:

* **vectorised**: when the bounds are the same for every thread, the body stores
  nothing, and each loop-carried value is combined with ``add``, ``max`` or
  ``min`` from a term that does not depend on any of them, every iteration is
  evaluated at once along a new leading axis, in chunks that keep the
  temporaries under a memory cap, and folded in iteration order
  (one in-place NumPy call per iteration, so float sums round exactly as a
  sequential loop does);
* **uniform**: otherwise, with the same bounds everywhere, a Python loop over
  the iterations, each evaluated for all threads;
* **divergent**: bounds that differ between threads run until the longest thread
  is done, with an *active mask*; loads and stores touch active lanes only.

Outputs are written to scratch copies and copied back only when the whole
launch succeeded, so a failing launch leaves every argument untouched.
"""

from __future__ import annotations

import math
import os
import weakref

import attrs
import numpy as np

from ..dsl.ir import Block, Graph, Op
from ..dsl.types import INDEX_MAX, INDEX_MIN
from .arguments import Binding
from ..errors import RaceError, UnwrittenOutputError
from .diagnostics import division_by_zero, out_of_bounds, thread_text

DEFAULT_MEMORY_CAP = 256 * 2**20  # bytes of temporaries a vectorised fold may hold


def _saturating_to_index(x):
    x = np.nan_to_num(np.asarray(x, dtype=np.float64), nan=0.0)
    # float64(INDEX_MAX) rounds up to 2**63: clip below it, then fix the top end
    high = x >= 2.0**63
    out = np.clip(x, -(2.0**63), np.nextafter(2.0**63, 0)).astype(np.int64)
    return np.where(high, np.int64(INDEX_MAX), out)


def _cast(x, dtype):
    if dtype.is_int and np.asarray(x).dtype.kind == "f":
        return _saturating_to_index(np.trunc(x))
    return np.asarray(x).astype(dtype.numpy)


def _ieee_extremum(pick, zero_sign):
    """IEEE 754-2019 maximum/minimum, as LLVM's llvm.maximum/llvm.minimum: NaN
    propagates and -0.0 < +0.0 (NumPy's maximum returns its second operand on ties,
    so max(+0.0, -0.0) would be -0.0 and max would not even be commutative)."""
    def extremum(a, b):
        result = pick(a, b)
        if np.asarray(result).dtype.kind != "f":
            return result
        ties = (np.asarray(a) == 0) & (np.asarray(b) == 0)
        if not np.any(ties):
            return result
        chosen = zero_sign(np.signbit(a), np.signbit(b))  # True: the result is -0.0
        return np.where(ties, np.where(chosen, -0.0, 0.0).astype(np.asarray(result).dtype), result)

    return extremum


# One entry per op: NumPy arrays in, NumPy array out (float32 stays float32).
EVAL = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "max": _ieee_extremum(np.maximum, np.logical_and),  # -0 only if both are -0
    "min": _ieee_extremum(np.minimum, np.logical_or),  # -0 if either is -0
    "neg": np.negative,
    "exp": np.exp,
    "sqrt": np.sqrt,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "eq": np.equal,
    "ne": np.not_equal,
    "and": np.logical_and,
    "or": np.logical_or,
    "not": np.logical_not,
    "select": np.where,
}

# combines a vectorised fold can apply to all iterations at once
_COMBINES = {"add": np.add, "max": EVAL["max"], "min": EVAL["min"]}


# ----------------------------------------------------------------------------- fold plans


@attrs.frozen
class _FoldPlan:
    """How to run one fold op: ``combines`` is None unless it can be vectorised;
    then entry j says how accumulator j takes its term (the other operand)."""

    combines: tuple[tuple[object, int], ...] | None  # (combine function, id of the term value)
    combine_ops: frozenset[int]  # the combining ops themselves: applied after, not in, the body
    local_terms: frozenset[int]  # the terms the body itself defines (dead once folded)
    body_ops: int  # ops in the body, nested regions included (sizes chunks)
    captured: tuple[int, ...]  # ids of the outer values the body reads (bound its shapes)


def _uses(block: Block) -> set[int]:
    """Ids of every value an op in ``block`` (or below) reads."""
    return {id(v) for op in block.walk() for v in op.operands}


def _plan(op: Op) -> _FoldPlan:
    (region,) = op.regions
    body_ops = sum(1 for _ in region.walk())
    defined = {id(a) for a in region.args}
    for inner in region.walk():
        defined.update(id(r) for r in inner.results)
        defined.update(id(a) for nested in inner.regions for a in nested.args)
    captured = tuple(sorted(_uses(region) - defined))
    if any(inner.opcode == "store" for inner in region.walk()):
        return _FoldPlan(None, frozenset(), frozenset(), body_ops, captured)
    accs = {id(a) for a in region.args[1:]}
    tainted = set(accs)  # values that depend on a loop-carried value
    for inner in region.ops:
        reads = {id(v) for v in inner.operands}
        for nested in inner.regions:
            reads |= _uses(nested)
        if reads & tainted:
            tainted.update(id(r) for r in inner.results)
    combines, combine_ops = [], set()
    for acc, y in zip(region.args[1:], region.terminator.operands):
        owner = y.owner
        if not isinstance(owner, Op) or owner.opcode not in _COMBINES or owner.block is not region:
            return _FoldPlan(None, frozenset(), frozenset(), body_ops, captured)
        a, b = owner.operands
        term = b if a is acc else a if b is acc else None
        if term is None or id(term) in tainted:
            return _FoldPlan(None, frozenset(), frozenset(), body_ops, captured)
        combines.append((_COMBINES[owner.opcode], id(term)))
        combine_ops.add(id(owner))
    local = frozenset(t for _, t in combines if t in defined)  # not from outside the body
    return _FoldPlan(tuple(combines), frozenset(combine_ops), local, body_ops, captured)


def _last_uses(block: Block, keep: frozenset[int] = frozenset()) -> dict[int, tuple[int, ...]]:
    """For each op of ``block``: the values defined in the block that are dead after it.

    Freeing them at once keeps few large temporaries alive, and NumPy can then
    reuse their memory instead of faulting in fresh pages for every op.  Values a
    ``yield`` hands back stay, and so do those in ``keep`` (a vectorised fold's
    terms): the fold reads them after the body has run.
    """
    last: dict[int, int] = {}
    for n, op in enumerate(block.ops):
        reads = {id(v) for v in op.operands}
        for nested in op.regions:
            reads |= _uses(nested)
        for v in reads:
            last[v] = n
        for r in op.results:
            last.setdefault(id(r), n)  # never used: dead at once
    kept = set(keep) | ({id(v) for v in block.terminator.operands} if block.terminator is not None else set())
    defined = {id(r) for op in block.ops for r in op.results}
    frees: dict[int, list[int]] = {}
    for v, n in last.items():
        if v in defined and v not in kept:
            frees.setdefault(id(block.ops[n]), []).append(v)
    return {op_id: tuple(vs) for op_id, vs in frees.items()}


@attrs.frozen
class _Schedule:
    """What the interpreter precomputes once per graph."""

    plans: dict[int, _FoldPlan]  # per fold op
    frees: dict[int, tuple[int, ...]]  # per op: values dead after it


_schedules: "weakref.WeakKeyDictionary[Graph, _Schedule]" = weakref.WeakKeyDictionary()


def schedule_of(graph: Graph) -> _Schedule:
    schedule = _schedules.get(graph)
    if schedule is None:
        plans = {id(op): _plan(op) for op in graph.body.walk() if op.opcode == "fold"}
        frees = _last_uses(graph.body)
        for op in graph.body.walk():
            plan = plans.get(id(op))
            terms = frozenset(t for _, t in plan.combines) if plan and plan.combines else frozenset()
            for region in op.regions:
                frees.update(_last_uses(region, terms))
        schedule = _schedules[graph] = _Schedule(plans, frees)
    return schedule


# ----------------------------------------------------------------------------- execution


def _scalar(value, dtype):
    return dtype.numpy.type(value)


class _Launch:
    """State of one launch: buffers, the logical grid, and the active-lane mask."""

    def __init__(self, graph: Graph, buffers: dict[str, np.ndarray], memory_cap: int):
        self.graph = graph
        self.buffers = buffers
        self.env: dict[int, object] = {}
        self.active = None  # None: every lane is active; else a bool array
        self.axes = ()
        self.grid = ()  # the launch's shape, outermost axis first: (nz, ny, nx)
        schedule = schedule_of(graph)
        self.plans, self.frees = schedule.plans, schedule.frees
        self.memory_cap = memory_cap
        self.leading = 0  # iteration axes of enclosing vectorised folds, in front of the grid's
        self.writers = None  # memory checks: buffer -> lane that wrote each element (-1: none)

    # -- errors name one logical thread ------------------------------------------
    def _first_bad(self, bad, idx):
        """(lane, offending index) of the first active lane where ``bad``, or None."""
        if self.active is not None:
            bad = bad & self.active
        if not np.any(bad):
            return None
        rank = max(np.ndim(bad), np.ndim(idx), len(self.grid))
        shape = np.broadcast_shapes(np.shape(bad), np.shape(idx), (1,) * (rank - len(self.grid)) + self.grid)
        position = np.unravel_index(int(np.argmax(np.broadcast_to(bad, shape))), shape)
        lane = int(np.ravel_multi_index(position[rank - len(self.grid):], self.grid)) if self.grid else 0
        return lane, int(np.broadcast_to(idx, shape)[position])

    # -- evaluation ------------------------------------------------------------
    def run_block(self, block: Block, skip: frozenset[int] = frozenset()) -> None:
        env, frees = self.env, self.frees
        for op in block.ops:
            if id(op) in skip:
                continue  # and so are its frees: the caller still reads its operands
            handler = _SPECIAL.get(op.opcode)
            if handler is not None:
                handler(self, op)
            else:
                env[id(op.results[0])] = EVAL[op.opcode](*[env[id(v)] for v in op.operands])
            for v in frees.get(id(op), ()):
                del env[v]

    def const(self, op: Op) -> None:
        self.env[id(op.result)] = _scalar(op.attrs["value"], op.attrs["dtype"])

    def div(self, op: Op) -> None:
        a, b = (self.env[id(v)] for v in op.operands)
        if op.result.type.is_int:
            zero = np.asarray(b) == 0
            bad = self._first_bad(zero, b)
            if bad is not None:
                raise division_by_zero(op, thread_text(self.axes, bad[0]))
            self.env[id(op.result)] = np.floor_divide(a, np.where(zero, 1, b))  # inactive lanes only
        else:
            self.env[id(op.result)] = np.divide(a, b)

    def cast(self, op: Op) -> None:
        self.env[id(op.result)] = _cast(self.env[id(op.operands[0])], op.attrs["dtype"])

    def _checked_index(self, op: Op, idx):
        size = self.buffers[op.attrs["buffer"]].size
        idx = np.asarray(idx)
        outside = (idx < 0) | (idx >= size)
        bad = self._first_bad(outside, idx)
        if bad is not None:
            raise out_of_bounds(op, bad[1], size, thread_text(self.axes, bad[0]))
        if np.any(outside):  # only lanes that are inactive: point them somewhere harmless
            idx = np.where(outside, 0, idx)
        return idx

    def load(self, op: Op) -> None:
        buffer = self.buffers[op.attrs["buffer"]]
        idx = self._checked_index(op, self.env[id(op.operands[0])])
        if buffer.size == 0:  # only inactive lanes reach here: give them zeros
            self.env[id(op.result)] = np.zeros(np.shape(idx), buffer.dtype)
        else:
            self.env[id(op.result)] = buffer[idx]

    def store(self, op: Op) -> None:
        buffer = self.buffers[op.attrs["buffer"]]
        idx, value = (self.env[id(v)] for v in op.operands)
        idx = self._checked_index(op, idx)
        arrays = [idx, np.asarray(value, buffer.dtype), np.empty(self.grid, bool)]
        if self.active is not None:
            arrays.append(self.active)
        shape = np.broadcast_shapes(*(np.shape(a) for a in arrays))
        idx, value = (a.reshape(-1) for a in np.broadcast_arrays(*arrays)[:2])
        keep = None
        if self.active is not None:
            keep = np.broadcast_to(self.active, shape).reshape(-1)
            idx, value = idx[keep], value[keep]
        if self.writers is not None and op.attrs["buffer"] in self.writers:
            lanes = np.broadcast_to(np.arange(math.prod(self.grid)).reshape(self.grid), shape).reshape(-1)
            self._record_writes(op, idx, lanes[keep] if self.active is not None else lanes)
        buffer[idx] = value  # a repeated index keeps the highest lane's value, as on the host

    def _record_writes(self, op: Op, idx, lanes) -> None:
        """Memory checks: which lane wrote each element; two lanes on one element is a race."""
        name = op.attrs["buffer"]
        writer = self.writers[name]
        order = np.lexsort((lanes, idx))
        idx, lanes = idx[order], lanes[order]
        same = (idx[1:] == idx[:-1]) & (lanes[1:] != lanes[:-1])  # within this store
        before = writer[idx]
        earlier = (before >= 0) & (before != lanes)  # against earlier stores
        clash = np.flatnonzero(earlier)
        if same.any() or clash.size:
            if same.any():
                k = int(np.flatnonzero(same)[0])
                element, first, second = int(idx[k]), int(lanes[k]), int(lanes[k + 1])
            else:
                k = int(clash[0])
                element, first, second = int(idx[k]), int(before[k]), int(lanes[k])
            raise RaceError(
                f"race on '{name}'[{element}]: written by thread {thread_text(self.axes, first)} and by thread "
                f"{thread_text(self.axes, second)} in one launch{_at(op)}"
            )
        writer[idx] = lanes

    def for_each(self, op: Op) -> None:
        self.axes = op.attrs["axes"]
        self.grid = tuple(a.extent for a in reversed(self.axes))
        if math.prod(self.grid) == 0:
            return
        (block,) = op.regions
        rank = len(self.axes)
        for i, (arg, axis) in enumerate(zip(block.args, self.axes)):
            shape = [1] * rank
            shape[rank - 1 - i] = axis.extent
            self.env[id(arg)] = np.arange(axis.extent, dtype=np.int64).reshape(shape)
        self.run_block(block)

    # -- folds -------------------------------------------------------------------
    def fold(self, op: Op) -> None:
        start, stop, *inits = (self.env[id(v)] for v in op.operands)
        step = op.attrs["step"]
        (region,) = op.regions
        uniform = np.ndim(start) == 0 and np.ndim(stop) == 0
        plan = self.plans[id(op)]
        if uniform and plan.combines is not None:
            results = self._vectorised_fold(range(int(start), int(stop), step), region, plan, inits)
        elif uniform:
            results = self._uniform_fold(range(int(start), int(stop), step), region, inits)
        else:
            results = self._divergent_fold(start, stop, step, region, inits)
        for r, value in zip(op.results, results):
            self.env[id(r)] = value

    def _iterate(self, region: Block, i, accs_values, skip: frozenset[int] = frozenset()):
        env = self.env
        env[id(region.args[0])] = i
        for a, v in zip(region.args[1:], accs_values):
            env[id(a)] = v
        self.run_block(region, skip)
        return None if skip else [env[id(y)] for y in region.terminator.operands]

    def _uniform_fold(self, trips: range, region: Block, accs):
        for i in trips:
            accs = self._iterate(region, np.int64(i), accs)
        return accs

    def _vectorised_fold(self, trips: range, region: Block, plan: _FoldPlan, accs):
        if not trips:
            return accs
        rank = self.leading + len(self.grid)  # the iteration axis goes in front of all current ones
        # every value in the body broadcasts to at most the shape of what it reads from outside
        bound = np.broadcast_shapes(*(np.shape(self.env[c]) for c in plan.captured), *(np.shape(a) for a in accs))
        per_iteration = 8 * max(plan.body_ops, 1) * max(math.prod(bound), 1)
        chunk = max(1, min(len(trips), self.memory_cap // per_iteration))
        accs = list(accs)
        self.leading += 1
        try:
            for first in range(0, len(trips), chunk):
                part = trips[first:first + chunk]
                i = np.arange(part.start, part.stop, part.step, dtype=np.int64).reshape((len(part),) + (1,) * rank)
                self._iterate(region, i, accs, plan.combine_ops)
                for j, ((combine, term), acc) in enumerate(zip(plan.combines, accs)):
                    terms = self.env[term]
                    shape = np.broadcast_shapes((len(part),) + (1,) * rank, np.shape(terms), np.shape(acc))
                    total = np.array(np.broadcast_to(acc, shape[1:]))
                    for t in np.broadcast_to(terms, shape):  # in iteration order: rounds as a loop does
                        if type(combine) is np.ufunc:
                            combine(total, t, out=total)
                        else:
                            total = combine(total, t)
                    accs[j] = total
                for t in plan.local_terms:  # dead once folded: free them before the next chunk
                    del self.env[t]
        finally:
            self.leading -= 1
        return accs

    def _divergent_fold(self, start, stop, step, region: Block, accs):
        outer = self.active
        i = np.asarray(start, np.int64) + np.zeros(np.shape(stop), np.int64)
        try:
            while True:
                inside = (i < stop) if step > 0 else (i > stop)
                active = inside if outer is None else (inside & outer)
                if not np.any(active):
                    break
                self.active = active
                new = self._iterate(region, i, accs)
                accs = [np.where(active, v, a) for v, a in zip(new, accs)]
                i = np.where(active, _step_without_wrap(i, step), i)
        finally:
            self.active = outer
        return accs


def _step_without_wrap(i, step: int):
    """``i + step``, saturating where it would wrap, so a loop ending near the
    edge of the index range stops instead of starting over."""
    nxt = i + np.int64(step)
    wrapped = (nxt < i) if step > 0 else (nxt > i)
    return np.where(wrapped, np.int64(INDEX_MAX if step > 0 else INDEX_MIN), nxt)


_SPECIAL = {
    "const": _Launch.const,
    "div": _Launch.div,
    "cast": _Launch.cast,
    "load": _Launch.load,
    "store": _Launch.store,
    "fold": _Launch.fold,
    "for_each": _Launch.for_each,
    "yield": lambda launch, op: None,
}


def _at(op: Op) -> str:
    return f" at {op.location}" if op.location is not None else ""


def check_memory_default() -> bool:
    """``ACCY_CHECK_MEMORY=1`` turns the interpreter's memory checks on (the test suite does)."""
    return os.environ.get("ACCY_CHECK_MEMORY", "0").lower() not in ("0", "", "false", "no", "off")


def _poison(dtype) -> object:
    return np.nan if dtype.kind == "f" else np.iinfo(dtype).min


def run_graph(graph: Graph, binding: Binding, *, memory_cap: int = DEFAULT_MEMORY_CAP,
              check_memory: bool | None = None, debug_thread=None, debug_cap: int = 2000):
    """Execute ``graph`` on checked arguments; outputs are written only on success.

    ``check_memory`` poisons write-only outputs (NaN, or the most negative index)
    before the launch and raises :class:`~accy.errors.UnwrittenOutputError` for
    elements no thread wrote and :class:`~accy.errors.RaceError` when two threads
    write one element.  ``debug_thread={"b": 1, ...}`` also records every op's
    value for that one logical thread and returns the :class:`ThreadTrace`.
    """
    check = check_memory_default() if check_memory is None else check_memory
    if debug_thread is not None:
        from .debug import check_thread

        check_thread(graph, debug_thread)
        before = {name: a.copy() for name, a in binding.flat.items()}  # the replay starts from here
    scratch = {name: (a.copy() if name in binding.outputs else a) for name, a in binding.flat.items()}
    launch = _Launch(graph, scratch, memory_cap)
    write_only = binding.outputs - graph.loaded_buffers()
    if check:
        launch.writers = {name: np.full(scratch[name].size, -1, np.int64) for name in write_only}
        for name in write_only:
            scratch[name].fill(_poison(scratch[name].dtype))
    with np.errstate(all="ignore"):  # IEEE results (inf, NaN) are the semantics, not warnings
        launch.run_block(graph.body)
    if check:
        for name in sorted(write_only):
            unwritten = np.flatnonzero(launch.writers[name] < 0)
            if unwritten.size:
                first = ", ".join(map(str, unwritten[:5])) + (", ..." if unwritten.size > 5 else "")
                raise UnwrittenOutputError(
                    f"output '{name}': {unwritten.size} of {scratch[name].size} elements were never written "
                    f"(indices {first}); nothing was written back"
                )
    for name in binding.outputs:
        np.copyto(binding.flat[name], scratch[name])
    if debug_thread is not None:
        from .debug import trace_thread

        return trace_thread(graph, before, debug_thread, cap=debug_cap)
    return None
