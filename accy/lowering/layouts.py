"""Tile layouts: which thread of a GPU program, and which of its registers, holds each element
of a tile (the encoding the tile distribution, :mod:`accy.lowering.distribute`, assigns).

A program is a CTA of ``T`` threads (``warps`` * 32).  A layout says, dimension by
dimension (:class:`Dim`), how a tile's coordinates spread over the bits of the thread
number and over each thread's registers: along dimension ``d`` thread ``t`` owns the
sub-index ``t_d = (t // stride) % threads`` and, in its register ``j`` along that
dimension, the coordinate ``(j // per_thread) * threads * per_thread + j % per_thread +
t_d * per_thread``; a thread's registers are those of every dimension, row-major.  A
coordinate past the dimension's size wraps (modulo the size): that register holds a
replica.  Thread bits no dimension uses make replicas too.  An element's owner is the one
thread and register that holds it without wrapping and with every unused bit zero: only
the owner stores it.

The kinds:

- :class:`Blocked`: the one canonical layout of a shape, so that elementwise ops never
  move data: the last (contiguous) axis spread over consecutive threads, ``vec``
  consecutive elements per thread where the size allows (global accesses of a warp fall
  in consecutive addresses), the remaining threads over the axes before it;
- :class:`Slice`: a reduction's result: its parent with the reduced axis removed; the
  threads that differed only along that axis hold replicas;
- :class:`Permute` (a transpose: the same registers, the axes reordered) and
  :class:`Expand` (a reshape that only adds or drops axes of length 1).

- :class:`Mma`: a tensor-core accumulator (``mma.sync`` m16n8's C fragments), the layout a
  ``dot`` on tensor cores leaves its result in.

Every kind reduces to a tuple of :class:`Dim` (``layout.dims``); two layouts with equal
dims distribute a tile the same way.
"""

from __future__ import annotations

import functools
import math

import attrs
from ..targets import WARP_SIZE



def next_power_of_two(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


@attrs.frozen
class Dim:
    """How one dimension of a tile spreads over threads and registers."""

    size: int
    per_thread: int = 1  # consecutive elements a thread holds (a vector)
    threads: int = 1  # threads along this dimension (a power of two)
    stride: int = 0  # the thread's sub-index along it: (t // stride) % threads
    # where > 0, the sub-index's low ``split`` values come from the bits at ``stride`` and the
    # rest from those at ``split_stride`` (an mma layout's columns: lanes, then warps)
    split: int = 0
    split_stride: int = 0

    @classmethod
    def make(cls, size: int, per_thread: int, threads: int, stride: int) -> "Dim":
        """Normalised, so that equal distributions compare equal: a dimension held whole by
        each thread (one thread along it, or of length 1) is ``Dim(size, size)``."""
        if threads == 1 or size == 1:
            return cls(size, size, 1, 0)
        return cls(size, per_thread, threads, stride)

    @property
    def reps(self) -> int:
        return -(-self.size // (self.per_thread * self.threads))

    @property
    def registers(self) -> int:
        return self.reps * self.per_thread

    @property
    def low(self) -> int:
        """Sub-indices from the bits at ``stride``."""
        return self.split or self.threads

    @property
    def bits(self) -> int:
        """The thread bits this dimension uses, as a mask."""
        return (self.low - 1) * self.stride | ((self.threads // self.low - 1) * self.split_stride if self.split else 0)

    def bit_positions(self) -> list[int]:
        """The thread bits this dimension uses, lowest sub-index bit first."""
        fields = [(self.stride, self.low)] + ([(self.split_stride, self.threads // self.split)] if self.split else [])
        return [stride.bit_length() - 1 + k for stride, n in fields if n > 1 for k in range(n.bit_length() - 1)]

    def sub_index(self, t: int) -> int:
        """Thread ``t``'s sub-index along this dimension."""
        if self.threads == 1:
            return 0
        low = (t // self.stride) % self.low
        return low + self.split * ((t // self.split_stride) % (self.threads // self.split)) if self.split else low

    def static(self, j: int) -> int:
        """Register ``j``'s coordinate before the thread's part is added."""
        return (j // self.per_thread) * self.threads * self.per_thread + j % self.per_thread

    def wraps(self, j: int) -> bool:
        """May register ``j`` hold a coordinate past the size (a replica) in some thread?"""
        return self.static(j) + (self.threads - 1) * self.per_thread >= self.size


class Layout:
    """What every layout answers (the kinds define ``dims`` and ``threads``)."""

    dims: tuple[Dim, ...]
    threads: int

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(d.size for d in self.dims)

    @property
    def registers(self) -> int:
        """Registers per thread."""
        return math.prod(d.registers for d in self.dims)

    @property
    def replica_bits(self) -> int:
        """Thread bits no dimension uses: a thread with any of them set holds only replicas."""
        used = 0
        for d in self.dims:
            used |= d.bits
        return (self.threads - 1) & ~used

    def register_indices(self, r: int) -> tuple[int, ...]:
        """Register ``r``'s register index along each dimension (row-major)."""
        out = []
        for d in reversed(self.dims):
            out.append(r % d.registers)
            r //= d.registers
        return tuple(reversed(out))

    def register(self, js) -> int:
        r = 0
        for d, j in zip(self.dims, js):
            r = r * d.registers + j
        return r

    def same(self, other: "Layout") -> bool:
        """Do both distribute a tile the same way?"""
        return self.dims == other.dims and self.threads == other.threads

    def element_of(self, t: int, r: int) -> tuple[tuple[int, ...], bool]:
        """(the coordinates thread ``t`` register ``r`` holds, whether it owns them): the layout
        evaluated in Python, for tests and for reading a layout."""
        coords, owner = [], (t & self.replica_bits) == 0
        for d, j in zip(self.dims, self.register_indices(r)):
            c = d.static(j) + d.sub_index(t) * d.per_thread
            owner = owner and c < d.size
            coords.append(c % d.size)
        return tuple(coords), owner

    def __str__(self) -> str:
        dims = ", ".join(f"{d.size}:{d.per_thread}x{d.threads}@{d.stride}" for d in self.dims)
        return f"{type(self).__name__.lower()}<{dims}; {self.threads} threads>"


def _vector(shape: tuple[int, ...], threads: int) -> int:
    """Elements per thread along the last axis: up to 4 where it divides the axis and every
    thread still gets a vector's worth (small tiles spread one element per thread)."""
    n = math.prod(shape)
    for v in (4, 2):
        if shape[-1] % v == 0 and n >= v * threads:
            return v
    return 1


@functools.cache
def _blocked_dims(shape: tuple[int, ...], threads: int, vec: int | None = None) -> tuple[Dim, ...]:
    vec = vec or _vector(shape, threads)
    dims, remaining, stride = [], threads, 1
    for k in reversed(range(len(shape))):
        per = vec if k == len(shape) - 1 else 1
        n = min(remaining, next_power_of_two(-(-shape[k] // per)))
        dims.append(Dim.make(shape[k], per, n, stride))
        remaining //= n
        stride *= n
    return tuple(reversed(dims))


@attrs.frozen
class Blocked(Layout):
    """The canonical layout of ``shape`` over ``threads`` threads (see the module's doc);
    ``vec`` consecutive elements a thread along the last axis where given (a 16-byte copy's)."""

    shape_: tuple[int, ...]
    threads: int
    vec: int | None = None

    @property
    def dims(self) -> tuple[Dim, ...]:
        return _blocked_dims(self.shape_, self.threads, self.vec)


@attrs.frozen
class Slice(Layout):
    """``parent`` with ``axis`` removed: where a reduction along ``axis`` leaves its result
    (every thread that held part of a line holds the line's result)."""

    parent: Layout
    axis: int

    @property
    def threads(self) -> int:
        return self.parent.threads

    @property
    def dims(self) -> tuple[Dim, ...]:
        dims = self.parent.dims
        return dims[:self.axis] + dims[self.axis + 1:]


@attrs.frozen
class Permute(Layout):
    """``parent`` with its axes in the order ``perm`` (a transpose moves no data)."""

    parent: Layout
    perm: tuple[int, ...]

    @property
    def threads(self) -> int:
        return self.parent.threads

    @property
    def dims(self) -> tuple[Dim, ...]:
        return tuple(self.parent.dims[p] for p in self.perm)


@attrs.frozen
class Expand(Layout):
    """``parent`` reshaped to ``shape_`` where that only adds or drops axes of length 1."""

    parent: Layout
    shape_: tuple[int, ...]

    @property
    def threads(self) -> int:
        return self.parent.threads

    @property
    def dims(self) -> tuple[Dim, ...]:
        kept = iter(d for d in self.parent.dims if d.size != 1)
        return tuple(Dim.make(1, 1, 1, 0) if n == 1 else next(kept) for n in self.shape_)


@functools.cache
def _mma_dims(shape: tuple[int, int], threads: int, warps_n: int) -> tuple[Dim, ...]:
    m, n = shape
    warps_m = threads // WARP_SIZE // warps_n
    if warps_n == 1:
        return Dim(m, 1, 8 * warps_m, 4), Dim(n, 2, 4, 1)
    return Dim(m, 1, 8 * warps_m, 4), Dim(n, 2, 4 * warps_n, 1, 4, WARP_SIZE * warps_m)


@attrs.frozen
class Mma(Layout):
    """A tensor-core accumulator, ``mma.m16n8``'s C/D fragments: lane ``l`` of warp ``w`` holds
    rows ``8 w + l // 4`` (+ multiples of ``8 * warps``) and, of every 8 columns, columns
    ``2 (l % 4)`` and the next.  Row halves ``2 q`` and ``2 q + 1`` of a warp are one 16-row mma
    tile (its rows ``l // 4`` and ``l // 4 + 8``); the warps split the rows, each holds every
    column.  The same registers, read along the columns, are an A operand's fragments
    (``m16n8k16``'s a0..a7 for 16 columns), so one dot's result feeds the next without moving.

    With ``warps_n`` > 1 the warps form a grid, ``warps / warps_n`` along the rows (the low bits
    of the warp number) by ``warps_n`` along the columns: warp ``(wm, wn)`` holds rows as above
    over ``wm`` and the 8-column tiles ``wn``, ``wn + warps_n``, ... (less operand traffic per
    mma: a matmul's 128x128 tile on 8 warps is 2 x 4, as Triton's)."""

    shape_: tuple[int, int]
    threads: int
    warps_n: int = 1

    @property
    def dims(self) -> tuple[Dim, ...]:
        return _mma_dims(self.shape_, self.threads, self.warps_n)

    @property
    def warps_m(self) -> int:
        return self.threads // WARP_SIZE // self.warps_n

    @staticmethod
    def fits(shape: tuple[int, ...], threads: int, warps_n: int = 1) -> bool:
        """Does every warp get whole 16-row tiles and every tile whole 8-column ones?"""
        warps = threads // WARP_SIZE
        return (len(shape) == 2 and warps % warps_n == 0 and shape[0] % (16 * (warps // warps_n)) == 0
                and shape[1] % (8 * warps_n) == 0)


def a_fragment_registers(layout: Layout, q: int, k0: int) -> list[int]:
    """The registers of a 16-bit tile in an :class:`Mma` layout that are its warp's A fragment
    (m16n8k16's a0..a7, and each warp's share of a warpgroup's) for the warp's ``q``-th 16-row
    tile and the k-step at column ``k0``: row halves ``2 q`` and ``2 q + 1``, two columns of
    each 8."""
    return [layout.register((2 * q + h, 4 * (k0 // 16) + w))
            for w, h in ((0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (3, 0), (2, 1), (3, 1))]


def unit_reshape(shape: tuple[int, ...], new: tuple[int, ...]) -> bool:
    """Does reshaping ``shape`` to ``new`` only add or drop axes of length 1?"""
    return tuple(n for n in shape if n != 1) == tuple(n for n in new if n != 1)


__all__ = ["WARP_SIZE", "Dim", "Layout", "Blocked", "Slice", "Permute", "Expand", "Mma", "a_fragment_registers",
           "unit_reshape", "next_power_of_two"]
