"""The host's branches and loops: a condition that differs between lanes runs each side with
the lanes that take it, and a fold whose trip count differs per lane runs the common trips
unmasked, then the rest with the lanes past their last trip switched off."""

from __future__ import annotations

from llvmlite import ir

from ...dsl.ir import Op, Value
from ..llvm_types import I64, constant
from ..loops import ControlFlow
from .chunking import Linear, is_vector, uniform_index

UNMASKED_COPY_OPS = 100  # a divergent if_'s side this small also gets a copy without a mask


class HostControlFlow(ControlFlow):
    """``if`` and ``fold`` over a chunk of lanes, under the host lowering's mask (``lw.mask``)."""

    def branch(self, op: Op) -> None:
        cond = self.lw.value(op.operands[0])
        if is_vector(cond):
            self._masked_if(op, cond)
            return
        b = self.b
        tag = self.lw.ordinals[op]
        blocks = [b.append_basic_block(f"if_{tag}_{n}") for n in ("then", "else", "end")]
        b.cbranch(cond, blocks[0], blocks[1])
        incoming = []
        for block, region in zip(blocks, (*op.regions, None)[:2]):
            b.position_at_end(block)
            values = []
            if region is not None:
                self.lw.lower_block(region)
                values = [self.shaped_like_result(v, r) for v, r in zip(region.terminator.operands, op.results)]
            incoming.append((values, b.block))
            b.branch(blocks[2])
        b.position_at_end(blocks[2])
        for k, result in enumerate(op.results):
            phi = b.phi(self.lw.phi_type(result))
            for values, block in incoming:
                phi.add_incoming(values[k], block)
            self.lw.values[result] = phi

    def shaped_like_result(self, v: Value, result: Value) -> ir.Value:
        return self.lw.vector(v) if result in self.lw.varying else self.lw.value(v)

    def fold(self, op: Op) -> None:
        b, lw = self.b, self.lw
        start, stop = (lw.operand(v) for v in op.operands[:2])
        (region,) = op.regions
        accs = [self.shaped_like_result(v, a) for v, a in zip(op.operands[2:], region.args[1:])]
        step = op.attrs["step"]
        lo, hi = uniform_index(start), uniform_index(stop)
        if lo is not None and hi is not None:  # every lane runs the same trips
            trips = self.trip_count(lo, hi, step)
            if lw.target.checks:
                self.prove_loads(region, lo, trips, step)
            accs = self._fold_loop(op, start, ir.Constant(I64, 0), trips, accs, None)
        else:
            first = lw.materialise(start) if isinstance(start, Linear) else lw.lanes.splat(start if lo is None else lo)
            last = lw.materialise(stop) if isinstance(stop, Linear) else lw.lanes.splat(stop)
            per_lane = self.trip_count(first, last, step)
            if lw.mask is not None:  # a lane that does not run takes no trips
                per_lane = b.select(lw.mask, per_lane, constant(per_lane, 0))
            if lw.target.checks:
                self.prove_loads(region, first, per_lane, step)
            most = lw.call("llvm.vector.reduce.umax", [per_lane], ty=I64)
            counted = b.select(lw.mask, per_lane, constant(per_lane, -1)) if lw.mask is not None else per_lane
            least = lw.call("llvm.vector.reduce.umin", [counted], ty=I64)
            # the trips every running lane takes, with the lanes as they are, then the rest masked
            accs = self._fold_loop(op, start, ir.Constant(I64, 0), least, accs, None)
            accs = self._fold_loop(op, start, least, most, accs, per_lane)
        for result, value in zip(op.results, accs):
            lw.values[result] = value

    def _fold_loop(self, op: Op, start, begin: ir.Value, end: ir.Value, inits, per_lane) -> list[ir.Value]:
        """Trips ``[begin, end)`` of fold ``op`` from accumulators ``inits``; with ``per_lane``
        trip counts, a lane past its own last trip is switched off and keeps its values."""
        b = self.b
        (region,) = op.regions
        tag = self.lw.ordinals[op]
        preheader = b.block
        header, body, exit_ = (b.append_basic_block(f"fold_{tag}_{n}") for n in ("header", "body", "exit"))
        b.branch(header)
        b.position_at_end(header)
        counter = b.phi(I64, name=f"trip_{tag}")
        counter.add_incoming(begin, preheader)
        accs = [b.phi(self.lw.phi_type(a)) for a in region.args[1:]]
        for phi, init in zip(accs, inits):
            phi.add_incoming(init, preheader)
        b.cbranch(b.icmp_unsigned("<", counter, end), body, exit_)
        b.position_at_end(body)
        offset = b.mul(counter, ir.Constant(I64, op.attrs["step"]))
        if isinstance(start, Linear):
            self.lw.values[region.args[0]] = Linear(b.add(start.base, offset), start.stride)
        else:
            self.lw.values[region.args[0]] = b.add(*self.lw.broadcast(start, offset))
        outer = self.lw.mask
        if per_lane is not None:
            self.lw.mask = b.icmp_unsigned("<", self.lw.lanes.splat(counter), per_lane)  # zero trips where masked
        for arg, phi in zip(region.args[1:], accs):
            self.lw.values[arg] = phi
        self.lw.lower_block(region)
        new = [self.shaped_like_result(v, a) for v, a in zip(region.terminator.operands, region.args[1:])]
        if per_lane is not None:  # a lane past its last trip keeps its accumulators
            new = [b.select(self.lw.mask, n, phi) for n, phi in zip(new, accs)]
        self.lw.mask = outer
        counter.add_incoming(b.add(counter, ir.Constant(I64, 1)), b.block)
        for phi, value in zip(accs, new):
            phi.add_incoming(value, b.block)
        b.branch(header)
        b.position_at_end(exit_)
        return accs

    def _masked_if(self, op: Op, cond: ir.Value) -> None:
        """A condition that differs between lanes: each side runs, if any lane takes it, with
        the lanes that take it (without a mask when every lane of a full chunk does: the
        common case of a guard, and masked memory accesses cost more); the results are
        chosen per lane."""
        b, lanes = self.b, self.lw.lanes
        tag = self.lw.ordinals[op]
        outer = self.lw.mask
        sides = []
        for n, (region, taken) in enumerate(zip(op.regions, (lanes.active(cond), lanes.active(b.not_(cond))))):
            entry = b.block
            end = b.append_basic_block(f"if_{tag}_side{n}_end")
            variants = [(taken, b.append_basic_block(f"if_{tag}_side{n}"))]
            if outer is None and sum(1 for _ in region.walk()) <= UNMASKED_COPY_OPS:
                variants.insert(0, (None, b.append_basic_block(f"if_{tag}_side{n}_all")))
                some = b.append_basic_block(f"if_{tag}_side{n}_some")
                b.cbranch(lanes.any_lane(taken), some, end)
                b.position_at_end(some)
                b.cbranch(lanes.every_lane(taken), variants[0][1], variants[1][1])
            else:
                b.cbranch(lanes.any_lane(taken), variants[0][1], end)
            incoming = []
            for mask, body in variants:
                before = set(self.lw.values)
                b.position_at_end(body)
                self.lw.mask = mask
                self.lw.lower_block(region)
                incoming.append(([self.lw.vector(v) for v in region.terminator.operands], b.block))
                self.lw.mask = outer
                b.branch(end)
                for v in set(self.lw.values) - before:  # each variant computes its own
                    del self.lw.values[v]
            b.position_at_end(end)
            merged = []
            for k, result in enumerate(op.results):
                phi = b.phi(incoming[0][0][k].type)
                phi.add_incoming(ir.Constant(phi.type, None), entry)
                for values, block in incoming:
                    phi.add_incoming(values[k], block)
                merged.append(phi)
            sides.append(merged)
        if op.results:
            for result, then, otherwise in zip(op.results, *sides):
                self.lw.values[result] = b.select(cond, then, otherwise)
