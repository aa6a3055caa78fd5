"""``wgmma`` as an asynchronous operation: warpgroups, groups, waits, and the checks that a
program leaves a wgmma's operands and accumulators alone while it is in flight.

The model (PTX ISA 9.7.15: ``wgmma.mma_async``, ``wgmma.commit_group``,
``wgmma.wait_group``, ``wgmma.fence``):

* ``wgmma.mma_async`` computes at issue: it reads its shared operands and C then and writes
  D's registers at once (:func:`mma_async`).  For a correct program that is exact: its
  operands may not change and its registers may not be touched until a wait retires it, and
  wgmmas chained on one accumulator are ordered by the ISA, so nothing can tell the issue
  from any later moment.  Incorrect programs are what the checks below find.
* The wgmma joins the warpgroup's open group; ``wgmma.commit_group`` closes it (an empty
  group too); ``wgmma.wait_group N`` retires every committed group of the warpgroup but the
  N most recent.  A wgmma is *in flight* from its issue to the wait that retires it.
* All four are warpgroup-collective (``.sync.aligned``): the scheduler gathers the 128
  threads of the warpgroup there (:mod:`.executor`, a "group" sync), and a warpgroup that
  is not whole (a warp that exited, lanes elsewhere) or a guard that differs within it is a
  :class:`PtxError` naming the instruction.

Checks, independent of the warp schedule:

* a shared write (``st``, ``atom``, ``red``, ``stmatrix``, a ``cp.async`` destination) by a
  thread of the issuing warpgroup to bytes an in-flight wgmma of that warpgroup reads is a
  :class:`RaceError` naming both (the warpgroup meets at each wgmma instruction, so the
  write's place between issue and wait is its program order);
* other threads: the wgmma's reads are logged with the race checker (:mod:`.races`) at the
  issue's phase as the warpgroup's own (two threads of different warps stand for it, and its
  own threads never race with it: program order and the collective order them), and logged
  again in every later phase its warpgroup reaches (a barrier) while it is in flight: a write
  of another warpgroup that a barrier orders after the issue but not after the retiring wait
  races too;
* reading or writing an in-flight wgmma's D registers by any instruction but a later
  ``wgmma.mma_async`` (whose accumulator chaining the ISA orders) is a :class:`PtxError`
  (``check_registers``, emitted before each instruction that names such a register).

Not checked: the ISA's ``fence.proxy.async`` between a generic-proxy write of an operand
and the wgmma that reads it, and ``wgmma.fence`` before a wgmma whose registers other
instructions wrote (the emulator has one proxy and computes at issue, so both are no-ops
for its values; the barrier that must order those writes is checked).
"""

from __future__ import annotations

import attrs
import numpy as np

from . import memory
from .errors import PtxError, PtxMemoryError, RaceError
from .memory import thread_text
from .numerics import F32, I32, I64, U32, U64
from .races import PHASE, Access, Side
from .wgmma import (M, WARPGROUP, Descriptors, WgmmaForm, accumulator_matrix, d_registers, load_operand, multiply,
                    operand_addresses, register_matrix, uniform, values)

CHUNK = 16  # operands are read in 16-byte chunks (the swizzle's unit)


def group_keys(T, where) -> np.ndarray:
    """Per thread (context indices ``where``): its warpgroup's number within the batch."""
    per_block = -(-int(T.nwarps) // 4)
    return T.cta[where].astype(I64) * per_block + T.warp[where].astype(I64) // 4


def warpgroup_lanes(T, ids, mask, site, what: str):
    """(positions into this call's threads as a (groups, 128) array ordered by warp and lane,
    their context indices alike, and each warpgroup's key) of the threads executing a
    warpgroup-collective instruction.  Every warpgroup present must be whole, with one guard."""
    n = T.n if ids is None else len(ids)
    where_all = np.arange(n) if ids is None else ids
    keys = group_keys(T, where_all)
    pos = np.arange(n)
    if mask is not None:
        on = np.broadcast_to(np.asarray(mask, bool), (n,))
        if (np.bincount(keys[on], minlength=keys.max() + 1)[keys] % np.bincount(keys)[keys] != 0).any():
            k = int(np.flatnonzero(np.bincount(keys[on], minlength=keys.max() + 1)[keys] != np.bincount(keys)[keys])[0])
            raise PtxError(f"{what} is warpgroup-collective (.aligned): its guard must be the same for the 128 threads "
                           f"of the warpgroup", line=site.line, source=site.text, thread=thread_text(T, where_all[k]))
        pos = pos[on]
    if not len(pos):
        return np.zeros((0, WARPGROUP), I64), np.zeros((0, WARPGROUP), I64), np.zeros(0, I64)
    counts = np.bincount(keys[pos])
    short = counts[keys[pos]] != WARPGROUP
    if short.any():
        k = int(pos[np.flatnonzero(short)[0]])
        raise PtxError(f"{what} is warpgroup-collective (.sync.aligned): the 128 threads of the warpgroup (4 warps) "
                       f"must execute it together, but only {int(counts[keys[k]])} do (a partial warpgroup, threads "
                       f"that exited, or threads that diverged)", line=site.line, source=site.text,
                       thread=thread_text(T, where_all[k]))
    order = pos[np.lexsort((T.lane[where_all[pos]], T.warp[where_all[pos]], keys[pos]))].reshape(-1, WARPGROUP)
    where = order if ids is None else ids[order]
    return order, where, keys[order[:, 0]]


@attrs.define(eq=False)
class InFlight:
    """One wgmma.mma_async instruction's work for the warpgroups that issued it."""

    site: memory.Site
    keys: np.ndarray  # (G,) warpgroups
    group: np.ndarray  # (G,) the group each joined
    live: np.ndarray  # (G,) not yet retired
    chunks: np.ndarray  # (G, C) flat shared offsets of the 16-byte chunks it reads
    readers: np.ndarray  # (G, 2) batch thread numbers its reads are logged for
    function: int  # the function whose registers ``registers`` are
    registers: frozenset  # its D registers


class Warpgroups:
    """The wgmma state of one batch of blocks (made with its context)."""

    def __init__(self):
        self.committed = np.zeros(0, I64)  # per warpgroup key: groups committed
        self.retired = np.zeros(0, I64)  # groups below this are complete
        self.flights: list[InFlight] = []

    @property
    def live(self) -> bool:
        return bool(self.flights)

    def _grow(self, keys) -> None:
        need = int(keys.max(initial=-1)) + 1
        if need > len(self.committed):
            self.committed = np.concatenate([self.committed, np.zeros(need - len(self.committed), I64)])
            self.retired = np.concatenate([self.retired, np.zeros(need - len(self.retired), I64)])

    # -- the instructions -------------------------------------------------------------------------
    def issue(self, flight: InFlight) -> None:
        self._grow(flight.keys)
        flight.group = self.committed[flight.keys].copy()
        self.flights.append(flight)

    def commit(self, keys) -> None:
        self._grow(keys)
        self.committed[keys] += 1

    def wait(self, keys, pending: int) -> None:
        self._grow(keys)
        self.retired[keys] = np.maximum(self.retired[keys], self.committed[keys] - pending)
        for f in self.flights:
            f.live &= f.group >= self.retired[f.keys]
        self.flights = [f for f in self.flights if f.live.any()]

    def barrier(self, T, ids) -> None:
        """A barrier released the threads ``ids``: the reads of in-flight wgmmas of their
        warpgroups are logged again in the phase the barrier begins."""
        races = getattr(T, "races", None)
        if not self.flights or races is None:
            return
        released = np.unique(group_keys(T, np.arange(T.n) if ids is None else ids))
        epoch = None
        for f in self.flights:
            on = f.live & np.isin(f.keys, released)
            if not on.any():
                continue
            if epoch is None:
                epoch = races.epoch.copy()
                bt = T.bt if ids is None else T.bt[ids]
                epoch[bt] = (epoch[bt] // PHASE + 1) * PHASE
            _log_reads(races, f.site, f.chunks[on], f.readers[on], epoch)

    # -- the checks -------------------------------------------------------------------------------
    def check_write(self, T, ids, mask, site, flat) -> None:
        """A shared write (``site``) by the threads ``ids``/``mask`` at the flat offsets ``flat``:
        none of its bytes may be read by an in-flight wgmma of the writer's warpgroup."""
        where = memory._lanes(ids, mask, len(flat) if mask is None else len(mask))
        keys = group_keys(T, where)
        first = flat // CHUNK
        last = (flat + site.width - 1) // CHUNK
        for f in self.flights:
            own = np.isin(keys, f.keys[f.live])
            if not own.any():
                continue
            codes = np.unique((f.keys[f.live][:, None] << 32) | (f.chunks[f.live] // CHUNK))
            hit = own & (np.isin((keys << 32) | first, codes) | np.isin((keys << 32) | last, codes))
            if hit.any():
                k = int(np.flatnonzero(hit)[0])
                _overwrite_error(T, site, f, int(where[k]), int(flat[k]))

    def check_registers(self, T, ids, mask, site, function: int, registers: frozenset) -> None:
        """An instruction (``site``) naming ``registers`` of ``function``: none may be the D of a
        wgmma in flight in the warpgroup of a thread executing it."""
        where = memory._lanes(ids, mask, T.n if ids is None else len(ids))
        if not len(where):
            return
        keys = group_keys(T, where)
        for f in self.flights:
            if f.function != function or not (f.registers & registers):
                continue
            hit = np.isin(keys, f.keys[f.live])
            if hit.any():
                k = int(where[np.flatnonzero(hit)[0]])
                raise PtxError(f"a register of the accumulator of the wgmma.mma_async at PTX line {f.site.line} "
                               f"({f.site.text.strip()}) is accessed while that wgmma is in flight: its warpgroup "
                               f"has not retired its group (wgmma.commit_group, then wgmma.wait_group), so the "
                               f"register's value is undefined", line=site.line, source=site.text,
                               thread=thread_text(T, k))


def _log_reads(races, site, chunks, readers, epoch=None) -> None:
    """Log the 16-byte chunks (G, C) as read by each warpgroup's two reader threads."""
    C = chunks.shape[1]
    bt = np.repeat(readers, C, axis=0).reshape(len(readers), C, 2).transpose(0, 2, 1).reshape(-1)
    flat = np.repeat(chunks[:, None, :], 2, axis=1).reshape(-1)
    races.log_warpgroup(bt, Access.READ, site, CHUNK, flat, epoch)


def _side(T, k: int, kind: Access, site) -> Side:
    return Side(kind, tuple(int(a[k]) for a in T.ctaid), tuple(int(a[k]) for a in T.tid), site.line, site.text,
                getattr(site, "loc", None))


def _overwrite_error(T, site, f: InFlight, k: int, flat_byte: int):
    address = flat_byte - int(T.sbase[k])
    g = np.flatnonzero(f.live & np.isin(f.keys, group_keys(T, np.array([k]))))[0]
    bt = int(f.readers[g, 0])
    reader = int(np.flatnonzero(T.bt == bt)[0]) if (T.bt == bt).any() else k
    first, second = _side(T, reader, Access.READ, f.site), _side(T, k, Access.WRITE, site)
    message = (f"data race on shared memory of block {second.block} at shared address 0x{address:x}: a write "
               f"overwrites an operand of a wgmma still in flight:\n  {first.describe()}\n  {second.describe()}\n"
               f"  the writer's warpgroup issued the wgmma and has not retired its group (wgmma.commit_group, then "
               f"wgmma.wait_group) before the write, so the wgmma may read either value")
    raise RaceError(message, first=first, second=second, schedule=getattr(T.races, "schedule", None),
                    space="shared", address=address)


# -- what the generated code calls ----------------------------------------------------------------------------


def state_of(T) -> Warpgroups:
    """The batch's wgmma state (Function.launch makes it with the context)."""
    w = getattr(T, "wgmma", None)
    if w is None:
        raise PtxError("internal error: a context without its wgmma state")
    return w


def commit(T, ids, site, mask) -> None:
    _, _, keys = warpgroup_lanes(T, ids, mask, site, "wgmma.commit_group")
    state_of(T).commit(keys)


def wait(T, ids, site, mask, pending: int) -> None:
    _, _, keys = warpgroup_lanes(T, ids, mask, site, "wgmma.wait_group")
    state_of(T).wait(keys, pending)


def fence(T, ids, site, mask) -> None:
    warpgroup_lanes(T, ids, mask, site, "wgmma.fence")


def barrier_reached(T, ids) -> None:
    """Called by ``bar.sync``/``barrier.sync``/``bar.red`` for the threads it releases."""
    w = getattr(T, "wgmma", None)
    if w is not None and w.live:
        w.barrier(T, ids)


def _per_thread(x, n, dtype):
    return np.broadcast_to(np.asarray(x).astype(dtype) if np.asarray(x).dtype.itemsize != np.dtype(dtype).itemsize
                           else np.asarray(x).view(dtype), (n,))


def _read_operand(T, site, where, desc, rows: int, form: WgmmaForm, t: str, mn_major: bool):
    """(values (G, rows, K), flat 16-byte chunks (G, C)) of a shared operand."""
    addrs = operand_addresses(Descriptors.decode(desc), rows, form.element_bytes, mn_major)
    bad = np.argwhere((addrs < 0) | (addrs + form.element_bytes > T.shared_size))
    if len(bad):
        g, r, k = (int(x) for x in bad[0])
        raise PtxMemoryError(f"{form.text}: element ({r}, {k}) of an operand is at shared address "
                             f"0x{int(addrs[g, r, k]):x}, outside the block's {T.shared_size} bytes of shared memory "
                             f"(check the matrix descriptor)", address=int(addrs[g, r, k]), line=site.line,
                             source=site.text, thread=thread_text(T, where[g, 0]))
    base = T.sbase[where[:, 0]].astype(I64)
    bits = load_operand(T.smem, base, addrs, form.element_bytes)
    chunks = np.unique((addrs.reshape(len(addrs), -1) // CHUNK) * CHUNK, axis=1) + base[:, None]
    return values(bits, t), chunks


def mma_async(T, ids, form: WgmmaForm, site, mask, c, a, b_desc, scale_d, imms, function: int, registers):
    """``wgmma.mma_async`` for the warpgroups of the threads ``ids``: returns the per-thread
    values of D's registers.  ``a``: A's registers (a tuple) or descriptor; ``imms``:
    (scale-a, scale-b, trans-a, trans-b)."""
    n = T.n if ids is None else len(ids)
    lanes, where, keys = warpgroup_lanes(T, ids, mask, site, form.text)
    G = len(lanes)
    out_dtype = {"f32": F32, "s32": I32, "f16": U32}[form.dtype]
    if G == 0:
        return [np.zeros(n, out_dtype) for _ in range(form.d.regs)]
    scale_a, scale_b, trans_a, trans_b = imms
    flat = lanes.reshape(-1)
    bdesc = uniform(_per_thread(b_desc, n, U64)[lanes], "the descriptor of B", site, T, where)
    B, b_chunks = _read_operand(T, site, where, bdesc, form.n, form, form.btype, bool(trans_b))
    if isinstance(a, tuple):
        regs = np.stack([_per_thread(r, n, U32) for r in a], axis=1)[flat].reshape(G, WARPGROUP, -1)
        A = register_matrix(regs, form.a, form.atype, form.k)
        chunks = b_chunks
    else:
        adesc = uniform(_per_thread(a, n, U64)[lanes], "the descriptor of A", site, T, where)
        A, a_chunks = _read_operand(T, site, where, adesc, M, form, form.atype, bool(trans_a))
        chunks = np.concatenate([a_chunks, b_chunks], axis=1)
    accumulate = uniform(_per_thread(scale_d, n, bool)[lanes], "scale-d", site, T, where)
    cw = np.stack([_per_thread(r, n, U32) for r in c], axis=1)[flat].reshape(G, WARPGROUP, -1)
    C = accumulator_matrix(cw, form) * accumulate[:, None, None]
    D = multiply(form, A * scale_a, np.swapaxes(B, 1, 2) * scale_b, C)
    readers = T.bt[where[:, [0, 32]]]
    races = getattr(T, "races", None)
    if races is not None:
        _log_reads(races, site, chunks, readers)
    proxy = getattr(T, "proxy", None)
    if proxy is not None and proxy.active:  # a TMA load's destination read before its phase was observed
        proxy.async_read(T, np.repeat(where[:, 0], chunks.shape[1]), chunks.reshape(-1) // CHUNK, site)
    copies = getattr(T, "copies", None)
    if copies is not None and copies.live:  # a cp.async still writing an operand: a premature read
        copies.check(T, np.repeat(where[:, 0], chunks.shape[1]), None, site, chunks.reshape(-1))
    state_of(T).issue(InFlight(site, keys, np.zeros(G, I64), np.ones(G, bool), chunks, readers, function,
                               frozenset(registers)))
    words = d_registers(D, form.d).reshape(G * WARPGROUP, -1)
    out = np.zeros((n, words.shape[1]), U32)
    out[flat] = words
    out = out.view(out_dtype) if out_dtype != U32 else out
    return [out[:, j] for j in range(out.shape[1])]
