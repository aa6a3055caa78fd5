"""A tensor access's shape guard seen through in the tile distribution (:mod:`accy.lowering.distribute`),
as the host's lowering sees it (:mod:`accy.codegen.host.tile_guards`).

A masked ``p.x.load(idx, mask=...)`` reads its offsets through a guard, ``select(code == 0, flat,
OUT_OF_SHAPE + code)`` (:class:`~accy.lowering.tile_access.Guard`): done element by element, each
thread computes every element's code, a digit per dimension, and checks each access on its own.
Where the mask is a box, the access runs on ``flat`` instead, with no check of its own (``bounds
shape``: the launch checks each tensor's layout once), under one check per access that the mask's
box lies inside the guard's, per axis, or is empty.  Where that check fails, some element the mask
lets through is outside the shape: the cold side finds the first such element in row-major order
with a loop and does the access there alone, whose check stops the launch naming the tensor and
the index, as the element's own access would have; nothing else is read or written."""

from __future__ import annotations

import math

import attrs

from ..dsl.ir import Op, Value
from ..dsl.ops import Bounds
from ..dsl.tensors import OUT_OF_SHAPE
from ..dsl.traced import Traced
from ..dsl.types import boolean
from .rebuild import Part, Rebuild
from .tile_access import Box, Guard


@attrs.frozen(eq=False)
class SeenThrough:
    """A guard seen through: the tile graph's ``flat`` offsets, ``inside`` (a traced bool, None
    where it always holds), the guard and the mask's box."""

    flat: Value
    inside: object
    guard: Guard
    box: Box

    def fast_attrs(self, op: Op):
        """The access's attributes on ``flat``: no check of its own (see :class:`Bounds`)."""
        return attrs.evolve(op.attrs, bounds=Bounds.SHAPE)


class ShapeGuards(Part):
    """Shape guards seen through, with ``memory``'s affine forms and boxes (its ``shapes``) and
    its expressions (``expr``)."""

    def __init__(self, core: Rebuild, memory):
        super().__init__(core)
        self.memory = memory

    def seen_through(self, op: Op) -> SeenThrough | None:
        """``op``'s guard seen through, its check recorded here; None where its offsets are no
        guard, or its mask or the guard no box.  ``inside`` holds where the mask's box lies in
        the guard's or is empty: where it does not, an element the mask lets through is outside
        the shape, so the failure's path always stops the launch (and an empty box takes the
        fast path, whose masked-off copies zero-fill)."""
        shapes = self.memory.shapes
        guarded = shapes.guard(op.operands[0])
        box = shapes.box(op.operands[-1]) if guarded is not None else None
        if box is None:
            return None
        flat, guard = guarded
        inside, expr, conds = guard.inside, self.memory.expr, []
        # the mask's range along each axis, [low, high) within the tile (ints where no bound moves)
        ranges = [(self.extreme(max, (0, *lows)), self.extreme(min, (n, *highs)))
                  for n, lows, highs in zip(op.operands[0].type.shape, box.lows, box.highs)]
        for (low, high), lows, highs, g_lows, g_highs in zip(ranges, box.lows, box.highs, inside.lows, inside.highs):
            # a bound the mask has itself holds
            conds += [self.compare(low, "ge", expr(g)) for g in g_lows if g not in lows]
            conds += [self.compare(high, "le", expr(g)) for g in g_highs if g not in highs]
        conds += [self.compare(0, "ge", expr(z)) for z in inside.zero_lows if z not in box.zero_lows]
        conds += [self.compare(1, "le", expr(z)) for z in inside.zero_highs if z not in box.zero_highs]
        conds += [self.env[f] for f in inside.flags if f not in box.flags]
        holds = self.all_of(conds)
        if holds is not True:
            holds = self.any_of([holds, self.empty(box, ranges)])
        if holds is False:
            holds = self.core.const(False, boolean)  # every access that lets an element through fails
        return SeenThrough(flat, None if holds is True else holds, guard, box)

    def empty(self, box: Box, ranges):
        """Whether ``box`` holds nowhere (a Python bool where known), with its ``ranges`` per axis."""
        expr = self.memory.expr
        conds = [self.compare(low, "ge", high) for (low, high), lows, highs in zip(ranges, box.lows, box.highs)
                 if lows or highs]
        conds += [self.compare(1, "le", expr(z)) for z in box.zero_lows]
        conds += [self.compare(0, "ge", expr(z)) for z in box.zero_highs]
        conds += [self.b.logical_not(self.env[f]) for f in box.flags]
        return self.any_of(conds)

    def all_of(self, conds):
        """The conjunction of traced bools and Python bools (a Python bool where they decide it)."""
        if any(c is False for c in conds):
            return False
        traced = [c for c in conds if c is not True]
        return self.core.all_of(traced) if traced else True

    def any_of(self, conds):
        """The disjunction of traced bools and Python bools (a Python bool where they decide it)."""
        if any(c is True for c in conds):
            return True
        out = False
        for c in conds:
            if c is not False:
                out = c if out is False else self.b.logical_or(out, c)
        return out

    def extreme(self, pick, exprs):
        """``pick`` (max or min) of expressions, Python ints folded."""
        values = [self.memory.expr(e) for e in exprs]
        ints = [v for v in values if isinstance(v, int)]
        out = pick(ints) if ints else None
        for v in values:
            if not isinstance(v, int):
                out = v if out is None else (self.b.max(out, v) if pick is max else self.b.min(out, v))
        return out

    def compare(self, a, code: str, c):
        """``a <code> c`` (code "ge" or "le"; ints or traced indices): a Python bool where both are ints."""
        if isinstance(a, int) and isinstance(c, int):
            return a >= c if code == "ge" else a <= c
        a, c = self.core.traced(a), self.core.traced(c)
        return self.b.ge(a, c) if code == "ge" else self.b.le(a, c)

    def in_box(self, box: Box, coords) -> Traced | None:
        """Whether the element at ``coords`` lies in ``box`` (None: always)."""
        b, expr, traced = self.b, self.memory.expr, self.core.traced
        conds = []
        for c, lows, highs in zip(coords, box.lows, box.highs):
            conds += [b.ge(traced(c), traced(expr(e))) for e in lows]
            conds += [b.lt(traced(c), traced(expr(e))) for e in highs]
        conds += [b.le(traced(expr(e)), 0) for e in box.zero_lows]
        conds += [b.gt(traced(expr(e)), 0) for e in box.zero_highs]
        conds += [self.env[f] for f in box.flags]
        return self.core.all_of(conds)

    def choose(self, seen: SeenThrough, fast, failed):
        """``fast()`` where ``seen``'s check holds (always, where it has none), else ``failed()``,
        each recorded in a region of its own; what the one that runs returns."""
        if seen.inside is None:
            return fast()
        core = self.core
        return self.b.if_(seen.inside, lambda inner: core.within(inner, fast), lambda inner: core.within(inner, failed))

    def first_outside(self, op: Op, seen: SeenThrough) -> Traced:
        """The guard's code (its digits, see :mod:`accy.dsl.tensors`) at the first element, in
        row-major order, that the mask lets through and that lies outside the shape; 0 where
        there is none.  A loop: the failure's path only.  (The code, not the marker, is carried:
        it fits 32 bits, so the launch's 32-bit variant stays open.)"""
        core, b = self.core, self.b
        shape = op.operands[0].type.shape

        def body(inner, e, carries):
            with core.region(inner):
                (found,) = carries
                coords = core.unflat(e, shape)
                code = 0
                for digit in seen.guard.digits:  # a digit's first box holding gives its weight
                    weight = core.const(0)
                    for choice, w in reversed(digit):
                        held = self.in_box(choice, coords)
                        weight = core.const(w) if held is None else b.select(held, w, weight)
                    code = core.add(code, weight)
                code = core.traced(code)
                first = core.all_of([b.eq(found, 0), self.in_box(seen.box, coords), b.ne(code, 0)])
                return (b.select(first, code, found),)

        return b.loop(0, math.prod(shape), 1, (core.const(0),), body)[0]

    def on_failure(self, op: Op, seen: SeenThrough, access, default=None):
        """``access(at)`` (the access's own, checked) at the first element outside, where there
        is one: its check stops the launch.  With ``default``, that access's value there, else
        ``default`` (a load's probe must be used, or it would be dropped as dead)."""
        code = self.first_outside(op, seen)
        core, b = self.core, self.b

        def probe(inner):
            value = core.within(inner, lambda: access(b.add(code, OUT_OF_SHAPE)))
            return value if default is not None else None

        if default is None:
            b.if_(b.ne(code, 0), probe)
            return None
        return b.if_(b.ne(code, 0), probe, lambda inner: default)
