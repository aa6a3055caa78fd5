"""Reductions, arg reductions and scans of tiles, for :mod:`.tiles`.  Along the last axis: independent
vector partials per row, combined at the end (a float max or min on order-preserving integer
keys), and for a scan an in-vector prefix and a carry; along another axis, vectors across the
axes after it (running vectors, for a scan)."""

from __future__ import annotations

import math

import attrs
from llvmlite import ir

from ...dsl.combines import COMBINES
from ...dsl.ir import Op
from ...dsl.ops import Combine
from ...dsl.types import DType, TileType
from ..llvm import LOWER, Lowering
from ..llvm_types import I1, I32, I64, constant, llvm_type
from .tile_elementwise import ElementOp

REDUCE_UNROLL = 4  # independent partial vectors of a row reduction (hides the add's latency)
REDUCE_COLUMNS = 8  # column chunks reduced down another axis together (independent chains)


@attrs.frozen(eq=False)
class RowReducer:
    """A reduction's vectors along a row (see :meth:`ReductionEmitter.row_reducer`)."""

    start: list
    take: object  # vector -> state
    merge: object  # state, state -> state
    result: object  # state -> the scalar result
    identity: ir.Value


class ReductionEmitter:
    """``reduce``, ``argreduce`` and ``scan`` along any axis of a tile."""

    def __init__(self, lw: Lowering):
        self.lw = lw  # the TileHostLowering: its builder, values, tiles and checks
        self.v = lw.vectors
        self.L = lw.L

    def combiner(self, combine: Combine, t: DType, real: Op):
        name = COMBINES[combine].scalar_op
        element = ElementOp(name, (t, t), t, real)
        return lambda a, b: LOWER[name](self.lw, element, [a, b])

    def axis_view(self, shape: tuple[int, ...], axis: int) -> tuple[int, int, int]:
        return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])

    def widen(self, v: ir.Value, t: DType) -> ir.Value:
        return self.lw.numerics.widen(v, t) if t.is_narrow else v

    def result(self, op: Op, value: ir.Value, at) -> None:
        """Store one element of a reduction's result (or set it, when it is a scalar)."""
        if isinstance(op.result.type, TileType):
            self.v.store1(self.lw.tiles[op.result], at, value)
        else:
            self.lw.values[op.result] = value

    def row_reducer(self, op: Op) -> "RowReducer":
        """How ``op`` (a reduce) combines vectors along a row: its partial state, and how a
        vector (widened to the accumulator's type) enters it, two merge, and it ends in the
        scalar result."""
        t = op.operands[0].type.dtype
        combine = op.attrs.op
        acc_t = t.compute if t.is_narrow else t
        comb = self.combiner(combine, acc_t, op)
        identity = constant(self.v.vec(llvm_type(acc_t)), COMBINES[combine].identity(acc_t))
        narrow = (lambda v: self.lw.numerics.narrow(v, t)) if t.is_narrow else (lambda v: v)  # rounded once, at the end
        if acc_t.is_float and COMBINES[combine].orders:  # float max/min as integer max/min of order-preserving keys
            bits = ir.IntType(acc_t.bits)

            def result(state):
                high = self.lw.call("llvm.vector.reduce.smax", [state[0]], ty=bits)
                low = self.lw.call("llvm.vector.reduce.smin", [state[1]], ty=bits)
                return narrow(self.keyed_extremum(high, low, acc_t, combine))

            return RowReducer([constant(self.v.vec(bits), -(1 << (acc_t.bits - 1))),
                               constant(self.v.vec(bits), (1 << (acc_t.bits - 1)) - 1)],
                              lambda v: [self.float_key(v)] * 2,
                              lambda s1, s2: [self.lw.call("llvm.smax", [s1[0], s2[0]]),
                                              self.lw.call("llvm.smin", [s1[1], s2[1]])],
                              result, identity)
        return RowReducer([identity], lambda v: [v], lambda s1, s2: [comb(s1[0], s2[0])],
                          lambda state: narrow(self.horizontal(state[0], comb)), identity)

    def tail_into(self, op: Op, r: "RowReducer", state: list, tail, n: int) -> list:
        """``state`` of a 1-D tile built up to its ``tail`` (of ``n`` lanes) with the tail's lanes
        combined in: once where repeating it changes nothing (max, min; a sum's zero:
        x + 0 + 0 == x + 0), else once per chunk."""
        b = self.lw.b
        combine = op.attrs.op
        t = op.operands[0].type.dtype
        value = self.widen(tail.value, t)
        acc_t = t.compute if t.is_narrow else t
        once = ir.Constant(I1, 1) if COMBINES[combine].idempotent else \
            b.fcmp_ordered("==", value, ir.Constant(value.type, 0.0)) if combine is Combine.SUM and acc_t.is_float \
            else b.icmp_signed("==", value, ir.Constant(value.type, 0)) if combine is Combine.SUM else ir.Constant(I1, 0)
        end = b.select(once, self.lw.call("llvm.umin", [b.add(tail.start, ir.Constant(I64, self.L)),
                                                        ir.Constant(I64, n)]), ir.Constant(I64, n))
        rest = r.take(self.v.splat(value))
        return self.v.chunks_between(n, tail.start, end, lambda j, valid, cs: r.merge(cs, rest), state)

    def reduce(self, op: Op) -> None:
        if op.result in self.lw.values:  # folded into the loop that built its operand (see folded_reductions)
            return
        x = self.lw.tile(op.operands[0])
        combine, axis = op.attrs.op, op.attrs.axis
        t = x.dtype
        acc_t = t.compute if t.is_narrow else t
        comb = self.combiner(combine, acc_t, op)
        if isinstance(op.result.type, TileType):
            self.lw.new_tile(op.result)
        A, R, B = self.axis_view(x.shape, axis)
        b = self.lw.b
        identity = constant(self.v.vec(llvm_type(acc_t)), COMBINES[combine].identity(acc_t))
        finish = (lambda v: self.lw.numerics.narrow(v, t)) if t.is_narrow else (lambda v: v)  # rounded once, at the end
        if B == 1:
            reducer = self.row_reducer(op)
            start_state, merge = reducer.start, reducer.merge
            take = reducer.take
            width = len(start_state)

            def partials(tile, first, groups, unroll: int) -> list:
                """``groups`` groups of ``unroll`` chunks from ``first`` into independent partials
                (hiding the combine's latency), merged."""
                def group(g, accs):
                    begin = b.add(first, b.mul(g, ir.Constant(I64, unroll * self.L)))
                    out = []
                    for k in range(unroll):
                        v = self.widen(self.v.load(tile, b.add(begin, ir.Constant(I64, k * self.L))), t)
                        out += merge(accs[k * width:(k + 1) * width], take(v))
                    return out

                accs = self.v.loop(0, groups, group, start_state * unroll, name="reduce")
                state = accs[:width]
                for k in range(1, unroll):
                    state = merge(state, accs[k * width:(k + 1) * width])
                return state

            if x.tail is not None:  # a 1-D tile built up to its tail: the head, then the tail once or per chunk
                head = attrs.evolve(x, tail=None)
                unroll = REDUCE_UNROLL if R >= REDUCE_UNROLL * 2 * self.L else 1
                step = ir.Constant(I64, unroll * self.L)
                groups = b.udiv(x.tail.start, step)
                state = partials(head, ir.Constant(I64, 0), groups, unroll)
                state = self.v.chunks_between(R, b.mul(groups, step), x.tail.start,
                                              lambda j, valid, cs: merge(cs, take(self.widen(self.v.load(head, j), t))),
                                              state)
                state = self.tail_into(op, reducer, state, x.tail, R)
                self.result(op, reducer.result(state), ir.Constant(I64, 0))
                return

            def row(a, cs):
                first = b.mul(a, ir.Constant(I64, R))
                unroll = REDUCE_UNROLL if R >= REDUCE_UNROLL * 2 * self.L else 1
                step = unroll * self.L
                groups = R // step
                state = partials(x, first, groups, unroll)
                done = groups * step

                def chunk(j, valid, cs):
                    v = self.widen(self.v.load(x, b.add(first, b.add(j, ir.Constant(I64, done)))), t)
                    if valid is not None:
                        v = b.select(valid, v, identity)
                    return merge(cs, take(v))

                state = self.v.chunks(R - done, chunk, state)
                self.result(op, reducer.result(state), a)
                return []

            self.v.loop(0, A, row, name="reduce_row")
            return

        whole = B // self.L

        def block(a, cs):
            base = b.mul(a, ir.Constant(I64, R * B))
            out = b.mul(a, ir.Constant(I64, B))

            def columns(first: int, count: int, valid) -> None:
                """Chunks ``first .. first + count`` of the columns, down the reduced axis together:
                independent chains (a lone chain waits on each combine's latency)."""
                cols = [(first + k) * self.L for k in range(count)]
                if len(x.shape) == 2 and axis == 0:  # rows of the tile: a fused load finds each at once
                    read = lambda r, c: self.v.load_in_row(x, [r], c)  # noqa: E731
                else:
                    read = lambda r, c: self.v.load(x, b.add(base, b.add(b.mul(r, ir.Constant(I64, B)), ir.Constant(I64, c))))  # noqa: E731
                start = [self.widen(read(ir.Constant(I64, 0), c), t) for c in cols]

                def down(r, accs):
                    return [comb(acc, self.widen(read(r, c), t)) for acc, c in zip(accs, cols)]

                accs = self.v.loop(1, R, down, start, name="reduce_axis")
                for k, acc in enumerate(accs):
                    where = b.add(out, ir.Constant(I64, (first + k) * self.L))
                    self.v.store(self.lw.tiles[op.result], where, finish(acc), valid if k == count - 1 else None)

            for first in range(0, whole, REDUCE_COLUMNS):
                columns(first, min(REDUCE_COLUMNS, whole - first), None)
            if B % self.L:
                columns(whole, 1, self.v.below(B % self.L))
            return []

        self.v.loop(0, A, block, name="reduce_block")

    def float_key(self, v: ir.Value) -> ir.Value:
        """An integer per float whose signed order is the float order with -0 < +0; NaNs sort
        above +inf (sign clear) or below -inf (sign set)."""
        b = self.lw.b
        n = v.type.element.width if isinstance(v.type.element, ir.IntType) else {"float": 32, "double": 64}[str(v.type.element)]
        bits = b.bitcast(v, self.v.vec(ir.IntType(n), v.type.count))
        flip = b.lshr(b.ashr(bits, constant(bits, n - 1)), constant(bits, 1))  # all but the sign, where negative
        return b.xor(bits, flip)

    def keyed_extremum(self, high: ir.Value, low: ir.Value, t: DType, combine: Combine) -> ir.Value:
        """The max (min) of float keys ``high`` (``low``): the largest (smallest) key, or a quiet NaN
        where either end holds one, as the scalar max (min) propagates NaNs."""
        b = self.lw.b
        n = t.bits
        ty = llvm_type(t)
        quiet = 1 << (t.format.mantissa - 1)
        inf_key = t.format.inf_code  # +inf's bits are its own key; -inf's key is their complement
        unkey = lambda k: b.xor(k, b.lshr(b.ashr(k, ir.Constant(k.type, n - 1)), ir.Constant(k.type, 1)))  # noqa: E731
        nan_high = b.icmp_signed(">", high, ir.Constant(high.type, inf_key))
        nan_low = b.icmp_signed("<", low, ir.Constant(low.type, ~inf_key))
        value = unkey(high if combine is Combine.MAX else low)
        nan = b.or_(b.select(nan_high, unkey(high), unkey(low)), ir.Constant(high.type, quiet))
        return b.bitcast(b.select(b.or_(nan_high, nan_low), nan, value), ty)

    def horizontal(self, v: ir.Value, comb) -> ir.Value:
        """The combine of a vector's lanes (halves combined until one lane is left)."""
        b = self.lw.b
        n = v.type.count
        while n > 1:
            h = n // 2
            lo = b.shuffle_vector(v, v, ir.Constant(self.v.vec(I32, h), list(range(h))))
            hi = b.shuffle_vector(v, v, ir.Constant(self.v.vec(I32, h), list(range(h, n))))
            v, n = comb(lo, hi), h
        return self.v.extract(v, 0)

    def better(self, t: DType, combine: Combine, x: ir.Value, best: ir.Value) -> ir.Value:
        """Where ``x`` beats ``best`` for an arg reduction (strictly; a NaN beats a number)."""
        b = self.lw.b
        name = ">" if combine is Combine.MAX else "<"
        if t.is_float:  # greater (less), or unordered -- x a NaN -- unless best already is one
            return b.and_(b.fcmp_unordered(name, x, best), b.fcmp_ordered("ord", best, best))
        return (b.icmp_unsigned if t.is_unsigned else b.icmp_signed)(name, x, best)

    def arg_finish(self, t: DType, combine: Combine, bests: list, ats: list) -> ir.Value:
        """The position an arg reduction picks from per-lane candidates (``bests`` and their
        positions ``ats``, i32): the best value over every lane (keyed for floats), then the
        lowest position holding it -- or holding a NaN, if any lane holds one."""
        b = self.lw.b
        high = combine is Combine.MAX
        if t.is_float:
            keys = [self.float_key(v) for v in bests]
            name = "smax" if high else "smin"
        else:
            keys = bests
            name = ("umax" if high else "umin") if t.is_unsigned else ("smax" if high else "smin")
        key = keys[0]
        for other in keys[1:]:
            key = self.lw.call(f"llvm.{name}", [key, other])
        best = self.lw.call(f"llvm.vector.reduce.{name}", [key], ty=key.type.element)
        if t.is_float:
            nans = [b.fcmp_unordered("uno", v, v) for v in bests]
            anywhere = nans[0]
            for other in nans[1:]:
                anywhere = b.or_(anywhere, other)
            anywhere = self.lw.call("llvm.vector.reduce.or", [anywhere], ty=I1)
            value = b.bitcast(b.xor(best, b.lshr(b.ashr(best, ir.Constant(best.type, t.bits - 1)),
                                                 ir.Constant(best.type, 1))), llvm_type(t))
            chosen = [b.select(anywhere, nan, b.fcmp_ordered("==", v, self.v.splat(value)))
                      for v, nan in zip(bests, nans)]  # -0 and +0 tie, as NumPy's compare has them
        else:
            chosen = [b.icmp_unsigned("==", v, self.v.splat(best)) for v in bests]
        none = self.v.splat(ir.Constant(I32, 2**31 - 1))
        at = None
        for where, c in zip(ats, chosen):
            here = b.select(c, where, none)
            at = here if at is None else self.lw.call("llvm.smin", [at, here])
        return self.lw.call("llvm.vector.reduce.smin", [at], ty=I32)

    def argreduce(self, op: Op) -> None:
        x = self.lw.tile(op.operands[0])
        combine, axis = op.attrs.op, op.attrs.axis
        t = x.dtype
        ct = t.compute if t.is_narrow else t
        if isinstance(op.result.type, TileType):
            self.lw.new_tile(op.result)
        A, R, B = self.axis_view(x.shape, axis)
        b = self.lw.b
        if B == 1:
            # positions as i32 (a tile row has at most 16384): half the vector work of i64
            iota = ir.Constant(self.v.vec(I32), [ir.Constant(I32, k) for k in range(self.L)])
            unroll = REDUCE_UNROLL if R >= REDUCE_UNROLL * 2 * self.L else 1  # independent chains of compares
            step = unroll * self.L

            def row(a, cs):
                first = b.mul(a, ir.Constant(I64, R))
                v0 = self.widen(self.v.load(x, first), t)
                if R < self.L:  # lanes past the row repeat element 0 at position 0: they never win
                    valid = self.v.below(R)
                    v0 = b.select(valid, v0, self.v.splat(self.v.extract(v0, 0)))
                    i0 = b.select(valid, iota, self.v.splat(ir.Constant(I32, 0)))
                else:
                    i0 = iota
                start = [v0] + [self.widen(self.v.load(x, b.add(first, ir.Constant(I64, u * self.L))), t)
                                for u in range(1, unroll)]
                at0 = [i0] + [b.add(iota, self.v.splat(ir.Constant(I32, u * self.L))) for u in range(1, unroll)]

                def group(g, cs):
                    out = []
                    for u in range(unroll):
                        j = b.add(b.mul(g, ir.Constant(I64, step)), ir.Constant(I64, u * self.L))
                        v = self.widen(self.v.load(x, b.add(first, j)), t)
                        wins = self.better(ct, combine, v, cs[u])
                        out.append(b.select(wins, v, cs[u]))
                        out.append(b.select(wins, b.add(self.v.splat(b.trunc(j, I32)), iota), cs[unroll + u]))
                    return out[0::2] + out[1::2]

                groups = R // step if unroll > 1 else 1
                carried = self.v.loop(1, groups, group, start + at0, name="argreduce")
                done = groups * step

                def chunk(j, valid, cs):
                    best, at = cs
                    j = b.add(j, ir.Constant(I64, done))
                    v = self.widen(self.v.load(x, b.add(first, j)), t)
                    wins = self.better(ct, combine, v, best)
                    if valid is not None:
                        wins = b.and_(wins, valid)
                    return [b.select(wins, v, best), b.select(wins, b.add(self.v.splat(b.trunc(j, I32)), iota), at)]

                best, at = self.v.chunks(max(R - done, 0), chunk, [carried[0], carried[unroll]])
                bests, ats = [best] + carried[1:unroll], [at] + carried[unroll + 1:]
                self.result(op, b.sext(self.arg_finish(ct, combine, bests, ats), I64), a)
                return []

            self.v.loop(0, A, row, name="argreduce_row")
            return

        def block(a, cs):
            base = b.mul(a, ir.Constant(I64, R * B))

            def chunk(j, valid, cs):
                start = b.add(base, j)
                best = self.widen(self.v.load(x, start), t)

                def step(r, cs):
                    best, at = cs
                    v = self.widen(self.v.load(x, b.add(start, b.mul(r, ir.Constant(I64, B)))), t)
                    wins = self.better(ct, combine, v, best)
                    return [b.select(wins, v, best), b.select(wins, self.v.splat(r), at)]

                _, at = self.v.loop(1, R, step, [best, self.v.splat(ir.Constant(I64, 0))], name="argreduce_axis")
                self.v.store(self.lw.tiles[op.result], b.add(b.mul(a, ir.Constant(I64, B)), j), at)
                return []

            self.v.chunks(B, chunk)
            return []

        self.v.loop(0, A, block, name="argreduce_block")

    def scan(self, op: Op) -> None:
        x = self.lw.tile(op.operands[0])
        out = self.lw.new_tile(op.result)
        combine, axis = op.attrs.op, op.attrs.axis
        t = x.dtype
        acc_t = t.compute if t.is_narrow else t
        comb = self.combiner(combine, acc_t, op)
        finish = (lambda v: self.lw.numerics.narrow(v, t)) if t.is_narrow else (lambda v: v)
        A, R, B = self.axis_view(x.shape, axis)
        b = self.lw.b
        L = self.L
        identity = constant(self.v.vec(llvm_type(acc_t)), COMBINES[combine].identity(acc_t))
        if B == 1:
            def row(a, cs):
                first = b.mul(a, ir.Constant(I64, R))

                def chunk(j, valid, cs):
                    (carry,) = cs
                    v = self.widen(self.v.load(x, b.add(first, j)), t)
                    s = 1
                    while s < L:  # in-vector inclusive prefix: lane k combines lanes k-s..k
                        shifted = b.shuffle_vector(v, identity, ir.Constant(self.v.vec(I32), [
                            k - s if k >= s else L + k for k in range(L)]))
                        v, s = comb(shifted, v), 2 * s
                    v = comb(carry, v)
                    self.v.store(out, b.add(first, j), finish(v))
                    return [b.shuffle_vector(v, v, ir.Constant(self.v.vec(I32), [L - 1] * L))]

                self.v.chunks(R, chunk, [identity])
                return []

            self.v.loop(0, A, row, name="scan_row")
            return

        def block(a, cs):
            base = b.mul(a, ir.Constant(I64, R * B))

            # A line's last chunk (``valid`` set) spans the start of the next line, which an
            # earlier chunk has already written: its stores keep to its own lanes.
            def chunk(j, valid, cs):
                start = b.add(base, j)
                acc = self.widen(self.v.load(x, start), t)
                self.v.store(out, start, finish(acc), valid)

                def step(r, cs):
                    at = b.add(start, b.mul(r, ir.Constant(I64, B)))
                    acc = comb(cs[0], self.widen(self.v.load(x, at), t))
                    self.v.store(out, at, finish(acc), valid)
                    return [acc]

                self.v.loop(1, R, step, [acc], name="scan_axis")
                return []

            self.v.chunks(B, chunk)
            return []

        self.v.loop(0, A, block, name="scan_block")

