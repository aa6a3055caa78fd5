"""The race checker: what compute-sanitizer's racecheck does on a GPU, done exactly on the
CPU for every launch (it is a checker, not an option).

Every shared-memory access of every thread, and every global access, is logged with the
thread, the instruction, the bytes it touches and the thread's *epoch*: how many barriers
its block has completed (its *phase*) and how many warp-synchronous instructions its warp
has completed together (its *count*).  Two accesses *race* when

* they touch a common byte (byte-accurate: widths and vector accesses included),
* they come from different threads,
* at least one is a plain (non-atomic) write, or one is atomic and the other a plain read
  (atomics among themselves never race), and
* nothing orders them: threads of different blocks are never ordered within a launch; a
  barrier (``bar.sync``/``barrier.sync``) orders its block's threads (for shared and global
  memory), so accesses in different phases of one block are ordered; a warp-synchronous
  instruction (``bar.warp.sync``, ``shfl.sync``, ``vote.sync``, ``redux.sync``,
  ``match.sync``, ``elect.sync``) whose member mask covers every running lane of its warp
  orders the warp's lanes, and an mbarrier phase orders the accesses of the threads that
  arrived on it before those of the threads that observed it complete (asked of
  :mod:`.async_proxy`'s clocks for the pairs the phases leave unordered).

The rules are the interpreter's detector's (:mod:`accy.runtime.interpreter.sanitizer`),
but one, the hardware's: lanes of one warp storing the same value to one shared address in
one instruction make one write (:func:`distinct_writes`), where the graph's rule sees a race.  They do not
depend on the order the scheduler ran the threads in (:mod:`.schedule`), so a race is found
under every schedule, lockstep included.

How it stays cheap: an access only appends references to its arrays (addresses, threads,
and the batch's clock array, which a barrier or warp synchronisation replaces rather than
changes) to a log.  The log is checked in bulk, vectorised over every access, at the end
of each batch of blocks, when it grows large, and before any other error of the launch is
raised (a race is usually what caused it).  Only accesses touching a byte that some write
or atomic touches (in shared memory: in the same phase of the block) can race; the others
are set aside with two binary searches.  Sorted by (address, block, phase, warp, count,
lane), the rest form groups at three levels:

* one address: accesses from different blocks;
* one address, block and phase: accesses from different warps;
* one address, block, phase, warp and count: accesses from different lanes;

and a group holds a race exactly when it has a plain write and two distinct threads (of
that level's kind), or an atomic, a plain read and two distinct threads among those.  What
a later access could still race with is kept (per address and kind of access, two
different threads at each level), the rest dropped.

Handlers report accesses with :func:`record` (the memory functions of :mod:`.memory` call
it for ``ld``/``st``/``atom``/``red``; an instruction that moves shared or global memory
another way calls it too).
"""

from __future__ import annotations

import enum

import attrs
import numpy as np

from .errors import PtxError, RaceError

PHASE_BITS = 40
PHASE = 1 << PHASE_BITS  # an epoch is phase * PHASE + count
COUNT_MASK = PHASE - 1
WARPGROUP = 128  # threads of a warpgroup (wgmma's, four warps)
SHARED_TAG = 1 << 62  # set on shared addresses (a batch's flat shared bytes) in the checker's tables
FLUSH_ENTRIES = 1 << 21  # log this many thread accesses, then check and compact
ORDERED_BY = ("a barrier (bar.sync) orders the threads of one block, a warp-synchronous instruction "
              "(bar.warp.sync, shfl.sync, ...) the lanes of one warp, an mbarrier phase the threads that arrived "
              "on it before those that observed it complete; threads of different blocks are never "
              "ordered within a launch; atomics race only with plain accesses")


class Access(enum.IntEnum):
    """What an access does to the bytes it touches."""

    READ = 0
    WRITE = 1
    ATOMIC = 2


_VERB = {Access.READ: "read", Access.WRITE: "written", Access.ATOMIC: "updated atomically"}
_SPACES = ("shared", "global")


def record(T, space: str, addresses, sizes, lanes, kind, site) -> None:
    """Report an access to the race checker (the one entry point for handlers).

    ``T``: the executing context; ``space``: "shared" or "global" (others are private or
    read-only and ignored); ``addresses``: per lane, the state-space address (a shared
    offset in the block's window, or a global address) of its first byte, already checked
    against the space's bounds; ``sizes``: bytes per lane (an int, or an array per lane), a
    power of two the address is a multiple of (report a longer or unaligned run as several
    such accesses); ``lanes``: the accessing threads as positions in ``T`` (an int array, or
    None for all ``T.n``), in the order of ``addresses``; ``kind``: an :class:`Access` or
    "read", "write", "atomic"; ``site``: the instruction's
    :class:`~accy.emulator.memory.Site` (what the report names)."""
    races = getattr(T, "races", None)
    if races is None or space not in _SPACES:
        return
    addresses = np.asarray(addresses)
    if addresses.size == 0:
        return
    if isinstance(kind, str):
        kind = Access[kind.upper()]
    width = np.asarray(sizes, np.int64)
    if ((width & (width - 1)) != 0).any() or (width <= 0).any() or (_as_int64(addresses) & (width - 1)).any():
        raise PtxError(f"internal error: a race-checked access must be naturally aligned runs of a power of two "
                       f"bytes (sizes {np.unique(width)})", line=site.line, source=site.text)
    if space == "shared":
        base = T.sbase if lanes is None else T.sbase[lanes]
        flat = base + _as_int64(addresses)
    else:
        flat = _as_int64(addresses)
    races.log(T, lanes, kind, site, sizes, flat, space == "shared")


def distinct_writes(T, lanes, flat, values) -> np.ndarray | None:
    """Which lanes of one store instruction to report as writes: a lane writing the same
    bytes as a lane of its warp before it in the instruction, with the same value, is the same
    write (the hardware stores one of the identical values: no race), and is left out.  Lanes
    of one warp writing different values there stay, and race.  ``lanes``: as :func:`record`'s
    (None: all); ``flat``: each lane's first byte; ``values``: per lane (rows for vectors).
    None where every lane is kept."""
    races = getattr(T, "races", None)
    if races is None or len(flat) < 2:
        return None
    bt = T.bt if lanes is None else T.bt[lanes]
    warp = (races.first + bt) // races.tpb * 64 + (races.first + bt) % races.tpb // 32  # block, warp in it
    rows = np.ascontiguousarray(np.asarray(values).reshape(len(flat), -1))
    words = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
    flat = np.asarray(flat, np.int64)
    order = np.lexsort((np.arange(len(flat)), flat, warp))
    same_place = (np.diff(warp[order]) == 0) & (np.diff(flat[order]) == 0)
    if not same_place.any():
        return None
    repeat = np.zeros(len(flat), bool)
    repeat[order[1:]] = same_place & (words[order[1:]] == words[order[:-1]])
    return ~repeat if repeat.any() else None


def _as_int64(a):
    a = np.asarray(a)
    if a.dtype == np.int64:
        return a
    if a.dtype == np.uint64:
        return a.view(np.int64)
    return a.astype(np.int64)


@attrs.frozen
class Side:
    """One of the two accesses of a race."""

    kind: Access
    block: tuple[int, int, int]
    thread: tuple[int, int, int]
    line: int
    text: str
    source: str | None  # "file.py:12" from the PTX's .loc, if it has one

    def describe(self) -> str:
        where = f" ({self.source})" if self.source else ""
        return (f"{_VERB[self.kind]} by block {self.block} thread {self.thread} at PTX line {self.line}{where}: "
                f"{' '.join(self.text.split())}")


class LaunchRaces:
    """The race checker of one launch (every batch of blocks it runs)."""

    def __init__(self, grid, block, schedule: str):
        self.grid, self.block, self.schedule = tuple(grid), tuple(block), schedule
        self.tpb = int(np.prod(block))
        self.sites: dict[int, object] = {}  # id(site) -> site (kept alive with the log)
        self.entries: list = []
        self.pending = 0
        self.order = 0
        self.carry: dict | None = None
        self.first = 0  # the batch's first thread (launch-wide linear number)
        self.epoch = np.zeros(0, np.int64)  # per thread of the batch: phase * PHASE + count
        self.shared_size = 1  # bytes of shared memory per block
        self.written: set = set()  # the allocations ("shared": the batch's shared memory) written so far
        self.hb = None  # the batch's asynchronous proxy (.async_proxy), where mbarriers may order threads

    # -- the batch's clocks ----------------------------------------------------------------------------
    def begin_batch(self, first_block: int, n: int, shared_size: int) -> None:
        self.first = first_block * self.tpb
        self.epoch = np.zeros(n, np.int64)
        self.shared_size = max(1, int(shared_size))

    def barrier(self, bt) -> None:
        """The threads ``bt`` (batch thread numbers) passed a barrier together."""
        epoch = self.epoch.copy()  # a new array: the log holds the old one
        epoch[bt] = (epoch[bt] // PHASE + 1) * PHASE
        self._advance(epoch)

    def warp_sync(self, bt) -> None:
        """The threads ``bt`` completed a warp-synchronous instruction covering their warps."""
        epoch = self.epoch.copy()
        epoch[bt] += 1
        self._advance(epoch)

    def _advance(self, epoch) -> None:
        if self.entries and self.entries[-1][5] is self.epoch:
            self.pending += len(epoch) // 4  # the log keeps the old clocks: count their memory too
        self.epoch = epoch

    # -- logging ----------------------------------------------------------------------------------------
    def log(self, T, lanes, kind, site, sizes, flat, shared: bool, region=None) -> None:
        """Log an access (see :func:`record`); ``region``: the allocation every lane is in,
        where the caller knows it (None: unknown, or several).  Only references are kept (the
        threads' epochs are looked up when the log is checked)."""
        bt = T.bt if lanes is None else T.bt[lanes]
        self.entries.append((kind, site, sizes, flat, bt, self.epoch, shared, "shared" if shared else region, -1,
                             self._stamps(bt)))
        self.pending += len(bt)
        if self.pending > FLUSH_ENTRIES:
            error = self.check(end_of_batch=False)
            if error is not None:
                raise error

    def log_warpgroup(self, bt, kind, site, sizes, flat, epoch=None) -> None:
        """Log an access a warpgroup makes as one (``wgmma``): the batch threads ``bt`` (not a
        context's positions) stand for their warpgroups, whose own threads the access never races
        with (they order it by program order: it is theirs); ``flat``: shared bytes; ``epoch``: the
        clocks to log it at (None: now), for an asynchronous read that lasts into later phases."""
        wg = (self.first + np.asarray(bt, np.int64)) % self.tpb // WARPGROUP
        self.entries.append((kind, site, sizes, flat, bt, self.epoch if epoch is None else epoch, True, "shared", wg,
                             self._stamps(np.asarray(bt))))
        self.pending += len(bt)

    def _stamps(self, bt):
        """The threads' own happens-before clocks now (mbarriers order accesses the phases do not)."""
        hb = self.hb
        return -1 if hb is None else hb.clocks.stamp(bt).astype(np.int64)

    # -- checking ---------------------------------------------------------------------------------------
    def check(self, end_of_batch: bool, last: bool = False) -> RaceError | None:
        """Check the log (and what earlier checks kept); returns the first race, or None and
        keeps what later accesses could race with (nothing after the ``last`` batch)."""
        entries, self.entries, self.pending = self.entries, [], 0
        first_order, self.order = self.order, self.order + len(entries)
        entries = [(first_order + k, *e) for k, e in enumerate(entries)]
        cold = []
        self.written.update(e[8] for e in entries if e[1] != Access.READ)
        if end_of_batch:
            # reads of an allocation nothing wrote or updated in the launch so far race with no
            # access yet: set them aside (later batches' blocks may still write there)
            written = self.written
            hot = [e for e in entries if e[8] is None or e[8] in written]
            if len(hot) < len(entries):
                cold = [e for e in entries if not (e[8] is None or e[8] in written)]
            entries = hot
        t = self._table(entries, self.carry)
        if t is not None:
            rows = _hot(t)
            hot = _granules(t if rows is None else {k: v[rows] for k, v in t.items()})
            race = _find_race(hot, self.tpb, self._ordered if self.hb is not None else None)
            if race is not None:
                self.carry = None
                return self._error(hot, *race)
        if last:
            self.carry = None
            return None
        kept = [] if t is None else [self._keep(_granules(t), end_of_batch)]
        if cold:
            kept.append(_one_per_address(_granules(self._table(cold, None)), end_of_batch=True))
        self.carry = _concat([k for k in kept if k is not None])
        return None

    def _table(self, entries, carry) -> dict | None:
        """``entries`` (and the ``carry``) as arrays, one row per thread's access."""
        parts = []
        if entries:
            counts = np.array([len(e[5]) for e in entries], np.int64)
            sizes = [e[3] for e in entries]
            if all(isinstance(x, (int, np.integer)) for x in sizes):
                width = np.repeat(np.array(sizes, np.int64), counts)
            else:
                width = np.concatenate([np.broadcast_to(np.asarray(x, np.int64), (c,)) for x, c in zip(sizes, counts)])
            addr = np.concatenate([e[4] for e in entries])
            shared = [e[7] for e in entries]
            if any(shared):
                addr = np.where(np.repeat(np.array(shared), counts), addr | SHARED_TAG, addr)
            bt = np.concatenate([e[5] for e in entries]).astype(np.int64, copy=False)
            epoch = _epochs(entries, bt, counts)
            for e in entries:
                self.sites.setdefault(id(e[2]), e[2])
            parts.append(dict(
                addr=addr, width=width,
                kind=np.repeat(np.array([e[1] for e in entries], np.int8), counts),
                site=np.repeat(np.array([id(e[2]) for e in entries], np.int64), counts),
                order=np.repeat(np.array([e[0] for e in entries], np.int64), counts),
                gtid=bt + self.first, phase=epoch >> PHASE_BITS, count=epoch & COUNT_MASK,
                wg=np.concatenate([np.broadcast_to(np.asarray(e[9], np.int64), (c,)) for e, c in zip(entries, counts)]),
                stamp=np.concatenate([np.broadcast_to(np.asarray(e[10], np.int64), (c,))
                                      for e, c in zip(entries, counts)])))
        if carry is not None:
            parts.append(carry)
        return _concat(parts)

    def _keep(self, t: dict, end_of_batch: bool) -> dict | None:
        """What later accesses could race with.  After a batch: one access per address and kind
        (every later block is another block).  Within a batch: per address and kind, two of
        different blocks; and for the blocks and warps still at an access's phase and count, two
        of different warps (per address, kind, block and phase) and two of different lanes (per
        address, kind, warp, phase and count)."""
        if end_of_batch:
            return _one_per_address(t, end_of_batch)
        d = _derive(t, self.tpb)
        order = np.lexsort((d["lane"], t["count"], d["warp"], t["phase"], d["cta"], t["kind"], t["gran"]))
        s = {k: v[order] for k, v in t.items()}
        ds = {k: v[order] for k, v in d.items()}
        n = len(order)
        keys = {**s, **ds}
        new = lambda *names: np.r_[True, np.logical_or.reduce([keys[k][1:] != keys[k][:-1] for k in names])]  # noqa: E731
        b0 = new("gran", "kind")
        keep = _ends(b0)
        bt = s["gtid"] - self.first
        inside = (bt >= 0) & (bt < len(self.epoch))
        now = np.where(inside, self.epoch[np.where(inside, bt, 0)], -1)
        same_phase = inside & (now // PHASE == s["phase"])
        same_epoch = inside & (now == s["phase"] * PHASE + s["count"])
        b1 = b0 | new("cta", "phase")
        b2 = b1 | new("warp", "count")
        for starts, current in ((b1, same_phase), (b2, same_epoch)):
            idx = np.flatnonzero(starts)
            live = np.logical_or.reduceat(current, idx)
            keep |= _ends(starts) & np.repeat(live, np.diff(np.r_[idx, n]))
        return _carried({k: v[keep] for k, v in s.items()})

    def _ordered(self, a_gtid, a_stamp, b_gtid, b_stamp):
        """Whether each earlier access (thread, clock) happens before the later one through mbarriers."""
        a, b = a_gtid - self.first, b_gtid - self.first
        inside = (a >= 0) & (b >= 0) & (a < self.hb.n) & (b < self.hb.n) & (a_stamp >= 0) & (b_stamp >= 0)
        out = np.zeros(len(a), bool)
        for i in np.flatnonzero(inside):
            out[i] = self.hb.happened_before(int(a[i]), int(a_stamp[i]), int(b[i]), int(b_stamp[i]))
        return out

    # -- the report ---------------------------------------------------------------------------------------
    def _error(self, t: dict, i: int, j: int, level: int) -> RaceError:
        first, second = sorted((i, j), key=lambda k: (t["order"][k], t["gtid"][k]))
        sides = [self._side(t, k) for k in (first, second)]
        addr = int(t["addr"][first])
        shared = bool(addr & SHARED_TAG)
        if shared:
            addr = (addr & ~SHARED_TAG) % self.shared_size
            where = f"shared memory of block {sides[0].block} at shared address 0x{addr:x}"
        else:
            where = f"global memory at address 0x{addr:x}"
        why = {0: "threads of different blocks",
               1: "threads of different warps of one block, with no barrier between them",
               2: "lanes of one warp, with no barrier or warp-synchronous instruction between them"}[level]
        message = (f"data race on {where}, between {why}:\n  {sides[0].describe()}\n  {sides[1].describe()}\n"
                   f"  nothing orders them: {ORDERED_BY}\n"
                   f"  schedule {self.schedule} (ACCY_PTX_SCHEDULE={self.schedule} replays the launch)")
        return RaceError(message, first=sides[0], second=sides[1], schedule=self.schedule,
                         space="shared" if shared else "global", address=addr)

    def _side(self, t: dict, k: int) -> Side:
        site = self.sites[int(t["site"][k])]
        gtid = int(t["gtid"][k])
        cta, local = divmod(gtid, self.tpb)
        gx, gy, _ = self.grid
        bx, by, _ = self.block
        block = (cta % gx, (cta // gx) % gy, cta // (gx * gy))
        thread = (local % bx, (local // bx) % by, local // (bx * by))
        return Side(Access(int(t["kind"][k])), block, thread, site.line, site.text, getattr(site, "loc", None))


_CARRIED = ("addr", "width", "kind", "site", "order", "gtid", "phase", "count", "wg", "stamp")


def _granules(t: dict | None) -> dict | None:
    """The rows split into granules (naturally aligned runs of ``g`` bytes, ``g`` the narrowest
    access among them: two accesses share a byte exactly when they share a granule), each
    with its granule number ``gran``."""
    if t is None or not len(t["addr"]):
        return None
    g = int(t["width"].min())
    reps = t["width"] // g
    if (reps != 1).any():
        rows = np.repeat(np.arange(len(reps)), reps)
        step = np.arange(len(rows)) - np.repeat(np.cumsum(reps) - reps, reps)
        t = {k: v[rows] for k, v in t.items()}
        t["addr"] = t["addr"] + step * g
        t["width"] = np.full(len(rows), g, np.int64)
    else:
        t = dict(t)
    t["gran"] = t["addr"] // g
    return t


def _hot(t: dict):
    """The rows (indices; None: all) touching a byte some write or atomic touches, in shared
    memory (private to its block) in the same phase of the block: only they can race.  Found
    without splitting the other rows into granules."""
    changing = t["kind"] != Access.READ
    if changing.all():
        return None
    if not changing.any():
        return np.zeros(0, np.int64)
    addr, width, phase = t["addr"], t["width"], t["phase"]
    g = int(width.min())
    shift = g.bit_length() - 1  # widths are powers of two
    shared = (addr & SHARED_TAG) != 0
    local = (addr & ~SHARED_TAG) >> shift
    if shared.any() and (local[shared].max() >= 1 << 31 or phase[shared].max() >= 1 << 30):
        return None  # pragma: no cover - gigabytes of shared memory or a billion barriers
    # a key per granule, consecutive along an access: (phase, granule) for shared memory
    first = np.where(shared, SHARED_TAG | phase << 31 | local, addr >> shift)
    span = width >> shift
    w = np.flatnonzero(changing)
    reps = span[w]
    keys = np.repeat(first[w], reps) + (np.arange(int(reps.sum())) - np.repeat(np.cumsum(reps) - reps, reps))
    hot = np.unique(keys)
    inside = np.searchsorted(hot, first + span) > np.searchsorted(hot, first)
    return None if inside.all() else np.flatnonzero(inside)


def _epochs(entries, bt, counts) -> np.ndarray:
    """Each row's epoch: its thread's in the clock array its entry logged (entries of one
    clock array looked up together)."""
    clocks = [e[6] for e in entries]
    if all(c is clocks[0] for c in clocks):
        return clocks[0][bt]
    out = np.empty(len(bt), np.int64)
    ends = np.cumsum(counts)
    starts = ends - counts
    k = 0
    while k < len(entries):  # runs of entries that share a clock array
        j = k
        while j + 1 < len(entries) and clocks[j + 1] is clocks[k]:
            j += 1
        lo, hi = starts[k], ends[j]
        out[lo:hi] = clocks[k][bt[lo:hi]]
        k = j + 1
    return out


def _carried(t: dict) -> dict | None:
    return {k: t[k] for k in _CARRIED} if len(t["addr"]) else None


def _concat(parts: list) -> dict | None:
    if not parts:
        return None
    if len(parts) == 1:
        return dict(parts[0])
    return {k: np.concatenate([p[k] for p in parts]) for k in _CARRIED}


def _derive(t: dict, tpb: int) -> dict:
    """Each row's block, warp (in its block) and lane, from its thread's launch-wide number."""
    local = t["gtid"] % tpb
    return {"cta": t["gtid"] // tpb, "warp": local // 32, "lane": local % 32}


def _one_per_address(t: dict | None, end_of_batch: bool) -> dict | None:
    """One row per granule and kind (after a batch, with its shared memory gone): every later
    access comes from another block, so any one of them races with it as well as all would."""
    if t is None:
        return None
    if end_of_batch:
        private = (t["addr"] & SHARED_TAG) != 0
        if private.any():
            t = {k: v[~private] for k, v in t.items()}
    if not len(t["addr"]):
        return None
    key = t["gran"] * 3 + t["kind"]
    order = np.argsort(key, kind="stable")
    sk = key[order]
    first = order[np.r_[True, sk[1:] != sk[:-1]]]
    return _carried({k: v[first] for k, v in t.items()})


def _ends(starts) -> np.ndarray:
    """The first and the last row of each group (``starts`` marks the groups' first rows)."""
    keep = starts.copy()
    keep[:-1] |= starts[1:]
    keep[-1] = True
    return keep


def _find_race(t: dict | None, tpb: int, ordered=None):
    """(row, row, level) of the earliest race among the rows (granules), or None."""
    if t is None:
        return None
    kind = t["kind"]
    changing = kind != Access.READ
    if not changing.any():
        return None  # reads alone never race
    gran, phase, count, gtid = t["gran"], t["phase"], t["count"], t["gtid"]
    local = gtid % tpb
    # the sort keys, packed: (block, phase) and (warp, count, lane)
    if phase.max(initial=0) < 1 << 31 and count.max(initial=0) < 1 << 48:
        k2 = (gtid // tpb) << 31 | phase
        k3 = (local // 32) << 53 | count << 5 | local % 32
        order = np.lexsort((k3, k2, gran))
    else:  # pragma: no cover - billions of barriers or warp synchronisations in one batch
        k2 = gtid // tpb * (int(phase.max()) + 1) + phase
        k3 = (local // 32) * ((int(count.max()) + 1) << 5) + count * 32 + local % 32
        order = np.lexsort((local % 32, count, local // 32, phase, gtid // tpb, gran))
    gran, k2, k3 = gran[order], k2[order], k3[order]
    n = len(order)
    d0 = gran[1:] != gran[:-1]
    d1 = d0 | (k2[1:] != k2[:-1])
    warp_count = k3 >> 5
    d2 = d1 | (warp_count[1:] != warp_count[:-1])
    kind = kind[order]
    s = {"kind": kind, "order": t["order"][order], "wg": t["wg"][order], "own": local[order] // WARPGROUP,
         "gtid": gtid[order], "stamp": t["stamp"][order], "ordered": ordered}
    w, a, r = kind == Access.WRITE, kind == Access.ATOMIC, kind == Access.READ
    idents = ((d0, gtid[order] // tpb), (d1, k3 >> 53), (d2, k3 & 31))
    best = None
    for level, (d, ident) in enumerate(idents):
        starts = np.r_[0, np.flatnonzero(d) + 1]
        ends = np.r_[starts[1:], n]
        bad = np.logical_or.reduceat(w, starts) & (ident[starts] != ident[ends - 1])
        if a.any():
            mixed = np.logical_or.reduceat(a, starts) & np.logical_or.reduceat(r, starts)
            if mixed.any():
                ar = a | r
                lo = np.minimum.reduceat(np.where(ar, ident, np.iinfo(np.int64).max), starts)
                hi = np.maximum.reduceat(np.where(ar, ident, -1), starts)
                bad |= mixed & (lo != hi)
        flagged = np.flatnonzero(bad)
        for first in range(0, len(flagged), 64):  # the next 64 only where warpgroup accesses hid every pair
            for g in flagged[first:first + 64]:
                pair = _pair(s, ident, starts[g], ends[g])
                if pair is not None and (best is None or pair[0] < best[0]):
                    best = (pair[0], order[pair[1]], order[pair[2]], level)
            if best is not None:
                break
    if best is None:
        return None
    _, i, j, level = best
    return i, j, level


def _pair(s, ident, lo: int, hi: int):
    """The racing pair of the group ``[lo, hi)`` that completes earliest: ((order of the later,
    of the earlier), row, row)."""
    kind, order = s["kind"][lo:hi], s["order"][lo:hi]
    wg, own = s["wg"][lo:hi], s["own"][lo:hi]
    ids = ident[lo:hi]
    best = None
    for x in np.flatnonzero(kind != Access.READ):  # every race has a write or an atomic
        # a warpgroup's own access (wgmma) never races with its own threads
        other = (ids != ids[x]) & (wg != own[x]) & ((wg[x] < 0) | (own != wg[x]))
        if kind[x] == Access.WRITE:
            ok = other
        else:
            ok = other & (kind != Access.ATOMIC)
        ys = np.flatnonzero(ok)
        if len(ys) and s["ordered"] is not None:  # pairs an mbarrier's phase orders do not race
            gt, st = s["gtid"][lo:hi], s["stamp"][lo:hi]
            first = np.where(order[ys] < order[x], ys, x)
            second = np.where(order[ys] < order[x], x, ys)
            ys = ys[~s["ordered"](gt[first], st[first], gt[second], st[second])]
        if not len(ys):
            continue
        late = np.maximum(order[ys], order[x])
        early = np.minimum(order[ys], order[x])
        k = int(np.lexsort((early, late))[0])
        key = (int(late[k]), int(early[k]))
        if best is None or key < best[0]:
            best = (key, lo + x, lo + int(ys[k]))
    return best
