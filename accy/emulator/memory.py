"""Memory of the emulated GPU: global allocations, and the checked accesses to every
state space (global, shared, local, const, generic) that compiled instructions call.

Address map (64-bit generic addresses):

* global: allocations from ``GLOBAL_BASE`` upwards, 256-byte aligned, with at
  least 256 unallocated bytes between two allocations so that a small overrun
  lands outside every allocation (and is reported) instead of in a neighbour;
* const, shared and local state-space addresses are offsets from 0 (as on the
  GPU); their generic addresses add ``CONST_WINDOW``, ``SHARED_WINDOW`` and
  ``LOCAL_WINDOW`` (what ``cvta`` adds and ``cvta.to`` subtracts).

Every access is checked: a global access must lie entirely inside one live
allocation, a shared access inside the block's shared memory, a local access
inside the thread's stack; and each must be naturally aligned (a vector access
to its whole size).  A shared access must also keep off the bytes of ``cp.async``
copies in flight (see :mod:`.async_copy`).  A failure raises :class:`PtxMemoryError` naming the PTX
line, the address, the allocation nearest to it and the thread.

Every shared and global access that passes is reported to the launch's race checker
(:mod:`.races`).
"""

from __future__ import annotations

import bisect

import numpy as np

from .errors import PtxError, PtxMemoryError
from .numerics import I64, U8, U64
from .races import Access, distinct_writes

READ, WRITE, ATOMIC = Access.READ, Access.WRITE, Access.ATOMIC

GLOBAL_BASE = 1 << 36
WINDOW_SHIFT = 52
CONST_WINDOW = 1 << WINDOW_SHIFT
SHARED_WINDOW = 2 << WINDOW_SHIFT
LOCAL_WINDOW = 3 << WINDOW_SHIFT
PARAM_WINDOW = 4 << WINDOW_SHIFT  # kernel parameters (cvta.param), read-only
GAP = 256
ALIGN = 256


class Allocation:
    __slots__ = ("start", "size", "end", "data", "alive", "views", "name", "owner", "base")

    def __init__(self, start: int, size: int, name: str | None = None, owner=None):
        self.owner = owner
        self.base = np.uint64(start)
        self.start, self.size, self.end = start, size, start + size
        self.data = np.zeros(max(16, -(-size // 16) * 16), U8)
        self.alive = True
        self.views: dict = {}
        self.name = name

    def view(self, dtype):
        v = self.views.get(dtype)
        if v is None:
            v = self.views[dtype] = self.data.view(dtype)
        return v

    def describe(self) -> str:
        label = f" ({self.name})" if self.name else ""
        return f"0x{self.start:x}..0x{self.end:x} ({self.size} bytes){label}"


class GlobalMemory:
    """The global allocations of one emulated device."""

    def __init__(self):
        self.starts: list[int] = []
        self.allocations: list[Allocation] = []
        self.next = GLOBAL_BASE
        self.freed: list[Allocation] = []  # recently freed, to explain use-after-free

    def alloc(self, nbytes: int, name: str | None = None) -> Allocation:
        nbytes = int(nbytes)
        if nbytes < 0:
            raise ValueError(f"cannot allocate {nbytes} bytes")
        start = self.next
        self.next = start + -(-max(nbytes, 1) // ALIGN) * ALIGN + GAP
        if self.next >= CONST_WINDOW:
            raise MemoryError("the emulated device's address space is exhausted")
        a = Allocation(start, nbytes, name, self)
        self.starts.append(start)
        self.allocations.append(a)
        return a

    def free(self, address: int) -> None:
        i = bisect.bisect_left(self.starts, address)
        if i == len(self.starts) or self.starts[i] != address:
            raise PtxMemoryError(f"free of 0x{address:x}, which is not the start of a live allocation",
                                 address=address)
        a = self.allocations.pop(i)
        self.starts.pop(i)
        a.alive = False
        self.freed = (self.freed + [a])[-16:]

    def find(self, address: int) -> Allocation | None:
        i = bisect.bisect_right(self.starts, address) - 1
        if i >= 0:
            a = self.allocations[i]
            if address < a.end or (a.size == 0 and address == a.start):
                return a
        return None

    def nearest(self, address: int) -> str:
        for a in self.freed[::-1]:
            if a.start <= address < max(a.end, a.start + 1):
                return f"inside the freed allocation {a.describe()}"
        if not self.allocations:
            return "there are no allocations"
        i = bisect.bisect_right(self.starts, address) - 1
        best = None
        for j in (i, i + 1):
            if 0 <= j < len(self.allocations):
                a = self.allocations[j]
                if address >= a.end:
                    d, where = address - a.end, f"{address - a.end} bytes past the end of"
                elif address < a.start:
                    d, where = a.start - address, f"{a.start - address} bytes before"
                else:
                    d, where = 0, f"at offset {address - a.start} of"
                if best is None or d < best[0]:
                    best = (d, f"{where} the allocation {a.describe()}")
        return best[1]

    def span(self, address: int, nbytes: int, what: str) -> Allocation:
        """The allocation holding [address, address + nbytes) (for host copies)."""
        a = self.find(address)
        if a is None or address + nbytes > a.end:
            raise PtxMemoryError(f"{what} of {nbytes} bytes at 0x{address:x} is outside every allocation "
                                 f"({self.nearest(address)})", address=address)
        return a


# -- sites: the per-instruction data an access needs ----------------------------------------------


class Site:
    """What a compiled memory instruction knows about itself (for checks and errors):
    its PTX line and text, ``loc`` (the kernel source line of its ``.loc``, or None), the
    instruction kind ("ld", "st", "atom", ...), its width in bytes and state space, and
    ``access``, what it does for the race checker (a load is a READ, except the first load
    of a compare-and-swap loop, which the compiler marks ATOMIC)."""

    __slots__ = ("line", "text", "kind", "width", "cache", "space", "loc", "access")

    def __init__(self, line: int, text: str, kind: str, width: int, space: str, loc: str | None = None,
                 access: Access | None = None):
        self.line, self.text, self.kind, self.width, self.space = line, text, kind, width, space
        self.loc = loc
        self.access = access if access is not None else _ACCESS.get(kind, READ)
        self.cache = None


_ACCESS = {"ld": Access.READ, "st": Access.WRITE, "atom": Access.ATOMIC, "red": Access.ATOMIC}


def thread_text(T, k: int) -> str:
    i = int(k)
    return (f"block ({int(T.ctaid[0][i])}, {int(T.ctaid[1][i])}, {int(T.ctaid[2][i])}) "
            f"thread ({int(T.tid[0][i])}, {int(T.tid[1][i])}, {int(T.tid[2][i])})")


def _lanes(ids, mask, n):
    """Indices (into the context's arrays) of the threads an access is made for."""
    if ids is None:
        base = np.arange(n) if mask is None else np.flatnonzero(mask)
    else:
        base = ids if mask is None else ids[mask]
    return base


def _fail(T, ids, mask, site: Site, bad_positions, addresses, message_fn):
    """Raise for the first failing thread (``bad_positions`` index the accessed lanes)."""
    j = int(bad_positions[0])
    lanes = _lanes(ids, mask, len(addresses) if mask is None else len(mask))
    k = lanes[j]
    address = int(addresses[j])
    raise PtxMemoryError(message_fn(address), address=address, line=site.line, source=site.text,
                         thread=thread_text(T, k), loc=site.loc)


def _note(T, ids, mask, site, kind, flat, shared: bool, region=None) -> None:
    """Report the checked access of the lanes (``ids``, ``mask``) at ``flat`` (int64: global
    addresses, or a batch's flat shared bytes; ``region``: the global allocation they are
    all in, if known) to the race checker."""
    races = getattr(T, "races", None)
    if races is not None and flat.size:
        lanes = ids if mask is None else _lanes(ids, mask, 0)
        races.log(T, lanes, kind, site, site.width, flat, shared, region)


def _select(x, mask):
    if mask is None:
        return x
    if np.ndim(x) == 0:
        return x
    return x[mask]


# -- global ------------------------------------------------------------------------------------------


def _global_resolve(T, ids, site: Site, addr, mask):
    """Check ``addr`` (uint64 array, already masked) and return (allocation, byte offsets)
    when all lie in one allocation, else (None, per-lane allocation list)."""
    width = site.width
    a = site.cache
    if addr.size == 0:
        return None, None
    if a is not None and a.alive and a.owner is T.gmem:
        off = addr - np.uint64(a.start)  # wraps for addresses below the start: then too large
        hi = int(off.max())
        if hi + width <= a.size:
            if int(np.bitwise_or.reduce(off)) & (width - 1):
                _misaligned(T, ids, mask, site, addr)
            return a, off
    mem = T.gmem
    lo = int(addr.min())
    a = mem.find(lo)
    if a is not None:
        off = addr - np.uint64(a.start)
        hi = int(off.max())
        if hi + width <= a.size:
            site.cache = a
            if int(np.bitwise_or.reduce(off)) & (width - 1):
                _misaligned(T, ids, mask, site, addr)
            return a, off
    # the general case: lanes in several allocations, or some outside every allocation
    starts = np.array(mem.starts, np.uint64)
    which = np.searchsorted(starts, addr, side="right").astype(np.int64) - 1
    ends = np.array([x.end for x in mem.allocations], np.uint64)
    ok = which >= 0
    safe_which = np.where(ok, which, 0)
    if len(ends):
        ok &= (addr + np.uint64(width)) <= ends[safe_which]
    else:
        ok[:] = False
    if not ok.all():
        bad = np.flatnonzero(~ok)
        verb = {"ld": "load", "st": "store", "atom": "atomic", "red": "reduction"}.get(site.kind, site.kind)
        _fail(T, ids, mask, site, bad, addr,
              lambda x: f"out-of-bounds global {verb} of {width} bytes at address 0x{x:x}: "
                        f"{T.gmem.nearest(x)}")
    if int(np.bitwise_or.reduce(addr)) & (width - 1):
        _misaligned(T, ids, mask, site, addr)
    return None, safe_which


def _misaligned(T, ids, mask, site, addr):
    width = site.width
    bad = np.flatnonzero(addr & np.uint64(width - 1))
    verb = {"ld": "load", "st": "store", "atom": "atomic", "red": "reduction"}.get(site.kind, site.kind)
    _fail(T, ids, mask, site, bad, addr,
          lambda x: f"misaligned {site.space} {verb} of {width} bytes at address 0x{x:x} "
                    f"(it must be a multiple of {width})")


_SHIFT = {1: 0, 2: 1, 4: 2, 8: 3, 16: 4}


def _typed_index(off, dtype, nvec):
    """Element indices of byte offsets (checked: non-negative, below 2**63)."""
    shift = _SHIFT[dtype.itemsize]
    idx = off.view(I64) >> shift if off.dtype == U64 else (off >> shift).astype(np.intp)
    if nvec > 1:
        idx = idx[:, None] + np.arange(nvec)
    return idx


def _scatter_groups(which, fn):
    for g in np.unique(which):
        fn(int(g), np.flatnonzero(which == g))


def _fast_offsets(T, site, addr):
    """Byte offsets of ``addr`` into the allocation this instruction used last, when every
    address is inside it and aligned (checked with one OR-reduction); else None."""
    a = site.cache
    if a is None or not a.alive or a.owner is not T.gmem or not addr.size:
        return None
    off = addr - a.base
    acc = int(np.bitwise_or.reduce(off))  # >= every offset; its low bits show misalignment
    if acc + site.width <= a.size and not acc & (site.width - 1):
        return off
    return None


def global_load(T, ids, site, addr, dtype, nvec, mask=None):
    """Values at ``addr`` (uint64) for the threads (``mask``: only those lanes; the others
    get zeros)."""
    if mask is None and nvec == 1:
        off = _fast_offsets(T, site, addr)
        if off is not None:
            _note(T, ids, None, site, site.access, addr.view(I64), False, site.cache)
            return site.cache.view(dtype)[off.view(I64) >> _SHIFT[dtype.itemsize]]
    a_m = _select(addr, mask)
    alloc, off = _global_resolve(T, ids, site, a_m, mask)
    _note(T, ids, mask, site, site.access, a_m.view(I64), False, alloc)
    n_out = len(addr)
    shape = (n_out, nvec) if nvec > 1 else (n_out,)
    if alloc is not None:
        vals = alloc.view(dtype)[_typed_index(off, dtype, nvec)]
        if mask is None:
            return vals
        out = np.zeros(shape, dtype)
        out[mask] = vals
        return out
    out_m = np.zeros((len(a_m), nvec) if nvec > 1 else (len(a_m),), dtype)
    if len(a_m):
        allocs = T.gmem.allocations

        def grab(g, lanes):
            a = allocs[g]
            out_m[lanes] = a.view(dtype)[_typed_index(a_m[lanes] - np.uint64(a.start), dtype, nvec)]

        _scatter_groups(off, grab)
    if mask is None:
        return out_m
    out = np.zeros(shape, dtype)
    out[mask] = out_m
    return out


def _as_stored(values, dtype):
    """The stored bits: a value of another type of the same size is reinterpreted, never
    converted (a conversion here would be an emulator bug)."""
    if values.dtype != dtype:
        if values.dtype.itemsize != dtype.itemsize:
            raise PtxError(f"internal error: storing {values.dtype} values as {dtype}")
        values = values.view(dtype)
    return values


def global_store(T, ids, site, addr, values, dtype, nvec, mask=None):
    values = _as_stored(np.asarray(values), dtype)
    if mask is None and nvec == 1:
        off = _fast_offsets(T, site, addr)
        if off is not None:
            _note(T, ids, None, site, WRITE, addr.view(I64), False, site.cache)
            site.cache.view(dtype)[off.view(I64) >> _SHIFT[dtype.itemsize]] = values
            return
    a_m = _select(addr, mask)
    v = values if mask is None else values[mask]
    alloc, off = _global_resolve(T, ids, site, a_m, mask)
    _note(T, ids, mask, site, WRITE, a_m.view(I64), False, alloc)
    if alloc is not None:
        alloc.view(dtype)[_typed_index(off, dtype, nvec)] = v
        return
    if len(a_m):
        allocs = T.gmem.allocations

        def put(g, lanes):
            a = allocs[g]
            a.view(dtype)[_typed_index(a_m[lanes] - np.uint64(a.start), dtype, nvec)] = v[lanes]

        _scatter_groups(off, put)


# -- shared, local, const ------------------------------------------------------------------------------


def _window_check(T, ids, mask, site, a, limit, space, base_desc):
    """``a``: int64 state-space addresses (masked).  Checks 0 <= a, a + width <= limit, alignment."""
    width = site.width
    if a.size == 0:
        return
    lo, hi = int(a.min()), int(a.max())
    if lo < 0 or hi + width > limit:
        bad = np.flatnonzero((a < 0) | (a + width > limit))
        verb = {"ld": "load", "st": "store", "atom": "atomic", "red": "reduction"}.get(site.kind, site.kind)
        _fail(T, ids, mask, site, bad, a,
              lambda x: f"out-of-bounds {space} {verb} of {width} bytes at {space} address 0x{x & (2**64 - 1):x} "
                        f"({base_desc})")
    if int(np.bitwise_or.reduce(a)) & (width - 1):
        bad = np.flatnonzero(a & (width - 1))
        verb = {"ld": "load", "st": "store", "atom": "atomic", "red": "reduction"}.get(site.kind, site.kind)
        _fail(T, ids, mask, site, bad, a,
              lambda x: f"misaligned {space} {verb} of {width} bytes at {space} address 0x{x:x} "
                        f"(it must be a multiple of {width})")


def _as_i64(addr):
    if np.ndim(addr) == 0:
        return np.int64(int(addr) & (2**64 - 1) if int(addr) < 2**63 else int(addr) - 2**64)
    return addr.astype(I64) if addr.dtype != U64 else addr.view(I64)


def _meta(arr, ids, mask):
    x = arr if ids is None else arr[ids]
    return x if mask is None else x[mask]


def shared_index(T, ids, site, addr, mask):
    a = _as_i64(_select(addr, mask))
    size = T.shared_size
    _window_check(T, ids, mask, site, a, size,
                  "shared", f"the block has {size} bytes of shared memory")
    idx = _meta(T.sbase, ids, mask) + a
    copies = getattr(T, "copies", None)
    if copies is not None and copies.live:  # cp.async copies in flight: none of their bytes may be touched
        copies.check(T, ids, mask, site, idx)
    wgmma = getattr(T, "wgmma", None)
    if wgmma is not None and wgmma.live and (site.access != READ or site.kind == "cp.async"):
        wgmma.check_write(T, ids, mask, site, idx)  # a wgmma in flight may be reading these bytes
    proxy = getattr(T, "proxy", None)
    if proxy is not None and proxy.active:  # the asynchronous proxy's checks (TMA, bulk copies)
        proxy.generic(T, ids, mask, site, idx)
    return idx


def local_index(T, ids, site, addr, mask):
    a = _as_i64(_select(addr, mask))
    limit = T.local_limit
    _window_check(T, ids, mask, site, a, limit, "local",
                  f"the thread's stack holds {limit} bytes")
    return _meta(T.lbase, ids, mask) + a


def const_index(T, ids, site, addr, mask):
    a = _as_i64(_select(addr, mask))
    size = len(T.cbank)
    _window_check(T, ids, mask, site, a, size, "const", f"the module has {size} bytes of constants")
    return a


def _flat_load(flat, idx, dtype, nvec, mask, n_out):
    vals = flat.view(dtype)[_typed_index(idx, dtype, nvec)]
    if mask is None:
        return vals
    out = np.zeros((n_out, nvec) if nvec > 1 else (n_out,), dtype)
    out[mask] = vals
    return out


def shared_load(T, ids, site, addr, dtype, nvec, mask=None):
    idx = shared_index(T, ids, site, addr, mask)
    _note(T, ids, mask, site, site.access, idx, True)
    return _flat_load(T.smem, idx, dtype, nvec, mask, len(addr))


def shared_store(T, ids, site, addr, values, dtype, nvec, mask=None):
    values = _as_stored(np.asarray(values), dtype)
    idx = shared_index(T, ids, site, addr, mask)
    lanes = ids if mask is None else _lanes(ids, mask, 0)
    stored = values if mask is None else values[mask]
    keep = distinct_writes(T, lanes, idx, stored)  # warp-mates storing one value to one place: one write
    if keep is None:
        _note(T, ids, mask, site, WRITE, idx, True)
    else:
        lanes = np.arange(len(idx)) if lanes is None else lanes
        _note(T, lanes[keep], None, site, WRITE, idx[keep], True)
    T.smem.view(dtype)[_typed_index(idx, dtype, nvec)] = values if mask is None else values[mask]


def local_load(T, ids, site, addr, dtype, nvec, mask=None):
    return _flat_load(T.lmem, local_index(T, ids, site, addr, mask), dtype, nvec, mask, len(addr))


def local_store(T, ids, site, addr, values, dtype, nvec, mask=None):
    values = _as_stored(np.asarray(values), dtype)
    idx = local_index(T, ids, site, addr, mask)
    T.lmem.view(dtype)[_typed_index(idx, dtype, nvec)] = values if mask is None else values[mask]


def const_load(T, ids, site, addr, dtype, nvec, mask=None):
    return _flat_load(T.cbank, const_index(T, ids, site, addr, mask), dtype, nvec, mask, len(addr))


def const_store(T, ids, site, addr, values, dtype, nvec, mask=None):
    raise PtxError("store to the const state space", line=site.line, source=site.text)


def param_load(T, ids, site, addr, dtype, nvec, mask=None):
    """A generic read of a kernel parameter (through ``cvta.param``'s address)."""
    a = _as_i64(_select(addr, mask))
    _window_check(T, ids, mask, site, a, len(T.kparams), "param",
                  f"the kernel's parameters take {len(T.kparams)} bytes")
    flat = T.kparams if len(T.kparams) % 16 == 0 else np.pad(T.kparams, (0, -len(T.kparams) % 16))
    return _flat_load(flat, a, dtype, nvec, mask, len(addr))


def param_store(T, ids, site, addr, values, dtype, nvec, mask=None):
    raise PtxError("store to a kernel parameter (the param state space is read-only)", line=site.line,
                   source=site.text)


# -- generic addressing --------------------------------------------------------------------------------

_LOADS = {0: global_load, 1: const_load, 2: shared_load, 3: local_load, 4: param_load}
_STORES = {0: global_store, 1: const_store, 2: shared_store, 3: local_store, 4: param_store}
_WINDOWS = {0: 0, 1: CONST_WINDOW, 2: SHARED_WINDOW, 3: LOCAL_WINDOW, 4: PARAM_WINDOW}
SPACE_NAMES = {0: "global", 1: "const", 2: "shared", 3: "local", 4: "param"}


def _classify(addr):
    return (addr >> np.uint64(WINDOW_SHIFT)).astype(np.int64)


def generic_load(T, ids, site, addr, dtype, nvec, mask=None):
    a_m = _select(addr, mask)
    if a_m.size == 0:
        return global_load(T, ids, site, addr, dtype, nvec, mask)
    w_lo = int(a_m.min()) >> WINDOW_SHIFT
    w_hi = int(a_m.max()) >> WINDOW_SHIFT
    if w_lo == w_hi and w_lo in _LOADS:
        return _LOADS[w_lo](T, ids, site, addr - np.uint64(_WINDOWS[w_lo]), dtype, nvec, mask)
    cls = _classify(addr)
    out = np.zeros((len(addr), nvec) if nvec > 1 else (len(addr),), dtype)
    base = np.ones(len(addr), bool) if mask is None else mask
    for w in np.unique(cls[base]):
        w = int(w)
        sub = base & (cls == w)
        fn = _LOADS.get(w, global_load)
        vals = fn(T, ids, site, addr - np.uint64(_WINDOWS.get(w, 0)), dtype, nvec, sub)
        out[sub] = vals[sub]
    return out


def generic_store(T, ids, site, addr, values, dtype, nvec, mask=None):
    a_m = _select(addr, mask)
    if a_m.size == 0:
        return
    w_lo = int(a_m.min()) >> WINDOW_SHIFT
    w_hi = int(a_m.max()) >> WINDOW_SHIFT
    if w_lo == w_hi and w_lo in _STORES:
        return _STORES[w_lo](T, ids, site, addr - np.uint64(_WINDOWS[w_lo]), values, dtype, nvec, mask)
    cls = _classify(addr)
    base = np.ones(len(addr), bool) if mask is None else mask
    for w in np.unique(cls[base]):
        w = int(w)
        sub = base & (cls == w)
        _STORES.get(w, global_store)(T, ids, site, addr - np.uint64(_WINDOWS.get(w, 0)), values, dtype, nvec, sub)


SPACE_LOADS = {"global": global_load, "shared": shared_load, "local": local_load, "const": const_load,
               "generic": generic_load}
SPACE_STORES = {"global": global_store, "shared": shared_store, "local": local_store, "const": const_store,
                "generic": generic_store}


# -- atomics --------------------------------------------------------------------------------------------


def _atomic_target(T, ids, site, addr, mask, space):
    """(flat typed-view owner, element byte offsets) for the atomic's lanes."""
    if space == "generic":
        a_m = _select(addr, mask)
        if a_m.size == 0:
            return None, None, None
        w_lo, w_hi = int(a_m.min()) >> WINDOW_SHIFT, int(a_m.max()) >> WINDOW_SHIFT
        if w_lo != w_hi or w_lo not in (0, 2):
            raise PtxError("generic atomics must all address global or all address shared memory",
                           line=site.line, source=site.text)
        space = "global" if w_lo == 0 else "shared"
        addr = addr - np.uint64(_WINDOWS[w_lo])
    if space == "shared":
        idx = shared_index(T, ids, site, addr, mask)
        _note(T, ids, mask, site, ATOMIC, idx, True)
        return "shared", T.smem, idx
    a_m = _select(addr, mask)
    alloc, off = _global_resolve(T, ids, site, a_m, mask)
    if a_m.size:
        _note(T, ids, mask, site, ATOMIC, a_m.view(I64), False, alloc)
    if alloc is not None:
        return "global", alloc.data, off
    # several allocations: express as offsets into each; handled lane group by lane group
    return "global-multi", None, (a_m, off)


def atomic(T, ids, site, space, op, addr, b, c, dtype, apply, mask=None, want_old=True):
    """Execute an atomic read-modify-write for each lane, in thread order where lanes hit the
    same address.  ``apply(old, b, c) -> new`` works on arrays.  Returns the old values."""
    n_out = len(addr)
    kind, flat, off = _atomic_target(T, ids, site, addr, mask, space)
    if kind == "shared" and hasattr(apply, "s"):
        apply = apply.s
    b_m = _select(b, mask) if np.ndim(b) else b
    c_m = _select(c, mask) if (c is not None and np.ndim(c)) else c
    n_m = n_out if mask is None else int(np.count_nonzero(mask))
    old_m = np.zeros(n_m, dtype)
    if kind is None or n_m == 0:
        pass
    elif kind == "global-multi":
        a_m, which = off
        allocs = T.gmem.allocations
        for g in np.unique(which):
            lanes = np.flatnonzero(which == g)
            al = allocs[int(g)]
            _rmw(al.data, a_m[lanes] - np.uint64(al.start), lanes, b_m, c_m, dtype, apply, old_m)
    else:
        _rmw(flat, off, np.arange(n_m), b_m, c_m, dtype, apply, old_m)
    if mask is None:
        return old_m
    out = np.zeros(n_out, dtype)
    out[mask] = old_m
    return out


def _rmw(flat, off, lanes, b, c, dtype, apply, old_out):
    view = flat.view(dtype)
    idx = _typed_index(np.asarray(off), dtype, 1)
    bl = b[lanes] if np.ndim(b) else b
    cl = (c[lanes] if np.ndim(c) else c) if c is not None else None
    order = np.argsort(idx, kind="stable")
    sidx = idx[order]
    if len(sidx) and (len(sidx) == 1 or not (sidx[1:] == sidx[:-1]).any()):
        old = view[idx]
        view[idx] = apply(old, bl, cl)
        old_out[lanes] = old
        return
    # lanes that share an address take turns, in thread order: round r serves each
    # address's r-th lane
    starts = np.r_[0, np.flatnonzero(sidx[1:] != sidx[:-1]) + 1]
    group_start = np.repeat(starts, np.diff(np.r_[starts, len(sidx)]))
    rank = np.empty(len(sidx), np.intp)
    rank[order] = np.arange(len(sidx)) - group_start
    for r in range(int(rank.max()) + 1):
        sel = np.flatnonzero(rank == r)
        ii = idx[sel]
        old = view[ii]
        bb = bl[sel] if np.ndim(bl) else bl
        cc = (cl[sel] if np.ndim(cl) else cl) if cl is not None else None
        view[ii] = apply(old, bb, cc)
        old_out[lanes[sel]] = old
