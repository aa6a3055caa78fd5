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
from .tile_tails import Tailed

_LARGEST = np.maximum.reduce  # one NumPy call for a bounds check
_WRITES = frozenset({"store", "atomic", "tile_store", "tile_atomic"})


# ----------------------------------------------------------------------------- unevaluated index tiles and masks
#
# Offsets are mostly affine in the tile positions (``rows[:, None] * n + cols``) and masks the and of
# one condition per axis (``(rows[:, None] < m) & (cols[None, :] < n)``).  Held in those forms, a
# load or store reads or writes each program's box of elements through one strided view of the
# buffer, without materialising (P, *shape) offsets, and touches only the elements its mask holds;
# any other use evaluates them (TileInterpreter.env does, on first reading).  A tensor access
# guards its offsets with its shape (``select(code == 0, offsets, marker)``, code a sum of a digit
# per dimension, each at that index's shape): the digits are held as a Sum, ``code == 0`` as a
# Conjunction (one factor per digit) and the select as a Select, so the access checks each factor
# against its mask at the factor's own shape (O(programs) for a row's index) and then reads the
# Affine offsets as any other.


@attrs.frozen(eq=False)
class Affine:
    """An index tile ``base + sum_d coefs[d] * i_d`` (i_d: an element's position along tile axis d):
    ``base`` a scalar ((P,) or ()), ``coefs`` the same in every program."""

    base: object
    coefs: tuple
    shape: tuple[int, ...]

    def terms(self, programs=None) -> tuple:
        """The base and the step along each axis as compact arrays (see :class:`Sum`)."""
        base = np.asarray(self.base, np.int64)
        if programs is not None and base.ndim:
            base = base[programs]
        rank = len(self.shape)
        out = [base.reshape((base.shape if base.ndim else (1,)) + (1,) * rank)]
        for d, (c, n) in enumerate(zip(self.coefs, self.shape)):
            if c != 0 and n > 1:
                out.append((np.arange(n, dtype=np.int64) * np.int64(c)).reshape((1,) * (d + 1) + (n,) + (1,) * (
                    rank - d - 1)))
        return tuple(out)

    def evaluate(self, programs=None) -> np.ndarray:
        """The offsets (of ``programs`` only, where given), wrapping as the graph's index arithmetic."""
        return Sum(self.terms(programs), self.shape).evaluate()

    def broadcast(self, shape):
        # an axis broadcast from length 1 holds one position: its step is never taken
        return Affine(self.base, tuple(c if n > 1 else 0 for c, n in zip(self.coefs, self.shape)), shape)

    def reshaped(self, axes, shape):
        return Affine(self.base, tuple(0 if d is None else self.coefs[d] for d in axes), shape)

    def transposed(self, perm, shape):
        return Affine(self.base, tuple(self.coefs[k] for k in perm), shape)

    def per_program(self, fn):
        return Affine(fn(self.base), self.coefs, self.shape)


class _Compacts:
    """The shape ops of a value held as compact arrays (``arrays``: each broadcasts to (P or 1, *shape)
    and has as many axes), applied to each array."""

    def _with(self, arrays, shape):
        return type(self)(tuple(arrays), shape)

    def broadcast(self, shape):
        return self._with(self.arrays, shape)

    def reshaped(self, axes, shape):
        return self._with((f.reshape(f.shape[:1] + tuple(1 if d is None else f.shape[d + 1] for d in axes))
                           for f in self.arrays), shape)

    def transposed(self, perm, shape):
        return self._with((np.transpose(f, (0,) + tuple(k + 1 for k in perm)) for f in self.arrays), shape)

    def per_program(self, fn):
        return self._with(map(fn, self.arrays), self.shape)

    def _chosen(self, programs):
        return [f[programs] if programs is not None and f.shape[0] > 1 else f for f in self.arrays]


@attrs.frozen(eq=False)
class Conjunction(_Compacts):
    """A mask held as the and of its ``factors``: bool arrays that broadcast to (P or 1, *shape),
    each as compact as its broadcasting allows."""

    factors: tuple
    shape: tuple[int, ...]

    @property
    def arrays(self) -> tuple:
        return self.factors

    def evaluate(self, programs=None) -> np.ndarray:
        factors = self._chosen(programs)
        out = factors[0]
        for f in factors[1:]:
            out = np.logical_and(out, f)
        return np.broadcast_to(out, out.shape[:1] + self.shape)


@attrs.frozen(eq=False)
class Sum(_Compacts):
    """An index tile held as the sum of its ``terms``: int64 arrays that broadcast to (P or 1, *shape),
    each as compact as its broadcasting allows (a tensor access's per-dimension terms, each at its
    own axes' shape, added without forming the whole tile); wrapping, so in any order."""

    terms: tuple
    shape: tuple[int, ...]

    @property
    def arrays(self) -> tuple:
        return self.terms

    def evaluate(self, programs=None) -> np.ndarray:
        terms = self._chosen(programs)
        out = terms[0]
        for t in terms[1:]:
            out = out + t
        return np.broadcast_to(out, out.shape[:1] + self.shape)


@attrs.frozen(eq=False)
class Select:
    """``select(cond, a, b)`` of index tiles, ``a`` an Affine tile: how a tensor access guards its
    offsets (``cond``: where every index is inside the tensor's shape, ``b`` the marker the bounds
    check reports elsewhere).  An access whose mask keeps every active element where ``cond``
    holds reads ``a`` through the box plan, never forming ``b``."""

    cond: Conjunction
    a: Affine
    b: object  # an Affine or a Sum
    shape: tuple[int, ...]

    def evaluate(self, programs=None) -> np.ndarray:
        out = np.where(self.cond.evaluate(programs), self.a.evaluate(programs), self.b.evaluate(programs))
        return np.broadcast_to(out, out.shape[:1] + self.shape)

    def broadcast(self, shape):
        return Select(self.cond.broadcast(shape), self.a.broadcast(shape), self.b.broadcast(shape), shape)

    def reshaped(self, axes, shape):
        return Select(*(x.reshaped(axes, shape) for x in (self.cond, self.a, self.b)), shape)

    def transposed(self, perm, shape):
        return Select(*(x.transposed(perm, shape) for x in (self.cond, self.a, self.b)), shape)

    def per_program(self, fn):
        return Select(self.cond.per_program(fn), self.a.per_program(fn), self.b.per_program(fn), self.shape)


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
    """The interpreter's values: a lazily held one (Affine, Conjunction, Sum, Select) is evaluated on
    first reading."""

    __slots__ = ("lazy",)

    def __init__(self):
        super().__init__()
        self.lazy: dict = {}

    def __missing__(self, value):
        evaluated = self[value] = self.lazy[value].evaluate()
        return evaluated


def _affine_offsets(held) -> tuple[Affine | None, tuple]:
    """The Affine offsets of a tile access and the guard factors that must hold wherever its mask
    does for them to be its offsets (a Select's condition), or (None, ())."""
    if isinstance(held, Select):
        return held.a, held.cond.factors
    return (held, ()) if isinstance(held, Affine) else (None, ())


def _guarded(guards: tuple, along: dict, some, shape: tuple[int, ...]) -> bool:
    """Whether each guard factor holds wherever the mask does in the programs ``some`` (None: all)
    that access anything, the mask given as its range along each axis (``along``: (P or 1, n) per
    masked axis); each factor is checked at its own shape: one along an axis costs a row of it
    per program.  False also where a factor spans several axes (the caller evaluates instead)."""
    for g in guards:
        if g.all():
            continue
        axes = [d for d in range(len(shape)) if g.shape[d + 1] > 1]
        if len(axes) > 1:
            return False
        if not axes:  # a condition on the program (a row index outside its dimension)
            ok = g.reshape(g.shape[:1])
        else:
            (d,) = axes
            row = g.reshape(g.shape[0], shape[d])
            ok = np.all(row if d not in along else row | ~along[d], axis=1)
        bad = ~ok
        if (bad.any() if some is None else (np.broadcast_to(bad, some.shape) & some).any()):
            return False
    return True


@attrs.frozen
class _Plan:
    """How the programs ``fast`` reach memory: each through the box of ``lengths`` at ``lows`` (a
    strided view from their ``starts``)."""

    fast: np.ndarray  # program numbers
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
        """The fast programs' boxes: one strided view of the buffer, (programs, *lengths) where
        their starts step evenly, (runs, programs / runs, *lengths) where they step evenly in
        runs that step evenly (a vectorised fold's (trip, program) pairs); else a fresh copy,
        (programs, *lengths), read-only (None where ``writeable``)."""
        lead = _even_steps(self.starts)
        if lead is not None:
            item = memory.itemsize
            shape, steps = lead
            return strided_view(memory[int(self.starts[0]):], shape + self.lengths, tuple(
                s * item for s in steps) + tuple(c * item for c in self.strides), writeable=writeable)
        return None if writeable else self.window(memory)[self.starts]


def _even_steps(starts: np.ndarray):
    """(shape, steps) of the leading axes of a view whose boxes start at ``starts`` (one axis, or
    two: runs of equal length), or None where no such view has non-negative steps."""
    n = starts.size
    if n < 2:
        return (n,), (0,)
    gaps = np.diff(starts)
    step = int(gaps[0])
    if step < 0:
        return None
    if (gaps == step).all():
        return (n,), (step,)
    run = int(np.argmax(gaps != step)) + 1
    if run < 2 or n % run:
        return None
    grid = starts.reshape(n // run, run)
    outer = np.diff(grid[:, 0])
    if outer[0] < 0 or not (outer == outer[0]).all() or not (np.diff(grid, axis=1) == step).all():
        return None
    return (n // run, run), (int(outer[0]), step)


@attrs.frozen
class _Access:
    """The boxes of a tile access: a plan per box (the programs at an edge of the tensor have
    boxes of their own), and the ``rest`` (boxes that stick out of the buffer, programs beyond
    :data:`_MOST_BOXES` boxes) element by element."""

    plans: tuple[_Plan, ...]
    rest: np.ndarray


_MOST_BOXES = 16  # boxes an access copies through; the programs of any others are gathered


def _access(affine: Affine, lows: list, lengths: list, some, programs: int, size: int) -> _Access:
    """The programs ``some`` (None: all) by their box (``lows`` and ``lengths``: per axis an int, or
    per program (P,)), each box's programs checked to lie in the buffer."""
    nothing = np.zeros(0, np.int64)
    chosen = np.arange(programs) if some is None else np.flatnonzero(some)
    # each program's box as one number, its lows and lengths digits of a mixed radix (each in [0, n])
    key, radix = np.zeros(chosen.size, np.int64), 1
    for x, n in zip(lows + lengths, affine.shape + affine.shape):
        if np.ndim(x):
            key += np.broadcast_to(x, (programs,))[chosen] * np.int64(radix)
            radix *= n + 1
    if radix >= 2**63:  # too many digits for one number: boxes by their rows of digits
        key = np.stack([np.broadcast_to(x, (programs,))[chosen] for x in lows + lengths if np.ndim(x)], axis=1)
    if radix == 1 or (key == key[0]).all():
        groups, rest = [chosen], nothing
    else:
        _, inverse, counts = np.unique(key, axis=0, return_inverse=True, return_counts=True)
        inverse = inverse.reshape(-1)
        kept = np.argsort(-counts, kind="stable")[:_MOST_BOXES]
        groups = [chosen[inverse == g] for g in kept]
        rest = chosen[~np.isin(inverse, kept)]
    base = np.asarray(affine.base, np.int64)
    plans, rests = [], [rest]
    for members in groups:
        first = int(members[0])
        low = tuple(int(x[first]) if np.ndim(x) else x for x in lows)
        length = tuple(int(x[first]) if np.ndim(x) else x for x in lengths)
        # A step along an axis the box holds one element of is never taken: 0, so that a huge one
        # (masked-off offsets may be anything) cannot overflow the view's byte strides.
        steps = tuple(int(c) if n > 1 else 0 for c, n in zip(affine.coefs, length))
        starts = base[members] if base.ndim else base
        for c, lo in zip(affine.coefs, low):
            if c and lo:
                starts = starts + np.int64(c) * np.int64(lo)
        plan = _Plan(members, nothing, low, length, steps, False)
        inside = (starts >= 0) & (starts <= size - plan.span) if plan.span <= size else np.zeros(np.shape(starts), bool)
        if np.ndim(inside) == 0:
            fast, starts = (members, np.broadcast_to(starts, members.shape)) if inside else (nothing, nothing)
            out = nothing if inside else members
        else:
            fast, out, starts = members[inside], members[~inside], starts[inside]
        rests.append(out)
        if fast.size:
            uniform = fast.size == programs and bool((starts == starts[0]).all())
            plans.append(attrs.evolve(plan, fast=fast, starts=starts, uniform=uniform))
    rest = np.concatenate(rests) if len(rests) > 1 else rests[0]
    return _Access(tuple(plans), np.sort(rest))


def _rows(array: np.ndarray, rows, box: tuple[slice, ...]):
    """``array[(rows,) + box]`` as a view (writeable where ``array`` is): (n, *box) for a slice of
    programs, (n,) or (runs, n / runs) leading axes for program numbers that step evenly or in runs
    that do (a fold's (trip, program) pairs of the programs of one box); None for others."""
    region = array[(slice(None),) + box]
    if isinstance(rows, slice):
        return region[rows]
    lead = _even_steps(rows)
    if lead is None:
        return None
    shape, steps = lead
    step = region.strides[0]
    start = region[int(rows[0]):]  # strided_view: fp8 too (as_strided cannot rebuild f8e5m2's "<f1")
    return strided_view(start, shape + region.shape[1:], tuple(s * step for s in steps) + region.strides[1:],
                        writeable=start.flags.writeable)


def _copy_boxes(plan: _Plan, memory: np.ndarray, result: np.ndarray) -> None:
    """The fast programs' rows of ``result`` at their box: the boxes from memory."""
    boxes, rows = plan.boxes(memory), plan.rows()
    target = _rows(result, rows, plan.box())
    if target is None:
        result[(rows,) + plan.box()] = boxes.reshape((-1,) + plan.lengths)
        return
    target[...] = boxes.reshape(target.shape)  # one split of the leading axis or the other


class TileMemory:
    """Tile and scalar loads, stores and atomics of ``interpreter``'s launch, with the lazily held
    index tiles and masks they read (the interpreter holds them, with the other values)."""

    def __init__(self, interpreter):
        self.interpreter = interpreter
        # the buffers the launch writes: a load from any other may hand out a view of its memory
        self.written = frozenset(op.attrs["buffer"] for op in interpreter.graph.body.walk() if op.opcode in _WRITES)

    # -- index tiles and masks held unevaluated ---------------------------------------------
    def _terms(self, value) -> tuple:
        """Index tile ``value`` as compact terms that sum to it (see :class:`Sum`)."""
        run = self.interpreter
        held = run.lazy.get(value)
        if isinstance(held, Affine):
            return held.terms()
        if isinstance(held, Sum):
            return held.terms
        return (_compact(np.asarray(run.env[value], np.int64)),)

    def index_arithmetic(self, op: Op) -> None:
        """add, sub and mul of index tiles: Affine where both are (and for mul one is a splat of a
        value the same in every program), else add and sub a Sum of their terms; any other mul
        evaluated as the op table's."""
        run = self.interpreter
        a, b = (run.lazy.get(v) for v in op.operands)
        name = op.opcode
        shape = tuple(op.result.type.shape)
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
        if name != "mul":
            first, second = (self._terms(v) for v in op.operands)
            if name == "sub":
                second = tuple(np.negative(t) for t in second)  # wraps as the subtraction
            run.lazy[op.result] = Sum(first + second, shape)
            return
        fn = EVAL[name]
        run.env[op.result] = WIDE.get(fn, fn)(*[run.env[v] for v in op.operands])

    def index_equality(self, op: Op) -> None:
        """eq of index tiles: where the terms of their difference all have one sign and their sum
        cannot wrap, it is 0 just where every term is, so the result is held as a Conjunction of
        one factor per term (a tensor access's ``code == 0``, at each digit's own shape)."""
        run = self.interpreter
        first, second = (self._terms(v) for v in op.operands)
        terms = [t for t in first + tuple(np.negative(t) for t in second) if t.any()]  # a zero term: always 0
        lows = [int(t.min()) for t in terms]
        highs = [int(t.max()) for t in terms]
        shape = tuple(op.result.type.shape)
        if (min(lows, default=0) >= 0 and sum(highs) < 2**63) or (max(highs, default=0) <= 0 and sum(lows) >= -2**63):
            factors = tuple(t == 0 for t in terms) or (np.ones((1,) * (1 + len(shape)), bool),)
            run.lazy[op.result] = Conjunction(factors, shape)
            return
        run.env[op.result] = np.equal(*[run.env[v] for v in op.operands])

    def index_select(self, op: Op) -> None:
        """select of index tiles choosing an Affine tile that steps along some axis (offsets): held
        as a Select (see there); any other (a digit of a guard) evaluated at its operands' shape."""
        run = self.interpreter
        cond, a, b = op.operands
        held = run.lazy.get(a)
        if not isinstance(held, Affine) or not any(c and n > 1 for c, n in zip(held.coefs, held.shape)):
            run.env[op.result] = np.where(*[run.env[v] for v in op.operands])
            return
        shape = tuple(op.result.type.shape)
        guard = run.lazy.get(cond)
        if not isinstance(guard, Conjunction):
            guard = Conjunction((_compact(np.asarray(run.env[cond])),), shape)
        otherwise = run.lazy.get(b)
        if not isinstance(otherwise, (Affine, Sum)):
            otherwise = Sum(self._terms(b), shape)
        run.lazy[op.result] = Select(guard, held, otherwise, shape)

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

    def _plan(self, op: Op, size: int) -> _Access | None:
        """The boxes a tile access reaches, where its offsets are an Affine tile with non-negative
        steps and its mask is one contiguous range per axis in each program; else None.  (Called
        for every access: the common cases, a factor that masks nothing and one the same in every
        program, cost a NumPy call or two.)"""
        run = self.interpreter
        affine, guards = _affine_offsets(run.lazy.get(op.operands[0]))
        if affine is None or any(c < 0 for c in affine.coefs):
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
        if some is not None and not some.any():
            return _Access((), np.zeros(0, np.int64))
        if not _guarded(guards, along, some, shape):
            return None  # an active element outside the tensor's shape: evaluated, and reported
        return _access(affine, lows, lengths, some, programs, size)

    def _some_programs(self, op: Op, programs: np.ndarray):
        """The offsets and mask of a tile access in ``programs`` only (active ones: a plan's rest)."""
        run = self.interpreter
        # the plan's Affine offsets: where a Select guards them, its guard holds on every element of the mask
        (affine, _), held = _affine_offsets(run.lazy[op.operands[0]]), run.lazy.get(op.operands[-1])
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
        access = self._plan(op, memory.size)
        if access is None:
            offsets, mask = run.env[op.operands[0]], run.env[op.operands[2]]
            every = run.active is None and bool(np.all(mask))
            run.env[op.result] = self._gather(op, memory, offsets, None if every else run.masked(mask), other)
            return
        shape = op.result.type.shape
        plans, rest = access.plans, access.rest
        if len(plans) == 1 and not rest.size and plans[0].lengths == shape:  # whole boxes (their lows are 0)
            plan = plans[0]
            if plan.uniform:  # the same elements in every program
                run.env[op.result] = plan.window(memory)[plan.starts[0]][None].copy()
                return
            if plan.fast.size == run.programs:
                run.env[op.result] = self._boxes(op, plan, memory)
                return
        if (len(plans) == 1 and not rest.size and other.ndim == 0 and plans[0].fast.size == run.programs
                and not any(plans[0].lows) and plans[0].lengths[:-1] == tuple(shape[:-1])):
            # a row masked at its end (cols < C): its real columns and the tail value, unpadded
            plan = plans[0]
            if plan.uniform:
                real = plan.window(memory)[plan.starts[0]][None].copy()
            else:
                real = self._boxes(op, plan, memory)
            run.lazy[op.result] = Tailed(real, other, tuple(shape))
            return
        uniform = len(plans) == 1 and plans[0].uniform and other.ndim == 0
        result = np.empty((1 if uniform else run.programs,) + shape, memory.dtype)
        if other.ndim == 0:  # `other` where no box is: the rows of no box, the slabs around each box
            covered = np.zeros(result.shape[0], bool)
            for plan in plans:
                rows = slice(0, 1) if uniform else plan.rows()
                covered[rows] = True
                for d, side in enumerate(plan.box()):
                    before = (rows,) + (slice(None),) * d
                    result[before + (slice(0, side.start),)] = other
                    result[before + (slice(side.stop, None),)] = other
            if not covered.all():
                result[~covered] = other
        else:
            result[...] = other
        for plan in plans:
            if uniform:
                result[(slice(0, 1),) + plan.box()] = plan.window(memory)[plan.starts[:1]]
            else:
                _copy_boxes(plan, memory, result)
        if rest.size:
            offsets, mask = self._some_programs(op, rest)
            rest_other = other[rest] if other.ndim and other.shape[0] > 1 else other
            result[rest] = self._gather(op, memory, offsets, mask, rest_other, rest)
        run.env[op.result] = result

    def _boxes(self, op: Op, plan: _Plan, memory: np.ndarray) -> np.ndarray:
        """Every program's box of a load: a view of ``memory`` where the launch does not write it
        (else a copy: a later store would change it).  The view is writeable where ``memory`` is:
        NumPy's argmax and argmin copy a read-only array (PyArray_ArgMax asks for a writeable one);
        the interpreter never writes into a value."""
        written = op.attrs["buffer"] in self.written
        boxes = plan.boxes(memory, writeable=not written and memory.flags.writeable)
        if boxes is None:
            boxes = plan.boxes(memory)
        if boxes.ndim > 1 + len(plan.lengths):
            boxes = boxes.reshape((-1,) + plan.lengths)
        return np.array(boxes) if written and np.may_share_memory(boxes, memory) else boxes

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
        access = self._plan(op, memory.size)
        if access is None:
            offsets, mask, value = run.env[op.operands[0]], run.env[op.operands[2]], run.env[op.operands[1]]
            elements, values = self._elements(op, offsets, value, mask, memory)
            memory[elements] = values  # one of several elements at one address wins
            return
        rest = access.rest
        real = None if rest.size else run.tails.store_values(op.operands[1], access.plans)
        if real is not None:  # a Tailed value whose boxes lie in its real columns: written from them
            values = np.broadcast_to(np.asarray(real, memory.dtype), (run.programs,) + real.shape[1:])
        else:
            value = run.env[op.operands[1]]
            values = np.broadcast_to(np.asarray(value, memory.dtype), (run.programs,) + op.operands[1].type.shape)
        if rest.size:  # checked before anything is written
            offsets, mask = self._some_programs(op, rest)
            elements, rest_values = self._elements(op, offsets, values[rest], mask, memory, rest)
        for plan in access.plans:
            boxes = plan.boxes(memory, writeable=True)
            chosen = _rows(values, plan.rows(), plan.box())
            if chosen is None:
                chosen = values[(plan.rows(),) + plan.box()]
            if boxes is not None:
                boxes[...] = chosen.reshape(boxes.shape)
            else:  # starts that do not step evenly: box by box through the window of every box
                plan.window(memory, writeable=True)[plan.starts] = chosen.reshape((-1,) + plan.lengths)
        if rest.size:
            memory[elements] = rest_values

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
