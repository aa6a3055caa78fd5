"""The profile's latency model: per-warp clocks kept by event while the emulator runs a
profiled launch, and the latency bound they give (:class:`LatencyBound`).

The roofline (:mod:`.profile`) sees throughput only: a matmul whose software pipeline has
one stage and the same one with four stages do the same work.  This model sees the overlap.

What is timed (in cycles of the GPU's clock, each warp on a clock of its own, whatever order
the emulator runs the warps in):

* **issue**: every warp instruction advances its warp's clock by ``issue`` (1 cycle); a
  block's instructions are laid out once, statically (:class:`BlockPlan`), with the loads'
  latencies: a ``ld.global`` (or generic ``ld``) is ready ``global_memory`` cycles after its
  issue, an ``ld.shared``/``ldmatrix`` ``shared`` cycles after, and the warp waits for it at
  the first later instruction that names one of its destination registers (in its basic block
  by a static layout; in a later block by the register's name, per warp);
* **asynchronous ops** (:class:`AsyncKind`) record a completion time: issue time + queueing
  on the resource they occupy (:class:`Resource`) + occupancy + latency.  Resources are the
  SM's, divided among the blocks resident on it (:class:`Share`): the **tensor pipe**
  (``wgmma.mma_async``: its flops over the block's share of the wgmma peak per clock, a
  ``mma.sync`` likewise at its peak; the pipe serves one op at a time) and the **memory
  path** (``cp.async`` and bulk copies: their bytes over the block's share of the SM's L2
  bandwidth, then ``global_memory`` cycles);
* **waits join**: ``cp.async.wait_group N`` / ``wait_all`` set the warp's clock to the max of
  its own and the completion of the groups that must be done (per warp: a group completes
  when its latest copy does); ``wgmma.wait_group N`` likewise for the warpgroup's wgmma
  groups; a ``mma.sync``'s result is waited for at the next block barrier (or the warp's
  end; register dependences between mma.sync are not followed); ``bar.sync`` /
  ``barrier.sync`` set every released warp of a block to the latest arrival + ``barrier``;
  every wgmma instruction (``.sync.aligned``) first joins its warpgroup's four warps.

A block's **critical path** is its slowest warp's clock at the end (and anything still in
flight).  The launch's latency bound is waves x the mean critical path of the blocks run,
where waves = ceil(the busiest SM's blocks / the blocks resident at once) (:class:`Share`):
the estimate is the max of this and the roofline's throughput bound, plus the launch latency.

Hooks for asynchronous work landing elsewhere (TMA ``cp.async.bulk.tensor`` on an mbarrier,
``mbarrier.try_wait``): an instruction handler calls, on the launch's counters when profiling
(``if T.prof is not None:``),

* ``T.prof.async_issue(AsyncKind.BULK_COPY, T, where, amount, line=site.line, barrier=addr)``:
  the threads ``where`` (indices into ``T``) issue an op of ``amount`` bytes (or flops: a
  tensor op) each, at the PTX line ``line``; with ``barrier`` (the shared addresses of an
  mbarrier, per thread) its completion is attached to that mbarrier (``complete_tx``): the
  barrier completes when its latest attached op does;
* ``T.prof.barrier_wait(T, where, addr, line=site.line)``: the threads ``where`` waited on the
  mbarrier at ``addr`` successfully (``mbarrier.try_wait`` / ``test_wait`` returning true):
  their warps' clocks join the barrier's completion.

Both are recorded and timed at the end of their basic block, in instruction order (the line
places the event in its block).  A block's copies are split evenly over its ``cp.async``
instructions.  Only the latest completion attached to a mbarrier is kept (phases are not
told apart).

Approximations: the per-block resource queues serve warps in the order the emulator reports
them (every warp of a block together in lockstep); registers are not known to the emulator,
so occupancy is from threads, blocks and shared memory only; every global access is charged
DRAM latency (no L1/L2 hit latency); ``issue`` does not share the SM's schedulers between
warps (the roofline's issue ceiling does).
"""

from __future__ import annotations

import enum
import math

import attrs
import numpy as np

from .compiler import _register_names


class AsyncKind(enum.Enum):
    """An asynchronous operation, by the resource it occupies."""

    CP_ASYNC = "cp.async"  # the memory path; per-thread groups (cp.async.commit_group / wait_group)
    BULK_COPY = "cp.async.bulk"  # TMA: the memory path; completes on an mbarrier
    WGMMA = "wgmma"  # the tensor pipe; warpgroup groups (wgmma.commit_group / wait_group)
    MMA_SYNC = "mma.sync"  # the tensor pipe; waited for at the end of its block


class Resource(enum.Enum):
    TENSOR = "tensor pipe"
    MEMORY = "memory path"


RESOURCE = {AsyncKind.CP_ASYNC: Resource.MEMORY, AsyncKind.BULK_COPY: Resource.MEMORY,
            AsyncKind.WGMMA: Resource.TENSOR, AsyncKind.MMA_SYNC: Resource.TENSOR}


class Stall(enum.Enum):
    """What a warp's clock waited for (the report's breakdown of a critical path)."""

    COPIES = "copies"  # cp.async / bulk-copy waits (cp.async.wait_group, mbarrier waits)
    TENSOR = "tensor pipe"  # wgmma.wait_group, mma.sync results
    BARRIER = "barriers"  # bar.sync joins and their cost, warpgroup joins
    LOADS = "loads"  # synchronous ld.global / ld.shared / ldmatrix latency


@attrs.frozen
class Latencies:
    """A GPU's latencies (cycles) and its SM's memory path (bytes per clock), with sources."""

    global_memory: float  # a DRAM access: ld.global, cp.async, TMA
    l2: float  # an L2 hit (reported; the model charges global_memory)
    shared: float  # ld.shared / ldmatrix
    mma_sync: float  # a mma.sync m16n8k16's latency
    wgmma: float  # a wgmma's latency beyond its time on the pipe
    barrier: float  # bar.sync once every warp is there
    memory_path: float  # bytes per clock one SM's copies move (its share of the L2 bandwidth)
    source: str
    issue: float = 1.0  # cycles a warp instruction takes its warp


# Luo et al., "Benchmarking and Dissecting the Nvidia Hopper GPU Architecture" (IPDPS 2024,
# arXiv:2402.13499), memory latency by pointer chasing on an H800 (sm_90, the H100's SM): global
# memory about 479 cycles, L2 about 263, shared memory about 29 (A100: 466 / 261 / 29; the
# microbenchmark and the numbers as recalled from its latency table; the brief's 470-600 and
# ~260 agree).  wgmma (same paper, section on wgmma): its latency on m64nNk16 grows with N from
# about 128 cycles, i.e. about the op's pipe time plus a fixed tail; the tail of 32 cycles here is
# an estimate.  mma.sync m16n8k16 f16/bf16: about 33 cycles on Ampere (Sun et al., "Dissecting
# Tensor Cores via Microbenchmarks", IEEE TPDS 2022, arXiv:2206.02874); Hopper taken alike
# (estimate).  bar.sync: about 20 cycles once all warps arrive (estimate; Jia et al., "Dissecting
# the NVIDIA Volta GPU Architecture via Microbenchmarking", arXiv:1804.06826, measure tens of cycles
# for __syncthreads).  The memory path: the A100 whitepaper's L2 read bandwidth, 5120 bytes/clock
# for 108 SMs, 47.4 bytes/clock per SM; Hopper taken at the same per-SM figure (estimate; at 1.98 GHz
# x 132 SMs that is 12.4 TB/s, the L2 bandwidth usually quoted for the H100 SXM).
HOPPER = Latencies(global_memory=479, l2=263, shared=29, mma_sync=33, wgmma=32, barrier=20, memory_path=47.4,
                   source="Luo et al. 2024 (arXiv:2402.13499): DRAM ~479, L2 ~263, shared ~29 cycles on an H800, "
                          "wgmma latency ~ pipe time + a tail (tail 32: estimate); Sun et al. 2022 (arXiv:2206.02874)"
                          ": mma.sync ~33; bar.sync 20 (estimate); memory path 47.4 B/clk/SM (the A100 whitepaper's "
                          "L2 5120 B/clk over 108 SMs, taken for Hopper: estimate)")
AMPERE = Latencies(global_memory=466, l2=261, shared=29, mma_sync=33, wgmma=32, barrier=20, memory_path=47.4,
                   source="Luo et al. 2024 (arXiv:2402.13499): DRAM ~466, L2 ~261, shared ~29 cycles on an A100; "
                          "Sun et al. 2022 (arXiv:2206.02874): mma.sync m16n8k16 ~33; bar.sync 20 (estimate); "
                          "memory path: the A100 whitepaper's L2 5120 B/clk over 108 SMs")

# what an SM holds (the occupancy rules): threads, blocks, shared memory; per arch
_SM_SHARED = {"sm_80": 167936, "sm_86": 102400, "sm_89": 102400, "sm_90": 233472}
_SM_WARPS = {"sm_86": 48, "sm_89": 48}
_SM_BLOCKS = {"sm_86": 16, "sm_89": 24}
SHARED_RESERVED = 1024  # per block, taken by the system
SHARED_UNIT = 128


def resident_blocks(arch: str, threads_per_block: int, shared_bytes: int) -> tuple[int, str]:
    """Blocks one SM holds at once from threads, blocks and shared memory (registers unknown to
    the emulator), and what limits it (the CUDA occupancy rules, as ``accy info`` applies them)."""
    base = arch.rstrip("a")
    warps = max(1, -(-threads_per_block // 32))
    shared = -(-(shared_bytes + SHARED_RESERVED) // SHARED_UNIT) * SHARED_UNIT
    limits = {"warps": _SM_WARPS.get(base, 64) // warps, "blocks": _SM_BLOCKS.get(base, 32),
              "shared memory": _SM_SHARED.get(base, 167936) // shared}
    limiter = min(limits, key=lambda k: limits[k])
    return max(1, limits[limiter]), limiter


@attrs.frozen
class Share:
    """What one resident block gets of its SM per clock, and how many share it."""

    resident: int  # blocks resident at once on the busiest SM
    limiter: str  # what bounds occupancy ("warps", "blocks", "shared memory") or "grid" (too few blocks)
    tensor: dict  # Pipe -> flops per clock for one block
    memory: float  # bytes per clock for one block
    latencies: Latencies
    clock_hz: float

    @classmethod
    def of(cls, gpu, arch: str, blocks: int, threads_per_block: int, shared_bytes: int) -> "Share":
        fit, limiter = resident_blocks(arch, threads_per_block, shared_bytes)
        busiest = max(1, -(-blocks // gpu.sms))
        resident = min(fit, busiest)
        if busiest < fit:
            limiter = "grid"
        per_clock = gpu.sms * gpu.clock_hz * resident
        tensor = {p: v / per_clock for p, v in gpu.peaks.items()}
        lat = gpu.latencies if getattr(gpu, "latencies", None) is not None else HOPPER
        return cls(resident, limiter, tensor, lat.memory_path / resident, lat, gpu.clock_hz)


# -- the static layout of a basic block --------------------------------------------------------------


class Event(enum.Enum):
    LOAD_USE = 0  # the first instruction naming a register a load of an earlier block writes
    CP_COPY = 1
    CP_COMMIT = 2
    CP_WAIT = 3
    MMA_SYNC = 4
    WG_MMA = 5
    WG_COMMIT = 6
    WG_WAIT = 7
    BAR = 8
    WG_JOIN = 9  # another wgmma instruction: the warpgroup's warps join
    DYNAMIC = 10  # a hook's event (async_issue, barrier_wait), placed by its line


@attrs.frozen
class BlockPlan:
    """A basic block's instructions laid out on a warp's clock: ``at[j]`` the cycle instruction j
    issues at (from the block's start, with its loads' latencies), ``at[-1]`` the block's end;
    ``events`` the (index, Event, value) the clocks act on; ``lines`` PTX line -> index."""

    at: np.ndarray
    events: tuple
    lines: dict
    copies: int  # cp.async instructions
    load_stall: float  # cycles of at[-1] spent waiting for loads
    names: dict  # register -> the first instruction naming it (where a load of an earlier block is waited for)
    carry: dict  # register -> the cycle (from the block's start) a load left unused here is ready


_SHARED_LOADS = ("ldmatrix",)


def _load_latency(ins, lat: Latencies) -> float | None:
    op, mods = ins.opcode, ins.mods
    if op in ("ld", "ldu"):
        if any(m.startswith("shared") for m in mods):
            return lat.shared
        if "global" in mods or not any(m in ("param", "const", "local") or m.startswith("param") for m in mods):
            return lat.global_memory
        return None
    if op in _SHARED_LOADS:
        return lat.shared
    return None


def plan_block(instructions, lat: Latencies, classify) -> BlockPlan:
    """The :class:`BlockPlan` of a block's ``instructions`` (``classify``: opcode, mods -> Cost)."""
    n = len(instructions)
    at = np.zeros(n + 1)
    events = []
    lines: dict = {}
    ready: dict = {}  # register -> cycle its load's value is there
    first: dict = {}
    t = stall = 0.0
    copies = 0
    for j, ins in enumerate(instructions):
        lines.setdefault(ins.line, j)
        names = _register_names(ins.operands)
        if ins.guard:
            names.add(ins.guard[0])
        for r in names:
            first.setdefault(r, j)
        if ready:
            need = max((ready.pop(r) for r in names if r in ready), default=0.0)
            if need > t:
                stall += need - t
                t = need
        at[j] = t
        t += lat.issue
        op, mods = ins.opcode, ins.mods
        load = _load_latency(ins, lat)
        if load is not None and ins.operands:
            for r in _register_names(ins.operands[:1]):
                ready[r] = at[j] + load
        if op == "cp" and mods[:1] == ("async",):
            what = mods[1] if len(mods) > 1 else ""
            if what == "commit_group":
                events.append((j, Event.CP_COMMIT, 0))
            elif what == "wait_group":
                n_ = ins.operands[0].value if ins.operands else 0
                events.append((j, Event.CP_WAIT, int(n_)))
            elif what == "wait_all":
                events.append((j, Event.CP_WAIT, -1))
            elif what in ("ca", "cg"):
                events.append((j, Event.CP_COPY, 0))
                copies += 1
        elif op == "mma":
            cost = classify(op, mods)
            events.append((j, Event.MMA_SYNC, (cost.pipe, cost.warp_flops)))
        elif op == "wgmma":
            what = mods[0] if mods else ""
            if what == "mma_async":
                cost = classify(op, mods)
                events.append((j, Event.WG_MMA, (cost.pipe, cost.warp_flops)))
            elif what == "commit_group":
                events.append((j, Event.WG_COMMIT, 0))
            elif what == "wait_group":
                events.append((j, Event.WG_WAIT, int(ins.operands[0].value)))
            else:
                events.append((j, Event.WG_JOIN, 0))
        elif op in ("bar", "barrier") and mods[:1] != ("warp",) and "arrive" not in mods:
            events.append((j, Event.BAR, 0))
    at[n] = t
    return BlockPlan(at, tuple(events), lines, copies, stall, first, ready)


# -- the clocks -----------------------------------------------------------------------------------------

RING = 64  # groups remembered per warp (wait_group N with N < RING)


class _Groups:
    """Per-warp groups of asynchronous ops (cp.async or wgmma): the open group's latest
    completion, and the completion of each committed group (a group completes after its
    predecessors: the times are cumulative maxima)."""

    def __init__(self, nw: int):
        self.open = np.zeros(nw)
        self.last = np.zeros(nw)
        self.count = np.zeros(nw, np.int64)
        self.done = np.zeros((nw, RING))

    def add(self, W, completion) -> None:
        self.open[W] = np.maximum(self.open[W], completion)

    def commit(self, W) -> None:
        self.last[W] = np.maximum(self.last[W], self.open[W])
        self.done[W, self.count[W] % RING] = self.last[W]
        self.count[W] += 1
        self.open[W] = 0.0

    def needed(self, W, pending: int):
        """The time the groups a ``wait_group pending`` waits for are complete (-1: wait_all)."""
        if pending < 0:
            self.commit(W)
            return self.last[W]
        if pending >= RING:
            return np.zeros(len(W))
        k = self.count[W] - pending - 1
        return np.where(k >= 0, self.done[W, np.maximum(k, 0) % RING], 0.0)


@attrs.frozen
class LatencyBound:
    """The latency model's figures for a launch (cycles, then seconds)."""

    blocks: int  # blocks whose critical paths were measured
    mean_path: float  # cycles: the mean critical path of a block at the launch's share
    max_path: float
    stalls: dict  # Stall value -> the share of the critical paths spent waiting on it
    resident: int  # blocks per SM at once
    occupancy_limiter: str
    waves: int  # ceil(busiest SM's blocks / resident)
    seconds: float

    def to_dict(self) -> dict:
        return attrs.asdict(self)

    def describe(self) -> str:
        waits = ", ".join(f"{k} {v:.0%}" for k, v in self.stalls.items() if v >= 0.005)
        return (f"{self.waves} wave{'s' * (self.waves != 1)} x a block's critical path {self.mean_path:,.0f} cycles "
                f"(max {self.max_path:,.0f}; {self.resident} block{'s' * (self.resident != 1)} per SM, limited by "
                f"{self.occupancy_limiter})" + (f"; waiting on {waits}" if waits else ""))


class LatencyClocks:
    """Per-warp clocks of one profiled launch (see the module docstring).  :class:`LaunchCounters`
    calls :meth:`block` at every basic block and the async hooks in between; a block's events
    are timed when the next block starts (its dynamic events are known then)."""

    def __init__(self, share: Share, classify):
        self.share = share
        self.lat = share.latencies
        self.classify = classify
        self.plans: dict = {}
        self.functions = None
        self._batch = None
        self._pending = None  # (plan, W, dynamic events) of the block running now
        self._wkey = None
        self._W = None
        self.paths: list = []
        self.stall_sums = {s: 0.0 for s in Stall}

    def bind(self, functions: dict, fn_names: dict) -> None:
        self.functions, self.fn_names = functions, fn_names

    # -- batches --------------------------------------------------------------------------------------
    def _begin(self, T) -> None:
        self.finish()
        self._batch = T.copies
        nw = T.nwkeys
        self.nwarps = T.nwarps
        self.clock = np.zeros(nw)
        self.stall = {s: np.zeros(nw) for s in Stall}
        self.cp = _Groups(nw)
        self.wg = _Groups(nw)
        self.mma = np.zeros(nw)  # the latest mma.sync result
        ncta = -(-nw // T.nwarps)
        self.free = {Resource.TENSOR: np.zeros(ncta), Resource.MEMORY: np.zeros(ncta)}
        self.mbarriers: dict = {}  # (cta, address) -> completion
        self.loads: dict = {}  # register -> per warp, when a load of an earlier block writes it
        self.ran = np.zeros(ncta, bool)

    def finish(self) -> None:
        """Time the block in flight and close the batch: each block's critical path."""
        self._flush()
        if self._batch is None:
            return
        nw = len(self.clock)
        end = np.maximum.reduce([self.clock, self.cp.last, self.cp.open, self.wg.last, self.wg.open, self.mma])
        cta = np.arange(nw) // self.nwarps
        ncta = len(self.ran)
        path = np.zeros(ncta)
        np.maximum.at(path, cta, end)
        ran = self.ran
        if ran.any():
            self.paths.append(path[ran])
            # the critical warp of each block: its waits
            crit = np.full(ncta, -1)
            order = np.lexsort((end, cta))
            crit[cta[order]] = order  # the last of each block's warps in order is its slowest
            for s in Stall:
                self.stall_sums[s] += float(self.stall[s][crit[ran]].sum())
        self._batch = None

    # -- the hooks ------------------------------------------------------------------------------------
    def block(self, key: int, T, ids) -> None:
        if T.copies is not self._batch:
            self._begin(T)
        else:
            self._flush()
        plan = self.plans.get(key)
        if plan is None:
            blk = self.functions[self.fn_names[key >> 20]].blocks[key & 0xFFFFF]
            plan = self.plans[key] = plan_block(blk.instructions, self.lat, self.classify)
        if ids is None:
            if T.wkey is not self._wkey:
                self._wkey, self._W = T.wkey, np.unique(T.wkey)
            W = self._W
        else:
            W = np.unique(T.wkey[ids])
        if plan.events or plan.at[-1]:
            self._pending = (plan, W, [])

    def dynamic(self, kind, T, where, amount, line, barrier) -> None:
        """An event of a hook (``kind``: an AsyncKind, or None for a barrier wait) in the block now running."""
        if self._pending is None:
            return
        wk = T.wkey[where]
        W = self._pending[1]
        pos = np.searchsorted(W, wk)
        per_warp = None
        if amount is not None:
            per_warp = np.bincount(pos, weights=np.broadcast_to(np.asarray(amount, float), wk.shape), minlength=len(W))
        bars = None
        if barrier is not None:
            addr = np.broadcast_to(np.asarray(barrier, np.uint64), wk.shape)
            bars = (pos, T.cta[where], addr)
        self._pending[2].append((kind, line, np.unique(pos), per_warp, bars))

    # -- timing a block ---------------------------------------------------------------------------------
    def _flush(self) -> None:
        pending, self._pending = self._pending, None
        if pending is None:
            return
        plan, W, dyn = pending
        start = self.clock[W]
        shift = np.zeros(len(W))
        cta = W // self.nwarps
        self.ran[cta] = True
        events = list(plan.events)
        copy_bytes = None
        for k, (kind, line, who, per_warp, bars) in enumerate(dyn):
            if kind is AsyncKind.CP_ASYNC:
                copy_bytes = per_warp if copy_bytes is None else copy_bytes + per_warp
            else:
                events.append((plan.lines.get(line, len(plan.at) - 1), Event.DYNAMIC, k))
        if self.loads:
            for r in plan.names.keys() & self.loads.keys():
                events.append((plan.names[r], Event.LOAD_USE, r))
        events.sort(key=lambda e: (e[0], e[1].value))
        share = self.share
        for j, ev, value in events:
            now = start + plan.at[j] + shift
            if ev is Event.LOAD_USE:
                ready = self.loads[value]
                shift += self._join(W, now, ready[W], Stall.LOADS)
                ready[W] = 0.0
            elif ev is Event.CP_COPY:
                if copy_bytes is not None and plan.copies:
                    self.cp.add(W, self._queue(Resource.MEMORY, now, copy_bytes / (plan.copies * share.memory), cta)
                                + self.lat.global_memory)
            elif ev is Event.CP_COMMIT:
                self.cp.commit(W)
            elif ev is Event.CP_WAIT:
                shift += self._join(W, now, self.cp.needed(W, value), Stall.COPIES)
            elif ev is Event.MMA_SYNC:
                pipe, flops = value
                done = self._queue(Resource.TENSOR, now, np.full(len(W), flops / share.tensor.get(pipe, math.inf)),
                                   cta) + self.lat.mma_sync
                self.mma[W] = np.maximum(self.mma[W], done)
            elif ev in (Event.WG_MMA, Event.WG_COMMIT, Event.WG_WAIT, Event.WG_JOIN):
                shift += self._warpgroup_join(W, now)
                now = start + plan.at[j] + shift
                if ev is Event.WG_MMA:
                    pipe, flops = value
                    done = self._queue(Resource.TENSOR, now, np.full(len(W), flops / share.tensor.get(pipe, math.inf)),
                                       cta) + self.lat.wgmma
                    self.wg.add(W, self._group_max(W, done))
                elif ev is Event.WG_COMMIT:
                    self.wg.commit(W)
                elif ev is Event.WG_WAIT:
                    shift += self._join(W, now, self.wg.needed(W, value), Stall.TENSOR)
            elif ev is Event.BAR:
                latest = self._block_max(cta, now)
                shift += self._join(W, now, latest[cta] + self.lat.barrier, Stall.BARRIER)
                now = start + plan.at[j] + shift  # the warps' mma.sync results, waited for at a barrier
                shift += self._join(W, now, self._block_max(cta, self.mma[W])[cta], Stall.TENSOR)
            elif ev is Event.DYNAMIC:
                shift += self._dynamic(W, now, cta, dyn[value])
        end = start + plan.at[-1] + shift
        for r, ready in plan.carry.items():
            if r not in self.loads:
                self.loads[r] = np.zeros(len(self.clock))
            self.loads[r][W] = start + ready + shift
        if plan.load_stall:
            self.stall[Stall.LOADS][W] += plan.load_stall
        self.clock[W] = end

    def _join(self, W, now, ready, why: Stall):
        """Warps ``W`` at ``now`` wait until ``ready``: the cycles each waits (recorded under ``why``)."""
        wait = np.maximum(np.asarray(ready, float) - now, 0.0)
        if wait.any():
            self.stall[why][W] += wait
        return wait

    @staticmethod
    def _block_max(cta, values):
        top = np.zeros(int(cta.max()) + 1)
        np.maximum.at(top, cta, values)
        return top

    def _group_keys(self, W):
        nw = self.nwarps
        return (W // nw) * (-(-nw // 4)) + (W % nw) // 4

    def _group_max(self, W, values):
        g = self._group_keys(W)
        top = np.full(int(g.max()) + 1, -np.inf)
        np.maximum.at(top, g, values)
        return top[g]

    def _warpgroup_join(self, W, now):
        return self._join(W, now, self._group_max(W, now), Stall.BARRIER)

    def _queue(self, resource: Resource, now, cycles, cta):
        """Warps ``W`` (of the blocks ``cta``, ascending) put ``cycles`` of work each on their
        block's ``resource`` at ``now``: served one after another from the block's earliest
        request (or when the resource is free); returns when each warp's work is done."""
        free = self.free[resource]
        starts = np.flatnonzero(np.r_[True, cta[1:] != cta[:-1]])
        first = np.minimum.reduceat(now, starts)
        begin = np.maximum(first, free[cta[starts]])
        cycles = np.asarray(cycles, float)
        cum = np.cumsum(cycles)
        before = (cum - cycles)[starts]
        counts = np.diff(np.r_[starts, len(cta)])
        done = np.repeat(begin - before, counts) + cum
        free[cta[starts]] = done[np.r_[starts[1:], len(cta)] - 1]
        return done

    def _dynamic(self, W, now, cta, event):
        kind, _line, who, per_warp, bars = event
        if kind is None:  # a barrier wait: join the barrier's completion
            pos, ctas, addr = bars
            ready = np.zeros(len(W))
            for p, c, a in zip(pos.tolist(), ctas.tolist(), addr.tolist()):
                ready[p] = max(ready[p], self.mbarriers.get((c, a), 0.0))
            wait = np.zeros(len(W))
            wait[who] = self._join(W[who], now[who], ready[who], Stall.COPIES)
            return wait
        resource = RESOURCE[kind]
        if resource is Resource.MEMORY:
            cycles = per_warp / self.share.memory
            tail = self.lat.global_memory
        else:
            pipe = max(self.share.tensor, key=lambda p: self.share.tensor[p])  # the fastest: unknown pipe
            cycles = per_warp / self.share.tensor[pipe]
            tail = self.lat.wgmma
        done = self._queue(resource, now[who], cycles[who], cta[who]) + tail
        if bars is not None:
            pos, ctas, addr = bars
            at = np.zeros(len(W))
            at[who] = done
            for p, c, a in zip(pos.tolist(), ctas.tolist(), addr.tolist()):
                key = (c, a)
                self.mbarriers[key] = max(self.mbarriers.get(key, 0.0), float(at[p]))
        elif kind is AsyncKind.CP_ASYNC:
            self.cp.add(W[who], done)
        elif kind is AsyncKind.WGMMA:
            self.wg.add(W[who], done)
        return np.zeros(len(W))

    # -- the result -----------------------------------------------------------------------------------
    def bound(self, blocks: int, sms: int) -> LatencyBound | None:
        self.finish()
        if not self.paths:
            return None
        paths = np.concatenate(self.paths)
        total = float(paths.sum())
        mean = float(paths.mean())
        busiest = max(1, -(-blocks // sms))
        waves = -(-busiest // self.share.resident)
        stalls = {s.value: (self.stall_sums[s] / total if total else 0.0) for s in Stall}
        return LatencyBound(len(paths), mean, float(paths.max()), stalls, self.share.resident, self.share.limiter,
                            waves, waves * mean / self.share.clock_hz)
