"""GPU cost counted on the CPU: per-launch counters kept while the emulator runs a kernel,
and a roofline model that turns them into an estimated time on a named GPU.

Counting is off unless a launch is given a :class:`LaunchCounters`
(``Function.launch(..., profile=counters)``); the compiled code then calls it at
single-line hooks: every basic block (``block``: how many warps and threads ran it),
every global/shared/generic ``ld``/``st``/``atom``/``red`` (``access``), ``ldmatrix``
and ``stmatrix`` (``matrix_rows``, from :mod:`.mma`) and ``cp.async``
(``async_copy``, from :mod:`.async_copy`).  Without counters each hook is one
``T.prof is not None`` test.

What is counted, per launch (a *warp instruction* is one instruction executed by one
warp, however many of its lanes are active or predicated off, as Nsight Compute's
``inst_executed`` counts):

* instructions by :class:`InstructionClass`;
* global memory: a *request* per warp-level instruction with at least one active lane
  and the distinct 32-byte *sectors* its lanes touch; sector efficiency is bytes
  requested / (32 x sectors);
* shared memory: *wavefronts* per request, with 32 banks of 4 bytes: lanes reading one
  word share it (a broadcast), lanes reaching different words of one bank take one
  wavefront each; 8-byte accesses are served a half-warp at a time and 16-byte ones a
  quarter-warp at a time (NVIDIA's rule), ``ldmatrix``/``stmatrix`` one 8x8 matrix
  (8 rows of 16 bytes) at a time.  Bank conflicts = wavefronts - ceil(bytes / 128) per
  request, so an unpadded 32-wide f32 column read is 32 wavefronts, 31 conflicts;
* ``dram_bytes`` = 32 x the distinct sectors of the whole launch (a perfect L2: every
  sector comes from DRAM once);
* flops: 2 per FMA/MAD lane, 1 per other float arithmetic lane (add, sub, mul, min,
  max, div, rcp, sqrt, rsqrt, ex2, lg2, sin, cos, tanh; packed x2 forms twice),
  2*m*n*k per ``mma`` warp instruction, 2*64*N*K / 4 per ``wgmma.mma_async`` warp
  instruction (the four warps of its warpgroup each execute it; counted against the
  wgmma pipes' dense peaks, mma.sync's at 2/3 of them); barriers (``bar``/``barrier`` warp
  instructions); bytes written by ``cp.async``.

The model (:class:`GPU`, :func:`roofline`): each arithmetic pipe's flops over its peak,
warp instructions over the issue rate (4 per SM per clock), shared wavefronts over one
per SM per clock, and ``dram_bytes`` over the DRAM bandwidth; the estimate is the
slowest of these plus a launch latency.  The compute ceilings are the busiest SM's
(:class:`Waves`): a grid that does not divide the SMs leaves some idle, and an SM with fewer
resident warps than its 4 schedulers issues fewer instructions a clock.  It cannot see caches
other than a perfect L2, or occupancy below the threads and blocks limits.

The latency model (:mod:`.latency`, when the counters are given a ``LatencyClocks``, as
:func:`run_counted` does with a ``gpu``): per-warp clocks by event, with asynchronous copies
and wgmmas queued on each block's share of its SM's memory path and tensor pipe, and waits
and barriers joining; its bound is waves x a block's critical path.  The estimate is the max
of the roofline's throughput bound and the latency bound, plus the launch latency; ``bound``
is "latency" and ``limiter`` "critical path" where the latency bound sets it.  The TMA /
mbarrier hooks (:meth:`LaunchCounters.async_issue`, :meth:`LaunchCounters.barrier_wait`) are
described there.
"""

from __future__ import annotations

import enum
import functools
import math

import attrs
import numpy as np

from ..errors import ArgumentError
from .latency import AMPERE, HOPPER, AsyncKind, LatencyBound, LatencyClocks, Latencies, Share
from .memory import SHARED_WINDOW, WINDOW_SHIFT

WARP = 32
SECTOR = 32  # bytes: the unit global memory moves
WAVEFRONT = 128  # bytes shared memory serves at once: 32 banks of 4 bytes
BANKS = 32


class InstructionClass(enum.Enum):
    """What a warp instruction does, for the per-class counts."""

    FP16 = "fp16"  # f16 / bf16 arithmetic off the tensor cores
    FP32 = "fp32"
    FP64 = "fp64"
    INT = "int"  # integer arithmetic, logic, comparisons and selects
    CONVERT = "convert"  # cvt
    MEM_GLOBAL = "mem_global"  # ld/st/atom/red .global, cp.async
    MEM_SHARED = "mem_shared"  # ld/st/atom .shared, ldmatrix, stmatrix
    MEM_LOCAL = "mem_local"
    MEM_CONST = "mem_const"  # .const and .param
    MEM_GENERIC = "mem_generic"  # generic addresses (global or shared, decided per lane)
    MMA = "mma"
    WARP = "warp"  # shfl, vote, redux, match, elect, activemask
    SYNC = "sync"  # bar/barrier, membar/fence, cp.async.commit_group/wait_group
    CONTROL = "control"  # branches, calls, returns
    OTHER = "other"  # mov, cvta, hints


class Pipe(enum.Enum):
    """An arithmetic unit with a peak of its own."""

    TENSOR_F16 = "tensor f16/bf16"
    TENSOR_TF32 = "tensor tf32"
    TENSOR_INT8 = "tensor int8"
    WGMMA_F16 = "wgmma f16/bf16"  # the tensor cores through wgmma (sm_90a): their dense peak
    WGMMA_TF32 = "wgmma tf32"
    WGMMA_FP8 = "wgmma fp8"
    WGMMA_INT8 = "wgmma int8"
    FP16 = "fp16"
    BF16 = "bf16"
    FP32 = "fp32"
    FP64 = "fp64"


@attrs.frozen
class Cost:
    """The static cost of one instruction: its class, and the flops it does on ``pipe``
    per active lane (``lane_flops``) and per warp (``warp_flops``, the mma's)."""

    cls: InstructionClass
    pipe: Pipe | None = None
    lane_flops: int = 0
    warp_flops: int = 0


_SPACES = {"global": InstructionClass.MEM_GLOBAL, "shared": InstructionClass.MEM_SHARED,
           "shared::cta": InstructionClass.MEM_SHARED, "shared::cluster": InstructionClass.MEM_SHARED,
           "local": InstructionClass.MEM_LOCAL, "const": InstructionClass.MEM_CONST,
           "param": InstructionClass.MEM_CONST, "param::entry": InstructionClass.MEM_CONST,
           "param::func": InstructionClass.MEM_CONST}
_FLOAT_CLASS = {"f32": (InstructionClass.FP32, Pipe.FP32), "f64": (InstructionClass.FP64, Pipe.FP64),
                "f16": (InstructionClass.FP16, Pipe.FP16), "f16x2": (InstructionClass.FP16, Pipe.FP16),
                "bf16": (InstructionClass.FP16, Pipe.BF16), "bf16x2": (InstructionClass.FP16, Pipe.BF16)}
_FLOPS = {"fma": 2, "mad": 2, "add": 1, "sub": 1, "mul": 1, "min": 1, "max": 1, "div": 1, "rcp": 1, "sqrt": 1,
          "rsqrt": 1, "ex2": 1, "lg2": 1, "sin": 1, "cos": 1, "tanh": 1}
_FLOAT_OPS = set(_FLOPS) | {"abs", "neg", "setp", "set", "testp", "copysign"}
_INT_OPS = {"add", "sub", "mul", "mad", "div", "rem", "min", "max", "abs", "neg", "and", "or", "xor", "not", "cnot",
            "shl", "shr", "shf", "lop3", "prmt", "bfe", "bfi", "bfind", "brev", "clz", "popc", "bmsk", "szext",
            "dp4a", "sad", "mul24", "mad24", "addc", "subc", "madc", "selp", "slct", "setp", "set", "fns"}
_MMA_PIPES = {"f16": Pipe.TENSOR_F16, "bf16": Pipe.TENSOR_F16, "tf32": Pipe.TENSOR_TF32, "s8": Pipe.TENSOR_INT8,
              "u8": Pipe.TENSOR_INT8}


_WGMMA_PIPES = {"f16": Pipe.WGMMA_F16, "bf16": Pipe.WGMMA_F16, "tf32": Pipe.WGMMA_TF32, "e4m3": Pipe.WGMMA_FP8,
                "e5m2": Pipe.WGMMA_FP8, "s8": Pipe.WGMMA_INT8, "u8": Pipe.WGMMA_INT8}


def classify(opcode: str, mods: tuple) -> Cost:
    """The :class:`Cost` of an instruction ``opcode.mods``."""
    if opcode == "wgmma":
        if mods[:1] != ("mma_async",):
            return Cost(InstructionClass.SYNC)  # fence, commit_group, wait_group
        shape = next(m for m in mods if m.startswith("m64n"))
        n, k = shape[4:].split("k")
        # a warpgroup's 2*64*N*K, a quarter on each of the four warps that execute it
        return Cost(InstructionClass.MMA, _WGMMA_PIPES.get(mods[-2]), warp_flops=2 * 64 * int(n) * int(k) // 4)
    if opcode == "mma":
        shape = next(m for m in mods if m.startswith("m") and "n" in m and "k" in m)
        m, rest = shape[1:].split("n")
        n, k = rest.split("k")
        atype = mods[-3]
        return Cost(InstructionClass.MMA, _MMA_PIPES.get(atype), warp_flops=2 * int(m) * int(n) * int(k))
    if opcode in ("ld", "ldu", "st", "atom", "red"):
        space = next((_SPACES[m] for m in mods if m in _SPACES), InstructionClass.MEM_GENERIC)
        return Cost(space)
    if opcode in ("ldmatrix", "stmatrix"):
        return Cost(InstructionClass.MEM_SHARED)
    if opcode == "cp":
        group = ("commit_group", "wait_group", "wait_all", "mbarrier")  # cp.async.mbarrier.arrive: an arrive
        step = mods[2:3] if mods[1:2] == ("bulk",) else mods[1:2]  # cp.async.bulk.{commit,wait}_group
        return Cost(InstructionClass.SYNC if step and step[0] in group else InstructionClass.MEM_GLOBAL)
    if opcode in ("mbarrier", "setmaxnreg"):
        return Cost(InstructionClass.SYNC)
    if opcode == "tensormap":  # tensormap.replace: a store of one field of a map
        return Cost(InstructionClass.MEM_SHARED if "shared::cta" in mods else InstructionClass.MEM_GLOBAL)
    if opcode in ("bar", "barrier", "membar", "fence"):
        return Cost(InstructionClass.SYNC)
    if opcode in ("shfl", "vote", "redux", "match", "elect", "activemask"):
        return Cost(InstructionClass.WARP)
    if opcode in ("bra", "brx", "call", "ret", "exit", "trap", "brkpt"):
        return Cost(InstructionClass.CONTROL)
    if opcode == "cvt":
        return Cost(InstructionClass.CONVERT)
    t = mods[-1] if mods else ""
    if opcode in _FLOAT_OPS and t in _FLOAT_CLASS:
        cls, pipe = _FLOAT_CLASS[t]
        flops = _FLOPS.get(opcode, 0) * (2 if t.endswith("x2") else 1)
        return Cost(cls, pipe, lane_flops=flops)
    if opcode in _INT_OPS:
        return Cost(InstructionClass.INT)
    return Cost(InstructionClass.OTHER)


# -- the counters -----------------------------------------------------------------------------------------


def _distinct(w) -> int:
    """How many distinct values ``w`` (warp keys, normally ascending) holds."""
    n = len(w)
    if n <= 1:
        return n
    step = w[1:] != w[:-1]
    if w[0] <= w[-1] and not (w[1:] < w[:-1]).any():
        return int(np.count_nonzero(step)) + 1
    return len(np.unique(w))


def _rows(keys, size: int):
    """The first key of each row when ``keys`` is rows of ``size`` equal keys (whole warps or
    passes, lane after lane, the common case), else None."""
    n = len(keys)
    if n == 0 or n % size:
        return None
    k = keys.reshape(-1, size)
    if (k != k[:, :1]).any():
        return None
    return k[:, 0]


# kinds of access, the keys of the traffic tables
GLOBAL_KINDS = ("load", "store", "atomic", "async_copy")
SHARED_KINDS = ("load", "store", "atomic", "ldmatrix", "stmatrix", "async_copy")


class LaunchCounters:
    """The counters of one profiled launch (or of several launches of one kernel that add
    up: a sample's blocks run in more than one launch).  The emulator calls the hooks;
    :meth:`totals` sums them up."""

    def __init__(self, clocks: "LatencyClocks | None" = None):
        self.clocks = clocks  # the latency model's per-warp clocks (None: not kept)
        self.runs: dict[int, list] = {}  # block key -> [warps, lanes] that ran it
        self._wkey = None
        self._nwarps = 0
        self.global_ = {k: [0, 0, 0] for k in GLOBAL_KINDS}  # requests, sectors, bytes
        self.shared = {k: [0, 0, 0, 0, 0] for k in SHARED_KINDS}  # requests, wavefronts, ideal, conflicts, bytes
        self.async_bytes = 0
        self._sectors: list = []  # arrays of the sectors touched (duplicates allowed until compacted)
        self._pending = 0

    def bind(self, function) -> None:
        """The launch of ``function`` (an emulator Function) is about to count here: the latency
        model reads its blocks' instructions."""
        if self.clocks is not None:
            self.clocks.bind(*_fn_tables(function))

    # -- hooks ---------------------------------------------------------------------------------------------
    def block(self, key: int, T, ids) -> None:
        """A basic block ran for the threads ``ids`` of ``T`` (None: all of them)."""
        if self.clocks is not None:
            self.clocks.block(key, T, ids)
        if ids is None:
            wk = T.wkey
            if wk is not self._wkey:  # the converged case: one count per set of live threads
                self._wkey, self._nwarps = wk, _distinct(wk)
            nw, n = self._nwarps, T.n
        else:
            nw, n = _distinct(T.wkey[ids]), len(ids)
        r = self.runs.get(key)
        if r is None:
            self.runs[key] = [nw, n]
        else:
            r[0] += nw
            r[1] += n

    def access(self, acc: "Access", T, ids, addr, mask) -> None:
        """A ``ld``/``st``/``atom``/``red`` of ``acc`` at ``addr`` for the threads ``ids`` where ``mask``."""
        wk = T.wkey if ids is None else T.wkey[ids]
        lane = T.lane if ids is None else T.lane[ids]
        addr = np.broadcast_to(np.asarray(addr, np.uint64), wk.shape)
        if mask is not None:
            m = np.broadcast_to(np.asarray(mask, bool), wk.shape)
            wk, lane, addr = wk[m], lane[m], addr[m]
        if not len(wk):
            return
        if acc.space == "global":
            self._global(acc.kind, acc.width, wk, addr)
        elif acc.space == "shared":
            self._shared(acc.kind, acc.width, wk, lane, addr)
        elif acc.space == "generic":
            window = addr >> np.uint64(WINDOW_SHIFT)
            glob, shar = window == 0, window == 2
            if glob.any():
                self._global(acc.kind, acc.width, wk[glob], addr[glob])
            if shar.any():
                self._shared(acc.kind, acc.width, wk[shar], lane[shar], addr[shar] - np.uint64(SHARED_WINDOW))

    def matrix_rows(self, kind: str, T, where, rows) -> None:
        """``ldmatrix``/``stmatrix``: the threads ``where`` (indices into T, in warp and lane
        order) gave the 16-byte ``rows`` (shared addresses), 8 per matrix."""
        if len(where):
            self._shared(kind, 16, T.wkey[where], T.lane[where], np.asarray(rows, np.uint64))

    def async_copy(self, T, where, dst, src, reads, cp_size: int, line: int | None = None) -> None:
        """``cp.async`` by the threads ``where`` (indices into T): ``reads[i]`` bytes from the
        global ``src[i]`` (the rest zero-filled), ``cp_size`` bytes to the shared ``dst[i]``."""
        if self.clocks is not None:
            self.clocks.dynamic(AsyncKind.CP_ASYNC, T, where, cp_size, line, None)
        wk, lane = T.wkey[where], T.lane[where]
        self.async_bytes += len(where) * cp_size
        self._shared("async_copy", cp_size, wk, lane, np.asarray(dst, np.uint64))
        reading = reads > 0
        if reading.any():
            if reading.all():
                self._global("async_copy", cp_size, wk, np.asarray(src, np.uint64))
            else:
                self._global("async_copy", cp_size, wk[reading], np.asarray(src, np.uint64)[reading])
            self.global_["async_copy"][2] += int(reads.sum()) - int(np.count_nonzero(reading)) * cp_size

    def async_issue(self, kind: AsyncKind, T, where, amount, *, line: int, barrier=None) -> None:
        """The threads ``where`` (indices into T) issue an asynchronous op (``kind``) of ``amount``
        bytes or flops each at the PTX line ``line``; with ``barrier`` (its shared addresses, per
        thread) it completes on that mbarrier (see :mod:`.latency`).  Timing only: the traffic is
        counted by the other hooks."""
        if self.clocks is not None:
            self.clocks.dynamic(kind, T, where, amount, line, barrier)

    def barrier_wait(self, T, where, barrier, *, line: int) -> None:
        """The threads ``where`` waited on the mbarrier at ``barrier`` (shared addresses) at the
        PTX line ``line`` and saw it complete: their warps' clocks join its completion."""
        if self.clocks is not None:
            self.clocks.dynamic(None, T, where, None, line, barrier)

    # -- the arithmetic ------------------------------------------------------------------------------------
    def _global(self, kind: str, width: int, wk, addr) -> None:
        """One request per warp; its sectors and bytes (distinct addresses: lanes reading one
        element ask for its bytes once)."""
        rows = _rows(wk, WARP)
        if rows is not None:  # whole warps, lane after lane: sort each warp's addresses
            a = np.sort(addr.reshape(-1, WARP), axis=1)
            new_address = a[:, 1:] != a[:, :-1]
            sec = a >> np.uint64(5)
            new_sector = sec[:, 1:] != sec[:, :-1]
            requests = len(a)
            addresses = requests + int(np.count_nonzero(new_address))
            first = sec[:, 0]
            sectors = np.concatenate([first, sec[:, 1:][new_sector]])
        else:  # any lanes: sort by warp, then address
            order = np.lexsort((addr, wk))
            w, a = wk[order], addr[order]
            new_warp = w[1:] != w[:-1]
            sec = a >> np.uint64(5)
            new_sector = np.r_[True, new_warp | (sec[1:] != sec[:-1])]
            requests = 1 + int(np.count_nonzero(new_warp))
            addresses = 1 + int(np.count_nonzero(new_warp | (a[1:] != a[:-1])))
            sectors = sec[new_sector]
        c = self.global_[kind]
        c[0] += requests
        c[1] += len(sectors)
        c[2] += addresses * width
        self._sectors.append(sectors)
        self._pending += len(sectors)
        if self._pending > 1 << 22:  # keep the record small: distinct sectors only
            self._sectors = [np.unique(np.concatenate(self._sectors))]
            self._pending = len(self._sectors[0])

    def _shared(self, kind: str, width: int, wk, lane, addr) -> None:
        """Wavefronts per request: per pass of the warp (all of it, half-warps for 8 bytes a
        lane, quarter-warps for 16), the most distinct words any one bank holds."""
        wk = wk.astype(np.int64)
        if width <= 4:  # the whole warp in one pass
            phase, nwords, size = 0, 1, WARP
        elif width == 8:  # half-warps
            phase, nwords, size = lane.astype(np.int64) >> 4, 2, WARP // 2
        else:  # quarter-warps (16 bytes; ldmatrix: one matrix of 8 rows)
            phase, nwords, size = lane.astype(np.int64) >> 3, 4, WARP // 4
        group = wk * 4 + phase
        word = addr.astype(np.int64) >> 2
        passes = _rows(group, size)
        if passes is not None:  # whole passes, lane after lane: sort each pass's words
            words = word.reshape(-1, size)
            if nwords > 1:
                words = (words[:, :, None] + np.arange(nwords)).reshape(len(words), -1)
            words = np.sort(words, axis=1)
            first = np.ones(words.shape, bool)
            first[:, 1:] = words[:, 1:] != words[:, :-1]  # a word several lanes read is one (a broadcast)
            count = len(words)
            slot = (np.arange(count)[:, None] * BANKS + (words & (BANKS - 1)))[first]
            pass_waves = np.bincount(slot, minlength=count * BANKS).reshape(count, BANKS).max(axis=1)
            lanes = np.full(count, size)
        else:
            lane_group = group
            if nwords > 1:
                word = (word[:, None] + np.arange(nwords)).reshape(-1)
                group = np.repeat(group, nwords)
            words = np.unique((group << 32) | word)  # distinct words of each pass
            banks, per_bank = np.unique(((words >> 32) << 5) | (words & (BANKS - 1)), return_counts=True)
            pass_of = banks >> 5
            first = np.flatnonzero(np.r_[True, pass_of[1:] != pass_of[:-1]])
            pass_waves = np.maximum.reduceat(per_bank, first)  # the busiest bank of each pass
            passes = pass_of[first]
            lanes = np.bincount(np.searchsorted(passes, lane_group), minlength=len(passes))
        warps, which = np.unique(passes >> 2, return_inverse=True)
        waves = np.bincount(which, weights=pass_waves, minlength=len(warps)).astype(np.int64)
        nbytes = np.bincount(which, weights=lanes, minlength=len(warps)).astype(np.int64) * width
        ideal = -(-nbytes // WAVEFRONT)
        c = self.shared[kind]
        c[0] += len(warps)
        c[1] += int(waves.sum())
        c[2] += int(ideal.sum())
        c[3] += int(np.maximum(waves - ideal, 0).sum())
        c[4] += int(nbytes.sum())

    # -- summing up ----------------------------------------------------------------------------------------
    def sectors(self) -> np.ndarray:
        """The distinct global sectors (address >> 5) the launch touched."""
        if not self._sectors:
            return np.zeros(0, np.uint64)
        return np.unique(np.concatenate(self._sectors))

    def totals(self, functions: dict, fn_names: dict) -> "Totals":
        """The instruction counts: ``functions`` maps a function name to its compiled
        blocks, ``fn_names`` a function index (a block key's high bits) to its name."""
        classes = {c: 0 for c in InstructionClass}
        flops = {p: 0 for p in Pipe}
        mma = barriers = 0
        cache: dict = {}
        for key, (warps, lanes) in self.runs.items():
            f, b = key >> 20, key & 0xFFFFF
            blk = functions[fn_names[f]].blocks[b]
            for ins in blk.instructions:
                cost = cache.get(ins.form)
                if cost is None:
                    cost = cache[ins.form] = classify(ins.opcode, ins.mods)
                classes[cost.cls] += warps
                if cost.pipe is not None:
                    flops[cost.pipe] += cost.lane_flops * lanes + cost.warp_flops * warps
                if cost.cls is InstructionClass.MMA:
                    mma += warps
                elif ins.opcode in ("bar", "barrier") and ins.mods[:1] != ("warp",):
                    barriers += warps
        return Totals(classes, flops, mma, barriers)


@attrs.frozen
class Totals:
    classes: dict
    flops: dict
    mma: int
    barriers: int


@attrs.frozen
class Access:
    """What a compiled memory instruction tells the counters about itself."""

    kind: str  # "load", "store", "atomic"
    space: str  # "global", "shared", "generic"
    width: int  # bytes per lane


def counted_address(E, kind: str, space: str, width: int, addr):
    """For the instruction handlers: emit the counting hook of a memory instruction whose
    lanes access ``width`` bytes at ``addr`` (an address expression, evaluated once here);
    returns the expression to use for the address from now on."""
    if E.typing or space not in ("global", "shared", "generic"):
        return addr
    name = E.tmp("a")
    E.line(f"{name} = {addr}")
    acc = E.const(Access(kind, space, width), "acc")
    E.line(f"if T.prof is not None: T.prof.access({acc}, T, ids, {name}, {E.mask})")
    return name


# -- the GPUs and the model -----------------------------------------------------------------------------

# sm_90 runs mma.sync at 2/3 of the tensor cores' dense peak: the full peak needs wgmma
# (FlashAttention-3, Shah et al. 2024, arXiv:2407.08608, section 2, from Luo et al.'s
# microbenchmarks, arXiv:2402.13499).  So a Hopper's mma.sync tensor pipes are taken at 2/3 of
# NVIDIA's dense figures, its wgmma pipes at the figures themselves.
HOPPER_MMA_SYNC = 2 / 3


@attrs.frozen
class GPU:
    """A GPU's public peak figures (dense, no sparsity), as the model uses them."""

    key: str  # the --gpu name
    name: str
    sms: int
    clock_hz: float  # boost clock: instruction issue and shared memory per clock
    dram_bandwidth: float  # bytes/s
    peaks: dict  # Pipe -> FLOP/s (or OP/s for int8) of the instructions accy emits
    wgmma_bf16: float | None  # the dense bf16 peak with wgmma, for reference (None: no wgmma)
    launch_latency: float  # seconds
    source: str
    latencies: Latencies = HOPPER  # the latency model's figures (cycles; see .latency)

    @property
    def issue_rate(self) -> float:
        """Warp instructions per second: 4 schedulers per SM, one instruction each per clock."""
        return self.sms * 4 * self.clock_hz

    @property
    def shared_rate(self) -> float:
        """Shared-memory wavefronts per second: one (128 bytes) per SM per clock."""
        return self.sms * self.clock_hz

    def peak(self, pipe: Pipe) -> float:
        if pipe not in self.peaks:
            raise ValueError(f"the {self.name} has no {pipe.value} pipe (wgmma is sm_90a's)")
        return self.peaks[pipe]


# A few microseconds from launch to completion for a short kernel (NVIDIA, "Getting Started with
# CUDA Graphs", 2019: about 3-4 us per back-to-back kernel of a stream); a first-order figure.
LAUNCH_LATENCY = 4e-6

_HOPPER_SOURCE = ("NVIDIA H100 Tensor Core GPU datasheet and Hopper architecture whitepaper (SXM5: 132 SMs, "
                  "1.98 GHz boost; dense bf16/f16 989.4, tf32 494.7, fp8 1978.9, int8 1978.9 TFLOP/s with wgmma; "
                  "fp32 66.9, fp64 33.5, fp16/bf16 non-tensor 133.8 TFLOP/s)")


def _hopper(key: str, name: str, bandwidth: float, bw_source: str) -> GPU:
    dense = {Pipe.TENSOR_F16: 989.4e12, Pipe.TENSOR_TF32: 494.7e12, Pipe.TENSOR_INT8: 1978.9e12}
    peaks = {p: v * HOPPER_MMA_SYNC for p, v in dense.items()}
    # wgmma reaches the datasheet's dense figures (fp8 1978.9 TFLOP/s, int8 1978.9 TOPS)
    peaks.update({Pipe.WGMMA_F16: 989.4e12, Pipe.WGMMA_TF32: 494.7e12, Pipe.WGMMA_FP8: 1978.9e12,
                  Pipe.WGMMA_INT8: 1978.9e12})
    peaks.update({Pipe.FP32: 66.9e12, Pipe.FP64: 33.5e12, Pipe.FP16: 133.8e12, Pipe.BF16: 133.8e12})
    return GPU(key, name, 132, 1.98e9, bandwidth, peaks, 989.4e12, LAUNCH_LATENCY,
               f"{_HOPPER_SOURCE}; {bw_source}; mma.sync at 2/3 of the dense tensor peaks (FlashAttention-3, "
               f"arXiv:2407.08608)", HOPPER)


GPUS: dict[str, GPU] = {
    "h200": _hopper("h200", "NVIDIA H200 SXM", 4.8e12, "H200 datasheet: 4.8 TB/s HBM3e (same GH100 chip and clocks)"),
    "h100": _hopper("h100", "NVIDIA H100 SXM5", 3.35e12, "H100 SXM5 datasheet: 3.35 TB/s HBM3"),
    "a100": GPU("a100", "NVIDIA A100 SXM4 80GB", 108, 1.41e9, 2.039e12,
                {Pipe.TENSOR_F16: 312e12, Pipe.TENSOR_TF32: 156e12, Pipe.TENSOR_INT8: 624e12, Pipe.FP32: 19.5e12,
                 Pipe.FP64: 9.7e12, Pipe.FP16: 78e12, Pipe.BF16: 39e12}, None, LAUNCH_LATENCY,
                "NVIDIA A100 datasheet and Ampere architecture whitepaper (SXM4 80GB: 108 SMs, 1.41 GHz boost; "
                "dense bf16/f16 312, tf32 156, int8 624 TFLOP/s with mma.sync; fp32 19.5, fp64 9.7, fp16 78, "
                "bf16 39 TFLOP/s non-tensor; 2.039 TB/s HBM2e)", AMPERE),
}
DEFAULT_GPU = {"sm_80": "a100", "sm_86": "a100", "sm_89": "a100", "sm_90": "h200", "sm_90a": "h200"}


def gpu_named(name) -> GPU:
    """The :class:`GPU` for ``name`` ("h200", "h100", "a100"; a GPU passes through)."""
    if isinstance(name, GPU):
        return name
    g = GPUS.get(str(name).lower().replace(" ", "").replace("-", ""))
    if g is None:
        raise ArgumentError(f"gpu={name!r}: the profile knows the GPUs {', '.join(GPUS)} (or takes a GPU)")
    return g


def default_gpu(arch: str) -> GPU:
    """The GPU a profile for ``arch`` assumes when none is named: an A100 for sm_8x, an H200 for sm_90."""
    return GPUS[DEFAULT_GPU.get(arch, "h200" if arch >= "sm_90" else "a100")]


# what an SM holds at once, from its threads and blocks alone (sm_80 and sm_90; sm_86 and sm_89
# hold fewer): registers and shared memory may allow less (accy info gives that occupancy)
MAX_WARPS_PER_SM = 64
MAX_BLOCKS_PER_SM = 32
SCHEDULERS_PER_SM = 4  # each issues one warp instruction a clock, from a warp of its own


@attrs.frozen
class Waves:
    """How a launch's blocks spread over a GPU's SMs, as the compute ceilings see it: the
    busiest SM runs ceil(blocks / SMs) of them (a grid that does not divide the SMs leaves
    the others idle in the last wave), and an SM with fewer resident warps than schedulers
    issues fewer than 4 instructions a clock."""

    blocks: int
    warps_per_block: int
    sms: int

    @property
    def busiest(self) -> int:
        """Blocks the busiest SM runs."""
        return -(-self.blocks // self.sms)

    @property
    def imbalance(self) -> float:
        """The busiest SM's work over an even share (1.0: the blocks divide the SMs)."""
        return self.busiest * self.sms / self.blocks if self.blocks else 1.0

    @property
    def resident_warps(self) -> int:
        """Warps resident at once on the busiest SM (threads and blocks limits only)."""
        per_block = max(1, self.warps_per_block)
        return min(self.busiest, MAX_BLOCKS_PER_SM, max(1, MAX_WARPS_PER_SM // per_block)) * per_block

    @property
    def issue_fraction(self) -> float:
        """The fraction of the SM's issue rate its resident warps can use."""
        return min(SCHEDULERS_PER_SM, self.resident_warps) / SCHEDULERS_PER_SM if self.blocks else 1.0


@attrs.frozen
class Roofline:
    """Where the time goes: each ceiling's seconds, the estimate and what bounds it."""

    pipes: dict  # Pipe -> seconds of its flops at its peak
    issue_seconds: float
    shared_seconds: float
    memory_seconds: float
    launch_seconds: float
    waves: Waves | None = None  # None: the work spread evenly over every SM, each issuing 4 a clock

    @property
    def compute_seconds(self) -> float:
        return max([self.issue_seconds, self.shared_seconds, *self.pipes.values()])

    @property
    def limiter(self) -> str:
        """The slowest ceiling: a pipe's name, "issue", "shared memory" or "dram"."""
        best, name = self.memory_seconds, "dram"
        for label, seconds in (("issue", self.issue_seconds), ("shared memory", self.shared_seconds),
                               *((p.value, s) for p, s in self.pipes.items())):
            if seconds > best:
                best, name = seconds, label
        return name

    @property
    def estimated_seconds(self) -> float:
        return max(self.compute_seconds, self.memory_seconds) + self.launch_seconds

    @property
    def bound(self) -> str:
        work = max(self.compute_seconds, self.memory_seconds)
        if self.launch_seconds >= work:
            return "latency"
        return "compute" if self.compute_seconds >= self.memory_seconds else "memory"


def roofline(gpu: GPU, flops: dict, instructions: float, wavefronts: float, dram_bytes: float,
             launches: int = 1, *, blocks: int | None = None, warps_per_block: int = 1) -> Roofline:
    """The ceilings of a launch's counts on ``gpu``.  With ``blocks`` (of ``warps_per_block``
    warps) the compute ceilings are the busiest SM's (:class:`Waves`); without, the work is
    spread evenly over every SM."""
    waves = None if blocks is None else Waves(blocks, warps_per_block, gpu.sms)
    spread = 1.0 if waves is None else waves.imbalance
    issue = 1.0 if waves is None else waves.issue_fraction
    pipes = {p: f / gpu.peak(p) * spread for p, f in flops.items() if f}
    return Roofline(pipes, instructions / gpu.issue_rate * spread / issue, wavefronts / gpu.shared_rate * spread,
                    dram_bytes / gpu.dram_bandwidth, launches * gpu.launch_latency, waves)


# -- the result -----------------------------------------------------------------------------------------


@attrs.frozen
class GlobalTraffic:
    """Global memory requests of one kind (warp-level instructions), the 32-byte sectors
    they touched (counted per request) and the bytes their lanes asked for."""

    requests: int = 0
    sectors: int = 0
    bytes: int = 0

    @property
    def sector_efficiency(self) -> float:
        """Bytes requested / (32 x sectors); NaN without traffic."""
        return self.bytes / (SECTOR * self.sectors) if self.sectors else math.nan

    @property
    def sectors_per_request(self) -> float:
        return self.sectors / self.requests if self.requests else math.nan


@attrs.frozen
class SharedTraffic:
    """Shared-memory requests of one kind, their wavefronts, the wavefronts their bytes
    need at least (ceil(bytes / 128) per request) and the bank conflicts (the excess)."""

    requests: int = 0
    wavefronts: int = 0
    ideal: int = 0
    bank_conflicts: int = 0
    bytes: int = 0

    @property
    def conflicts_per_request(self) -> float:
        return self.bank_conflicts / self.requests if self.requests else math.nan


def _plus(a, b):
    return type(a)(*(x + y for x, y in zip(attrs.astuple(a), attrs.astuple(b))))


@attrs.frozen
class Profile:
    """A launch's cost counted on the emulator (:meth:`accy.Program.profile`) and its roofline
    estimate on ``gpu``.  Counts are per launch; when only a sample of the grid's blocks ran
    (``sampled`` < 1) every count is scaled up by blocks / blocks_run (``dram_bytes`` per
    allocation, at most the allocation).  Instruction counts are warp instructions."""

    kernel: str
    arch: str
    gpu: GPU
    grid: tuple
    block: tuple
    blocks: int  # the grid's blocks
    blocks_run: int  # the blocks emulated
    instructions: int
    instruction_classes: dict  # InstructionClass value -> warp instructions
    global_traffic: dict  # "load" / "store" / "atomic" / "async_copy" -> GlobalTraffic
    shared_traffic: dict  # "load" / "store" / "atomic" / "ldmatrix" / "stmatrix" / "async_copy" -> SharedTraffic
    mma_instructions: int
    flops: int
    flops_by_pipe: dict  # Pipe value -> flops
    barriers: int
    async_copy_bytes: int
    dram_bytes: int
    roofline: Roofline
    latency: LatencyBound | None = None  # the latency model's bound (None: not modelled)
    ptx: str = attrs.field(default="", repr=False)  # what ran: the main loop's trip is read from it

    @functools.cached_property
    def loop(self):
        """The main loop's trip in PTX and SASS (:class:`accy.codegen.nvptx.sass.LoopTrip`), or
        None (no loop, or no PTX): counted when first asked, since ptxas and nvdisasm take a
        second that an estimate (an autotuner's ranking) does not need."""
        from ..codegen.nvptx.sass import loop_trip

        return loop_trip(self.ptx, self.arch) if self.ptx else None

    # -- the headline figures ---------------------------------------------------------------------------
    @property
    def sampled(self) -> float:
        """The fraction of the grid's blocks that ran (1.0: all of them, the counts are exact)."""
        return self.blocks_run / self.blocks if self.blocks else 1.0

    @property
    def global_requests(self) -> int:
        return sum(t.requests for t in self.global_traffic.values())

    @property
    def global_sectors(self) -> int:
        return sum(t.sectors for t in self.global_traffic.values())

    @property
    def global_bytes(self) -> int:
        return sum(t.bytes for t in self.global_traffic.values())

    @property
    def sector_efficiency(self) -> float:
        """Bytes requested / (32 x sectors) over every global request (NaN without any)."""
        s = self.global_sectors
        return self.global_bytes / (SECTOR * s) if s else math.nan

    @property
    def global_loads(self) -> GlobalTraffic:
        """Every global read: ``ld`` and ``cp.async``'s source side."""
        return _plus(self.global_traffic["load"], self.global_traffic["async_copy"])

    @property
    def shared_wavefronts(self) -> int:
        return sum(t.wavefronts for t in self.shared_traffic.values())

    @property
    def bank_conflicts(self) -> int:
        return sum(t.bank_conflicts for t in self.shared_traffic.values())

    @property
    def shared_requests(self) -> int:
        return sum(t.requests for t in self.shared_traffic.values())

    @property
    def latency_seconds(self) -> float:
        """The latency model's bound (0 without one): waves x a block's critical path."""
        return 0.0 if self.latency is None else self.latency.seconds

    @property
    def latency_bound(self) -> bool:
        """Whether the latency model's bound exceeds the roofline's throughput bound."""
        r = self.roofline
        return self.latency_seconds > max(r.compute_seconds, r.memory_seconds)

    @property
    def estimated_seconds(self) -> float:
        """The slower of the roofline's throughput bound and the latency bound, plus the launch."""
        r = self.roofline
        return max(r.compute_seconds, r.memory_seconds, self.latency_seconds) + r.launch_seconds

    @property
    def bound(self) -> str:
        """"compute", "memory" or "latency": what sets the estimate ("latency": the latency
        model's critical paths, or a launch too short for either to outweigh its latency)."""
        if self.latency_bound and self.latency_seconds > self.roofline.launch_seconds:
            return "latency"
        return self.roofline.bound

    @property
    def limiter(self) -> str:
        """The slowest ceiling by name: a pipe ("tensor f16/bf16", "fp32", ...), "issue",
        "shared memory" or "dram", or "critical path" (the latency model's)."""
        return "critical path" if self.latency_bound else self.roofline.limiter

    @property
    def tflops(self) -> float:
        """Estimated TFLOP/s: flops / estimated_seconds / 1e12."""
        return self.flops / self.estimated_seconds / 1e12

    @property
    def arithmetic_intensity(self) -> float:
        """Flops per DRAM byte."""
        if not self.dram_bytes:
            return math.inf if self.flops else math.nan
        return self.flops / self.dram_bytes

    def to_dict(self) -> dict:
        """The counts and the estimate as plain numbers (NaN as None), for JSON."""
        def num(x):
            return None if isinstance(x, float) and math.isnan(x) else x

        r = self.roofline
        return {
            "kernel": self.kernel, "arch": self.arch, "gpu": self.gpu.key, "grid": list(self.grid),
            "block": list(self.block), "blocks": self.blocks, "blocks_run": self.blocks_run, "sampled": self.sampled,
            "instructions": self.instructions, "instruction_classes": dict(self.instruction_classes),
            "global_requests": self.global_requests, "global_sectors": self.global_sectors,
            "sector_efficiency": num(self.sector_efficiency),
            "global_load_sector_efficiency": num(self.global_loads.sector_efficiency),
            "global_traffic": {k: attrs.asdict(t) for k, t in self.global_traffic.items()},
            "shared_wavefronts": self.shared_wavefronts, "bank_conflicts": self.bank_conflicts,
            "shared_traffic": {k: attrs.asdict(t) for k, t in self.shared_traffic.items()},
            "mma_instructions": self.mma_instructions, "flops": self.flops, "flops_by_pipe": dict(self.flops_by_pipe),
            "barriers": self.barriers, "async_copy_bytes": self.async_copy_bytes, "dram_bytes": self.dram_bytes,
            "compute_seconds": r.compute_seconds, "memory_seconds": r.memory_seconds,
            "launch_seconds": r.launch_seconds, "latency_seconds": self.latency_seconds,
            "latency": None if self.latency is None else self.latency.to_dict(),
            "estimated_seconds": self.estimated_seconds, "bound": self.bound,
            "limiter": self.limiter, "tflops": self.tflops,
            "waves": None if r.waves is None else {"busiest_sm_blocks": r.waves.busiest,
                                                   "imbalance": r.waves.imbalance,
                                                   "resident_warps": r.waves.resident_warps},
            "loop": None if self.loop is None else self.loop.to_dict(),
        }

    # -- the report -------------------------------------------------------------------------------------
    def __str__(self) -> str:
        return self.report()

    def report(self) -> str:
        g = self.gpu
        dim = lambda d: "x".join(str(v) for v in d)  # noqa: E731
        ran = (f"all {self.blocks} blocks" if self.blocks_run >= self.blocks else
               f"a sample of {self.blocks_run} of {self.blocks} blocks ({self.sampled:.1%}): counts scaled up")
        lines = [f"profile {self.kernel}: {self.arch} PTX on the emulator, grid {dim(self.grid)} x block "
                 f"{dim(self.block)}, {ran}"]
        classes = ", ".join(f"{k} {v:,}" for k, v in self.instruction_classes.items() if v)
        lines.append(f"  instructions   {self.instructions:,} warp instructions ({classes})")
        gl = [f"{k} {t.requests:,} req / {t.sectors:,} sectors ({_pct(t.sector_efficiency)})"
              for k, t in self.global_traffic.items() if t.requests]
        lines.append(f"  global         {self.global_requests:,} requests, {self.global_sectors:,} sectors, sector "
                     f"efficiency {_pct(self.sector_efficiency)}" + (f"; {'; '.join(gl)}" if gl else ""))
        sh = [f"{k} {t.requests:,} req / {t.wavefronts:,} wavefronts / {t.bank_conflicts:,} conflicts"
              for k, t in self.shared_traffic.items() if t.requests]
        lines.append(f"  shared         {self.shared_requests:,} requests, {self.shared_wavefronts:,} wavefronts, "
                     f"{self.bank_conflicts:,} bank conflicts" + (f"; {'; '.join(sh)}" if sh else ""))
        pipes = ", ".join(f"{k} {v:,}" for k, v in self.flops_by_pipe.items() if v)
        lines.append(f"  flops          {self.flops:,}" + (f" ({pipes})" if pipes else "")
                     + f"; {self.mma_instructions:,} mma instructions")
        lines.append(f"  barriers       {self.barriers:,} (warp instructions); cp.async {self.async_copy_bytes:,} "
                     f"bytes")
        intensity = self.arithmetic_intensity
        lines.append(f"  dram           {self.dram_bytes:,} bytes (distinct sectors, a perfect L2)"
                     + ("" if math.isnan(intensity) else f"; {intensity:.3g} flops/byte"))
        r = self.roofline
        used = [f"{p.value} {r_peak(g, p)}" for p in r.pipes]
        lines.append(f"  roofline       {g.name} ({', '.join(used + [f'{g.dram_bandwidth / 1e12:.3g} TB/s'])}): "
                     f"compute {_time(r.compute_seconds)}, memory {_time(r.memory_seconds)}, "
                     + (f"latency {_time(self.latency_seconds)}, " if self.latency is not None else "") + "launch "
                     f"{_time(r.launch_seconds)} -> {_time(self.estimated_seconds)}, {self.bound}-bound "
                     f"({'then ' if self.bound == 'latency' and not self.latency_bound else ''}{self.limiter}), {self.tflops:.4g} TFLOP/s"
                     + _waves_text(r.waves))
        if self.latency is not None:
            lines.append(f"  latency        {self.latency.describe()} -> {_time(self.latency_seconds)}")
        if self.loop is not None:
            lines.append(f"  main loop      one trip of a warp: {self.loop.describe()}")
        return "\n".join(lines)


def _waves_text(waves: Waves | None) -> str:
    if waves is None or (waves.imbalance == 1.0 and waves.issue_fraction == 1.0):
        return ""
    return (f"; the busiest SM runs {waves.busiest} block{'s' * (waves.busiest != 1)} "
            f"({waves.imbalance:.3g}x an even share, {waves.resident_warps} warps resident)")


def r_peak(g: GPU, p: Pipe) -> str:
    suffix = " mma.sync" if p in (Pipe.TENSOR_F16, Pipe.TENSOR_TF32, Pipe.TENSOR_INT8) else ""  # wgmma: in the name
    return f"{g.peak(p) / 1e12:.4g} TFLOP/s{suffix}"


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.1%}"


def _time(s: float) -> str:
    if s >= 1e-3:
        return f"{s * 1e3:.4g} ms"
    return f"{s * 1e6:.4g} us"


# -- running a profiled launch --------------------------------------------------------------------------

# Sampling.  A profile first runs PROBE_BLOCKS blocks, evenly spaced over the grid, and takes
# their warp instructions per block as every block's.  The sample is then as many evenly spaced
# blocks as SAMPLE_WORK warp instructions allow (PROBE_BLOCKS at least, the probe's among them,
# the grid's first and last blocks too); a sample of half the grid or more becomes the whole
# grid, whose counts are exact.  A sampled profile scales its counts up by blocks / blocks run.
# SAMPLE_WORK is 5-30 s of emulation on a 2-core machine (0.5-5 us a warp instruction, the
# less the wider the blocks).
PROBE_BLOCKS = 8
SAMPLE_WORK = 3_000_000


def evenly_spaced(total: int, count: int) -> np.ndarray:
    """``count`` block numbers of ``0..total-1``, evenly spaced, the first and the last included."""
    if count >= total:
        return np.arange(total)
    return np.unique(np.round(np.linspace(0, total - 1, max(count, 1))).astype(np.int64))


def _fn_tables(function):
    c = function.module._c
    return c.functions, {i: name for name, i in c.mc.fn_index.items()}


def warp_instructions(counters: LaunchCounters, function) -> int:
    """The warp instructions ``counters`` counted in ``function``'s module."""
    functions, names = _fn_tables(function)
    return sum(warps * len(functions[names[key >> 20]].blocks[key & 0xFFFFF].instructions)
               for key, (warps, _) in counters.runs.items())


def run_counted(function, grid, block, args, shared_bytes: int = 0, sample: int | None = None, *,
                gpu=None, arch: str | None = None):
    """Launch ``function`` (an emulator :class:`~.device.Function`) counting: the whole grid,
    or a sample of its blocks (``sample``: that many, evenly spaced; None: as the module's
    comment above says).  With ``gpu`` (and ``arch``, for occupancy) the latency model's clocks
    run too (:mod:`.latency`).  Returns the counters and the blocks run (ascending)."""
    grid3 = tuple(grid) + (1,) * (3 - len(tuple(grid)))
    total = math.prod(grid3)
    clocks = None
    if gpu is not None:
        gpu = gpu_named(gpu)
        threads = math.prod(tuple(block) + (1,) * (3 - len(tuple(block))))
        shared = int(function.module._c.mc.shared_size) + int(shared_bytes)
        arch = arch or ("sm_80" if gpu.wgmma_bf16 is None else "sm_90")
        clocks = LatencyClocks(Share.of(gpu, arch, total, threads, shared), classify)
    counters = LaunchCounters(clocks)

    def launch(chosen):
        if len(chosen):
            function.launch(grid, block, args, shared_bytes, profile=counters, blocks=chosen)

    if sample is not None:
        if isinstance(sample, bool) or not isinstance(sample, (int, np.integer)) or sample < 1:
            raise ArgumentError(f"sample={sample!r}: sample takes a positive number of blocks (or None: chosen "
                                f"by the launch's size)")
        chosen = evenly_spaced(total, int(sample))
        launch(chosen)
        return counters, chosen
    if total <= PROBE_BLOCKS:
        chosen = np.arange(total)
        launch(chosen)
        return counters, chosen
    probe = evenly_spaced(total, PROBE_BLOCKS)
    launch(probe)
    per_block = max(warp_instructions(counters, function) / len(probe), 1.0)
    want = max(PROBE_BLOCKS, int(SAMPLE_WORK // per_block))
    chosen = np.arange(total) if 2 * want >= total else np.union1d(probe, evenly_spaced(total, want))
    launch(np.setdiff1d(chosen, probe, assume_unique=True))
    return counters, chosen


def dram_estimate(sectors: np.ndarray, gmem, fraction: float) -> int:
    """DRAM bytes of a launch under a perfect L2 from the distinct ``sectors`` its sample
    touched: exact when the whole grid ran; for a sample, each allocation's sectors scaled
    by 1 / ``fraction``, at most the allocation's own."""
    if fraction >= 1.0 or not len(sectors):
        return SECTOR * len(sectors)
    starts = np.array([a.start for a in gmem.allocations], np.uint64)
    sizes = np.array([a.size for a in gmem.allocations], np.int64)
    address = sectors << np.uint64(5)
    which = np.searchsorted(starts, address, side="right").astype(np.int64) - 1
    total = 0.0
    for g, count in zip(*np.unique(which, return_counts=True)):
        cap = math.inf if g < 0 else -(-int(sizes[g]) // SECTOR) + 1
        total += min(cap, count / fraction)
    return int(round(total)) * SECTOR


def build_profile(function, counters: LaunchCounters, chosen, *, kernel: str, arch: str, gpu: GPU, grid, block,
                  gmem) -> Profile:
    """The :class:`Profile` of a launch of ``function`` on ``grid`` x ``block`` whose blocks
    ``chosen`` ran with ``counters`` (while its allocations are still live in ``gmem``)."""
    grid3 = tuple(int(v) for v in grid) + (1,) * (3 - len(tuple(grid)))
    block3 = tuple(int(v) for v in block) + (1,) * (3 - len(tuple(block)))
    total = math.prod(grid3)
    ran = len(chosen)
    scale = total / ran if ran else 0.0
    up = lambda x: int(round(x * scale))  # noqa: E731
    functions, names = _fn_tables(function) if function is not None else ({}, {})
    t = counters.totals(functions, names)
    classes = {c.value: up(v) for c, v in t.classes.items()}
    flops = {p: up(v) for p, v in t.flops.items()}
    glob = {k: GlobalTraffic(*(up(x) for x in v)) for k, v in counters.global_.items()}
    shar = {k: SharedTraffic(*(up(x) for x in v)) for k, v in counters.shared.items()}
    dram = dram_estimate(counters.sectors(), gmem, ran / total if total else 1.0)
    instructions = sum(classes.values())
    wavefronts = sum(s.wavefronts for s in shar.values())
    model = roofline(gpu, flops, instructions, wavefronts, dram, blocks=total,
                     warps_per_block=-(-math.prod(block3) // WARP))
    latency = None if counters.clocks is None else counters.clocks.bound(total, gpu.sms)
    return Profile(kernel, arch, gpu, grid3, block3, total, ran, instructions, classes, glob, shar, up(t.mma),
                   sum(flops.values()), {p.value: v for p, v in flops.items()}, up(t.barriers),
                   up(counters.async_bytes), dram, model, latency)
