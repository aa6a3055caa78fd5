"""The NumPy interpreter of tile-level kernels (``for_each_tile``): the reference semantics of
the tile ops (docs: the tile spec, accy/dsl/ops.py's "tile type rules").

Every program of the grid runs at once, as the SIMT interpreter runs every thread at once.
A tile value is an array of shape ``(P, *tile_shape)``, P the number of programs, or
``(1, *tile_shape)`` where it is the same in every program (constants, ``arange``, what is
computed from them only); a scalar is ``(P,)`` or ``()``.  NumPy's broadcasting lines the
two forms up, so a launch costs a number of NumPy calls proportional to the ops executed,
never to the programs or the elements.  Programs are numbered with the grid's first axis
fastest (as the SIMT interpreter numbers threads), which is the order errors search in.

Pointwise ops are the SIMT interpreter's own table (:data:`accy.runtime.interpreter.simt.EVAL`),
so elementwise results are bit for bit the SIMT numpy backend's.  A fold runs one iteration
at a time for all programs; where its bounds differ between programs (a causal attention's
key loop) it runs until the longest is done with an *active mask* of programs, as does an
``if`` on a condition that differs between programs: loads, stores, atomics and the bounds
and division checks see active programs only.  Outputs are written into scratch copies and
committed only when the launch succeeds, so a failing launch writes nothing.

Offsets and masks are held unevaluated where they are affine in the tile positions and the and
of one range per axis (:class:`~.tile_memory.Affine`, :class:`~.tile_memory.Conjunction`): an
access then copies each program's box of elements through a strided view of the buffer, never
forming a masked-off element's address.  A tensor access's shape guard is held so too (a
:class:`~.tile_memory.Select` of the offsets, checked against the mask at each index's own
shape).  ``check_memory`` (races, unwritten outputs) applies to SIMT launches only:
``check_memory=True`` on a tile launch is refused (the ptx backend's emulator checks a tile
launch's programs for races).

This module holds the interpreter that composes the parts (the walk over the ops, the values,
the active programs and one handler table), the op schedule, the scalar, shape, reduction, dot
and ``if`` ops and :func:`run_tiles`; memory is :mod:`.tile_memory`'s :class:`TileMemory`, folds
:mod:`.tile_folds`' :class:`FoldRunner`, the reductions' and dot's arithmetic :mod:`.tile_numerics`'.
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from ... import time_limit
from ...dsl.ir import Block, Graph, Op
from ...dsl.ops import SIMT_OPS, TILE_OPS
from ...dsl.types import TileType, element_type
from ...errors import ArgumentError
from . import numerics
from ..arguments import Binding
from ...diagnostics import division_by_zero, thread_text
from .pointwise import EVAL, WIDE
from .shared import ScalarOps, branch_values
from .simt import DEFAULT_MEMORY_CAP, _last_uses
from .tile_folds import FoldRunner, _fold_plans_of, fold_counts
from .tile_memory import Affine, TileMemory, _unit_axes, _Values
from .tile_numerics import arg_along, dot, reduce_along, round_to_tf32
from .tile_tails import TailOps

# fold_counts and round_to_tf32 are read here by the tests
__all__ = ["IMPLEMENTED", "TileInterpreter", "fold_counts", "round_to_tf32", "run_tiles"]

_AFFINE = frozenset({"add", "sub", "mul"})  # index arithmetic an Affine tile stays affine under


# ----------------------------------------------------------------------------- the schedule


def _blocks(graph: Graph):
    yield graph.body
    for op in graph.body.walk():
        yield from op.regions


_schedules: "weakref.WeakKeyDictionary[Graph, dict]" = weakref.WeakKeyDictionary()


def _schedule(graph: Graph) -> dict[Block, tuple[tuple, ...]]:
    """Per block: each op as ``(op, handler, fn, result, dead)``: the key of the handler table
    entry running a structural, checked or tile op (else None), the pointwise EVAL entry (its
    plain function where the operands are wider than f16/bf16), and the values dead after it."""
    steps = _schedules.get(graph)
    if steps is None:
        frees = {}
        for block in _blocks(graph):
            frees.update(_last_uses(block))
        steps = {}
        for block in _blocks(graph):
            entries = []
            for op in block.ops:
                handler = op.opcode if op.opcode in HANDLERS else None
                if len(op.results) == 1 and isinstance(op.results[0].type, TileType):
                    if op.opcode in _AFFINE and op.result.type.dtype.is_index:
                        handler = "index_arithmetic"
                    elif op.opcode == "select" and op.result.type.dtype.is_index:
                        handler = "index_select"
                    elif op.opcode == "eq" and op.operands[0].type.dtype.is_index:
                        handler = "index_equality"
                    elif op.opcode == "and" and op.result.type.dtype.is_bool:
                        handler = "conjunction"
                    elif handler is None:
                        handler = "tile_pointwise"  # a Tailed operand keeps its form (TailOps)
                fn = None
                if handler is None:
                    fn = EVAL[op.opcode]
                    if op.operands and not numerics._narrow(element_type(op.operands[0].type).numpy):
                        fn = WIDE.get(fn, fn)
                entries.append((op, handler, fn, op.results[0] if op.results else None, frees.get(op, ())))
            steps[block] = tuple(entries)
        _schedules[graph] = steps
    return steps


# ----------------------------------------------------------------------------- execution


class TileInterpreter(ScalarOps):
    """One launch of a tile graph over NumPy buffers (flat views; outputs are scratch copies): the
    values, the active programs and the walk over the ops; memory and folds are its parts'."""

    def __init__(self, graph: Graph, buffers: dict[str, np.ndarray], scalars: dict[str, object],
                 extents: tuple[int, ...], *, memory_cap: int = DEFAULT_MEMORY_CAP):
        self.graph = graph
        self.buffers = buffers
        self.env = _Values()
        self.lazy = self.env.lazy  # values held unevaluated (tile_memory's Affine, Conjunction, Sum, Select, Tailed)
        for p, v in zip(graph.scalars, graph.body.args):
            self.env[v] = scalars[p.name]
        self.axes = graph.lane_axes(extents)  # the grid's axes, first fastest
        self.programs = math.prod(extents)  # in a vectorised fold's body: (trip, program) pairs
        self.launched = self.programs
        self.active = None  # None: every program is active; else a (P,) bool array
        self.steps = _schedule(graph)
        self.memory = TileMemory(self)
        self.folds = FoldRunner(self, _fold_plans_of(graph), memory_cap)
        self.tails = TailOps(self)
        parts = {"interpreter": self, "memory": self.memory, "folds": self.folds, "tails": self.tails}
        self.handlers = {key: getattr(parts[part], method) for key, (part, method) in HANDLERS.items()}

    def run(self) -> None:
        with np.errstate(all="ignore"):  # IEEE results (inf, NaN) are the semantics, not warnings
            self.run_block(self.graph.body)

    def run_block(self, block: Block) -> None:
        env, lazy, handlers = self.env, self.lazy, self.handlers
        time_limit.check()  # a fold's trip, a branch: where a run past its limit stops
        for op, handler, fn, result, dead in self.steps[block]:
            if handler is None:
                env[result] = fn(*[env[v] for v in op.operands])
            else:
                handlers[handler](op)
            for v in dead:
                env.pop(v, None)
                lazy.pop(v, None)

    # -- the active programs ------------------------------------------------------
    def per_program(self, mask: np.ndarray, ndim: int) -> np.ndarray:
        """A (P,) mask shaped to broadcast against a value of ``ndim`` dimensions."""
        return mask.reshape(mask.shape + (1,) * (ndim - 1)) if ndim else mask

    def _where_active(self, bad):
        """``bad`` (a scalar's or a tile's) restricted to the active programs."""
        bad = np.asarray(bad)
        if self.active is None:
            return bad
        return bad & self.per_program(self.active, max(bad.ndim, 1))

    def first_bad(self, bad, values, programs=None):
        """(program, value there) of the first active element where ``bad``, or None; ``programs``:
        the program of each leading row, where ``bad`` holds some programs only (active ones)."""
        if programs is None:
            bad = self._where_active(bad)
        if not np.any(bad):
            return None
        if bad.ndim == 0:  # the same in every program, all active
            return 0, np.asarray(values).reshape(-1)[0].item()
        shape = np.broadcast_shapes(bad.shape, np.shape(values))
        position = int(np.argmax(np.broadcast_to(bad, shape)))
        inner = math.prod(shape[1:])
        program = position // inner if shape[0] > 1 else 0
        if programs is not None:
            program = int(programs[program])
        return program, np.broadcast_to(values, shape).reshape(-1)[position].item()

    def program_name(self, program: int) -> str:
        return thread_text(self.axes, program % self.launched)  # a (trip, program) pair: its program

    def masked(self, mask: np.ndarray) -> np.ndarray:
        """A tile access's mask and the active programs together."""
        return mask if self.active is None else mask & self.per_program(self.active, mask.ndim)

    # -- scalars ---------------------------------------------------------------------
    def op_cast(self, op: Op) -> None:
        if self.tails.cast(op):
            return
        (value,) = op.operands
        self.env[op.result] = numerics.cast(self.env[value], element_type(value.type), element_type(op.result.type))

    def op_bitcast(self, op: Op) -> None:
        self.env[op.result] = numerics.bitcast(self.env[op.operands[0]], element_type(op.result.type))

    def _division(self, op: Op, integer_op, float_op) -> None:
        if not element_type(op.result.type).is_int:
            if not numerics._narrow(element_type(op.operands[1].type).numpy):
                float_op = WIDE.get(float_op, float_op)
            if not (isinstance(op.result.type, TileType) and self.tails.elementwise(op, float_op)):
                self.env[op.result] = float_op(*[self.env[v] for v in op.operands])
            return
        a, b = (self.env[v] for v in op.operands)
        zero = np.asarray(b) == 0
        bad = self.first_bad(zero, b)
        if bad is not None:
            raise division_by_zero(op, self.program_name(bad[0]), who="program")
        self.env[op.result] = integer_op(a, np.where(zero, 1, b).astype(np.asarray(b).dtype))  # inactive programs

    def op_div(self, op: Op) -> None:
        self._division(op, np.floor_divide, EVAL["div"])

    def op_mod(self, op: Op) -> None:
        self._division(op, np.remainder, EVAL["mod"])

    # -- the launch ----------------------------------------------------------------------
    def op_for_each_tile(self, op: Op) -> None:
        (block,) = op.regions
        program = np.arange(self.programs, dtype=np.int64)
        stride = 1
        for arg, axis in zip(block.args, self.axes):
            self.env[arg] = program // stride % axis.extent if len(self.axes) > 1 else program
            stride *= axis.extent
        self.run_block(block)

    # -- making and reshaping tiles ---------------------------------------------------
    def op_splat(self, op: Op) -> None:
        x = np.asarray(self.env[op.operands[0]])
        shape = op.attrs.shape
        if op.result.type.dtype.is_index:
            self.lazy[op.result] = Affine(x, (0,) * len(shape), shape)
            return
        lead = x.shape if x.ndim else (1,)
        self.env[op.result] = np.broadcast_to(x.reshape(lead + (1,) * len(shape)), lead + shape)

    def op_broadcast(self, op: Op) -> None:
        shape = op.attrs.shape
        held = self.lazy.get(op.operands[0])
        moved = held.broadcast(shape) if held is not None else None  # None: a form the shape does not keep
        if moved is not None:
            self.lazy[op.result] = moved
        else:
            x = self.env[op.operands[0]]
            self.env[op.result] = np.broadcast_to(x, x.shape[:1] + shape)

    def op_reshape(self, op: Op) -> None:
        shape = op.attrs.shape
        held = self.lazy.get(op.operands[0])
        axes = _unit_axes(held.shape, shape) if held is not None else None
        moved = held.reshaped(axes, shape) if axes is not None else None
        if moved is not None:
            self.lazy[op.result] = moved
        else:
            x = self.env[op.operands[0]]
            self.env[op.result] = x.reshape(x.shape[:1] + shape)

    def op_trans(self, op: Op) -> None:
        perm = op.attrs.perm
        held = self.lazy.get(op.operands[0])
        shape = tuple(op.result.type.shape)
        moved = held.transposed(perm, shape) if held is not None else None
        if moved is not None:
            self.lazy[op.result] = moved
        else:
            self.env[op.result] = np.transpose(self.env[op.operands[0]], (0,) + tuple(k + 1 for k in perm))

    def op_slice(self, op: Op) -> None:
        x = self.env[op.operands[0]]
        boxes = [slice(None)]
        for start, step, size in zip(op.attrs.starts, op.attrs.steps, op.attrs.shape):
            stop = start + step * size
            boxes.append(slice(start, stop if stop >= 0 else None, step))  # -1 would count from the end
        self.env[op.result] = x[tuple(boxes)]

    def op_cat(self, op: Op) -> None:
        a, b = (self.env[v] for v in op.operands)
        programs = max(a.shape[0], b.shape[0])  # one may be the same in every program
        a, b = (np.broadcast_to(x, (programs,) + x.shape[1:]) for x in (a, b))
        self.env[op.result] = np.concatenate((a, b), axis=op.attrs.axis + 1)

    def op_arange(self, op: Op) -> None:
        self.lazy[op.result] = Affine(np.int64(0), (1,), (op.attrs.n,))

    # -- reductions, scans, dot ------------------------------------------------------------
    @staticmethod
    def _scalar_or_tile(x: np.ndarray):
        """A result with the tile axes reduced away is a scalar: ``()`` where it is the same
        in every program."""
        return x[0] if x.shape == (1,) else x

    def op_reduce(self, op: Op) -> None:
        result = self.tails.reduce(op)
        if result is None:
            result = reduce_along(np.asarray(self.env[op.operands[0]]), op.attrs.op, op.attrs.axis + 1)
        self.env[op.result] = self._scalar_or_tile(result)

    def op_argreduce(self, op: Op) -> None:
        result = self.tails.argreduce(op)
        if result is None:
            result = arg_along(np.asarray(self.env[op.operands[0]]), op.attrs.op, op.attrs.axis + 1)
        self.env[op.result] = self._scalar_or_tile(result)

    def op_scan(self, op: Op) -> None:
        x = np.asarray(self.env[op.operands[0]])
        self.env[op.result] = reduce_along(x, op.attrs.op, op.attrs.axis + 1, running=True)

    def op_dot(self, op: Op) -> None:
        a, b, acc = (self.env[v] for v in op.operands)
        self.env[op.result] = dot(a, b, acc, op.attrs.precision)

    # -- control -------------------------------------------------------------------------------
    def merge(self, mask: np.ndarray, a, b):
        """``a`` in the programs of ``mask``, else ``b`` (scalars or tiles)."""
        ndim = max(np.ndim(a), np.ndim(b))
        return np.where(self.per_program(mask, ndim), a, b)

    def region_values(self, region: Block) -> list:
        self.run_block(region)
        env, lazy = self.env, self.lazy
        values = [env[v] for v in region.terminator.operands]
        for v in region.terminator.operands:  # the region sets them anew when it runs again: a lazily
            if v.block is region:  # held one must not find its previous evaluation still there
                env.pop(v, None)
                lazy.pop(v, None)
        return values

    def op_if(self, op: Op) -> None:
        then, otherwise = op.regions[0], (op.regions[1] if len(op.regions) > 1 else None)
        values = branch_values(self, self.env[op.operands[0]], then, otherwise, self.region_values, self.merge)
        for r, value in zip(op.results, values):
            self.env[r] = value


# ----------------------------------------------------------------------------- the backend's entry


def run_tiles(graph: Graph, binding: Binding, launch, *, debug_thread=None, check_memory: bool | None = None,
              memory_cap: int = DEFAULT_MEMORY_CAP) -> None:
    """Execute tile graph ``graph`` on checked arguments; outputs are written only on success.
    ``check_memory=True`` is refused: the memory checks are the SIMT interpreter's (None, where
    ACCY_CHECK_MEMORY decides, leaves a tile launch unchecked)."""
    if check_memory:
        raise ArgumentError("check_memory=True checks SIMT launches (for_each, for_each_block) only; a for_each_tile "
                            "kernel's programs are not checked here. Run it with backend='ptx': the PTX emulator "
                            "checks every launch for races (between the programs, each a block of threads) and "
                            "out-of-bounds accesses")
    if debug_thread is not None:
        raise ArgumentError("debug_thread replays one thread of a for_each launch; a for_each_tile kernel has "
                            "programs, not threads (run it with backend='numpy' and compare values instead)")
    if launch.lanes == 0:  # an empty grid runs nothing
        return
    scratch = binding.scratch()
    TileInterpreter(graph, scratch, binding.scalars, tuple(launch.extents), memory_cap=memory_cap).run()
    binding.commit(scratch)


# the handler table's entries: each op of the interpreter's own (the method op_<name> of the
# interpreter or of a part) by its name, and the lazily held index arithmetic and masks
HANDLERS = {name[3:]: (part, name) for part, cls in (("interpreter", TileInterpreter), ("memory", TileMemory),
                                                     ("folds", FoldRunner))
            for name in dir(cls) if name.startswith("op_")}
HANDLERS.update({name: ("memory", name) for name in ("index_arithmetic", "index_select", "index_equality",
                                                     "conjunction")})
HANDLERS["tile_pointwise"] = ("tails", "tile_pointwise")

# every op a tile program may hold has an implementation here: the tile ops, and the SIMT
# level's scalar ops except the ones that need threads (checked by the tests)
_THREADS_ONLY = frozenset({"for_each", "for_each_block", "shared", "barrier", "shuffle"})
IMPLEMENTED = frozenset(EVAL) | frozenset(name for name in SIMT_OPS | TILE_OPS if name in HANDLERS)
assert IMPLEMENTED == (SIMT_OPS - _THREADS_ONLY) | TILE_OPS, sorted(
    IMPLEMENTED ^ ((SIMT_OPS - _THREADS_ONLY) | TILE_OPS))
