"""What the tensor-core ops mean, on NumPy arrays of whole warps: the reference the numpy
backend runs (``mma`` and ``ldmatrix`` in a block launch; the tile distribution emits them for
NVPTX) and the NVPTX lowering must match.

Fragment layouts are the PTX ISA's for ``mma.sync.aligned.m16n8kK.row.col`` (section "Matrix
fragments for mma.m16n8k*"), with ``g = lane >> 2`` and ``t = lane % 4``:

- m16n8k16 (f16, bf16): A element ``a_i`` (i < 8) at row ``g + 8 ((i >> 1) & 1)``, column
  ``2 t + (i & 1) + 8 (i >> 2)``; B element ``b_i`` (i < 4) at row ``2 t + (i & 1) + 8 (i >> 1)``,
  column ``g``;
- m16n8k8 (tf32): ``a_i`` (i < 4) at row ``g + 8 (i & 1)``, column ``t + 4 (i >> 1)``; ``b_i``
  (i < 2) at row ``t + 4 i``, column ``g``;
- m16n8k32 (s8): ``a_i`` (i < 16, register ``i >> 2``, byte ``i & 3``) at row ``g + 8 ((i >> 2) & 1)``,
  column ``4 t + (i & 3) + 16 (i >> 3)``; ``b_i`` (i < 8) at row ``4 t + (i & 3) + 16 (i >> 2)``,
  column ``g``;
- C and D (all): ``c_i`` (i < 4) at row ``g + 8 (i >> 1)``, column ``2 t + (i & 1)``.

The arithmetic: products exact, each output's K products and its C summed in float64 and
rounded once to f32 (within the IR reference's bound for ``dot``; tensor cores keep fewer bits
of the partial sums); tf32 operands use their sign, exponent and top 10 mantissa bits (the low
13 are ignored, as the hardware does); s8 sums are exact and wrap to i32.
"""

from __future__ import annotations

import numpy as np

from ...dsl.ops import MatrixOrder, MmaKind
from ...targets import WARP_SIZE



def _lanes():
    lane = np.arange(WARP_SIZE)
    return lane >> 2, lane & 3


def a_position(kind: MmaKind, i: int):
    """(rows, columns) per lane of A's element ``i``."""
    g, t = _lanes()
    if kind is MmaKind.TF32:
        return g + 8 * (i & 1), t + 4 * (i >> 1)
    if kind.bytes_wide:
        return g + 8 * ((i >> 2) & 1), 4 * t + (i & 3) + 16 * (i >> 3)
    return g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)


def b_position(kind: MmaKind, i: int):
    g, t = _lanes()
    if kind is MmaKind.TF32:
        return t + 4 * i, g
    if kind.bytes_wide:
        return 4 * t + (i & 3) + 16 * (i >> 2), g
    return 2 * t + (i & 1) + 8 * (i >> 1), g


def c_position(i: int):
    g, t = _lanes()
    return g + 8 * (i >> 1), 2 * t + (i & 1)


def _tf32(x: np.ndarray) -> np.ndarray:
    bits = np.asarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
    return bits.view(np.float32)


def mma(kind: MmaKind, a: list, b: list, c: list) -> list:
    """D = A B + C for warps of lanes: each operand element an array shaped (..., 32) (the
    warps, then the lane); returns D's 4 elements so shaped."""
    shape = np.shape(c[0])[:-1]
    k = kind.k
    am = np.zeros(shape + (16, k), np.float64 if kind is not MmaKind.S8 else np.int64)
    bm = np.zeros(shape + (k, 8), am.dtype)
    convert = _tf32 if kind is MmaKind.TF32 else (lambda v: v)
    for i, v in enumerate(a):
        r, col = a_position(kind, i)
        am[..., r, col] = convert(v)
    for i, v in enumerate(b):
        r, col = b_position(kind, i)
        bm[..., r, col] = convert(v)
    cm = np.zeros(shape + (16, 8), am.dtype)
    for i, v in enumerate(c):
        r, col = c_position(i)
        cm[..., r, col] = v
    with np.errstate(all="ignore"):
        d = np.matmul(am, bm) + cm
    if kind is MmaKind.S8:
        d = d.astype(np.int32)  # wraps: the sum is exact in int64
    else:
        d = d.astype(np.float32)
    return [d[(..., *c_position(i))] for i in range(4)]


WARPGROUP = 4 * WARP_SIZE  # the threads of a wgmma: four consecutive warps


def wgmma_position(kind: MmaKind, i: int, role: str):
    """(rows, columns) per thread of a warpgroup of element ``i`` of its D (``role`` "d") or
    register A ("a") fragment: warp ``w`` of the group holds rows ``16 w`` to ``16 w + 15`` as one
    warp's m16n8 fragments do, D's ``i``-th in the 8-column tile ``i // 4``."""
    warp = np.arange(WARPGROUP) // WARP_SIZE
    if role == "a":
        rows, cols = (np.tile(x, 4) for x in a_position(kind, i))
        return rows + 16 * warp, cols
    rows, cols = (np.tile(x, 4) for x in c_position(i % 4))
    return rows + 16 * warp, cols + 8 * (i // 4)


def wgmma(kind: MmaKind, n: int, a, b: np.ndarray, c: list) -> list:
    """D = A B + C for warpgroups: ``a`` a (..., 64, K) matrix from shared memory or the list of
    A fragment elements, each shaped (..., 128); ``b`` (..., K, n); ``c`` the n / 2 accumulator
    elements shaped (..., 128); returns D's so shaped.  Arithmetic as :func:`mma`'s."""
    shape = np.shape(c[0])[:-1]
    wide = np.int64 if kind is MmaKind.S8 else np.float64
    convert = _tf32 if kind is MmaKind.TF32 else (lambda v: v)
    if isinstance(a, list):
        am = np.zeros(shape + (64, kind.k), wide)
        for i, v in enumerate(a):
            r, col = wgmma_position(kind, i, "a")
            am[..., r, col] = convert(v)
    else:
        am = convert(a).astype(wide)
    cm = np.zeros(shape + (64, n), wide)
    for i, v in enumerate(c):
        cm[(..., *wgmma_position(kind, i, "d"))] = v
    with np.errstate(all="ignore"):
        d = np.matmul(am, convert(b).astype(wide)) + cm
    d = d.astype(np.int32) if kind is MmaKind.S8 else d.astype(np.float32)
    return [d[(..., *wgmma_position(kind, i, "d"))] for i in range(n // 2)]


def ldmatrix_sources(count: int, order: MatrixOrder, per_register: int) -> list:
    """For each element a lane gets (matrix by matrix, low element first): per lane, (the lane
    whose row address it reads, the element offset from that address)."""
    lane = np.arange(WARP_SIZE)
    out = []
    for i in range(count):
        for e in range(per_register):
            if order is MatrixOrder.TRANS:  # column lane // 4 of rows 2 (lane % 4) and the next
                out.append((8 * i + 2 * (lane & 3) + e, lane >> 2))
            else:  # row lane // 4, its word lane % 4
                out.append((8 * i + (lane >> 2), (lane & 3) * per_register + e))
    return out


__all__ = ["mma", "wgmma", "wgmma_position", "WARPGROUP", "ldmatrix_sources", "a_position", "b_position", "c_position"]
