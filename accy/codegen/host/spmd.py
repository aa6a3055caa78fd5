"""The host lowering: SPMD on SIMD, the model ISPC uses.

A launch's logical threads run ``W`` at a time as the lanes of LLVM vectors, ``W``
the host's vector width in 32-bit lanes (16 with AVX-512, 8 with AVX2, else 4):

* ``for_each``: the threads along x of one row (fixed y and z), a chunk of ``W`` at
  a time (``row`` chunks); where x is shorter than ``W``, ``W`` consecutive threads
  of the flattened grid (``flat`` chunks);
* ``for_each_block``: each block on one core, its threads (x fastest) ``W`` at a
  time, in loops split at barriers; values that live across a barrier are kept per
  thread in a slot array.

A value that is the same in every lane (computed from scalars, block indices, a
row's y and z, or loaded from a uniform index) stays a scalar; the others are
vectors (:func:`varying_values` decides which, before lowering).  An index that is
``base + stride * lane`` stays symbolic (:class:`Linear`), so a load or store of
consecutive elements is one vector access; other accesses are gathers and
scatters.  Lanes past the launch's extent, and lanes a divergent ``if_`` or a fold
whose trip count differs per lane has switched off, are masked: they load
nothing, store nothing and fail no check.  Every lane folds its own loop in
order, so float results round exactly as one thread at a time would; atomics run
lane by lane in lane order (the interpreter's thread order), and where several
lanes store to one element the highest lane's value stays (the interpreter's rule).

By concept: :mod:`.chunking` (chunks and which values vary across lanes),
:mod:`.masking` (shapes, masks and masked memory), :mod:`.control_flow` (divergent
branches and folds), :mod:`.blocks` (block launches, split at barriers),
:mod:`.launch_proof` (checks proven once per launch); this module holds the launcher's
entry points and its loops over units of work.
"""

from __future__ import annotations

import functools

import attrs
from llvmlite import ir

from ...dsl.ir import Block, Graph, Op, Value
from ...dsl.types import DType, f32, f64
from . import vecmath
from .chunking import (
    SEGMENT, Chunking, Chunks, Linear, chunking, host_vector_width, is_vector, varying_values,
)
from .blocks import BlockThreads
from .control_flow import HostControlFlow
from .launch_proof import LaunchProof
from ..arithmetic import MATH
from ..llvm import LOWER, LoweredModule, Lowering, host_entry_name
from ..llvm_types import I1, I64, VOID, constant, llvm_type, shaped
from .masking import HostMemory, Lanes
from ...targets import HostTarget

assert set(MATH) - {"sqrt"} <= set(vecmath.FUNCTIONS)


class SpmdLowering(Lowering):
    """Lowers a graph's launch for the host, ``width`` threads per vector: the launcher's entry
    points and loops over units of work, and the values' shapes (scalars, vectors,
    :class:`Linear` indices).  Its parts: :class:`Lanes` (``lanes``: vector shapes and masks),
    :class:`HostMemory`, :class:`HostControlFlow` and :class:`BlockThreads` (``blocks``)."""

    memory_class = HostMemory
    control_class = HostControlFlow

    def __init__(self, graph: Graph, target: HostTarget, width: int):
        super().__init__(graph, target)
        self.width = width
        self.lanes = Lanes(self)
        self.blocks = BlockThreads(self)
        self.chunks = chunking(graph, width)
        self.varying = varying_values(graph, self.chunks.kind)
        # <W x i1>: the lanes that run; None: all of them (a full chunk, where loads and stores
        # are plain vector ones: masked ones are much slower on some CPUs)
        self.mask: ir.Value | None = None
        self.chunk_lane: ir.Value | None = None  # the linear thread number of lane 0
        self.chunk_threads: ir.Value | None = None  # a block's thread loop: the lanes' thread numbers
        self.lane_index: ir.Value | None = None  # inside a lane-by-lane loop: the lane
        self.chunk_start: ir.Value | None = None  # blocks: the thread number of lane 0

    def op_emitters(self):
        """The target-neutral table with the host's parts, and the block level's ops."""
        return {**super().op_emitters(), "barrier": self.blocks.barrier, "shuffle": self.blocks.shuffle}

    def math_function(self, name: str, t: DType, args) -> ir.Value:
        """:mod:`.vecmath`'s routines, inlined: vector code, no libm call in a loop."""
        if name == "sqrt":
            return self.call("llvm.sqrt", args)
        if name == "rsqrt" and t == f32:  # correctly rounded: exact in double, rounded once
            x = args[0]
            wide = self.b.fpext(x, shaped(x, llvm_type(f64)))
            return self.b.fptrunc(self.b.fdiv(constant(wide, 1.0), self.call("llvm.sqrt", [wide])), x.type)
        return vecmath.emit(self.b, name, args)

    # -- values -----------------------------------------------------------------------
    def operand(self, v: Value):
        """``v``'s lowered form: a scalar, a vector or a :class:`Linear`."""
        entry = self.values.get(v)
        return entry if entry is not None else self.blocks.from_slot(v)

    def value(self, v: Value) -> ir.Value:
        entry = self.operand(v)
        return self.materialise(entry) if isinstance(entry, Linear) else entry

    def vector(self, v: Value) -> ir.Value:
        return self.lanes.splat(self.value(v))

    def phi_type(self, v: Value) -> ir.Type:
        ty = llvm_type(v.type)
        return self.lanes.vector_type(ty) if v in self.varying else ty

    def materialise(self, entry: Linear) -> ir.Value:
        base = self.lanes.splat(entry.base)
        return base if entry.stride == 0 else self.b.add(base, self.lanes.iota(entry.stride))

    def lower_op(self, op: Op) -> None:
        emitter = self.emitters.get(op.opcode)
        if emitter is not None:
            emitter(op)
            return
        entries = [self.operand(v) for v in op.operands]
        if any(isinstance(e, Linear) for e in entries):
            linear = self._linear(op, entries)
            if linear is not None:
                self.values[op.result] = linear
                return
        args = [self.materialise(e) if isinstance(e, Linear) else e for e in entries]
        self.values[op.result] = LOWER[op.opcode](self, op, list(self.broadcast(*args)))

    def _linear(self, op: Op, entries) -> Linear | None:
        """Index ``add``, ``sub`` and ``mul`` by a constant keep a :class:`Linear` symbolic."""
        if op.opcode not in ("add", "sub", "mul") or not op.result.type.is_index:
            return None
        forms = [e if isinstance(e, Linear) else None if is_vector(e) else Linear(e, 0) for e in entries]
        if None in forms:
            return None
        (a, b), bld = forms, self.b
        if op.opcode == "add":
            return Linear(bld.add(a.base, b.base), a.stride + b.stride)
        if op.opcode == "sub":
            return Linear(bld.sub(a.base, b.base), a.stride - b.stride)
        if a.stride == 0 and b.stride == 0:
            return Linear(bld.mul(a.base, b.base), 0)
        for x, y, other in ((a, b, op.operands[1]), (b, a, op.operands[0])):
            factor = other.op.attrs["value"] if other.op is not None and other.op.opcode == "const" else None
            if y.stride == 0 and factor is not None and abs(x.stride * factor) < 2**31:
                return Linear(bld.mul(x.base, y.base), x.stride * factor)
        return None

    def broadcast(self, *values):
        return self.lanes.broadcast(*values)

    def every_lane(self, condition: ir.Value) -> ir.Value:
        return self.lanes.every_lane(condition)

    # -- checks ------------------------------------------------------------------------
    def lane(self) -> ir.Value:
        if self.chunk_lane is None:
            return super().lane()
        if self.lane_index is not None:
            return self.b.add(self.chunk_lane, self.lane_index)
        return self.b.add(self.chunk_lane, self.lanes.first_lane(self.mask))

    def check(self, op: Op, ok: ir.Value, kind: int, detail: ir.Value) -> None:
        if not is_vector(ok):  # a uniform condition: report the first lane that runs
            super().check(op, ok, kind, detail)
            return
        bad = self.lanes.active(self.b.not_(ok))

        def report():
            first = self.lanes.first_lane(bad)
            return self.b.extract_element(detail, first), self.b.add(self.chunk_lane, first)

        self.fail_if(op, self.lanes.any_lane(bad), kind, report)

    # -- for_each: rows or flat chunks of lanes ---------------------------------------
    def lower_launcher(self, every_check: bool = False) -> tuple[ir.Function, bool]:
        """``void name_host(<the ABI's parameters>, unit_begin, unit_end)`` over units of
        :meth:`Chunking.units`, without the checks the launch proof covers (the runtime calls
        it where prepare says they pass), or with ``every_check``; returns it with whether
        the proof covered any (then the launch needs the other version where they fail)."""
        fn = ir.Function(self.module, ir.FunctionType(VOID, self._signature() + [I64, I64]), host_entry_name(self.graph))
        self.b = b = ir.IRBuilder(fn.append_basic_block("entry"))
        self._bind_params(fn)
        begin, end = fn.args[-2:]
        begin.name, end.name = "unit_begin", "unit_end"
        self.lower_top_level()
        lower_units = self.blocks.lower if self.graph.is_block_launch else self._lower_chunks
        covered = LaunchProof(self).prove()[1] if self.target.checks and not every_check else frozenset()
        self.unchecked, self.proven = covered, {}
        lower_units(begin, end)
        b.ret_void()
        return fn, bool(covered)

    def lower_prepare(self) -> tuple[ir.Function, bool]:
        """``i1 name_prepare(<the ABI's parameters>, i64* extents)``: writes the launch's
        extents and returns whether every covered check passes for the whole launch (with
        whether every check is covered: then the launch cannot fail)."""
        self.values.clear()
        self.proven, self.unchecked = {}, frozenset()
        self.mask = self.chunk_lane = self.lane_index = self.chunk_start = None  # the kernel's scope
        signature = ir.FunctionType(I1, self._signature() + [ir.PointerType()])
        fn = ir.Function(self.module, signature, f"{self.graph.name}_prepare")
        self.b = b = ir.IRBuilder(fn.append_basic_block("entry"))
        self._bind_params(fn)
        out = fn.args[-1]
        out.name = "extents"
        self.lower_top_level()
        for k, extent in enumerate(self.extents):
            b.store(extent, b.gep(out, [ir.Constant(I64, k)], source_etype=I64, inbounds=True))
        if not self.target.checks:
            b.ret(ir.Constant(I1, 1))
            return fn, True
        fits, _, complete = LaunchProof(self).prove()
        b.ret(fits)
        return fn, complete

    def units_loop(self, begin, end, counters, body) -> None:
        """``for unit in [begin, end)``, stepping an odometer over ``counters`` (pairs of
        start value and wrap-around extent, fastest first); ``body(unit, digits)``."""
        b = self.b
        entry = b.block
        loop, work, done = (b.append_basic_block(n) for n in ("units", "unit", "units_done"))
        b.branch(loop)
        b.position_at_end(loop)
        unit = b.phi(I64, name="unit")
        digits = [b.phi(I64) for _ in counters]
        unit.add_incoming(begin, entry)
        for phi, (start, _) in zip(digits, counters):
            phi.add_incoming(start, entry)
        b.cbranch(b.icmp_signed("<", unit, end), work, done)
        b.position_at_end(work)
        body(unit, digits)
        carry = ir.Constant(I1, 1)
        for phi, (_, extent) in zip(digits, counters):
            bumped = b.add(phi, b.zext(carry, I64))
            wraps = b.icmp_signed("==", bumped, extent)
            phi.add_incoming(b.select(wraps, ir.Constant(I64, 0), bumped), b.block)
            carry = b.and_(carry, wraps)
        unit.add_incoming(b.add(unit, ir.Constant(I64, 1)), b.block)
        b.branch(loop)
        b.position_at_end(done)

    def decode(self, number, extents):
        """``number``'s digits over ``extents`` (fastest first)."""
        digits = []
        for extent in extents:
            digits.append(self.b.urem(number, extent))
            number = self.b.udiv(number, extent)
        return digits

    def _lower_chunks(self, begin, end) -> None:
        b = self.b
        width = ir.Constant(I64, self.width)
        one = ir.Constant(I64, 1)
        extents = [b.select(b.icmp_signed(">", e, one), e, one) for e in self.extents]
        region = self.graph.launch_op.regions[0]
        if self.chunks.kind is Chunks.flat:
            total = functools.reduce(b.mul, extents)

            def body(unit, _):
                first = b.mul(unit, width)
                threads = b.add(self.lanes.splat(first), self.lanes.iota())
                self.chunk_lane = first
                self.full_or_tail(first, total, lambda: self._lower_launch_body(
                    region, self.decode(threads, [self.lanes.splat(e) for e in extents])))

            self.units_loop(begin, end, [], body)
            return
        # a unit: up to SEGMENT chunks of one row, so what depends only on the row is computed
        # once for them (LLVM hoists it out of the inner loop)
        per_row = b.udiv(b.add(extents[0], ir.Constant(I64, self.width - 1)), width)
        segment = ir.Constant(I64, SEGMENT)
        segments = b.udiv(b.add(per_row, ir.Constant(I64, SEGMENT - 1)), segment)
        start = self.decode(begin, [segments, *extents[1:]])

        def body(unit, digits):
            seg, *row = digits
            row_start = b.mul(b.udiv(unit, segments), extents[0])  # the row's first linear thread
            lo = b.mul(seg, segment)
            hi = b.add(lo, segment)
            hi = b.select(b.icmp_unsigned("<", hi, per_row), hi, per_row)

            def chunk_body(chunk):
                first = b.mul(chunk, width)
                self.chunk_lane = b.add(row_start, first)
                self.full_or_tail(first, self.extents[0],
                                   lambda: self._lower_launch_body(region, [Linear(first, 1), *row]))

            self.count_loop(lo, hi, chunk_body)

        self.units_loop(begin, end, list(zip(start, [segments, *extents[1:]])), body)

    def count_loop(self, lo, hi, body) -> None:
        """``for i in [lo, hi): body(i)`` (``lo < hi``: the body runs at least once)."""
        b = self.b
        entry = b.block
        loop, after = b.append_basic_block("chunks"), b.append_basic_block("chunks_done")
        b.branch(loop)
        b.position_at_end(loop)
        i = b.phi(I64, name="chunk")
        i.add_incoming(lo, entry)
        body(i)
        bumped = b.add(i, ir.Constant(I64, 1))
        i.add_incoming(bumped, b.block)
        b.cbranch(b.icmp_unsigned("<", bumped, hi), loop, after)
        b.position_at_end(after)

    def full_or_tail(self, first: ir.Value, extent: ir.Value, lower) -> None:
        """``lower()`` twice: for a chunk whose lanes ``first + k`` all fall below ``extent``
        (no mask), and for the last, partial one (a mask)."""
        b = self.b
        full, tail, done = (b.append_basic_block(n) for n in ("full_chunk", "tail_chunk", "chunk_done"))
        b.cbranch(b.icmp_unsigned("<=", b.add(first, ir.Constant(I64, self.width)), extent), full, tail)
        for block, mask in ((full, None), (tail, True)):
            b.position_at_end(block)
            self.mask = None
            if mask:
                lanes = b.add(self.lanes.splat(first), self.lanes.iota())
                self.mask = b.icmp_unsigned("<", lanes, self.lanes.splat(extent))
            lower()
            b.branch(done)
        b.position_at_end(done)
        self.mask = None

    def _lower_launch_body(self, region: Block, indices) -> None:
        before = set(self.values)
        for arg, value in zip(region.args, indices):
            self.values[arg] = value
        self.lower_block(region)
        for v in set(self.values) - before:  # one chunk's values do not reach the next
            del self.values[v]

def lower_host(graph: Graph, target: HostTarget) -> LoweredModule:
    """Lower ``graph`` for the host: the launcher over units of work (see :class:`Chunking`)
    without the checks the launch proof covers, and the prepare entry."""
    width = target.vector_width or host_vector_width()
    lw = SpmdLowering(graph, target, width)
    launcher, covered = lw.lower_launcher()
    _, infallible = lw.lower_prepare()
    return LoweredModule(lw.module, launcher.name, False, tuple(graph.body.walk()),
                         HostPlan(lw.chunks, infallible, checked_separately=covered))


def lower_host_checked(graph: Graph, target: HostTarget) -> LoweredModule:
    """The launcher with every check, for a launch whose prepare entry says that a check the
    proof covers may fail (compiled only then: most launches never need it)."""
    lw = SpmdLowering(graph, target, target.vector_width or host_vector_width())
    launcher, _ = lw.lower_launcher(every_check=True)
    return LoweredModule(lw.module, launcher.name, False, tuple(graph.body.walk()), HostPlan(lw.chunks, False))


@attrs.frozen
class HostPlan:
    """What the host runtime needs to know about a lowered launcher."""

    chunking: Chunking
    infallible: bool  # when the prepare entry says the launch fits, nothing can fail: run in place
    # the launcher leaves out the checks the launch proof covers: where prepare says the launch
    # does not fit, the launch runs the one with every check (lower_host_checked) instead
    checked_separately: bool = False
