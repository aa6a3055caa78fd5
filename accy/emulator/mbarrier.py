"""``mbarrier``: the 8-byte shared-memory barrier objects of sm_80/sm_90, their phases, pending
arrival counts and transaction counts.

The model (PTX ISA, "Parallel Synchronization and Communication Instructions: mbarrier"):

* ``mbarrier.init [a], count`` makes the object valid, in phase 0, with ``count`` pending
  arrivals (1 .. 2**20-1) and a tx-count of 0; ``mbarrier.inval`` makes it invalid again.
* An arrive-on operation (``mbarrier.arrive``, its ``.expect_tx`` form after the expect-tx,
  ``cp.async.mbarrier.arrive.noinc``) decrements the pending count of the current phase by its
  count; ``expect_tx`` raises the tx-count, ``complete_tx`` (and each bulk or tensor copy that
  signals the mbarrier) lowers it.  The current phase completes when both are zero: the phase
  number goes up by one (its parity flips) and the pending count is reset to the init count.
* ``mbarrier.arrive`` returns an opaque state naming the phase it arrived in;
  ``test_wait``/``try_wait`` with a state test the completion of that phase, their ``.parity``
  forms the completion of the current or the immediately preceding phase of the given parity.

The emulator is deterministic: ``try_wait`` (and ``test_wait``) suspend the waiting warp's
threads until the phase they wait on completes and then return true (a legal outcome: the test
happened then); the scheduler (:mod:`.executor`) runs the other threads meanwhile, and when no
thread of a block can run, the block is deadlocked (a :class:`PtxBarrierError` naming the waits).

Each arrive with ``.release`` semantics (the default) releases the arriving thread's clocks to
the phase, and a wait that observes the phase's completion acquires them (see
:mod:`.async_proxy`, which keeps the clocks and whose state holds the objects).
"""

from __future__ import annotations

import numpy as np

from .errors import PtxError, PtxMemoryError
from .memory import thread_text
from .numerics import I64, U64

MAX_COUNT = (1 << 20) - 1  # pending arrival counts and tx-counts
STATE_TAG = np.uint64(0xA5 << 56)  # marks an opaque state value this emulator returned


class MBarrier:
    """One initialised mbarrier object of one block."""

    __slots__ = ("flat", "slot", "col", "count", "pending", "tx", "phase", "acc_vc", "acc_mb", "acc_fvc", "done",
                 "valid")

    def __init__(self, flat: int, slot: int, col: int, count: int, tpb: int):
        self.flat, self.slot, self.col, self.count = flat, slot, col, count
        self.pending, self.tx, self.phase = count, 0, 0
        self.acc_vc = np.zeros(tpb, np.int32)  # the clocks released to the current phase
        self.acc_fvc = np.zeros(tpb, np.int32)
        self.acc_mb = np.zeros(0, np.int32)
        self.done: dict = {}  # phase -> (vc, mb) released by it (the last two)
        self.valid = True

    def describe(self, T) -> str:
        return (f"the mbarrier at shared address 0x{self.flat - int(self.slot * T.shared_size):x} is in phase "
                f"{self.phase} with {self.pending} of {self.count} arrivals pending and a tx-count of {self.tx}")


class MBarriers:
    """The mbarrier objects of a batch of blocks, keyed by flat shared offset."""

    def __init__(self, proxy):
        self.proxy = proxy
        self.objects: dict[int, MBarrier] = {}

    # -- addressing ------------------------------------------------------------------------------------
    def flat(self, T, where, site, addr, generic: bool):
        """Flat shared offsets of the 8-byte objects at ``addr`` (per thread ``where``)."""
        a = np.asarray(addr, U64)
        if generic:
            window = (a >> np.uint64(52)).astype(I64)
            bad = np.flatnonzero(window != 2)
            if len(bad):
                k = int(bad[0])
                raise PtxMemoryError(f"{site.text.split()[0]}: the generic address 0x{int(a[k]):x} is not in "
                                     f"shared memory (an mbarrier object lives in shared memory)", address=int(a[k]),
                                     line=site.line, source=site.text, thread=thread_text(T, where[k]))
            a = a - np.uint64(2 << 52)
        off = a.view(I64)
        bad = np.flatnonzero((off < 0) | (off + 8 > T.shared_size) | (off % 8 != 0))
        if len(bad):
            k = int(bad[0])
            what = "not 8-byte aligned" if 0 <= off[k] <= T.shared_size - 8 else "outside the block's shared memory"
            raise PtxMemoryError(f"{site.text.split()[0]}: the mbarrier address 0x{int(off[k]):x} is {what} "
                                 f"(an mbarrier object is 8 bytes, 8-byte aligned, in shared memory)",
                                 address=int(off[k]), line=site.line, source=site.text,
                                 thread=thread_text(T, where[k]))
        return T.sbase[where].astype(I64) + off

    def get(self, T, k, flat: int, site) -> MBarrier:
        b = self.objects.get(int(flat))
        if b is None or not b.valid:
            raise PtxError(f"{site.text.split()[0]} on the mbarrier at shared address "
                           f"0x{int(flat) - int(T.sbase[k]):x}, which is not initialised (mbarrier.init; "
                           f"{'it was invalidated by mbarrier.inval' if b is not None else 'it never was'})",
                           line=site.line, source=site.text, thread=thread_text(T, k))
        return b

    # -- the instructions --------------------------------------------------------------------------------
    def init(self, T, where, site, flat, count) -> None:
        count = np.broadcast_to(np.asarray(count, I64), (len(where),))
        for j, (k, f) in enumerate(zip(where, flat)):
            c = int(count[j])
            if not 1 <= c <= MAX_COUNT:
                raise PtxError(f"mbarrier.init with count {c}: it must lie in 1 .. {MAX_COUNT}", line=site.line,
                               source=site.text, thread=thread_text(T, k))
            old = self.objects.get(int(f))
            col = old.col if old is not None else self.proxy.new_column()
            self.objects[int(f)] = MBarrier(int(f), int(T.cta[k]), col, c, self.proxy.tpb)

    def inval(self, T, where, site, flat) -> None:
        for k, f in zip(where, flat):
            self.get(T, k, f, site).valid = False

    def expect_tx(self, T, k, b: MBarrier, tx: int, site) -> None:
        self._tx(T, k, b, b.tx + tx, site)

    def complete_tx(self, T, k, b: MBarrier, tx: int, site) -> None:
        self._tx(T, k, b, b.tx - tx, site)
        self._maybe_complete(b)

    def _tx(self, T, k, b, value: int, site) -> None:
        if not -MAX_COUNT <= value <= MAX_COUNT:
            raise PtxError(f"{site.text.split()[0]}: the tx-count of the mbarrier would be {value}, outside "
                           f"-{MAX_COUNT} .. {MAX_COUNT} (an overflow or underflow: more bytes expected or "
                           f"completed than the phase can hold)", line=site.line, source=site.text,
                           thread=thread_text(T, k))
        b.tx = value

    def arrive(self, T, k, b: MBarrier, count: int, site, release: bool) -> int:
        """One thread's arrive-on operation; returns its opaque state."""
        if not 1 <= count <= MAX_COUNT:
            raise PtxError(f"{site.text.split()[0]} with count {count}: it must lie in 1 .. {MAX_COUNT}",
                           line=site.line, source=site.text, thread=thread_text(T, k))
        if count > b.pending:
            raise PtxError(f"{site.text.split()[0]}: {count} arrivals on an mbarrier whose current phase "
                           f"({b.phase}) has only {b.pending} pending (more arrivals than mbarrier.init's count)",
                           line=site.line, source=site.text, thread=thread_text(T, k))
        if release:
            self.release(T, k, b)
        b.pending -= count
        state = STATE_TAG | np.uint64(b.phase << 20 | b.pending)
        self._maybe_complete(b)
        return int(state)

    def release(self, T, k, b: MBarrier) -> None:
        """The thread ``k`` releases its clocks to ``b``'s current phase."""
        vc, mb, fvc = self.proxy.clocks.release(np.array([T.bt[k]]))
        np.maximum(b.acc_vc, vc[0], out=b.acc_vc)
        np.maximum(b.acc_fvc, fvc[0], out=b.acc_fvc)
        b.acc_mb = _join(b.acc_mb, mb[0])

    def _maybe_complete(self, b: MBarrier) -> None:
        if b.pending == 0 and b.tx == 0:
            mb = _join(b.acc_mb, np.zeros(b.col + 1, np.int32))
            mb[b.col] = max(mb[b.col], b.phase + 1)
            b.done[b.phase] = (b.acc_vc.copy(), mb, b.acc_fvc.copy())
            b.done.pop(b.phase - 2, None)
            b.phase += 1
            b.pending, b.tx = b.count, 0
            b.acc_vc = np.zeros_like(b.acc_vc)
            b.acc_fvc = np.zeros_like(b.acc_fvc)
            b.acc_mb = np.zeros(0, np.int32)

    # -- waits ---------------------------------------------------------------------------------------------
    def waited_phase(self, b: MBarrier, arg: int, parity: bool) -> int:
        """The phase a wait names: with .parity, the current or preceding phase of that parity;
        else the phase of the state ``arg``."""
        if parity:
            return b.phase if (b.phase & 1) == (arg & 1) else b.phase - 1
        if (np.uint64(arg) & np.uint64(0xFF << 56)) != STATE_TAG:
            return -2  # not a state: checked by the caller
        return int(arg) >> 20 & ((1 << 32) - 1)


def _join(a, b):
    """Elementwise maximum of two clock rows of possibly different lengths."""
    if len(a) < len(b):
        a = np.pad(a, (0, len(b) - len(a)))
    elif len(b) < len(a):
        b = np.pad(b, (0, len(a) - len(b)))
    return np.maximum(a, b)
