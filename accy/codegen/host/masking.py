"""The host's lanes: vector shapes, the mask of the lanes that run, and the memory
accesses, divergent branches and lane-by-lane operations that respect it (a mixin
of :class:`accy.codegen.host.spmd.SpmdLowering`)."""

from __future__ import annotations


from llvmlite import ir

from ...dsl.ir import Op
from ..abi import STATUS_LOAD_OOB, STATUS_STORE_OOB
from .chunking import Linear, is_vector, uniform_index
from ..llvm_types import I1, I8, I32, I64, VOID, intrinsic_suffix, llvm_type, memory_type

UNMASKED_COPY_OPS = 100  # a divergent if_'s side this small also gets a copy without a mask


class Lanes:
    """Shapes, masks and masked memory of the host lowering."""

    # -- shapes ----------------------------------------------------------------------
    def vector_type(self, ty: ir.Type) -> ir.VectorType:
        return ir.VectorType(ty, self.width)

    def lanes(self, scale: int = 1) -> ir.Constant:
        """``<0, scale, 2 scale, ...>`` as i64."""
        return ir.Constant(self.vector_type(I64), [ir.Constant(I64, k * scale) for k in range(self.width)])

    def splat(self, x: ir.Value) -> ir.Value:
        if is_vector(x):
            return x
        if isinstance(x, ir.Constant):
            return ir.Constant(self.vector_type(x.type), [x] * self.width)
        one = self.b.insert_element(ir.Constant(self.vector_type(x.type), None), x, ir.Constant(I32, 0))
        return self.b.shuffle_vector(one, ir.Constant(one.type, None), ir.Constant(self.vector_type(I32), None))

    def broadcast(self, *values):
        if any(is_vector(v) for v in values):
            return tuple(self.splat(v) for v in values)
        return values

    def bits(self, mask: ir.Value) -> ir.Value:
        """A lane mask as an integer, lane k in bit k."""
        return self.b.bitcast(mask, ir.IntType(self.width))

    def active(self, condition: ir.Value) -> ir.Value | None:
        """The lanes that run where ``condition`` holds (None: ``condition`` is None too)."""
        if condition is None or self.mask is None:
            return condition if condition is not None else self.mask
        return self.b.and_(self.mask, condition)

    def any_lane(self, mask: ir.Value | None) -> ir.Value:
        if mask is None:
            return ir.Constant(I1, 1)
        return self.b.icmp_unsigned("!=", self.bits(mask), ir.Constant(ir.IntType(self.width), 0))

    def every_lane(self, condition: ir.Value) -> ir.Value:
        if not is_vector(condition):
            return condition
        held = self.b.or_(condition, self.b.not_(self.mask)) if self.mask is not None else condition
        return self.b.icmp_unsigned("==", self.bits(held), ir.Constant(ir.IntType(self.width), -1))

    def first_lane(self, mask: ir.Value | None) -> ir.Value:
        """The lowest lane set in ``mask``, as i64."""
        if mask is None:
            return ir.Constant(I64, 0)
        bits = self.bits(mask)
        return self.b.zext(self.call("llvm.cttz", [bits, ir.Constant(I1, 0)]), I64)

    def last_lane(self, mask: ir.Value | None) -> ir.Value:
        if mask is None:
            return ir.Constant(I64, self.width - 1)
        bits = self.bits(mask)
        leading = self.b.zext(self.call("llvm.ctlz", [bits, ir.Constant(I1, 0)]), I64)
        return self.b.sub(ir.Constant(I64, self.width - 1), leading)

    # -- memory ------------------------------------------------------------------------
    def _addresses(self, op: Op, indices: ir.Value) -> ir.Value:
        pointers = self._element(op, indices)
        pointers.type = self.vector_type(pointers.type)  # llvmlite types a vector GEP as one pointer
        return pointers

    def _checked_lanes(self, op: Op, indices: ir.Value, kind: int) -> ir.Value | None:
        """The lanes that run and whose index is in bounds (a failure is recorded); None: all."""
        if not self._checked(op):
            return self.mask
        ok = self.within(op, indices)
        self.check(op, ok, kind, indices)
        return self.active(ok)

    def _all(self, lanes: ir.Value | None) -> ir.Value:
        return lanes if lanes is not None else ir.Constant(self.vector_type(I1), [ir.Constant(I1, 1)] * self.width)

    def _intrinsic(self, name: str, ret: ir.Type, args) -> ir.Value:
        return self.b.call(self.declare(name, ret, [a.type for a in args]), list(args))

    def _shifted(self, entry, k: int):
        """The index ``entry`` + ``k`` (a scalar, a vector or a :class:`Linear`)."""
        if k == 0:
            return entry
        if isinstance(entry, Linear):
            return Linear(self.b.add(entry.base, ir.Constant(I64, k)), entry.stride)
        return self.b.add(entry, self.splat(ir.Constant(I64, k)) if is_vector(entry) else ir.Constant(I64, k))

    def op_load(self, op: Op) -> None:
        entry = self.operand(op.operands[0])
        uniform = uniform_index(entry)
        if op.attrs.get("vec", 1) == 1:
            self.values[op.result] = self.load_at(op, uniform) if uniform is not None else self.load_lanes(op, entry)
        elif uniform is not None:
            self.values.update(zip(op.results, self.load_vector_at(op, uniform)))
        else:  # each lane's group, one element at a time (vectorised over the lanes)
            self.values.update((r, self.load_lanes(op, self._shifted(entry, k))) for k, r in enumerate(op.results))

    def load_lanes(self, op: Op, entry) -> ir.Value:
        """Each lane's element ``entry`` (a vector or a :class:`Linear` varying over the lanes)."""
        dtype = op.attrs["dtype"]
        ty = self.vector_type(memory_type(dtype))
        indices = self.materialise(entry) if isinstance(entry, Linear) else entry
        lanes = self._checked_lanes(op, indices, STATUS_LOAD_OOB)
        align = ir.Constant(I32, dtype.itemsize)
        if isinstance(entry, Linear) and entry.stride == 1 and lanes is None:  # a whole vector
            loaded = self.b.load(self._element(op, entry.base), typ=ty, align=dtype.itemsize)
        elif isinstance(entry, Linear) and entry.stride == 1:  # consecutive elements, some lanes
            name = f"llvm.masked.load.{intrinsic_suffix(ty)}.p0"
            loaded = self._intrinsic(name, ty, [self._element(op, entry.base), align, lanes, ir.Constant(ty, None)])
        else:
            name = f"llvm.masked.gather.{intrinsic_suffix(ty)}.v{self.width}p0"
            loaded = self._intrinsic(name, ty, [self._addresses(op, indices), align, self._all(lanes),
                                                ir.Constant(ty, None)])
        return self.b.trunc(loaded, self.vector_type(I1)) if dtype.is_bool else loaded

    def op_store(self, op: Op) -> None:
        entry = self.operand(op.operands[0])
        if op.attrs.get("vec", 1) == 1:
            self.store_lanes(op, entry, self.value(op.operands[1]))
            return
        uniform = uniform_index(entry)
        values = [self.value(v) for v in op.operands[1:]]
        if uniform is not None and not any(is_vector(v) for v in values):
            self.store_vector_at(op, uniform, values)
            return
        # element by element; a lane's group stored whole before the next lane's would be the
        # same (groups of one lane never overlap another's unless two lanes store one group)
        for k, v in enumerate(values):
            self.store_lanes(op, self._shifted(entry, k), v)

    def store_lanes(self, op: Op, entry, value) -> None:
        dtype = op.attrs["dtype"]
        uniform = uniform_index(entry)
        if uniform is not None:  # every lane stores to one element: the last lane's value stays
            if is_vector(value):
                value = self.b.extract_element(value, self.last_lane(self.mask))
            self.store_at(op, uniform, value)
            return
        value = self.splat(value)
        if dtype.is_bool:
            value = self.b.zext(value, self.vector_type(I8))
        indices = self.materialise(entry) if isinstance(entry, Linear) else entry
        lanes = self._checked_lanes(op, indices, STATUS_STORE_OOB)
        align = ir.Constant(I32, dtype.itemsize)
        if isinstance(entry, Linear) and entry.stride == 1 and lanes is None:
            self.b.store(value, self._element(op, entry.base), align=dtype.itemsize)
        elif isinstance(entry, Linear) and entry.stride == 1:
            name = f"llvm.masked.store.{intrinsic_suffix(value.type)}.p0"
            self._intrinsic(name, VOID, [value, self._element(op, entry.base), align, lanes])
        else:  # a scatter stores lanes in order: where two lanes hit one element, the higher wins
            name = f"llvm.masked.scatter.{intrinsic_suffix(value.type)}.v{self.width}p0"
            self._intrinsic(name, VOID, [value, self._addresses(op, indices), align, self._all(lanes)])

    def op_atomic(self, op: Op) -> None:
        operands = [self.value(v) for v in op.operands]
        ty = llvm_type(op.attrs["dtype"])
        self.values[op.result] = self.lane_by_lane(operands, ty, lambda idx, *rest: self.atomic_at(op, idx, rest))

    def lane_by_lane(self, operands, ty: ir.Type, each) -> ir.Value:
        """``each(*scalars)`` for every lane that runs, in lane order; its results as a vector."""
        b = self.b
        entry = b.block
        header, body, active, after, done = (b.append_basic_block(n) for n in
                                             ("lanes", "lane", "lane_runs", "lane_next", "lanes_done"))
        b.branch(header)
        b.position_at_end(header)
        k = b.phi(I64, name="k")
        results = b.phi(self.vector_type(ty))
        k.add_incoming(ir.Constant(I64, 0), entry)
        results.add_incoming(ir.Constant(results.type, None), entry)
        b.cbranch(b.icmp_unsigned("<", k, ir.Constant(I64, self.width)), body, done)
        b.position_at_end(body)
        b.cbranch(b.extract_element(self._all(self.mask), k), active, after)
        b.position_at_end(active)
        self.lane_index = k
        scalars = [b.extract_element(x, k) if is_vector(x) else x for x in operands]
        updated = b.insert_element(results, each(*scalars), k)
        self.lane_index = None
        ran = b.block
        b.branch(after)
        b.position_at_end(after)
        merged = b.phi(results.type)
        merged.add_incoming(results, body)
        merged.add_incoming(updated, ran)
        k.add_incoming(b.add(k, ir.Constant(I64, 1)), after)
        results.add_incoming(merged, after)
        b.branch(header)
        b.position_at_end(done)
        return results

    def _masked_if(self, op: Op, cond: ir.Value) -> None:
        """A condition that differs between lanes: each side runs, if any lane takes it, with
        the lanes that take it (without a mask when every lane of a full chunk does: the
        common case of a guard, and masked memory accesses cost more); the results are
        chosen per lane."""
        b = self.b
        tag = self.ordinals[op]
        outer = self.mask
        sides = []
        for n, (region, taken) in enumerate(zip(op.regions, (self.active(cond), self.active(b.not_(cond))))):
            entry = b.block
            end = b.append_basic_block(f"if_{tag}_side{n}_end")
            variants = [(taken, b.append_basic_block(f"if_{tag}_side{n}"))]
            if outer is None and sum(1 for _ in region.walk()) <= UNMASKED_COPY_OPS:
                variants.insert(0, (None, b.append_basic_block(f"if_{tag}_side{n}_all")))
                some = b.append_basic_block(f"if_{tag}_side{n}_some")
                b.cbranch(self.any_lane(taken), some, end)
                b.position_at_end(some)
                b.cbranch(self.every_lane(taken), variants[0][1], variants[1][1])
            else:
                b.cbranch(self.any_lane(taken), variants[0][1], end)
            incoming = []
            for mask, body in variants:
                before = set(self.values)
                b.position_at_end(body)
                self.mask = mask
                self.lower_block(region)
                incoming.append(([self.vector(v) for v in region.terminator.operands], b.block))
                self.mask = outer
                b.branch(end)
                for v in set(self.values) - before:  # each variant computes its own
                    del self.values[v]
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
                self.values[result] = b.select(cond, then, otherwise)
