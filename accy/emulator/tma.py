"""The tensor memory accelerator and the bulk copies: ``cp.async.bulk.tensor`` (loads that signal
an mbarrier, stores in bulk groups), the plain ``cp.async.bulk`` copies, ``tensormap.replace``
and the checks the driver (``cuTensorMapEncodeTiled``) makes of a map.

Execution (PTX ISA, "Data Movement and Conversion Instructions: cp.async.bulk.tensor" and
"cp.async.bulk", "Tensor Copy" and "Tensor-map"): a copy moves its data when it is issued (an
infinitely fast copy engine: every later moment the ISA allows would give the same values to a
correct program), and a load then performs complete-tx of its byte count on its mbarrier, which
may complete the mbarrier's phase.  Whether the program waits before touching the bytes is what
:mod:`.async_proxy` checks.

A tensor copy moves the *box* at the given coordinates (signed, innermost first): along each
dimension ``ceil(box / element stride)`` elements, the k-th at coordinate ``c + k * stride``.
In shared memory the box is dense, innermost dimension fastest, written (or read) in the map's
swizzle mode: the 16-byte chunk index within each ``span``-byte row (span 32, 64 or 128) is
XORed with the row's number modulo ``span / 16``, i.e. address bits [4, 4+b) XOR bits [7, 7+b),
b = log2(span / 16) (the CUDA programming guide's "TMA Swizzle").  A load fills the elements
outside the tensor with zeros (NaN with the NaN fill on float types); a store skips them.
The complete-tx count of a load is the whole box's bytes, filled elements included.
"""

from __future__ import annotations

import numpy as np

from . import memory
from .async_proxy import CHUNK, proxy_of
from .errors import PtxError, PtxMemoryError
from .memory import thread_text
from .numerics import I64, U8, U64
from .tensor_map import MAP_BYTES, ElementType, Interleave, OobFill, Swizzle, decode

FLOATS = {ElementType.FLOAT16: 0x7FFF, ElementType.BFLOAT16: 0x7FFF, ElementType.FLOAT32: 0x7FFFFFFF,
          ElementType.FLOAT32_FTZ: 0x7FFFFFFF, ElementType.FLOAT64: 0x7FFFFFFFFFFFFFFF,
          ElementType.TFLOAT32: 0x7FFFFFFF, ElementType.TFLOAT32_FTZ: 0x7FFFFFFF}


def swizzled(offsets, swizzle: Swizzle):
    """Shared offsets (from a base aligned to the pattern's repeat) in the swizzle mode."""
    if swizzle is Swizzle.NONE:
        return offsets
    rows = swizzle.span // 16
    return offsets ^ (((offsets >> 7) & (rows - 1)) << 4)


# -- the map -------------------------------------------------------------------------------------------------


def map_bytes(T, k: int, site, address: int) -> bytes:
    """The 128 bytes at the generic address of a tensor map (in the param, const or global space)."""
    window = address >> memory.WINDOW_SHIFT
    if address % 64:
        raise PtxMemoryError(f"the tensor map's address 0x{address:x} is not 64-byte aligned", address=address,
                             line=site.line, source=site.text, thread=thread_text(T, k))
    off = address - (window << memory.WINDOW_SHIFT)
    if window == 4:
        data = T.kparams[off:off + MAP_BYTES]
    elif window == 1:
        data = T.cbank[off:off + MAP_BYTES]
    elif window == 0:
        a = T.gmem.find(address)
        if a is None or address + MAP_BYTES > a.end:
            raise PtxMemoryError(f"the tensor map at 0x{address:x} is outside every allocation "
                                 f"({T.gmem.nearest(address)})", address=address, line=site.line, source=site.text,
                                 thread=thread_text(T, k))
        data = a.data[address - a.start:address - a.start + MAP_BYTES]
    else:
        raise PtxMemoryError(f"the tensor map's address 0x{address:x} is not a generic address of the param, "
                             f"const or global space", address=address, line=site.line, source=site.text,
                             thread=thread_text(T, k))
    if len(data) < MAP_BYTES:
        raise PtxMemoryError(f"the tensor map at 0x{address:x} runs past the end of its space", address=address,
                             line=site.line, source=site.text, thread=thread_text(T, k))
    return bytes(data)


def read_map(T, k: int, site, address: int, rank: int | None = None):
    """The decoded, validated map at ``address``."""
    try:
        f = decode(map_bytes(T, k, site, address))
    except ValueError as e:
        raise PtxError(f"the object at 0x{address:x} is not a tensor map: {e}", line=site.line, source=site.text,
                       thread=thread_text(T, k)) from None
    problem = check_map(f)
    if problem is None and rank is not None and f.rank != rank:
        problem = f"its rank is {f.rank}, the instruction's .{rank}d names {rank}"
    if problem:
        raise PtxError(f"invalid tensor map at 0x{address:x}: {problem}", line=site.line, source=site.text,
                       thread=thread_text(T, k))
    return f


def check_map(f) -> str | None:
    """What ``cuTensorMapEncodeTiled`` would refuse in the map ``f`` (None: nothing)."""
    e = f.element_type.itemsize
    if f.interleave is not Interleave.NONE:
        return "interleaved layouts are not emulated"
    if f.address % 16:
        return f"the global address 0x{f.address:x} is not 16-byte aligned"
    for d, n in enumerate(f.dims):
        if not 1 <= n <= 1 << 32:
            return f"global dimension {d} is {n} (1 .. 2**32)"
    for d, s in enumerate(f.strides, 1):
        if s % 16 or not 0 < s < 1 << 40:
            return f"the global stride of dimension {d} is {s} bytes (a multiple of 16 below 2**40)"
    for d, b in enumerate(f.box):
        if not 1 <= b <= 256:
            return f"box dimension {d} is {b} (1 .. 256)"
    for d, s in enumerate(f.element_strides):
        if not 1 <= s <= 8:
            return f"the element stride of dimension {d} is {s} (1 .. 8)"
    inner = f.box[0] * e
    if inner % 16:
        return f"the box's inner dimension is {inner} bytes (a multiple of 16)"
    if f.swizzle is not Swizzle.NONE and inner > f.swizzle.span:
        return f"the box's inner dimension is {inner} bytes, over the {f.swizzle.span}-byte swizzle span"
    if f.oob_fill is OobFill.NAN and f.element_type not in FLOATS:
        return "NaN out-of-bounds fill needs a floating-point element type"
    return None


def box_layout(f, coords):
    """(global byte offsets from the map's address, in-bounds mask, element count per dimension) of
    the box's elements in shared-memory order (innermost fastest)."""
    counts = [-(-b // s) for b, s in zip(f.box, f.element_strides)]
    axes = [int(c) + np.arange(n, dtype=I64) * s for c, n, s in zip(coords, counts, f.element_strides)]
    grids = np.meshgrid(*axes[::-1], indexing="ij")[::-1]  # dimension 0 fastest
    strides = (f.element_type.itemsize,) + tuple(f.strides)
    offset = np.zeros(grids[0].shape, I64)
    inside = np.ones(grids[0].shape, bool)
    for g, n, s in zip(grids, f.dims, strides):
        offset += g * s
        inside &= (g >= 0) & (g < n)
    return offset.reshape(-1), inside.reshape(-1), counts


def _global_span(T, k, site, f, offsets):
    """(allocation, byte offsets into it) of the in-bounds elements (all must be in one allocation)."""
    e = f.element_type.itemsize
    if not len(offsets):
        return None, offsets
    lo, hi = int(offsets.min()) + f.address, int(offsets.max()) + f.address + e
    a = T.gmem.find(lo)
    if a is None or hi > a.end:
        raise PtxMemoryError(f"the tensor's elements at 0x{lo:x} .. 0x{hi:x} are outside every allocation "
                             f"({T.gmem.nearest(lo if a is None else hi)}; check the map's address, dimensions and "
                             f"strides)", address=lo, line=site.line, source=site.text, thread=thread_text(T, k))
    return a, offsets + (f.address - a.start)


def _shared_box(T, k, site, f, dst: int, nelem: int):
    """Flat shared byte indices (elements, bytes) of the box at the shared address ``dst``."""
    e = f.element_type.itemsize
    align = max(128, f.swizzle.span * 8)
    if dst % align:
        raise PtxMemoryError(f"the tensor copy's shared address 0x{dst:x} is not {align}-byte aligned (the ISA "
                             f"requires 128; a swizzled box its pattern's repeat, 8 x {f.swizzle.span} bytes)"
                             if f.swizzle is not Swizzle.NONE else
                             f"the tensor copy's shared address 0x{dst:x} is not 128-byte aligned", address=dst,
                             line=site.line, source=site.text, thread=thread_text(T, k))
    size = nelem * e
    if dst < 0 or dst + size > T.shared_size:
        raise PtxMemoryError(f"the tensor copy's box of {size} bytes at shared address 0x{dst:x} runs past the "
                             f"block's {T.shared_size} bytes of shared memory", address=dst, line=site.line,
                             source=site.text, thread=thread_text(T, k))
    place = swizzled(np.arange(nelem, dtype=I64) * e, f.swizzle)
    return int(T.sbase[k]) + dst + place[:, None] + np.arange(e)


def _record_global(T, k, site, alloc, offs, e, kind):
    races = getattr(T, "races", None)
    if races is not None and len(offs):
        races.log(T, np.full(len(offs), k), kind, site, e, (offs + alloc.start).astype(I64), False, alloc)


def tensor_load(T, k: int, site, gsite, map_address: int, coords, dst: int, bar_flat: int, rank: int):
    """``cp.async.bulk.tensor.<rank>d.shared::cluster.global...complete_tx::bytes`` by the thread ``k``."""
    proxy = proxy_of(T)
    f = read_map(T, k, site, map_address, rank)
    bar = proxy.bars.get(T, k, bar_flat, site)
    offs, inside, counts = box_layout(f, coords)
    e = f.element_type.itemsize
    places = _shared_box(T, k, site, f, dst, len(offs))
    data = np.zeros((len(offs), e), U8)
    if f.oob_fill is OobFill.NAN:
        data[:] = np.frombuffer(int(FLOATS[f.element_type]).to_bytes(e, "little"), U8)
    alloc, goffs = _global_span(T, k, site, f, offs[inside])
    if alloc is not None:
        data[inside] = alloc.data[goffs[:, None] + np.arange(e)]
        _record_global(T, k, gsite, alloc, goffs, e, memory.READ)
    proxy.load_issued(T, k, np.unique(places[:, 0] // CHUNK), site, bar)
    T.smem[places] = data
    _count(T, proxy, k, len(offs) * e)
    _timed(T, k, site, len(offs) * e, bar_flat)
    proxy.bars.complete_tx(T, k, bar, len(offs) * e, site)


def tensor_store(T, k: int, site, gsite, map_address: int, coords, src: int, rank: int):
    """``cp.async.bulk.tensor.<rank>d.global.shared::cta...bulk_group`` by the thread ``k``."""
    proxy = proxy_of(T)
    f = read_map(T, k, site, map_address, rank)
    offs, inside, counts = box_layout(f, coords)
    e = f.element_type.itemsize
    places = _shared_box(T, k, site, f, src, len(offs))
    proxy.store_issued(T, k, np.unique(places[:, 0] // CHUNK), site)
    data = T.smem[places[inside]]
    alloc, goffs = _global_span(T, k, site, f, offs[inside])
    if alloc is not None:
        _record_global(T, k, gsite, alloc, goffs, e, memory.WRITE)
        alloc.data[goffs[:, None] + np.arange(e)] = data
    _count(T, proxy, k, int(inside.sum()) * e)


def _timed(T, k: int, site, nbytes: int, bar_flat: int) -> None:
    """A profiled launch's latency model times the copy on the memory path, completing on its
    mbarrier (:mod:`.latency`)."""
    prof = getattr(T, "prof", None)
    if prof is not None and hasattr(prof, "async_issue"):
        from .latency import AsyncKind

        prof.async_issue(AsyncKind.BULK_COPY, T, np.array([k]), nbytes, line=site.line,
                         barrier=np.array([bar_flat], np.uint64))


def _count(T, proxy, k, nbytes: int):
    proxy.bytes_copied += nbytes
    prof = getattr(T, "prof", None)
    if prof is not None and hasattr(prof, "async_bytes"):
        prof.async_bytes += nbytes


def _bulk_checks(T, k, site, dst, src, size, shared_at):
    if size % 16 or size <= 0:
        raise PtxError(f"cp.async.bulk of {size} bytes: the size must be a positive multiple of 16",
                       line=site.line, source=site.text, thread=thread_text(T, k))
    for what, a in (("destination", dst), ("source", src)):
        if a % 16:
            raise PtxMemoryError(f"cp.async.bulk {what} address 0x{a:x} is not 16-byte aligned", address=a,
                                 line=site.line, source=site.text, thread=thread_text(T, k))
    if shared_at < 0 or shared_at + size > T.shared_size:
        raise PtxMemoryError(f"cp.async.bulk of {size} bytes at shared address 0x{shared_at:x} runs past the block's "
                             f"{T.shared_size} bytes of shared memory", address=shared_at, line=site.line,
                             source=site.text, thread=thread_text(T, k))


def _global_bytes(T, k, site, address: int, size: int):
    a = T.gmem.find(address)
    if a is None or address + size > a.end:
        raise PtxMemoryError(f"cp.async.bulk of {size} bytes at global address 0x{address:x} is outside every "
                             f"allocation ({T.gmem.nearest(address)})", address=address, line=site.line,
                             source=site.text, thread=thread_text(T, k))
    return a, address - a.start


def bulk_load(T, k: int, site, gsite, dst: int, src: int, size: int, bar_flat: int):
    """``cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [src], size, [mbar]``."""
    proxy = proxy_of(T)
    _bulk_checks(T, k, site, dst, src, size, dst)
    bar = proxy.bars.get(T, k, bar_flat, site)
    a, off = _global_bytes(T, k, site, src, size)
    _record_global(T, k, gsite, a, off + np.arange(0, size, 16, dtype=I64), 16, memory.READ)
    flat = int(T.sbase[k]) + dst
    proxy.load_issued(T, k, np.arange(flat // CHUNK, (flat + size) // CHUNK), site, bar)
    T.smem[flat:flat + size] = a.data[off:off + size]
    _count(T, proxy, k, size)
    proxy.bars.complete_tx(T, k, bar, size, site)


def bulk_store(T, k: int, site, gsite, dst: int, src: int, size: int):
    """``cp.async.bulk.global.shared::cta.bulk_group [dst], [src], size``."""
    proxy = proxy_of(T)
    _bulk_checks(T, k, site, dst, src, size, src)
    a, off = _global_bytes(T, k, site, dst, size)
    flat = int(T.sbase[k]) + src
    proxy.store_issued(T, k, np.arange(flat // CHUNK, (flat + size) // CHUNK), site)
    _record_global(T, k, gsite, a, off + np.arange(0, size, 16, dtype=I64), 16, memory.WRITE)
    a.data[off:off + size] = T.smem[flat:flat + size]
    _count(T, proxy, k, size)


# -- tensormap.replace ---------------------------------------------------------------------------------------


def replace(T, k: int, site, space: str, address: int, field: str, ordinal, value):
    """``tensormap.replace.tile.<field>.<space>.b1024.<type> [addr], {ord,} value``: the field's
    value in the emulated driver's layout (:data:`.tensor_map.LAYOUT`)."""
    import struct

    from .tensor_map import LAYOUT

    offset, fmt, entries = LAYOUT[field]
    if ordinal is not None:
        if not 0 <= ordinal < entries:
            raise PtxError(f"tensormap.replace of {field} with ordinal {ordinal}: it must lie in 0 .. {entries - 1}",
                           line=site.line, source=site.text, thread=thread_text(T, k))
        offset += ordinal * struct.calcsize(fmt)
    width = struct.calcsize(fmt)
    raw = struct.pack(fmt, int(value) & ((1 << (8 * width)) - 1))
    if address % 128:
        raise PtxMemoryError(f"tensormap.replace: the map's address 0x{address:x} is not 128-byte aligned",
                             address=address, line=site.line, source=site.text, thread=thread_text(T, k))
    if space == "shared":
        if address < 0 or address + MAP_BYTES > T.shared_size:
            raise PtxMemoryError(f"tensormap.replace: shared address 0x{address:x} is outside the block's shared "
                                 f"memory", address=address, line=site.line, source=site.text,
                                 thread=thread_text(T, k))
        at = int(T.sbase[k]) + address + offset
        T.smem[at:at + width] = np.frombuffer(raw, U8)
        return
    a, off = _global_bytes(T, k, site, address, MAP_BYTES)
    a.data[off + offset:off + offset + width] = np.frombuffer(raw, U8)


def per_thread(x, n, dtype=U64):
    return np.broadcast_to(np.asarray(x).astype(dtype), (n,))
