"""``cp.async``: asynchronous copies from global to shared memory, their groups, and the
check that nothing touches their bytes before they are there.

The model (PTX ISA, "Data Movement and Conversion Instructions: cp.async" and
``cp.async.commit_group`` / ``wait_group`` / ``wait_all``):

* ``cp.async`` reads its source when it is issued (global bounds and alignment checked
  then) and records a copy of cp-size bytes (the first src-size bytes of the source,
  zeros after them; all zeros when ``ignore-src`` is true) in the issuing thread's open
  group.  Nothing is written to shared memory yet.
* ``cp.async.commit_group`` closes the thread's open group (an empty group too);
  ``cp.async.wait_group N`` retires every committed group of the thread but the N most
  recent, ``cp.async.wait_all`` commits and retires all.  A retired group's bytes land in
  shared memory then, so a premature read finds stale data, as a GPU may.
* The landed bytes are visible to the issuing thread at once, to the block's other
  threads after a block barrier (``bar.sync``, ``barrier.sync``, ``bar.red``) that the
  issuing thread reaches after its wait.

Checks: a shared load, store, atomic, ``ldmatrix``/``stmatrix`` or another ``cp.async``
that touches a copy's bytes before its thread retired its group, or (another thread)
before such a barrier, raises :class:`PtxAsyncCopyError` naming both instructions and
both threads.  A destination or source not aligned to cp-size, or outside its memory, is
a :class:`PtxMemoryError`.  Copies still pending when the kernel ends complete then
(shared memory ends with the block, so nothing can observe them).

:meth:`AsyncCopies.issue` is the one place where copies start (``bytes_copied`` counts
the bytes they write to shared memory).
"""

from __future__ import annotations

import numpy as np

from . import memory
from .errors import PtxAsyncCopyError, PtxError, PtxMemoryError
from .memory import Site, thread_text
from .numerics import I8, I64, U8, U64

PENDING, LANDED, PUBLISHED = 0, 1, 2
MAX_COPY = 16


def _positions(ids, mask, n):
    """Indices into the context of the threads an instruction runs for."""
    return memory._lanes(ids, mask, n)


class AsyncCopies:
    """The copies in flight in one batch of blocks (created with its context; every state
    array is allocated at the first ``cp.async``)."""

    def __init__(self, nthreads: int, shared_bytes: int):
        self.nthreads, self.shared_bytes = nthreads, shared_bytes
        self.live = 0  # copies not yet published (their bytes are checked)
        self.bytes_copied = 0
        self.committed = self.retired = self.owner = None
        self.sites: list[Site] = []
        self.gid = self.group = self.dst = self.size = self.site = np.zeros(0, I64)
        self.state = np.zeros(0, I8)
        self.data = np.zeros((0, MAX_COPY), U8)

    def _start(self):
        if self.owner is None:
            self.committed = np.zeros(self.nthreads, I64)
            self.retired = np.zeros(self.nthreads, I64)  # groups below this are complete
            self.owner = np.full(self.shared_bytes, -1, I64)  # shared byte -> the copy writing it

    # -- the instructions ------------------------------------------------------------------------
    def issue(self, T, ids, mask, dst_site, src_site, dst, src, cp_size: int, src_size=None, ignore=None):
        """``cp.async`` for the threads ``ids`` (None: all) where ``mask``: copy cp_size bytes
        from the global address ``src`` to the shared address ``dst``."""
        n = T.n if ids is None else len(ids)
        sel = np.arange(n) if mask is None else np.flatnonzero(np.broadcast_to(mask, (n,)))
        if not len(sel):
            return
        self._start()
        where = sel if ids is None else ids[sel]
        dst = np.broadcast_to(np.asarray(dst, U64), (n,))[sel]
        src = np.broadcast_to(np.asarray(src, U64), (n,))[sel]
        reads = np.full(len(sel), cp_size, I64)
        if src_size is not None:
            reads = np.broadcast_to(np.asarray(src_size).astype(I64), (n,))[sel].copy()
            over = np.flatnonzero((reads > cp_size) | (reads < 0))
            if len(over):
                k = int(over[0])
                raise PtxError(f"cp.async with src-size {int(reads[k])} outside 0..{cp_size} (cp-size)",
                               line=dst_site.line, source=dst_site.text, thread=thread_text(T, where[k]))
        if ignore is not None:
            reads = np.where(np.broadcast_to(np.asarray(ignore, bool), (n,))[sel], 0, reads)
        if T.prof is not None:
            T.prof.async_copy(T, where, dst, src, reads, cp_size, dst_site.line)
        # the destination: bounds and alignment as a store of cp_size bytes, and no copy in flight there
        flat = memory.shared_index(T, where, dst_site, dst, None)
        spans = flat[:, None] + np.arange(cp_size)
        self._no_overlap(T, where, dst_site, spans)
        # the race checker sees the write at issue: a read of these bytes by another thread that no
        # barrier orders before the issue races with it (the stage a pipeline overwrites too early)
        memory._note(T, where, None, dst_site, memory.WRITE, flat, True)
        data = np.zeros((len(sel), MAX_COPY), U8)
        whole = reads == cp_size
        if whole.any():
            data[whole, :cp_size] = memory.global_load(T, where[whole], src_site, src[whole], U8, cp_size)
        part = np.flatnonzero((reads > 0) & ~whole)
        if len(part):
            odd = np.flatnonzero(src[part] % np.uint64(cp_size))
            if len(odd):
                k = int(part[odd[0]])
                raise PtxMemoryError(f"misaligned cp.async source at address 0x{int(src[k]):x} (it must be a "
                                     f"multiple of cp-size, {cp_size})", address=int(src[k]),
                                     line=src_site.line, source=src_site.text, thread=thread_text(T, where[k]))
            byte_site = Site(src_site.line, src_site.text, "ld", 1, "global")
            for b in range(cp_size):
                lanes = part[reads[part] > b]
                if len(lanes):
                    data[lanes, b] = memory.global_load(T, where[lanes], byte_site, src[lanes] + np.uint64(b), U8, 1)
        gids = _gids(T, where)
        first = len(self.gid)
        k = len(sel)
        if dst_site not in self.sites:
            self.sites.append(dst_site)
        self.gid = np.concatenate([self.gid, gids])
        self.group = np.concatenate([self.group, self.committed[gids]])
        self.dst = np.concatenate([self.dst, flat])
        self.size = np.concatenate([self.size, np.full(k, cp_size, I64)])
        self.site = np.concatenate([self.site, np.full(k, self.sites.index(dst_site), I64)])
        self.state = np.concatenate([self.state, np.full(k, PENDING, I8)])
        self.data = np.concatenate([self.data, data])
        self.owner[spans] = (first + np.arange(k))[:, None]
        self.live += k
        self.bytes_copied += k * cp_size

    def commit(self, T, ids, mask):
        """``cp.async.commit_group``: close each thread's open group."""
        if self.owner is None:
            self._start()
        g = _gids(T, _positions(ids, mask, T.n if ids is None else len(ids)))
        self.committed[g] += 1

    def wait(self, T, ids, mask, pending: int | None):
        """``cp.async.wait_group pending`` (None: ``cp.async.wait_all``, which commits first)."""
        if self.owner is None:
            self._start()
        g = _gids(T, _positions(ids, mask, T.n if ids is None else len(ids)))
        if pending is None:
            self.committed[g] += 1
            pending = 0
        self.retired[g] = np.maximum(self.retired[g], self.committed[g] - pending)
        done = np.flatnonzero((self.state == PENDING) & (self.group < self.retired[self.gid]))
        for size in np.unique(self.size[done]):
            recs = done[self.size[done] == size]
            T.smem[self.dst[recs][:, None] + np.arange(size)] = self.data[recs, :size]
        self.state[done] = LANDED

    def complete_threads(self, T, where):
        """Every copy the threads ``where`` issued lands and becomes visible to all (the arrive of
        ``cp.async.mbarrier.arrive``: whoever observes the mbarrier's phase may read them)."""
        if self.owner is None or not self.live:
            return
        recs = np.flatnonzero(np.isin(self.gid, _gids(T, where)) & (self.state != PUBLISHED))
        for size in np.unique(self.size[recs]):
            r = recs[self.size[recs] == size]
            pending = r[self.state[r] == PENDING]
            spans = self.dst[r][:, None] + np.arange(size)
            if len(pending):
                T.smem[self.dst[pending][:, None] + np.arange(size)] = self.data[pending, :size]
            mine = self.owner[spans] == r[:, None]
            self.owner[spans[mine]] = -1
        self.state[recs] = PUBLISHED
        self.live -= len(recs)

    def barrier(self, T, ids):
        """A block barrier released the threads ``ids``: their landed copies become visible to all."""
        if not self.live:
            return
        released = np.zeros(self.nthreads, bool)
        released[_gids(T, np.arange(T.n) if ids is None else ids)] = True
        recs = np.flatnonzero((self.state == LANDED) & released[self.gid])
        if not len(recs):
            return
        for size in np.unique(self.size[recs]):
            r = recs[self.size[recs] == size]
            spans = self.dst[r][:, None] + np.arange(size)
            mine = self.owner[spans] == r[:, None]
            self.owner[spans[mine]] = -1
        self.state[recs] = PUBLISHED
        self.live -= len(recs)
        if self.live == 0:
            self._forget(np.zeros(0, I64))
        elif len(self.gid) > 4096 and self.live * 2 < len(self.gid):
            self._forget(np.flatnonzero(self.state != PUBLISHED))

    def _forget(self, keep):
        """Drop the published copies, keeping ``keep`` (renumbered in the byte map)."""
        renumber = np.full(len(self.gid) + 1, -1, I64)
        renumber[keep] = np.arange(len(keep))
        self.owner = renumber[self.owner]  # -1 indexes the last entry, which stays -1
        for name in ("gid", "group", "dst", "size", "site", "state", "data"):
            setattr(self, name, getattr(self, name)[keep])

    # -- the check ---------------------------------------------------------------------------------
    def check(self, T, ids, mask, site, flat):
        """A shared access (``site``) by the threads ``ids``/``mask`` of ``site.width`` bytes at
        the flat shared offsets ``flat``: no byte of it may belong to a copy its thread cannot
        see yet."""
        if not len(flat):
            return
        where = memory._lanes(ids, mask, len(flat) if mask is None else len(mask))
        spans = flat[:, None] + np.arange(site.width)
        rows, cols = np.nonzero(self.owner[spans] >= 0)
        if not len(rows):
            return
        recs = self.owner[spans[rows, cols]]
        reader = _gids(T, where[rows])
        bad = np.flatnonzero((self.state[recs] == PENDING) | (self.gid[recs] != reader))
        if len(bad):
            j = int(bad[0])
            self._fail(T, site, int(where[rows[j]]), int(recs[j]), int(flat[rows[j]] + cols[j]))

    def _no_overlap(self, T, where, site, spans):
        """Two copies of one instruction may not write the same byte (they are unordered)."""
        flat = spans.reshape(-1)
        order = np.argsort(flat, kind="stable")
        same = np.flatnonzero(flat[order][1:] == flat[order][:-1])
        if len(same):
            a, b = order[same[0]] // spans.shape[1], order[same[0] + 1] // spans.shape[1]
            byte = int(flat[order[same[0]]] - T.sbase[where[a]])
            raise PtxAsyncCopyError(f"two copies of one cp.async write shared address 0x{byte:x}: those of "
                                    f"{thread_text(T, where[a])} and {thread_text(T, where[b])} (copies are "
                                    f"unordered, so the result would be undefined)", address=byte,
                                    line=site.line, source=site.text, thread=thread_text(T, where[b]))

    def _fail(self, T, site, k: int, rec: int, flat_byte: int):
        copy = self.sites[int(self.site[rec])]
        writer = _thread_of(T, k, int(self.gid[rec]))
        address = flat_byte - int(T.sbase[k])
        verb = {"ld": "load", "st": "store", "atom": "atomic", "red": "reduction"}.get(site.kind, site.kind)
        if self.state[rec] == PENDING:
            effect = "write them in either order" if verb == "cp.async" else "read stale data"
            why = (f"that thread has not retired the copy's group yet (cp.async.wait_group / cp.async.wait_all), "
                   f"so its bytes are still on their way (a GPU would {effect})")
        else:
            why = ("that thread waited for it, but no block barrier (bar.sync) since has made its bytes visible "
                   "to other threads")
        raise PtxAsyncCopyError(
            f"shared {verb} touches shared address 0x{address:x}, which a cp.async is writing: the cp.async at "
            f"PTX line {copy.line} ({copy.text.strip()}) issued by {writer}; {why}",
            address=address, line=site.line, source=site.text, thread=thread_text(T, k))


def _gids(T, where):
    """Stable ids (within the batch) of the threads at context indices ``where``."""
    nx, ny, nz = (int(v) for v in T.ntid_u32)
    tx, ty, tz = (a[where].astype(I64) for a in T.tid)
    return T.cta[where].astype(I64) * (nx * ny * nz) + tx + nx * (ty + ny * tz)


def _thread_of(T, k: int, gid: int) -> str:
    """The thread ``gid`` (a thread of the block of the context's thread ``k``), as thread_text writes it."""
    nx, ny, _ = (int(v) for v in T.ntid_u32)
    lin = gid % (nx * ny * int(T.ntid_u32[2]))
    x, y, z = lin % nx, (lin // nx) % ny, lin // (nx * ny)
    return (f"block ({int(T.ctaid[0][k])}, {int(T.ctaid[1][k])}, {int(T.ctaid[2][k])}) "
            f"thread ({x}, {y}, {z})")


# -- what the generated code and the other instructions call ------------------------------------------


def copies_of(T) -> AsyncCopies:
    """The batch's copies (Function.launch makes them with the context)."""
    c = getattr(T, "copies", None)
    if c is None:
        raise PtxError("internal error: a context without its cp.async state")
    return c


def barrier_reached(T, ids):
    """Called by ``bar.sync``/``barrier.sync``/``bar.red`` for the threads it releases."""
    c = getattr(T, "copies", None)
    if c is not None and c.live:
        c.barrier(T, ids)
