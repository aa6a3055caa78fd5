"""The llvm backend's native path for tile-level kernels (``for_each_tile``).

A program runs on one core.  Each tile it builds lives in a stack array of its static shape
(:mod:`.tile_access` decides which tiles are built at all and which share an array), and
each tile op is a loop over that array in vectors of ``L`` elements (the host's vector width
in 32-bit lanes), which LLVM's O3 pipeline keeps as SIMD code.  This module walks the
program and hands each tile op to the emitter of its kind, all written with
:class:`.tile_vectors.TileVectors`' vectors and loops:

* pointwise ops and casts (:mod:`.tile_elementwise`): one loop over the elements, each op
  lowered by the scalar op table (:data:`accy.codegen.llvm.LOWER`) on vectors, so every
  element rounds as the scalar op does, bit for bit (math functions are vecmath's routines,
  as on every host path); there too the ops that only move elements (broadcast, reshape,
  transpose: a 2-D one by L x L blocks in registers);
* reductions, argreductions and scans (:mod:`.tile_reductions`) along the last axis:
  independent vector partials per row, combined at the end (a float max or min on
  order-preserving integer keys); along another axis, vectors across the axes after it; scans
  along the last axis: an in-vector prefix and a carry, across others: running vectors;
* ``dot`` (:mod:`.tile_dot`): a register-blocked micro-kernel (``MR`` rows by ``NV`` vectors
  of the accumulator in registers over k, one broadcast of ``a`` and ``NV`` vector loads of
  ``b`` per k), column blocks outermost; the accumulator tile in memory between dots (in
  place where it dies);
* ``tile_load``/``tile_store`` (:mod:`.tile_memory`) whose offsets are affine with unit
  stride along the last axis (``rows[:, None] * stride + cols[None, :]``, ``load_tile``; a
  tensor's run-time stride is tested for 1): plain vector accesses where the mask's box
  covers the tile and its ends are in bounds, else one masked vector access per chunk of a
  row with the row's bounds checked once; other affine offsets: gathers; anything else: the
  offsets and mask tiles, element by element.

Checks: an active offset outside its buffer records the first failure in the status word
(the access is skipped) and the launch raises the llvm backend's OutOfBoundsError, writing
nothing.  A launch that reads no buffer it writes is checked whole before it runs, by
a check-only pass over every program (only what the checks need: offsets, masks, the loads
and divisions they depend on; run in slices like a launch, so an interrupt lands between two);
when that finds nothing the launch runs on the caller's arrays, else on scratch copies
(:mod:`.host`) that are dropped on failure.

A launch's unit of work is one program, split over the thread pool by :mod:`.host`;
consecutive units walk a 2-D grid in groups of GROUP along its first axis.
"""

from __future__ import annotations

import attrs
from llvmlite import ir

from ...dsl.ir import Graph, Op, Value
from ...dsl.types import TileType
from ..abi import STATUS_STORE_OOB
from .chunking import Chunking, Chunks, host_vector_width, untyped
from ..llvm import Lowering, LoweredModule, host_entry_name
from ..llvm_types import I1, I8, I64, VOID, llvm_type
from .spmd import SpmdLowering
from .tile_dot import DotEmitter
from .tile_elementwise import ElementwiseEmitter, ShapeEmitter
from .tile_memory import TileMemoryEmitter
from .tile_reductions import ReductionEmitter
from .tile_vectors import Tile, TileVectors
from ...targets import HostTarget
from ...lowering.tile_access import AccessPlan, liveness, plan_accesses, plan_storage, tile_bytes
from ...lowering.tile_fusion import plan_fusion, plan_tails

GROUP = 4  # programs along axis 0 that run together (see _decode)
STACK_TILE_BYTES = 1 << 19  # a program's tile arrays past this live on the heap (see _tile_arrays)


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
        # a launch that reads no buffer it writes can be checked whole before it runs (the check
        # entry's check-only pass): then it runs on the caller's arrays, with no scratch copies
        self.check_pass = target.checks and not (graph.loaded_buffers() & graph.stored_buffers())
        self._mode(check_only=False)
        self.vectors = TileVectors(self)
        elementwise, shapes = ElementwiseEmitter(self), ShapeEmitter(self)
        reductions, memory = ReductionEmitter(self), TileMemoryEmitter(self)
        self.pointwise = elementwise.pointwise  # any other op with a tile result
        self.fuse = lambda op: memory.fused_load(op) if op.opcode == "tile_load" else elementwise.fused(op)
        self.tile_emitters = {  # op -> what lowers it (the rest: the scalar ops, as every lowering has them)
            "fold": self.op_fold, "if": self.op_if,
            "splat": elementwise.splat, "arange": elementwise.arange,
            "broadcast": shapes.broadcast, "reshape": shapes.reshape, "trans": shapes.trans,
            "slice": shapes.slice, "cat": shapes.cat,
            "reduce": reductions.reduce, "argreduce": reductions.argreduce, "scan": reductions.scan,
            "dot": DotEmitter(self).dot,
            "tile_load": memory.load, "tile_store": memory.store, "tile_atomic": memory.atomic,
        }

    def _mode(self, check_only: bool) -> None:
        """Lower the full program, or only what its checks need (stores and atomics write nothing).
        Where the launch is checked whole, the launcher itself checks nothing: it runs only
        after that pass found no failure."""
        self.check_only = check_only
        self.live = liveness(self.region, self.plans, check_only)
        # loads fuse where the launcher checks none (the launch was checked whole before, or has no checks)
        unchecked = (self.check_pass or not self.target.checks) and not check_only
        self.fused = plan_fusion(self.region, self.live, self.L, unchecked_loads=unchecked)
        self.storage = plan_storage(self.region, self.live, self.L, self.fused)
        self.tails = plan_tails(self.region, self.live, self.L)
        self.unchecked = _EVERY_OP if self.check_pass and not check_only else frozenset()

    # -- entry points ---------------------------------------------------------------------
    def _entry(self, fn: ir.Function, tiles: bool = True) -> ir.IRBuilder:
        """The function's stack arrays (in a first block, branched from at the end), the programs'
        tile arrays where it runs programs (``tiles``), and the kernel's top level, lowered once."""
        self.allocas = ir.IRBuilder(fn.append_basic_block("allocas"))
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.values.clear()
        self.tiles.clear()
        self.program = None
        self._bind_params(fn)
        self.slots = self._tile_arrays(self.storage.slot_bytes if tiles else [])
        self.lower_top_level()
        return self.b

    def _tile_arrays(self, sizes: list[int]) -> list[ir.Value]:
        """The program's tile arrays: on the stack, or past STACK_TILE_BYTES in one heap block
        that :meth:`_release` frees (a worker thread's stack is a few MiB; a tile up to 4 MiB)."""
        self.heap = None
        if sum(sizes) <= STACK_TILE_BYTES:
            return [self._stack_array(size) for size in sizes]
        b = self.allocas
        offsets, total = [], 0
        for size in sizes:
            offsets.append(total)
            total += -(-size // 64) * 64
        self.heap = b.call(self.declare("malloc", ir.PointerType(), [I64]), [ir.Constant(I64, total + 63)])
        base = b.and_(b.add(b.ptrtoint(self.heap, I64), ir.Constant(I64, 63)), ir.Constant(I64, -64))
        return [b.inttoptr(b.add(base, ir.Constant(I64, k)), ir.PointerType()) for k in offsets]

    def _release(self) -> None:
        if self.heap is not None:
            self.b.call(self.declare("free", VOID, [ir.PointerType()]), [self.heap])

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

        self.vectors.loop(begin, end, program, name="program")

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
        self._release()
        b.ret_void()
        self.allocas.branch(fn.blocks[1])
        return fn

    def lower_prepare(self) -> ir.Function:
        """``i1 name_prepare(<the ABI's parameters>, i64* extents)``: writes the extents and
        returns whether the launch cannot fail (so it may run on the caller's arrays): always
        without checks; with them, never where the launcher checks as it runs, and where the
        launch is checked whole, whether its extents are valid (the check-only pass,
        :meth:`lower_check`, then decides)."""
        fn = ir.Function(self.module, ir.FunctionType(I1, self._signature() + [ir.PointerType()]),
                         f"{self.graph.name}_prepare")
        b = self._entry(fn, tiles=False)  # the extents need no program's tiles
        out = fn.args[-1]
        out.name = "extents"
        for k, extent in enumerate(self.extents):
            b.store(extent, b.gep(out, [ir.Constant(I64, k)], source_etype=I64, inbounds=True))
        if not self.check_pass:
            b.ret(ir.Constant(I1, 0 if self.target.checks else 1))
        else:
            b.ret(b.icmp_signed("==", b.load(self.status, typ=I64), ir.Constant(I64, 0)))
        self.allocas.branch(fn.blocks[1])
        return fn

    def lower_check(self) -> ir.Function:
        """``void name_check(<the ABI's parameters>, unit_begin, unit_end)``: the checks of
        programs ``[unit_begin, unit_end)`` into the status word, writing nothing.  The host runs
        it over every program in slices, as a launch (so an interrupt lands between two), before
        a launch that prepare checks whole."""
        fn = ir.Function(self.module, ir.FunctionType(VOID, self._signature() + [I64, I64]),
                         f"{self.graph.name}_check")
        self._mode(check_only=True)
        b = self._entry(fn)
        begin, end = fn.args[-2:]
        begin.name, end.name = "unit_begin", "unit_end"
        self._programs(begin, end)
        self._release()
        b.ret_void()
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
        if op.results and op.results[0] in self.fused:  # computed where it is read
            self.tiles[op.results[0]] = self.fuse(op)
            return
        if self.check_only and code in ("store", "atomic"):
            if self.memory.checked(op):
                idx = self.value(op.operands[0])
                self.check(op, self.memory.within(op, idx), STATUS_STORE_OOB, idx)
        elif code in self.tile_emitters:
            self.tile_emitters[code](op)
        elif any(isinstance(r.type, TileType) for r in op.results):
            self.pointwise(op)
        else:
            super().lower_op(op)

    def tile(self, v: Value) -> Tile:
        return self.tiles[v]

    def new_tile(self, v: Value) -> Tile:
        """The array ``v`` is built in."""
        tile = Tile(self.slots[self.storage.slot_of[v]], v.type)
        self.tiles[v] = tile
        return tile

    def tail_start(self, lo: ir.Value, hi: ir.Value, uniform: ir.Value) -> ir.Value:
        """Where a box-masked 1-D load's tail starts: its box's end ``hi`` (0 where the box,
        ``[lo, hi)`` where ``uniform`` holds, is empty), rounded up to whole vectors."""
        active = self.b.and_(uniform, self.b.icmp_signed("<", lo, hi))
        return self.vectors.whole_vectors(self.b.select(active, hi, ir.Constant(I64, 0)), up=True)

    def temporary(self, t: TileType) -> Tile:
        """A stack array of its own, for a tile that is not the graph's."""
        return Tile(self._stack_array(tile_bytes(t, self.L)), t)

    # -- checks ---------------------------------------------------------------------------
    def check(self, op, ok: ir.Value, kind: int, detail: ir.Value) -> None:
        if not isinstance(ok.type, ir.VectorType):
            super().check(op, ok, kind, detail)
            return
        bad = self.b.not_(ok)
        if self.valid is not None:
            bad = self.b.and_(bad, self.valid)
        self.fail_lanes(op, bad, detail, kind)

    def fail_lanes(self, op, bad: ir.Value, detail: ir.Value, kind: int) -> None:
        """Record a failure where any lane of ``bad`` is set, with ``detail``'s first such lane."""
        n = bad.type.count
        bits = self.b.bitcast(bad, ir.IntType(n))

        def report():
            first = self.call("llvm.cttz", [bits, ir.Constant(I1, 0)])
            return self.b.extract_element(detail, first), self.lane()

        self.fail_if(op, self.b.icmp_unsigned("!=", bits, ir.Constant(bits.type, 0)), kind, report)

    def fail_if(self, op, bad: ir.Value, kind: int, report) -> None:
        super().fail_if(getattr(op, "real", op), bad, kind, report)

    # -- control ------------------------------------------------------------------------------
    def _yield_into(self, targets: list[Tile], values: list[Value]) -> None:
        """Copy yielded tiles into ``targets``; a value held in another target is copied out first."""
        sources = [self.tile(v) for v in values]
        held = {id(t.ptr) for t in targets}
        staged = []
        for target, source in zip(targets, sources):
            if source.ptr is not target.ptr and id(source.ptr) in held:
                temp = self.temporary(source.type)
                self.vectors.copy(temp, source)
                source = temp
            staged.append(source)
        for target, source in zip(targets, staged):
            self.vectors.copy(target, source)

    def op_fold(self, op: Op) -> None:
        b = self.b
        start, stop = (self.value(v) for v in op.operands[:2])
        step = op.attrs.step
        (region,) = op.regions
        live = self.live.values
        carried = [(arg, init, result) for arg, init, result in zip(region.args[1:], op.operands[2:], op.results)
                   if arg in live]
        tiles = {arg: self.new_tile(arg) for arg, _, _ in carried if isinstance(arg.type, TileType)}
        for arg, init, _ in carried:
            if arg in tiles:
                self.vectors.copy(tiles[arg], self.tile(init))
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

        finals = self.vectors.loop(0, trips, trip, [self.value(init) for _, init, _ in scalars],
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
        targets = {r: self.new_tile(r) for r in live if isinstance(r.type, TileType)}
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




def lower_tile_host(graph: Graph, target: HostTarget) -> LoweredModule:
    """Lower tile graph ``graph`` for the host: a launcher over programs."""
    lanes = target.vector_width or host_vector_width()
    lw = TileHostLowering(graph, target, lanes)
    entry = lw.lower_launcher().name
    lw.lower_prepare()
    if lw.check_pass:
        lw.lower_check()
    return LoweredModule(lw.module, entry, False, tuple(graph.body.walk()),
                         TilePlan(Chunking(Chunks.block, lanes), lw.check_pass or not target.checks, lw.check_pass))


@attrs.frozen
class TilePlan:
    """What the host runtime needs to know about a tile launcher (as :class:`~.spmd.HostPlan`):
    its units, whether it cannot fail once prepare says the launch fits, and whether its check
    entry checks every program before the launch (then a failure it records is the launch's
    error, raised before any program runs)."""

    chunking: Chunking
    infallible: bool
    checked_whole: bool
    checked_separately: bool = False  # one launcher serves every launch (see HostPlan)


class _Everything:
    """Every op: the launcher's unchecked set where the launch is checked whole."""

    def __contains__(self, op) -> bool:
        return True


_EVERY_OP = _Everything()
