"""Warp specialisation (sm_90a): a producer warpgroup copies a program's pipelined operands by
TMA while the program's own warps, its consumers, compute.

The compiler decides, without an option: a program is specialised where it has a fold at its
top level whose every dot reads only tensors' boxes (``p.x.load_tile``) that the producer can
address from the program's indices and the trip's (:meth:`WarpRoles.choose`), at ``num_stages``
of 2 or more, on warps that form warpgroups, and not persistent.  That is where the producer
has whole stages to fill and the consumers nothing else to wait for; elsewhere thread 0 issues
the copies among the consumers (:mod:`.software_pipeline`).

The block gets four more warps.  Thread 0 sets up every specialised fold's mbarriers before
the roles part (a 'full' one per stage: the producer's arrival and the stage's bytes; an
'empty' one: every consumer's arrival once done reading it); then a *roles* ``if`` splits
the block: the consumers (the program's own warps, the first) run the program as ever, their
barriers named so the producer is not waited for, each trip waiting for its stage to be full
and arriving on its empty barrier when done; the producer warpgroup gives up registers
(``setmaxnreg``) and one of its threads walks each specialised fold's trips, waiting for a stage
to be empty before filling it.  The consumers take the registers (:func:`registers`).  A tensor
the launch cannot describe is still copied by the consumers with ``cp.async``."""

from __future__ import annotations

from ..dsl.ir import Op, Value
from ..dsl.ops import BarrierAttrs, MbarrierAttrs, MbarrierInitAttrs, RegisterAction, SetmaxnregAttrs
from ..dsl.traced import Traced
from ..dsl.types import TileType, u64
from .bulk_copies import TensorCopies, stage_bytes
from .rebuild import Part, Rebuild

PRODUCER_THREADS = 128  # one warpgroup
PRODUCER_REGISTERS = 40
REGISTER_FILE = 65536  # 32-bit registers per SM (and at most per block)


def registers(consumers: int, blocks: int = 1) -> tuple[int, int]:
    """(the kernel's registers per thread, the consumers' after ``setmaxnreg``) for ``blocks``
    resident blocks an SM: the file shared by every thread, the producer's given up to the
    consumers, multiples of 8 (the ISA's)."""
    threads = consumers + PRODUCER_THREADS
    kernel = min(248, REGISTER_FILE // (threads * blocks) // 8 * 8)
    pool = kernel * threads - PRODUCER_REGISTERS * PRODUCER_THREADS
    return kernel, min(248, pool // consumers // 8 * 8)


def _loaded(v: Value):
    """The tile_load a dot operand comes from through reshapes and transposes, or None."""
    op = v.op
    while op is not None and op.opcode in ("reshape", "trans"):
        op = op.operands[0].op
    return op if op is not None and op.opcode == "tile_load" else None


class WarpRoles(Part):
    """The specialised folds of one program (``folds``: each's index; the consumers' plans in
    ``plans``) and the producer's side (:meth:`producer`)."""

    def __init__(self, core: Rebuild, bulk: TensorCopies, graph, num_stages: int, blocks: int = 1):
        super().__init__(core)
        self.blocks = blocks  # the resident blocks an SM the kernel's registers are shared by
        self.bulk = bulk
        # the kernel's scalars: its parameters and what its top level computes from them
        self.kernel_values = set(graph.body.args) | {r for op in graph.body.ops for r in op.results}
        self.stages = num_stages  # the most a fold takes: each fold's slots are 2 * this many
        self.folds: dict[Op, int] = {}
        self.plans: dict[Op, tuple] = {}
        self.barriers = None  # (array, its shared op)
        self.filled = None  # the fold the producer filled last: (op, start, stop, stages, ready)

    def choose(self, region, persistent: bool) -> bool:
        """Find the folds to specialise (see the module's doc); whether there are any."""
        if persistent or self.stages < 2:
            return False
        known = set(region.args) | self.kernel_values
        for op in region.ops:
            if op.opcode == "fold" and self._feedable(op, known):
                self.folds[op] = len(self.folds)
            known.update(r for r in op.results if not isinstance(r.type, TileType) and not op.regions
                         and self._scalar(op, known))
        return bool(self.folds)

    @staticmethod
    def _scalar(op: Op, known: set) -> bool:
        return op.opdef.pure and not any(isinstance(r.type, TileType) for r in op.results) and all(
            v in known for v in op.operands)

    def _feedable(self, fold: Op, known: set) -> bool:
        """Every operand ``fold``'s dots load per trip is a tensor's box at an origin of known
        scalars and the trip (the others, computed or loaded before the fold, are the
        consumers'), and there is one."""
        body = fold.regions[0]
        dots = [o for o in body.ops if o.opcode == "dot"]
        if not dots or not all(v in known for v in fold.operands[:2]):
            return False
        reachable = known | {body.args[0]}  # (the producer computes nothing of the body but the trip)
        fed = 0
        for dot in dots:
            for v in dot.operands[:2]:
                load = _loaded(v)
                if load is None or load.block is not body:
                    continue
                found = self.bulk.tensor_box(load)
                if found is None or not all(_leaves(e) <= reachable for e in found.origin):
                    return False
                fed += 1
        return fed > 0

    # -- slots: fold f's full mbarriers from 2 f S, its empty ones S after -------------------
    def full(self, fold: Op) -> int:
        return 2 * self.stages * self.folds[fold]

    def empty(self, fold: Op) -> int:
        return self.full(fold) + self.stages

    def set_up(self) -> None:
        """Thread 0 sets up every specialised fold's mbarriers; the whole block meets after."""
        core, b = self.core, self.b
        self.barriers = core.launch.declare_scratch(u64, 2 * self.stages * len(self.folds), "roles")
        bars = self.barriers[0].name

        def init():
            for fold in self.folds:
                for s in range(self.stages):
                    core.record("mbarrier_init", [core.const(self.full(fold) + s)],
                                MbarrierInitAttrs(shared=bars, count=1))
                    core.record("mbarrier_init", [core.const(self.empty(fold) + s)],
                                MbarrierInitAttrs(shared=bars, count=self.T))

        b.if_(b.eq(core.tid, 0), lambda inner: core.within(inner, init) and None)
        b.barrier()

    def consumers(self, walk) -> None:
        """The consumers' side: their registers taken, then ``walk()``, the program (whose
        thread index comes through the setmaxnreg)."""
        core = self.core
        kernel, consumers = registers(self.T, self.blocks)
        if consumers > kernel:  # (one consumer warpgroup has the file's most already)
            core.tid = Traced(core.record("setmaxnreg", [core.tid], SetmaxnregAttrs(
                action=RegisterAction.INC, count=consumers)).result)
        walk()

    def producer(self, region, walker) -> None:
        """The producer's side: its registers given up; its first thread computes the program's
        scalars and walks each specialised fold's trips, filling stages as they empty."""
        core = self.core
        core.tid = Traced(core.record("setmaxnreg", [core.tid], SetmaxnregAttrs(
            action=RegisterAction.DEC, count=PRODUCER_REGISTERS)).result)
        b = self.b

        self.filled = None

        def walk():
            for op in region.ops:
                if op in self.plans:
                    self._drain()
                    self._fill(op)
                elif not op.regions and all(v in core.env for v in op.operands) and (
                        op.opdef.pure and not any(isinstance(r.type, TileType) for r in op.results)):
                    core.copy(op)

        b.if_(b.eq(core.tid, self.T), lambda inner: core.within(inner, walk) and None)

    def _drain(self) -> None:
        """Before filling the next fold's stages (the same arrays), wait until the consumers
        released every stage of the fold filled before: each stage's last phase of its 'empty'
        mbarrier (stage ``s`` was filled ``ceil((trips - s) / stages)`` times); where that fold
        ran by ``cp.async`` (its tensors not described), the one phase the consumers complete
        on each after it."""
        if self.filled is None:
            return
        core = self.core
        fold, start, stop, stages, ready = self.filled
        step = fold.attrs.step
        bars = self.barriers[0].name

        def drain():  # (where the fold ran by TMA)
            b = self.b
            trips = b.max(b.floor_div(b.add(b.sub(stop, start), step - 1), step), 0)
            for s in range(stages):
                uses = b.floor_div(b.add(trips, stages - 1 - s), stages)
                parity = b.bitwise_and(b.sub(uses, 1), 1)
                b.if_(b.gt(uses, 0), lambda inner, s=s, parity=parity: core.within(inner, lambda: core.record(
                    "mbarrier_wait", [core.const(self.empty(fold) + s), parity], MbarrierAttrs(shared=bars))) and None)

        def drained():  # by cp.async, the consumers arrived once on each stage's 'empty' mbarrier after the fold
            for s in range(stages):
                core.record("mbarrier_wait", [core.const(self.empty(fold) + s), core.const(0)],
                            MbarrierAttrs(shared=bars))

        self.b.if_(ready, lambda inner: core.within(inner, drain) and None,
                   lambda inner: core.within(inner, drained) and None)

    def _fill(self, fold: Op) -> None:
        """The producer's loop over ``fold``'s trips: per trip, wait until its stage is empty
        (a fresh stage's phase of parity 1 counts as complete), arrive on its full mbarrier
        expecting the bytes of the tensors the launch described, and copy them."""
        core, bulk = self.core, self.bulk
        stages, size, array, operands = self.plans[fold]
        bars = self.barriers[0].name
        region = fold.regions[0]
        start, stop = (core.env[v] for v in fold.operands[:2])
        b = self.b
        # the consumers run this fold by TMA where the launch could describe every tensor
        ready = bulk.all_ready([copies for _, copies, _, _ in operands])
        expected = stage_bytes(x for x, _, _, _ in operands)

        def body(inner, j, carries):
            stage, parity = carries
            with core.region(inner):
                b = self.b
                stage = b.max(b.min(stage, stages - 1), 0)
                core.record("mbarrier_wait", [core.add(stage, self.empty(fold)), parity], MbarrierAttrs(shared=bars))
                full = core.add(stage, self.full(fold))
                core.record("mbarrier_arrive", [full, core.const(expected)], MbarrierAttrs(shared=bars))
                core.env[region.args[0]] = j
                for x, copies, base, rows in operands:
                    bulk.issue(x, copies, array, core.add(core.mul(stage, size), base), rows, bars, full)
                wraps = b.eq(stage, stages - 1)
                return b.select(wraps, 0, b.add(stage, 1)), b.select(wraps, b.sub(1, parity), parity)

        b.if_(ready, lambda inner: core.within(inner, lambda: b.loop(
            start, stop, fold.attrs.step, (core.const(0), core.const(1)), body)) and None)
        self.filled = (fold, start, stop, stages, ready)

    def name_barriers(self, block) -> None:
        """The consumers' barriers wait for the consumers alone (named barrier 1)."""
        for op in block.walk():
            if op.opcode == "barrier":
                op.attrs = BarrierAttrs(threads=self.T)


def _leaves(e) -> set:
    """The graph values an expression reads."""
    if isinstance(e, tuple):
        return _leaves(e[1]) | _leaves(e[2])
    return {e} if isinstance(e, Value) else set()
