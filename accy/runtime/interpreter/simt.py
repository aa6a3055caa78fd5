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
  nothing, and each loop-carried value is combined with a reduction op (``add``,
  ``mul``, ``max``, ``min``, ``and``, ``or``, ``xor``) from a term that does not
  depend on any of them, every iteration is evaluated at once along a new
  leading axis, in chunks that keep the temporaries under a memory cap, and
  folded in iteration order (one in-place NumPy call per iteration, so float
  sums round exactly as a sequential loop does);
* **uniform**: otherwise, with the same bounds everywhere, a Python loop over
  the iterations, each evaluated for all threads;
* **divergent**: bounds that differ between threads run until the longest thread
  is done, with an *active mask*; loads and stores touch active lanes only.

``if_`` regions run the same way: a condition that is the same for every thread
runs one branch; otherwise each branch runs under the mask of its threads.
"""

from __future__ import annotations

import math
import os
import weakref

import attrs
import numpy as np

from ... import time_limit
from ...dsl.ir import Block, Graph, Op, Value
from ...dsl.ops import REDUCTIONS, SIMT_OPS
from ...dsl.schedule import Launch
from ...dsl.types import INDEX_MAX, INDEX_MIN
from ...errors import ArgumentError, BarrierError
from . import numerics, warp_matrix
from ..arguments import Binding
from .debug import Observer, Recorder, check_thread
from ...diagnostics import at, division_by_zero, out_of_bounds, thread_text
from .sanitizer import Sanitizer
from ...targets import WARP_SIZE

DEFAULT_MEMORY_CAP = 256 * 2**20  # bytes of temporaries a vectorised fold may hold

# An EVAL entry that rounds through f32 for narrow operands -> what it computes for every other
# type: the plain function, called directly on the hot path (the wrapper's checks cost more
# than the arithmetic on the small arrays most ops see).
_WIDE: dict[object, object] = {}


def _rounded(fn):
    op = numerics.rounded(fn)
    _WIDE[op] = fn
    return op


# One entry per pointwise op: NumPy arrays (or scalars) in, the result out.
EVAL = {
    "add": _rounded(np.add),
    "sub": _rounded(np.subtract),
    "mul": _rounded(np.multiply),
    "div": _rounded(np.true_divide),  # floats; integers: see Interpreter.div
    "mod": _rounded(numerics.python_mod),
    "pow": numerics.math_function(np.power),
    "max": numerics.maximum,
    "min": numerics.minimum,
    "neg": np.negative,
    "abs": np.abs,
    "fma": numerics.fma,
    "copysign": _rounded(np.copysign),
    **{name: numerics.math_function(fn) for name, fn in numerics.MATH64.items()},
    "floor": _rounded(np.floor),
    "ceil": _rounded(np.ceil),
    "round": _rounded(np.rint),
    "trunc": _rounded(np.trunc),
    "isnan": np.isnan,
    "isinf": np.isinf,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "eq": np.equal,
    "ne": np.not_equal,
    "and": np.bitwise_and,  # logical on bool
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
    "not": np.invert,
    "shl": numerics.shift_left,
    "shr": numerics.shift_right,
    "select": np.where,
}

# ops the interpreter runs with its own state (Interpreter methods of the same name)
STRUCTURAL = frozenset({"const", "size", "aligned", "cast", "load", "store", "fold", "if", "for_each", "yield",
                        "for_each_block", "shared", "barrier", "atomic", "shuffle", "ldmatrix", "mma", "async_copy",
                        "async_commit", "async_wait"})
_LARGEST = np.maximum.reduce  # a bounds check's one NumPy call (ndarray.max goes through Python)
CHECKED = frozenset({"div", "mod"})  # integer division checks its divisor


# ----------------------------------------------------------------------------- fold plans


@attrs.frozen
class _FoldPlan:
    """How to run one fold op: ``combines`` is None unless it can be vectorised;
    then entry j says how accumulator j takes its term (the other operand)."""

    combines: tuple[tuple[object, Value], ...] | None  # (combine function for its dtype, the term value)
    combine_ops: frozenset[Op]  # the combining ops themselves: applied after, not in, the body
    local_terms: frozenset[Value]  # the terms the body itself defines (dead once folded)
    body_ops: int  # ops in the body, nested regions included (sizes chunks)
    captured: tuple[Value, ...]  # the outer values the body reads (bound its shapes)


def _uses(block: Block) -> set[Value]:
    """Every value an op in ``block`` (or below) reads."""
    return {v for op in block.walk() for v in op.operands}


_COMBINES = {name: EVAL[name] for name in REDUCTIONS.values()}
# a fold whose body writes memory or cooperates runs iteration by iteration
_NOT_VECTORISED = frozenset({"store", "atomic", "barrier", "shuffle"})


def _plan(op: Op) -> _FoldPlan:
    (region,) = op.regions
    body_ops = sum(1 for _ in region.walk())
    defined = set(region.args)
    for inner in region.walk():
        defined.update(inner.results)
        defined.update(a for nested in inner.regions for a in nested.args)
    captured = tuple(sorted(_uses(region) - defined, key=id))
    plain = _FoldPlan(None, frozenset(), frozenset(), body_ops, captured)
    if any(inner.opcode in _NOT_VECTORISED for inner in region.walk()):
        return plain
    accs = set(region.args[1:])
    tainted = set(accs)  # values that depend on a loop-carried value
    for inner in region.ops:
        reads = set(inner.operands)
        for nested in inner.regions:
            reads |= _uses(nested)
        if reads & tainted:
            tainted.update(inner.results)
    combines, combine_ops = [], set()
    for acc, y in zip(region.args[1:], region.terminator.operands):
        owner = y.op
        if owner is None or owner.opcode not in _COMBINES or owner.block is not region:
            return plain
        a, b = owner.operands
        term = b if a is acc else a if b is acc else None
        if term is None or term in tainted:
            return plain
        combine = _COMBINES[owner.opcode]
        if not numerics._narrow(acc.type.numpy):
            combine = _WIDE.get(combine, combine)  # a ufunc then folds in place
        combines.append((combine, term))
        combine_ops.add(owner)
    local = frozenset(t for _, t in combines if t in defined)  # not from outside the body
    return _FoldPlan(tuple(combines), frozenset(combine_ops), local, body_ops, captured)


def _last_uses(block: Block, keep: frozenset[Value] = frozenset()) -> dict[Op, tuple[Value, ...]]:
    """For each op of ``block``: the values defined in the block that are dead after it.

    Freeing them at once keeps few large temporaries alive, and NumPy can then
    reuse their memory instead of faulting in fresh pages for every op.  Values a
    ``yield`` hands back stay, and so do those in ``keep`` (a vectorised fold's
    terms): the fold reads them after the body has run.
    """
    last: dict[Value, int] = {}
    for n, op in enumerate(block.ops):
        reads = set(op.operands)
        for nested in op.regions:
            reads |= _uses(nested)
        for v in reads:
            last[v] = n
        for r in op.results:
            last.setdefault(r, n)  # never used: dead at once
    kept = set(keep) | (set(block.terminator.operands) if block.terminator is not None else set())
    defined = {r for op in block.ops for r in op.results}
    frees: dict[Op, list[Value]] = {}
    for v, n in last.items():
        if v in defined and v not in kept:
            frees.setdefault(block.ops[n], []).append(v)
    return {op: tuple(vs) for op, vs in frees.items()}


@attrs.frozen
class _Schedule:
    """What the interpreter precomputes once per graph."""

    plans: dict[Op, _FoldPlan]  # per fold op
    frees: dict[Op, tuple[Value, ...]]  # per op: values dead after it
    steps: dict[Block, tuple[tuple, ...]]  # per block: its ops as run_block reads them (see _steps)


def _steps(block: Block, frees: dict[Op, tuple[Value, ...]]) -> tuple[tuple, ...]:
    """Each op of ``block`` as ``(op, handler, opcode, operands, result, dead, wide)``: the
    Interpreter method running a structural or checked op (None: a pointwise EVAL entry), and
    whether a pointwise op's operands are wider than f16/bf16, where an EVAL entry made by
    ``_rounded`` is its plain function.  EVAL itself is read at run time (tests patch it)."""
    steps = []
    for op in block.ops:
        name = op.opcode
        handler = getattr(Interpreter, "op_" + name) if name in STRUCTURAL or name in CHECKED else None
        wide = handler is None and bool(op.operands) and not numerics._narrow(op.operands[0].type.numpy)
        steps.append((op, handler, name, op.operands, op.results[0] if op.results else None,
                      frees.get(op, ()), wide))
    return tuple(steps)


_schedules: "weakref.WeakKeyDictionary[Graph, _Schedule]" = weakref.WeakKeyDictionary()


def schedule_of(graph: Graph) -> _Schedule:
    schedule = _schedules.get(graph)
    if schedule is None:
        plans = {op: _plan(op) for op in graph.body.walk() if op.opcode == "fold"}
        frees = _last_uses(graph.body)
        for op in graph.body.walk():
            plan = plans.get(op)
            terms = frozenset(t for _, t in plan.combines) if plan and plan.combines else frozenset()
            for region in op.regions:
                frees.update(_last_uses(region, terms))
        blocks = [graph.body] + [region for op in graph.body.walk() for region in op.regions]
        schedule = _schedules[graph] = _Schedule(plans, frees, {b: _steps(b, frees) for b in blocks})
    return schedule


# ----------------------------------------------------------------------------- execution


class Interpreter:
    """One launch of a graph over NumPy buffers.

    ``thread={"i": 3}`` runs that one logical thread instead of the whole grid;
    ``plain=True`` runs every fold as a loop; ``observer`` hears of every op;
    ``sanitizer`` checks every access (races, barriers, uninitialised shared memory).
    """

    def __init__(self, graph: Graph, buffers: dict[str, np.ndarray], scalars: dict[str, object],
                 extents: tuple[int, ...], *, memory_cap: int = DEFAULT_MEMORY_CAP, thread: dict | None = None,
                 plain: bool = False, observer: Observer | None = None, sanitizer: Sanitizer | None = None):
        self.graph = graph
        self.buffers = buffers
        self.env: dict[Value, object] = {}
        for p, v in zip(graph.scalars, graph.body.args):
            self.env[v] = scalars[p.name]
        self.active = None  # None: every lane is active; else a bool array
        self.axes = graph.lane_axes(extents)  # a thread's coordinates, fastest first
        self.thread = thread
        # the launch's shape, outermost axis first: (nz, ny, nx), or a block launch's
        # (grid z, y, x, threads z, y, x); one thread: no axes at all
        self.grid = () if thread is not None else tuple(a.extent for a in reversed(self.axes))
        self.block_threads = math.prod(graph.block_shape) if graph.is_block_launch else 1
        self.blocks = math.prod(self.grid) // self.block_threads if self.grid else 1
        self.shared: dict[str, np.ndarray] = {}  # per shared array: (blocks * count,) elements
        self.block_ids = np.int64(0)  # each lane's block, shaped to broadcast over the grid
        schedule = schedule_of(graph)
        self.plans = {} if plain else schedule.plans
        self.steps = schedule.steps
        self.free = observer is None  # the observer may read any value later: keep them all
        self.memory_cap = memory_cap
        self.observer = observer
        self.sanitizer = sanitizer
        self.leading = 0  # iteration axes of enclosing vectorised folds, in front of the grid's

    def run(self) -> None:
        with np.errstate(all="ignore"):  # IEEE results (inf, NaN) are the semantics, not warnings
            self.run_block(self.graph.body)

    # -- errors name one logical thread ------------------------------------------
    def _thread(self, lane: int) -> str:
        if self.thread is not None:
            return " ".join(f"{a.name}={self.thread[a.name]}" for a in self.axes)
        return thread_text(self.axes, lane)

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
        return lane, np.broadcast_to(idx, shape)[position].item()

    def _active_lanes(self, *arrays, lanes: bool = True):
        """The arrays broadcast over the grid (and any leading loop axes) and flattened, and each
        element's lane (None unless ``lanes``: only the checks need them), for the active lanes only."""
        parts = [np.asarray(a) for a in arrays]
        if lanes:
            parts.append(np.arange(max(math.prod(self.grid), 1), dtype=np.int64).reshape(self.grid))
        if self.active is not None:
            parts.append(np.asarray(self.active))
        shape = np.broadcast_shapes(self.grid, *(np.shape(a) for a in parts))
        flat = [np.broadcast_to(a, shape).reshape(-1) for a in parts]
        if self.active is not None:
            keep = flat.pop()
            flat = [f[keep] for f in flat]
        return (flat[:-1], flat[-1], shape) if lanes else (flat, None, shape)

    # -- evaluation ------------------------------------------------------------
    def run_block(self, block: Block, skip: frozenset[Op] = frozenset()) -> None:
        env, observer, free = self.env, self.observer, self.free
        time_limit.check()  # a fold's trip, a branch: where a run past its limit stops
        for op, handler, name, operands, result, dead, wide in self.steps[block]:
            if op in skip:
                continue  # and so are its frees: the caller still reads its operands
            if handler is None:
                fn = EVAL[name]
                if wide:
                    fn = _WIDE.get(fn, fn)
                env[result] = fn(*[env[v] for v in operands])
            else:
                handler(self, op)
            if observer is not None and name != "yield":
                observer.op(op, env[result] if result is not None else None)
            if free:
                for v in dead:
                    del env[v]

    def op_yield(self, op: Op) -> None:
        pass

    def op_const(self, op: Op) -> None:
        self.env[op.result] = op.attrs["dtype"].numpy.type(op.attrs["value"])

    def op_size(self, op: Op) -> None:
        self.env[op.result] = np.int64(self.buffers[op.attrs["buffer"]].size)

    def op_aligned(self, op: Op) -> None:
        address = self.buffers[op.attrs["buffer"]].__array_interface__["data"][0]
        self.env[op.result] = np.bool_(address % op.attrs["bytes"] == 0)

    def op_cast(self, op: Op) -> None:
        (value,) = op.operands
        self.env[op.result] = numerics.cast(self.env[value], value.type, op.result.type)

    def _integer_division(self, op: Op, integer_op, float_op) -> None:
        a, b = (self.env[v] for v in op.operands)
        if not op.result.type.is_int:
            if not numerics._narrow(op.result.type.numpy):
                float_op = _WIDE.get(float_op, float_op)
            self.env[op.result] = float_op(a, b)
            return
        zero = np.asarray(b) == 0
        bad = self._first_bad(zero, b)
        if bad is not None:
            raise division_by_zero(op, self._thread(bad[0]))
        self.env[op.result] = integer_op(a, np.where(zero, 1, b).astype(np.asarray(b).dtype))  # inactive lanes

    def op_div(self, op: Op) -> None:
        self._integer_division(op, np.floor_divide, EVAL["div"])

    def op_mod(self, op: Op) -> None:
        self._integer_division(op, np.remainder, EVAL["mod"])

    # -- memory -------------------------------------------------------------------
    def _element(self, op: Op, idx, shared_array: str | None = None):
        """A checked index and where it is in the flat memory (a shared array's block offset added):
        of the op's buffer, or of ``shared_array``."""
        shared = shared_array is not None or op.attrs.get("space", "global") == "shared"
        if shared:
            memory = self.shared[shared_array or op.attrs["buffer"]]
            size = memory.size // self.blocks
        else:
            memory = self.buffers[op.attrs["buffer"]]
            size = memory.size
        idx = np.asarray(idx, np.int64)
        unsigned = idx.view(np.uint64)  # one test for both ends: a negative index is huge unsigned
        if _LARGEST(unsigned, axis=None, initial=0) >= size:
            outside = unsigned >= size
            bad = self._first_bad(outside, idx)
            if bad is not None:
                raise out_of_bounds(op, bad[1], size, self._thread(bad[0]))
            idx = np.where(outside, 0, idx)  # only lanes that are inactive: point them somewhere harmless
        if shared:  # each block's own part
            idx = self.block_ids * size + idx
        return memory, idx

    def op_load(self, op: Op) -> None:
        first = self.env[op.operands[0]]
        for k, result in enumerate(op.results):  # vec > 1: consecutive elements, each checked
            memory, idx = self._element(op, first + k if k else first)
            if self.sanitizer is not None:
                elements, lanes, _ = self._active_lanes(idx)
                self.sanitizer.load(op, elements[0], lanes)
            if memory.size == 0:  # only inactive lanes reach here: give them zeros
                self.env[result] = np.zeros(np.shape(idx), memory.dtype)
            else:
                self.env[result] = memory[idx]

    def op_store(self, op: Op) -> None:
        first = self.env[op.operands[0]]
        checked = [self._element(op, first + k if k else first) for k in range(len(op.operands) - 1)]
        for (memory, idx), v in zip(checked, op.operands[1:]):  # every element checked before any is written
            (idx, value), lanes, _ = self._active_lanes(idx, np.asarray(self.env[v], memory.dtype),
                                                        lanes=self.sanitizer is not None)
            if self.sanitizer is not None:
                self.sanitizer.store(op, idx, lanes)
            memory[idx] = value  # a repeated index keeps the highest lane's value, as on the host

    def op_atomic(self, op: Op) -> None:
        """Atomics take effect in thread order within the launch; each returns the old value
        that order gives it."""
        kind = op.attrs["op"]
        memory, idx = self._element(op, self.env[op.operands[0]])
        values = [np.asarray(self.env[v], memory.dtype) for v in op.operands[1:]]
        (idx, *values), lanes, shape = self._active_lanes(idx, *values)
        if self.sanitizer is not None:
            self.sanitizer.atomic(op, idx, lanes)
        old = _apply_atomics(kind, memory, idx, values)
        result = np.zeros(shape, memory.dtype).reshape(-1)
        where = np.arange(result.size) if self.active is None else np.flatnonzero(
            np.broadcast_to(self.active, shape).reshape(-1))
        result[where] = old
        self.env[op.result] = result.reshape(shape)

    def op_for_each(self, op: Op) -> None:
        (block,) = op.regions
        if self.thread is not None:
            for arg, a in zip(block.args, self.axes):
                self.env[arg] = np.int64(self.thread[a.name])
        else:
            if math.prod(self.grid) == 0:
                return
            rank = len(self.axes)
            for i, (arg, a) in enumerate(zip(block.args, self.axes)):
                shape = [1] * rank
                shape[rank - 1 - i] = a.extent
                self.env[arg] = np.arange(a.extent, dtype=np.int64).reshape(shape)
        self.run_block(block)

    def op_for_each_block(self, op: Op) -> None:
        (block,) = op.regions
        if self.thread is not None:
            raise NotImplementedError("debug_thread on a block launch")  # refused earlier, in run_graph
        if math.prod(self.grid) == 0:
            return
        rank, grid_rank = len(self.axes), len(op.operands)
        thread_rank = rank - grid_rank
        # region arguments: the grid's axes, then the threads'; lane axes: the threads', then the grid's
        for j, arg in enumerate(block.args):
            k = thread_rank + j if j < grid_rank else j - grid_rank
            shape = [1] * rank
            shape[rank - 1 - k] = self.axes[k].extent
            self.env[arg] = np.arange(self.axes[k].extent, dtype=np.int64).reshape(shape)
        grid_shape = self.grid[:grid_rank]
        self.block_ids = np.arange(self.blocks, dtype=np.int64).reshape(grid_shape + (1,) * thread_rank)
        self.run_block(block)

    def op_shared(self, op: Op) -> None:
        dtype, count, name = op.attrs["dtype"], op.attrs["count"], op.attrs["name"]
        self.shared[name] = np.zeros(self.blocks * count, dtype.numpy)
        if self.sanitizer is not None:
            self.sanitizer.track_shared(name, self.blocks, count)

    def op_barrier(self, op: Op) -> None:
        if self.active is not None:  # inside a branch or loop: did every thread of each block arrive?
            reached = np.broadcast_to(self.active, self.grid).reshape(self.blocks, self.block_threads)
            partial = reached.any(axis=1) & ~reached.all(axis=1)
            if partial.any():
                block = int(np.argmax(partial))
                arrived, missing = int(np.argmax(reached[block])), int(np.argmin(reached[block]))
                base = block * self.block_threads
                raise BarrierError(
                    f"barrier{at(op)} reached by thread {self._thread(base + arrived)} but not by thread "
                    f"{self._thread(base + missing)} of the same block: every thread of a block must reach "
                    "every barrier (on a GPU this hangs or corrupts shared memory)"
                )
        if self.sanitizer is not None:
            self.sanitizer.barrier()

    def op_shuffle(self, op: Op) -> None:
        """Lanes of a warp (32 threads of a block, linearised x fastest) read each other's values."""
        value, delta = (self.env[v] for v in op.operands)
        t = self.block_threads
        full = np.broadcast_to(value, self.grid).reshape(self.blocks, t)
        b = np.clip(np.broadcast_to(delta, self.grid).reshape(self.blocks, t), -1, 2 * WARP_SIZE)
        lane = np.arange(t) % WARP_SIZE
        base = np.arange(t) - lane  # each thread's warp's first lane
        mode = op.attrs["mode"]
        if mode == "idx":
            source = base + (np.broadcast_to(delta, self.grid).reshape(self.blocks, t) & (WARP_SIZE - 1))
        else:
            target = {"xor": lane ^ b, "down": lane + b, "up": lane - b}[mode]
            inside = (b >= 0) & (target >= 0) & (target < WARP_SIZE)
            source = np.where(inside, base + target, np.arange(t))  # outside the warp: its own value
        self.env[op.result] = np.take_along_axis(full, source.astype(np.int64), axis=1).reshape(self.grid)

    # -- tensor cores (the tile distribution's dot for NVPTX; see warp_matrix) ---------------
    def _warps_of(self, value) -> np.ndarray:
        t = self.block_threads
        return np.broadcast_to(value, self.grid).reshape(self.blocks, t // WARP_SIZE, WARP_SIZE)

    def op_ldmatrix(self, op: Op) -> None:
        """Each lane reads its elements of the matrices from the rows its warp's lanes address."""
        dtype = op.attrs.dtype
        rows = self._warps_of(self.env[op.operands[0]])
        for result, (source, offset) in zip(op.results, warp_matrix.ldmatrix_sources(
                op.attrs.count, op.attrs.order, 4 // dtype.itemsize)):
            idx = (rows[..., source] + offset).reshape(self.grid)
            memory, where = self._element(op, idx)
            if self.sanitizer is not None:
                elements, lanes, _ = self._active_lanes(where)
                self.sanitizer.load(op, elements[0], lanes)
            self.env[result] = memory[where]

    def op_async_copy(self, op: Op) -> None:
        """The copy at once (a correct program reads it only after its wait and a barrier): the
        first ``valid`` bytes from the buffer, zeros after them."""
        dst, src, valid = (np.asarray(self.env[v], np.int64) for v in op.operands)
        itemsize = op.attrs.dtype.itemsize
        for k in range(op.attrs.bytes // itemsize):
            read = k * itemsize < valid
            source, where = self._element(op, np.where(read, src + k, 0) if np.ndim(read) else (src + k if read else 0))
            value = np.where(read, source[where] if source.size else 0, 0)
            memory, at = self._element(op, dst + k, op.attrs.shared)
            (at, value), lanes, _ = self._active_lanes(at, np.asarray(value, memory.dtype),
                                                       lanes=self.sanitizer is not None)
            if self.sanitizer is not None:
                self.sanitizer.store(op, at, lanes)
            memory[at] = value

    def op_async_commit(self, op: Op) -> None:
        pass  # the reference copies at once

    def op_async_wait(self, op: Op) -> None:
        pass

    def op_mma(self, op: Op) -> None:
        kind = op.attrs.kind
        values = [self._warps_of(self.env[v]) for v in op.operands]
        n = kind.a_count
        out = warp_matrix.mma(kind, values[:n], values[n:n + n // 2], values[n + n // 2:])
        for result, d in zip(op.results, out):
            self.env[result] = d.reshape(self.grid)

    # -- branches ------------------------------------------------------------------
    def _region_values(self, region: Block):
        self.run_block(region)
        return [self.env[v] for v in region.terminator.operands]

    def op_if(self, op: Op) -> None:
        cond = self.env[op.operands[0]]
        then, otherwise = op.regions[0], (op.regions[1] if len(op.regions) > 1 else None)
        if np.ndim(cond) == 0:  # the same for every thread: one branch runs
            region = then if cond else otherwise
            values = self._region_values(region) if region is not None else []
        else:
            outer = self.active
            taken = cond if outer is None else (cond & outer)
            skipped = ~cond if outer is None else (~cond & outer)
            try:
                branches = []
                for region, mask in ((then, taken), (otherwise, skipped)):
                    if region is not None and np.any(mask):
                        self.active = mask
                        branches.append(self._region_values(region))
                    else:
                        branches.append(None)
            finally:
                self.active = outer
            if branches[0] is None or branches[1] is None:
                values = branches[0] or branches[1] or []
            else:
                values = [np.where(cond, a, b) for a, b in zip(*branches)]
        for r, value in zip(op.results, values):
            self.env[r] = value

    # -- folds -------------------------------------------------------------------
    def op_fold(self, op: Op) -> None:
        start, stop, *inits = (self.env[v] for v in op.operands)
        step = op.attrs["step"]
        (region,) = op.regions
        uniform = np.ndim(start) == 0 and np.ndim(stop) == 0
        plan = self.plans.get(op)
        if uniform and plan is not None and plan.combines is not None:
            results = self._vectorised_fold(range(int(start), int(stop), step), region, plan, inits)
        elif uniform:
            results = self._uniform_fold(range(int(start), int(stop), step), region, inits)
        else:
            results = self._divergent_fold(start, stop, step, region, inits)
        for r, value in zip(op.results, results):
            self.env[r] = value

    def _iterate(self, region: Block, i, accs_values, skip: frozenset[Op] = frozenset()):
        env = self.env
        env[region.args[0]] = i
        for a, v in zip(region.args[1:], accs_values):
            env[a] = v
        if self.observer is not None and np.ndim(i) == 0:
            self.observer.enter(region.parent, int(i))
        try:
            self.run_block(region, skip)
        finally:
            if self.observer is not None and np.ndim(i) == 0:
                self.observer.leave()
        return None if skip else [env[y] for y in region.terminator.operands]

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
                    in_place = isinstance(combine, np.ufunc)  # no fresh array (and pages) per iteration
                    for t in np.broadcast_to(terms, shape):  # in iteration order: rounds as a loop does
                        if in_place:
                            combine(total, t, out=total)
                        else:
                            total = np.asarray(combine(total, t)).astype(total.dtype, copy=False)
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


def _bits(x: np.ndarray) -> np.ndarray:
    """A float's bit pattern (atomic_cas compares bits)."""
    return x.view(f"u{x.dtype.itemsize}") if x.dtype.kind in "fV" else x


_ATOMIC_COMBINE = {"add": EVAL["add"], "max": EVAL["max"], "min": EVAL["min"],
                   "exchange": lambda old, new: new}


def _apply_atomics(kind: str, memory: np.ndarray, elements: np.ndarray, values: list) -> np.ndarray:
    """Apply one atomic op of many lanes to ``memory`` in lane order; the old values."""
    old = np.empty(elements.size, memory.dtype)
    if elements.size == 0:
        return old
    order = np.argsort(elements, kind="stable")  # by element, then lane (lanes come in order)
    e = elements[order]
    vals = [v[order] for v in values]
    starts = np.ones(e.size, bool)
    starts[1:] = e[1:] != e[:-1]
    group = np.cumsum(starts) - 1
    rank = np.arange(e.size) - np.flatnonzero(starts)[group]  # position within its element's queue
    sorted_old = np.empty(e.size, memory.dtype)
    if kind == "add" and memory.dtype.kind in "iu":  # integers wrap: prefix sums are exact
        before = np.cumsum(vals[0], dtype=memory.dtype) - vals[0]
        sorted_old = memory[e] + (before - before[np.flatnonzero(starts)][group])
        np.add.at(memory, e[starts], np.add.reduceat(vals[0], np.flatnonzero(starts)).astype(memory.dtype))
    else:  # one round per queue position: each element changes once per round
        for r in range(int(rank.max()) + 1):
            turn = rank == r
            at = e[turn]
            current = memory[at]
            sorted_old[turn] = current
            if kind == "cas":
                compare, new = vals[0][turn], vals[1][turn]
                memory[at] = np.where(_bits(current) == _bits(compare), new, current)
            else:
                memory[at] = np.asarray(_ATOMIC_COMBINE[kind](current, vals[0][turn])).astype(memory.dtype)
    old[order] = sorted_old
    return old


def _step_without_wrap(i, step: int):
    """``i + step``, saturating where it would wrap, so a loop ending near the
    edge of the index range stops instead of starting over."""
    nxt = i + np.int64(step)
    wrapped = (nxt < i) if step > 0 else (nxt > i)
    return np.where(wrapped, np.int64(INDEX_MAX if step > 0 else INDEX_MIN), nxt)


# ----------------------------------------------------------------------------- the backend


def check_memory_default() -> bool:
    """``ACCY_CHECK_MEMORY=1`` turns the interpreter's memory checks on (the test suite does)."""
    return os.environ.get("ACCY_CHECK_MEMORY", "0").lower() not in ("0", "", "false", "no", "off")


def _poison(dtype) -> object:
    if dtype.kind in "fV":
        return np.array(np.nan, np.float32).astype(dtype)
    if dtype.kind == "b":
        return True
    return np.iinfo(dtype).min


def run_graph(graph: Graph, binding: Binding, launch: Launch, *, memory_cap: int = DEFAULT_MEMORY_CAP,
              check_memory: bool | None = None, debug_thread=None, debug_cap: int = 2000):
    """Execute ``graph`` on checked arguments; outputs are written only on success.

    ``check_memory`` checks every access (see :mod:`accy.runtime.interpreter.sanitizer`): races
    between threads, barriers only part of a block reaches, shared memory read before
    it is written, and elements of write-only outputs no thread wrote (poisoned with
    NaN or the most negative integer first).  ``debug_thread={"b": 1, ...}`` also
    records every op's value for that one logical thread and returns the
    :class:`ThreadTrace`.
    """
    check = check_memory_default() if check_memory is None else check_memory
    if debug_thread is not None:
        if graph.is_block_launch:
            raise ArgumentError("debug_thread replays one independent thread; the threads of a block launch "
                                "cooperate, so it supports for_each launches only (use check_memory=True and compare)")
        check_thread(graph.lane_axes(launch.extents), debug_thread)
        before = {name: a.copy() for name, a in binding.flat.items()}  # the replay starts from here
    if launch.lanes == 0:  # as on every backend: an empty launch runs nothing, not even top-level ops
        return None
    scratch = binding.scratch()
    sanitizer = None
    if check:
        sanitizer = Sanitizer(graph.lane_axes(launch.extents), math.prod(graph.block_shape) if graph.is_block_launch
                              else 1, tuple(graph.body.walk()))
        write_only = binding.outputs - graph.loaded_buffers()
        for name in sorted(binding.outputs):
            layout = binding.layouts.get(name)  # a tensor: only its elements of the span are the kernel's
            sanitizer.track_buffer(name, scratch[name].size, name in write_only, layout)
            if name in write_only:
                if layout is None:
                    scratch[name].fill(_poison(scratch[name].dtype))
                else:
                    scratch[name][layout.positions()] = _poison(scratch[name].dtype)
    interpreter = Interpreter(graph, scratch, binding.scalars, launch.extents, memory_cap=memory_cap,
                              sanitizer=sanitizer)
    interpreter.run()
    if sanitizer is not None:
        sanitizer.finish()
    binding.commit(scratch)
    if debug_thread is None:
        return None
    # replay the one thread on copies, with plain loops, so each fold iteration shows
    recorder = Recorder(graph, debug_thread, cap=debug_cap)
    replay = Interpreter(graph, before, binding.scalars, launch.extents, thread=debug_thread, plain=True,
                         observer=recorder)
    recorder.env = replay.env  # every result of an op, every loop's variable and accumulators
    replay.run()
    return recorder.trace()


# every op of the table has exactly one implementation here (checked by the test suite)
IMPLEMENTED = frozenset(EVAL) | STRUCTURAL | CHECKED
assert IMPLEMENTED >= SIMT_OPS, sorted(SIMT_OPS - IMPLEMENTED)
