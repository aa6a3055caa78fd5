"""Tiles' global-memory accesses in the tile distribution (:mod:`accy.lowering.distribute`):
guarded by their masks, done by each element's owner only, and ``vec`` elements at a time
where the offsets' form and alignment allow it."""

from __future__ import annotations

import math

import attrs

from ..dsl.ir import Op, Value
from ..dsl.ops import AlignedAttrs, Space
from ..dsl.traced import Traced
from ..dsl.types import DType
from .layouts import Blocked, Expand, Layout, Mma
from .rebuild import Part, Rebuild
from .registers import Registers, Regs
from .scratch import Scratch, pitch
from .shape_guards import ShapeGuards
from .tile_access import Shapes, conjuncts


@attrs.frozen(eq=False)
class Deferred:
    """A ``tile_load`` not yet done, whose one use is a tensor-core dot's operand (see
    :meth:`~accy.lowering.tensor_cores.TensorCoreDot.direct_loads`): the load, the distributor's
    values of its operands (offsets, other, mask), the unit reshapes and the transpose between it
    and the dot (``steps``: ("reshape", shape) or ("trans", perm)), the 2-D ``shape`` the dot sees,
    and whether that is the transpose of the rows in memory."""

    op: Op
    operands: tuple
    steps: tuple = ()
    shape: tuple = ()
    transposed: bool = False

    @property
    def dtype(self) -> DType:
        return self.op.attrs.dtype

    def then(self, step: tuple, shape: tuple) -> "Deferred":
        return attrs.evolve(self, steps=self.steps + (step,), shape=tuple(shape),
                            transposed=self.transposed ^ (step[0] == "trans"))


@attrs.frozen(eq=False)
class VectorPlan:
    """A tile access done ``vec`` elements at a time where ``fast`` (its alignment and unit
    stride, checked at run time) holds: ``groups`` lists each group's registers; ``box``: its
    mask is a box (see :class:`~accy.lowering.tile_access.Box`)."""

    vec: int
    fast: object  # a Traced bool, or None where nothing needs checking at run time
    groups: tuple
    box: bool


class MemoryAccesses(Part):
    """``tile_load``, ``tile_store``, ``tile_atomic`` and a program's scalar ``store`` and
    ``atomic`` (done once, by thread 0); a load in ``direct`` (one that goes straight to a
    tensor-core dot's staging) is left :class:`Deferred`."""

    def __init__(self, core: Rebuild, registers: Registers, scratch: Scratch, direct: frozenset, used: set):
        super().__init__(core)
        self.registers = registers
        self.scratch = scratch
        self.direct = direct
        self.used = used  # the tile graph's values that some op uses
        self.shapes = Shapes()  # the affine forms of offsets and the boxes of masks (vector accesses)
        self.guards = ShapeGuards(core, self)

    def access_layout(self, *tiles) -> Layout:
        held = next((t for t in tiles if isinstance(t, Regs)), None)
        return held.layout if held is not None else self.registers.canonical(tiles[0].shape)

    def expr(self, e):
        """A tile_access expression (an int, a tile-graph scalar, or (add|mul, a, b)) recorded here."""
        if isinstance(e, int):
            return e
        if isinstance(e, tuple):
            a, b = self.expr(e[1]), self.expr(e[2])
            return self.core.add(a, b) if e[0] == "add" else self.core.times(a, b)
        return self.env[e]

    def vector_plan(self, op: Op, layout: Layout, offsets: Value | None = None) -> VectorPlan | None:
        """How ``op`` (a tile_load or tile_store) may access memory ``vec`` elements at once, or None.

        Where its offsets are ``base + sum_d coef_d * i_d`` and each thread holds runs of
        consecutive elements along the last axis, a group of ``vec`` of them (up to 16 bytes)
        is one vector access when ``coef_last`` is 1, the buffer's address is a multiple of the
        group's bytes and ``base`` and every other ``coef_d`` are multiples of ``vec``: then
        every group starts at such an address.  That is checked once, where the access is (all
        of it is invariant in a loop around it); a group is taken whole only where its mask
        holds for every element (and, storing, this thread owns them), else element by element.
        ``offsets``: the tile graph's offsets it runs on (by default its own; a shape guard's
        ``flat`` where :meth:`seen_through`)."""
        d = layout.dims[-1]
        itemsize = op.attrs.dtype.itemsize
        vec = 1
        while vec * 2 <= d.per_thread and vec * 2 * itemsize <= 16 and d.per_thread % (vec * 2) == 0:
            vec *= 2
        if vec == 1 or d.size % vec or op.attrs.space is not Space.GLOBAL:
            return None
        mask = op.operands[-1]
        form = self.shapes.affine(op.operands[0] if offsets is None else offsets, conjuncts(mask))
        if form is None:
            return None
        shape = layout.shape
        conds = []
        for k, (coef, n) in enumerate(zip(form.coefs, shape)):
            want = 1 if k == len(shape) - 1 else 0  # the last axis's stride 1, the others' multiples of vec
            if n == 1 and k != len(shape) - 1:
                continue
            c = self.expr(coef)
            if isinstance(c, int):
                if (c != 1) if want else (c % vec):
                    return None
            elif want:
                conds.append(self.b.eq(c, 1))
            else:
                conds.append(self.b.eq(self.b.bitwise_and(c, vec - 1), 0))
        base = self.expr(form.base)
        if isinstance(base, int):
            if base % vec:
                return None
        else:
            conds.append(self.b.eq(self.b.bitwise_and(base, vec - 1), 0))
        aligned = Traced(self.core.record("aligned", [], AlignedAttrs(buffer=op.attrs.buffer,
                                                                      bytes=vec * itemsize)).result)
        groups = []  # each: the registers of vec consecutive elements along the last axis, in order
        for r in range(layout.registers):
            js = layout.register_indices(r)
            if js[-1] % vec == 0:
                groups.append([layout.register(js[:-1] + (js[-1] + k,)) for k in range(vec)])
        return VectorPlan(vec, self.core.all_of([aligned] + conds), tuple(groups), self.shapes.box(mask) is not None)

    def group_guard(self, plan: VectorPlan, group, masks, owners=None):
        """Where ``group`` is taken whole: the plan's check, its mask over every element (the
        first and last for a box: the elements differ only along the last axis) and, storing,
        this thread owning them (its first and last: the same along the other axes)."""
        ends = [group[0], group[-1]]
        conds = [plan.fast] + [masks[r] for r in (ends if plan.box else group)]
        if owners is not None:
            conds += [owners[r] for r in ends]
        return self.core.all_of(conds)

    def tile_load(self, op: Op) -> None:
        operands = tuple(self.env[v] for v in op.operands)
        if op in self.direct:
            self.env[op.result] = Deferred(op, operands, shape=op.result.type.shape)
            return
        self.env[op.result] = self.load_regs(op, *operands)

    def load_element(self, op: Op, at, attrs_=None) -> Traced:
        """One element of the tile ``op`` loads, at ``at``: a load with the tile access's
        attributes (vec 1, its bounds included)."""
        return Traced(self.core.record("load", [at], attrs_ or op.attrs).result)

    def load_regs(self, op: Op, offsets, other, mask) -> Regs:
        """The tile ``op`` loads, into registers: where its shape guard is seen through
        (:mod:`.shape_guards`), on its flat offsets where the check holds."""
        layout = self.access_layout(offsets, mask)
        seen = self.guards.seen_through(op)
        if seen is None:
            return self.load_in(op, layout, offsets, other, mask)
        fast = lambda: self.load_in(op, layout, self.env[seen.flat], other, mask, seen.flat,  # noqa: E731
                                    seen.fast_attrs(op)).values

        def failed():  # the launch stops (where nothing is let through, every register is other)
            probe = self.guards.on_failure(op, seen, lambda at: self.load_element(op, at), other)
            return (probe,) + (other,) * (layout.registers - 1)

        return Regs(layout, op.attrs.dtype, tuple(self.guards.choose(seen, fast, failed)))

    def load_in(self, op: Op, layout: Layout, offsets, other, mask, through: Value | None = None,
                attrs_=None) -> Regs:
        """The tile ``op`` loads, into registers of ``layout``, at ``offsets`` (the distributed
        value of the tile graph's ``through``, by default the op's own) with ``attrs_``."""
        core = self.core
        attrs_ = attrs_ or op.attrs
        offs = self.registers.regs(offsets, layout, op).values
        masks = self.registers.mask(mask, layout)
        load = lambda at: self.load_element(op, at, attrs_)  # noqa: E731

        def each(r):
            at, m = offs[r], masks[r]
            if m is None:
                return load(at)
            return self.b.if_(m, lambda inner: core.within(inner, lambda: load(at)), lambda inner: other)

        plan = self.vector_plan(op, layout, through)
        if plan is None:
            return Regs(layout, op.attrs.dtype, tuple(each(r) for r in range(layout.registers)))
        wide = attrs.evolve(attrs_, vec=plan.vec)
        values = [None] * layout.registers

        def whole(group):
            return tuple(Traced(v) for v in core.record("load", [offs[group[0]]], wide).results)

        def gather(groups, fn):  # fn(inner) -> each group's values, flat; into their registers
            def run(inner):
                return core.within(inner, lambda: tuple(v for g in groups for v in fn(g)))
            return run

        guards = [self.group_guard(plan, g, masks) for g in plan.groups]
        if all(g is plan.fast for g in guards):  # no mask: one branch for the whole tile
            out = self.b.if_(plan.fast, gather(plan.groups, whole), gather(plan.groups, lambda g: [each(r) for r in g]))
            for r, v in zip((r for g in plan.groups for r in g), out):
                values[r] = v
        else:
            for g, guard in zip(plan.groups, guards):
                out = self.b.if_(guard, gather([g], whole), gather([g], lambda g: [each(r) for r in g]))
                for r, v in zip(g, out):
                    values[r] = v
        return Regs(layout, op.attrs.dtype, tuple(values))

    def restaged(self, op: Op, value):
        """``value`` as a global store of it is best made: a 16-bit tile held in the mma layout
        (each thread's runs 4 bytes, so a warp's store fills half of each 32-byte sector it
        writes) through shared memory, its rows padded to an odd number of 16-byte units
        (conflict-free both ways), into the layout where each thread holds 16 contiguous bytes:
        16-byte stores, a warp's whole rows, every sector full; any other tile as it is, and so
        this one where the scratch it needs would pass the program's shared-memory limit (an fp8
        matmul's 128x128 bf16 tile beside its operands' scratch)."""
        if not isinstance(value, Regs) or op.attrs.space is not Space.GLOBAL or value.dtype.itemsize != 2:
            return value
        held = value.layout.parent if isinstance(value.layout, Expand) else value.layout
        vec, columns = 16 // value.dtype.itemsize, value.shape[-1]
        layout = Blocked(tuple(value.shape), self.T, vec=vec)
        if not isinstance(held, Mma) or columns % vec or layout.dims[-1].per_thread != vec:
            return value
        row_pitch = pitch(columns, value.dtype.itemsize)
        if not self.scratch.fits(value.dtype, math.prod(value.shape[:-1]) * row_pitch):
            return value
        return self.registers.convert(value, layout, op, row_pitch=row_pitch)

    def guarded_each(self, op: Op, access, plan_for=None, offsets=None, attrs_=None, restage=False) -> None:
        """``access(offset, value)`` for every register whose element this thread owns and whose
        mask holds (``plan_for(layout)``: a :class:`VectorPlan` for whole groups at once, stored
        with ``attrs_``, by default the op's) at ``offsets`` (by default the op's own); with
        ``restage``, the value :meth:`restaged` first."""
        core, registers = self.core, self.registers
        own, value, mask = (self.env[v] for v in op.operands)
        if restage:
            value = self.restaged(op, value)
        offsets = own if offsets is None else offsets
        layout = self.access_layout(value, own, mask)
        offs = registers.regs(offsets, layout, op).values
        vals = registers.regs(value, layout, op).values
        masks = registers.mask(mask, layout)
        owners = registers.owners(layout)

        def each(r):
            guard = core.all_of([owners[r], masks[r]])
            at, v = offs[r], vals[r]
            if guard is None:
                access(at, v)
            else:
                self.b.if_(guard, lambda inner: core.within(inner, lambda: access(at, v) and None))

        plan = plan_for(layout) if plan_for is not None else None
        if plan is None:
            for r in range(layout.registers):
                each(r)
            return
        wide = attrs.evolve(attrs_ or op.attrs, vec=plan.vec)

        def run(groups, fn):
            return lambda inner: core.within(inner, lambda: [fn(g) for g in groups] and None)

        whole = lambda g: core.record("store", [offs[g[0]]] + [vals[r] for r in g], wide)  # noqa: E731
        one_by_one = lambda g: [each(r) for r in g]  # noqa: E731
        guards = [self.group_guard(plan, g, masks, owners) for g in plan.groups]
        if all(g is plan.fast for g in guards):  # no mask, no replicas: one branch for the whole tile
            self.b.if_(plan.fast, run(plan.groups, whole), run(plan.groups, one_by_one))
            return
        for g, guard in zip(plan.groups, guards):
            self.b.if_(guard, run([g], whole), run([g], one_by_one))

    def tile_store(self, op: Op) -> None:
        """The tile ``op`` stores; where its shape guard is seen through (:mod:`.shape_guards`),
        on its flat offsets where the check holds.  A tile access's attributes are its
        elements' (vec 1, its bounds included)."""
        def on(offsets=None, through=None, attrs_=op.attrs):
            self.guarded_each(op, lambda at, v: self.core.record("store", [at, v], attrs_) and None,
                              lambda layout: self.vector_plan(op, layout, through), offsets, attrs_, restage=True)

        seen = self.guards.seen_through(op)
        if seen is None:
            return on()
        dtype = op.attrs.dtype
        value = lambda: self.core.const(False if dtype.is_bool else 0, dtype)  # noqa: E731  (never written)
        self.guards.choose(seen, lambda: on(self.env[seen.flat], seen.flat, seen.fast_attrs(op)),
                           lambda: self.guards.on_failure(
                               op, seen, lambda at: self.core.record("store", [at, value()], op.attrs)))

    def tile_atomic(self, op: Op) -> None:
        self.guarded_each(op, lambda at, v: self.core.record("atomic", [at, v], op.attrs) and None)

    def store(self, op: Op) -> None:
        """A scalar store in a program happens once: thread 0 does it."""
        if op.attrs.space is not Space.GLOBAL:  # pragma: no cover - tile programs have no shared arrays
            return self.core.copy(op)
        core = self.core
        operands = [self.env[v] for v in op.operands]
        self.b.if_(self.b.eq(self.tid, 0),
                   lambda inner: core.within(inner, lambda: core.record("store", operands, op.attrs) and None))

    def atomic(self, op: Op) -> None:
        """A scalar atomic in a program happens once (thread 0); what it returns reaches every thread."""
        core, scratch = self.core, self.scratch
        operands = [self.env[v] for v in op.operands]
        if op.result not in self.used:
            self.b.if_(self.b.eq(self.tid, 0),
                       lambda inner: core.within(inner, lambda: core.record("atomic", operands, op.attrs) and None))
            return
        array = scratch.scratch(op.attrs.dtype, 1, op)
        scratch.before_write()

        def once():
            old = Traced(core.record("atomic", operands, op.attrs).result)
            scratch.store(array, old, 0)

        self.b.if_(self.b.eq(self.tid, 0), lambda inner: core.within(inner, once))
        scratch.written()
        self.env[op.result] = scratch.load(array, 0, op.attrs.dtype)
