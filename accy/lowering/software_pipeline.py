"""Software pipelining of tensor-core dots in the tile distribution (:mod:`accy.lowering.distribute`):
in a ``fold_range`` of a program with ``num_stages`` > 1, the ``cp.async`` copies of the operands
of trip ``i + num_stages - 1`` are in flight while trip ``i`` computes, each trip's operands in
their own stage of a staging array."""

from __future__ import annotations

import attrs

from ..dsl.ir import Op
from ..dsl.ops import MbarrierAttrs, MbarrierInitAttrs, SharedAttrs
from ..dsl.types import u64
from .bulk_copies import TensorCopies, stage_bytes
from .rebuild import Part, Rebuild
from .registers import Registers
from .scratch import Scratch
from .tensor_cores import STAGED, STAGED_KIND, OperandStaging, TensorCoreDot
from .tile_memory import Deferred
from .warpgroups import ALIGN, aligned


def stages_in_effect(graph) -> int:
    """The pipeline stages of a distributed graph's main loop (the fold with the most
    tensor-core ops, the last of equals: a TMA fold's ``cp.async`` version follows it): its
    prologue commits the copies of the first ``stages - 1`` trips as groups just before it
    (1: not pipelined)."""
    best = (0, 1)

    def walk(block):
        nonlocal best
        commits = 0
        for op in block.ops:
            if op.opcode == "async_commit":
                commits += 1
            elif op.opcode == "fold":
                products = sum(o.opcode in ("mma", "wgmma") for o in op.walk())
                # a loop around the main loop (a persistent block's over its programs) is none
                outer = any(o is not op and o.opcode == "fold" and any(x.opcode in ("mma", "wgmma") for x in o.walk())
                            for o in op.walk())
                if products >= best[0] and not outer:
                    best = (products, commits + 1)
                commits = 0
            for region in op.regions:
                walk(region)

    walk(graph.body)
    return best[1]


def carried(region) -> set:
    """The values of a fold body that depend on its carries."""
    out = set(region.args[1:])
    for op in region.ops:
        inner = {v for o in op.regions for x in o.walk() for v in x.operands}
        if any(v in out for v in op.operands) or inner & out:
            out.update(op.results)
    return out


def computing(load: Op, region) -> list | None:
    """The body's ops a load's operands are computed by, in order; None if any is not plain
    arithmetic (a region, a memory access)."""
    needed = set(load.operands)
    ops = []
    for op in reversed(region.ops[:region.ops.index(load)]):
        if any(r in needed for r in op.results):
            if op.regions or op.opdef.memory or not op.opdef.pure:
                return None
            ops.append(op)
            needed.update(op.operands)
    return ops[::-1]


def prefetchable(load: Op, region, carries: set) -> bool:
    ops = computing(load, region)
    return ops is not None and not any(v in carries for o in ops + [load] for v in o.operands)


@attrs.frozen
class Slots:
    """A TMA fold's mbarriers: in shared array ``array``, stage ``s``'s full one at ``full + s``,
    its empty one at ``empty + s``; ``producer``: a producer warpgroup copies (warp roles)."""

    array: str
    full: int
    empty: int
    producer: bool


class SoftwarePipeline(Part):
    """Pipelined folds: which dots' operands can be copied ahead (:meth:`plan`), and the fold
    rebuilt as a prologue and a loop that copies ahead (:meth:`fold`); every pipelined fold's
    stages share one staging array per element type (``stage_arrays``), the folds running one
    after another.  ``walker`` rewrites the body's ops (the distributor); the stages take at
    most ``shared_bytes`` less what the program's scratch holds."""

    def __init__(self, core: Rebuild, walker, registers: Registers, scratch: Scratch, staging: OperandStaging,
                 dots: TensorCoreDot, num_stages: int, shared_bytes: int, bulk: TensorCopies | None = None):
        super().__init__(core)
        self.bulk = bulk  # the tensor memory accelerator's copies (sm_90a), or None
        self.barriers = None  # the mbarriers of folds whose stages TMA fills: (array, its shared op)
        self.barrier_count = 0
        self.slots: Slots | None = None  # the mbarriers of the TMA fold being built
        self.roles = None  # the program's warp roles (accy.lowering.warp_roles), where it has them
        self.walker = walker
        self.registers = registers
        self.scratch = scratch
        self.staging = staging
        self.dots = dots
        self.num_stages = num_stages
        self.shared_bytes = shared_bytes
        self.stage_arrays: dict = {}  # element type -> the shared array of pipelined folds' stages
        self.stage_ops: dict = {}  # element type -> its shared op
        self.stage_array = None  # the staging array of the fold being built
        self.stage_align: dict = {}  # element type -> its staging array's alignment past 16 bytes

    def declare_sizes(self) -> None:
        """Each staging array declared at the size of its largest use."""
        for dtype, array in self.stage_arrays.items():
            self.stage_ops[dtype].attrs = SharedAttrs(name=array.name, dtype=dtype, count=array.count,
                                                      align=self.stage_align.get(dtype, 16))
        if self.barriers is not None:
            array, op = self.barriers
            op.attrs = SharedAttrs(name=array.name, dtype=u64, count=self.barrier_count)

    def plan(self, op: Op, dots: list):
        """For a fold whose dots take operands loaded per trip (Deferred, computed from the
        trip's index and values from before the loop alone): (stages, the staging array's
        element type, the stage's size, per dot its staging plan and offset in a stage, per
        deferred operand (dot, role, load, its steps, base, its staged rows)); None where nothing
        is to be pipelined or only one stage fits."""
        stages = self.num_stages
        region = op.regions[0]
        if stages < 2 or not dots:
            return None
        carries = carried(region)
        types = {STAGED[kind] for _, kind, _, _, _ in dots}
        if len(types) != 1:
            return None
        (el,) = types
        # every part of a stage starts at a multiple of the span a wgmma's swizzle repeats over,
        # where one of the fold's dots runs on wgmma (the swizzle is on the address itself)
        warpgroups = any(self.dots.on_warpgroups(dot) for dot, *_ in dots)
        align = ALIGN if warpgroups else 16
        offsets, operands, size = {}, [], 0
        for dot, kind, plan, a, b_ in dots:
            if dot.block is not region:
                continue
            mine = [(role, x, base, rows) for role, x, base, rows in (
                (0, a, plan.a_base, plan.a_rows), (1, b_, plan.b_base, plan.b_rows))
                if isinstance(x, Deferred) and prefetchable(x.op, region, carries)]
            if not mine:
                continue
            offsets[dot] = (size, plan)
            operands += [(dot, role, x, size + base, rows) for role, x, base, rows in mine]
            size += aligned(plan.size, el.itemsize, align)
        if not operands:
            return None
        # (what the program holds besides: its scratch, other folds' stages, A's staged before a
        # fold for its wgmma, and every aligned array's padding)
        budget = self.shared_bytes - self.scratch.bytes() - sum(
            a.count * a.dtype.itemsize for t, a in self.stage_arrays.items() if t != el) - self.dots.held_bytes()
        if warpgroups:
            budget -= ALIGN * (len(self.stage_arrays) + len(self.scratch.pool) + 1)
        while stages > 1 and stages * size * el.itemsize > budget:
            stages -= 1
        if stages < 2:
            return None
        copies = {}
        if self.bulk is not None and all(self.dots.on_warpgroups(dot) for dot in offsets):
            copies = {k: c for k, (_, _, x, _, rows) in enumerate(operands)
                      if (c := self.bulk.plan(x, rows)) is not None}
        return stages, el, size, offsets, operands, copies

    def prefetch(self, region, plan, trip, stage, tma: bool, empty_parity=None) -> None:
        """Issue the copies of the Deferred operands of trip ``trip`` (its index) into stage
        ``stage``: with ``tma``, thread 0's TMA copies (none where a producer warpgroup makes
        them) after the stage's readers arrived on its 'empty' mbarrier in the phase of parity
        ``empty_parity`` (None: the stage is fresh); else every thread's ``cp.async``."""
        stages, el, size, offsets, operands, copies = plan
        core = self.core
        array = self.stage_array
        saved = dict(core.env)
        scopes = core.scopes
        core.scopes = scopes[:1] + [{}]  # nothing recorded inside the loop body is visible here
        try:
            core.env[region.args[0]] = trip
            loads = {x.op for _, _, x, _, _ in operands}
            for o in sorted({o for load in loads for o in computing(load, region)}, key=region.ops.index):
                self.walker.op(o)
            bulk = []
            for k, (dot, role, x, base, rows) in enumerate(operands):
                fresh = Deferred(x.op, tuple(core.env[v] for v in x.op.operands), x.steps, x.shape, x.transposed)
                at = core.add(core.mul(stage, size), base)
                if tma:
                    bulk.append((fresh, copies[k], at, rows))
                else:
                    self.copy(fresh, array, at, rows)
            if tma:
                self.bulk_copies(bulk, array, stage, empty_parity)
        finally:
            core.scopes = scopes
            core.env.clear()
            core.env.update(saved)

    def copy(self, x: Deferred, array, at, rows) -> None:
        """Every thread's copies of operand ``x`` (cp.async where they can run, else loads and stores)."""
        staging = self.staging
        if not staging.copy(x, array, at, rows):
            staging.fill(array, staging.load_now(x), at, rows, x.transposed, STAGED_KIND[array.dtype])

    def bulk_copies(self, bulk: list, array, stage, empty_parity) -> None:
        """A stage's TMA copies by thread 0: it waits until the stage's readers are done with it
        (its 'empty' mbarrier), arrives on its 'full' mbarrier expecting their bytes, then
        copies (see :mod:`.bulk_copies`)."""
        core = self.core
        slots = self.slots
        bars = slots.array
        expected = stage_bytes(x for x, _, _, _ in bulk)

        def issue():
            if empty_parity is not None:
                core.record("mbarrier_wait", [core.add(stage, slots.empty), empty_parity], MbarrierAttrs(shared=bars))
            full = core.traced(core.add(stage, slots.full))
            core.record("mbarrier_arrive", [full, core.const(expected)], MbarrierAttrs(shared=bars))
            for x, copies, at, rows in bulk:
                self.bulk.issue(x, copies, array, at, rows, bars, full)

        self.b.if_(self.b.eq(core.tid, 0), lambda inner: core.within(inner, issue) and None)

    def init_barriers(self, stages: int) -> None:
        """Thread 0 sets up a fold's mbarriers, between barriers (the previous fold's waits are
        done, and every thread sees them set up): per stage a 'full' one (slot ``s``: thread 0's
        arrival and the stage's TMA bytes) and an 'empty' one (slot ``stages + s``: every
        thread's arrival once done reading the stage)."""
        core, b = self.core, self.b
        if self.barriers is None:
            self.barriers = core.launch.declare_scratch(u64, 1, "bars")
        self.barrier_count = max(self.barrier_count, 2 * stages)
        bars = self.barriers[0].name

        def init():
            for s in range(stages):
                core.record("mbarrier_init", [core.const(s)], MbarrierInitAttrs(shared=bars, count=1))
                core.record("mbarrier_init", [core.const(stages + s)], MbarrierInitAttrs(shared=bars, count=self.T))

        b.barrier()
        b.if_(b.eq(core.tid, 0), lambda inner: core.within(inner, init) and None)
        b.barrier()

    def fold(self, op: Op, start, stop, inits, layouts, plan) -> None:
        """The fold as a software pipeline (:meth:`pipelined`); where TMA can copy every operand,
        two versions of it, the launch's ready flags choosing: by TMA where it could describe
        every tensor, by ``cp.async`` otherwise (so neither loop carries the other's code)."""
        stages, el, size, offsets, operands, copies = plan
        core, registers = self.core, self.registers
        array = self.stage_arrays.get(el)  # one array for every pipelined fold (they run one after another)
        if array is None:
            array, self.stage_ops[el] = core.launch.declare_scratch(el, 1, "stage")
            self.stage_arrays[el] = array
        array.count = max(array.count, stages * size)
        self.stage_array = array
        if any(self.dots.on_warpgroups(dot) for dot in offsets):
            self.stage_align[el] = ALIGN
        flat_inits = tuple(registers.flatten(inits, layouts))
        if copies and len(copies) == len(operands):
            roles = self.roles if self.roles is not None and op in self.roles.folds else None
            ready = self.bulk.all_ready([c for _, c in sorted(copies.items())])
            if roles is not None:
                roles.plans[op] = (stages, size, array, [(x, copies[k], base, rows) for k, (_, _, x, base, rows)
                                                         in enumerate(operands)])
            versions = [lambda: self.pipelined(op, start, stop, flat_inits, layouts, plan, True, roles),
                        lambda: self.pipelined(op, start, stop, flat_inits, layouts, plan, False, roles)]
            flat = self.b.if_(ready, *(lambda inner, v=v: core.within(inner, lambda: tuple(v())) for v in versions))
            flat = flat if isinstance(flat, tuple) else (flat,)
        else:
            flat = self.pipelined(op, start, stop, flat_inits, layouts, plan, False, None)
        self.scratch.dirty = True
        registers.unflatten(op.results, list(flat), layouts)

    def pipelined(self, op: Op, start, stop, flat_inits, layouts, plan, tma: bool, roles) -> list:
        """The fold as a software pipeline; its results, flat.  By ``cp.async``: a prologue issues
        the copies of the first ``stages - 1`` trips; each trip waits for its own (at most
        ``stages - 2`` groups left in flight), meets its block at a barrier (every thread's
        copies landed, every thread done with the stage about to be refilled), issues the copies
        of the trip ``stages - 1`` ahead into that stage, then computes from its own stage.  By
        TMA (``tma``): each trip waits on its stage's 'full' mbarrier and, done, arrives on its
        'empty' one, and thread 0 (or, with ``roles``, the producer warpgroup) refills a stage
        once it is empty: no barrier a trip."""
        stages, el, size, offsets, operands, copies = plan
        core, registers = self.core, self.registers
        region = op.regions[0]
        step = op.attrs.step
        warpgroups = any(self.dots.on_warpgroups(dot) for dot in offsets)
        b = self.b
        if tma and roles is not None:  # set up before the roles split (warp_roles)
            self.slots = Slots(roles.barriers[0].name, roles.full(op), roles.empty(op), True)
        elif tma:
            self.init_barriers(stages)
            self.slots = Slots(self.barriers[0].name, 0, stages, False)
        for s in range(stages - 1):
            trip = core.add(start, s * step)
            if not (tma and self.slots.producer):
                b.if_(b.lt(trip, stop), lambda inner, s=s, trip=trip: core.within(
                    inner, lambda: self.prefetch(region, plan, trip, s, tma)) and None)
            if not tma:
                b.async_commit()

        def body(inner, i, carries):
            with core.region(inner):
                if tma:
                    *accs, stage, refill, parity, last_parity = carries
                else:
                    *accs, stage, refill = carries
                b = self.b
                # the stage carried is in [0, stages): said so, the ranges prove each access to
                # it inside the staging array (no check per ldmatrix)
                clamp = lambda s: b.max(b.min(s, stages - 1), 0)  # noqa: E731
                if tma:  # the stage's bytes (and its copier's arrival) have come
                    stage = clamp(stage)
                    core.record("mbarrier_wait", [core.add(stage, self.slots.full), parity],
                                MbarrierAttrs(shared=self.slots.array))
                else:
                    b.async_wait(stages - 2)
                if warpgroups:  # the copies landed are seen by the wgmma's (asynchronous) reads
                    b.fence_proxy_async()
                if not tma:
                    b.barrier()
                    self.scratch.dirty = False
                    stage = clamp(stage)
                ahead = core.add(i, (stages - 1) * step)
                refill = b.max(b.min(refill, stages - 1), 0)  # likewise (the stage the trip before read)
                if not (tma and self.slots.producer):
                    empty = last_parity if tma else None
                    b.if_(b.lt(ahead, stop), lambda inner: core.within(
                        inner, lambda: self.prefetch(region, plan, ahead, refill, tma, empty)) and None)
                if not tma:
                    b.async_commit()
                for dot, (offset, dot_plan) in offsets.items():
                    base = core.add(core.mul(stage, size), offset)
                    self.dots.pipelined[dot] = (self.stage_array, core.add(base, dot_plan.a_base),
                                                core.add(base, dot_plan.b_base))
                core.env[region.args[0]] = i
                registers.unflatten(region.args[1:], accs, layouts)
                results = self.walker.walk(region)
                b = self.b
                if tma:  # done reading the stage (each dot waited for its wgmma)
                    core.record("mbarrier_arrive", [core.add(stage, self.slots.empty), core.const(0)],
                                MbarrierAttrs(shared=self.slots.array))
                wraps = b.eq(stage, stages - 1)
                following = b.select(wraps, 0, b.add(stage, 1))
                # a stage's mbarriers complete a phase per use: the parity waited for flips each
                # round; the stage refilled next trip is this one, whose 'empty' phase is this parity
                flipped = (b.select(wraps, b.sub(1, parity), parity), parity) if tma else ()
                return tuple(registers.flatten(results, layouts)) + (following, stage) + flipped

        # the first refill's stage (stages - 1) is fresh: its 'empty' phase of parity 1, the one
        # before phase 0, counts as complete
        carried_init = (core.const(0), core.const(stages - 1)) + ((core.const(0), core.const(1)) if tma else ())
        flat = self.b.loop(start, stop, step, flat_inits + carried_init, body)
        for dot in offsets:
            self.dots.pipelined.pop(dot, None)
        if tma:  # the block meets after the fold: no thread refills a stage another still reads
            self.b.barrier()
        else:
            self.b.async_wait(0)
            if roles is not None:  # done with every stage: the producer waits for this before the next fold's fills
                for s in range(stages):
                    core.record("mbarrier_arrive", [core.const(roles.empty(op) + s), core.const(0)],
                                MbarrierAttrs(shared=roles.barriers[0].name))
        return list(flat[:-len(carried_init)])
