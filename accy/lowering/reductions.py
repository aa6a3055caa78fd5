"""Reductions, arg reductions and scans of tiles in the tile distribution
(:mod:`accy.lowering.distribute`): each thread's registers, then the lanes of a warp with
shuffles, then the warps through shared memory."""

from __future__ import annotations

import math

from ..dsl.combines import COMBINES, accumulator_type
from ..dsl.ir import Op
from ..dsl.ops import Combine
from ..dsl.traced import Traced
from ..dsl.types import DType, element_type, u8
from ..targets import WARP_SIZE
from .layouts import Layout, Slice
from .rebuild import Part, Rebuild, strides
from .registers import Registers, Regs
from .scratch import SHARED_LIMIT, Scratch


def axis_bits(d) -> tuple[list[int], list[int]]:
    """The thread bits a dimension uses: (those within a warp, those across warps)."""
    bits = d.bit_positions() if d.threads > 1 else []
    return [k for k in bits if k < 5], [k for k in bits if k >= 5]


def lines(layout: Layout, axis: int) -> list[list[int]]:
    """The registers of each line along ``axis``, lines in the order of the Slice's registers."""
    groups: dict = {}
    for r in range(layout.registers):
        js = layout.register_indices(r)
        groups.setdefault(js[:axis] + js[axis + 1:], []).append(r)
    return list(groups.values())


class Reductions(Part):
    """``reduce`` and ``argreduce`` (a rank-1 tile's result handed to every thread through shared
    memory, so later branches on it are uniform; a higher rank's left in the Slice of its
    operand's layout) and ``scan``."""

    def __init__(self, core: Rebuild, registers: Registers, scratch: Scratch):
        super().__init__(core)
        self.registers = registers
        self.scratch = scratch

    def identity(self, combine: Combine, dtype: DType) -> Traced:
        return self.core.const(COMBINES[combine].identity(dtype), dtype)

    def combine(self, combine: Combine, a, b):
        return Traced(self.core.record(COMBINES[combine].scalar_op, [a, b]).result)

    def across_threads(self, x: Regs, axis: int, partials: list, combine_fn, op: Op) -> list:
        """Combine ``partials`` (per group of registers: a tuple of values) across the threads
        along ``axis``: shuffles within the warp, then shared memory across warps."""
        d = x.layout.dims[axis]
        inwarp, cross = axis_bits(d)
        for k in reversed(inwarp):
            partials = [combine_fn(p, tuple(self.b.shuffle_xor(v, 1 << k) for v in p)) for p in partials]
        if not cross:
            return partials
        axis_mask = d.bits
        lo, width = cross[0], 1 << len(cross)
        assert cross == list(range(lo, lo + len(cross))), cross  # one field of warp bits (any layout's)
        base = self.b.bitwise_and(self.tid, (self.T - 1) & ~axis_mask) if (self.T - 1) & ~axis_mask else 0
        count = len(partials) * self.T
        places, used = [], {}  # each component's array and where its part starts (two of one type share one)
        for v in partials[0]:
            key = u8 if v.type.is_bool else v.type
            places.append(used.get(key, 0))
            used[key] = places[-1] + count
        scratch = self.scratch
        arrays = [scratch.scratch(v.type, used[u8 if v.type.is_bool else v.type], op) for v in partials[0]]
        scratch.before_write()
        for g, p in enumerate(partials):
            for array, first, v in zip(arrays, places, p):
                scratch.store(array, v, self.core.add(self.tid, first + g * self.T))
        scratch.written()
        out = []
        for g in range(len(partials)):
            acc = None
            for w in range(width):
                here = tuple(scratch.load(array, self.core.add(base, first + g * self.T + (w << lo)), v.type)
                             for array, first, v in zip(arrays, places, partials[g]))
                acc = here if acc is None else combine_fn(acc, here)
            out.append(acc)
        return out

    def reduce(self, op: Op) -> None:
        x = self.registers.regs(self.env[op.operands[0]])
        combine, axis = op.attrs.op, op.attrs.axis
        dtype = x.dtype
        acc_type = accumulator_type(combine, dtype)
        values = [self.b.cast(v, acc_type) if acc_type != dtype else v for v in x.values]
        layout = x.layout
        d = layout.dims[axis]
        if not COMBINES[combine].idempotent:  # a replica along the axis counts as the identity
            part = self.registers.thread_part(d)
            for r in range(layout.registers):
                j = layout.register_indices(r)[axis]
                if part is not None and d.wraps(j):
                    inside = self.b.lt(self.core.add(part, d.static(j)), d.size)
                    values[r] = self.b.select(inside, values[r], self.identity(combine, acc_type))
        partials = []
        for group in lines(layout, axis):
            acc = values[group[0]]
            for r in group[1:]:
                acc = self.combine(combine, acc, values[r])
            partials.append((acc,))
        partials = self.across_threads(x, axis, partials, lambda p, q: (self.combine(combine, p[0], q[0]),), op)
        results = [self.b.cast(p[0], dtype) if acc_type != dtype else p[0] for p in partials]
        self.reduced(op, x, axis, results)

    def reduced(self, op: Op, x: Regs, axis: int, results: list) -> None:
        if len(x.shape) == 1:
            (value,) = results
            varies = self.core.launch.varies(value)
            self.env[op.result] = self.scratch.scalar_to_all(value, op) if varies else value
        else:
            self.env[op.result] = Regs(Slice(x.layout, axis), element_type(op.result.type), tuple(results))

    def argreduce(self, op: Op) -> None:
        x = self.registers.regs(self.env[op.operands[0]])
        largest, axis = op.attrs.op is Combine.MAX, op.attrs.axis
        floats = x.dtype.is_float
        b = self.b

        def better(p, q):  # symmetric: the better pair, of equals the lower position (NumPy's rule)
            (pv, pi), (qv, qi) = p, q
            wins = b.gt(qv, pv) if largest else b.lt(qv, pv)
            tie = b.eq(qv, pv)
            if floats:  # NaN beats numbers; two NaNs tie
                pn, qn = b.isnan(pv), b.isnan(qv)
                wins = b.logical_or(wins, b.logical_and(qn, b.logical_not(pn)))
                tie = b.logical_or(tie, b.logical_and(pn, qn))
            take = b.logical_or(wins, b.logical_and(tie, b.lt(qi, pi)))
            return b.select(take, qv, pv), b.select(take, qi, pi)

        coords = self.registers.coords(x.layout)
        partials = []
        for group in lines(x.layout, axis):
            acc = None
            for r in group:
                here = (x.values[r], self.core.traced(coords[r][axis]))
                acc = here if acc is None else better(acc, here)
            partials.append(acc)
        partials = self.across_threads(x, axis, partials, better, op)
        self.reduced(op, x, axis, [p[1] for p in partials])

    # -- scans ---------------------------------------------------------------------------
    def scan(self, op: Op) -> None:
        x = self.registers.regs(self.env[op.operands[0]])
        combine, axis = op.attrs.op, op.attrs.axis
        dtype = x.dtype
        acc_type = accumulator_type(combine, dtype)
        d = x.layout.dims[axis]
        count = len(lines(x.layout, axis))
        cross = axis_bits(d)[1]
        scratch = count * d.reps * self.T * acc_type.itemsize if cross else 0
        if any(d.wraps(j) for j in range(d.registers)) or scratch > SHARED_LIMIT // 3:
            return self.serial_scan(op, x, acc_type)  # replicas past the end, or too many lines at once
        self.parallel_scan(op, x, acc_type)

    def parallel_scan(self, op: Op, x: Regs, acc_type: DType) -> None:
        """Each thread scans its registers along the axis (runs of ``per_thread`` consecutive
        elements, ``reps`` of them); the runs' totals are scanned across the threads along the
        axis, with shuffles within the warp (Hillis-Steele) then through shared memory across
        warps; each run adds what the threads before it hold, and each repetition what the
        repetitions before it total.  Float sums are reordered (the gamma_n bound holds)."""
        combine, axis = op.attrs.op, op.attrs.axis
        dtype, layout = x.dtype, x.layout
        d = layout.dims[axis]
        b, core, scratch = self.b, self.core, self.scratch
        fn = lambda p, q: self.combine(combine, p, q)  # noqa: E731
        values = [b.cast(v, acc_type) if acc_type != dtype else v for v in x.values]
        inwarp, cross = axis_bits(d)
        lo = d.stride.bit_length() - 1
        part = None  # this thread's index along the axis, within its warp
        if inwarp:
            part = b.bitwise_and(b.shr(self.tid, lo) if lo else self.tid, (1 << len(inwarp)) - 1)
        groups = lines(layout, axis)
        runs = []  # per group and repetition: the registers of this thread's run, in order
        for group in groups:
            by_j = sorted(group, key=lambda r: layout.register_indices(r)[axis])
            runs.append([by_j[k * d.per_thread:(k + 1) * d.per_thread] for k in range(d.reps)])
        scanned = {}
        totals = []  # per group and repetition: this thread's run total
        for group_runs in runs:
            for run in group_runs:
                acc = None
                for r in run:
                    acc = values[r] if acc is None else fn(acc, values[r])
                    scanned[r] = acc
                totals.append(acc)
        # inclusive scans of the run totals over the lanes along the axis
        inclusive = list(totals)
        for i in range(len(inwarp)):
            delta = 1 << (lo + i)
            ups = [b.shuffle_up(v, delta) for v in inclusive]
            take = b.ge(part, 1 << i)
            inclusive = [b.select(take, fn(u, v), v) for u, v in zip(ups, inclusive)]
        identity = self.identity(combine, acc_type)
        if inwarp:
            first = b.eq(part, 0)
            before = [b.select(first, identity, b.shuffle_up(v, 1 << lo)) for v in inclusive]
            last = ((1 << len(inwarp)) - 1) << lo  # the lane bits of the last thread of a warp's part
            src = b.bitwise_or(b.bitwise_and(self.tid, WARP_SIZE - 1), last)
            segment = [b.shuffle(v, src) for v in inclusive]  # the warp's part's total
        else:
            before, segment = [identity] * len(totals), list(totals)
        if cross:  # the totals of the warps before this one along the axis, through shared memory
            array = scratch.scratch(acc_type, len(totals) * self.T, op)
            scratch.before_write()
            for g, v in enumerate(segment):
                scratch.store(array, v, core.add(self.tid, g * self.T))
            scratch.written()
            clo, width = cross[0], 1 << len(cross)
            mine = b.bitwise_and(b.shr(self.tid, clo), width - 1)
            base = b.bitwise_and(self.tid, (self.T - 1) & ~(((width - 1) << clo)))
            earlier, whole = [], []
            for g in range(len(totals)):
                acc_before, acc_all = identity, None
                for w in range(width):
                    v = scratch.load(array, core.add(base, g * self.T + (w << clo)), acc_type)
                    acc_before = b.select(b.gt(mine, w), fn(acc_before, v), acc_before)
                    acc_all = v if acc_all is None else fn(acc_all, v)
                earlier.append(acc_before)
                whole.append(acc_all)
            before = [fn(e, v) for e, v in zip(earlier, before)]
            segment = whole
        out = [None] * layout.registers
        g = 0
        for group_runs in runs:
            carry = None  # what the repetitions before this one total
            for run in group_runs:
                prefix = before[g] if carry is None else fn(carry, before[g])
                for r in run:
                    out[r] = fn(prefix, scanned[r])
                carry = segment[g] if carry is None else fn(carry, segment[g])
                g += 1
        out = tuple(b.cast(v, dtype) if acc_type != dtype else v for v in out)
        self.env[op.result] = Regs(layout, dtype, out)

    def serial_scan(self, op: Op, x: Regs, acc_type: DType) -> None:
        """Each line scanned by one thread in shared memory (a layout with replicas past the end)."""
        combine, axis = op.attrs.op, op.attrs.axis
        dtype, shape = x.dtype, x.shape
        core, scratch = self.core, self.scratch
        n, length = math.prod(shape), shape[axis]
        count, step = n // length, strides(shape)[axis]
        others = shape[:axis] + shape[axis + 1:]
        array = scratch.scratch(dtype, n, op)
        scratch.before_write()
        self.registers.store_owned(array, x, lambda c: core.flat(c, shape))
        scratch.written()

        def line(l):  # the serial scan of line l (the row-major order of the other axes)
            cs = list(core.unflat(l, others)) if others else []
            base = core.flat(tuple(cs[:axis]) + (0,) + tuple(cs[axis:]), shape)

            def each(inner, i, acc):
                with core.region(inner):
                    at = core.add(base, core.mul(i, step))
                    v = self.b.load(array, at)
                    acc = self.combine(combine, acc, self.b.cast(v, acc_type) if acc_type != dtype else v)
                    self.b.store(array, self.b.cast(acc, dtype) if acc_type != dtype else acc, at)
                    return acc

            self.b.fold_range(0, length, 1, self.identity(combine, acc_type), each)

        for k in range(-(-count // self.T)):
            l = core.add(self.tid, k * self.T)
            if (k + 1) * self.T > count:
                self.b.if_(self.b.lt(l, count), lambda inner, l=l: core.within(inner, lambda: line(l)))
            else:
                line(l)
        scratch.written()
        values = tuple(scratch.load(array, core.flat(c, shape), dtype) for c in self.registers.coords(x.layout))
        self.env[op.result] = Regs(x.layout, dtype, values)

