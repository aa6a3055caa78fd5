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
import threading

import attrs
import numpy as np

from ... import time_limit
from ...dsl.ir import Block, Graph, Op, Value
from ...dsl.ops import SIMT_OPS
from ...dsl.schedule import Launch
from ...errors import ArgumentError
from . import numerics
from ..arguments import Binding
from .debug import Observer, Recorder, check_thread
from ...diagnostics import division_by_zero, thread_text
from .pointwise import EVAL, WIDE
from .sanitizer import Sanitizer
from .shared import ScalarOps
from .simt_control import SimtControl, _FoldPlan, fold_plan, uses
from .simt_cooperation import BlockCooperation
from .simt_bulk import BulkCopies
from .simt_memory import SimtMemory

DEFAULT_MEMORY_CAP = 256 * 2**20  # bytes of temporaries a vectorised fold may hold


class _Lanes(threading.local):
    active = None

# ops the interpreter runs with its own state (methods op_<name> of the Interpreter or of its parts)
STRUCTURAL = frozenset({"const", "size", "aligned", "cast", "bitcast", "load", "store", "fold", "if", "for_each", "yield",
                        "for_each_block", "shared", "barrier", "atomic", "shuffle", "ldmatrix", "mma", "async_copy",
                        "async_commit", "async_wait", "wgmma", "wgmma_fence", "wgmma_commit", "wgmma_wait",
                        "fence_proxy_async", "mbarrier_init", "mbarrier_arrive", "mbarrier_wait", "tma_load",
                        "tma_ready", "setmaxnreg"})
CHECKED = frozenset({"div", "mod"})  # integer division checks its divisor


# ----------------------------------------------------------------------------- the schedule


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
            reads |= uses(nested)
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
    """Each op of ``block`` as ``(op, handled, opcode, operands, result, dead, wide)``: whether
    the interpreter's handler table runs it (a structural or checked op; else a pointwise EVAL
    entry), and whether a pointwise op's operands are wider than f16/bf16, where an EVAL entry
    that rounds through f32 is its plain function.  EVAL itself is read at run time (tests patch it)."""
    steps = []
    for op in block.ops:
        name = op.opcode
        handled = name in STRUCTURAL or name in CHECKED
        wide = not handled and bool(op.operands) and not numerics._narrow(op.operands[0].type.numpy)
        steps.append((op, handled, name, op.operands, op.results[0] if op.results else None,
                      frees.get(op, ()), wide))
    return tuple(steps)


_schedules: "weakref.WeakKeyDictionary[Graph, _Schedule]" = weakref.WeakKeyDictionary()


def schedule_of(graph: Graph) -> _Schedule:
    schedule = _schedules.get(graph)
    if schedule is None:
        plans = {op: fold_plan(op) for op in graph.body.walk() if op.opcode == "fold"}
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


class Interpreter(ScalarOps):
    """One launch of a graph over NumPy buffers: its values, lanes and active mask, the walk over
    its ops, the scalar ops and the launch ops; memory, block cooperation and control flow are
    its parts' (:class:`SimtMemory`, :class:`BlockCooperation`, :class:`SimtControl`), reached
    through one handler table.

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
        self._lanes = _Lanes()  # the active lanes, per thread (warp roles run on threads of their own)
        self.roles = None  # the warp roles running (accy.runtime.interpreter.roles), if any
        self.axes = graph.lane_axes(extents)  # a thread's coordinates, fastest first
        self.thread = thread
        # the launch's shape, outermost axis first: (nz, ny, nx), or a block launch's
        # (grid z, y, x, threads z, y, x); one thread: no axes at all
        self.grid = () if thread is not None else tuple(a.extent for a in reversed(self.axes))
        self.block_threads = math.prod(graph.block_shape) if graph.is_block_launch else 1
        self.blocks = math.prod(self.grid) // self.block_threads if self.grid else 1
        self.block_ids = np.int64(0)  # each lane's block, shaped to broadcast over the grid
        schedule = schedule_of(graph)
        self.steps = schedule.steps
        self.free = observer is None  # the observer may read any value later: keep them all
        self.observer = observer
        self.sanitizer = sanitizer
        self.memory = SimtMemory(self)
        self.cooperation = BlockCooperation(self)
        self.control = SimtControl(self, {} if plain else schedule.plans, memory_cap)
        self.bulk = BulkCopies(self)
        parts = {"interpreter": self, "memory": self.memory, "cooperation": self.cooperation, "control": self.control,
                 "bulk": self.bulk}
        # read from the classes now, so that a method patched on a class (as tests do) is the one that runs
        self.handlers = {name: getattr(parts[part], method) for name, (part, method) in HANDLERS.items()}

    @property
    def active(self):
        """None: every lane is active; else a bool array."""
        return self._lanes.active

    @active.setter
    def active(self, mask) -> None:
        self._lanes.active = mask

    def run(self) -> None:
        with np.errstate(all="ignore"):  # IEEE results (inf, NaN) are the semantics, not warnings
            self.run_block(self.graph.body)

    # -- errors name one logical thread ------------------------------------------
    def lane_name(self, lane: int) -> str:
        if self.thread is not None:
            return " ".join(f"{a.name}={self.thread[a.name]}" for a in self.axes)
        return thread_text(self.axes, lane)

    def first_bad(self, bad, idx):
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

    def active_lanes(self, *arrays, lanes: bool = True):
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
        env, observer, free, handlers = self.env, self.observer, self.free, self.handlers
        time_limit.check()  # a fold's trip, a branch: where a run past its limit stops
        for op, handled, name, operands, result, dead, wide in self.steps[block]:
            if op in skip:
                continue  # and so are its frees: the caller still reads its operands
            if not handled:
                fn = EVAL[name]
                if wide:
                    fn = WIDE.get(fn, fn)
                env[result] = fn(*[env[v] for v in operands])
            else:
                handlers[name](op)
            if observer is not None and name != "yield":
                observer.op(op, env[result] if result is not None else None)
            if free:
                for v in dead:
                    del env[v]

    def op_cast(self, op: Op) -> None:
        (value,) = op.operands
        self.env[op.result] = numerics.cast(self.env[value], value.type, op.result.type)

    def op_bitcast(self, op: Op) -> None:
        self.env[op.result] = numerics.bitcast(self.env[op.operands[0]], op.result.type)

    def _integer_division(self, op: Op, integer_op, float_op) -> None:
        a, b = (self.env[v] for v in op.operands)
        if not op.result.type.is_int:
            if not numerics._narrow(op.result.type.numpy):
                float_op = WIDE.get(float_op, float_op)
            self.env[op.result] = float_op(a, b)
            return
        zero = np.asarray(b) == 0
        bad = self.first_bad(zero, b)
        if bad is not None:
            raise division_by_zero(op, self.lane_name(bad[0]))
        self.env[op.result] = integer_op(a, np.where(zero, 1, b).astype(np.asarray(b).dtype))  # inactive lanes

    def op_div(self, op: Op) -> None:
        self._integer_division(op, np.floor_divide, EVAL["div"])

    def op_mod(self, op: Op) -> None:
        self._integer_division(op, np.remainder, EVAL["mod"])

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


# the handler table's entries: each op of the interpreter's own, by its name, to the method
# op_<name> of the interpreter (its own or its ScalarOps') or of a part
HANDLERS = {name[3:]: (part, name) for part, cls in (("interpreter", Interpreter), ("memory", SimtMemory),
                                                     ("cooperation", BlockCooperation), ("control", SimtControl),
                                                     ("bulk", BulkCopies))
            for name in dir(cls) if name.startswith("op_")}
assert set(HANDLERS) == STRUCTURAL | CHECKED, sorted(set(HANDLERS) ^ (STRUCTURAL | CHECKED))


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