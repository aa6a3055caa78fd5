"""The ops that make, move and compute tiles element by element in the tile distribution
(:mod:`accy.lowering.distribute`): lazy tiles where they can be, registers otherwise."""

from __future__ import annotations

import math

from ..dsl.ir import Op, constant_of
from ..dsl.traced import Traced
from ..dsl.types import index
from .layouts import Expand, Layout, Mma, Slice, unit_reshape
from .rebuild import Part, Rebuild
from .registers import Lazy, Registers, Regs, transposed_source
from .tile_memory import Deferred


class TileValues(Part):
    """The ops that make tiles (``splat``, ``arange``), move them (``broadcast``, ``reshape``,
    ``trans``, ``slice``, ``cat``) and compute them element by element: lazy while every operand is, in registers
    otherwise, moving data only where the layouts differ."""

    def __init__(self, core: Rebuild, registers: Registers):
        super().__init__(core)
        self.registers = registers
        # the registers each broadcast made (by id) -> (them, its source tile, coordinate map):
        # an elementwise op may broadcast the source again into a layout another operand holds
        self.broadcasts: dict[int, tuple] = {}

    def splat(self, op: Op) -> None:
        x = self.env[op.operands[0]]
        t = op.result.type
        self.env[op.result] = Lazy(t.shape, t.dtype, lambda c: x, constant_of(x.value))

    def arange(self, op: Op) -> None:
        self.env[op.result] = Lazy((op.attrs.n,), index, lambda c: self.core.traced(c[0]))

    def broadcast(self, op: Op) -> None:
        x = self.env[op.operands[0]]
        shape = op.attrs.shape
        src_shape = x.shape
        source = lambda c: tuple(0 if n == 1 else ci for n, ci in zip(src_shape, c))  # noqa: E731
        if isinstance(x, Lazy):
            self.env[op.result] = Lazy(shape, x.dtype, lambda c: x.at(source(c)), x.constant)
            return
        target = self.unsliced(x.layout, shape)
        if all(n == 1 or a == b for n, a, b in zip(src_shape, x.layout.dims, target.dims)):
            values = []
            for r in range(target.registers):
                js = tuple(0 if n == 1 else j for n, j in zip(src_shape, target.register_indices(r)))
                values.append(x.values[x.layout.register(js)])
            result = Regs(target, x.dtype, tuple(values))
        else:
            result = self.registers.convert(x, target, op, source)
        self.broadcasts[id(result)] = (result, x, source)
        self.env[op.result] = result

    def unsliced(self, layout: Layout, shape) -> Layout:
        """Where to broadcast a tile in ``layout`` to ``shape``: a reduction's result back into
        the kind of layout it came from (``x.max(axis=1)[:, None]`` to an Mma layout like x's,
        which holds it in the same registers), else the canonical layout."""
        shape = tuple(shape)
        if isinstance(layout, Expand) and isinstance(layout.parent, Slice):
            parent = layout.parent.parent
            if parent.shape == shape:
                return parent
            if isinstance(parent, Mma) and Mma.fits(shape, self.T, parent.warps_n):
                return Mma(shape, self.T, parent.warps_n)
        return self.registers.canonical(shape)

    def reshape(self, op: Op) -> None:
        x = self.env[op.operands[0]]
        shape = op.attrs.shape
        if isinstance(x, Deferred):  # a unit reshape (see TensorCoreDot.direct_loads)
            self.env[op.result] = x.then(("reshape", shape), shape)
            return
        old = x.shape
        if unit_reshape(old, shape):
            def source(c):
                kept = iter(ci for n, ci in zip(shape, c) if n != 1)
                return tuple(0 if n == 1 else next(kept) for n in old)
        else:
            def source(c):
                return self.core.unflat(self.core.flat(c, shape), old)
        if isinstance(x, Lazy):
            self.env[op.result] = Lazy(shape, x.dtype, lambda c: x.at(source(c)), x.constant)
        elif unit_reshape(old, shape):
            self.env[op.result] = self.registers.unit_reshape(x, shape)
        else:
            self.env[op.result] = self.registers.convert(x, self.registers.canonical(shape), op, source)

    def trans(self, op: Op) -> None:
        x = self.env[op.operands[0]]
        perm = op.attrs.perm
        shape = tuple(x.shape[p] for p in perm)
        if isinstance(x, Deferred):  # B's transpose (see TensorCoreDot.direct_loads)
            self.env[op.result] = x.then(("trans", perm), shape)
            return
        if isinstance(x, Lazy):
            source = transposed_source(perm)
            self.env[op.result] = Lazy(shape, x.dtype, lambda c: x.at(source(c)), x.constant)
            return
        self.env[op.result] = self.registers.transpose(x, perm)

    def slice(self, op: Op) -> None:
        x = self.env[op.operands[0]]
        shape = op.attrs.shape
        pairs = tuple(zip(op.attrs.starts, op.attrs.steps))

        def source(c):
            return tuple(self.core.add(start, self.core.mul(ci, step)) for (start, step), ci in zip(pairs, c))

        if isinstance(x, Lazy):
            self.env[op.result] = Lazy(shape, x.dtype, lambda c: x.at(source(c)), x.constant)
        else:
            self.env[op.result] = self.registers.convert(self.registers.regs(x), self.registers.canonical(shape), op,
                                                         source)

    def cat(self, op: Op) -> None:
        a, b = (self.registers.regs(self.env[v]) for v in op.operands)
        self.env[op.result] = self.registers.cat(a, b, op.attrs.axis, self.registers.canonical(op.result.type.shape), op)

    def pointwise(self, op: Op) -> None:
        xs = [self.env[v] for v in op.operands]
        t = op.result.type
        if all(isinstance(x, Lazy) for x in xs):
            def at(c):
                return Traced(self.core.record(op.opcode, [x.at(c) for x in xs], op.attrs).result)

            self.env[op.result] = Lazy(t.shape, t.dtype, at)
            return
        held = [x for x in xs if isinstance(x, Regs)]
        canonical = self.registers.canonical(t.shape)
        layout = canonical if any(x.layout.same(canonical) for x in held) else held[0].layout
        moved = min((h.layout for h in held), key=lambda candidate: self.moved(held, candidate))
        if self.moved(held, moved) < self.moved(held, layout):  # an mma accumulator times a row's scales
            layout = moved
        regs = [self.in_layout(x, layout, op) for x in xs]
        values = tuple(Traced(self.core.record(op.opcode, vs, op.attrs).result)
                       for vs in zip(*(r.values for r in regs)))
        self.env[op.result] = Regs(layout, t.dtype, values)

    def moved(self, held: list, layout: Layout) -> int:
        """The elements that go through shared memory to hold every tile of ``held`` in ``layout``
        (a broadcast's: its source's)."""
        def size(x: Regs) -> int:
            found = self.broadcasts.get(id(x))
            return math.prod((found[1] if found is not None and found[0] is x else x).shape)
        return sum(size(x) for x in held if not x.layout.same(layout))

    def in_layout(self, x, layout: Layout, op: Op):
        """``x`` in ``layout``; a broadcast's registers broadcast again from its source."""
        found = self.broadcasts.get(id(x)) if isinstance(x, Regs) else None
        if found is not None and found[0] is x and not x.layout.same(layout):
            return self.registers.convert(found[1], layout, op, found[2])
        return self.registers.regs(x, layout, op)
