"""The tile distribution: a tile-level graph (``for_each_tile``) rewritten into an ordinary
SIMT block-launch graph (``for_each_block``, one CTA of ``warps`` * 32 threads per program)
that the cuda, ptx and llvm lowerings compile unchanged.

The new graph is traced by the ordinary builder (so it is verified, and then optimised,
like any kernel), driven by a walk over the tile graph's ops:

- each tile value gets a :mod:`layout <accy.lowering.layouts>` and, in every thread, one
  scalar value per register.  Values computed from ``arange``, ``splat`` and elementwise
  ops of them (index arithmetic, masks) stay *lazy*: a function of the element's
  coordinates, evaluated in whatever layout a user of the value wants, so broadcasts,
  reshapes and transposes of them move nothing;
- elementwise ops work register by register in one layout (the canonical
  :class:`~accy.lowering.layouts.Blocked` one, or an operand's); a reduction's result is
  left in the :class:`~accy.lowering.layouts.Slice` of its operand's layout, so
  ``x - x.max(axis=1)[:, None]`` broadcasts it back without moving data; every other
  change of layout goes through shared memory;
- reductions combine each thread's registers, then the lanes of a warp with shuffles,
  then the warps through shared memory; a rank-1 reduction's scalar is handed to every
  thread through shared memory, so later branches on it are uniform;
- scans run in the same three steps (each thread's registers, shuffles within the warp,
  shared memory across warps), or serially per line in shared memory where the layout
  holds replicas past the line's end; ``dot`` multiplies from shared-memory copies of its
  operands with FMAs, or on tensor cores where the target has them;
- loads and stores are guarded by their masks (``if``) so masked-off memory is never
  touched, and a store or atomic is done only by the owner of each element (a replica
  never stores; a scalar store or atomic by thread 0 alone);
- a load or store whose offsets are affine with (or, for a tensor's strides, checked to have)
  unit stride along the last axis moves each thread's run of consecutive elements up to 16
  bytes at a time (one ``load``/``store`` of ``vec`` elements: ld.global.v4 and the like)
  where the buffer's address (``aligned``), the base and the other strides keep every group
  aligned, checked where the access is (LLVM hoists it out of loops), and the group is inside
  the mask; element by element otherwise.

Shared memory is one scratch array per element type, sized to the largest need and
reused behind barriers; a program needing more than 48 KiB is a TraceError naming the op.

The distributor walks the ops and hands each to the part that rewrites it, all recording
through one :class:`~accy.lowering.rebuild.Rebuild` core: :mod:`.tile_values` (tiles made,
moved, computed element by element), :mod:`.reductions`, :mod:`.tile_memory`, :mod:`.regions`
(fold, if), :mod:`.fma_dot` and :mod:`.tensor_cores` with :mod:`.software_pipeline`, over
:mod:`.registers` (layouts' registers, conversions) and :mod:`.scratch` (shared memory).
"""

from __future__ import annotations

import attrs

from ..dsl.ir import Graph, Op
from ..errors import TraceError
from ..dsl.ops import BlockUnit, Programs
from ..dsl.trace import trace
from ..dsl.traced import Traced, axis
from ..dsl.types import TileType
from ..targets import STATIC_SHARED_BYTES, WARP_SIZE
from .fma_dot import FmaDot
from .reductions import Reductions
from .rebuild import Rebuild
from .regions import Regions
from .registers import Registers
from .scratch import Scratch
from .bulk_copies import TensorCopies
from .warp_roles import PRODUCER_THREADS, WarpRoles
from .software_pipeline import SoftwarePipeline
from .tensor_cores import OperandStaging, TensorCoreDot, direct_loads, lone_dot
from .tile_memory import MemoryAccesses
from .tile_values import TileValues

# the resident threads per SM a program's registers are budgeted for: its threads hold whole
# tiles (a 64x64 f32 tile is 32 registers a thread at 4 warps), so the SIMT level's 512 (128
# registers) spills them (layer norm, flash attention); 256 leave ptxas up to 255 a thread
RESIDENT_THREADS = 256
# the most elements of one tile a thread holds (in registers, each op unrolled over them): a tile
# of 16384 on one warp, 65536 on four
MAX_ELEMENTS_PER_THREAD = 512


def distribute(graph: Graph, tensor_cores: bool = False, shared_bytes: int = STATIC_SHARED_BYTES,
               warpgroups: bool = False, sms: int = 0) -> Graph:
    """The SIMT block-launch graph that computes what the tile graph ``graph`` does; with
    ``tensor_cores`` (NVPTX at sm_80 and later) a ``dot`` whose shapes and types allow it runs
    on ``mma.sync``, or with ``warpgroups`` (sm_90a) on ``wgmma`` where it fits; a program's
    shared memory stays within ``shared_bytes`` (the target's per-block limit: past 48 KiB the
    launch opts into dynamic shared memory).  A persistent launch runs ``sms`` times the
    resident blocks an SM holds, each walking the programs (:meth:`_Distributor.open_launch`);
    with ``sms`` 0, a block per program."""
    if not graph.is_tile_launch:
        raise ValueError(f"distribute: kernel '{graph.name}' is not a tile launch")
    _check_per_thread(graph)
    return _Distributor(graph, tensor_cores, shared_bytes, warpgroups, sms).run()


GROUP = 8  # a persistent launch's programs run in runs of this many along the first grid axis
WIDE_N = 128  # a dot wider than this holds too many accumulators for a warp-specialised program's
#               kernel registers at two blocks an SM (ptxas refuses its wgmma at 128 registers)


def roles_blocks(graph: Graph, threads: int) -> int:
    """The resident blocks an SM a warp-specialised program of ``threads`` computing threads is
    built for: as many as its threads allow (:data:`RESIDENT_THREADS`), one where a dot is wider
    than :data:`WIDE_N`."""
    wide = any(op.opcode == "dot" and op.result.type.shape[-1] > WIDE_N for op in graph.body.walk())
    return 1 if wide else max(1, RESIDENT_THREADS // threads)


def grouped_order(b, tile, extents: list) -> list:
    """The grid coordinates of the ``tile``-th program a persistent launch runs: for two axes
    (m, n), ``GROUP`` consecutive m for each n in turn, so the programs running together share
    their rows of one operand and their columns of the other in L2 (Triton's grouped order); for
    other ranks, the launch's own order (the first axis fastest)."""
    if len(extents) == 2:
        rows_m, cols_n = extents
        width = b.mul(cols_n, GROUP)
        first = b.mul(b.floor_div(tile, width), GROUP)
        rows = b.min(b.sub(rows_m, first), GROUP)
        within = b.mod(tile, width)
        return [b.add(first, b.mod(within, rows)), b.floor_div(within, rows)]
    out = []
    for k, extent in enumerate(extents):
        out.append(tile if k == len(extents) - 1 else b.mod(tile, extent))
        tile = b.floor_div(tile, extent)
    return out


def _check_per_thread(graph: Graph) -> None:
    """A TraceError at the first op making a tile of more than MAX_ELEMENTS_PER_THREAD elements a
    thread: its registers (and the code unrolled over them) would not fit."""
    warps = graph.launch_op.attrs.warps
    most = MAX_ELEMENTS_PER_THREAD * warps * WARP_SIZE
    for op in graph.body.walk():
        for v in op.results:
            if isinstance(v.type, TileType) and v.type.size > most:
                raise TraceError(
                    f"{op.opcode}: a {v.type} is {v.type.size // (warps * WARP_SIZE)} elements for each of the "
                    f"{warps * WARP_SIZE} threads of a GPU program of {warps} warps, over the "
                    f"{MAX_ELEMENTS_PER_THREAD} a thread holds; use more warps (up to 32) or smaller tiles (the "
                    "numpy and llvm backends take tiles of up to 2**20 elements)", op.location)


class _Distributor:
    """The walk over a tile graph's ops, each rewritten by its part (``handlers``: opcode ->
    the part's method; an op with no handler is elementwise where it makes a tile, a scalar op
    copied as it is otherwise), all recording through one rebuilding core."""

    def __init__(self, graph: Graph, tensor_cores: bool = False, shared_bytes: int = STATIC_SHARED_BYTES,
                 warpgroups: bool = False, sms: int = 0):
        self.graph = graph
        self.sms = sms
        self.launch = graph.launch_op
        threads = self.launch.attrs.warps * WARP_SIZE
        self.core = core = Rebuild(threads)
        self.tagged: set[Op] = set()  # the ops recorded so far that report their tile op's line (the ops
        # themselves: an id() is reused once its op is freed)
        self.scratch = scratch = Scratch(core)
        self.registers = registers = Registers(core, scratch)
        self.values = TileValues(core, registers)
        self.reductions = Reductions(core, registers, scratch)
        used = {v for op in graph.body.walk() for v in op.operands}
        grid = lone_dot(graph)  # may a dot's warps form a grid (see tensor_cores.warp_grid)?
        direct = direct_loads(graph, threads, grid, warpgroups) if tensor_cores else frozenset()
        self.memory = memory = MemoryAccesses(core, registers, scratch, direct, used)
        staging = OperandStaging(core, registers, scratch, memory)
        self.fma = FmaDot(core, registers, scratch)
        self.mma = TensorCoreDot(core, registers, scratch, staging, tensor_cores, grid=grid, warpgroups=warpgroups)
        bulk = TensorCopies(core, memory, graph) if warpgroups else None
        self.pipeline = SoftwarePipeline(core, self, registers, scratch, staging, self.mma,
                                         self.launch.attrs.num_stages, shared_bytes, bulk)
        # warp roles where a warpgroup's worth of warps computes (accy.lowering.warp_roles)
        self.roles = WarpRoles(core, bulk, graph, self.launch.attrs.num_stages, roles_blocks(graph, threads)) \
            if bulk is not None and self.launch.attrs.warps % 4 == 0 else None
        self.regions = Regions(core, self, registers, scratch, self.mma, self.pipeline)
        self.handlers = {
            "splat": self.values.splat, "arange": self.values.arange, "broadcast": self.values.broadcast,
            "reshape": self.values.reshape, "trans": self.values.trans, "slice": self.values.slice,
            "cat": self.values.cat,
            "reduce": self.reductions.reduce, "argreduce": self.reductions.argreduce, "scan": self.reductions.scan,
            "tile_load": memory.tile_load, "tile_store": memory.tile_store, "tile_atomic": memory.tile_atomic,
            "store": memory.store, "atomic": memory.atomic,
            "fold": self.regions.fold, "if": self.regions.if_,
            "dot": self.dot,
        }

    def run(self) -> Graph:
        return trace(self.graph.name, self.graph.params, self.kernel)

    def kernel(self, k, args) -> None:
        self.core.b = k
        self.core.env.update((old, Traced(new)) for old, new in zip(self.graph.body.args, k.block.args))
        for op in self.graph.body.ops:
            if op is self.launch:
                self.open_launch(op)
            else:
                self.op(op)

    def open_launch(self, op: Op) -> None:
        core = self.core
        names = op.attrs.axes
        thread = next(n for n in ("thread", "lane_", "thread_") if n not in names)
        grid = tuple(axis(name, core.env[v]) for name, v in zip(names, op.operands))
        region = op.regions[0]
        outer = core.b
        resident = max(1, RESIDENT_THREADS // core.T)
        persistent = op.attrs.programs is Programs.PERSISTENT and self.sms > 0
        if persistent:  # one block per resident slot of every SM, at most one per program
            extents = [core.env[v] for v in op.operands]
            total = extents[0]
            for e in extents[1:]:
                total = outer.mul(total, e)
            blocks = outer.min(total, self.sms * resident)
            walker = next(n for n in ("sm_block", "block_") if n not in names)
            grid = (axis(walker, blocks),)
        roles = self.roles if self.roles is not None and self.roles.choose(region, persistent) else None
        self.pipeline.roles = roles
        extra = PRODUCER_THREADS if roles is not None else 0
        if roles is not None:
            resident = roles.blocks

        def specialised(inner, block) -> None:
            """Warp roles: the mbarriers set up, then the consumers' side and the producer's."""
            roles.set_up()
            before = dict(core.env)
            for name, arg in zip(names, region.args):
                core.env[arg] = block[name]

            def consumers(side):
                with core.region(side):
                    if self.mma.warpgroups is not None:
                        self.mma.warpgroups.start()
                    roles.consumers(lambda: self.walk(region))

            tid = core.tid

            def producer(side):
                core.tid = tid  # (the consumers' came through their setmaxnreg)
                core.env.clear()
                core.env.update(before)
                for name, arg in zip(names, region.args):
                    core.env[arg] = block[name]
                with core.region(side):
                    roles.producer(region, self)

            inner.if_(inner.lt(core.tid, core.T), consumers, producer, roles=True)
            roles.name_barriers(inner.block.ops[-1].regions[0])

        def program(inner, block, threads):
            core.b = core.launch = inner
            core.tid = threads[thread]
            if roles is not None:
                specialised(inner, block)
                self.scratch.declare_sizes()
                self.pipeline.declare_sizes()
                return
            if self.mma.warpgroups is not None:
                self.mma.warpgroups.start()
            if persistent:  # this block's programs: its index, then every ``blocks``-th
                first = block[walker]
                count = inner.floor_div(inner.add(inner.sub(total, first), inner.sub(blocks, 1)), blocks)

                def each(loop, j):
                    with core.region(loop):
                        tile = core.b.add(first, core.b.mul(j, blocks))
                        for arg, index in zip(region.args, grouped_order(core.b, tile, extents)):
                            core.env[arg] = index
                        self.walk(region)
                        core.b.barrier()  # the next program's copies may refill what this one read

                inner.for_range(0, count, 1, each)
                core.b = inner
            else:
                for name, arg in zip(names, region.args):
                    core.env[arg] = block[name]
                self.walk(region)
            self.scratch.declare_sizes()  # each array sized to its largest use
            self.pipeline.declare_sizes()

        outer.for_each_block(grid=grid, threads=(axis(thread, core.T + extra),), body=program)
        core.b = outer
        block = next(o for o in reversed(outer.block.ops) if o.opcode == "for_each_block")
        # (a producer warpgroup's threads share the consumers' budget: it gives its registers up)
        block.attrs = attrs.evolve(block.attrs, min_blocks=resident, unit=BlockUnit.PROGRAM)

    def walk(self, block) -> list:
        """The ops of ``block`` rewritten; the values its terminator yields."""
        for op in block.ops:
            if op.opdef.terminator:
                return [self.core.env[v] for v in op.operands]
            self.op(op)
        return []

    def op(self, op: Op) -> None:
        """``op`` rewritten by its handler; what it recorded reports ``op``'s line."""
        self.core.current_op = op
        ops = self.core.b.block.ops
        start = len(ops)
        handler = self.handlers.get(op.opcode)
        if handler is not None:
            handler(op)
        elif any(isinstance(v.type, TileType) for v in op.results):
            self.values.pointwise(op)
        else:
            self.core.copy(op)
        for new in ops[start:]:
            for o in new.walk():
                if o not in self.tagged:
                    self.tagged.add(o)
                    o.location = op.location

    def dot(self, op: Op) -> None:
        kind = self.mma.mma_kind(op)
        if kind is not None:
            return self.mma.dot(op, kind)
        self.fma.dot(op)
