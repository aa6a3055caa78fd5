"""Tiles in registers in the tile distribution (:mod:`accy.lowering.distribute`): which element
each register of a layout holds, tiles moved between layouts through shared memory, and the
values a region carries."""

from __future__ import annotations

import math
from typing import Callable

import attrs

from ..dsl.ir import Op
from ..dsl.traced import SharedArray
from ..dsl.types import DType
from .layouts import Blocked, Expand, Layout, Permute
from .rebuild import Part, Rebuild
from .scratch import Scratch


@attrs.frozen(eq=False)
class Regs:
    """A tile held in registers: ``values[r]`` is register ``r`` of this thread, in ``layout``."""

    layout: Layout
    dtype: DType
    values: tuple

    @property
    def shape(self) -> tuple[int, ...]:
        return self.layout.shape


@attrs.frozen(eq=False)
class Lazy:
    """A tile not yet computed: ``at(coords)`` records its element at ``coords`` (ints or
    traced index values); ``constant`` is its value when every element is one constant."""

    shape: tuple[int, ...]
    dtype: DType
    at: Callable
    constant: object = None


def transposed_source(perm):
    """The coordinates in a tile of those in its transpose by ``perm``."""
    def source(c):
        out = [0] * len(perm)
        for k, p in enumerate(perm):
            out[p] = c[k]
        return tuple(out)

    return source


class Registers(Part):
    """Where each register of a layout is (its coordinates, whether this thread owns it), a
    tile's registers in the layout a user wants (a lazy tile evaluated there, a held one
    converted through the scratch) and registers written to shared memory."""

    def __init__(self, core: Rebuild, scratch: Scratch):
        super().__init__(core)
        self.scratch = scratch

    def canonical(self, shape) -> Layout:
        return Blocked(tuple(shape), self.T)

    def thread_part(self, d):
        """This thread's part of a coordinate along ``d``: t_d * per_thread."""
        if d.threads == 1:
            return None
        key = ("thread", d.stride, d.threads, d.per_thread, d.split, d.split_stride)
        found = self.core.lookup(key)
        if found is not None:
            return found

        def field(stride: int, n: int):
            t, shift = self.tid, stride.bit_length() - 1
            if shift:
                t = self.b.shr(t, shift)
            return self.b.bitwise_and(t, n - 1) if stride * n < self.T else t

        t = field(d.stride, d.low)
        if d.split:
            t = self.core.add(t, self.core.mul(field(d.split_stride, d.threads // d.split), d.split))
        t = self.core.mul(t, d.per_thread)
        return self.core.remember(key, t)

    def coords(self, layout: Layout) -> list[tuple]:
        """Each register's coordinates (ints where they do not depend on the thread)."""
        key = ("coords", layout.dims)
        found = self.core.lookup(key)
        if found is not None:
            return found
        parts = [self.thread_part(d) for d in layout.dims]
        out = []
        for r in range(layout.registers):
            cs = []
            for d, j, part in zip(layout.dims, layout.register_indices(r), parts):
                if part is None:
                    cs.append(d.static(j))
                    continue
                c = self.core.add(part, d.static(j))
                if d.wraps(j):
                    c = self.b.mod(c, d.size)
                cs.append(c)
            out.append(tuple(cs))
        return self.core.remember(key, out)

    def owners(self, layout: Layout) -> list:
        """Per register: a bool that holds where this thread owns its element, or None (always)."""
        key = ("owners", layout.dims)
        found = self.core.lookup(key)
        if found is not None:
            return found
        common = None
        if layout.replica_bits:
            common = self.b.eq(self.b.bitwise_and(self.tid, layout.replica_bits), 0)
        parts = [self.thread_part(d) for d in layout.dims]
        out = []
        for r in range(layout.registers):
            conds = [common]
            for d, j, part in zip(layout.dims, layout.register_indices(r), parts):
                if part is not None and d.wraps(j):
                    conds.append(self.b.lt(self.core.add(part, d.static(j)), d.size))
            out.append(self.core.all_of(conds))
        return self.core.remember(key, out)

    # -- tiles in registers --------------------------------------------------------------
    def regs(self, tile, layout: Layout | None = None, op: Op | None = None) -> Regs:
        """``tile`` in ``layout`` (its own, or the canonical one, when None)."""
        if isinstance(tile, Regs):
            if layout is None or tile.layout.same(layout):
                return tile
            return self.convert(tile, layout, op)
        layout = layout or self.canonical(tile.shape)
        key = ("lazy", tile, layout.dims)
        found = self.core.lookup(key)
        if found is not None:
            return found
        values = tuple(tile.at(c) for c in self.coords(layout))
        return self.core.remember(key, Regs(layout, tile.dtype, values))

    def mask(self, tile, layout: Layout) -> list:
        """A mask's registers in ``layout``; None for a register whose mask is always true."""
        if isinstance(tile, Lazy) and tile.constant is True:
            return [None] * layout.registers
        return list(self.regs(tile, layout).values)

    def unit_reshape(self, x: Regs, shape) -> Regs:
        return Regs(Expand(x.layout, tuple(shape)), x.dtype, x.values)

    def transpose(self, x: Regs, perm) -> Regs:
        layout = Permute(x.layout, perm)
        source = transposed_source(perm)
        values = tuple(x.values[x.layout.register(source(layout.register_indices(r)))]
                       for r in range(layout.registers))
        return Regs(layout, x.dtype, values)

    # -- registers and shared memory -----------------------------------------------------------
    def store_owned(self, array: SharedArray, x: Regs, at_of, value_of=lambda v: v) -> None:
        """Each register of ``x`` written to shared memory at ``at_of(coordinates)`` by the owner
        of its element only: a replica (a thread with replica bits, or a register past the
        tile's end) holding the same element would store it again, a race (registers guarded
        alike share one branch, so their stores can still merge into vector stores)."""
        owners = self.owners(x.layout)
        groups: dict = {}
        for r, (c, v) in enumerate(zip(self.coords(x.layout), x.values)):
            cond = owners[r]
            groups.setdefault(None if cond is None else id(cond), (cond, []))[1].append((c, v))

        def put(items):
            for c, v in items:
                self.scratch.store(array, value_of(v), at_of(c))

        for cond, items in groups.values():
            if cond is None:
                put(items)
            else:
                self.b.if_(cond, lambda inner, items=items: self.core.within(inner, lambda: put(items)))

    def convert(self, x: Regs, layout: Layout, op: Op | None, source_of=None, row_pitch: int | None = None) -> Regs:
        """``x`` in ``layout`` through shared memory: each register is written at its element's
        row-major position, then read back where ``layout`` wants it (``source_of`` maps a
        coordinate of the new tile to one of ``x``, for broadcasts and reshapes; ``row_pitch``:
        the rows of a tile of one row axis and one column axis, axes of 1 aside, that many
        elements apart instead, padded so that neither side meets a bank conflict)."""
        key = ("convert", x, layout.dims, source_of is None, row_pitch)
        found = self.core.lookup(key) if source_of is None else None
        if found is not None:
            return found
        scratch, core = self.scratch, self.core
        if row_pitch is None:
            count, at = math.prod(x.shape), lambda c: core.flat(c, x.shape)  # noqa: E731
        else:
            rows = math.prod(x.shape[:-1])
            count = rows * row_pitch
            at = lambda c: core.add(core.mul(core.flat(c[:-1], x.shape[:-1]), row_pitch), c[-1])  # noqa: E731
        array = scratch.scratch(x.dtype, count, op or core.current_op)
        scratch.before_write()
        self.store_owned(array, x, at)
        scratch.written()
        values = []
        for c in self.coords(layout):
            src = c if source_of is None else source_of(c)
            values.append(scratch.load(array, at(src), x.dtype))
        out = Regs(layout, x.dtype, tuple(values))
        return core.remember(key, out) if source_of is None else out

    def cat(self, a: Regs, b: Regs, axis: int, layout: Layout, op: Op) -> Regs:
        """``a`` then ``b`` along ``axis``, in ``layout``: both written into one scratch array at
        their elements' row-major positions in the result, then read back."""
        core, shape = self.core, layout.shape
        shift = a.shape[axis]
        array = self.scratch.scratch(a.dtype, math.prod(shape), op)
        self.scratch.before_write()
        self.store_owned(array, a, lambda c: core.flat(c, shape))
        self.store_owned(array, b, lambda c: core.flat(c[:axis] + (core.add(c[axis], shift),) + c[axis + 1:], shape))
        self.scratch.written()
        values = tuple(self.scratch.load(array, core.flat(c, shape), a.dtype) for c in self.coords(layout))
        return Regs(layout, a.dtype, values)

    def stage(self, array: SharedArray, x: Regs, place, convert=lambda v: v) -> None:
        """Each element of ``x`` this thread owns into ``array`` at ``place(coords)`` (a replica's
        thread stores nothing: two threads writing one element would race)."""
        for c, v, owner in zip(self.coords(x.layout), x.values, self.owners(x.layout)):
            at, value = place(c), convert(v)
            if owner is None:
                self.scratch.store(array, value, at)
            else:
                self.b.if_(owner, lambda inner, at=at, value=value: self.core.within(
                    inner, lambda: self.scratch.store(array, value, at)))

    # -- values carried through a region (a fold's, an if's) -----------------------------------
    def flatten(self, values, layouts) -> list:
        """``values`` as a flat list of scalars: a tile's registers in its layout of ``layouts``
        (None: a scalar, itself)."""
        out = []
        for v, layout in zip(values, layouts):
            if layout is None:
                out.append(v)
            else:
                out.extend(self.regs(v, layout).values)
        return out

    def unflatten(self, olds, flat, layouts) -> None:
        """The tile-graph values ``olds`` bound to what :meth:`flatten` made of them."""
        flat = list(flat)
        for old, layout in zip(olds, layouts):
            if layout is None:
                self.env[old] = flat.pop(0)
            else:
                values = tuple(flat.pop(0) for _ in range(layout.registers))
                self.env[old] = Regs(layout, old.type.dtype, values)

