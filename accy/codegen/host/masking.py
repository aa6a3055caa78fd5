"""The host's lanes: vector shapes, the mask of the lanes that run, and the memory accesses
and lane-by-lane operations that respect it."""

from __future__ import annotations

from llvmlite import ir

from ...dsl.ir import Op
from ..abi import STATUS_LOAD_OOB, STATUS_STORE_OOB
from ..memory_access import MemoryAccess
from .chunking import Linear, is_vector, uniform_index
from ..llvm_types import I1, I8, I32, I64, VOID, intrinsic_suffix, llvm_type, memory_type


class Lanes:
    """The vectors of a host lowering ``lw``: ``lw.width`` lanes, of which ``lw.mask`` run
    (None: all of them)."""

    def __init__(self, lw):
        self.lw = lw

    @property
    def b(self) -> ir.IRBuilder:
        return self.lw.b

    def vector_type(self, ty: ir.Type) -> ir.VectorType:
        return ir.VectorType(ty, self.lw.width)

    def iota(self, scale: int = 1) -> ir.Constant:
        """``<0, scale, 2 scale, ...>`` as i64."""
        return ir.Constant(self.vector_type(I64), [ir.Constant(I64, k * scale) for k in range(self.lw.width)])

    def splat(self, x: ir.Value) -> ir.Value:
        if is_vector(x):
            return x
        if isinstance(x, ir.Constant):
            return ir.Constant(self.vector_type(x.type), [x] * self.lw.width)
        one = self.b.insert_element(ir.Constant(self.vector_type(x.type), None), x, ir.Constant(I32, 0))
        return self.b.shuffle_vector(one, ir.Constant(one.type, None), ir.Constant(self.vector_type(I32), None))

    def broadcast(self, *values):
        if any(is_vector(v) for v in values):
            return tuple(self.splat(v) for v in values)
        return values

    def bits(self, mask: ir.Value) -> ir.Value:
        """A lane mask as an integer, lane k in bit k."""
        return self.b.bitcast(mask, ir.IntType(self.lw.width))

    def active(self, condition: ir.Value) -> ir.Value | None:
        """The lanes that run where ``condition`` holds (None: ``condition`` is None too)."""
        if condition is None or self.lw.mask is None:
            return condition if condition is not None else self.lw.mask
        return self.b.and_(self.lw.mask, condition)

    def any_lane(self, mask: ir.Value | None) -> ir.Value:
        if mask is None:
            return ir.Constant(I1, 1)
        return self.b.icmp_unsigned("!=", self.bits(mask), ir.Constant(ir.IntType(self.lw.width), 0))

    def every_lane(self, condition: ir.Value) -> ir.Value:
        if not is_vector(condition):
            return condition
        held = self.b.or_(condition, self.b.not_(self.lw.mask)) if self.lw.mask is not None else condition
        return self.b.icmp_unsigned("==", self.bits(held), ir.Constant(ir.IntType(self.lw.width), -1))

    def first_lane(self, mask: ir.Value | None) -> ir.Value:
        """The lowest lane set in ``mask``, as i64."""
        if mask is None:
            return ir.Constant(I64, 0)
        bits = self.bits(mask)
        return self.b.zext(self.lw.call("llvm.cttz", [bits, ir.Constant(I1, 0)]), I64)

    def last_lane(self, mask: ir.Value | None) -> ir.Value:
        if mask is None:
            return ir.Constant(I64, self.lw.width - 1)
        bits = self.bits(mask)
        leading = self.b.zext(self.lw.call("llvm.ctlz", [bits, ir.Constant(I1, 0)]), I64)
        return self.b.sub(ir.Constant(I64, self.lw.width - 1), leading)

    def all_lanes(self, lanes: ir.Value | None) -> ir.Value:
        return lanes if lanes is not None else ir.Constant(self.vector_type(I1), [ir.Constant(I1, 1)] * self.lw.width)

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
        b.cbranch(b.icmp_unsigned("<", k, ir.Constant(I64, self.lw.width)), body, done)
        b.position_at_end(body)
        b.cbranch(b.extract_element(self.all_lanes(self.lw.mask), k), active, after)
        b.position_at_end(active)
        self.lw.lane_index = k
        scalars = [b.extract_element(x, k) if is_vector(x) else x for x in operands]
        updated = b.insert_element(results, each(*scalars), k)
        self.lw.lane_index = None
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


class HostMemory(MemoryAccess):
    """Memory of a chunk of lanes: one vector access where the lanes' elements are
    consecutive, else gathers and scatters, masked to the lanes that run; atomics lane by
    lane; shared arrays as a block's stack arrays."""

    def element(self, op: Op, idx: ir.Value) -> ir.Value:
        if op.attrs.get("space", "global") == "shared":
            return self.b.gep(self.lw.shared_ptrs[op.attrs["buffer"]], [idx],
                              source_etype=memory_type(op.attrs["dtype"]), inbounds=True)
        return super().element(op, idx)

    def _addresses(self, op: Op, indices: ir.Value) -> ir.Value:
        pointers = self.element(op, indices)
        pointers.type = self.lw.lanes.vector_type(pointers.type)  # llvmlite types a vector GEP as one pointer
        return pointers

    def _checked_lanes(self, op: Op, indices: ir.Value, kind: int) -> ir.Value | None:
        """The lanes that run and whose index is in bounds (a failure is recorded); None: all."""
        if not self.checked(op):
            return self.lw.mask
        ok = self.within(op, indices)
        self.lw.check(op, ok, kind, indices)
        return self.lw.lanes.active(ok)

    def _shifted(self, entry, k: int):
        """The index ``entry`` + ``k`` (a scalar, a vector or a :class:`Linear`)."""
        if k == 0:
            return entry
        if isinstance(entry, Linear):
            return Linear(self.b.add(entry.base, ir.Constant(I64, k)), entry.stride)
        return self.b.add(entry, self.lw.lanes.splat(ir.Constant(I64, k)) if is_vector(entry) else ir.Constant(I64, k))

    def load(self, op: Op) -> None:
        entry = self.lw.operand(op.operands[0])
        uniform = uniform_index(entry)
        if op.attrs.get("vec", 1) == 1:
            self.lw.values[op.result] = self.load_at(op, uniform) if uniform is not None else self.load_lanes(op, entry)
        elif uniform is not None:
            self.lw.values.update(zip(op.results, self.load_vector_at(op, uniform)))
        else:  # each lane's group, one element at a time (vectorised over the lanes)
            self.lw.values.update((r, self.load_lanes(op, self._shifted(entry, k))) for k, r in enumerate(op.results))

    def load_lanes(self, op: Op, entry) -> ir.Value:
        """Each lane's element ``entry`` (a vector or a :class:`Linear` varying over the lanes)."""
        dtype = op.attrs["dtype"]
        ty = self.lw.lanes.vector_type(memory_type(dtype))
        indices = self.lw.materialise(entry) if isinstance(entry, Linear) else entry
        lanes = self._checked_lanes(op, indices, STATUS_LOAD_OOB)
        align = ir.Constant(I32, dtype.itemsize)
        if isinstance(entry, Linear) and entry.stride == 1 and lanes is None:  # a whole vector
            loaded = self.b.load(self.element(op, entry.base), typ=ty, align=dtype.itemsize)
        elif isinstance(entry, Linear) and entry.stride == 1:  # consecutive elements, some lanes
            name = f"llvm.masked.load.{intrinsic_suffix(ty)}.p0"
            loaded = self.lw.call(name, [self.element(op, entry.base), align, lanes, ir.Constant(ty, None)], ty=ty,
                                  suffix=False)
        else:
            name = f"llvm.masked.gather.{intrinsic_suffix(ty)}.v{self.lw.width}p0"
            loaded = self.lw.call(name, [self._addresses(op, indices), align, self.lw.lanes.all_lanes(lanes),
                                         ir.Constant(ty, None)], ty=ty, suffix=False)
        return self.b.trunc(loaded, self.lw.lanes.vector_type(I1)) if dtype.is_bool else loaded

    def store(self, op: Op) -> None:
        entry = self.lw.operand(op.operands[0])
        if op.attrs.get("vec", 1) == 1:
            self.store_lanes(op, entry, self.lw.value(op.operands[1]))
            return
        uniform = uniform_index(entry)
        values = [self.lw.value(v) for v in op.operands[1:]]
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
                value = self.b.extract_element(value, self.lw.lanes.last_lane(self.lw.mask))
            self.store_at(op, uniform, value)
            return
        value = self.lw.lanes.splat(value)
        if dtype.is_bool:
            value = self.b.zext(value, self.lw.lanes.vector_type(I8))
        indices = self.lw.materialise(entry) if isinstance(entry, Linear) else entry
        lanes = self._checked_lanes(op, indices, STATUS_STORE_OOB)
        align = ir.Constant(I32, dtype.itemsize)
        if isinstance(entry, Linear) and entry.stride == 1 and lanes is None:
            self.b.store(value, self.element(op, entry.base), align=dtype.itemsize)
        elif isinstance(entry, Linear) and entry.stride == 1:
            name = f"llvm.masked.store.{intrinsic_suffix(value.type)}.p0"
            self.lw.call(name, [value, self.element(op, entry.base), align, lanes], ty=VOID, suffix=False)
        else:  # a scatter stores lanes in order: where two lanes hit one element, the higher wins
            name = f"llvm.masked.scatter.{intrinsic_suffix(value.type)}.v{self.lw.width}p0"
            self.lw.call(name, [value, self._addresses(op, indices), align, self.lw.lanes.all_lanes(lanes)], ty=VOID,
                         suffix=False)

    def atomic(self, op: Op) -> None:
        operands = [self.lw.value(v) for v in op.operands]
        ty = llvm_type(op.attrs["dtype"])
        each = lambda idx, *rest: self.atomic_at(op, idx, rest)  # noqa: E731
        self.lw.values[op.result] = self.lw.lanes.lane_by_lane(operands, ty, each)
