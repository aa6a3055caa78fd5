"""Lowering the typed SSA graph to LLVM IR with ``llvmlite.ir``: the target-neutral part.

The element-wise op table (:data:`LOWER`, :mod:`.arithmetic`), the numerics of narrow floats
(:mod:`.numerics`), memory (:mod:`.memory_access`) and control flow (:mod:`.loops`) serve every
target; a target's subclass of :class:`Lowering` adds its entry points, its own parts and
table entries, and answers the hooks (math
functions, float remainder and division, 16-bit atomics, shared memory, barriers,
shuffles): :mod:`accy.codegen.nvptx.lowering` for NVPTX, :mod:`accy.codegen.host.spmd` for the
host, where the threads run as the lanes of vectors.  The kernel's top-level ops
(constants, sizes, scalars and what the launch extents are computed from) are
lowered once at the entry of a thin wrapper, then the launch region runs.

Both take the parameters of :mod:`accy.codegen.abi`.  Every op is lowered from
its operands' :class:`~accy.dsl.types.DType`: the LLVM type, the intrinsic suffix
and the libdevice name come from the type's entry.  With checks on (the
default), every load and store is bounds-checked and integer division checks for
zero; the first failure is recorded in the status word and the access skipped.
"""

from __future__ import annotations

import functools
from typing import Callable

import attrs
from llvmlite import ir

from ..dsl.ir import Block, Graph, Op, Value
from ..dsl.ops import NVPTX_OPS, SIMT_OPS
from ..dsl.analysis.intervals import index_ranges
from ..dsl.types import Conversion, DType
from .abi import scalar_bits
from .arithmetic import LOWER
from .llvm_types import I1, I64, intrinsic_suffix, llvm_type
from .loops import ControlFlow
from .memory_access import MemoryAccess
from .numerics import Numerics
from ..targets import Target


def host_entry_name(graph: Graph) -> str:
    return f"{graph.name}_host"


# the ops that need the lowering's state: each target's table of emitters (Lowering.op_emitters)
# answers them (for_each, for_each_block and yield are its walk's own)
STRUCTURAL = frozenset({"const", "size", "aligned", "load", "store", "fold", "if", "for_each", "yield",
                        "for_each_block", "shared", "barrier", "atomic", "shuffle"})
IMPLEMENTED = frozenset(LOWER) | STRUCTURAL
assert IMPLEMENTED >= SIMT_OPS, sorted(SIMT_OPS - IMPLEMENTED)


class Lowering:
    """Lowers one graph into one LLVM module: the target-neutral part, the walk over the ops
    and its state.  Each op goes to its emitter: the element-wise table :data:`LOWER`, or the
    target's table (:meth:`op_emitters`) of the methods of its parts: :class:`Numerics`,
    :class:`MemoryAccess` (``memory``), :class:`ControlFlow` (``control``).  A target's
    subclass (:class:`accy.codegen.host.spmd.SpmdLowering` for the host,
    :class:`accy.codegen.nvptx.lowering.NvptxLowering`) adds its entry points, its parts and
    table entries, and the hooks below that say ``NotImplementedError``."""

    memory_class = MemoryAccess  # the parts a target replaces with its own
    control_class = ControlFlow

    def __init__(self, graph: Graph, target: Target):
        self.graph = graph
        self.target = target
        self.module = ir.Module(name=graph.name)
        self.values: dict[Value, ir.Value] = {}
        self.ordinals = {op: n for n, op in enumerate(graph.body.walk())}
        self.needs_libdevice = False
        # load -> an i1 that, where true, proves its check passes (its loop's whole range was
        # checked before the loop): LLVM unswitches loops on it
        self.proven: dict[Op, ir.Value] = {}
        self.unchecked: frozenset[Op] = frozenset()  # checks proven before the launch (the host's)
        self.buffers = graph.buffers
        self.b: ir.IRBuilder | None = None
        self.thread: list[ir.Value] | None = None  # the logical indices, inside the launch
        self.extents: list[ir.Value] = []
        self.lane_of = None  # () -> this thread's lane number, where the wrapper knows better
        self.shared_ptrs: dict[str, ir.Value] = {}
        self.ranges = index_ranges(graph)
        self.debug_lines = None  # a target that wants source lines in its output sets a DebugLines
        self.numerics = Numerics(self)
        self.memory = self.memory_class(self)
        self.control = self.control_class(self)

    # -- declarations ------------------------------------------------------------
    def declare(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        existing = self.module.globals.get(name)
        if existing is not None:
            return existing
        return ir.Function(self.module, ir.FunctionType(ret, args), name)

    def call(self, name: str, args, *, ty: ir.Type | None = None, suffix: bool = True) -> ir.Value:
        """Call intrinsic or function ``name`` (an intrinsic named ``llvm.x`` gets the type
        suffix of its first operand); returns a value of the first operand's type or ``ty``."""
        args = list(args)
        ret = ty or args[0].type
        if name.startswith("llvm.") and not name.startswith("llvm.nvvm.") and suffix:
            name = f"{name}.{intrinsic_suffix(args[0].type)}"
        return self.b.call(self.declare(name, ret, [a.type for a in args]), args)

    def _signature(self) -> list[ir.Type]:
        n = len(self.buffers)
        scalars = [ir.IntType(scalar_bits(p.dtype)) for p in self.graph.scalars]
        return [self.target.pointer] * n + [I64] * n + scalars + [self.target.pointer]

    def _bind_params(self, fn: ir.Function) -> None:
        """Name the wrapper's parameters and map the kernel's buffers, counts, scalars and status."""
        n = len(self.buffers)
        self.pointers, self.counts = {}, {}
        for i, p in enumerate(self.buffers):
            arg = fn.args[i]
            arg.name = p.name
            # outputs alias nothing (checked at binding); inputs that alias are only read
            arg.add_attribute("noalias")
            self.pointers[p.name] = arg
            fn.args[n + i].name = f"{p.name}_count"
            self.counts[p.name] = fn.args[n + i]
        scalars = self.graph.scalars
        for j, (p, value) in enumerate(zip(scalars, self.graph.body.args)):
            arg = fn.args[2 * n + j]
            arg.name = p.name
            self.values[value] = self._unpack_scalar(arg, p.dtype)
        self.status = fn.args[2 * n + len(scalars)]
        self.status.name = "status"
        self.status.add_attribute("noalias")  # its own allocation: writing it never changes a buffer

    def _unpack_scalar(self, bits: ir.Value, dtype: DType) -> ir.Value:
        if dtype.is_bool:
            return self.b.trunc(bits, I1)
        if dtype.is_float and bits.type != llvm_type(dtype):
            return self.b.bitcast(bits, llvm_type(dtype))
        return bits

    # -- blocks and ops -------------------------------------------------------------
    def lower_top_level(self) -> None:
        """The kernel-scope ops before and around the launch (constants, sizes, extents)."""
        for op in self.graph.body.ops:
            if op is not self.graph.launch_op:
                self.lower_op(op)
        self.extents = [self.value(v) for v in self.graph.launch_op.operands]

    def lower_launch_body(self, indices: list[ir.Value]) -> None:
        region = self.graph.launch_op.regions[0]
        self.thread = indices
        for arg, value in zip(region.args, indices):
            self.values[arg] = value
        self.lower_block(region)

    def lower_block(self, block: Block) -> None:
        for op in block.ops:
            if op.opcode != "yield":
                self.lower_op(op)

    def value(self, v: Value) -> ir.Value:
        return self.values[v]

    def lower_op(self, op: Op) -> None:
        if self.debug_lines is not None:  # the op's instructions carry its source line
            b, saved = self.b, self.b.debug_metadata
            b.debug_metadata = self.debug_lines.location(op) or saved
            try:
                self._lower_op(op)
            finally:
                b.debug_metadata = saved
            return
        self._lower_op(op)

    def _lower_op(self, op: Op) -> None:
        emitter = self.emitters.get(op.opcode)
        if emitter is not None:
            emitter(op)
            return
        self.values[op.result] = LOWER[op.opcode](self, op, [self.value(v) for v in op.operands])

    @functools.cached_property
    def emitters(self) -> dict[str, Callable[[Op], None]]:
        return self.op_emitters()

    def op_emitters(self) -> dict[str, Callable[[Op], None]]:
        """The emitter of each op that needs the lowering's state, one entry per op (built at
        the first op, once a target's parts exist); a target adds and replaces its own."""
        memory, control = self.memory, self.control
        return {"const": self.op_const, "size": self.op_size, "aligned": memory.aligned, "load": memory.load,
                "store": memory.store, "atomic": memory.atomic, "shared": memory.shared, "fold": control.fold,
                "if": control.branch, **{name: self._nvptx_only for name in NVPTX_OPS}}

    def op_const(self, op: Op) -> None:
        t = op.result.type
        value = op.attrs["value"]
        if t.conversion is Conversion.software:  # held as its code
            value = t.code(value)
        else:
            value = float(value) if t.is_float else int(value)
        self.values[op.result] = ir.Constant(llvm_type(t), value)

    def op_size(self, op: Op) -> None:
        self.values[op.result] = self.counts[op.attrs["buffer"]]

    def _nvptx_only(self, op: Op) -> None:
        raise NotImplementedError(f"{op.opcode}: tensor cores and asynchronous copies exist on NVPTX only (the tile "
                                  "distribution emits them there)")

    # -- run-time checks -------------------------------------------------------------
    def lane(self) -> ir.Value:
        """This thread's linear lane number (x fastest), for error reports; 0 at top level."""
        if self.lane_of is not None:
            return self.lane_of()
        lane = ir.Constant(I64, 0)
        if self.thread is None:
            return lane
        stride = ir.Constant(I64, 1)
        for value, extent in zip(self.thread, self.extents):
            lane = self.b.add(lane, self.b.mul(value, stride))
            stride = self.b.mul(stride, extent)
        return lane

    def check(self, op: Op, ok: ir.Value, kind: int, detail: ir.Value) -> None:
        """Where ``ok`` is false, record the first failure of the launch in the status."""
        self.fail_if(op, self.b.not_(ok), kind, lambda: (detail, self.lane()))

    def fail_if(self, op: Op, bad: ir.Value, kind: int, report) -> None:
        """Where ``bad`` (an i1) is true, record ``kind`` and ``report()`` (detail, lane; both
        computed on the cold path only) in the status word, unless a failure came first."""
        tag = self.ordinals[op]
        fail = self.b.append_basic_block(f"check_fail_{tag}")
        cont = self.b.append_basic_block(f"check_ok_{tag}")
        self.b.cbranch(bad, fail, cont).set_weights([1, 1 << 20])  # failures are cold
        self.b.position_at_end(fail)
        word = lambda i: self.b.gep(self.status, [ir.Constant(I64, i)], source_etype=I64, inbounds=True)  # noqa: E731
        result = self.b.cmpxchg(word(0), ir.Constant(I64, 0), ir.Constant(I64, kind), "monotonic", "monotonic")
        won = self.b.extract_value(result, 1)
        with self.b.if_then(won):
            detail, lane = report()
            self.b.store(ir.Constant(I64, tag), word(1))
            self.b.store(detail, word(2))
            self.b.store(lane, word(3))
        self.b.branch(cont)
        self.b.position_at_end(cont)

    # -- the target's hooks -------------------------------------------------------------
    def flushed(self, op) -> ir.Value | None:
        """``flush_subnormal`` of ``op`` fused with the op that computes its operand, where the
        target has one instruction for both; None: flushed on its own."""
        return None

    def math_function(self, name: str, t: DType, args) -> ir.Value:
        """Math function ``name`` of f32 or f64 ``args``."""
        raise NotImplementedError

    def float_remainder(self, a: ir.Value, b: ir.Value) -> ir.Value:
        """C's ``fmod`` (exact): LLVM's ``frem``."""
        return self.b.frem(a, b)

    def float_divide(self, t: DType, args) -> ir.Value:
        return self.numerics.in_f32(t, self.b.fdiv, args)

    def narrow_natively(self, x: ir.Value, t: DType) -> ir.Value | None:
        """An f32 ``x`` rounded to narrow ``t`` by one instruction of the target that rounds as
        accy does (nearest even, subnormals kept), or None: the integer rounding then."""
        return None

    def native_atomic_add(self, dtype: DType) -> bool:
        """Whether ``atomicrmw fadd`` adds ``dtype`` as accy rounds (else a CAS loop does)."""
        return dtype.bits >= 32

    def shift_count(self, op: Op, n: ir.Value) -> ir.Value:
        """The count ``n`` of shl or shr ``op`` as the shift's range check should see it."""
        return n

    def compare_exchange(self, ptr: ir.Value, seen: ir.Value, new: ir.Value) -> tuple[ir.Value, ir.Value]:
        """One relaxed compare-and-swap: (the old value, whether it swapped)."""
        pair = self.b.cmpxchg(ptr, seen, new, "monotonic", "monotonic")
        return self.b.extract_value(pair, 0), self.b.extract_value(pair, 1)

    # -- the shapes of values (the host's lanes) -----------------------------------
    def broadcast(self, *values: ir.Value) -> tuple[ir.Value, ...]:
        """Operands of one shape (the host splats scalars where another operand is a vector)."""
        return values

    def every_lane(self, condition: ir.Value) -> ir.Value:
        """``condition`` as one i1: true where it holds for every lane that runs."""
        return condition


@attrs.frozen
class LoweredModule:
    """An LLVM module and what the backends need to know about it."""

    module: ir.Module
    entry_name: str
    needs_libdevice: bool
    ordinals: tuple[Op, ...]  # op ordinal (as in the status word) -> op
    host: object = None  # the host runtime's plan (accy.codegen.host.spmd.HostPlan)
