"""The asynchronous proxy's race checks: happens-before by vector clocks, for TMA and bulk copies.

The generic proxy (``ld``/``st``/``cp.async``/``ldmatrix``...) and the asynchronous proxy (the
tensor and bulk copies of ``cp.async.bulk``, and wgmma's operand reads) reach shared memory by
different paths; the PTX ISA (the memory consistency model's "proxies", ``fence.proxy.async``,
and the ``mbarrier`` completion mechanism of ``complete_tx``) orders them only through
mbarrier phases, bulk-group waits and proxy fences.  The checks here follow happens-before,
so they do not depend on the warp schedule:

* every thread of a block has a vector clock (one entry per thread of its block, and one per
  mbarrier: the phases of it known complete).  A release (an mbarrier arrive, a block barrier,
  a warp-synchronous instruction, a ``fence.proxy.async``) ticks the thread's own entry; an
  arrive joins the thread's clock into the mbarrier's current phase, a wait that observes the
  phase complete joins the phase's clock into the waiter's, a block barrier joins the clocks
  of its threads, a warp-synchronous instruction those of its warp;
* (a) a generic access of a TMA load's destination (and a TMA store's or wgmma's read of it)
  before the accessing thread has observed the mbarrier phase the load completes on is a race;
* (b) a TMA load into bytes some thread read or wrote without a happens-before edge from that
  access to the load's issue is a race (and so is one into the destination of an earlier load
  whose completion the issuing thread has not observed);
* (c) a TMA store (or a wgmma) that reads bytes a generic write put there is a race unless
  the write happens before the read's issue through a ``fence.proxy.async``: one the write
  happens before and that happens before the issue (the writer's, after the write and before
  the release that orders it; or the issuing thread's, after the acquire).  Each thread keeps
  a second vector clock of what fences have covered (a fence takes in the thread's clock);
  for wgmma, writes nothing orders are left to the phase-based checker;
* (d) a write (generic or a TMA load) to a TMA store's source before the issuing thread's
  ``cp.async.bulk.wait_group.read`` retired its group, or without happens-before from that
  wait, is a race.

Generic accesses are logged per 16-byte chunk (the latest access of each thread and kind); a
TMA load clears its destination's log.  The clocks and the log run in the launches of
modules that use mbarriers, wgmma or the asynchronous proxy (:func:`uses_async_proxy`), from
the start.

Generic-proxy pairs stay with the phase-based checker of :mod:`.races`; where it finds two
accesses of one phase unordered, it asks :meth:`Clocks.happened_before` whether an mbarrier
orders them (what each thread learnt from its waits and warp syncs, kept with the clock it had
then), so that a ``cp.async.mbarrier.arrive`` or an arrive/wait pair orders generic accesses of
different warps.  Approximations: a TMA load clears its destination's log (later loads there
are checked against the accesses since); a wait that observes a phase older than the last two
acquires the clocks of the older of the two kept; ``bar.arrive`` releases nothing.
"""

from __future__ import annotations

import numpy as np

from .errors import RaceError
from .mbarrier import MBarriers
from .memory import _lanes, thread_text
from .numerics import I64
from .races import Access, Side

CHUNK = 16


class Clocks:
    """Vector clocks of a batch's threads (int32: rows per batch thread)."""

    def __init__(self, n: int, tpb: int):
        self.n, self.tpb = n, tpb
        self.vc = np.zeros((n, tpb), np.int32)
        self.own = np.arange(n) % tpb
        self.vc[np.arange(n), self.own] = 1
        self.mb = np.zeros((n, 0), np.int32)
        self.fvc = np.zeros((n, tpb), np.int32)  # what fences (fence.proxy.async) have covered, as known
        self.history: dict = {}  # thread -> [(own clock after, clock row it learnt)]: its mbarrier waits and warp syncs

    def grow(self, cols: int) -> None:
        if cols > self.mb.shape[1]:
            self.mb = np.pad(self.mb, ((0, 0), (0, cols - self.mb.shape[1])))

    def stamp(self, bt):
        return self.vc[bt, self.own[bt]]

    def knows(self, p, u, s):
        """Whether the events of threads ``u`` stamped ``s`` happen before the threads ``p`` now."""
        return (p == u) | (self.vc[p, self.own[u]] >= s)

    def release(self, bt):
        """The clocks (vc, mb, fvc rows) the threads ``bt`` release, ticking their own entries after."""
        out = self.vc[bt].copy(), self.mb[bt].copy(), self.fvc[bt].copy()
        self.vc[bt, self.own[bt]] += 1
        return out

    def acquire(self, bt, vc, mb, fvc) -> None:
        """The threads ``bt`` acquire the clocks of an mbarrier phase (their own entries tick after, so that
        their accesses after the wait are told from those before it)."""
        self.vc[bt] = np.maximum(self.vc[bt], vc)
        self.vc[bt, self.own[bt]] += 1
        for t in np.atleast_1d(bt):
            self.history.setdefault(int(t), []).append((int(self.vc[t, self.own[t]]), vc))
        self.fvc[bt] = np.maximum(self.fvc[bt], fvc)
        if len(mb):
            self.grow(len(mb))
            self.mb[bt, :len(mb)] = np.maximum(self.mb[bt, :len(mb)], mb)

    def join(self, bt, keys, remember: bool = False) -> None:
        """Threads ``bt`` synchronise in groups ``keys`` (a barrier: blocks; a warp instruction: warps);
        ``remember``: keep what each learnt in its history (a warp sync: the phase-based race checker
        orders accesses across barriers itself)."""
        if not len(bt):
            return
        order = np.argsort(keys, kind="stable")
        bt, k = bt[order], keys[order]
        starts = np.r_[0, np.flatnonzero(k[1:] != k[:-1]) + 1]
        counts = np.diff(np.r_[starts, len(bt)])
        rows = np.maximum.reduceat(self.vc[bt], starts, axis=0)
        self.vc[bt] = np.repeat(rows, counts, axis=0)
        self.fvc[bt] = np.repeat(np.maximum.reduceat(self.fvc[bt], starts, axis=0), counts, axis=0)
        if self.mb.shape[1]:
            self.mb[bt] = np.repeat(np.maximum.reduceat(self.mb[bt], starts, axis=0), counts, axis=0)
        self.vc[bt, self.own[bt]] += 1
        if remember and self.history:  # (only once some thread waited on an mbarrier)
            group = np.repeat(np.arange(len(starts)), counts)
            for t, g in zip(bt, group):
                self.history.setdefault(int(t), []).append((int(self.vc[t, self.own[t]]), rows[g]))

    def happened_before(self, u: int, s: int, p: int, s2: int) -> bool:
        """Whether the access of thread ``u`` at clock ``s`` happens before that of ``p`` at ``s2`` through
        what ``p`` learnt from mbarrier waits and warp syncs (barriers are the phases' business)."""
        col = self.own[u]
        return any(at <= s2 and row[col] >= s for at, row in self.history.get(p, ()))

    def fence(self, bt) -> None:
        """``fence.proxy.async`` by the threads ``bt``: every generic access they know of (their
        vector clocks) is fenced for the asynchronous proxy (their fence clocks take it in); their
        own entries tick, so that a write after the fence is not covered."""
        self.fvc[bt] = np.maximum(self.fvc[bt], self.vc[bt])
        self.vc[bt, self.own[bt]] += 1

    def fenced(self, p, u, s):
        """Whether a fence that the events of ``u`` stamped ``s`` happen before happens before ``p`` now."""
        return self.fvc[p, self.own[u]] >= s


class Shadow:
    """The generic accesses of shared memory, per 16-byte chunk: (chunk, thread, stamp, write,
    site number), the latest per chunk, thread and kind once compacted."""

    FIELDS = ("chunk", "bt", "stamp", "write", "site")

    def __init__(self):
        self.parts: list = []
        self.size = 0
        self.table = {f: np.zeros(0, I64) for f in self.FIELDS}

    def add(self, **cols) -> None:
        n = len(cols["chunk"])
        self.parts.append({f: np.broadcast_to(np.asarray(cols[f], I64), (n,)) for f in self.FIELDS})
        self.size += n
        if self.size > 1 << 18:
            self.compact()

    def compact(self) -> dict:
        if self.parts:
            t = {f: np.concatenate([self.table[f]] + [p[f] for p in self.parts]) for f in self.FIELDS}
            self.parts = []
            key = (t["chunk"] << 22) | (t["bt"] << 1) | t["write"]
            order = np.lexsort((np.arange(len(key)), key))
            last = order[np.r_[key[order][1:] != key[order][:-1], True]]
            self.table = {f: v[last] for f, v in t.items()}
            self.size = len(last)
        return self.table

    def take(self, chunks) -> dict:
        t = self.compact()
        hit = np.isin(t["chunk"], chunks)
        return {f: v[hit] for f, v in t.items()}

    def clear(self, chunks) -> None:
        t = self.compact()
        keep = ~np.isin(t["chunk"], chunks)
        self.table = {f: v[keep] for f, v in t.items()}
        self.size = int(keep.sum())


class Proxy:
    """The asynchronous-proxy state of a batch of blocks (``T.proxy``; its arrays are made by
    :meth:`start`, at the first asynchronous-proxy instruction)."""

    def __init__(self, n: int, tpb: int, smem_bytes: int, enabled: bool):
        self.n, self.tpb, self.smem_bytes, self.enabled = n, tpb, smem_bytes, enabled
        self.active = False
        self.bars = MBarriers(self)
        self.columns = 0
        self.sites: list = []
        self.bytes_copied = 0
        self.registers: dict = {}  # warp key -> setmaxnreg's register count
        if enabled:  # the module uses the asynchronous proxy: its clocks and log run from the start
            self.start()

    def happened_before(self, u: int, s: int, p: int, s2: int) -> bool:
        return self.clocks.happened_before(u, s, p, s2)

    def start(self) -> None:
        if self.active:
            return
        self.active = True
        self.clocks = Clocks(self.n, self.tpb)
        self.shadow = Shadow()
        nchunks = -(-self.smem_bytes // CHUNK)
        self.load_of = np.full(nchunks, -1, I64)
        self.store_of = np.full(nchunks, -1, I64)
        self.loads = {f: np.zeros(0, I64) for f in ("col", "phase", "bt", "site")}
        self.stores = {f: np.zeros(0, I64) for f in ("bt", "group", "retired", "site")}
        self.committed = np.zeros(self.n, I64)
        self.retired = np.zeros(self.n, I64)

    def new_column(self) -> int:
        self.columns += 1
        self.clocks.grow(self.columns)
        return self.columns - 1

    def site_id(self, site) -> int:
        for i, s in enumerate(self.sites):
            if s is site:
                return i
        self.sites.append(site)
        return len(self.sites) - 1

    # -- synchronisation -----------------------------------------------------------------------------
    def barrier(self, T, ids) -> None:
        if self.active:
            bt = T.bt if ids is None else T.bt[ids]
            self.clocks.join(bt, bt // self.tpb)

    def warp_sync(self, T, pos) -> None:
        if self.active and len(pos):
            bt = T.bt[pos]
            self.clocks.join(bt, (bt // self.tpb) * 64 + (bt % self.tpb) // 32, remember=True)

    # -- generic accesses ------------------------------------------------------------------------------
    def generic(self, T, ids, mask, site, flat) -> None:
        """A generic-proxy shared access (``site``) of ``site.width`` bytes at the flat offsets."""
        if not len(flat):
            return
        where = _lanes(ids, mask, len(flat) if mask is None else len(mask))
        bt = T.bt[where]
        write = site.access != Access.READ or site.kind == "cp.async"
        first = flat // CHUNK
        last = (flat + site.width - 1) // CHUNK
        spans = [first] if (first == last).all() else [first, last]
        sid = self.site_id(site)
        for chunks in spans:
            self._check_loaded(T, where, bt, chunks, site, "generic")
            if write:
                self._check_store_source(T, where, bt, chunks, site)
            self.shadow.add(chunk=chunks, bt=bt, stamp=self.clocks.stamp(bt), write=int(write), site=sid)

    def async_read(self, T, where, chunks, site) -> None:
        """An asynchronous read of shared chunks by the threads ``where`` (context positions, one
        per chunk): a wgmma's operands.  Logged as reads (rule b) and checked against loads (a)."""
        if not self.active or not len(chunks):
            return
        bt = T.bt[where]
        self._check_loaded(T, where, bt, chunks, site, "async")
        self._check_fenced(T, where, bt, chunks, site, only_ordered=True)
        self.shadow.add(chunk=chunks, bt=bt, stamp=self.clocks.stamp(bt), write=0, site=self.site_id(site))

    def _check_loaded(self, T, where, bt, chunks, site, how) -> None:
        """(a): the chunks a TMA load wrote may be touched once the toucher observed its phase."""
        rec = self.load_of[chunks]
        hit = np.flatnonzero(rec >= 0)
        if not len(hit):
            return
        r = rec[hit]
        cols, phases = self.loads["col"][r], self.loads["phase"][r]
        known = self.clocks.mb[bt[hit], cols] > phases
        bad = np.flatnonzero(~known)
        if len(bad):
            j = hit[bad[0]]
            rr = int(rec[j])
            issuer = int(self.loads["bt"][rr])
            self._race(T, int(where[j]), site, Access.READ if how == "async" else _kind(site), issuer,
                       self.sites[int(self.loads["site"][rr])], Access.WRITE, int(chunks[j]),
                       f"the TMA load completes on phase {int(phases[bad[0]])} of its mbarrier, and the thread "
                       f"touching its destination has not observed that phase complete (mbarrier.try_wait / "
                       f"test_wait returning true for it, or a barrier after such a wait), so the bytes may not "
                       f"have arrived")

    def _check_store_source(self, T, where, bt, chunks, site, async_write: bool = False) -> None:
        """(d): a TMA store's source may be overwritten once its group's read is retired."""
        rec = self.store_of[chunks]
        hit = np.flatnonzero(rec >= 0)
        if not len(hit):
            return
        r = rec[hit]
        issuer, retired = self.stores["bt"][r], self.stores["retired"][r]
        ok = (retired >= 0) & self.clocks.knows(bt[hit], issuer, np.maximum(retired, 0))
        bad = np.flatnonzero(~ok)
        if len(bad):
            j = hit[bad[0]]
            rr = int(rec[j])
            why = ("the bulk store has not finished reading it: its thread has not retired the store's bulk group "
                   "(cp.async.bulk.commit_group, then cp.async.bulk.wait_group.read)"
                   if retired[bad[0]] < 0 else
                   "the store's thread retired its bulk group (cp.async.bulk.wait_group.read), but nothing orders "
                   "that wait before this write (an mbarrier or barrier from the waiting thread)")
            self._race(T, int(where[j]), site, Access.WRITE, int(issuer[bad[0]]),
                       self.sites[int(self.stores["site"][rr])], Access.READ, int(chunks[j]),
                       f"the write overwrites the source of an asynchronous bulk store: {why}")

    # -- the asynchronous operations ------------------------------------------------------------------------
    def load_issued(self, T, k: int, chunks, site, bar) -> None:
        """A TMA/bulk load by the thread ``k`` into the chunks, completing on ``bar``'s current phase:
        rules (b) and (d), then the chunks become its destination."""
        p = int(T.bt[k])
        chunks = np.unique(chunks)
        t = self.shadow.take(chunks)
        if len(t["bt"]):
            ok = self.clocks.knows(np.full(len(t["bt"]), p), t["bt"], t["stamp"])
            bad = np.flatnonzero(~ok)
            if len(bad):
                j = bad[0]
                u = int(t["bt"][j])
                raise self._error(T, u, Access.WRITE if t["write"][j] else Access.READ, self.sites[int(t["site"][j])],
                                  p, Access.WRITE, site, int(t["chunk"][j]), k,
                                  "the TMA load overwrites bytes the other thread accessed, and nothing orders that "
                                  "access before the load's issue (the consumer's arrive on an 'empty' mbarrier, "
                                  "waited on by the producer before issuing, or a barrier)")
        prev = self.load_of[chunks]
        hit = np.flatnonzero(prev >= 0)
        if len(hit):
            r = prev[hit]
            known = self.clocks.mb[p, self.loads["col"][r]] > self.loads["phase"][r]
            bad = np.flatnonzero(~known)
            if len(bad):
                rr = int(r[bad[0]])
                raise self._error(T, int(self.loads["bt"][rr]), Access.WRITE, self.sites[int(self.loads["site"][rr])],
                                  p, Access.WRITE, site, int(chunks[hit[bad[0]]]), k,
                                  "the TMA load overwrites the destination of an earlier TMA load whose mbarrier "
                                  "phase the issuing thread has not observed complete")
        self._check_store_source(T, np.full(len(chunks), k), np.full(len(chunks), p), chunks, site)
        self._check_wgmma_reads(T, k, chunks, site)
        self.shadow.clear(chunks)
        rec = len(self.loads["col"])
        for f, v in (("col", bar.col), ("phase", bar.phase), ("bt", p), ("site", self.site_id(site))):
            self.loads[f] = np.append(self.loads[f], v)
        self.load_of[chunks] = rec

    def _check_wgmma_reads(self, T, k: int, chunks, site) -> None:
        """A load into bytes a wgmma still in flight reads (its warpgroup has not retired it with
        wgmma.wait_group): the load's issue cannot come after that wait, so they race."""
        wg = getattr(T, "wgmma", None)
        if wg is None or not wg.live:
            return
        for f in wg.flights:
            hit = np.isin(f.chunks[f.live] // CHUNK, chunks)
            if hit.any():
                g, c = (int(x[0]) for x in np.nonzero(hit))
                reader = int(f.readers[np.flatnonzero(f.live)[g], 0])
                raise self._error(T, reader, Access.READ, f.site, int(T.bt[k]), Access.WRITE, site,
                                  int(f.chunks[f.live][g, c] // CHUNK), k,
                                  "the load overwrites an operand of a wgmma still in flight: its warpgroup has not "
                                  "retired it (wgmma.commit_group, then wgmma.wait_group) before the load's issue")

    def store_issued(self, T, k: int, chunks, site) -> None:
        """A TMA/bulk store by the thread ``k`` reading the chunks: rules (a) and (c); the chunks
        become its source until its bulk group's read is retired."""
        p = int(T.bt[k])
        chunks = np.unique(chunks)
        self._check_loaded(T, np.full(len(chunks), k), np.full(len(chunks), p), chunks, site, "async")
        self._check_fenced(T, np.full(len(chunks), k), np.full(len(chunks), p), chunks, site, only_ordered=False)
        rec = len(self.stores["bt"])
        for f, v in (("bt", p), ("group", self.committed[p]), ("retired", -1), ("site", self.site_id(site))):
            self.stores[f] = np.append(self.stores[f], v)
        self.store_of[chunks] = rec

    def _check_fenced(self, T, where, bt, chunks, site, only_ordered: bool) -> None:
        """(c): the generic writes of the chunks an asynchronous read (by the threads ``bt``, one per
        chunk) reads must happen before it, fenced: a fence.proxy.async that the write happens
        before must happen before the read (in the writer's thread before its release, or in the
        reader's after its acquire).  ``only_ordered``: unordered writes are left to :mod:`.races`."""
        t = self.shadow.take(np.unique(chunks))
        w = np.flatnonzero(t["write"] == 1)
        if not len(w):
            return
        reader = np.zeros(int(chunks.max()) + 1, I64)
        reader[chunks] = np.arange(len(chunks))
        j_of = reader[t["chunk"][w]]
        p = bt[j_of]
        u, s = t["bt"][w], t["stamp"][w]
        ordered = self.clocks.knows(p, u, s)
        fenced = self.clocks.fenced(p, u, s)
        bad = np.flatnonzero(~fenced & (ordered if only_ordered else True))
        if len(bad):
            i = bad[0]
            j = w[i]
            why = ("no fence.proxy.async comes between them: the writing thread fences after the write and before "
                   "the synchronisation that orders it before the read, or the reading thread after it (a "
                   "generic-proxy write is not visible to the asynchronous proxy without one)" if ordered[i] else
                   "nothing orders the write before the read (an mbarrier or barrier), and no fence.proxy.async")
            raise self._error(T, int(u[i]), Access.WRITE, self.sites[int(t["site"][j])], int(p[i]), Access.READ,
                              site, int(t["chunk"][j]), int(where[j_of[i]]),
                              f"the asynchronous proxy reads bytes a generic write put there: {why}")

    def commit(self, T, where) -> None:
        self.committed[T.bt[where]] += 1

    def wait(self, T, where, pending: int) -> None:
        bt = T.bt[where]
        self.retired[bt] = np.maximum(self.retired[bt], self.committed[bt] - pending)
        s = self.stores
        if len(s["bt"]):
            done = (s["retired"] < 0) & (s["group"] < self.retired[s["bt"]])
            s["retired"] = np.where(done, self.clocks.stamp(s["bt"]), s["retired"])

    # -- reports --------------------------------------------------------------------------------------------------
    def _race(self, T, k, site, kind, other_bt, other_site, other_kind, chunk, why):
        raise self._error(T, other_bt, other_kind, other_site, int(T.bt[k]), kind, site, chunk, k, why)

    def _error(self, T, first_bt: int, first_kind, first_site, second_bt: int, second_kind, second_site, chunk: int,
               k: int, why: str) -> RaceError:
        first = _side(T, k, first_bt, first_kind, first_site)
        second = _side(T, k, second_bt, second_kind, second_site)
        address = chunk * CHUNK - int(T.sbase[k])
        message = (f"data race on shared memory of block {second.block} at shared address 0x{address:x} (a 16-byte "
                   f"chunk), between the asynchronous proxy and another access:\n  {first.describe()}\n  "
                   f"{second.describe()}\n  {why}")
        return RaceError(message, first=first, second=second, schedule=getattr(T.races, "schedule", None),
                         space="shared", address=address)


def _kind(site):
    return Access.WRITE if site.access != Access.READ or site.kind == "cp.async" else Access.READ


def _side(T, k: int, bt: int, kind, site) -> Side:
    """The access of the batch thread ``bt`` (a thread of the block of the context's thread ``k``)."""
    nx, ny = int(T.ntid_u32[0]), int(T.ntid_u32[1])
    local = bt % (nx * ny * int(T.ntid_u32[2]))
    thread = (local % nx, (local // nx) % ny, local // (nx * ny))
    block = tuple(int(a[k]) for a in T.ctaid)
    return Side(kind, block, thread, site.line, site.text, getattr(site, "loc", None))


def uses_async_proxy(module) -> bool:
    """Whether a parsed module has an instruction of the asynchronous proxy or an mbarrier."""
    from .parser import Instruction

    return any(isinstance(s, Instruction) and (
        s.opcode in ("mbarrier", "tensormap", "wgmma") or (s.opcode == "fence" and "proxy" in s.mods)
        or (s.opcode == "cp" and s.mods[:2] in (("async", "bulk"), ("async", "mbarrier"))))
        for fn in module.functions.values() for s in fn.body)


def proxy_of(T) -> Proxy:
    p = T.proxy
    p.start()
    return p


def barrier_reached(T, ids) -> None:
    """Called by ``bar.sync``/``barrier.sync``/``bar.red`` for the threads it releases."""
    p = getattr(T, "proxy", None)
    if p is not None and p.active:
        p.barrier(T, ids)


__all__ = ["Proxy", "proxy_of", "barrier_reached", "thread_text"]
