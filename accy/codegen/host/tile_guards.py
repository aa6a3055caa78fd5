"""A tensor access's shape guard seen through (:class:`accy.lowering.tile_access.Guard`), for
:mod:`.tile_memory`: checked once per access, the mask's box inside the guard's; where it is
not, the first active element outside the shape is found (on the failure's cold path) for the
message, and the access is skipped."""

from __future__ import annotations

import math

from llvmlite import ir

from ...dsl.ir import Op
from ...dsl.tensors import OUT_OF_SHAPE
from ...lowering.tile_access import Box, Guard
from ..llvm import Lowering
from ..llvm_types import I64


class ShapeGuards:
    """The checks of the shape guards of one lowering's accesses, with ``memory``'s boxes (its
    ``box_ranges``, ``within`` and ``empty``)."""

    def __init__(self, lw: Lowering, memory):
        self.lw = lw  # the TileHostLowering: its builder, values and checks
        self.v = lw.vectors
        self.memory = memory
        self.box_ranges = memory.box_ranges

    def holds(self, op: Op, guard: Guard, box: Box, shape: tuple[int, ...], kind: int) -> ir.Value:
        """Whether every element active in ``box`` is inside the tensor's shape (an i1), the
        failure recorded where not: the mask's ranges within the guard's, or nothing active."""
        b = self.lw.b
        ranges, uniform = self.box_ranges(box, shape)
        inside, holds = self.box_ranges(guard.inside, shape)
        for (lo, hi), (in_lo, in_hi) in zip(ranges, inside):
            holds = b.and_(holds, b.and_(b.icmp_signed(">=", lo, in_lo), b.icmp_signed("<=", hi, in_hi)))
        ok = b.or_(self.memory.empty(ranges, uniform), holds)
        self.lw.fail_if(op, b.not_(ok), kind, lambda: (self.first_outside(guard, box, shape), self.lw.lane()))
        return ok

    def first_outside(self, guard: Guard, box: Box, shape: tuple[int, ...]) -> ir.Value:
        """The marker (OUT_OF_SHAPE + code) of the first element active in ``box`` and outside
        the shape, in row-major order: a scalar walk, on a failure's path only."""
        b = self.lw.b
        zero = ir.Constant(I64, 0)
        within = lambda ranges_uniform, idx: self.memory.within(*ranges_uniform, idx)  # noqa: E731
        active = self.box_ranges(box, shape)
        digits = [[(self.box_ranges(choice, shape), weight) for choice, weight in digit] for digit in guard.digits]

        def element(e, carries):
            (found,) = carries
            idx = self.v.unravel(e, shape)
            code = zero
            for digit in digits:
                weight = zero
                for choice, w in reversed(digit):  # the first choice that holds wins
                    weight = b.select(within(choice, idx), ir.Constant(I64, w), weight)
                code = b.add(code, weight)
            first = b.and_(b.icmp_signed("==", found, zero),
                           b.and_(within(active, idx), b.icmp_signed("!=", code, zero)))
            return [b.select(first, b.add(code, ir.Constant(I64, OUT_OF_SHAPE)), found)]

        return self.v.loop(0, math.prod(shape), element, [zero], name="outside")[0]
