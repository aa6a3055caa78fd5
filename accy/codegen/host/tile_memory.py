"""Tile loads, stores and atomics against the kernel's buffers, for :mod:`.tiles`.  Offsets affine
with unit stride along the last axis (a tensor's run-time stride is tested for 1): plain vector
accesses where the mask's box covers the tile and its ends are in bounds, else one masked vector
access per chunk of a row with the row's bounds checked once; other affine offsets: gathers;
anything else: the offsets and mask tiles, element by element.  An active offset outside its
buffer records the first failure in the status word and the access is skipped.  A shape guard
seen through is checked once per access (:mod:`.tile_guards`)."""

from __future__ import annotations

from llvmlite import ir

from ...dsl.ir import Op
from ...lowering.tile_access import AccessPlan, Box, constant_factor
from ..abi import STATUS_LOAD_OOB, STATUS_STORE_OOB
from ..llvm import Lowering
from ..llvm_types import I1, I64, memory_type
from .tile_guards import ShapeGuards
from .tile_vectors import Fused, Tail, Tile


# the largest constant step along a row accessed as one contiguous masked access (a wider one reads
# mostly elements it throws away: a gather does better)
MAX_SPREAD = 4


class TileMemoryEmitter:
    """``tile_load``, ``tile_store`` and ``tile_atomic`` by their access plans (:mod:`accy.lowering.tile_access`)."""

    def __init__(self, lw: Lowering):
        self.lw = lw  # the TileHostLowering: its builder, values, tiles and checks
        self.v = lw.vectors
        self.guards = ShapeGuards(lw, self)

    def expr(self, e) -> ir.Value:
        """An access form's scalar expression."""
        if isinstance(e, int):
            return ir.Constant(I64, e)
        if isinstance(e, tuple):
            kind, x, y = e
            return (self.lw.b.add if kind == "add" else self.lw.b.mul)(self.expr(x), self.expr(y))
        return self.lw.value(e)

    def box_ranges(self, box: Box, shape: tuple[int, ...]):
        """Each axis's [lo, hi) (clamped to the tile) and the i1 of the conditions that do not
        depend on the position."""
        b = self.lw.b
        zero = ir.Constant(I64, 0)
        ranges = []
        for d, n in enumerate(shape):
            lo, hi = zero, ir.Constant(I64, n)
            for e in box.lows[d]:
                lo = self.lw.call("llvm.smax", [lo, self.expr(e)])
            for e in box.highs[d]:
                hi = self.lw.call("llvm.smin", [hi, self.expr(e)])
            ranges.append((lo, hi))
        uniform = ir.Constant(I1, 1)
        for e in box.zero_lows:
            uniform = b.and_(uniform, b.icmp_signed("<=", self.expr(e), zero))
        for e in box.zero_highs:
            uniform = b.and_(uniform, b.icmp_signed(">", self.expr(e), zero))
        for v in box.flags:
            uniform = b.and_(uniform, self.lw.value(v))
        return ranges, uniform

    def within(self, ranges, uniform: ir.Value, idx) -> ir.Value:
        """Whether the position ``idx`` (along the first ``len(idx)`` axes) is in a box's ``ranges``
        (from :meth:`box_ranges`), its ``uniform`` conditions holding."""
        b = self.lw.b
        inside = uniform
        for i, (lo, hi) in zip(idx, ranges):
            inside = b.and_(inside, b.and_(b.icmp_signed("<=", lo, i), b.icmp_signed("<", i, hi)))
        return inside

    def empty(self, ranges, uniform: ir.Value) -> ir.Value:
        """Whether a box (its :meth:`box_ranges`) holds no element."""
        b = self.lw.b
        none = b.not_(uniform)
        for lo, hi in ranges:
            none = b.or_(none, b.icmp_signed(">=", lo, hi))
        return none

    def access(self, op: Op, value: Tile | None, out: Tile | None, other: ir.Value | None) -> ir.Value | None:
        """A tile_load (into ``out``, ``other`` where masked off) or tile_store (of ``value``) by
        its plan: row by row from the affine offsets, else element by element.  A load with a
        tail (:func:`accy.lowering.tile_fusion.plan_tails`) is built only up to its start,
        which is returned."""
        plan = self.lw.plans[op]
        kind = STATUS_LOAD_OOB if op.opcode == "tile_load" else STATUS_STORE_OOB
        if plan.offsets is None:
            self.by_elements(op, value, out, other, kind)
            return None
        return self.by_rows(op, plan, value, out, other, kind)

    def buffer(self, op: Op):
        name, dtype = op.attrs.buffer, op.attrs.dtype
        return self.lw.pointers[name], self.lw.counts[name], memory_type(dtype), dtype

    def by_elements(self, op: Op, value, out, other, kind) -> None:
        offsets, mask = self.lw.tile(op.operands[0]), self.lw.tile(op.operands[-1])
        ptr, count, mem, dtype = self.buffer(op)
        b = self.lw.b
        checks = self.lw.memory.checked(op)
        passthru = self.v.splat(self.v.to_memory(other, dtype)) if other is not None else None

        def chunk(j, valid, cs):
            at = self.v.load(offsets, j)
            m = self.v.load(mask, j)
            if valid is not None:
                m = b.and_(m, valid)
            if checks:
                ok = b.icmp_unsigned("<", at, self.v.splat(count))
                self.lw.fail_lanes(op, b.and_(m, b.not_(ok)), at, kind)
                m = b.and_(m, ok)
            pointers = self.v.addresses(ptr, mem, at)
            if out is not None:
                self.v.store(out, j, self.v.from_memory(self.v.gather(pointers, m, passthru, dtype.itemsize), dtype))
            elif value is not None:
                self.v.scatter(self.v.to_memory(self.v.load(value, j), dtype), pointers, m, dtype.itemsize)
            return []

        self.v.chunks(offsets.size, chunk)

    def by_rows(self, op: Op, plan: AccessPlan, value, out, other, kind) -> ir.Value | None:
        shape = op.operands[0].type.shape
        n = shape[-1]
        ptr, count, mem, dtype = self.buffer(op)
        b = self.lw.b
        checks = self.lw.memory.checked(op)
        base = self.expr(plan.offsets.base)
        coefs = [self.expr(c) for c in plan.offsets.coefs]
        step = coefs[-1]
        box = plan.box
        mask_tile = None if box is not None else self.lw.tile(op.operands[-1])
        if box is not None:
            ranges, uniform = self.box_ranges(box, shape)
            lo, hi = ranges[-1]
            if plan.guard is not None and checks:
                uniform = b.and_(uniform, self.guards.holds(op, plan.guard, box, shape, kind))
        passthru = self.v.splat(self.v.to_memory(other, dtype)) if other is not None else None
        iota = self.v.iota()
        align = dtype.itemsize
        upto = None  # a load whose tail is its other: built up to the tail's start
        if out is not None and op.result in self.lw.tails:
            upto = self.lw.tail_start(lo, hi, uniform)

        # a step of 2 to 4 along the row, known where the code runs: each chunk's lanes as one
        # contiguous access, spread (set by at_step below, before the rows are written)
        spread = None

        def rows(contiguous: bool) -> None:
            def row(r, idx):
                row_base = base
                for i, c in zip(idx, coefs):
                    row_base = b.add(row_base, b.mul(i, c))
                first = b.mul(r, ir.Constant(I64, n))
                active = None
                if box is not None:
                    active = self.within(ranges, uniform, idx)
                    if contiguous and checks:  # the row's run of elements is in bounds iff both ends are
                        start = b.add(row_base, lo)
                        final = b.sub(b.add(row_base, hi), ir.Constant(I64, 1))
                        ok = b.and_(b.icmp_unsigned("<", start, count), b.icmp_unsigned("<", final, count))
                        bad = b.and_(b.and_(active, b.icmp_signed("<", lo, hi)), b.not_(ok))
                        detail = lambda start=start: (b.select(b.icmp_unsigned("<", start, count), count, start),  # noqa: E731
                                                      self.lw.lane())
                        self.lw.fail_if(op, bad, kind, detail)
                        active = b.and_(active, ok)

                def chunk(j, valid, cs):
                    jv = b.add(self.v.splat(j), iota)
                    if box is not None:
                        m = b.and_(b.and_(b.icmp_signed(">=", jv, self.v.splat(lo)), b.icmp_signed("<", jv, self.v.splat(hi))),
                                   self.v.splat(active))
                    else:
                        m = self.v.load(mask_tile, b.add(first, j))
                        if valid is not None:
                            m = b.and_(m, valid)
                    if contiguous:
                        at = b.add(row_base, j)
                        if checks and box is None:
                            offsets = b.add(self.v.splat(at), iota)
                            ok = b.icmp_unsigned("<", offsets, self.v.splat(count))
                            self.lw.fail_lanes(op, b.and_(m, b.not_(ok)), offsets, kind)
                            m = b.and_(m, ok)
                        where = b.gep(ptr, [at], source_etype=mem)
                        if out is None and value is None:
                            return []
                        if value is None:
                            self.v.store(out, b.add(first, j),
                                         self.v.from_memory(self.v.masked_load(where, m, passthru, align), dtype))
                        else:
                            self.v.masked_store(self.v.to_memory(self.v.load(value, b.add(first, j)), dtype), where, m, align)
                        return []
                    offsets = b.add(self.v.splat(row_base), b.mul(jv, self.v.splat(step)))
                    if checks:
                        ok = b.icmp_unsigned("<", offsets, self.v.splat(count))
                        self.lw.fail_lanes(op, b.and_(m, b.not_(ok)), offsets, kind)
                        m = b.and_(m, ok)
                    if spread is not None and (out is not None or value is not None):
                        return spread_chunk(row_base, first, j, m)
                    pointers = self.v.addresses(ptr, mem, offsets)
                    if out is not None:
                        self.v.store(out, b.add(first, j), self.v.from_memory(self.v.gather(pointers, m, passthru, align), dtype))
                    elif value is not None:
                        self.v.scatter(self.v.to_memory(self.v.load(value, b.add(first, j)), dtype), pointers, m, align)
                    return []

                begin, end = None, upto
                if out is None and box is not None and n % self.v.L == 0:  # a store: only the box's chunks
                    begin = b.select(active, self.v.whole_vectors(lo, up=False), ir.Constant(I64, 0))
                    end = b.select(active, self.lw.call("llvm.smax", [begin, self.v.whole_vectors(hi, up=True)]), begin)
                self.v.chunks_between(n, begin, end, chunk)

            self.v.rows(shape[:-1], row)

        def whole_rows() -> None:
            """Every element active and inside the buffer: plain vector accesses, no checks."""

            def row(r, idx):
                row_base = base
                for i, c in zip(idx, coefs):
                    row_base = b.add(row_base, b.mul(i, c))
                first = b.mul(r, ir.Constant(I64, n))

                def chunk(j, valid, cs):
                    if spread is not None:
                        return spread_chunk(row_base, first, j, valid)
                    where = b.gep(ptr, [b.add(row_base, j)], source_etype=mem)
                    if out is not None:
                        v = b.load(where, typ=self.v.vec(mem), align=align) if valid is None else \
                            self.v.masked_load(where, valid, passthru, align)
                        self.v.store(out, b.add(first, j), self.v.from_memory(v, dtype))
                    elif valid is None:
                        b.store(self.v.to_memory(self.v.load(value, b.add(first, j)), dtype), where, align=align)
                    else:
                        self.v.masked_store(self.v.to_memory(self.v.load(value, b.add(first, j)), dtype), where, valid, align)
                    return []

                self.v.chunks(n, chunk)

            if out is not None or value is not None:
                self.v.rows(shape[:-1], row)

        def spread_chunk(row_base, first, j, lanes) -> list:
            """A chunk at a constant step: its lanes' span in one access, masked to the lanes."""
            where = b.gep(ptr, [b.add(row_base, b.mul(j, ir.Constant(I64, spread)))], source_etype=mem)
            if out is not None:
                got = self.v.spread_load(where, spread, lanes, passthru, align)
                self.v.store(out, b.add(first, j), self.v.from_memory(got, dtype))
            else:
                self.v.spread_store(self.v.to_memory(self.v.load(value, b.add(first, j)), dtype), where, spread, lanes, align)
            return []

        def whole_tile() -> ir.Value:
            """Every element active and (with checks) the tile's lowest and highest offsets inside (and,
            checks or not, the elements a spread row's plain loads span past its last)."""
            whole = uniform
            for (lo_d, hi_d), extent in zip(ranges, shape):
                whole = b.and_(whole, b.and_(b.icmp_signed("==", lo_d, ir.Constant(I64, 0)),
                                             b.icmp_signed("==", hi_d, ir.Constant(I64, extent))))
            if checks or spread:
                low, high = base, b.add(base, ir.Constant(I64, (spread or 1) - 1))
                for c, extent in zip(coefs, shape):
                    span = b.mul(c, ir.Constant(I64, extent - 1))
                    low = b.add(low, self.lw.call("llvm.smin", [span, ir.Constant(I64, 0)]))
                    high = b.add(high, self.lw.call("llvm.smax", [span, ir.Constant(I64, 0)]))
                whole = b.and_(whole, b.and_(b.icmp_signed(">=", low, ir.Constant(I64, 0)),
                                             b.icmp_signed("<", high, count)))
            return whole

        def split(fast_path, edge_path) -> None:
            fast, edge, joined = (b.append_basic_block(name) for name in ("whole_tile", "edge_tile", "tile_done"))
            b.cbranch(whole_tile(), fast, edge)
            b.position_at_end(fast)
            fast_path()
            b.branch(joined)
            b.position_at_end(edge)
            edge_path()
            b.branch(joined)
            b.position_at_end(joined)

        def unit_rows() -> None:
            if box is None:
                rows(True)
            else:
                split(whole_rows, lambda: rows(True))

        def active_box_inside() -> ir.Value:
            """Nothing active, or the lowest and highest offsets of the mask's box inside the
            buffer (offsets are affine: every one between them is too)."""
            low = high = base
            for (lo_d, hi_d), c in zip(ranges, coefs):
                first, last = b.mul(c, lo_d), b.mul(c, b.sub(hi_d, ir.Constant(I64, 1)))
                low = b.add(low, self.lw.call("llvm.smin", [first, last]))
                high = b.add(high, self.lw.call("llvm.smax", [first, last]))
            inside = b.and_(b.icmp_signed(">=", low, ir.Constant(I64, 0)), b.icmp_signed("<", high, count))
            return b.or_(self.empty(ranges, uniform), inside)

        # a check-only run needing the bounds alone: a box inside the buffer needs no more, else each
        # element's check finds the first failure (a load whose values a division's check reads is
        # loaded as in a full run)
        if self.lw.check_only and out is None and value is None:
            if box is None:
                rows(False)
                return
            failing, done = b.append_basic_block("box_outside"), b.append_basic_block("box_checked")
            b.cbranch(active_box_inside(), done, failing)
            b.position_at_end(failing)
            rows(False)
            b.branch(done)
            b.position_at_end(done)
            return
        def at_step(k: int) -> None:
            """The accesses where the step along the row is the constant ``k``."""
            nonlocal spread
            spread = k if 2 <= k <= MAX_SPREAD else None
            unit_rows() if k == 1 else split(whole_rows, lambda: rows(False)) if spread and box else rows(False)
            spread = None

        factor, stride = constant_factor(plan.offsets.coefs[-1])
        if stride is None:
            at_step(factor)
            return upto
        # a run-time stride along the last axis (a tensor's): tested for 1, where the step is the factor
        unit, strided, done = (b.append_basic_block(n) for n in ("unit_stride", "strided", "strided_done"))
        b.cbranch(b.icmp_signed("==", self.expr(stride), ir.Constant(I64, 1)), unit, strided)
        b.position_at_end(unit)
        at_step(factor)
        b.branch(done)
        b.position_at_end(strided)
        rows(False)
        b.branch(done)
        b.position_at_end(done)
        return upto

    def fused_load(self, op: Op) -> Fused:
        """A box-masked affine load computed where it is read, chunk by chunk (a masked vector
        load, or a gather where the last axis's stride is not 1), checking nothing: its launch
        was checked whole before it ran."""
        plan = self.lw.plans[op]
        shape = op.result.type.shape
        b = self.lw.b
        ptr, _, mem, dtype = self.buffer(op)
        base = self.expr(plan.offsets.base)
        coefs = [self.expr(c) for c in plan.offsets.coefs]
        ranges, uniform = self.box_ranges(plan.box, shape)
        lo_s, hi_s = ranges[-1]
        lo, hi = self.v.splat(lo_s), self.v.splat(hi_s)
        passthru = self.v.splat(self.v.to_memory(self.lw.value(op.operands[1]), dtype))
        static = plan.offsets.coefs[-1]
        unit = None if isinstance(static, int) else b.icmp_signed("==", coefs[-1], ir.Constant(I64, 1))
        n, align = shape[-1], dtype.itemsize

        def chunk(idx, mask):
            if len(shape) == 1:
                return at((), idx, mask)
            b = self.lw.b  # a chunk lies in one row (the last axis is whole vectors)
            col = b.urem(idx, ir.Constant(I64, n))
            return at(self.v.unravel(b.udiv(idx, ir.Constant(I64, n)), shape[:-1]), col, mask)

        def at(rows, col, mask):
            """The chunk at column ``col`` of the row at ``rows`` (a position per axis but the last)."""
            b = self.lw.b
            row_base = base
            for i, c in zip(rows, coefs):
                row_base = b.add(row_base, b.mul(i, c))
            active = self.within(ranges, uniform, rows)
            lanes = b.add(self.v.splat(col), self.v.iota())
            m = b.and_(b.and_(b.icmp_signed(">=", lanes, lo), b.icmp_signed("<", lanes, hi)), self.v.splat(active))
            if mask is not None:
                m = b.and_(m, mask)

            def contiguous():
                where = b.gep(ptr, [b.add(row_base, col)], source_etype=mem)
                masked = lambda: self.v.masked_load(where, m, passthru, align)  # noqa: E731
                if mask is not None:
                    return masked()
                # a chunk inside the box (most of a row's): a plain load, no mask to build
                inside = b.and_(active, b.and_(b.icmp_signed(">=", col, lo_s),
                                               b.icmp_signed("<=", b.add(col, ir.Constant(I64, self.v.L)), hi_s)))
                return self.v.either(inside, lambda: b.load(where, typ=passthru.type, align=align), masked)

            def gathered():
                at = b.add(self.v.splat(row_base), b.mul(lanes, self.v.splat(coefs[-1])))
                return self.v.gather(self.v.addresses(ptr, mem, at), m, passthru, align)

            if unit is None:
                return self.v.from_memory(contiguous() if static == 1 else gathered(), dtype)
            return self.v.from_memory(self.v.either(unit, contiguous, gathered), dtype)

        tail = None
        if op.result in self.lw.tails:
            tail = Tail(self.lw.tail_start(*ranges[0], uniform), self.lw.value(op.operands[1]))
        return Fused(chunk, op.result.type, tail, tail_in_chunks=True, at=at)


    def load(self, op: Op) -> None:
        if op.result not in self.lw.live.values:  # a check-only run: the bounds alone
            self.access(op, None, None, None)
            return
        out = self.lw.new_tile(op.result)
        other = self.lw.value(op.operands[1])
        start = self.access(op, None, out, other)
        if start is not None:  # built up to its tail, where every lane is other
            self.lw.tiles[op.result] = Tile(out.ptr, out.type, Tail(start, other))

    def store(self, op: Op) -> None:
        self.access(op, None if self.lw.check_only else self.lw.tile(op.operands[1]), None, None)

    def atomic(self, op: Op) -> None:
        offsets, mask = self.lw.tile(op.operands[0]), self.lw.tile(op.operands[2])
        value = None if self.lw.check_only else self.lw.tile(op.operands[1])
        b = self.lw.b

        def element(e, cs):
            with b.if_then(self.v.load1(mask, e)):
                idx = self.v.load1(offsets, e)
                if value is not None:
                    self.lw.memory.atomic_at(op, idx, [self.v.load1(value, e)])
                elif self.lw.memory.checked(op):
                    self.lw.check(op, self.lw.memory.within(op, idx), STATUS_STORE_OOB, idx)
            return []

        self.v.loop(0, offsets.size, element, name="atomic")
