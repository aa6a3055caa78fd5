"""The llvm backend's native path for tile-level kernels (``for_each_tile``).

A program runs on one core.  Each tile it builds lives in a stack array of its static shape
(:mod:`.tile_access` decides which tiles are built at all and which share an array), and
each tile op is a loop over that array in vectors of ``L`` elements (the host's vector width
in 32-bit lanes), which LLVM's O3 pipeline keeps as SIMD code:

* pointwise ops and casts: one loop over the elements, each op lowered by the scalar op
  table (:data:`accy.codegen.llvm.LOWER`) on vectors, so every element rounds as the
  scalar op does, bit for bit (math functions are vecmath's routines, as on every host path);
* reductions and argreductions along the last axis: independent vector partials per row,
  combined at the end (a float max or min on order-preserving integer keys); along another
  axis, vectors across the axes after it; scans along the last axis: an in-vector prefix and a
  carry, across others: running vectors; a 2-D transpose by L x L blocks in registers;
* ``dot``: a register-blocked micro-kernel (``MR`` rows by ``NV`` vectors of the accumulator
  in registers over k, one broadcast of ``a`` and ``NV`` vector loads of ``b`` per k), column
  blocks outermost; the accumulator tile in memory between dots (in place where it dies);
* ``tile_load``/``tile_store`` whose offsets are affine with unit stride along the last axis
  (``rows[:, None] * stride + cols[None, :]``, ``load_tile``; a tensor's run-time stride is
  tested for 1): plain vector accesses where the mask's box covers the tile and its ends are
  in bounds, else one masked vector access per chunk of a row with the row's bounds checked
  once; other affine offsets: gathers; anything else: the offsets and mask tiles, element by
  element.

Checks: an active offset outside its buffer records the first failure in the status word
(the access is skipped) and the launch raises the llvm backend's OutOfBoundsError, writing
nothing.  A launch that reads no buffer it writes is checked whole before it runs, by
``prepare``'s check-only pass over every program (only what the checks need: offsets,
masks, the loads and divisions they depend on); when that finds nothing the launch runs on
the caller's arrays, else on scratch copies (:mod:`.host`) that are dropped on failure.

A launch's unit of work is one program, split over the thread pool by :mod:`.host`;
consecutive units walk a 2-D grid in groups of GROUP along its first axis.
"""

from __future__ import annotations

import math

import attrs
from llvmlite import ir

from ...dsl.ir import Graph, Op, Value
from ...dsl.ops import Combine, Precision
from ...dsl.types import DType, TileType
from ..abi import STATUS_LOAD_OOB, STATUS_STORE_OOB
from .chunking import Chunking, Chunks, host_vector_width, untyped
from ..llvm import LOWER, Lowering, LoweredModule, host_entry_name
from ..llvm_types import I1, I8, I32, I64, VOID, constant, intrinsic_suffix, llvm_type, memory_type
from .spmd import SpmdLowering
from ...targets import HostTarget
from ...lowering.tile_access import AccessPlan, Box, liveness, plan_accesses, plan_storage, tile_bytes

TILE_OPS_LOWERED = frozenset({"splat", "broadcast", "reshape", "trans", "arange", "reduce", "argreduce", "scan",
                              "dot", "tile_load", "tile_store", "tile_atomic"})
GROUP = 4  # programs along axis 0 that run together (see _decode)
REDUCE_UNROLL = 4  # independent partial vectors of a row reduction (hides the add's latency)


def _i64(x) -> ir.Value:
    return x if isinstance(x, ir.Value) else ir.Constant(I64, int(x))


class _Element:
    __slots__ = ("type",)

    def __init__(self, t: DType):
        self.type = t


class ElementOp:
    """An op seen element by element: operands and result typed by their element types, so
    the scalar op table lowers it on vectors of elements; ``real`` is the graph's op (for
    the status word)."""

    def __init__(self, opcode: str, operand_types, result_type: DType, real: Op, attrs_=None):
        self.opcode = opcode
        self.operands = tuple(_Element(t) for t in operand_types)
        self.results = (_Element(result_type),)
        self.attrs = attrs_
        self.real = real
        self.location = real.location

    @property
    def result(self):
        return self.results[0]


@attrs.frozen(eq=False)
class Tile:
    """A tile's stack array: ``ptr`` to its elements, row-major, bools as bytes."""

    ptr: ir.Value
    type: TileType

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def size(self) -> int:
        return self.type.size

    @property
    def mem(self) -> ir.Type:
        return memory_type(self.type.dtype)


_COMBINE_OPS = {Combine.SUM: "add", Combine.PROD: "mul", Combine.MAX: "max", Combine.MIN: "min",
                Combine.AND: "and", Combine.OR: "or", Combine.XOR: "xor"}


def _identity(combine: Combine, t: DType):
    if combine is Combine.SUM:
        return -0.0 if t.is_float else 0
    if combine is Combine.PROD:
        return 1.0 if t.is_float else 1
    if combine is Combine.MAX:
        return -math.inf if t.is_float else (0 if t.is_bool else t.min)
    if combine is Combine.MIN:
        return math.inf if t.is_float else t.max
    if combine is Combine.AND:
        return 1 if t.is_bool else -1
    return 0


def micro_kernel_shape(acc: DType, lanes: int) -> tuple[int, int]:
    """(MR rows, NV vectors) of the dot micro-kernel's register block: MR * NV accumulators,
    NV vectors of ``b`` and one broadcast of ``a`` fit the vector registers (32 with AVX-512,
    16 below), with enough independent FMAs in flight to cover their latency."""
    if lanes >= 16:
        return (8, 2) if acc.bits <= 32 else (4, 2)
    return (4, 2) if acc.bits <= 32 else (2, 2)


class TileHostLowering(Lowering):
    """Lowers a tile graph's programs for the host, ``lanes`` elements per vector."""

    math_function = SpmdLowering.math_function

    def __init__(self, graph: Graph, target: HostTarget, lanes: int):
        super().__init__(graph, target)
        self.L = lanes
        self.region = graph.launch_op.regions[0]
        self.region_ops = frozenset(self.region.walk())
        self.plans: dict[Op, AccessPlan] = plan_accesses(self.region)
        self.tiles: dict[Value, Tile] = {}
        self.slots: list[ir.Value] = []
        self.valid: ir.Value | None = None  # the lanes of a partial chunk (for a vector check)
        self.program: ir.Value | None = None
        self.lane_of = lambda: self.program if self.program is not None else ir.Constant(I64, 0)
        self.allocas: ir.IRBuilder | None = None
        # a launch that reads no buffer it writes can be checked whole before it runs (prepare's
        # check-only pass): then it runs on the caller's arrays, with no scratch copies
        self.check_pass = target.checks and not (graph.loaded_buffers() & graph.stored_buffers())
        self._mode(check_only=False)

    def _mode(self, check_only: bool) -> None:
        """Lower the full program, or only what its checks need (stores and atomics write nothing).
        Where prepare checks the launch whole, the launcher itself checks nothing: it runs only
        after that pass found no failure."""
        self.check_only = check_only
        self.live = liveness(self.region, self.plans, check_only)
        self.storage = plan_storage(self.region, self.live, self.L)
        self.unchecked = _EVERY_OP if self.check_pass and not check_only else frozenset()

    # -- entry points ---------------------------------------------------------------------
    def _entry(self, fn: ir.Function) -> ir.IRBuilder:
        """The function's stack arrays (in a first block, branched from at the end) and the
        kernel's top level, lowered once."""
        self.allocas = ir.IRBuilder(fn.append_basic_block("allocas"))
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.values.clear()
        self.tiles.clear()
        self.program = None
        self._bind_params(fn)
        self.slots = [self._stack_array(size) for size in self.storage.slot_bytes]
        self.lower_top_level()
        return self.b

    def _programs(self, begin: ir.Value, end: ir.Value) -> None:
        """Programs ``[begin, end)``, numbered with the first grid axis fastest."""
        b = self.b
        one = ir.Constant(I64, 1)
        extents = [b.select(b.icmp_signed(">", e, one), e, one) for e in self.extents]

        def program(unit, carries):
            pids = self._decode(unit, extents)
            linear, stride = ir.Constant(I64, 0), ir.Constant(I64, 1)  # the program's number in the messages
            for pid, extent in zip(pids, extents):
                linear = b.add(linear, b.mul(pid, stride))
                stride = b.mul(stride, extent)
            self.program = linear
            for arg, pid in zip(self.region.args, pids):
                self.values[arg] = pid
            self.lower_block(self.region)
            return []

        self._for(begin, end, program, name="program")

    def _decode(self, unit: ir.Value, extents: list[ir.Value]) -> list[ir.Value]:
        """The program a unit of work runs.  On a grid of two or more axes, consecutive units
        walk the first two in groups of GROUP along the first: one thread's programs then share
        the rows of one operand and the columns of the other (a matmul's panels stay in L2)."""
        b = self.b
        if len(extents) < 2 or GROUP <= 1:
            pids, rest = [], unit
            for extent in extents:
                pids.append(b.urem(rest, extent))
                rest = b.udiv(rest, extent)
            return pids
        e0, e1 = extents[:2]
        plane = b.mul(e0, e1)
        within, rest = b.urem(unit, plane), b.udiv(unit, plane)
        group = ir.Constant(I64, GROUP)
        per_group = b.mul(group, e1)
        first = b.mul(b.udiv(within, per_group), group)  # the group's first index along axis 0
        size = self.call("llvm.umin", [b.sub(e0, first), group])  # the last group may be short
        offset = b.urem(within, per_group)
        pids = [b.add(first, b.urem(offset, size)), b.udiv(offset, size)]
        for extent in extents[2:]:
            pids.append(b.urem(rest, extent))
            rest = b.udiv(rest, extent)
        return pids

    def lower_launcher(self) -> ir.Function:
        """``void name_host(<the ABI's parameters>, unit_begin, unit_end)``: programs
        ``[unit_begin, unit_end)``."""
        fn = ir.Function(self.module, ir.FunctionType(VOID, self._signature() + [I64, I64]),
                         host_entry_name(self.graph))
        self._mode(check_only=False)
        b = self._entry(fn)
        begin, end = fn.args[-2:]
        begin.name, end.name = "unit_begin", "unit_end"
        self._programs(begin, end)
        b.ret_void()
        self.allocas.branch(fn.blocks[1])
        return fn

    def lower_prepare(self) -> ir.Function:
        """``i1 name_prepare(<the ABI's parameters>, i64* extents)``: writes the extents and
        returns whether the launch cannot fail (so it may run on the caller's arrays): always
        without checks; with them, when the check-only pass over every program found nothing."""
        fn = ir.Function(self.module, ir.FunctionType(I1, self._signature() + [ir.PointerType()]),
                         f"{self.graph.name}_prepare")
        if self.check_pass:
            self._mode(check_only=True)
        b = self._entry(fn)
        out = fn.args[-1]
        out.name = "extents"
        for k, extent in enumerate(self.extents):
            b.store(extent, b.gep(out, [ir.Constant(I64, k)], source_etype=I64, inbounds=True))
        if not self.check_pass:
            b.ret(ir.Constant(I1, 0 if self.target.checks else 1))
        else:  # every program's checks, in program order, into the status word; unless the extents failed
            zero = ir.Constant(I64, 0)
            units = ir.Constant(I64, 1)
            for e in self.extents:
                units = b.mul(units, b.select(b.icmp_signed(">", e, zero), e, zero))
            failed = b.icmp_signed("!=", b.load(self.status, typ=I64), zero)
            self._programs(zero, b.select(failed, zero, units))
            b.ret(b.icmp_signed("==", b.load(self.status, typ=I64), zero))
        self.allocas.branch(fn.blocks[1])
        self._mode(check_only=False)
        return fn

    def _stack_array(self, size: int) -> ir.Value:
        slot = self.allocas.alloca(ir.ArrayType(I8, size))
        slot.align = 64
        return untyped(slot)

    # -- ops ------------------------------------------------------------------------------
    def lower_op(self, op: Op) -> None:
        code = op.opcode
        if code == "yield" or (op in self.region_ops and op not in self.live.ops):
            return  # nothing this run needs (a tile only an access's form reads, a check-only run's values)
        if code in ("fold", "if"):
            getattr(self, f"op_{code}")(op)
        elif self.check_only and code in ("store", "atomic"):
            if self.memory.checked(op):
                idx = self.value(op.operands[0])
                self.check(op, self.memory.within(op, idx), STATUS_STORE_OOB, idx)
        elif code in TILE_OPS_LOWERED:
            getattr(self, f"tile_{code}")(op)
        elif any(isinstance(r.type, TileType) for r in op.results):
            self.pointwise(op)
        else:
            super().lower_op(op)

    def tile(self, v: Value) -> Tile:
        return self.tiles[v]

    def _new(self, v: Value) -> Tile:
        """The array ``v`` is built in."""
        tile = Tile(self.slots[self.storage.slot_of[v]], v.type)
        self.tiles[v] = tile
        return tile

    def _temporary(self, t: TileType) -> Tile:
        return Tile(self._stack_array(tile_bytes(t, self.L)), t)

    # -- vectors, memory and loops ------------------------------------------------------------
    def _vec(self, ty: ir.Type, n: int | None = None) -> ir.VectorType:
        return ir.VectorType(ty, n or self.L)

    def _iota(self, n: int | None = None) -> ir.Constant:
        n = n or self.L
        return ir.Constant(self._vec(I64, n), [ir.Constant(I64, k) for k in range(n)])

    def _below(self, count: int) -> ir.Constant:
        """The lanes ``< count`` of a vector, as a constant mask."""
        return ir.Constant(self._vec(I1), [ir.Constant(I1, int(k < count)) for k in range(self.L)])

    def _splat(self, x: ir.Value, n: int | None = None) -> ir.Value:
        n = n or self.L
        if isinstance(x, ir.Constant) and not isinstance(x.type, ir.VectorType):
            return ir.Constant(self._vec(x.type, n), [x] * n)
        one = self.b.insert_element(ir.Constant(self._vec(x.type, n), None), x, ir.Constant(I32, 0))
        return self.b.shuffle_vector(one, ir.Constant(one.type, None), ir.Constant(self._vec(I32, n), None))

    def _lane(self, v: ir.Value, k) -> ir.Value:
        return self.b.extract_element(v, ir.Constant(I32, k) if isinstance(k, int) else k)

    def _at(self, tile: Tile, idx) -> ir.Value:
        return self.b.gep(tile.ptr, [_i64(idx)], source_etype=tile.mem)

    def _from_memory(self, v: ir.Value, dtype: DType) -> ir.Value:
        return self.b.trunc(v, self._vec(I1, v.type.count) if isinstance(v.type, ir.VectorType) else I1) \
            if dtype.is_bool else v

    def _to_memory(self, v: ir.Value, dtype: DType) -> ir.Value:
        return self.b.zext(v, self._vec(I8, v.type.count) if isinstance(v.type, ir.VectorType) else I8) \
            if dtype.is_bool else v

    def _intrinsic(self, name: str, ret: ir.Type, args) -> ir.Value:
        return self.b.call(self.declare(name, ret, [a.type for a in args]), list(args))

    def _masked_load(self, ptr: ir.Value, mask: ir.Value, passthru: ir.Value, align: int) -> ir.Value:
        ty = passthru.type
        return self._intrinsic(f"llvm.masked.load.{intrinsic_suffix(ty)}.p0", ty,
                               [ptr, ir.Constant(I32, align), mask, passthru])

    def _masked_store(self, value: ir.Value, ptr: ir.Value, mask: ir.Value, align: int) -> None:
        self._intrinsic(f"llvm.masked.store.{intrinsic_suffix(value.type)}.p0", VOID,
                        [value, ptr, ir.Constant(I32, align), mask])

    def _addresses(self, base: ir.Value, etype: ir.Type, offsets: ir.Value) -> ir.Value:
        pointers = self.b.gep(base, [offsets], source_etype=etype)
        pointers.type = self._vec(pointers.type, offsets.type.count)  # llvmlite types a vector GEP as one pointer
        return pointers

    def _gather(self, pointers: ir.Value, mask: ir.Value, passthru: ir.Value, align: int) -> ir.Value:
        ty = passthru.type
        return self._intrinsic(f"llvm.masked.gather.{intrinsic_suffix(ty)}.v{ty.count}p0", ty,
                               [pointers, ir.Constant(I32, align), mask, passthru])

    def _scatter(self, value: ir.Value, pointers: ir.Value, mask: ir.Value, align: int) -> None:
        self._intrinsic(f"llvm.masked.scatter.{intrinsic_suffix(value.type)}.v{value.type.count}p0", VOID,
                        [value, pointers, ir.Constant(I32, align), mask])

    def _load(self, tile: Tile, idx, mask: ir.Value | None = None, n: int | None = None) -> ir.Value:
        """``n`` (default ``L``) elements of ``tile`` from ``idx``; ``mask``: zeros elsewhere."""
        ty = self._vec(tile.mem, n)
        ptr = self._at(tile, idx)
        if mask is None:
            v = self.b.load(ptr, typ=ty, align=tile.dtype.itemsize)
        else:
            v = self._masked_load(ptr, mask, ir.Constant(ty, [ir.Constant(tile.mem, 0)] * ty.count),
                                  tile.dtype.itemsize)
        return self._from_memory(v, tile.dtype)

    def _store(self, tile: Tile, idx, v: ir.Value, mask: ir.Value | None = None) -> None:
        v = self._to_memory(v, tile.dtype)
        if mask is None:
            self.b.store(v, self._at(tile, idx), align=tile.dtype.itemsize)
        else:
            self._masked_store(v, self._at(tile, idx), mask, tile.dtype.itemsize)

    def _load1(self, tile: Tile, idx) -> ir.Value:
        return self._from_memory(self.b.load(self._at(tile, idx), typ=tile.mem, align=tile.dtype.itemsize), tile.dtype)

    def _store1(self, tile: Tile, idx, v: ir.Value) -> None:
        self.b.store(self._to_memory(v, tile.dtype), self._at(tile, idx), align=tile.dtype.itemsize)

    def _for(self, lo, hi, body, carries=(), *, step: int = 1, name: str = "t") -> list[ir.Value]:
        """``for i in range(lo, hi, step)``: ``carries = body(i, carries)``; returns the last."""
        b = self.b
        carries = list(carries)
        if not isinstance(lo, ir.Value) and not isinstance(hi, ir.Value):
            if hi <= lo:
                return carries
            if hi - lo <= step:  # one trip: no loop
                return list(body(_i64(lo), carries))
        lo, hi = _i64(lo), _i64(hi)
        pre = b.block
        head, loop, done = (b.append_basic_block(f"{name}_{n}") for n in ("head", "body", "done"))
        b.branch(head)
        b.position_at_end(head)
        iv = b.phi(I64, name=name)
        iv.add_incoming(lo, pre)
        phis = []
        for c in carries:
            phi = b.phi(c.type)
            phi.add_incoming(c, pre)
            phis.append(phi)
        b.cbranch(b.icmp_signed("<", iv, hi), loop, done)
        b.position_at_end(loop)
        new = list(body(iv, phis))
        latch = b.block
        iv.add_incoming(b.add(iv, ir.Constant(I64, step)), latch)
        for phi, value in zip(phis, new):
            phi.add_incoming(value, latch)
        b.branch(head)
        b.position_at_end(done)
        return phis

    def _chunks(self, n: int, body, carries=()) -> list[ir.Value]:
        """``body(j, valid, carries)`` for each chunk of ``L`` of ``n`` elements (``j`` its first;
        ``valid`` None for a whole chunk, else the constant mask of the last one's lanes)."""
        full, rest = divmod(n, self.L)
        carries = list(carries)
        if full:
            width = ir.Constant(I64, self.L)
            carries = self._for(0, full, lambda k, cs: body(self.b.mul(k, width), None, cs), carries, name="chunk")
        if rest:
            carries = list(body(ir.Constant(I64, full * self.L), self._below(rest), carries))
        return carries

    def _rows(self, outer: tuple[int, ...], body, name: str = "row") -> None:
        """``body(r, idx)`` for each row ``r`` of a tile whose axes before the last are ``outer``
        (``idx``: the row's position along each of them)."""
        b = self.b

        def row(r, carries):
            idx, rest = [], r
            for extent in reversed(outer):
                idx.append(b.urem(rest, ir.Constant(I64, extent)) if extent > 1 else ir.Constant(I64, 0))
                rest = b.udiv(rest, ir.Constant(I64, extent)) if extent > 1 else rest
            body(r, idx[::-1])
            return []

        self._for(0, math.prod(outer), row, name=name)

    def _copy(self, dst: Tile, src: Tile) -> None:
        if dst.ptr is src.ptr:
            return
        self._chunks(src.size, lambda j, valid, cs: (self._store(dst, j, self._load(src, j)), [])[1])

    # -- checks ---------------------------------------------------------------------------
    def check(self, op, ok: ir.Value, kind: int, detail: ir.Value) -> None:
        if not isinstance(ok.type, ir.VectorType):
            super().check(op, ok, kind, detail)
            return
        bad = self.b.not_(ok)
        if self.valid is not None:
            bad = self.b.and_(bad, self.valid)
        self._fail_lanes(op, bad, detail, kind)

    def _fail_lanes(self, op, bad: ir.Value, detail: ir.Value, kind: int) -> None:
        n = bad.type.count
        bits = self.b.bitcast(bad, ir.IntType(n))

        def report():
            first = self.call("llvm.cttz", [bits, ir.Constant(I1, 0)])
            return self.b.extract_element(detail, first), self.lane()

        self.fail_if(op, self.b.icmp_unsigned("!=", bits, ir.Constant(bits.type, 0)), kind, report)

    def fail_if(self, op, bad: ir.Value, kind: int, report) -> None:
        super().fail_if(getattr(op, "real", op), bad, kind, report)

    # -- pointwise ---------------------------------------------------------------------------
    def pointwise(self, op: Op) -> None:
        out = self._new(op.result)
        ins = [self.tile(v) for v in op.operands]
        element = ElementOp(op.opcode, [t.dtype for t in ins], out.dtype, op, op.attrs)
        lower = LOWER[op.opcode]

        def chunk(j, valid, carries):
            args = [self._load(t, j, valid) for t in ins]
            self.valid = valid
            self._store(out, j, lower(self, element, args))
            self.valid = None
            return []

        self._chunks(out.size, chunk)

    def _combiner(self, combine: Combine, t: DType, real: Op):
        name = _COMBINE_OPS[combine]
        element = ElementOp(name, (t, t), t, real)
        return lambda a, b: LOWER[name](self, element, [a, b])

    # -- shapes -------------------------------------------------------------------------------
    def tile_splat(self, op: Op) -> None:
        out = self._new(op.result)
        v = self._splat(self.value(op.operands[0]))
        self._chunks(out.size, lambda j, valid, cs: (self._store(out, j, v), [])[1])

    def tile_arange(self, op: Op) -> None:
        out = self._new(op.result)
        self._chunks(out.size, lambda j, valid, cs: (self._store(out, j, self.b.add(self._splat(j), self._iota())), [])[1])

    def tile_reshape(self, op: Op) -> None:
        self.tiles[op.result] = Tile(self.tile(op.operands[0]).ptr, op.result.type)

    def tile_broadcast(self, op: Op) -> None:
        src = self.tile(op.operands[0])
        out = self._new(op.result)
        shape, n = out.shape, out.shape[-1]
        strides = _strides(src.shape)
        b = self.b

        def row(r, idx):
            offset = ir.Constant(I64, 0)
            for d, i in enumerate(idx):
                if src.shape[d] == shape[d] and src.shape[d] > 1:
                    offset = b.add(offset, b.mul(i, ir.Constant(I64, strides[d])))
            first = b.mul(r, ir.Constant(I64, n))
            if src.shape[-1] == n:
                self._chunks(n, lambda j, valid, cs: (self._store(out, b.add(first, j), self._load(src, b.add(offset, j))), [])[1])
            else:
                v = self._splat(self._load1(src, offset))
                self._chunks(n, lambda j, valid, cs: (self._store(out, b.add(first, j), v), [])[1])

        self._rows(shape[:-1], row)

    def _transpose_block(self, rows: list[ir.Value]) -> list[ir.Value]:
        """The transpose of an L x L block held as L row vectors: the off-diagonal halves of
        ever smaller square blocks swapped, each step one two-vector shuffle per row."""
        b = self.b
        L = len(rows)
        v = list(rows)
        h = L // 2
        while h:
            for i in range(L):
                if i & h:
                    continue
                top, bottom = v[i], v[i + h]
                mask_top = [k if not k & h else L + k - h for k in range(L)]
                mask_bottom = [k + h if not k & h else L + k for k in range(L)]
                v[i] = b.shuffle_vector(top, bottom, ir.Constant(self._vec(I32), mask_top))
                v[i + h] = b.shuffle_vector(top, bottom, ir.Constant(self._vec(I32), mask_bottom))
            h //= 2
        return v

    def tile_trans(self, op: Op) -> None:
        src = self.tile(op.operands[0])
        out = self._new(op.result)
        perm = op.attrs.perm
        L = self.L
        if perm == (1, 0) and src.shape[0] % L == 0 and src.shape[1] % L == 0:  # by L x L blocks in registers
            R, C = src.shape
            b = self.b

            def block(rb, cb):
                r0, c0 = b.mul(rb, ir.Constant(I64, L)), b.mul(cb, ir.Constant(I64, L))
                rows = [self._load(src, b.add(b.mul(b.add(r0, ir.Constant(I64, i)), ir.Constant(I64, C)), c0))
                        for i in range(L)]
                for j, column in enumerate(self._transpose_block(rows)):
                    self._store(out, b.add(b.mul(b.add(c0, ir.Constant(I64, j)), ir.Constant(I64, R)), r0), column)

            self._for(0, R // L, lambda rb, cs: (self._for(0, C // L, lambda cb, cs: (block(rb, cb), [])[1],
                                                           name="trans_c"), [])[1], name="trans_r")
            return
        strides = _strides(src.shape)
        along = [strides[p] for p in perm]  # the source stride of each result axis
        n = out.shape[-1]
        b = self.b
        all_lanes = self._below(self.L)

        def row(r, idx):
            offset = ir.Constant(I64, 0)
            for d, i in enumerate(idx):
                offset = b.add(offset, b.mul(i, ir.Constant(I64, along[d])))
            first = b.mul(r, ir.Constant(I64, n))

            def chunk(j, valid, cs):
                at = b.add(self._splat(b.add(offset, b.mul(j, ir.Constant(I64, along[-1])))),
                           b.mul(self._iota(), self._splat(ir.Constant(I64, along[-1]))))
                passthru = ir.Constant(self._vec(src.mem), [ir.Constant(src.mem, 0)] * self.L)
                v = self._gather(self._addresses(src.ptr, src.mem, at), valid or all_lanes, passthru, src.dtype.itemsize)
                self._store(out, b.add(first, j), self._from_memory(v, src.dtype))
                return []

            self._chunks(n, chunk)

        self._rows(out.shape[:-1], row)

    # -- reductions and scans -------------------------------------------------------------------
    def _axis_view(self, shape: tuple[int, ...], axis: int) -> tuple[int, int, int]:
        return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])

    def _widen(self, v: ir.Value, t: DType) -> ir.Value:
        return self.numerics.widen(v, t) if t.is_narrow else v

    def _result(self, op: Op, value: ir.Value, at) -> None:
        """Store one element of a reduction's result (or set it, when it is a scalar)."""
        if isinstance(op.result.type, TileType):
            self._store1(self.tiles[op.result], at, value)
        else:
            self.values[op.result] = value

    def tile_reduce(self, op: Op) -> None:
        x = self.tile(op.operands[0])
        combine, axis = op.attrs.op, op.attrs.axis
        t = x.dtype
        acc_t = t.compute if t.is_narrow else t
        comb = self._combiner(combine, acc_t, op)
        if isinstance(op.result.type, TileType):
            self._new(op.result)
        A, R, B = self._axis_view(x.shape, axis)
        b = self.b
        identity = constant(self._vec(llvm_type(acc_t)), _identity(combine, acc_t))
        finish = (lambda v: self.numerics.narrow(v, t)) if t.is_narrow else (lambda v: v)  # rounded once, at the end
        if B == 1:
            keyed = acc_t.is_float and combine in (Combine.MAX, Combine.MIN)
            if keyed:  # float max/min as integer max/min of order-preserving keys (see _float_key)
                bits = ir.IntType(acc_t.bits)
                start_state = [constant(self._vec(bits), -(1 << (acc_t.bits - 1))),
                               constant(self._vec(bits), (1 << (acc_t.bits - 1)) - 1)]

                def take(v):
                    key = self._float_key(v)
                    return [key, key]

                def merge(s1, s2):
                    return [self.call("llvm.smax", [s1[0], s2[0]]), self.call("llvm.smin", [s1[1], s2[1]])]

                def result(state):
                    high = self.call("llvm.vector.reduce.smax", [state[0]], ty=bits)
                    low = self.call("llvm.vector.reduce.smin", [state[1]], ty=bits)
                    return self._keyed_extremum(high, low, acc_t, combine)
            else:
                start_state = [identity]

                def take(v):
                    return [v]

                def merge(s1, s2):
                    return [comb(s1[0], s2[0])]

                def result(state):
                    return self._horizontal(state[0], comb)
            width = len(start_state)

            def row(a, cs):
                first = b.mul(a, ir.Constant(I64, R))
                unroll = REDUCE_UNROLL if R >= REDUCE_UNROLL * 2 * self.L else 1
                step = unroll * self.L
                groups = R // step

                def group(g, accs):
                    begin = b.add(first, b.mul(g, ir.Constant(I64, step)))
                    out = []
                    for k in range(unroll):
                        v = self._widen(self._load(x, b.add(begin, ir.Constant(I64, k * self.L))), t)
                        out += merge(accs[k * width:(k + 1) * width], take(v))
                    return out

                accs = self._for(0, groups, group, start_state * unroll, name="reduce")
                state = accs[:width]
                for k in range(1, unroll):
                    state = merge(state, accs[k * width:(k + 1) * width])
                done = groups * step

                def chunk(j, valid, cs):
                    v = self._widen(self._load(x, b.add(first, b.add(j, ir.Constant(I64, done)))), t)
                    if valid is not None:
                        v = b.select(valid, v, identity)
                    return merge(cs, take(v))

                state = self._chunks(R - done, chunk, state)
                self._result(op, finish(result(state)), a)
                return []

            self._for(0, A, row, name="reduce_row")
            return

        def block(a, cs):
            base = b.mul(a, ir.Constant(I64, R * B))

            def chunk(j, valid, cs):
                start = b.add(base, j)
                acc = self._widen(self._load(x, start), t)
                acc, = self._for(1, R, lambda r, cs: [comb(cs[0], self._widen(
                    self._load(x, b.add(start, b.mul(r, ir.Constant(I64, B)))), t))], [acc], name="reduce_axis")
                self._store(self.tiles[op.result], b.add(b.mul(a, ir.Constant(I64, B)), j), finish(acc))
                return []

            self._chunks(B, chunk)
            return []

        self._for(0, A, block, name="reduce_block")

    def _float_key(self, v: ir.Value) -> ir.Value:
        """An integer per float whose signed order is the float order with -0 < +0; NaNs sort
        above +inf (sign clear) or below -inf (sign set)."""
        b = self.b
        n = v.type.element.width if isinstance(v.type.element, ir.IntType) else {"float": 32, "double": 64}[str(v.type.element)]
        bits = b.bitcast(v, self._vec(ir.IntType(n), v.type.count))
        flip = b.lshr(b.ashr(bits, constant(bits, n - 1)), constant(bits, 1))  # all but the sign, where negative
        return b.xor(bits, flip)

    def _keyed_extremum(self, high: ir.Value, low: ir.Value, t: DType, combine: Combine) -> ir.Value:
        """The max (min) of float keys ``high`` (``low``): the largest (smallest) key, or a quiet NaN
        where either end holds one, as the scalar max (min) propagates NaNs."""
        b = self.b
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

    def _horizontal(self, v: ir.Value, comb) -> ir.Value:
        """The combine of a vector's lanes (halves combined until one lane is left)."""
        b = self.b
        n = v.type.count
        while n > 1:
            h = n // 2
            lo = b.shuffle_vector(v, v, ir.Constant(self._vec(I32, h), list(range(h))))
            hi = b.shuffle_vector(v, v, ir.Constant(self._vec(I32, h), list(range(h, n))))
            v, n = comb(lo, hi), h
        return self._lane(v, 0)

    def _better(self, t: DType, combine: Combine, x: ir.Value, best: ir.Value) -> ir.Value:
        """Where ``x`` beats ``best`` for an arg reduction (strictly; a NaN beats a number)."""
        b = self.b
        name = ">" if combine is Combine.MAX else "<"
        if t.is_float:  # greater (less), or unordered -- x a NaN -- unless best already is one
            return b.and_(b.fcmp_unordered(name, x, best), b.fcmp_ordered("ord", best, best))
        return (b.icmp_unsigned if t.is_unsigned else b.icmp_signed)(name, x, best)

    def _tie(self, t: DType, x: ir.Value, y: ir.Value) -> ir.Value:
        b = self.b
        if t.is_float:
            return b.or_(b.fcmp_ordered("==", x, y), b.and_(b.fcmp_unordered("uno", x, x), b.fcmp_unordered("uno", y, y)))
        return b.icmp_unsigned("==", x, y)

    def _arg_finish(self, t: DType, combine: Combine, bests: list, ats: list) -> ir.Value:
        """The position an arg reduction picks from per-lane candidates (``bests`` and their
        positions ``ats``, i32): the best value over every lane (keyed for floats), then the
        lowest position holding it -- or holding a NaN, if any lane holds one."""
        b = self.b
        high = combine is Combine.MAX
        if t.is_float:
            keys = [self._float_key(v) for v in bests]
            name = "smax" if high else "smin"
        else:
            keys = bests
            name = ("umax" if high else "umin") if t.is_unsigned else ("smax" if high else "smin")
        key = keys[0]
        for other in keys[1:]:
            key = self.call(f"llvm.{name}", [key, other])
        best = self.call(f"llvm.vector.reduce.{name}", [key], ty=key.type.element)
        if t.is_float:
            nans = [b.fcmp_unordered("uno", v, v) for v in bests]
            anywhere = nans[0]
            for other in nans[1:]:
                anywhere = b.or_(anywhere, other)
            anywhere = self.call("llvm.vector.reduce.or", [anywhere], ty=I1)
            value = b.bitcast(b.xor(best, b.lshr(b.ashr(best, ir.Constant(best.type, t.bits - 1)),
                                                 ir.Constant(best.type, 1))), llvm_type(t))
            chosen = [b.select(anywhere, nan, b.fcmp_ordered("==", v, self._splat(value)))
                      for v, nan in zip(bests, nans)]  # -0 and +0 tie, as NumPy's compare has them
        else:
            chosen = [b.icmp_unsigned("==", v, self._splat(best)) for v in bests]
        none = self._splat(ir.Constant(I32, 2**31 - 1))
        at = None
        for where, c in zip(ats, chosen):
            here = b.select(c, where, none)
            at = here if at is None else self.call("llvm.smin", [at, here])
        return self.call("llvm.vector.reduce.smin", [at], ty=I32)

    def tile_argreduce(self, op: Op) -> None:
        x = self.tile(op.operands[0])
        combine, axis = op.attrs.op, op.attrs.axis
        t = x.dtype
        ct = t.compute if t.is_narrow else t
        if isinstance(op.result.type, TileType):
            self._new(op.result)
        A, R, B = self._axis_view(x.shape, axis)
        b = self.b
        if B == 1:
            # positions as i32 (a tile row has at most 16384): half the vector work of i64
            iota = ir.Constant(self._vec(I32), [ir.Constant(I32, k) for k in range(self.L)])
            unroll = REDUCE_UNROLL if R >= REDUCE_UNROLL * 2 * self.L else 1  # independent chains of compares
            step = unroll * self.L

            def row(a, cs):
                first = b.mul(a, ir.Constant(I64, R))
                v0 = self._widen(self._load(x, first), t)
                if R < self.L:  # lanes past the row repeat element 0 at position 0: they never win
                    valid = self._below(R)
                    v0 = b.select(valid, v0, self._splat(self._lane(v0, 0)))
                    i0 = b.select(valid, iota, self._splat(ir.Constant(I32, 0)))
                else:
                    i0 = iota
                start = [v0] + [self._widen(self._load(x, b.add(first, ir.Constant(I64, u * self.L))), t)
                                for u in range(1, unroll)]
                at0 = [i0] + [b.add(iota, self._splat(ir.Constant(I32, u * self.L))) for u in range(1, unroll)]

                def group(g, cs):
                    out = []
                    for u in range(unroll):
                        j = b.add(b.mul(g, ir.Constant(I64, step)), ir.Constant(I64, u * self.L))
                        v = self._widen(self._load(x, b.add(first, j)), t)
                        wins = self._better(ct, combine, v, cs[u])
                        out.append(b.select(wins, v, cs[u]))
                        out.append(b.select(wins, b.add(self._splat(b.trunc(j, I32)), iota), cs[unroll + u]))
                    return out[0::2] + out[1::2]

                groups = R // step if unroll > 1 else 1
                carried = self._for(1, groups, group, start + at0, name="argreduce")
                done = groups * step

                def chunk(j, valid, cs):
                    best, at = cs
                    j = b.add(j, ir.Constant(I64, done))
                    v = self._widen(self._load(x, b.add(first, j)), t)
                    wins = self._better(ct, combine, v, best)
                    if valid is not None:
                        wins = b.and_(wins, valid)
                    return [b.select(wins, v, best), b.select(wins, b.add(self._splat(b.trunc(j, I32)), iota), at)]

                best, at = self._chunks(max(R - done, 0), chunk, [carried[0], carried[unroll]])
                bests, ats = [best] + carried[1:unroll], [at] + carried[unroll + 1:]
                self._result(op, b.sext(self._arg_finish(ct, combine, bests, ats), I64), a)
                return []

            self._for(0, A, row, name="argreduce_row")
            return

        def block(a, cs):
            base = b.mul(a, ir.Constant(I64, R * B))

            def chunk(j, valid, cs):
                start = b.add(base, j)
                best = self._widen(self._load(x, start), t)

                def step(r, cs):
                    best, at = cs
                    v = self._widen(self._load(x, b.add(start, b.mul(r, ir.Constant(I64, B)))), t)
                    wins = self._better(ct, combine, v, best)
                    return [b.select(wins, v, best), b.select(wins, self._splat(r), at)]

                _, at = self._for(1, R, step, [best, self._splat(ir.Constant(I64, 0))], name="argreduce_axis")
                self._store(self.tiles[op.result], b.add(b.mul(a, ir.Constant(I64, B)), j), at)
                return []

            self._chunks(B, chunk)
            return []

        self._for(0, A, block, name="argreduce_block")

    def tile_scan(self, op: Op) -> None:
        x = self.tile(op.operands[0])
        out = self._new(op.result)
        combine, axis = op.attrs.op, op.attrs.axis
        t = x.dtype
        acc_t = t.compute if t.is_narrow else t
        comb = self._combiner(combine, acc_t, op)
        finish = (lambda v: self.numerics.narrow(v, t)) if t.is_narrow else (lambda v: v)
        A, R, B = self._axis_view(x.shape, axis)
        b = self.b
        L = self.L
        identity = constant(self._vec(llvm_type(acc_t)), _identity(combine, acc_t))
        if B == 1:
            def row(a, cs):
                first = b.mul(a, ir.Constant(I64, R))

                def chunk(j, valid, cs):
                    (carry,) = cs
                    v = self._widen(self._load(x, b.add(first, j)), t)
                    s = 1
                    while s < L:  # in-vector inclusive prefix: lane k combines lanes k-s..k
                        shifted = b.shuffle_vector(v, identity, ir.Constant(self._vec(I32), [
                            k - s if k >= s else L + k for k in range(L)]))
                        v, s = comb(shifted, v), 2 * s
                    v = comb(carry, v)
                    self._store(out, b.add(first, j), finish(v))
                    return [b.shuffle_vector(v, v, ir.Constant(self._vec(I32), [L - 1] * L))]

                self._chunks(R, chunk, [identity])
                return []

            self._for(0, A, row, name="scan_row")
            return

        def block(a, cs):
            base = b.mul(a, ir.Constant(I64, R * B))

            # A line's last chunk (``valid`` set) spans the start of the next line, which an
            # earlier chunk has already written: its stores keep to its own lanes.
            def chunk(j, valid, cs):
                start = b.add(base, j)
                acc = self._widen(self._load(x, start), t)
                self._store(out, start, finish(acc), valid)

                def step(r, cs):
                    at = b.add(start, b.mul(r, ir.Constant(I64, B)))
                    acc = comb(cs[0], self._widen(self._load(x, at), t))
                    self._store(out, at, finish(acc), valid)
                    return [acc]

                self._for(1, R, step, [acc], name="scan_axis")
                return []

            self._chunks(B, chunk)
            return []

        self._for(0, A, block, name="scan_block")

    # -- dot ----------------------------------------------------------------------------------
    def _dot_input(self, tile: Tile, acc_t: DType, tf32: bool) -> Tile:
        """``tile`` converted to the accumulator's type (and rounded to tf32), in a temporary."""
        if tile.dtype == acc_t and not tf32:
            return tile
        out = self._temporary(tile.type.with_dtype(acc_t))
        b = self.b

        def chunk(j, valid, cs):
            v = self.numerics.convert(self._load(tile, j), tile.dtype, acc_t)
            if tf32:
                bits = b.bitcast(v, self._vec(I32))
                finite = b.icmp_unsigned("!=", b.and_(bits, constant(bits, 0x7F800000)), constant(bits, 0x7F800000))
                rounded = b.and_(b.add(bits, constant(bits, 0x1000)), constant(bits, -0x2000))
                v = b.bitcast(b.select(finite, rounded, bits), v.type)
            self._store(out, j, v)
            return []

        self._chunks(tile.size, chunk)
        return out

    def tile_dot(self, op: Op) -> None:
        a_tile, b_tile, acc = (self.tile(v) for v in op.operands)
        out = self._new(op.result)
        acc_t = out.dtype
        tf32 = op.attrs.precision is Precision.TF32
        a_tile = self._dot_input(a_tile, acc_t, tf32)
        b_tile = self._dot_input(b_tile, acc_t, tf32)
        M, K = a_tile.shape
        N = b_tile.shape[1]
        lanes = max(1, self.L * 32 // acc_t.bits)  # one vector register of the accumulator's type
        mr, nv = micro_kernel_shape(acc_t, self.L)
        nr = nv * lanes
        b = self.b

        def block(i0, j0, rows: int, vectors: int, last: int) -> None:
            """Rows ``i0 .. i0+rows`` by ``vectors`` vectors from column ``j0``; the last vector
            holds ``last`` columns."""
            tail = None if last == lanes else ir.Constant(self._vec(I1, lanes), [ir.Constant(I1, int(k < last))
                                                                                 for k in range(lanes)])
            masks = [None] * (vectors - 1) + [tail]
            where = [[b.add(b.mul(b.add(i0, ir.Constant(I64, i)), ir.Constant(I64, N)),
                            b.add(j0, ir.Constant(I64, v * lanes))) for v in range(vectors)] for i in range(rows)]
            c = [self._load(acc, where[i][v], masks[v], n=lanes) for i in range(rows) for v in range(vectors)]

            def step(k, cs):
                row_b = b.mul(k, ir.Constant(I64, N))
                bs = [self._load(b_tile, b.add(row_b, b.add(j0, ir.Constant(I64, v * lanes))), masks[v], n=lanes)
                      for v in range(vectors)]
                new = []
                for i in range(rows):
                    a_ik = self._splat(self._load1(a_tile, b.add(b.mul(b.add(i0, ir.Constant(I64, i)), ir.Constant(I64, K)), k)),
                                       lanes)
                    for v in range(vectors):
                        acc_v = cs[i * vectors + v]
                        if acc_t.is_float:
                            new.append(self.call("llvm.fma", [a_ik, bs[v], acc_v]))
                        else:
                            new.append(b.add(acc_v, b.mul(a_ik, bs[v])))
                return new

            pair = ir.Constant(I64, 2)  # two k per trip: the loop's own instructions are a tenth of a pair's
            c = self._for(0, K // 2, lambda kk, cs: step(b.add(b.mul(kk, pair), ir.Constant(I64, 1)),
                                                      step(b.mul(kk, pair), cs)), c, name="dot_k")
            if K % 2:
                c = step(ir.Constant(I64, K - 1), c)
            for i in range(rows):
                for v in range(vectors):
                    self._store(out, where[i][v], c[i * vectors + v], masks[v])

        full_cols, rest_cols = divmod(N, nr)
        column_blocks = []  # (first column, vectors, columns in the last vector)
        if full_cols:
            column_blocks.append((None, nv, lanes))
        if rest_cols:
            column_blocks.append((full_cols * nr, -(-rest_cols // lanes), rest_cols - (-(-rest_cols // lanes) - 1) * lanes))
        full_rows, rest_rows = divmod(M, mr)

        def column_block(j0, vectors, last):
            """One block of columns down every row: its panel of ``b`` stays in L1 while ``a``
            streams past (``a`` is read as broadcasts; ``b`` as whole vectors)."""
            if full_rows:
                self._for(0, full_rows, lambda ib, cs: (block(b.mul(ib, ir.Constant(I64, mr)), j0, mr, vectors, last),
                                                        [])[1], name="dot_i")
            if rest_rows:
                block(ir.Constant(I64, full_rows * mr), j0, rest_rows, vectors, last)

        for first, vectors, last in column_blocks:
            if first is None:
                self._for(0, full_cols, lambda jb, cs: (column_block(b.mul(jb, ir.Constant(I64, nr)), nv, lanes), [])[1],
                          name="dot_j")
            else:
                column_block(ir.Constant(I64, first), vectors, last)

    # -- memory -------------------------------------------------------------------------------
    def _expr(self, e) -> ir.Value:
        """An access form's scalar expression."""
        if isinstance(e, int):
            return ir.Constant(I64, e)
        if isinstance(e, tuple):
            kind, x, y = e
            return (self.b.add if kind == "add" else self.b.mul)(self._expr(x), self._expr(y))
        return self.value(e)

    def _box_ranges(self, box: Box, shape: tuple[int, ...]):
        """Each axis's [lo, hi) (clamped to the tile) and the i1 of the conditions that do not
        depend on the position."""
        b = self.b
        zero = ir.Constant(I64, 0)
        ranges = []
        for d, n in enumerate(shape):
            lo, hi = zero, ir.Constant(I64, n)
            for e in box.lows[d]:
                lo = self.call("llvm.smax", [lo, self._expr(e)])
            for e in box.highs[d]:
                hi = self.call("llvm.smin", [hi, self._expr(e)])
            ranges.append((lo, hi))
        uniform = ir.Constant(I1, 1)
        for e in box.zero_lows:
            uniform = b.and_(uniform, b.icmp_signed("<=", self._expr(e), zero))
        for e in box.zero_highs:
            uniform = b.and_(uniform, b.icmp_signed(">", self._expr(e), zero))
        for v in box.flags:
            uniform = b.and_(uniform, self.value(v))
        return ranges, uniform

    def _access(self, op: Op, value: Tile | None, out: Tile | None, other: ir.Value | None) -> None:
        """A tile_load (into ``out``, ``other`` where masked off) or tile_store (of ``value``) by
        its plan: row by row from the affine offsets, else element by element."""
        plan = self.plans[op]
        kind = STATUS_LOAD_OOB if op.opcode == "tile_load" else STATUS_STORE_OOB
        if plan.offsets is None:
            self._access_elements(op, value, out, other, kind)
        else:
            self._access_rows(op, plan, value, out, other, kind)

    def _buffer(self, op: Op):
        name, dtype = op.attrs.buffer, op.attrs.dtype
        return self.pointers[name], self.counts[name], memory_type(dtype), dtype

    def _access_elements(self, op: Op, value, out, other, kind) -> None:
        offsets, mask = self.tile(op.operands[0]), self.tile(op.operands[-1])
        ptr, count, mem, dtype = self._buffer(op)
        b = self.b
        checks = self.memory.checked(op)
        passthru = self._splat(self._to_memory(other, dtype)) if other is not None else None

        def chunk(j, valid, cs):
            at = self._load(offsets, j)
            m = self._load(mask, j)
            if valid is not None:
                m = b.and_(m, valid)
            if checks:
                ok = b.icmp_unsigned("<", at, self._splat(count))
                self._fail_lanes(op, b.and_(m, b.not_(ok)), at, kind)
                m = b.and_(m, ok)
            pointers = self._addresses(ptr, mem, at)
            if out is not None:
                self._store(out, j, self._from_memory(self._gather(pointers, m, passthru, dtype.itemsize), dtype))
            elif value is not None:
                self._scatter(self._to_memory(self._load(value, j), dtype), pointers, m, dtype.itemsize)
            return []

        self._chunks(offsets.size, chunk)

    def _access_rows(self, op: Op, plan: AccessPlan, value, out, other, kind) -> None:
        shape = op.operands[0].type.shape
        n = shape[-1]
        ptr, count, mem, dtype = self._buffer(op)
        b = self.b
        checks = self.memory.checked(op)
        base = self._expr(plan.offsets.base)
        coefs = [self._expr(c) for c in plan.offsets.coefs]
        step = coefs[-1]
        box = plan.box
        mask_tile = None if box is not None else self.tile(op.operands[-1])
        if box is not None:
            ranges, uniform = self._box_ranges(box, shape)
            lo, hi = ranges[-1]
        passthru = self._splat(self._to_memory(other, dtype)) if other is not None else None
        iota = self._iota()
        align = dtype.itemsize

        def rows(contiguous: bool) -> None:
            def row(r, idx):
                row_base = base
                for i, c in zip(idx, coefs):
                    row_base = b.add(row_base, b.mul(i, c))
                first = b.mul(r, ir.Constant(I64, n))
                active = None
                if box is not None:
                    active = uniform
                    for i, (l, h) in zip(idx, ranges):
                        active = b.and_(active, b.and_(b.icmp_signed("<=", l, i), b.icmp_signed("<", i, h)))
                    if contiguous and checks:  # the row's run of elements is in bounds iff both ends are
                        start = b.add(row_base, lo)
                        final = b.sub(b.add(row_base, hi), ir.Constant(I64, 1))
                        ok = b.and_(b.icmp_unsigned("<", start, count), b.icmp_unsigned("<", final, count))
                        bad = b.and_(b.and_(active, b.icmp_signed("<", lo, hi)), b.not_(ok))
                        detail = lambda start=start: (b.select(b.icmp_unsigned("<", start, count), count, start),  # noqa: E731
                                                      self.lane())
                        self.fail_if(op, bad, kind, detail)
                        active = b.and_(active, ok)

                def chunk(j, valid, cs):
                    jv = b.add(self._splat(j), iota)
                    if box is not None:
                        m = b.and_(b.and_(b.icmp_signed(">=", jv, self._splat(lo)), b.icmp_signed("<", jv, self._splat(hi))),
                                   self._splat(active))
                    else:
                        m = self._load(mask_tile, b.add(first, j))
                        if valid is not None:
                            m = b.and_(m, valid)
                    if contiguous:
                        at = b.add(row_base, j)
                        if checks and box is None:
                            offsets = b.add(self._splat(at), iota)
                            ok = b.icmp_unsigned("<", offsets, self._splat(count))
                            self._fail_lanes(op, b.and_(m, b.not_(ok)), offsets, kind)
                            m = b.and_(m, ok)
                        where = b.gep(ptr, [at], source_etype=mem)
                        if out is None and value is None:
                            return []
                        if value is None:
                            self._store(out, b.add(first, j), self._from_memory(self._masked_load(where, m, passthru, align), dtype))
                        else:
                            self._masked_store(self._to_memory(self._load(value, b.add(first, j)), dtype), where, m, align)
                        return []
                    offsets = b.add(self._splat(row_base), b.mul(jv, self._splat(step)))
                    if checks:
                        ok = b.icmp_unsigned("<", offsets, self._splat(count))
                        self._fail_lanes(op, b.and_(m, b.not_(ok)), offsets, kind)
                        m = b.and_(m, ok)
                    pointers = self._addresses(ptr, mem, offsets)
                    if out is not None:
                        self._store(out, b.add(first, j), self._from_memory(self._gather(pointers, m, passthru, align), dtype))
                    elif value is not None:
                        self._scatter(self._to_memory(self._load(value, b.add(first, j)), dtype), pointers, m, align)
                    return []

                self._chunks(n, chunk)

            self._rows(shape[:-1], row)

        def whole_rows() -> None:
            """Every element active and inside the buffer: plain vector accesses, no checks."""

            def row(r, idx):
                row_base = base
                for i, c in zip(idx, coefs):
                    row_base = b.add(row_base, b.mul(i, c))
                first = b.mul(r, ir.Constant(I64, n))

                def chunk(j, valid, cs):
                    where = b.gep(ptr, [b.add(row_base, j)], source_etype=mem)
                    if out is not None:
                        v = b.load(where, typ=self._vec(mem), align=align) if valid is None else \
                            self._masked_load(where, valid, passthru, align)
                        self._store(out, b.add(first, j), self._from_memory(v, dtype))
                    elif valid is None:
                        b.store(self._to_memory(self._load(value, b.add(first, j)), dtype), where, align=align)
                    else:
                        self._masked_store(self._to_memory(self._load(value, b.add(first, j)), dtype), where, valid, align)
                    return []

                self._chunks(n, chunk)

            if out is not None or value is not None:
                self._rows(shape[:-1], row)

        def whole_tile() -> ir.Value:
            """Every element active and (with checks) the tile's lowest and highest offsets inside."""
            whole = uniform
            for (lo_d, hi_d), extent in zip(ranges, shape):
                whole = b.and_(whole, b.and_(b.icmp_signed("==", lo_d, ir.Constant(I64, 0)),
                                             b.icmp_signed("==", hi_d, ir.Constant(I64, extent))))
            if checks:
                low = high = base
                for c, extent in zip(coefs, shape):
                    span = b.mul(c, ir.Constant(I64, extent - 1))
                    low = b.add(low, self.call("llvm.smin", [span, ir.Constant(I64, 0)]))
                    high = b.add(high, self.call("llvm.smax", [span, ir.Constant(I64, 0)]))
                whole = b.and_(whole, b.and_(b.icmp_signed(">=", low, ir.Constant(I64, 0)),
                                             b.icmp_signed("<", high, count)))
            return whole

        def split(fast_path, edge_path) -> None:
            fast, edge, joined = (b.append_basic_block(name) for name in ("whole_tile", "edge_tile", "tile_done"))
            b.cbranch(whole_tile(), fast, edge)
            b.position_at_end(fast)
            fast_path()
            b.branch(joined)
            b.position_at_end(edge)
            edge_path()
            b.branch(joined)
            b.position_at_end(joined)

        def unit_rows() -> None:
            if box is None:
                rows(True)
            else:
                split(whole_rows, lambda: rows(True))

        static = plan.offsets.coefs[-1]
        if isinstance(static, int):
            unit_rows() if static == 1 else rows(False)
            return
        if self.check_only:  # whatever the stride: a whole tile needs no check, else each element's
            if box is None:
                rows(False)
            else:
                split(lambda: None, lambda: rows(False))
            return
        # a run-time stride along the last axis (a tensor's): vector accesses where it is 1
        unit, strided, done = (b.append_basic_block(n) for n in ("unit_stride", "strided", "strided_done"))
        b.cbranch(b.icmp_signed("==", step, ir.Constant(I64, 1)), unit, strided)
        b.position_at_end(unit)
        unit_rows()
        b.branch(done)
        b.position_at_end(strided)
        rows(False)
        b.branch(done)
        b.position_at_end(done)

    def tile_tile_load(self, op: Op) -> None:
        if op.result not in self.live.values:  # a check-only run: the bounds alone
            self._access(op, None, None, None)
            return
        out = self._new(op.result)
        self._access(op, None, out, self.value(op.operands[1]))

    def tile_tile_store(self, op: Op) -> None:
        self._access(op, None if self.check_only else self.tile(op.operands[1]), None, None)

    def tile_tile_atomic(self, op: Op) -> None:
        offsets, mask = self.tile(op.operands[0]), self.tile(op.operands[2])
        value = None if self.check_only else self.tile(op.operands[1])
        b = self.b

        def element(e, cs):
            with b.if_then(self._load1(mask, e)):
                idx = self._load1(offsets, e)
                if value is not None:
                    self.memory.atomic_at(op, idx, [self._load1(value, e)])
                elif self.memory.checked(op):
                    self.check(op, self.memory.within(op, idx), STATUS_STORE_OOB, idx)
            return []

        self._for(0, offsets.size, element, name="atomic")

    # -- control ------------------------------------------------------------------------------
    def _yield_into(self, targets: list[Tile], values: list[Value]) -> None:
        """Copy yielded tiles into ``targets``; a value held in another target is copied out first."""
        sources = [self.tile(v) for v in values]
        held = {id(t.ptr) for t in targets}
        staged = []
        for target, source in zip(targets, sources):
            if source.ptr is not target.ptr and id(source.ptr) in held:
                temp = self._temporary(source.type)
                self._copy(temp, source)
                source = temp
            staged.append(source)
        for target, source in zip(targets, staged):
            self._copy(target, source)

    def op_fold(self, op: Op) -> None:
        b = self.b
        start, stop = (self.value(v) for v in op.operands[:2])
        step = op.attrs.step
        (region,) = op.regions
        live = self.live.values
        carried = [(arg, init, result) for arg, init, result in zip(region.args[1:], op.operands[2:], op.results)
                   if arg in live]
        tiles = {arg: self._new(arg) for arg, _, _ in carried if isinstance(arg.type, TileType)}
        for arg, init, _ in carried:
            if arg in tiles:
                self._copy(tiles[arg], self.tile(init))
        scalars = [(arg, init, result) for arg, init, result in carried if arg not in tiles]
        trips = self.control.trip_count(start, stop, step)
        yields = dict(zip(region.args[1:], region.terminator.operands))

        def trip(k, phis):
            self.values[region.args[0]] = b.add(start, b.mul(k, ir.Constant(I64, step)))
            for (arg, _, _), phi in zip(scalars, phis):
                self.values[arg] = phi
            for arg, tile in tiles.items():
                self.tiles[arg] = tile
            self.lower_block(region)
            self._yield_into(list(tiles.values()), [yields[a] for a in tiles])
            return [self.value(yields[arg]) for arg, _, _ in scalars]

        finals = self._for(0, trips, trip, [self.value(init) for _, init, _ in scalars],
                           name=f"fold{self.ordinals[op]}")
        for (_, _, result), final in zip(scalars, finals):
            self.values[result] = final
        for arg, tile in tiles.items():
            result = op.results[region.args.index(arg) - 1]
            self.tiles[result] = Tile(tile.ptr, result.type)

    def op_if(self, op: Op) -> None:
        b = self.b
        tag = self.ordinals[op]
        cond = self.value(op.operands[0])
        live = [r for r in op.results if r in self.live.values]
        targets = {r: self._new(r) for r in live if isinstance(r.type, TileType)}
        scalar_results = [r for r in live if r not in targets]
        blocks = [b.append_basic_block(f"if_{tag}_{n}") for n in ("then", "else", "end")]
        b.cbranch(cond, blocks[0], blocks[1])
        incoming = []
        for block, region in zip(blocks, (*op.regions, None)[:2]):
            b.position_at_end(block)
            scalars = []
            if region is not None:
                self.lower_block(region)
                yielded = dict(zip(op.results, region.terminator.operands))
                self._yield_into(list(targets.values()), [yielded[r] for r in targets])
                scalars = [self.value(yielded[r]) for r in scalar_results]
            incoming.append((scalars, b.block))
            b.branch(blocks[2])
        b.position_at_end(blocks[2])
        for k, result in enumerate(scalar_results):
            phi = b.phi(llvm_type(result.type))
            for values, block in incoming:
                phi.add_incoming(values[k], block)
            self.values[result] = phi


def _strides(shape: tuple[int, ...]) -> list[int]:
    out, s = [], 1
    for n in reversed(shape):
        out.append(s)
        s *= n
    return out[::-1]


def lower_tile_host(graph: Graph, target: HostTarget) -> LoweredModule:
    """Lower tile graph ``graph`` for the host: a launcher over programs."""
    lanes = target.vector_width or host_vector_width()
    lw = TileHostLowering(graph, target, lanes)
    entry = lw.lower_launcher().name
    lw.lower_prepare()
    return LoweredModule(lw.module, entry, False, tuple(graph.body.walk()),
                         TilePlan(Chunking(Chunks.block, lanes), lw.check_pass or not target.checks, lw.check_pass))


@attrs.frozen
class TilePlan:
    """What the host runtime needs to know about a tile launcher (as :class:`~.spmd.HostPlan`):
    its units, whether it cannot fail once prepare says the launch fits, and whether prepare
    checked every program (then a failure it records is the launch's error, raised before any
    program runs)."""

    chunking: Chunking
    infallible: bool
    checked_whole: bool
    checked_separately: bool = False  # one launcher serves every launch (see HostPlan)


class _Everything:
    """Every op: the launcher's unchecked set where prepare checked the launch whole."""

    def __contains__(self, op) -> bool:
        return True


_EVERY_OP = _Everything()
