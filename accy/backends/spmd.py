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
"""

from __future__ import annotations

import enum
import functools
import math
import os

import attrs
import llvmlite.binding as llvm
from llvmlite import ir

from ..dsl.analysis import uniformity
from ..dsl.analysis.phases import PhasePlan
from ..dsl.ir import Block, Graph, Op, Value
from ..errors import BarrierError, CompileError
from .abi import STATUS_LOAD_OOB, STATUS_STORE_OOB
from ..dsl.types import DType, f32, f64
from . import vecmath
from .llvm import (
    I1, I8, I32, I64, LOWER, MATH, STRUCTURAL, VOID, WARP, LoweredModule, Lowering, constant, host_entry_name,
    llvm_type, memory_type, shaped,
)
from .targets import VECTOR_WIDTHS, HostTarget

assert set(MATH) - {"sqrt"} <= set(vecmath.FUNCTIONS)


def host_vector_width() -> int:
    """Lanes per chunk on this CPU: its widest vector register in 32-bit lanes
    (``ACCY_VECTOR_WIDTH`` overrides it for the process: the tests run narrow widths)."""
    forced = os.environ.get("ACCY_VECTOR_WIDTH")
    if not forced:
        return _cpu_vector_width()
    if forced not in {str(w) for w in VECTOR_WIDTHS[1:]}:
        raise CompileError(f"ACCY_VECTOR_WIDTH must be one of {', '.join(map(str, VECTOR_WIDTHS[1:]))}, "
                           f"got {forced!r}")
    return int(forced)


@functools.cache
def _cpu_vector_width() -> int:
    features = llvm.get_host_cpu_features()
    if features.get("avx512f"):
        return 16
    if features.get("avx2") or features.get("avx"):
        return 8
    return 4


@attrs.frozen
class Linear:
    """An index ``base + stride * lane`` (``base`` a scalar i64, ``lane`` 0..W-1): a thread
    index along x and what adding uniform values and scaling by constants makes of it."""

    base: ir.Value
    stride: int


UNMASKED_COPY_OPS = 100  # a divergent if_'s side this small also gets a copy without a mask
SEGMENT = 64  # row chunks: a unit of work is up to this many chunks of one row, in an inner loop


class Chunks(enum.Enum):
    """How a launch's threads are grouped into chunks of ``W`` lanes (see the module doc)."""

    row = "row"
    flat = "flat"
    block = "block"


@attrs.frozen
class Chunking:
    kind: Chunks
    width: int

    def units(self, extents, block_shape=()) -> int:
        """How many units of work (chunks, or blocks) a launch of ``extents`` has: the host
        splits ``[0, units)`` between its threads."""
        if self.kind is Chunks.block:
            return math.prod(extents)
        if self.kind is Chunks.flat:
            return -(-math.prod(extents) // self.width)
        return -(-extents[0] // (self.width * SEGMENT)) * math.prod(extents[1:])


def chunking(graph: Graph, width: int) -> Chunking:
    if graph.is_block_launch:
        return Chunking(Chunks.block, width)
    x = graph.axes[0].extent
    return Chunking(Chunks.flat if x is not None and x < width else Chunks.row, width)


def varying_values(graph: Graph, kind: Chunks) -> set[Value]:
    """The values of the launch body that may differ between the lanes of a chunk."""
    launch = graph.launch_op
    region = launch.regions[0]
    if kind is Chunks.block:
        seeds = region.args[len(launch.operands):]  # the thread coordinates; block indices are uniform
    elif kind is Chunks.flat:
        seeds = region.args
    else:
        seeds = region.args[:1]  # x; a row's y and z are uniform
    return uniformity.varying_values(region, seeds)


def _is_vector(x) -> bool:
    return isinstance(x, ir.Value) and isinstance(x.type, ir.VectorType)


def _uniform_index(entry):
    """A scalar index where ``entry`` is the same in every lane, else None."""
    if isinstance(entry, Linear):
        return entry.base if entry.stride == 0 else None
    return None if _is_vector(entry) else entry


class SpmdLowering(Lowering):
    """Lowers a graph's launch for the host, ``width`` threads per vector."""

    def __init__(self, graph: Graph, target: HostTarget, width: int):
        super().__init__(graph, target)
        self.width = width
        self.chunks = chunking(graph, width)
        self.varying = varying_values(graph, self.chunks.kind)
        # <W x i1>: the lanes that run; None: all of them (a full chunk, where loads and stores
        # are plain vector ones: masked ones are much slower on some CPUs)
        self.mask: ir.Value | None = None
        self.chunk_lane: ir.Value | None = None  # the linear thread number of lane 0
        self.chunk_threads: ir.Value | None = None  # a block's thread loop: the lanes' thread numbers
        self.lane_index: ir.Value | None = None  # inside a lane-by-lane loop: the lane
        self.chunk_start: ir.Value | None = None  # blocks: the thread number of lane 0

    def math_function(self, name: str, t: DType, args) -> ir.Value:
        """:mod:`.vecmath`'s routines, inlined: vector code, no libm call in a loop."""
        if name == "sqrt":
            return self.call("llvm.sqrt", args)
        if name == "rsqrt" and t == f32:  # correctly rounded: exact in double, rounded once
            x = args[0]
            wide = self.b.fpext(x, shaped(x, llvm_type(f64)))
            return self.b.fptrunc(self.b.fdiv(constant(wide, 1.0), self.call("llvm.sqrt", [wide])), x.type)
        return vecmath.emit(self.b, name, args)

    # -- shapes ----------------------------------------------------------------------
    def vector_type(self, ty: ir.Type) -> ir.VectorType:
        return ir.VectorType(ty, self.width)

    def lanes(self, scale: int = 1) -> ir.Constant:
        """``<0, scale, 2 scale, ...>`` as i64."""
        return ir.Constant(self.vector_type(I64), [ir.Constant(I64, k * scale) for k in range(self.width)])

    def splat(self, x: ir.Value) -> ir.Value:
        if _is_vector(x):
            return x
        if isinstance(x, ir.Constant):
            return ir.Constant(self.vector_type(x.type), [x] * self.width)
        one = self.b.insert_element(ir.Constant(self.vector_type(x.type), None), x, ir.Constant(I32, 0))
        return self.b.shuffle_vector(one, ir.Constant(one.type, None), ir.Constant(self.vector_type(I32), None))

    def broadcast(self, *values):
        if any(_is_vector(v) for v in values):
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
        if not _is_vector(condition):
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

    # -- values -----------------------------------------------------------------------
    def operand(self, v: Value):
        """``v``'s lowered form: a scalar, a vector or a :class:`Linear`."""
        entry = self.values.get(v)
        return entry if entry is not None else self._from_slot(v)

    def value(self, v: Value) -> ir.Value:
        entry = self.operand(v)
        return self.materialise(entry) if isinstance(entry, Linear) else entry

    def vector(self, v: Value) -> ir.Value:
        return self.splat(self.value(v))

    def shaped_like(self, v: Value) -> ir.Value:
        """``v`` as its phi or slot holds it: a vector if it varies, else a scalar."""
        return self.vector(v) if v in self.varying else self.value(v)

    def phi_type(self, v: Value) -> ir.Type:
        ty = llvm_type(v.type)
        return self.vector_type(ty) if v in self.varying else ty

    def materialise(self, entry: Linear) -> ir.Value:
        base = self.splat(entry.base)
        return base if entry.stride == 0 else self.b.add(base, self.lanes(entry.stride))

    def lower_op(self, op: Op) -> None:
        if op.opcode in STRUCTURAL:
            getattr(self, f"op_{op.opcode}")(op)
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
        forms = [e if isinstance(e, Linear) else None if _is_vector(e) else Linear(e, 0) for e in entries]
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

    # -- checks ------------------------------------------------------------------------
    def lane(self) -> ir.Value:
        if self.chunk_lane is None:
            return super().lane()
        if self.lane_index is not None:
            return self.b.add(self.chunk_lane, self.lane_index)
        return self.b.add(self.chunk_lane, self.first_lane(self.mask))

    def check(self, op: Op, ok: ir.Value, kind: int, detail: ir.Value) -> None:
        if not _is_vector(ok):  # a uniform condition: report the first lane that runs
            super().check(op, ok, kind, detail)
            return
        bad = self.active(self.b.not_(ok))

        def report():
            first = self.first_lane(bad)
            return self.b.extract_element(detail, first), self.b.add(self.chunk_lane, first)

        self.fail_if(op, self.any_lane(bad), kind, report)

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

    def op_load(self, op: Op) -> None:
        dtype = op.attrs["dtype"]
        entry = self.operand(op.operands[0])
        uniform = _uniform_index(entry)
        if uniform is not None:
            self.values[op.result] = self.load_at(op, uniform)
            return
        ty = self.vector_type(memory_type(dtype))
        indices = self.materialise(entry) if isinstance(entry, Linear) else entry
        lanes = self._checked_lanes(op, indices, STATUS_LOAD_OOB)
        align = ir.Constant(I32, dtype.itemsize)
        if isinstance(entry, Linear) and entry.stride == 1 and lanes is None:  # a whole vector
            loaded = self.b.load(self._element(op, entry.base), typ=ty, align=dtype.itemsize)
        elif isinstance(entry, Linear) and entry.stride == 1:  # consecutive elements, some lanes
            name = f"llvm.masked.load.{_vsuffix(ty)}.p0"
            loaded = self._intrinsic(name, ty, [self._element(op, entry.base), align, lanes, ir.Constant(ty, None)])
        else:
            name = f"llvm.masked.gather.{_vsuffix(ty)}.v{self.width}p0"
            loaded = self._intrinsic(name, ty, [self._addresses(op, indices), align, self._all(lanes),
                                                ir.Constant(ty, None)])
        self.values[op.result] = self.b.trunc(loaded, self.vector_type(I1)) if dtype.is_bool else loaded

    def op_store(self, op: Op) -> None:
        dtype = op.attrs["dtype"]
        entry, value = self.operand(op.operands[0]), self.value(op.operands[1])
        uniform = _uniform_index(entry)
        if uniform is not None:  # every lane stores to one element: the last lane's value stays
            if _is_vector(value):
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
            name = f"llvm.masked.store.{_vsuffix(value.type)}.p0"
            self._intrinsic(name, VOID, [value, self._element(op, entry.base), align, lanes])
        else:  # a scatter stores lanes in order: where two lanes hit one element, the higher wins
            name = f"llvm.masked.scatter.{_vsuffix(value.type)}.v{self.width}p0"
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
        scalars = [b.extract_element(x, k) if _is_vector(x) else x for x in operands]
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

    # -- branches and loops ----------------------------------------------------------
    def op_if(self, op: Op) -> None:
        cond = self.value(op.operands[0])
        if _is_vector(cond):
            self._masked_if(op, cond)
            return
        b = self.b
        tag = self.ordinals[op]
        blocks = [b.append_basic_block(f"if_{tag}_{n}") for n in ("then", "else", "end")]
        b.cbranch(cond, blocks[0], blocks[1])
        incoming = []
        for block, region in zip(blocks, (*op.regions, None)[:2]):
            b.position_at_end(block)
            values = []
            if region is not None:
                self.lower_block(region)
                values = [self.shaped_like_result(v, r) for v, r in zip(region.terminator.operands, op.results)]
            incoming.append((values, b.block))
            b.branch(blocks[2])
        b.position_at_end(blocks[2])
        for k, result in enumerate(op.results):
            phi = b.phi(self.phi_type(result))
            for values, block in incoming:
                phi.add_incoming(values[k], block)
            self.values[result] = phi

    def shaped_like_result(self, v: Value, result: Value) -> ir.Value:
        return self.vector(v) if result in self.varying else self.value(v)

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

    def op_fold(self, op: Op) -> None:
        b = self.b
        start, stop = (self.operand(v) for v in op.operands[:2])
        (region,) = op.regions
        accs = [self.shaped_like_result(v, a) for v, a in zip(op.operands[2:], region.args[1:])]
        step = op.attrs["step"]
        lo, hi = _uniform_index(start), _uniform_index(stop)
        if lo is not None and hi is not None:  # every lane runs the same trips
            trips = self._trip_count(lo, hi, step)
            if self.target.checks:
                self._prove_loads(region, lo, trips, step)
            accs = self._fold_loop(op, start, ir.Constant(I64, 0), trips, accs, None)
        else:
            first = self.materialise(start) if isinstance(start, Linear) else self.splat(start if lo is None else lo)
            last = self.materialise(stop) if isinstance(stop, Linear) else self.splat(stop)
            per_lane = self._trip_count(first, last, step)
            if self.mask is not None:  # a lane that does not run takes no trips
                per_lane = b.select(self.mask, per_lane, constant(per_lane, 0))
            if self.target.checks:
                self._prove_loads(region, first, per_lane, step)
            most = self.call("llvm.vector.reduce.umax", [per_lane], ty=I64)
            counted = b.select(self.mask, per_lane, constant(per_lane, -1)) if self.mask is not None else per_lane
            least = self.call("llvm.vector.reduce.umin", [counted], ty=I64)
            # the trips every running lane takes, with the lanes as they are, then the rest masked
            accs = self._fold_loop(op, start, ir.Constant(I64, 0), least, accs, None)
            accs = self._fold_loop(op, start, least, most, accs, per_lane)
        for result, value in zip(op.results, accs):
            self.values[result] = value

    def _fold_loop(self, op: Op, start, begin: ir.Value, end: ir.Value, inits, per_lane) -> list[ir.Value]:
        """Trips ``[begin, end)`` of fold ``op`` from accumulators ``inits``; with ``per_lane``
        trip counts, a lane past its own last trip is switched off and keeps its values."""
        b = self.b
        (region,) = op.regions
        tag = self.ordinals[op]
        preheader = b.block
        header, body, exit_ = (b.append_basic_block(f"fold_{tag}_{n}") for n in ("header", "body", "exit"))
        b.branch(header)
        b.position_at_end(header)
        counter = b.phi(I64, name=f"trip_{tag}")
        counter.add_incoming(begin, preheader)
        accs = [b.phi(self.phi_type(a)) for a in region.args[1:]]
        for phi, init in zip(accs, inits):
            phi.add_incoming(init, preheader)
        b.cbranch(b.icmp_unsigned("<", counter, end), body, exit_)
        b.position_at_end(body)
        offset = b.mul(counter, ir.Constant(I64, op.attrs["step"]))
        if isinstance(start, Linear):
            self.values[region.args[0]] = Linear(b.add(start.base, offset), start.stride)
        else:
            self.values[region.args[0]] = b.add(*self.broadcast(start, offset))
        outer = self.mask
        if per_lane is not None:
            self.mask = b.icmp_unsigned("<", self.splat(counter), per_lane)  # zero trips where masked
        for arg, phi in zip(region.args[1:], accs):
            self.values[arg] = phi
        self.lower_block(region)
        new = [self.shaped_like_result(v, a) for v, a in zip(region.terminator.operands, region.args[1:])]
        if per_lane is not None:  # a lane past its last trip keeps its accumulators
            new = [b.select(self.mask, n, phi) for n, phi in zip(new, accs)]
        self.mask = outer
        counter.add_incoming(b.add(counter, ir.Constant(I64, 1)), b.block)
        for phi, value in zip(accs, new):
            phi.add_incoming(value, b.block)
        b.branch(header)
        b.position_at_end(exit_)
        return accs

    # -- for_each: rows or flat chunks of lanes ---------------------------------------
    def lower_launcher(self) -> ir.Function:
        """``void name_host(<the ABI's parameters>, unit_begin, unit_end)`` over units of
        :meth:`Chunking.units`."""
        fn = ir.Function(self.module, ir.FunctionType(VOID, self._signature() + [I64, I64]), host_entry_name(self.graph))
        self.b = b = ir.IRBuilder(fn.append_basic_block("entry"))
        self._bind_params(fn)
        begin, end = fn.args[-2:]
        begin.name, end.name = "unit_begin", "unit_end"
        self.lower_top_level()
        lower_units = self._lower_blocks if self.graph.is_block_launch else self._lower_chunks
        fits, covered = (_LaunchProof(self).prove()[:2]) if self.target.checks else (None, None)
        if covered:  # two versions: the checks proven for the whole launch, or every check
            fast, checked, done = (b.append_basic_block(n) for n in ("proven", "checked", "done"))
            b.cbranch(fits, fast, checked)
            for block, unchecked in ((fast, covered), (checked, frozenset())):
                b.position_at_end(block)
                self.unchecked, self.proven = unchecked, {}
                lower_units(begin, end)
                b.branch(done)
            b.position_at_end(done)
        else:
            lower_units(begin, end)
        b.ret_void()
        return fn

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
        fits, _, complete = _LaunchProof(self).prove()
        b.ret(fits)
        return fn, complete

    def _units_loop(self, begin, end, counters, body) -> None:
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

    def _decode(self, number, extents):
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
                threads = b.add(self.splat(first), self.lanes())
                self.chunk_lane = first
                self._full_or_tail(first, total, lambda: self._lower_launch_body(
                    region, self._decode(threads, [self.splat(e) for e in extents])))

            self._units_loop(begin, end, [], body)
            return
        # a unit: up to SEGMENT chunks of one row, so what depends only on the row is computed
        # once for them (LLVM hoists it out of the inner loop)
        per_row = b.udiv(b.add(extents[0], ir.Constant(I64, self.width - 1)), width)
        segment = ir.Constant(I64, SEGMENT)
        segments = b.udiv(b.add(per_row, ir.Constant(I64, SEGMENT - 1)), segment)
        start = self._decode(begin, [segments, *extents[1:]])

        def body(unit, digits):
            seg, *row = digits
            row_start = b.mul(b.udiv(unit, segments), extents[0])  # the row's first linear thread
            lo = b.mul(seg, segment)
            hi = b.add(lo, segment)
            hi = b.select(b.icmp_unsigned("<", hi, per_row), hi, per_row)

            def chunk_body(chunk):
                first = b.mul(chunk, width)
                self.chunk_lane = b.add(row_start, first)
                self._full_or_tail(first, self.extents[0],
                                   lambda: self._lower_launch_body(region, [Linear(first, 1), *row]))

            self._count_loop(lo, hi, chunk_body)

        self._units_loop(begin, end, list(zip(start, [segments, *extents[1:]])), body)

    def _count_loop(self, lo, hi, body) -> None:
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

    def _full_or_tail(self, first: ir.Value, extent: ir.Value, lower) -> None:
        """``lower()`` twice: for a chunk whose lanes ``first + k`` all fall below ``extent``
        (no mask), and for the last, partial one (a mask)."""
        b = self.b
        full, tail, done = (b.append_basic_block(n) for n in ("full_chunk", "tail_chunk", "chunk_done"))
        b.cbranch(b.icmp_unsigned("<=", b.add(first, ir.Constant(I64, self.width)), extent), full, tail)
        for block, mask in ((full, None), (tail, True)):
            b.position_at_end(block)
            self.mask = b.icmp_unsigned("<", b.add(self.splat(first), self.lanes()), self.splat(extent)) if mask else None
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

    # -- for_each_block: a block's threads in chunks, split at barriers ------------------
    def _lower_blocks(self, begin, end) -> None:
        b = self.b
        launch = self.graph.launch_op
        region = launch.regions[0]
        shape = self.graph.block_shape
        self.per_block = math.prod(shape)
        self.chunks_per_block = -(-self.per_block // self.width)
        padded = self.chunks_per_block * self.width
        for name, op in self.graph.shared_arrays().items():  # a stack array, reused by each block
            self.shared_ptrs[name] = _untyped(b.alloca(ir.ArrayType(memory_type(op.attrs["dtype"]), op.attrs["count"]),
                                                       name=f"shared_{name}"))
        self.plan = PhasePlan(region, self._chunk_local, region.args[len(launch.operands):])
        for v in self.plan.slot_values:  # a warp's worth of padding on both sides: shuffles up and down
            array = b.alloca(ir.ArrayType(memory_type(v.type), WARP + padded + WARP))
            self.slots[v] = _untyped(b.gep(array, [ir.Constant(I64, 0), ir.Constant(I64, WARP)], inbounds=True))
        self.thread_args = region.args[len(launch.operands):]
        grid_args = region.args[:len(launch.operands)]
        one = ir.Constant(I64, 1)
        extents = [b.select(b.icmp_signed(">", e, one), e, one) for e in self.extents]

        def body(unit, coords):
            for arg, value in zip(grid_args, coords):
                self.values[arg] = value
            self.block_id = unit
            shuffled = [arg for arg in self.thread_args if arg in self.slots]
            if shuffled:  # a shuffle reads coordinates at other threads: every thread's, first
                self._thread_loop([], after=lambda start: [self._to_slot(arg, self.value(arg), start)
                                                           for arg in shuffled])
            self._lower_phased(region.ops)

        self._units_loop(begin, end, list(zip(self._decode(begin, extents), extents)), body)

    def _slot(self, v: Value, thread: ir.Value) -> ir.Value:
        """The address of thread ``thread``'s element of ``v``'s slot array."""
        return self.b.gep(self.slots[v], [thread], source_etype=memory_type(v.type), inbounds=True)

    def _element(self, op: Op, idx: ir.Value) -> ir.Value:
        if op.attrs.get("space", "global") == "shared":
            return self.b.gep(self.shared_ptrs[op.attrs["buffer"]], [idx], source_etype=memory_type(op.attrs["dtype"]),
                              inbounds=True)
        return super()._element(op, idx)

    def _from_slot(self, v: Value):
        """A value computed before a barrier: this chunk's lanes of its slot, or thread 0's
        for a value the whole block shares."""
        b = self.b
        ty = memory_type(v.type)
        if v not in self.varying:
            loaded = b.load(self._slot(v, ir.Constant(I64, 0)), typ=ty)
            return b.trunc(loaded, I1) if v.type.is_bool else loaded
        return self._slot_vector(v, self.chunk_start)

    def _to_slot(self, v: Value, value: ir.Value, start: ir.Value) -> None:
        value = self.splat(value)
        if v.type.is_bool:
            value = self.b.zext(value, self.vector_type(I8))
        self.b.store(value, self._slot(v, start), align=max(1, v.type.itemsize))

    def _lower_phased(self, ops) -> None:
        """Ops between barriers run in one loop over the block's chunks; a loop or branch
        holding a barrier runs once per block around them."""
        segment: list[Op] = []
        for op in ops:
            if op.opcode == "yield":
                continue
            if op.opcode == "barrier" or op in self.plan.synchronising:
                self._thread_loop(segment)
                segment = []
                if op.opcode == "fold":
                    self._block_fold(op)
                elif op.opcode == "if":
                    self._block_if(op)
                continue
            if op.opcode == "shuffle" and not self._chunk_local(op):
                self._thread_loop(segment)  # every thread's operand must exist first: a new loop starts here
                segment = []
            segment.append(op)
        self._thread_loop(segment)

    def _thread_loop(self, ops, after=None) -> None:
        """``for each chunk of the block's threads: <ops>``, storing what later stretches read
        into their slots; ``after()`` runs at the end of each chunk."""
        if not ops and after is None:
            return
        self._count_loop(ir.Constant(I64, 0), ir.Constant(I64, self.chunks_per_block),
                         lambda chunk: self._chunk_of_threads(chunk, ops, after))
        self.mask = self.chunk_lane = self.chunk_start = self.chunk_threads = None

    def _chunk_of_threads(self, chunk, ops, after) -> None:
        """One chunk of :meth:`_thread_loop`: the whole chunk, or a full and a tail version."""
        b = self.b
        start = b.mul(chunk, ir.Constant(I64, self.width))
        threads = b.add(self.splat(start), self.lanes())
        self.chunk_start, self.chunk_threads = start, threads
        self.chunk_lane = b.add(b.mul(self.block_id, ir.Constant(I64, self.per_block)), start)

        def lower():
            inner = set(self.values)
            for arg, coordinate in zip(self.thread_args, self._thread_coordinates(start, threads)):
                self.values[arg] = coordinate
            for v in self.plan.recomputed:  # at the top, where they dominate every use; unused ones are dropped
                if v not in self.values and all(x in self.values or x in self.slots for x in v.op.operands):
                    self.lower_op(v.op)
            for op in ops:
                self.lower_op(op)
                for r in op.results:
                    if r in self.slots:
                        self._to_slot(r, self.value(r), start)
            if after is not None:
                after(start)
            for v in set(self.values) - inner:  # the full and the tail version each compute their own
                del self.values[v]

        if self.per_block % self.width == 0:  # every chunk is whole
            self.mask = None
            lower()
        else:
            self._full_or_tail(start, ir.Constant(I64, self.per_block), lower)

    def _thread_coordinates(self, start, threads):
        """The thread coordinates of a chunk: x consecutive (and y, z the same in every lane)
        where the block's x extent is a multiple of the width."""
        shape = self.graph.block_shape
        if shape[0] % self.width == 0:
            scalars = self._decode(start, [ir.Constant(I64, e) for e in shape])
            return [Linear(scalars[0], 1), *(Linear(s, 0) for s in scalars[1:])]
        return self._decode(threads, [self.splat(ir.Constant(I64, e)) for e in shape])

    def _chunk_local(self, op: Op) -> bool:
        """A shuffle each lane of a chunk sources within the chunk: an xor by a constant below
        the width (a permutation of the vector's lanes: no slot, no new thread loop)."""
        delta = _constant(op.operands[1])
        return op.attrs["mode"] == "xor" and delta is not None and 0 <= delta < min(self.width, WARP)

    def op_shuffle(self, op: Op) -> None:  # in a thread loop, or a loop or branch inside one
        self._host_shuffle(op, self.chunk_threads)

    def _host_shuffle(self, op: Op, threads: ir.Value) -> None:
        """The source lane's value: a permutation of this chunk's vector, a vector load from the
        operand's slot array at a constant offset, or a gather from it."""
        b = self.b
        value = op.operands[0]
        if value not in self.slots and not self._chunk_local(op):  # the same for every thread
            self.values[op.result] = self.value(value)
            return
        delta, mode = _constant(op.operands[1]), op.attrs["mode"]
        if delta is not None and mode == "xor" and 0 <= delta < WARP:
            # lane t reads t ^ delta: the chunk at start ^ (delta's high bits), permuted by its low bits
            low, high = delta % self.width, delta - delta % self.width
            source = self.vector(value) if high == 0 else self._slot_vector(value, b.xor(self.chunk_start,
                                                                                        ir.Constant(I64, high)))
            self.values[op.result] = self._permute(source, [k ^ low for k in range(self.width)])
            return
        if delta is not None and mode in ("down", "up") and 0 <= delta < WARP:
            # lane t reads t +- delta where that stays in its warp (the slots are padded on both sides)
            offset = ir.Constant(I64, delta if mode == "down" else -delta)
            moved = self._slot_vector(value, b.add(self.chunk_start, offset))
            lane = b.urem(threads, self.splat(ir.Constant(I64, WARP)))
            if mode == "down":
                inside = b.icmp_unsigned("<", b.add(lane, self.splat(offset)), self.splat(ir.Constant(I64, WARP)))
            else:
                inside = b.icmp_unsigned(">=", lane, self.splat(ir.Constant(I64, delta)))
            self.values[op.result] = b.select(inside, moved, self.vector(value))
            return
        delta = self.vector(op.operands[1])
        warp = self.splat(ir.Constant(I64, WARP))
        lane = b.urem(threads, warp)
        base = b.sub(threads, lane)
        if mode == "idx":
            source = b.add(base, b.and_(delta, self.splat(ir.Constant(I64, WARP - 1))))
        else:
            target = {"xor": lambda: b.xor(lane, delta), "down": lambda: b.add(lane, delta),
                      "up": lambda: b.sub(lane, delta)}[mode]()
            inside = b.and_(b.icmp_unsigned("<", delta, warp), b.icmp_unsigned("<", target, warp))
            source = b.select(inside, b.add(base, target), threads)
        ty = self.vector_type(memory_type(value.type))
        pointers = self._slot(value, source)
        pointers.type = self.vector_type(pointers.type)
        align = ir.Constant(I32, max(1, value.type.itemsize))
        loaded = self._intrinsic(f"llvm.masked.gather.{_vsuffix(ty)}.v{self.width}p0", ty,
                                 [pointers, align, self._all(self.mask), ir.Constant(ty, None)])
        self.values[op.result] = b.trunc(loaded, self.vector_type(I1)) if value.type.is_bool else loaded

    def _slot_vector(self, v: Value, start: ir.Value) -> ir.Value:
        """Threads ``start .. start + W - 1``'s values of ``v`` from its slot array."""
        ty = memory_type(v.type)
        loaded = self.b.load(self._slot(v, start), typ=self.vector_type(ty), align=max(1, v.type.itemsize))
        return self.b.trunc(loaded, self.vector_type(I1)) if v.type.is_bool else loaded

    def _permute(self, vector: ir.Value, lanes: list[int]) -> ir.Value:
        if lanes == list(range(self.width)):
            return vector
        order = ir.Constant(self.vector_type(I32), [ir.Constant(I32, k) for k in lanes])
        return self.b.shuffle_vector(vector, ir.Constant(vector.type, None), order)

    def _uniform(self, v: Value) -> ir.Value:
        """A value the whole block agrees on (a loop's bounds, a branch's condition): thread 0's."""
        entry = self.values.get(v)
        if entry is None:
            return self._from_slot_scalar(v)
        if isinstance(entry, Linear):
            return entry.base  # lane 0's
        return self.b.extract_element(entry, ir.Constant(I32, 0)) if _is_vector(entry) else entry

    def _from_slot_scalar(self, v: Value) -> ir.Value:
        loaded = self.b.load(self._slot(v, ir.Constant(I64, 0)), typ=memory_type(v.type))
        return self.b.trunc(loaded, I1) if v.type.is_bool else loaded

    def _store_per_thread(self, targets, sources) -> None:
        """For every thread, ``targets[k][t] = sources[k](t)`` (all read before any is written)."""
        def store(start):
            values = [self.value(v) for v in sources]
            for target, value in zip(targets, values):
                self._to_slot(target, value, start)

        self._thread_loop([], after=store)

    def _refuse_divergent(self, op: Op, guards) -> None:
        """A loop or branch holding a barrier runs once per block, on thread 0's bounds or
        condition.  Where those may differ between the block's threads (the builder refuses
        that; a parsed graph may hold it), not every thread would reach the barrier: refused,
        as the interpreter and the emulator refuse it when it happens."""
        if not any(v in self.varying for v in guards):
            return
        inner = next((o for o in op.walk() if o.opcode in ("barrier", "shuffle")), op)
        at = f" at {inner.location}" if inner.location is not None else ""
        where = "a fold_range whose bounds depend" if op.opcode == "fold" else "an if_ whose condition depends"
        raise BarrierError(f"{inner.opcode}{at} inside {where} on the thread: not every thread of the block "
                           "would reach it (on a GPU this hangs or corrupts shared memory); the llvm backend "
                           "runs the block's threads through it together, so it refuses the kernel")

    def _block_fold(self, op: Op) -> None:
        """A loop holding a barrier: its bounds are the block's, its accumulators each thread's."""
        b = self.b
        self._refuse_divergent(op, op.operands[:2])
        (region,) = op.regions
        start, stop = (self._uniform(v) for v in op.operands[:2])
        step = op.attrs["step"]
        accs = region.args[1:]
        self._store_per_thread(accs, op.operands[2:])
        trips = self._trip_count(start, stop, step)
        tag = self.ordinals[op]
        preheader = b.block
        header, body, exit_ = (b.append_basic_block(f"block_fold_{tag}_{n}") for n in ("header", "body", "exit"))
        b.branch(header)
        b.position_at_end(header)
        counter = b.phi(I64)
        iv = b.phi(I64)
        counter.add_incoming(ir.Constant(I64, 0), preheader)
        iv.add_incoming(start, preheader)
        b.cbranch(b.icmp_unsigned("<", counter, trips), body, exit_)
        b.position_at_end(body)
        self.values[region.args[0]] = iv
        self._lower_phased(region.ops)
        self._store_per_thread(accs, region.terminator.operands)
        counter.add_incoming(b.add(counter, ir.Constant(I64, 1)), b.block)
        iv.add_incoming(b.add(iv, ir.Constant(I64, step)), b.block)
        b.branch(header)
        b.position_at_end(exit_)
        del self.values[region.args[0]]
        for result, acc in zip(op.results, accs):
            self.slots[result] = self.slots[acc]

    def _block_if(self, op: Op) -> None:
        """A branch holding a barrier: the block takes it or not, as one."""
        b = self.b
        self._refuse_divergent(op, op.operands[:1])
        tag = self.ordinals[op]
        then, otherwise, join = (b.append_basic_block(f"block_if_{tag}_{n}") for n in ("then", "else", "end"))
        b.cbranch(self._uniform(op.operands[0]), then, otherwise)
        for block, region in ((then, op.regions[0]), (otherwise, op.regions[1] if len(op.regions) > 1 else None)):
            b.position_at_end(block)
            if region is not None:
                self._lower_phased(region.ops)
                self._store_per_thread(op.results, region.terminator.operands)
            b.branch(join)
        b.position_at_end(join)


@attrs.frozen
class _Bounds:
    """An index's interval over a whole launch, computed before it runs."""

    lo: ir.Value
    hi: ir.Value
    valid: ir.Value  # i1: no step overflowed (else nothing is known)
    reached: ir.Value  # i1: some thread may compute it (false: an empty loop's index)


class _LaunchProof:
    """Checks, once before a launch, every access whose index is made of thread indices, loop
    indices and kernel-scope values with ``+ - *``, ``min``, ``max``, ``select``, and ``//`` and
    ``%`` by positive constants: its interval over the whole launch must lie in bounds (and a
    divisor's must exclude 0).  Conservative: a loop's index ranges from its lowest start to
    its highest stop, and of a branch's condition only comparisons of indices (``and``-ed
    together) narrow them inside the ``then`` side, for every value computed from them there
    (``row > 0`` and ``row < n - 1`` guarding ``x[row - 1]`` and ``x[row + 1]``).  Where it holds, those
    accesses need no check at run time; where every check of a kernel is covered, the
    kernel cannot fail, and the host runs it on the caller's arrays with no scratch copies."""

    def __init__(self, lw: "SpmdLowering", narrowed: dict | None = None):
        self.lw = lw
        self.b = lw.b
        self.bounds: dict[Value, _Bounds | None] = {}
        if narrowed is not None:  # inside a branch: the narrowed indices, the rest computed again
            self.bounds.update(narrowed)
            return
        launch = lw.graph.launch_op
        region = launch.regions[0]
        yes, one = ir.Constant(I1, 1), ir.Constant(I64, 1)
        if lw.graph.is_block_launch:
            extents = list(lw.extents) + [ir.Constant(I64, e) for e in lw.graph.block_shape]
        else:
            extents = list(lw.extents)
        for arg, extent in zip(region.args, extents):
            self.bounds[arg] = _Bounds(ir.Constant(I64, 0), self.b.sub(extent, one), yes, yes)

    def prove(self) -> tuple[ir.Value, frozenset[Op], bool]:
        """(all covered checks pass, the ops covered, whether every check is covered)."""
        ok, covered, complete = ir.Constant(I1, 1), set(), True

        def walk(proof: "_LaunchProof", block: Block) -> None:
            nonlocal ok, complete
            for op in block.ops:
                fits = proof._fits(op)
                if fits is None:
                    complete = False
                elif fits is not False:  # (False: no check to cover)
                    ok = self.b.and_(ok, fits)
                    covered.add(op)
                for k, region in enumerate(op.regions):
                    walk(proof._narrowed(op.operands[0]) if op.opcode == "if" and k == 0 else proof, region)

        walk(self, self.lw.graph.launch_op.regions[0])
        return ok, frozenset(covered), complete

    def _narrowed(self, condition: Value) -> "_LaunchProof":
        """The proof inside a branch taken where ``condition`` holds: each index it compares
        with a value of known bounds narrowed (``i < e``: i <= e.hi - 1, ...)."""
        narrowed: dict[Value, _Bounds] = {}
        b, one = self.b, ir.Constant(I64, 1)
        conjuncts, facts = [condition], []
        while conjuncts:
            c = conjuncts.pop()
            if c.op is not None and c.op.opcode == "and" and c.type.is_bool:
                conjuncts.extend(c.op.operands)
            elif c.op is not None and c.op.opcode in ("lt", "le", "gt", "ge") and c.op.operands[0].type.is_index:
                x, y = c.op.operands
                opcode = c.op.opcode
                facts.append((x, opcode, y))  # and the same fact seen from y's side
                facts.append((y, {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}[opcode], x))
        for x, opcode, y in facts:
            bx = narrowed.get(x) or self.of(x)
            by = self.of(y)
            if bx is None or by is None:
                continue
            if opcode in ("lt", "le"):  # x < y <= y.hi
                limit = b.ssub_with_overflow(by.hi, one) if opcode == "lt" else None
                hi = by.hi if limit is None else b.extract_value(limit, 0)
                valid = by.valid if limit is None else b.and_(by.valid, b.not_(b.extract_value(limit, 1)))
                lo, hi = bx.lo, self.lw.call("llvm.smin", [bx.hi, hi])
            else:  # x > y >= y.lo
                limit = b.sadd_with_overflow(by.lo, one) if opcode == "gt" else None
                lo = by.lo if limit is None else b.extract_value(limit, 0)
                valid = by.valid if limit is None else b.and_(by.valid, b.not_(b.extract_value(limit, 1)))
                lo, hi = self.lw.call("llvm.smax", [bx.lo, lo]), bx.hi
            # where the narrowed interval is empty, no thread takes the branch
            narrowed[x] = _Bounds(lo, hi, b.and_(bx.valid, valid),
                                  b.and_(b.and_(bx.reached, by.reached), b.icmp_signed("<=", lo, hi)))
        if not narrowed:
            return self
        indices = {v: bounds for v, bounds in self.bounds.items() if v.op is None}  # the launch's own
        return _LaunchProof(self.lw, {**indices, **narrowed})

    def _fits(self, op: Op):
        """An i1 proving ``op``'s check passes everywhere, None if unknown, False if it has none."""
        b = self.b
        if op.opcode in ("load", "store", "atomic"):
            if not self.lw._checked(op):
                return False
            bounds = self.of(op.operands[0])
            if bounds is None:
                return None
            inside = b.and_(b.icmp_signed(">=", bounds.lo, ir.Constant(I64, 0)),
                            b.icmp_signed("<", bounds.hi, self.lw._count(op)))
        elif op.opcode in ("div", "mod") and op.result.type.is_int:
            divisor = op.operands[1]
            if divisor.op is not None and divisor.op.opcode == "const" and divisor.op.attrs["value"] != 0:
                return False
            bounds = self.of(divisor)
            if bounds is None:
                return None
            inside = b.or_(b.icmp_signed(">", bounds.lo, ir.Constant(I64, 0)),
                           b.icmp_signed("<", bounds.hi, ir.Constant(I64, 0)))
        else:
            return False
        return b.and_(bounds.valid, b.or_(b.not_(bounds.reached), inside))

    def of(self, v: Value) -> _Bounds | None:
        if v not in self.bounds:
            self.bounds[v] = self._compute(v)
        return self.bounds[v]

    def _compute(self, v: Value) -> _Bounds | None:
        b, yes = self.b, ir.Constant(I1, 1)
        if not v.type.is_index:
            return None
        if v.block is self.lw.graph.body:  # kernel scope: one value for the whole launch
            value = self.lw.values[v]
            return _Bounds(value, value, yes, yes)
        op = v.op
        if op is None:
            return self._loop_index(v)
        if op.opcode == "const":
            c = ir.Constant(I64, op.attrs["value"])
            return _Bounds(c, c, yes, yes)
        if op.opcode in ("div", "mod"):
            return self._by_constant(op)
        parts = [self.of(x) for x in op.operands[1:] if op.opcode == "select"] if op.opcode == "select" \
            else [self.of(x) for x in op.operands]
        if None in parts or op.opcode not in ("add", "sub", "mul", "min", "max", "select"):
            return None
        x, y = parts
        valid, reached = b.and_(x.valid, y.valid), b.and_(x.reached, y.reached)
        if op.opcode in ("add", "sub"):
            step = b.sadd_with_overflow if op.opcode == "add" else b.ssub_with_overflow
            lo = step(x.lo, y.lo if op.opcode == "add" else y.hi)
            hi = step(x.hi, y.hi if op.opcode == "add" else y.lo)
            valid = b.and_(valid, b.not_(b.or_(b.extract_value(lo, 1), b.extract_value(hi, 1))))
            return _Bounds(b.extract_value(lo, 0), b.extract_value(hi, 0), valid, reached)
        if op.opcode == "mul":
            corners = [b.smul_with_overflow(p, q) for p in (x.lo, x.hi) for q in (y.lo, y.hi)]
            for corner in corners:
                valid = b.and_(valid, b.not_(b.extract_value(corner, 1)))
            values = [b.extract_value(c, 0) for c in corners]
            return _Bounds(self._fold("llvm.smin", values), self._fold("llvm.smax", values), valid, reached)
        if op.opcode == "select":  # either side: their union
            return _Bounds(self._fold("llvm.smin", [x.lo, y.lo]), self._fold("llvm.smax", [x.hi, y.hi]),
                           valid, b.or_(x.reached, y.reached))
        name = "llvm.smin" if op.opcode == "min" else "llvm.smax"
        return _Bounds(self._fold(name, [x.lo, y.lo]), self._fold(name, [x.hi, y.hi]), valid, reached)

    def _fold(self, name: str, values) -> ir.Value:
        result = values[0]
        for value in values[1:]:
            result = self.lw.call(name, [result, value])
        return result

    def _by_constant(self, op: Op) -> _Bounds | None:
        """``x // c`` (floor) and ``x % c`` for a constant ``c > 0``."""
        divisor = op.operands[1]
        if divisor.op is None or divisor.op.opcode != "const" or divisor.op.attrs["value"] <= 0:
            return None
        x = self.of(op.operands[0])
        if x is None:
            return None
        c = divisor.op.attrs["value"]
        if op.opcode == "mod":
            return _Bounds(ir.Constant(I64, 0), ir.Constant(I64, c - 1), x.valid, x.reached)
        b = self.b

        def floor(n):
            q = b.sdiv(n, ir.Constant(I64, c))
            below = b.and_(b.icmp_signed("<", n, ir.Constant(I64, 0)),
                           b.icmp_signed("!=", b.srem(n, ir.Constant(I64, c)), ir.Constant(I64, 0)))
            return b.sub(q, b.zext(below, I64))

        return _Bounds(floor(x.lo), floor(x.hi), x.valid, x.reached)

    def _loop_index(self, v: Value) -> _Bounds | None:
        """A fold's index runs from its lowest start to its highest stop (exclusive)."""
        owner = v.owner.parent
        if owner is None or owner.opcode != "fold" or v is not v.owner.args[0]:
            return None
        start, stop = (self.of(x) for x in owner.operands[:2])
        if start is None or stop is None:
            return None
        b, one = self.b, ir.Constant(I64, 1)
        if owner.attrs["step"] > 0:
            lo, hi = start.lo, b.ssub_with_overflow(stop.hi, one)
        else:
            lo, hi = b.sadd_with_overflow(stop.lo, one), start.hi
        over = b.extract_value(hi if owner.attrs["step"] > 0 else lo, 1)
        lo, hi = (lo, b.extract_value(hi, 0)) if owner.attrs["step"] > 0 else (b.extract_value(lo, 0), hi)
        valid = b.and_(b.and_(start.valid, stop.valid), b.not_(over))
        reached = b.and_(b.and_(start.reached, stop.reached), b.icmp_signed("<=", lo, hi))
        return _Bounds(lo, hi, valid, reached)


def _constant(v: Value):
    """The value of an index constant, else None."""
    return v.op.attrs["value"] if v.op is not None and v.op.opcode == "const" and v.type.is_int else None


def _untyped(pointer: ir.Value) -> ir.Value:
    """An alloca as a plain ``ptr`` (llvmlite types it; the module's pointers are opaque), so
    that it is indexed like a buffer, by element, with scalar or vector indices."""
    pointer.type = ir.PointerType()
    return pointer


def _vsuffix(ty: ir.VectorType) -> str:
    element = {"float": "f32", "half": "f16", "bfloat": "bf16", "double": "f64"}.get(str(ty.element))
    return f"v{ty.count}{element or f'i{ty.element.width}'}"


def lower_host(graph: Graph, target: HostTarget) -> LoweredModule:
    """Lower ``graph`` for the host: the launcher over units of work (see :class:`Chunking`)."""
    width = target.vector_width or host_vector_width()
    lw = SpmdLowering(graph, target, width)
    entry = lw.lower_launcher().name
    _, infallible = lw.lower_prepare()
    return LoweredModule(lw.module, entry, False, tuple(graph.body.walk()), HostPlan(lw.chunks, infallible))


@attrs.frozen
class HostPlan:
    """What the host runtime needs to know about a lowered launcher."""

    chunking: Chunking
    infallible: bool  # when the prepare entry says the launch fits, nothing can fail: run in place
