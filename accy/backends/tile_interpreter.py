"""The NumPy interpreter of tile-level kernels (``for_each_tile``): the reference semantics of
the tile ops (docs: the tile spec, accy/dsl/ops.py's "tile type rules").

Every program of the grid runs at once, as the SIMT interpreter runs every thread at once.
A tile value is an array of shape ``(P, *tile_shape)``, P the number of programs, or
``(1, *tile_shape)`` where it is the same in every program (constants, ``arange``, what is
computed from them only); a scalar is ``(P,)`` or ``()``.  NumPy's broadcasting lines the
two forms up, so a launch costs a number of NumPy calls proportional to the ops executed,
never to the programs or the elements.  Programs are numbered with the grid's first axis
fastest (as the SIMT interpreter numbers threads), which is the order errors search in.

Pointwise ops are the SIMT interpreter's own table (:data:`accy.backends.interpreter.EVAL`),
so elementwise results are bit for bit the SIMT numpy backend's.  A fold runs one iteration
at a time for all programs; where its bounds differ between programs (a causal attention's
key loop) it runs until the longest is done with an *active mask* of programs, as does an
``if`` on a condition that differs between programs: loads, stores, atomics and the bounds
and division checks see active programs only.  Outputs are written into scratch copies and
committed only when the launch succeeds, so a failing launch writes nothing.

Offsets and masks are held unevaluated where they are affine in the tile positions and the and
of one range per axis (:class:`Affine`, :class:`Conjunction`): an access then copies each
program's box of elements through a strided view of the buffer, never forming a masked-off
element's address.  ``check_memory`` (races, unwritten outputs) applies to SIMT launches only.
"""

from __future__ import annotations

import math
import weakref

import attrs
import numpy as np

from ..dsl.ir import Block, Graph, Op, Value
from ..dsl.ops import REDUCTIONS, SIMT_OPS, TILE_OPS, AtomicKind, Combine, Precision
from ..dsl.types import TileType, element_type
from ..errors import ArgumentError, ExecutionError, OutOfBoundsError
from . import numerics
from .arguments import Binding, strided_view
from .diagnostics import division_by_zero, out_of_bounds, thread_text
from .interpreter import _WIDE, DEFAULT_MEMORY_CAP, EVAL, _apply_atomics, _last_uses, _step_without_wrap, _uses

F32 = np.dtype(np.float32)
_AFFINE = frozenset({"add", "sub", "mul"})  # index arithmetic an Affine tile stays affine under
_LARGEST = np.maximum.reduce  # one NumPy call for a bounds check


# ----------------------------------------------------------------------------- reductions


def _as_f32(x: np.ndarray) -> tuple[np.ndarray, bool]:
    """f16, bf16 and fp8 elements as f32 (exactly), and whether they were converted."""
    if numerics._narrow(x.dtype):
        return x.astype(F32), True
    return x, False


def _zero_signs(result: np.ndarray, x: np.ndarray, combine: Combine, axis: int, running: bool) -> np.ndarray:
    """Max and min order -0.0 below +0.0, as the scalar max and min (numerics.maximum):
    NumPy's ufuncs keep whichever zero comes second.  A zero result of max is +0.0 if any
    +0.0 took part, of min -0.0 if any -0.0 did (over the prefix, for a scan)."""
    zero = result == 0
    if result.dtype.kind != "f" or not np.any(zero):
        return result
    wanted = (x == 0) & (np.signbit(x) == (combine is Combine.MIN))  # the zero that wins ties
    seen = np.logical_or.accumulate(wanted, axis=axis) if running else np.any(wanted, axis=axis)
    winner, loser = (0.0, -0.0) if combine is Combine.MAX else (-0.0, 0.0)
    return np.where(zero, np.where(seen, winner, loser).astype(result.dtype), result)


_UFUNCS = {Combine.SUM: np.add, Combine.PROD: np.multiply, Combine.MAX: np.maximum, Combine.MIN: np.minimum,
           Combine.AND: np.bitwise_and, Combine.OR: np.bitwise_or, Combine.XOR: np.bitwise_xor}


def reduce_along(x: np.ndarray, combine: Combine, axis: int, *, running: bool = False) -> np.ndarray:
    """``x`` reduced (``running``: scanned) along ``axis`` with ``combine``, as the scalar op
    folded: integers wrap; f16, bf16 and fp8 compute in f32 (exact for max and min) and each
    result rounds once to the element type."""
    dtype = x.dtype
    y, widened = _as_f32(x)
    ufunc = _UFUNCS[combine]
    kwargs = {} if widened or dtype.kind == "b" else {"dtype": dtype}  # integers accumulate in their type
    result = (ufunc.accumulate if running else ufunc.reduce)(y, axis=axis, **kwargs)
    if combine in (Combine.MAX, Combine.MIN):
        result = _zero_signs(result, y, combine, axis, running)
    return result.astype(dtype, copy=False)


def arg_along(x: np.ndarray, combine: Combine, axis: int) -> np.ndarray:
    """np.argmax / np.argmin along ``axis``: the first of equals, the first NaN if any."""
    y, _ = _as_f32(x)
    return (np.argmax if combine is Combine.MAX else np.argmin)(y, axis=axis).astype(np.int64, copy=False)


# ----------------------------------------------------------------------------- dot


def round_to_tf32(x: np.ndarray) -> np.ndarray:
    """f32 values rounded to tf32 as ``cvt.rna.tf32.f32``: 10 mantissa bits, to nearest, ties
    away from zero (on the bits: add half of the dropped part, then drop it); NaN and
    infinities unchanged."""
    bits = np.ascontiguousarray(x, F32).view(np.uint32)
    finite = (bits & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
    rounded = (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    return np.where(finite, rounded, bits).view(F32)


def dot(a: np.ndarray, b: np.ndarray, acc: np.ndarray, precision: Precision) -> np.ndarray:
    """``acc + a @ b`` over stacks of programs: inputs converted exactly to the accumulator's
    type, products and sums in it (integers wrap in i32)."""
    c = acc.dtype
    if precision is Precision.TF32:
        a, b = round_to_tf32(a), round_to_tf32(b)
    a, b = a.astype(c, copy=False), b.astype(c, copy=False)
    if a.shape[0] == 1 and b.shape[0] == 1:  # the same in every program: one product
        product = (a[0] @ b[0])[None]
    else:
        product = np.matmul(a, b)
    return np.add(acc, product, dtype=c)


# ----------------------------------------------------------------------------- unevaluated index tiles and masks
#
# Offsets are mostly affine in the tile positions (``rows[:, None] * n + cols``) and masks the and of
# one condition per axis (``(rows[:, None] < m) & (cols[None, :] < n)``).  Held in those forms, a
# load or store reads or writes each program's box of elements through one strided view of the
# buffer, without materialising (P, *shape) offsets, and touches only the elements its mask holds;
# any other use evaluates them (TileInterpreter.env does, on first reading).


@attrs.frozen(eq=False)
class Affine:
    """An index tile ``base + sum_d coefs[d] * i_d`` (i_d: an element's position along tile axis d):
    ``base`` a scalar ((P,) or ()), ``coefs`` the same in every program."""

    base: object
    coefs: tuple
    shape: tuple[int, ...]

    def evaluate(self, programs=None) -> np.ndarray:
        """The offsets (of ``programs`` only, where given), wrapping as the graph's index arithmetic."""
        base = np.asarray(self.base, np.int64)
        if programs is not None and base.ndim:
            base = base[programs]
        lead = base.shape if base.ndim else (1,)
        rank = len(self.shape)
        out = base.reshape(lead + (1,) * rank)
        for d, (c, n) in enumerate(zip(self.coefs, self.shape)):
            if c != 0 and n > 1:
                out = out + (np.arange(n, dtype=np.int64) * np.int64(c)).reshape((1,) * (d + 1) + (n,) + (1,) * (
                    rank - d - 1))
        return np.broadcast_to(out, out.shape[:1] + self.shape)


@attrs.frozen(eq=False)
class Conjunction:
    """A mask held as the and of its ``factors``: bool arrays that broadcast to (P or 1, *shape),
    each as compact as its broadcasting allows."""

    factors: tuple
    shape: tuple[int, ...]

    def evaluate(self, programs=None) -> np.ndarray:
        factors = [f[programs] if programs is not None and f.shape[0] > 1 else f for f in self.factors]
        out = factors[0]
        for f in factors[1:]:
            out = np.logical_and(out, f)
        return np.broadcast_to(out, out.shape[:1] + self.shape)


def _compact(x: np.ndarray) -> np.ndarray:
    """A broadcast view without its broadcast axes (length 1 again): what np.broadcast_to made it from."""
    return x[tuple(slice(0, 1) if stride == 0 and n > 1 else slice(None) for stride, n in zip(x.strides, x.shape))]


def _unit_axes(old: tuple[int, ...], new: tuple[int, ...]):
    """For a reshape that only inserts or removes axes of length 1: each new axis's old axis (None
    for an inserted one); else None."""
    kept = [d for d, n in enumerate(old) if n != 1]
    if [old[d] for d in kept] != [n for n in new if n != 1]:
        return None
    it = iter(kept)
    return [next(it) if n != 1 else None for n in new]


class _Values(dict):
    """The interpreter's values: a lazily held one (Affine, Conjunction) is evaluated on first reading."""

    __slots__ = ("lazy",)

    def __init__(self):
        super().__init__()
        self.lazy: dict = {}

    def __missing__(self, value):
        evaluated = self[value] = self.lazy[value].evaluate()
        return evaluated


@attrs.frozen
class _Plan:
    """How a tile access reaches memory: the ``fast`` programs each through the box of ``lengths``
    at ``lows`` (a strided view from their ``starts``), the ``rest`` (masks that are not boxes, boxes
    that stick out of the buffer) element by element."""

    fast: np.ndarray  # program numbers
    rest: np.ndarray
    starts: np.ndarray  # per fast program: the buffer offset of its box's first element
    lows: tuple[int, ...]
    lengths: tuple[int, ...]
    strides: tuple[int, ...]  # elements per step along each tile axis
    uniform: bool  # every program's box is one and the same: the value is the same in every program

    @property
    def span(self) -> int:
        return sum(c * (n - 1) for c, n in zip(self.strides, self.lengths)) + 1

    def window(self, memory: np.ndarray, writeable: bool = False) -> np.ndarray:
        """Every box of the buffer, by its first element (the boxes that fit in it)."""
        item = memory.itemsize
        return strided_view(memory, (memory.size - self.span + 1,) + self.lengths,
                            (item,) + tuple(c * item for c in self.strides), writeable=writeable)

    def box(self) -> tuple[slice, ...]:
        return tuple(slice(lo, lo + n) for lo, n in zip(self.lows, self.lengths))

    def rows(self):
        """The fast programs as a slice where they are consecutive, else their numbers."""
        fast = self.fast
        if fast.size and fast[-1] - fast[0] + 1 == fast.size:
            return slice(int(fast[0]), int(fast[-1]) + 1)
        return fast

    def boxes(self, memory: np.ndarray, writeable: bool = False) -> np.ndarray:
        """The fast programs' boxes, (programs, *lengths): one strided view of the buffer where
        their starts step evenly (a fresh copy, read-only, where they do not)."""
        starts = self.starts
        step = int(starts[1] - starts[0]) if starts.size > 1 else 0
        if step >= 0 and (starts.size < 3 or np.all(np.diff(starts) == step)):
            item = memory.itemsize
            return strided_view(memory[int(starts[0]):], (starts.size,) + self.lengths, (
                step * item,) + tuple(c * item for c in self.strides), writeable=writeable)
        return None if writeable else self.window(memory)[starts]


# ----------------------------------------------------------------------------- the schedule


def _blocks(graph: Graph):
    yield graph.body
    for op in graph.body.walk():
        yield from op.regions


_schedules: "weakref.WeakKeyDictionary[Graph, dict]" = weakref.WeakKeyDictionary()


def _schedule(graph: Graph) -> dict[Block, tuple[tuple, ...]]:
    """Per block: each op as ``(op, handler, fn, result, dead)``: the TileInterpreter method
    running a structural, checked or tile op (else None), the pointwise EVAL entry (its
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
                handler = getattr(TileInterpreter, "op_" + op.opcode, None)
                if len(op.results) == 1 and isinstance(op.results[0].type, TileType):
                    if op.opcode in _AFFINE and op.result.type.dtype.is_index:
                        handler = TileInterpreter.index_arithmetic
                    elif op.opcode == "and" and op.result.type.dtype.is_bool:
                        handler = TileInterpreter.conjunction
                fn = None
                if handler is None:
                    fn = EVAL[op.opcode]
                    if op.operands and not numerics._narrow(element_type(op.operands[0].type).numpy):
                        fn = _WIDE.get(fn, fn)
                entries.append((op, handler, fn, op.results[0] if op.results else None, frees.get(op, ())))
            steps[block] = tuple(entries)
        _schedules[graph] = steps
    return steps


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
    trip_bytes: int  # a bound on the bytes one trip of one program holds (sizes the chunks)


_WRITES = frozenset({"store", "atomic", "tile_store", "tile_atomic"})
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
                fn = _WIDE.get(fn, fn)  # a ufunc then combines in place
            combines.append(_Combine(owner, (owner.operands[1 if first else 0],), fn, first))
        else:
            return None
    trip_bytes = 8  # the trip's index
    for inner in ops:
        trip_bytes += sum(_bytes(r) for r in inner.results)
        if inner.opcode == "dot":  # its inputs converted to the accumulator's type
            item = element_type(inner.result.type).numpy.itemsize
            trip_bytes += sum(math.prod(v.type.shape) * item for v in inner.operands[:2])
    captured = tuple(sorted(_uses(region) - defined, key=id))
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


# ----------------------------------------------------------------------------- execution


class TileInterpreter:
    """One launch of a tile graph over NumPy buffers (flat views; outputs are scratch copies)."""

    def __init__(self, graph: Graph, buffers: dict[str, np.ndarray], scalars: dict[str, object],
                 extents: tuple[int, ...], *, memory_cap: int = DEFAULT_MEMORY_CAP):
        self.graph = graph
        self.memory_cap = memory_cap  # bytes of temporaries a vectorised fold's chunk may hold
        self.fold_plans = _fold_plans_of(graph)
        self.buffers = buffers
        self.env = _Values()
        self.lazy = self.env.lazy  # values held as an Affine or a Conjunction
        for p, v in zip(graph.scalars, graph.body.args):
            self.env[v] = scalars[p.name]
        self.axes = graph.lane_axes(extents)  # the grid's axes, first fastest
        self.programs = math.prod(extents)  # in a vectorised fold's body: (trip, program) pairs
        self.launched = self.programs
        self.active = None  # None: every program is active; else a (P,) bool array
        self.steps = _schedule(graph)

    def run(self) -> None:
        with np.errstate(all="ignore"):  # IEEE results (inf, NaN) are the semantics, not warnings
            self.run_block(self.graph.body)

    def run_block(self, block: Block) -> None:
        env, lazy = self.env, self.lazy
        for op, handler, fn, result, dead in self.steps[block]:
            if handler is None:
                env[result] = fn(*[env[v] for v in op.operands])
            else:
                handler(self, op)
            for v in dead:
                env.pop(v, None)
                lazy.pop(v, None)

    # -- the active programs ------------------------------------------------------
    def _per_program(self, mask: np.ndarray, ndim: int) -> np.ndarray:
        """A (P,) mask shaped to broadcast against a value of ``ndim`` dimensions."""
        return mask.reshape(mask.shape + (1,) * (ndim - 1)) if ndim else mask

    def _where_active(self, bad):
        """``bad`` (a scalar's or a tile's) restricted to the active programs."""
        bad = np.asarray(bad)
        if self.active is None:
            return bad
        return bad & self._per_program(self.active, max(bad.ndim, 1))

    def _first_bad(self, bad, values, programs=None):
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

    def _program(self, program: int) -> str:
        return thread_text(self.axes, program % self.launched)  # a (trip, program) pair: its program

    def _masked(self, mask: np.ndarray) -> np.ndarray:
        """A tile access's mask and the active programs together."""
        return mask if self.active is None else mask & self._per_program(self.active, mask.ndim)

    # -- scalars ---------------------------------------------------------------------
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
        self.env[op.result] = numerics.cast(self.env[value], element_type(value.type), element_type(op.result.type))

    def _division(self, op: Op, integer_op, float_op) -> None:
        a, b = (self.env[v] for v in op.operands)
        if not element_type(op.result.type).is_int:
            if not numerics._narrow(np.asarray(b).dtype):
                float_op = _WIDE.get(float_op, float_op)
            self.env[op.result] = float_op(a, b)
            return
        zero = np.asarray(b) == 0
        bad = self._first_bad(zero, b)
        if bad is not None:
            raise division_by_zero(op, self._program(bad[0]), who="program")
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
        if isinstance(held, Affine):
            self.lazy[op.result] = Affine(held.base, held.coefs, shape)  # a broadcast axis had length 1
        elif isinstance(held, Conjunction):
            self.lazy[op.result] = Conjunction(held.factors, shape)
        else:
            x = self.env[op.operands[0]]
            self.env[op.result] = np.broadcast_to(x, x.shape[:1] + shape)

    def op_reshape(self, op: Op) -> None:
        shape = op.attrs.shape
        held = self.lazy.get(op.operands[0])
        axes = _unit_axes(held.shape, shape) if held is not None else None
        if isinstance(held, Affine) and axes is not None:
            self.lazy[op.result] = Affine(held.base, tuple(0 if d is None else held.coefs[d] for d in axes), shape)
        elif isinstance(held, Conjunction) and axes is not None:
            self.lazy[op.result] = Conjunction(tuple(f.reshape(f.shape[:1] + tuple(
                1 if d is None else f.shape[d + 1] for d in axes)) for f in held.factors), shape)
        else:
            x = self.env[op.operands[0]]
            self.env[op.result] = x.reshape(x.shape[:1] + shape)

    def op_trans(self, op: Op) -> None:
        perm = op.attrs.perm
        held = self.lazy.get(op.operands[0])
        shape = tuple(op.result.type.shape)
        if isinstance(held, Affine):
            self.lazy[op.result] = Affine(held.base, tuple(held.coefs[k] for k in perm), shape)
        elif isinstance(held, Conjunction):
            self.lazy[op.result] = Conjunction(tuple(np.transpose(f, (0,) + tuple(k + 1 for k in perm))
                                                     for f in held.factors), shape)
        else:
            self.env[op.result] = np.transpose(self.env[op.operands[0]], (0,) + tuple(k + 1 for k in perm))

    def op_arange(self, op: Op) -> None:
        self.lazy[op.result] = Affine(np.int64(0), (1,), (op.attrs.n,))

    def index_arithmetic(self, op: Op) -> None:
        """add, sub and mul of index tiles: Affine where both are (and for mul one is a splat of a
        value the same in every program), else evaluated as the op table's."""
        a, b = (self.lazy.get(v) for v in op.operands)
        name = op.opcode
        if isinstance(a, Affine) and isinstance(b, Affine):
            if name == "mul" and not any(a.coefs) and np.ndim(a.base) == 0:
                a, b = b, a
            if name != "mul":
                sign = np.int64(1 if name == "add" else -1)
                self.lazy[op.result] = Affine(EVAL[name](a.base, b.base), tuple(
                    np.int64(x) + sign * np.int64(y) for x, y in zip(a.coefs, b.coefs)), a.shape)
                return
            if not any(b.coefs) and np.ndim(b.base) == 0:
                c = np.int64(b.base)
                self.lazy[op.result] = Affine(EVAL["mul"](a.base, c), tuple(np.int64(x) * c for x in a.coefs), a.shape)
                return
        fn = EVAL[name]
        self.env[op.result] = _WIDE.get(fn, fn)(*[self.env[v] for v in op.operands])

    def conjunction(self, op: Op) -> None:
        """and of bool tiles: held as its factors (each condition at its own axes' shape)."""
        factors = []
        for v in op.operands:
            held = self.lazy.get(v)
            factors.extend(held.factors if isinstance(held, Conjunction) else (_compact(np.asarray(self.env[v])),))
        self.lazy[op.result] = Conjunction(tuple(factors), tuple(op.result.type.shape))

    # -- reductions, scans, dot ------------------------------------------------------------
    @staticmethod
    def _scalar_or_tile(x: np.ndarray):
        """A result with the tile axes reduced away is a scalar: ``()`` where it is the same
        in every program."""
        return x[0] if x.shape == (1,) else x

    def op_reduce(self, op: Op) -> None:
        x = np.asarray(self.env[op.operands[0]])
        self.env[op.result] = self._scalar_or_tile(reduce_along(x, op.attrs.op, op.attrs.axis + 1))

    def op_argreduce(self, op: Op) -> None:
        x = np.asarray(self.env[op.operands[0]])
        self.env[op.result] = self._scalar_or_tile(arg_along(x, op.attrs.op, op.attrs.axis + 1))

    def op_scan(self, op: Op) -> None:
        x = np.asarray(self.env[op.operands[0]])
        self.env[op.result] = reduce_along(x, op.attrs.op, op.attrs.axis + 1, running=True)

    def op_dot(self, op: Op) -> None:
        a, b, acc = (self.env[v] for v in op.operands)
        self.env[op.result] = dot(a, b, acc, op.attrs.precision)

    # -- memory ------------------------------------------------------------------------------
    def _checked(self, op: Op, offsets, mask, size: int, programs=None) -> None:
        """The OutOfBoundsError of the first active element outside [0, size), if any (``programs``:
        the program of each leading row, where the arrays hold some programs only)."""
        offsets = np.asarray(offsets, np.int64)
        if _LARGEST(offsets.view(np.uint64), axis=None, initial=0) < size:  # a negative index is huge unsigned
            return
        outside = offsets.view(np.uint64) >= size
        bad = self._first_bad(outside if mask is None else outside & mask, offsets, programs)
        if bad is not None:
            raise out_of_bounds(op, bad[1], size, self._program(bad[0]), who="program")

    def _plan(self, op: Op, size: int) -> _Plan | None:
        """The boxes a tile access reaches, where its offsets are an Affine tile with non-negative
        steps and its mask is one contiguous range per axis in each program; else None.  (Called
        for every access: the common cases, a factor that masks nothing and one the same in every
        program, cost a NumPy call or two.)"""
        affine = self.lazy.get(op.operands[0])
        if not isinstance(affine, Affine) or any(c < 0 for c in affine.coefs):
            return None
        held = self.lazy.get(op.operands[-1])
        factors = held.factors if isinstance(held, Conjunction) else (_compact(np.asarray(self.env[op.operands[-1]])),)
        shape, programs = affine.shape, self.programs
        live, along = self.active, {}
        for f in factors:
            if f.all():
                continue  # masks nothing
            axes = [d for d in range(len(shape)) if f.shape[d + 1] > 1]
            if len(axes) > 1:
                return None
            if not axes:  # a condition on the program, not the element
                g = f.reshape(f.shape[:1])
                live = g if live is None else live & g
            else:
                (d,) = axes
                g = f.reshape(f.shape[0], shape[d])
                along[d] = g if d not in along else along[d] & g
        lows, lengths = [0] * len(shape), list(shape)  # per axis: an int, or per program (P,)
        for d, g in along.items():
            count = np.count_nonzero(g, axis=1)
            first = np.argmax(g, axis=1)
            if not np.all((count == 0) | (shape[d] - np.argmax(g[:, ::-1], axis=1) - first == count)):
                return None  # not one range
            lows[d], lengths[d] = (int(first[0]), int(count[0])) if g.shape[0] == 1 else (first, count)
        some = None if live is None else np.broadcast_to(live, (programs,))
        for n in lengths:
            if np.ndim(n):
                some = n > 0 if some is None else some & (n > 0)
            elif n == 0:
                some = np.zeros(programs, bool)
        nothing = np.zeros(0, np.int64)
        if some is not None and not some.any():
            return _Plan(nothing, nothing, nothing, (0,) * len(shape), shape, (0,) * len(shape), False)
        ref = int(np.argmax(some)) if some is not None else 0
        low = tuple(int(x[ref]) if np.ndim(x) else x for x in lows)
        length = tuple(int(x[ref]) if np.ndim(x) else x for x in lengths)
        same = some
        for x, want in zip(lows + lengths, low + length):
            if np.ndim(x):
                same = (x == want) if same is None else same & (x == want)
        starts = np.asarray(affine.base, np.int64)
        for c, lo in zip(affine.coefs, low):
            if c and lo:
                starts = starts + np.int64(c) * np.int64(lo)
        plan = _Plan(nothing, nothing, nothing, low, length, tuple(int(c) for c in affine.coefs), False)
        inside = (starts >= 0) & (starts <= size - plan.span)
        fast = inside if same is None else same & inside
        if np.ndim(fast) == 0:  # the same box in every program
            if not fast:
                return attrs.evolve(plan, rest=np.arange(programs))
            return attrs.evolve(plan, fast=np.arange(programs), starts=np.broadcast_to(starts, (programs,)),
                                uniform=np.ndim(starts) == 0)
        fast = np.broadcast_to(fast, (programs,))
        chosen = np.broadcast_to(starts, (programs,))[fast]
        rest = ~fast if some is None else some & ~fast
        return attrs.evolve(plan, fast=np.flatnonzero(fast), rest=np.flatnonzero(rest), starts=chosen,
                            uniform=bool(fast.all()) and np.ndim(affine.base) == 0 and bool(np.all(chosen == chosen[0])))

    def _some_programs(self, op: Op, programs: np.ndarray):
        """The offsets and mask of a tile access in ``programs`` only (active ones: a plan's rest)."""
        affine, held = self.lazy[op.operands[0]], self.lazy.get(op.operands[-1])
        if isinstance(held, Conjunction):
            mask = held.evaluate(programs)
        else:
            mask = np.asarray(self.env[op.operands[-1]])
            mask = mask[programs] if mask.shape[0] > 1 else mask
        return affine.evaluate(programs), mask

    def _gather(self, op: Op, memory, offsets, mask, other, programs=None):
        """Masked elements of ``memory`` (``mask`` None: all of them), checked; masked-off offsets are
        never read."""
        self._checked(op, offsets, mask, memory.size, programs)
        if mask is None:
            return memory[offsets]
        if memory.size == 0:  # every element is masked off
            return np.broadcast_to(other, np.broadcast_shapes(offsets.shape, mask.shape, other.shape))
        safe = np.where(mask, offsets, 0)  # masked-off elements read element 0, never their own offset
        return np.where(mask, memory[safe], other).astype(memory.dtype, copy=False)

    def op_tile_load(self, op: Op) -> None:
        memory = self.buffers[op.attrs["buffer"]]
        other = np.asarray(self.env[op.operands[1]], memory.dtype)
        other = self._per_program(other, 1 + len(op.result.type.shape)) if other.ndim else other
        plan = self._plan(op, memory.size)
        if plan is None:
            offsets, mask = self.env[op.operands[0]], self.env[op.operands[2]]
            every = self.active is None and bool(np.all(mask))
            self.env[op.result] = self._gather(op, memory, offsets, None if every else self._masked(mask), other)
            return
        shape = op.result.type.shape
        whole = plan.lengths == shape  # every element of the box (its lows are then 0)
        if plan.uniform and whole:  # the same elements in every program
            self.env[op.result] = plan.window(memory)[plan.starts[0]][None].copy()
            return
        if whole and plan.fast.size == self.programs:
            boxes = plan.boxes(memory)
            self.env[op.result] = boxes if boxes.flags.owndata else np.array(boxes)  # a view of memory: copied
            return
        uniform = plan.uniform and other.ndim == 0
        result = np.empty((1 if uniform else self.programs,) + shape, memory.dtype)
        rows = slice(0, 1) if uniform else plan.rows()
        if plan.fast.size and isinstance(rows, slice) and other.ndim == 0:
            # `other` where no box is: the rows before and after the fast ones, the slabs around each box
            result[:rows.start], result[rows.stop:] = other, other
            for d, side in enumerate(plan.box()):
                before = (rows,) + (slice(None),) * d
                result[before + (slice(0, side.start),)] = other
                result[before + (slice(side.stop, None),)] = other
        else:
            result[...] = other
        if plan.fast.size:
            boxes = plan.window(memory)[plan.starts[:1]] if uniform else plan.boxes(memory)
            result[(rows,) + plan.box()] = boxes
        if plan.rest.size:
            offsets, mask = self._some_programs(op, plan.rest)
            rest_other = other[plan.rest] if other.ndim and other.shape[0] > 1 else other
            result[plan.rest] = self._gather(op, memory, offsets, mask, rest_other, plan.rest)
        self.env[op.result] = result

    def _elements(self, op: Op, offsets, value, mask, memory, programs=None):
        """The active elements of a tile store or atomic: their checked offsets and values (flat)."""
        every = mask is None or (self.active is None and programs is None and bool(np.all(mask)))
        if not every and programs is None:
            mask = self._masked(mask)
        self._checked(op, offsets, None if every else mask, memory.size, programs)
        shape = np.broadcast_shapes(np.shape(offsets), np.shape(value), () if every else np.shape(mask))
        offsets, value = np.broadcast_to(offsets, shape), np.broadcast_to(np.asarray(value, memory.dtype), shape)
        if every:
            return offsets.reshape(-1), value.reshape(-1)
        keep = np.broadcast_to(mask, shape)
        return offsets[keep], value[keep]

    def op_tile_store(self, op: Op) -> None:
        memory = self.buffers[op.attrs["buffer"]]
        value = self.env[op.operands[1]]
        plan = self._plan(op, memory.size)
        if plan is None:
            offsets, mask = self.env[op.operands[0]], self.env[op.operands[2]]
            elements, values = self._elements(op, offsets, value, mask, memory)
            memory[elements] = values  # one of several elements at one address wins
            return
        values = np.broadcast_to(np.asarray(value, memory.dtype), (self.programs,) + op.operands[1].type.shape)
        if plan.rest.size:  # checked before anything is written
            offsets, mask = self._some_programs(op, plan.rest)
            elements, rest = self._elements(op, offsets, values[plan.rest], mask, memory, plan.rest)
        if plan.fast.size:
            boxes = plan.boxes(memory, writeable=True)
            chosen = values[(plan.rows(),) + plan.box()]
            if boxes is not None:
                boxes[...] = chosen
            else:  # starts that do not step evenly: box by box through the window of every box
                plan.window(memory, writeable=True)[plan.starts] = chosen
        if plan.rest.size:
            memory[elements] = rest

    def op_tile_atomic(self, op: Op) -> None:
        offsets, value, mask = (self.env[v] for v in op.operands)
        memory = self.buffers[op.attrs["buffer"]]
        elements, values = self._elements(op, offsets, value, mask, memory)
        if op.attrs["op"] is AtomicKind.ADD:
            np.add.at(memory, elements, values)  # every duplicate applies, in order (integers wrap)
        else:  # max and min as the scalar ops (NaN, -0.0 < +0.0), duplicates in order
            _apply_atomics(op.attrs["op"].value, memory, elements, [values])

    # scalar loads, stores and atomics in a tile program: once per (active) program
    def _scalar_index(self, op: Op, idx, memory) -> np.ndarray:
        idx = np.asarray(idx, np.int64)
        self._checked(op, idx, None, memory.size)
        return idx

    def _active_programs(self, *values):
        """Scalars broadcast over the programs, the active ones only."""
        values = [np.broadcast_to(v, (self.programs,)) for v in values]
        return values if self.active is None else [v[self.active] for v in values]

    def op_load(self, op: Op) -> None:
        memory = self.buffers[op.attrs["buffer"]]
        idx = self._scalar_index(op, self.env[op.operands[0]], memory)
        if memory.size == 0:  # only inactive programs get here
            self.env[op.result] = np.zeros(idx.shape, memory.dtype)
            return
        outside = idx.view(np.uint64) >= memory.size  # inactive programs only: any address will do
        self.env[op.result] = memory[np.where(outside, 0, idx) if np.any(outside) else idx]

    def op_store(self, op: Op) -> None:
        memory = self.buffers[op.attrs["buffer"]]
        idx = self._scalar_index(op, self.env[op.operands[0]], memory)
        value = np.asarray(self.env[op.operands[1]], memory.dtype)
        if self.active is None and idx.ndim == 0 and value.ndim == 0:
            memory[idx] = value  # the same store in every program
            return
        idx, value = self._active_programs(idx, value)
        memory[idx] = value

    def op_atomic(self, op: Op) -> None:
        """Atomics take effect in program order; each program gets the old value that order gives it."""
        memory = self.buffers[op.attrs["buffer"]]
        idx = self._scalar_index(op, self.env[op.operands[0]], memory)
        values = [np.asarray(self.env[v], memory.dtype) for v in op.operands[1:]]
        idx, *values = self._active_programs(idx, *values)
        old = _apply_atomics(op.attrs["op"].value, memory, np.ascontiguousarray(idx), values)
        result = np.zeros(self.programs, memory.dtype)
        result[slice(None) if self.active is None else self.active] = old
        self.env[op.result] = result

    # -- control -------------------------------------------------------------------------------
    def _merge(self, mask: np.ndarray, a, b):
        """``a`` in the programs of ``mask``, else ``b`` (scalars or tiles)."""
        ndim = max(np.ndim(a), np.ndim(b))
        return np.where(self._per_program(mask, ndim), a, b)

    def _region_values(self, region: Block) -> list:
        self.run_block(region)
        env, lazy = self.env, self.lazy
        values = [env[v] for v in region.terminator.operands]
        for v in region.terminator.operands:  # the region sets them anew when it runs again: a lazily
            if v.block is region:  # held one must not find its previous evaluation still there
                env.pop(v, None)
                lazy.pop(v, None)
        return values

    def op_if(self, op: Op) -> None:
        cond = self.env[op.operands[0]]
        then, otherwise = op.regions[0], (op.regions[1] if len(op.regions) > 1 else None)
        if np.ndim(cond) == 0:  # the same in every program: one branch runs
            region = then if cond else otherwise
            values = self._region_values(region) if region is not None else []
        else:
            outer = self.active
            taken = cond if outer is None else cond & outer
            skipped = ~cond if outer is None else ~cond & outer
            branches = []
            try:
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
                values = [self._merge(cond, a, b) for a, b in zip(*branches)]
        for r, value in zip(op.results, values):
            self.env[r] = value

    def _iterate(self, region: Block, i, accs) -> list:
        env = self.env
        env[region.args[0]] = i
        for a, v in zip(region.args[1:], accs):
            env[a] = v
        return self._region_values(region)

    def op_fold(self, op: Op) -> None:
        start, stop, *accs = (self.env[v] for v in op.operands)
        step = op.attrs["step"]
        (region,) = op.regions
        if np.ndim(start) == 0 and np.ndim(stop) == 0:  # the same trips in every program
            trips = range(int(start), int(stop), step)
            plan = self.fold_plans.get(op)
            budget = min(self.memory_cap, _CHUNK_BYTES)
            chunk = 0 if plan is None else min(len(trips), budget // max(1, self.programs * plan.trip_bytes))
            if chunk >= 2:
                fold_counts.vectorised += 1
                accs = self._vectorised_fold(trips, chunk, region, plan, accs)
            else:
                fold_counts.looped += 1
                accs = self._looped(trips, region, accs)
        else:  # until the longest is done; a program that is done keeps its values and does nothing
            fold_counts.divergent += 1
            outer = self.active
            i = np.asarray(start, np.int64) + np.zeros(np.shape(stop), np.int64)
            try:
                while True:
                    inside = (i < stop) if step > 0 else (i > stop)
                    active = inside if outer is None else inside & outer
                    if not np.any(active):
                        break
                    self.active = active
                    new = self._iterate(region, i, accs)
                    accs = [self._merge(active, v, a) for v, a in zip(new, accs)]
                    i = np.where(active, _step_without_wrap(i, step), i)
            finally:
                self.active = outer
        for r, value in zip(op.results, accs):
            self.env[r] = value

    def _looped(self, trips: range, region: Block, accs) -> list:
        for i in trips:
            accs = self._iterate(region, np.int64(i), accs)
        return accs

    def _vectorised_fold(self, trips: range, chunk: int, region: Block, plan: _FoldPlan, accs) -> list:
        """The fold's trips ``chunk`` at a time, each chunk's terms combined in trip order.  A
        chunk that raises runs again trip by trip from its start (its body writes nothing): the
        error is then the one the first failing trip meets first, as a loop raises it."""
        accs = list(accs)
        for first in range(0, len(trips), chunk):
            part = trips[first:first + chunk]
            try:
                terms = self._all_trips(region, plan, part)
            except (OutOfBoundsError, ExecutionError):
                fold_counts.rerun += 1
                for v in plan.defined:
                    self.env.pop(v, None)
                    self.lazy.pop(v, None)
                return self._looped(trips[first:], region, accs)
            accs = [self._combined(c, acc, t, len(part)) for c, acc, t in zip(plan.combines, accs, terms)]
        return accs

    def _all_trips(self, region: Block, plan: _FoldPlan, part: range) -> list:
        """Run the body once for every trip of ``part``: each combine's terms, (trip, program) first."""
        env, lazy = self.env, self.lazy
        programs, active, trips = self.programs, self.active, len(part)
        saved = []
        if programs > 1:
            for v in plan.captured:
                held, value = lazy.get(v), dict.get(env, v, _ABSENT)
                saved.append((v, held, value))
                env.pop(v, None)
                if isinstance(held, Affine):
                    lazy[v] = Affine(_repeated(held.base, trips, programs), held.coefs, held.shape)
                elif isinstance(held, Conjunction):
                    lazy[v] = Conjunction(tuple(_repeated(f, trips, programs) for f in held.factors), held.shape)
                elif value is not _ABSENT:
                    env[v] = _repeated(value, trips, programs)
            if active is not None:
                self.active = np.tile(active, trips)
        self.programs = trips * programs
        try:
            env[region.args[0]] = np.repeat(np.arange(part.start, part.stop, part.step, dtype=np.int64), programs)
            for op, handler, fn, result, dead in self.steps[region]:
                if op in plan.skipped:  # its dead values are the terms: read below
                    continue
                if handler is None:
                    env[result] = fn(*[env[v] for v in op.operands])
                else:
                    handler(self, op)
                for v in dead:
                    env.pop(v, None)
                    lazy.pop(v, None)
            return [[env[t] for t in c.terms] for c in plan.combines]
        finally:
            self.programs, self.active = programs, active
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
        pairs = trips * self.programs
        if np.ndim(term) and np.shape(term)[0] == pairs and pairs > 1:
            return np.reshape(term, (trips, self.programs) + np.shape(term)[1:])
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


# ----------------------------------------------------------------------------- the backend's entry


def run_tiles(graph: Graph, binding: Binding, launch, *, debug_thread=None, memory_cap: int = DEFAULT_MEMORY_CAP) -> None:
    """Execute tile graph ``graph`` on checked arguments; outputs are written only on success."""
    if debug_thread is not None:
        raise ArgumentError("debug_thread replays one thread of a for_each launch; a for_each_tile kernel has "
                            "programs, not threads (run it with backend='numpy' and compare values instead)")
    if launch.lanes == 0:  # an empty grid runs nothing
        return
    scratch = binding.scratch()
    TileInterpreter(graph, scratch, binding.scalars, tuple(launch.extents), memory_cap=memory_cap).run()
    binding.commit(scratch)


# every op a tile program may hold has an implementation here: the tile ops, and the SIMT
# level's scalar ops except the ones that need threads (checked by the tests)
_THREADS_ONLY = frozenset({"for_each", "for_each_block", "shared", "barrier", "shuffle"})
IMPLEMENTED = frozenset(EVAL) | frozenset(
    name for name in SIMT_OPS | TILE_OPS if hasattr(TileInterpreter, "op_" + name))
assert IMPLEMENTED == (SIMT_OPS - _THREADS_ONLY) | TILE_OPS, sorted(
    IMPLEMENTED ^ ((SIMT_OPS - _THREADS_ONLY) | TILE_OPS))
