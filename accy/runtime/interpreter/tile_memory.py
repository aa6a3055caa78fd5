"""The tile interpreter's memory (a :class:`TileMemory`, a part of :class:`.tiles.TileInterpreter`):
index tiles and masks held unevaluated (:class:`Affine`, :class:`Conjunction`) and the index
arithmetic that keeps them so, the box plan that copies each program's elements through a strided
view of the buffer, gathers and scatters elsewhere, the bounds checks, and atomics."""

from __future__ import annotations

import attrs
import numpy as np

from ...dsl.ir import Op
from ...dsl.ops import AtomicKind
from ..arguments import strided_view
from ...diagnostics import out_of_bounds
from .atomics import apply_atomics
from .pointwise import EVAL, WIDE

_LARGEST = np.maximum.reduce  # one NumPy call for a bounds check


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


class TileMemory:
    """Tile and scalar loads, stores and atomics of ``interpreter``'s launch, with the lazily held
    index tiles and masks they read (the interpreter holds them, with the other values)."""

    def __init__(self, interpreter):
        self.interpreter = interpreter

    # -- index tiles and masks held unevaluated ---------------------------------------------
    def index_arithmetic(self, op: Op) -> None:
        """add, sub and mul of index tiles: Affine where both are (and for mul one is a splat of a
        value the same in every program), else evaluated as the op table's."""
        run = self.interpreter
        a, b = (run.lazy.get(v) for v in op.operands)
        name = op.opcode
        if isinstance(a, Affine) and isinstance(b, Affine):
            if name == "mul" and not any(a.coefs) and np.ndim(a.base) == 0:
                a, b = b, a
            if name != "mul":
                sign = np.int64(1 if name == "add" else -1)
                run.lazy[op.result] = Affine(EVAL[name](a.base, b.base), tuple(
                    np.int64(x) + sign * np.int64(y) for x, y in zip(a.coefs, b.coefs)), a.shape)
                return
            if not any(b.coefs) and np.ndim(b.base) == 0:
                c = np.int64(b.base)
                run.lazy[op.result] = Affine(EVAL["mul"](a.base, c), tuple(np.int64(x) * c for x in a.coefs), a.shape)
                return
        fn = EVAL[name]
        run.env[op.result] = WIDE.get(fn, fn)(*[run.env[v] for v in op.operands])

    def conjunction(self, op: Op) -> None:
        """and of bool tiles: held as its factors (each condition at its own axes' shape)."""
        run = self.interpreter
        factors = []
        for v in op.operands:
            held = run.lazy.get(v)
            factors.extend(held.factors if isinstance(held, Conjunction) else (_compact(np.asarray(run.env[v])),))
        run.lazy[op.result] = Conjunction(tuple(factors), tuple(op.result.type.shape))

    # -- memory ------------------------------------------------------------------------------
    def _checked(self, op: Op, offsets, mask, size: int, programs=None) -> None:
        """The OutOfBoundsError of the first active element outside [0, size), if any (``programs``:
        the program of each leading row, where the arrays hold some programs only)."""
        run = self.interpreter
        offsets = np.asarray(offsets, np.int64)
        if _LARGEST(offsets.view(np.uint64), axis=None, initial=0) < size:  # a negative index is huge unsigned
            return
        outside = offsets.view(np.uint64) >= size
        bad = run.first_bad(outside if mask is None else outside & mask, offsets, programs)
        if bad is not None:
            raise out_of_bounds(op, bad[1], size, run.program_name(bad[0]), who="program")

    def _plan(self, op: Op, size: int) -> _Plan | None:
        """The boxes a tile access reaches, where its offsets are an Affine tile with non-negative
        steps and its mask is one contiguous range per axis in each program; else None.  (Called
        for every access: the common cases, a factor that masks nothing and one the same in every
        program, cost a NumPy call or two.)"""
        run = self.interpreter
        affine = run.lazy.get(op.operands[0])
        if not isinstance(affine, Affine) or any(c < 0 for c in affine.coefs):
            return None
        held = run.lazy.get(op.operands[-1])
        factors = held.factors if isinstance(held, Conjunction) else (_compact(np.asarray(run.env[op.operands[-1]])),)
        shape, programs = affine.shape, run.programs
        live, along = run.active, {}
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
        # A step along an axis the box holds one element of is never taken: 0, so that a huge one
        # (masked-off offsets may be anything) cannot overflow the view's byte strides.
        steps = tuple(int(c) if n > 1 else 0 for c, n in zip(affine.coefs, length))
        plan = _Plan(nothing, nothing, nothing, low, length, steps, False)
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
        run = self.interpreter
        affine, held = run.lazy[op.operands[0]], run.lazy.get(op.operands[-1])
        if isinstance(held, Conjunction):
            mask = held.evaluate(programs)
        else:
            mask = np.asarray(run.env[op.operands[-1]])
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
        run = self.interpreter
        memory = run.buffers[op.attrs["buffer"]]
        other = np.asarray(run.env[op.operands[1]], memory.dtype)
        other = run.per_program(other, 1 + len(op.result.type.shape)) if other.ndim else other
        plan = self._plan(op, memory.size)
        if plan is None:
            offsets, mask = run.env[op.operands[0]], run.env[op.operands[2]]
            every = run.active is None and bool(np.all(mask))
            run.env[op.result] = self._gather(op, memory, offsets, None if every else run.masked(mask), other)
            return
        shape = op.result.type.shape
        whole = plan.lengths == shape  # every element of the box (its lows are then 0)
        if plan.uniform and whole:  # the same elements in every program
            run.env[op.result] = plan.window(memory)[plan.starts[0]][None].copy()
            return
        if whole and plan.fast.size == run.programs:
            boxes = plan.boxes(memory)
            run.env[op.result] = boxes if boxes.flags.owndata else np.array(boxes)  # a view of memory: copied
            return
        uniform = plan.uniform and other.ndim == 0
        result = np.empty((1 if uniform else run.programs,) + shape, memory.dtype)
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
        run.env[op.result] = result

    def _elements(self, op: Op, offsets, value, mask, memory, programs=None):
        """The active elements of a tile store or atomic: their checked offsets and values (flat)."""
        run = self.interpreter
        every = mask is None or (run.active is None and programs is None and bool(np.all(mask)))
        if not every and programs is None:
            mask = run.masked(mask)
        self._checked(op, offsets, None if every else mask, memory.size, programs)
        shape = np.broadcast_shapes(np.shape(offsets), np.shape(value), () if every else np.shape(mask))
        offsets, value = np.broadcast_to(offsets, shape), np.broadcast_to(np.asarray(value, memory.dtype), shape)
        if every:
            return offsets.reshape(-1), value.reshape(-1)
        keep = np.broadcast_to(mask, shape)
        return offsets[keep], value[keep]

    def op_tile_store(self, op: Op) -> None:
        run = self.interpreter
        memory = run.buffers[op.attrs["buffer"]]
        value = run.env[op.operands[1]]
        plan = self._plan(op, memory.size)
        if plan is None:
            offsets, mask = run.env[op.operands[0]], run.env[op.operands[2]]
            elements, values = self._elements(op, offsets, value, mask, memory)
            memory[elements] = values  # one of several elements at one address wins
            return
        values = np.broadcast_to(np.asarray(value, memory.dtype), (run.programs,) + op.operands[1].type.shape)
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
        """Every program's active elements apply, program by program (each one's in element order)."""
        run = self.interpreter
        offsets, value, mask = (run.env[v] for v in op.operands)
        memory = run.buffers[op.attrs["buffer"]]
        # Offsets, value and mask the same in every program (leading axis 1) are still one update
        # per program, unlike a load or a store, which evaluates them once for all.
        offsets = np.broadcast_to(offsets, (run.programs,) + np.shape(offsets)[1:])
        elements, values = self._elements(op, offsets, value, mask, memory)
        if op.attrs["op"] is AtomicKind.ADD:
            np.add.at(memory, elements, values)  # every duplicate applies, in order (integers wrap)
        else:  # max and min as the scalar ops (NaN, -0.0 < +0.0), duplicates in order
            apply_atomics(op.attrs["op"].value, memory, elements, [values])

    # scalar loads, stores and atomics in a tile program: once per (active) program
    def _scalar_index(self, op: Op, idx, memory) -> np.ndarray:
        idx = np.asarray(idx, np.int64)
        self._checked(op, idx, None, memory.size)
        return idx

    def _active_programs(self, *values):
        """Scalars broadcast over the programs, the active ones only."""
        run = self.interpreter
        values = [np.broadcast_to(v, (run.programs,)) for v in values]
        return values if run.active is None else [v[run.active] for v in values]

    def op_load(self, op: Op) -> None:
        run = self.interpreter
        memory = run.buffers[op.attrs["buffer"]]
        idx = self._scalar_index(op, run.env[op.operands[0]], memory)
        if memory.size == 0:  # only inactive programs get here
            run.env[op.result] = np.zeros(idx.shape, memory.dtype)
            return
        outside = idx.view(np.uint64) >= memory.size  # inactive programs only: any address will do
        run.env[op.result] = memory[np.where(outside, 0, idx) if np.any(outside) else idx]

    def op_store(self, op: Op) -> None:
        run = self.interpreter
        memory = run.buffers[op.attrs["buffer"]]
        idx = self._scalar_index(op, run.env[op.operands[0]], memory)
        value = np.asarray(run.env[op.operands[1]], memory.dtype)
        if run.active is None and idx.ndim == 0 and value.ndim == 0:
            memory[idx] = value  # the same store in every program
            return
        idx, value = self._active_programs(idx, value)
        memory[idx] = value

    def op_atomic(self, op: Op) -> None:
        """Atomics take effect in program order; each program gets the old value that order gives it."""
        run = self.interpreter
        memory = run.buffers[op.attrs["buffer"]]
        idx = self._scalar_index(op, run.env[op.operands[0]], memory)
        values = [np.asarray(run.env[v], memory.dtype) for v in op.operands[1:]]
        idx, *values = self._active_programs(idx, *values)
        old = apply_atomics(op.attrs["op"].value, memory, np.ascontiguousarray(idx), values)
        result = np.zeros(run.programs, memory.dtype)
        result[slice(None) if run.active is None else run.active] = old
        run.env[op.result] = result
