"""How a warpgroup mma's operand lies in shared memory (the ``wgmma`` op's attributes, see
:class:`accy.dsl.ops.WgmmaAttrs`): the one definition the tile lowering stages by and the
interpreter reads by.  The PTX ISA calls these the canonical swizzled layouts; the NVPTX code
generator describes them to the hardware by matrix descriptors.

An operand is staged as rows of its contiguous axis (K for a K-major operand, N for an
MN-major B), cut into chunks of ``swizzle`` bytes: chunk ``c`` of every row lies ``chunk``
elements after chunk ``c - 1``; within a chunk, row ``r`` lies ``swizzle`` bytes after row
``r - 1`` (:func:`linear_offset`).  Then the hardware's swizzle moves each 16-byte unit: an
address's bits 4-6 are XORed with its bits 7-9 in 128-byte mode (4-5 with 7-8 in 64-byte mode,
4 with 7 in 32-byte mode), on the address itself (:func:`swizzled`), so staged blocks start at
multiples of the pattern's span, 8 rows (:func:`pattern_bytes`).
"""

from __future__ import annotations

SPAN_ROWS = 8  # rows over which a swizzle pattern repeats


def pattern_bytes(swizzle: int) -> int:
    """The bytes after which a swizzle pattern repeats (a staged block's needed alignment)."""
    return SPAN_ROWS * swizzle


def linear_offset(row, col, swizzle: int, chunk: int, itemsize: int):
    """Element (``row``, ``col``)'s offset from its block's start before the swizzle."""
    per_row = swizzle // itemsize
    return col // per_row * chunk + row * per_row + col % per_row


def swizzled(offset, swizzle: int, itemsize: int):
    """Where the swizzle puts the element at ``offset`` (from an array aligned to 1024 bytes);
    works on NumPy integer arrays too."""
    unit_bit = (16 // itemsize).bit_length() - 1  # the element offset's bit of a 16-byte unit
    row_bit = (128 // itemsize).bit_length() - 1  # and of a 128-byte line
    return offset ^ ((offset >> row_bit) & (swizzle // 16 - 1)) << unit_bit


def staged_offset(row, col, swizzle: int, chunk: int, itemsize: int):
    """Element (``row``, ``col``)'s place from a staged block's start (the block aligned to the
    pattern's span)."""
    return swizzled(linear_offset(row, col, swizzle, chunk, itemsize), swizzle, itemsize)


def swizzle_for(row_bytes: int) -> int | None:
    """The widest swizzle span that a row of ``row_bytes`` fills whole chunks of (None: it is
    not a multiple of 32 bytes)."""
    return next((s for s in (128, 64, 32) if row_bytes % s == 0), None)


__all__ = ["SPAN_ROWS", "pattern_bytes", "linear_offset", "swizzled", "staged_offset", "swizzle_for"]
