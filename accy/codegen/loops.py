"""Control flow in the LLVM lowering: ``if`` as a branch with phis at its join, ``fold`` as a
counted loop with its accumulators as phis, and each loop's loads proven in bounds once
before it where their index is affine in the loop variable."""

from __future__ import annotations

from llvmlite import ir

from ..dsl.ir import Block, Op, Value
from ..dsl.types import i32
from .llvm_types import I32, I64, constant, llvm_type


class ControlFlow:
    """The branches and loops of a lowering ``lw`` (its builder, values and state): ``if``,
    ``fold``'s trip count and loop, and the loads proven before it."""

    def __init__(self, lw):
        self.lw = lw

    @property
    def b(self) -> ir.IRBuilder:
        return self.lw.b

    def branch(self, op: Op) -> None:
        """``if``: a branch each way, its results as phis at the join."""
        b = self.b
        tag = self.lw.ordinals[op]
        cond = self.lw.value(op.operands[0])
        then = b.append_basic_block(f"if_{tag}_then")
        otherwise = b.append_basic_block(f"if_{tag}_else")
        join = b.append_basic_block(f"if_{tag}_end")
        b.cbranch(cond, then, otherwise)
        incoming = []
        for block, region in ((then, op.regions[0]), (otherwise, op.regions[1] if len(op.regions) > 1 else None)):
            b.position_at_end(block)
            values = []
            if region is not None:
                self.lw.lower_block(region)
                values = [self.lw.value(v) for v in region.terminator.operands]
            incoming.append((values, b.block))
            b.branch(join)
        b.position_at_end(join)
        for k, result in enumerate(op.results):
            phi = b.phi(llvm_type(result.type))
            for values, block in incoming:
                phi.add_incoming(values[k], block)
            self.lw.values[result] = phi

    # -- loops ------------------------------------------------------------------------
    def _affine(self, v: Value, iv: Value, inside: set[Value]):
        """``v`` as ``coef * iv + sum(multiplier * outer value)``, or None."""
        if v is iv:
            return 1, []
        if v not in inside:
            return 0, [(1, v)]
        op = v.op
        if op is None or op.opcode not in ("add", "sub", "mul") or not op.result.type.is_index:
            return None  # a region argument (an accumulator) or another op: not affine in i
        parts = [self._affine(x, iv, inside) for x in op.operands]
        if None in parts:
            return None
        (ca, ta), (cb, tb) = parts
        if op.opcode == "add":
            return ca + cb, ta + tb
        if op.opcode == "sub":
            return ca - cb, ta + [(-m, t) for m, t in tb]
        for (c, terms), (other_coef, other) in ((parts[0], parts[1]), (parts[1], parts[0])):
            constant = _constant_term(other) if other_coef == 0 else None
            if constant is not None:  # scaled by a constant: stays affine
                return c * constant, [(m * constant, t) for m, t in terms]
        return None

    def prove_loads(self, region: Block, start: ir.Value, trips: ir.Value, step: int) -> None:
        """For each load of the loop body whose index is ``base + c * i``, check the first
        and last index of the whole loop once, before it: where both are in bounds
        (and the index cannot wrap between them) every iteration's check is true."""
        b = self.b
        iv = region.args[0]
        inside = set(region.args) | {r for o in region.walk() for r in o.results}
        add, sub, mul = (lambda x, y, f=f: f(*self.lw.broadcast(x, y)) for f in (b.add, b.sub, b.mul))
        below = lambda x, y: b.icmp_unsigned("<", *self.lw.broadcast(x, y))  # noqa: E731
        last = add(start, mul(b.sub(trips, constant(trips, 1)), constant(trips, step)))
        for op in region.ops:
            if op.opcode != "load" or op.attrs.get("vec", 1) != 1:  # vec: its own check
                continue
            if not self.lw.memory.checked(op):
                continue
            form = self._affine(op.operands[0], iv, inside)
            if form is None or abs(form[0]) * abs(step) >= 2**31:
                continue
            coef, terms = form
            base = ir.Constant(I64, 0)
            for m, t in terms:
                base = add(base, mul(self.lw.value(t), ir.Constant(I64, m)))
            at = lambda i: add(base, mul(i, ir.Constant(I64, coef)))  # noqa: E731
            first, final = at(start), at(last)
            count = self.lw.memory.count(op)
            span = sub(final, first) if coef >= 0 else sub(first, final)
            # few enough trips that coef * (last - start) cannot wrap (|coef * step| < 2**31)
            short = b.icmp_unsigned("<", trips, constant(trips, 2**31))
            fits = b.and_(*self.lw.broadcast(b.and_(below(first, count), below(final, count)),
                                          b.and_(*self.lw.broadcast(below(span, count), short))))
            empty = b.icmp_signed("==", trips, constant(trips, 0))
            self.lw.proven[op] = self.lw.every_lane(b.or_(*self.lw.broadcast(empty, fits)))

    def trip_count(self, start: ir.Value, stop: ir.Value, step: int) -> ir.Value:
        """Iterations of ``for (i = start; step > 0 ? i < stop : i > stop; i += step)``,
        computed without overflow (the difference is taken as unsigned)."""
        b = self.b
        lo, hi = (start, stop) if step > 0 else (stop, start)
        nonempty = b.icmp_signed("<", lo, hi)
        span = b.sub(hi, lo)  # fits in u64 whenever lo < hi
        count = b.add(b.udiv(b.sub(span, constant(span, 1)), constant(span, abs(step))), constant(span, 1))
        return b.select(nonempty, count, constant(span, 0))

    def _narrow_bounds(self, op: Op) -> tuple[ir.Value, ir.Value] | None:
        """A fold's bounds as i32 where both are i32 values made index (a 32-bit launch's loop,
        :mod:`accy.lowering.narrow_indices`) or constants that fit: then its trips are counted
        in 32 bits (unsigned, as many as 2**32 - 1), one instruction a trip where 64 bits take
        two, and the exit test likewise."""
        if abs(op.attrs["step"]) >= 2**31:
            return None
        bounds = []
        for v in op.operands[:2]:
            source = v.op
            if source is not None and source.opcode == "const" and -2**31 <= source.attrs["value"] < 2**31:
                bounds.append(ir.Constant(I32, source.attrs["value"]))
            elif source is not None and source.opcode == "cast" and source.operands[0].type == i32 \
                    and self.lw.value(source.operands[0]).type == I32:
                bounds.append(self.lw.value(source.operands[0]))
            else:
                return None
        return tuple(bounds)

    def fold(self, op: Op) -> None:
        b = self.b
        start, stop, *inits = (self.lw.value(v) for v in op.operands)
        step = op.attrs["step"]
        (region,) = op.regions
        narrow = self._narrow_bounds(op)
        trips = self.trip_count(*(narrow or (start, stop)), step)
        tag = self.lw.ordinals[op]
        if self.lw.target.checks:
            self.prove_loads(region, start, trips if narrow is None else b.zext(trips, I64), step)
        preheader = b.block
        header = b.append_basic_block(f"fold_{tag}_header")
        body = b.append_basic_block(f"fold_{tag}_body")
        exit_ = b.append_basic_block(f"fold_{tag}_exit")
        b.branch(header)
        b.position_at_end(header)
        counter = b.phi(trips.type, name=f"trip_{tag}")
        iv = b.phi(I64, name=f"i_{tag}")
        accs = [b.phi(llvm_type(a.type)) for a in region.args[1:]]
        counter.add_incoming(ir.Constant(trips.type, 0), preheader)
        iv.add_incoming(start, preheader)
        for phi, init in zip(accs, inits):
            phi.add_incoming(init, preheader)
        b.cbranch(b.icmp_unsigned("<", counter, trips), body, exit_)
        b.position_at_end(body)
        self.lw.values[region.args[0]] = iv
        for arg, phi in zip(region.args[1:], accs):
            self.lw.values[arg] = phi
        self.lw.lower_block(region)
        latch = b.block
        counter.add_incoming(b.add(counter, ir.Constant(trips.type, 1)), latch)
        iv.add_incoming(b.add(iv, ir.Constant(I64, step)), latch)  # wraps harmlessly after the last trip
        for phi, v in zip(accs, region.terminator.operands):
            phi.add_incoming(self.lw.value(v), latch)
        b.branch(header)
        b.position_at_end(exit_)
        for result, phi in zip(op.results, accs):
            self.lw.values[result] = phi


def _constant_term(form) -> int | None:
    """The constant an affine form stands for, if it is exactly one index constant."""
    if len(form) == 1 and form[0][0] == 1:
        op = form[0][1].op
        if op is not None and op.opcode == "const" and op.result.type.is_int:
            return op.attrs["value"]
    return None
