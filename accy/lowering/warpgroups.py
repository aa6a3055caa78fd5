"""``t.dot`` on Hopper's warpgroup tensor cores (``wgmma``, NVPTX at sm_90a), beside
:mod:`.tensor_cores`'s ``mma.sync`` whose staging and pipelining it shares.

- A program of ``W`` warps is ``W / 4`` warpgroups; each computes its own 64-row blocks of
  the result, every column of them, by ``wgmma.mma_async`` m64nNk with B (and A, unless it
  is held in registers) read from shared memory by the hardware, staged in the canonical
  swizzled rows of :mod:`accy.dsl.warpgroups` (one swizzle span per row: 128 bytes where the
  row fills it; 1024-byte aligned).
- The accumulator stays in the :class:`~.layouts.Mma` layout the rest of the distribution
  knows (reductions, stores, FA2's P fed back as A): a warpgroup's fragment holds rows
  ``16 w + l // 4`` and ``+ 8`` of its block, so A's rows are staged in the order that makes
  those the rows the Mma layout gives warp ``w`` (:meth:`SwizzledRows.position`), and an A
  held in an Mma layout is already each warp's register fragment.
- A is K-major (rows of K); B is K-major where it is staged as n rows of k (a transposed
  operand, attention's ``key.T``) and MN-major (k rows of n) otherwise, which the ISA allows
  for 16-bit types only: a tf32, i8 or fp8 B in k rows goes through registers and is staged
  transposed (no ``cp.async`` for it).
- The products of one dot are one group: fenced, committed and waited for at once (no group
  left in flight across trips), so the stage a trip read is free when the next trip refills it.
"""

from __future__ import annotations

import attrs

from ..dsl.ir import Op
from ..dsl.ops import Major, MmaKind, WgmmaAttrs, wgmma_n
from ..dsl.traced import SharedArray
from ..dsl.warpgroups import linear_offset, pattern_bytes, staged_offset, swizzle_for
from ..targets import WARP_SIZE
from .layouts import Mma, a_fragment_registers
from .rebuild import Part, Rebuild

FP8 = (MmaKind.E4M3, MmaKind.E5M2)
# fp8 wgmma accumulates with fewer bits than f32 (Hopper: about 14; DeepSeek-V3's report, 3.3.2):
# its products are summed this many k-steps (k32 each: 128 elements, the report's interval) from
# zero, then added to the f32 accumulator by an ordinary add
FP8_PROMOTION_STEPS = 4
WARPGROUP_WARPS = 4
WARPGROUP_THREADS = WARPGROUP_WARPS * WARP_SIZE
BLOCK_ROWS = 64  # a wgmma's M
MAX_N = 256  # its widest N
ALIGN = pattern_bytes(128)  # bytes every staged block starts at a multiple of


def _log2(n: int) -> int:
    return n.bit_length() - 1


@attrs.frozen
class SwizzledRows:
    """An operand's staged rows (``swizzle`` bytes a row, chunks ``chunk`` elements apart;
    :mod:`accy.dsl.warpgroups`), A's rows reordered for a program of ``warps`` warps (0: in
    order) and ``rows`` rows."""

    swizzle: int
    chunk: int
    itemsize: int
    warps: int = 0
    rows: int = 0

    @property
    def per_row(self) -> int:
        return self.swizzle // self.itemsize

    @property
    def blocks_per_group(self) -> int:
        """A's 64-row blocks each warpgroup computes."""
        return self.rows // (BLOCK_ROWS * (self.warps // WARPGROUP_WARPS))

    def position(self, b, core, row):
        """Where logical row ``row`` of A is staged: row ``r + 8 w + 32 g + 8 W (2 q + h)`` (``r`` <
        8, warp ``4 g + w`` of ``W``, the Mma layout's row register ``2 q + h``) is row ``16 w +
        8 h + r`` of warpgroup ``g``'s ``q``-th block, where its wgmma fragment puts it."""
        if not self.warps:
            return row
        lw, groups, per_group = _log2(self.warps), self.warps // WARPGROUP_WARPS, self.blocks_per_group
        fields = ((0, 7, 0), (3, 3, 4), (3 + lw, 1, 3))  # (from bit, mask, to bit): r, w, h
        if isinstance(row, int):
            out = sum(((row >> s) & m) << t for s, m, t in fields)
            return out + BLOCK_ROWS * ((row >> 4 + lw) + per_group * ((row >> 5) & (groups - 1)))
        parts = [b.shl(b.bitwise_and(b.shr(row, s) if s else row, m), t) if t else b.bitwise_and(row, m)
                 for s, m, t in fields]
        if per_group > 1:
            parts.append(b.shl(b.shr(row, 4 + lw), _log2(BLOCK_ROWS)))
        if groups > 1:
            parts.append(core.mul(b.bitwise_and(b.shr(row, 5), groups - 1), BLOCK_ROWS * per_group))
        out = parts[0]
        for p in parts[1:]:
            out = b.bitwise_or(out, p)
        return out

    def at(self, b, core, row, col, row_low=None):
        """The element offset of (``row``, ``col``) from the block's start (aligned to
        :data:`ALIGN`), swizzled as the hardware reads it."""
        row = self.position(b, core, row)
        if isinstance(row, int) and isinstance(col, int):
            return staged_offset(row, col, self.swizzle, self.chunk, self.itemsize)
        per_row = self.per_row  # the same, recorded
        if isinstance(col, int):
            linear = core.add(core.mul(row, per_row), linear_offset(0, col, self.swizzle, self.chunk, self.itemsize))
        else:
            which = core.mul(b.shr(col, _log2(per_row)), self.chunk)
            linear = core.add(core.add(which, core.mul(row, per_row)), b.bitwise_and(col, per_row - 1))
        unit_bit, row_bit = _log2(16 // self.itemsize), _log2(128 // self.itemsize)
        return b.bitwise_xor(linear, b.shl(b.bitwise_and(b.shr(linear, row_bit), self.swizzle // 16 - 1), unit_bit))


def warpgroup_fits(op: Op, kind: MmaKind, b_rows_n: bool, threads: int) -> bool:
    """Can the dot ``op`` (of ``kind``, which ``mma.sync`` could run) of a program of
    ``threads`` run on wgmma?"""
    (m, _), n = op.operands[0].type.shape, op.operands[1].type.shape[1]
    warps = threads // WARP_SIZE
    if warps % WARPGROUP_WARPS or m % (BLOCK_ROWS * warps // WARPGROUP_WARPS):
        return False
    per_group = m // (BLOCK_ROWS * warps // WARPGROUP_WARPS)
    if per_group & (per_group - 1) or (n > MAX_N and n % MAX_N) or not wgmma_n(kind, min(n, MAX_N)):
        return False
    if b_rows_n or not kind.transposes:  # (others staged K-major: transposed from registers)
        return True
    return swizzle_for(min(n, MAX_N) * 2) is not None


def aligned(elements: int, itemsize: int, align: int = ALIGN) -> int:
    """``elements`` of ``itemsize`` bytes rounded up to a multiple of ``align`` bytes."""
    return -(-elements * itemsize // align) * align // itemsize


class WarpgroupDot(Part):
    """The dots on ``wgmma`` (see the module's doc): which can, how they stage, their products."""

    def __init__(self, core: Rebuild):
        super().__init__(core)
        self.warpgroup = None  # this thread's warpgroup (start), on more than one

    def start(self) -> None:
        """At the program's start: this thread's warpgroup, as lane 0 of its warp has it (so that
        ptxas sees it warp-uniform and keeps the descriptors in uniform registers; dropped as
        dead code where no dot runs on wgmma)."""
        if self.T > WARPGROUP_THREADS:
            self.warpgroup = self.b.shuffle(self.b.shr(self.tid, _log2(WARPGROUP_THREADS)), 0)

    def group(self):
        """This thread's warpgroup (:meth:`start`)."""
        return 0 if self.T <= WARPGROUP_THREADS else self.warpgroup

    def fits(self, op: Op, kind: MmaKind, b_rows_n: bool) -> bool:
        """Can the dot ``op`` (of ``kind``, which ``mma.sync`` could run) run on wgmma?"""
        return warpgroup_fits(op, kind, b_rows_n, self.T)

    def a_rows(self, op: Op, itemsize: int) -> SwizzledRows:
        """How the dot ``op``'s A is staged: its m rows of K, in :meth:`SwizzledRows.position`'s order."""
        (m, kk) = op.operands[0].type.shape
        swizzle = swizzle_for(kk * itemsize)
        return SwizzledRows(swizzle, m * swizzle // itemsize, itemsize, self.T // WARP_SIZE, m)

    def plan(self, op: Op, kind: MmaKind, a_held: bool, b_rows_n: bool, itemsize: int):
        """(A's rows, B's rows, B's base, the elements in all): A's 64-row blocks first (none
        where held), then B's, each start :data:`ALIGN`-aligned."""
        (m, kk), n = op.operands[0].type.shape, op.operands[1].type.shape[1]
        a_rows = self.a_rows(op, itemsize)
        b_base = 0 if a_held else aligned(m * kk, itemsize)
        if b_rows_n:  # n rows of k
            b_swizzle = swizzle_for(kk * itemsize)
            b_rows = SwizzledRows(b_swizzle, n * b_swizzle // itemsize, itemsize)
        else:  # k rows of n
            b_swizzle = swizzle_for(min(n, MAX_N) * itemsize)
            b_rows = SwizzledRows(b_swizzle, kk * b_swizzle // itemsize, itemsize)
        return a_rows, b_rows, b_base, aligned(b_base + n * kk, itemsize)

    def products(self, op: Op, kind: MmaKind, a, a_rows: SwizzledRows, b_array: SharedArray, b_base,
                 b_rows: SwizzledRows, b_rows_n: bool, values: list, layout: Mma) -> list:
        """D = A B + C for every block of this warpgroup, k-step by k-step, as one group waited
        for: ``a`` is (A's array, its base) or the held A (its registers in an Mma layout);
        ``values`` the accumulator's registers in ``layout``; returns them updated."""
        b = self.b
        (m, kk), n = op.operands[0].type.shape, op.operands[1].type.shape[1]
        per_group = m // (BLOCK_ROWS * (self.T // WARP_SIZE // WARPGROUP_WARPS))
        wide = min(n, MAX_N)
        held = not isinstance(a, tuple)
        a_array = b_array if held else a[0]
        attrs_ = WgmmaAttrs(kind=kind, n=wide, a_shared=a_array.name, b_shared=b_array.name,
                            a_swizzle=0 if held else a_rows.swizzle, a_chunk=0 if held else a_rows.chunk,
                            b_major=Major.K if b_rows_n else Major.MN, b_swizzle=b_rows.swizzle, b_chunk=b_rows.chunk)
        steps = list(range(0, kk, kind.k))
        if kind not in FP8:  # one group, on the accumulator itself
            return self.group_of(steps, attrs_, a, a_rows, b_base, b_rows, b_rows_n, list(values), layout, per_group)
        values = list(values)
        zero = b.constant(0.0, values[0].type)
        for first in range(0, len(steps), FP8_PROMOTION_STEPS):  # each chunk from zero, then added in f32
            chunk = steps[first:first + FP8_PROMOTION_STEPS]
            partial = self.group_of(chunk, attrs_, a, a_rows, b_base, b_rows, b_rows_n, [zero] * len(values),
                                    layout, per_group)
            values = [b.add(v, p) for v, p in zip(values, partial)]
        return values

    def group_of(self, steps, attrs_: WgmmaAttrs, a, a_rows, b_base, b_rows, b_rows_n, values: list, layout: Mma,
                 per_group: int) -> list:
        """The k-steps ``steps`` of the dot as one wgmma group on ``values``, waited for."""
        b, core = self.b, self.core
        wide, n = attrs_.n, layout.shape_[1]
        held = not attrs_.a_swizzle
        group = self.group()
        b.wgmma_fence()
        for k0 in steps:
            for q in range(per_group):
                if held:
                    a_operand = [a.values[r] for r in a_fragment_registers(a.layout, q, k0)]
                else:
                    block = core.add(core.mul(group, per_group * BLOCK_ROWS), q * BLOCK_ROWS)
                    a_operand = core.add(core.add(a[1], core.mul(block, a_rows.per_row)), self.k_offset(a_rows, k0))
                for n0 in range(0, n, wide):
                    if b_rows_n:  # rows n0.., the k-step along them
                        b_at = n0 * b_rows.per_row + self.k_offset(b_rows, k0)
                    else:  # rows k0.., the chunks of n0..
                        b_at = n0 // b_rows.per_row * b_rows.chunk + k0 * b_rows.per_row
                    regs = [layout.register((2 * q + (i >> 1) % 2, 2 * (i >> 2) + i % 2 + n0 // 4))
                            for i in range(wide // 2)]
                    out = b.wgmma(attrs_, a_operand, core.add(b_base, b_at), [values[r] for r in regs])
                    for r, v in zip(regs, out):
                        values[r] = v
        b.wgmma_commit()
        return list(b.wgmma_wait(0, values))

    @staticmethod
    def k_offset(rows: SwizzledRows, k0: int) -> int:
        """A K-major operand's k-step at ``k0``: its chunk, then the elements along its rows."""
        return k0 // rows.per_row * rows.chunk + k0 % rows.per_row


__all__ = ["WarpgroupDot", "SwizzledRows", "ALIGN", "WARPGROUP_THREADS", "aligned"]
