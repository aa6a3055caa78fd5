"""Memory in the LLVM lowering: element addresses, bounds checks (recorded in the status word
by the lowering's ``check``), loads, stores and atomics."""

from __future__ import annotations

from llvmlite import ir

from ..dsl.analysis.intervals import within
from ..dsl.ir import Op
from ..dsl.ops import Bounds
from ..dsl.tensors import tensor_parameters
from ..dsl.types import DType
from .abi import STATUS_LOAD_OOB, STATUS_STORE_OOB
from .llvm_types import I1, I8, I32, I64, llvm_type, memory_type


class MemoryAccess:
    """Checked loads, stores and atomics of buffers and shared arrays, for a lowering ``lw``
    (its builder, buffers and checks)."""

    def __init__(self, lw):
        self.lw = lw

    @property
    def b(self) -> ir.IRBuilder:
        return self.lw.b

    def element(self, op: Op, idx: ir.Value) -> ir.Value:
        """The address of element ``idx`` of the buffer or shared array ``op`` touches."""
        name, dtype = op.attrs["buffer"], op.attrs["dtype"]
        if op.attrs.get("space", "global") == "shared":
            # the array's first element (a global of its own, or a place in the dynamic array)
            return self.b.gep(self.lw.shared_ptrs[name], [idx], inbounds=True)
        return self.b.gep(self.lw.pointers[name], [idx], source_etype=memory_type(dtype), inbounds=True)

    def _statically_inside(self, op: Op) -> bool:
        """A shared-array access whose index range fits the array: no run-time check needed."""
        if op.attrs.get("space", "global") != "shared" or op.attrs.get("vec", 1) != 1:
            return False
        return within(self.lw.ranges.get(op.operands[0], (None, None)),
                      self.lw.graph.shared_arrays()[op.attrs["buffer"]].attrs["count"])

    def within(self, op: Op, idx: ir.Value) -> ir.Value:
        """``idx`` is inside ``op``'s buffer or shared array (unsigned: negatives fail too), or
        that was proven before."""
        ok = self.b.icmp_unsigned("<", *self.lw.broadcast(idx, self.count(op)))
        proven = self.lw.proven.get(op)
        return ok if proven is None else self.b.or_(*self.lw.broadcast(proven, ok))

    def layouts_inside(self) -> ir.Value:
        """i1: every tensor that ``bounds shape`` accesses rely on lies inside its buffer, its
        lowest and highest element (from its shape, strides and offset) both; checked once per
        thread at the kernel's entry, for callers that launch it without accy's runtime (an
        artifact's), which checks every layout when it binds the arguments.  A failure is
        reported as the first such access of that tensor, at the element outside."""
        b, graph = self.b, self.lw.graph
        ok = ir.Constant(I1, 1)
        if not self.lw.target.checks:
            return ok
        first: dict[str, Op] = {}
        for op in graph.body.walk():
            if op.opdef.memory and op.attrs.get("bounds") is Bounds.SHAPE:
                first.setdefault(op.attrs["buffer"], op)
        zero = ir.Constant(I64, 0)
        value = lambda name: self.lw.values[graph.scalar_value(name)]  # noqa: E731  (a hidden scalar's)
        for t in tensor_parameters(graph.params):
            if t.name not in first:
                continue
            low = high = value(t.offset_name)
            empty = ir.Constant(I1, 0)
            for n, s in zip(map(value, t.shape_names), map(value, t.stride_names)):
                reach = b.mul(b.sub(n, ir.Constant(I64, 1)), s)
                low = b.add(low, b.select(b.icmp_signed("<", reach, zero), reach, zero))
                high = b.add(high, b.select(b.icmp_signed(">", reach, zero), reach, zero))
                empty = b.or_(empty, b.icmp_signed("<=", n, zero))
            fits = b.or_(empty, b.and_(b.icmp_signed(">=", low, zero),
                                       b.icmp_signed("<", high, self.lw.counts[t.name])))
            op = first[t.name]
            kind = STATUS_STORE_OOB if op.opdef.writes else STATUS_LOAD_OOB
            self.lw.check(op, fits, kind, b.select(b.icmp_signed("<", low, zero), low, high))
            ok = b.and_(ok, fits)
        return ok

    def count(self, op: Op) -> ir.Value:
        if op.attrs.get("space", "global") == "shared":
            return ir.Constant(I64, self.lw.graph.shared_arrays()[op.attrs["buffer"]].attrs["count"])
        return self.lw.counts[op.attrs["buffer"]]

    def checked(self, op: Op) -> bool:
        return (self.lw.target.checks and op not in self.lw.unchecked and op.attrs.get("bounds") is not Bounds.SHAPE
                and not self._statically_inside(op))

    def aligned(self, op: Op) -> None:
        address = self.b.ptrtoint(self.lw.pointers[op.attrs["buffer"]], I64)
        low = self.b.and_(address, ir.Constant(I64, op.attrs["bytes"] - 1))
        self.lw.values[op.result] = self.b.icmp_unsigned("==", low, ir.Constant(I64, 0))

    def load(self, op: Op) -> None:
        idx = self.lw.value(op.operands[0])
        if op.attrs.get("vec", 1) == 1:
            self.lw.values[op.result] = self.load_at(op, idx)
            return
        for result, value in zip(op.results, self.load_vector_at(op, idx)):
            self.lw.values[result] = value

    def _vector_inside(self, op: Op, idx: ir.Value, vec: int, kind: int) -> ir.Value:
        """Are elements ``idx`` .. ``idx + vec - 1`` all inside?  Checked: a failure names the
        first element outside."""
        last = self.b.add(idx, ir.Constant(I64, vec - 1))
        first_in = self.b.icmp_unsigned("<", idx, self.count(op))
        ok = self.b.and_(first_in, self.b.icmp_unsigned("<", last, self.count(op)))
        self.lw.check(op, ok, kind, self.b.select(first_in, last, idx))
        return ok

    def load_vector_at(self, op: Op, idx: ir.Value) -> list:
        """One thread's load of ``vec`` consecutive elements from ``idx`` as one vector access
        (its address a multiple of the vector's size: the op's contract), checked."""
        dtype, vec = op.attrs["dtype"], op.attrs["vec"]
        ty = ir.VectorType(memory_type(dtype), vec)
        read = lambda: self.b.load(self.element(op, idx), typ=ty, align=vec * dtype.itemsize)  # noqa: E731
        if not self.checked(op):
            loaded = read()
        else:  # a branch, not a select of element 0: a vector there may pass the buffer's end
            ok = self._vector_inside(op, idx, vec, STATUS_LOAD_OOB)
            entry = self.b.block
            with self.b.if_then(ok):
                inside, done = read(), self.b.block
            loaded = self.b.phi(ty)
            loaded.add_incoming(ir.Constant(ty, None), entry)
            loaded.add_incoming(inside, done)
        values = [self.b.extract_element(loaded, ir.Constant(I32, k)) for k in range(vec)]
        return [self.b.trunc(v, I1) for v in values] if dtype.is_bool else values

    def load_at(self, op: Op, idx: ir.Value) -> ir.Value:
        """One thread's load of element ``idx`` (a scalar), checked."""
        dtype = op.attrs["dtype"]
        ty = memory_type(dtype)
        if not self.checked(op):
            loaded = self.b.load(self.element(op, idx), typ=ty, align=dtype.itemsize)
        else:
            ok = self.within(op, idx)
            self.lw.check(op, ok, STATUS_LOAD_OOB, idx)
            # a failed thread reads element 0 instead (every buffer has one: see the ABI)
            # and goes on with a zero; no branch, so the loop around stays simple
            safe = self.b.select(ok, idx, ir.Constant(I64, 0))
            loaded = self.b.load(self.element(op, safe), typ=ty, align=dtype.itemsize)
            loaded = self.b.select(ok, loaded, ir.Constant(ty, 0))
        return self.b.trunc(loaded, I1) if dtype.is_bool else loaded

    def store(self, op: Op) -> None:
        if op.attrs.get("vec", 1) == 1:
            self.store_at(op, *(self.lw.value(v) for v in op.operands))
            return
        self.store_vector_at(op, self.lw.value(op.operands[0]), [self.lw.value(v) for v in op.operands[1:]])

    def store_vector_at(self, op: Op, idx: ir.Value, values) -> None:
        """One thread's store of ``values`` to consecutive elements from ``idx`` as one vector
        access (its address a multiple of the vector's size: the op's contract), checked."""
        dtype, vec = op.attrs["dtype"], op.attrs["vec"]
        ty = ir.VectorType(memory_type(dtype), vec)
        vector = ir.Constant(ty, None)
        for k, v in enumerate(values):
            vector = self.b.insert_element(vector, self.b.zext(v, I8) if dtype.is_bool else v, ir.Constant(I32, k))
        write = lambda: self.b.store(vector, self.element(op, idx), align=vec * dtype.itemsize)  # noqa: E731
        if not self.checked(op):
            write()
            return
        with self.b.if_then(self._vector_inside(op, idx, vec, STATUS_STORE_OOB)):
            write()

    def store_at(self, op: Op, idx: ir.Value, value: ir.Value) -> None:
        """One thread's store of ``value`` to element ``idx`` (scalars), checked."""
        dtype = op.attrs["dtype"]
        if dtype.is_bool:
            value = self.b.zext(value, I8)
        if not self.checked(op):
            self.b.store(value, self.element(op, idx), align=dtype.itemsize)
            return
        ok = self.within(op, idx)
        self.lw.check(op, ok, STATUS_STORE_OOB, idx)
        with self.b.if_then(ok):
            self.b.store(value, self.element(op, idx), align=dtype.itemsize)

    def shared(self, op: Op) -> None:
        pass  # allocated by the wrapper: a module-level array in shared memory, or a stack array per block

    def atomic(self, op: Op) -> None:
        idx, *values = (self.lw.value(v) for v in op.operands)
        self.lw.values[op.result] = self.atomic_at(op, idx, values)

    def atomic_at(self, op: Op, idx: ir.Value, values) -> ir.Value:
        """One thread's atomic on element ``idx`` (scalars), checked; returns the old value."""
        kind, dtype = op.attrs["op"], op.attrs["dtype"]
        ty = llvm_type(dtype)
        if not self.checked(op):
            return self._atomic(kind, dtype, self.element(op, idx), values)
        ok = self.within(op, idx)
        self.lw.check(op, ok, STATUS_STORE_OOB, idx)
        entry = self.b.block
        with self.b.if_then(ok):
            old = self._atomic(kind, dtype, self.element(op, idx), values)
            done = self.b.block
        phi = self.b.phi(ty)
        phi.add_incoming(ir.Constant(ty, 0), entry)
        phi.add_incoming(old, done)
        return phi

    def _atomic(self, kind: str, dtype: DType, ptr: ir.Value, values) -> ir.Value:
        """One atomic read-modify-write (relaxed, as CUDA's); returns the old value."""
        b = self.b
        if kind == "cas":
            compare, new = values
            bits = ir.IntType(dtype.bits)
            if dtype.is_float:
                compare, new = b.bitcast(compare, bits), b.bitcast(new, bits)
            old = b.extract_value(b.cmpxchg(ptr, compare, new, "monotonic", "monotonic"), 0)
            return b.bitcast(old, llvm_type(dtype)) if dtype.is_float else old
        (value,) = values
        if dtype.is_int:
            op_name = {"add": "add", "exchange": "xchg", "max": "umax" if dtype.is_unsigned else "max",
                       "min": "umin" if dtype.is_unsigned else "min"}[kind]
            return b.atomic_rmw(op_name, ptr, value, "monotonic")
        if kind == "exchange":
            return b.atomic_rmw("xchg", ptr, value, "monotonic")
        if kind == "add" and self.lw.native_atomic_add(dtype):
            return b.atomic_rmw("fadd", ptr, value, "monotonic")
        # f16/bf16 add, float max and min: a compare-and-swap loop with accy's own arithmetic
        in_f32, call = self.lw.numerics.in_f32, self.lw.call
        combine = {"add": lambda a, v: in_f32(dtype, b.fadd, [a, v]),
                   "max": lambda a, v: in_f32(dtype, lambda x, y: call("llvm.maximum", [x, y]), [a, v]),
                   "min": lambda a, v: in_f32(dtype, lambda x, y: call("llvm.minimum", [x, y]), [a, v])}[kind]
        bits = ir.IntType(dtype.bits)
        start = b.block
        initial = b.load(ptr, typ=bits, align=dtype.itemsize)
        loop = b.append_basic_block("atomic_loop")
        after = b.append_basic_block("atomic_done")
        b.branch(loop)
        b.position_at_end(loop)
        seen = b.phi(bits)
        seen.add_incoming(initial, start)
        new = b.bitcast(combine(b.bitcast(seen, llvm_type(dtype)), value), bits)
        current, swapped = self.lw.compare_exchange(ptr, seen, new)
        seen.add_incoming(current, loop)
        b.cbranch(swapped, after, loop)
        b.position_at_end(after)
        return b.bitcast(seen, llvm_type(dtype))
