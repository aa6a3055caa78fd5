"""Warp-level matrix instructions: ``mma.sync`` and ``ldmatrix``/``stmatrix``, executed
for whole warps.

Fragments.  Each lane holds a fragment of A (M x K), B (K x N) and C/D (M x N) in its
registers; :data:`FORMS` gives, per shape and type, the row and column of each element
``x_i`` of each lane, from the PTX ISA's fragment tables (section "Matrix Fragments for
mma.mMnNkK"), with ``g = lane >> 2`` and ``t = lane % 4``.  Elements are numbered from the
low bits of the first register up (two f16/bf16 per register, low half first; four s8/u8;
one tf32, f32 or s32).

Arithmetic.  D = A * B + C with every product exact and each output's K products plus
its accumulator summed exactly and rounded once to f32, to nearest even
(:func:`.numerics.sum_rounded_f32`).  Real tensor cores sum in an unspecified order and
truncate partial sums (the ISA leaves "accumulation order, rounding and handling of
subnormal inputs" unspecified), so hardware results may differ in the last bits; the
exact sum is inside every bound that allows for that (accy's reference bound for dot
with 2 units of rounding).  f16 and bf16 subnormals are exact; NaN and infinities give
what IEEE arithmetic gives on the exact sum (a NaN result is the canonical 0x7fffffff).
tf32 operands are f32 bit patterns of which the mma uses the sign, the exponent and the
top 10 mantissa bits: the low 13 bits are ignored (truncated; a NaN stays NaN).  Integer
mma (s8/u8) is exact in int32 with wraparound, or clamped to the int32 range with
``.satfinite``.

Collectives.  ``.sync.aligned`` means the warp's 32 lanes execute the instruction
together: the scheduler gathers the warp's live lanes there (as for ``shfl.sync``), and
an instruction reached by fewer (a partial warp, lanes that exited, lanes waiting
elsewhere) is a :class:`PtxError` naming it.  :func:`execute_mma` and
:func:`matrix_load`/:func:`matrix_store` are the single places where these instructions
run, once per warp instruction (a profiler counts there: m*n*k per mma).
"""

from __future__ import annotations

from fractions import Fraction

import attrs
import numpy as np

from . import memory
from .errors import PtxError, PtxMemoryError
from .memory import thread_text
from .numerics import CANON_F16, CANON_F32, F16, F32, F64, I8, I32, I64, U8, U16, U32, round_fraction, sum_rounded_f32

WARP = 32


@attrs.frozen(eq=False)
class Fragment:
    """Where one operand's elements live: ``rows[l, i]``, ``cols[l, i]`` for element i of lane l."""

    regs: int  # registers per lane
    per_reg: int  # elements per register
    rows: np.ndarray
    cols: np.ndarray

    @property
    def bits(self) -> int:
        return 32 // self.per_reg


def fragment(count: int, per_reg: int, where) -> Fragment:
    lane = np.arange(WARP)[:, None]
    i = np.arange(count)[None, :]
    row, col = where(lane >> 2, lane % 4, i)
    return Fragment(count // per_reg, per_reg, np.broadcast_to(row, (WARP, count)).copy(),
                    np.broadcast_to(col, (WARP, count)).copy())


# The ISA's tables, one per shape and operand type (g = groupID, t = threadID_in_group).
_C_16x8 = (4, 1, lambda g, t, i: (g + 8 * (i >> 1), 2 * t + (i & 1)))
_LAYOUTS = {
    ("m16n8k16", "half"): ((8, 2, lambda g, t, i: (g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2))),
                           (4, 2, lambda g, t, i: (2 * t + (i & 1) + 8 * (i >> 1), g))),
    ("m16n8k8", "half"): ((4, 2, lambda g, t, i: (g + 8 * (i >> 1), 2 * t + (i & 1))),
                          (2, 2, lambda g, t, i: (2 * t + i, g))),
    ("m16n8k8", "tf32"): ((4, 1, lambda g, t, i: (g + 8 * (i & 1), t + 4 * (i >> 1))),
                          (2, 1, lambda g, t, i: (t + 4 * i, g))),
    ("m16n8k16", "int8"): ((8, 4, lambda g, t, i: (g + 8 * (i >> 2), 4 * t + (i & 3))),
                           (4, 4, lambda g, t, i: (4 * t + i, g))),
    ("m16n8k32", "int8"): ((16, 4, lambda g, t, i: (g + 8 * ((i >> 2) & 1), 4 * t + (i & 3) + 16 * (i >> 3))),
                           (8, 4, lambda g, t, i: (4 * t + (i & 3) + 16 * (i >> 2), g))),
}
_FAMILY = {"f16": "half", "bf16": "half", "tf32": "tf32", "s8": "int8", "u8": "int8"}


@attrs.frozen(eq=False)
class MmaForm:
    """One ``mma.sync.aligned.{shape}.row.col{.satfinite}.{d}.{a}.{b}.{c}`` form."""

    m: int
    n: int
    k: int
    atype: str
    btype: str
    ctype: str  # "f32" or "s32" (dtype is the same)
    satfinite: bool
    a: Fragment
    b: Fragment
    c: Fragment

    @property
    def shape(self) -> str:
        return f"m{self.m}n{self.n}k{self.k}"

    @property
    def text(self) -> str:
        sat = ".satfinite" if self.satfinite else ""
        return (f"mma.sync.aligned.{self.shape}.row.col{sat}.{self.ctype}.{self.atype}.{self.btype}."
                f"{self.ctype}")

    @property
    def is_float(self) -> bool:
        return self.ctype == "f32"


def mma_form(shape: str, dtype: str, atype: str, btype: str, ctype: str, satfinite: bool) -> MmaForm | None:
    """The form, or None when the emulator does not implement it."""
    fam = _FAMILY.get(atype)
    if fam is None or _FAMILY.get(btype) != fam or (fam != "int8" and atype != btype):
        return None
    layouts = _LAYOUTS.get((shape, fam))
    if layouts is None or dtype != ctype:
        return None
    if fam == "int8":
        if ctype != "s32":
            return None
    elif ctype != "f32" or satfinite:
        return None
    m, rest = shape[1:].split("n")
    n, k = rest.split("k")
    (ac, ap, aw), (bc, bp, bw) = layouts
    return MmaForm(int(m), int(n), int(k), atype, btype, ctype, satfinite,
                   fragment(ac, ap, aw), fragment(bc, bp, bw), fragment(*_C_16x8))


# -- the warps of an instruction -----------------------------------------------------------------


def warp_lanes(T, ids, mask, site, what: str):
    """Positions (into this call's threads) of the threads executing a warp-collective
    instruction, as a (warps, 32) array ordered by warp and lane: every warp present must
    be whole (``.sync.aligned``), and a guard must be the same for all its lanes."""
    wk = T.wkey if ids is None else T.wkey[ids]
    lane = T.lane if ids is None else T.lane[ids]
    n = len(wk)
    pos = np.arange(n)
    if mask is not None:
        mask = np.broadcast_to(np.asarray(mask, bool), (n,))
        on = np.bincount(wk[mask], minlength=T.nwkeys)
        all_ = np.bincount(wk, minlength=T.nwkeys)
        split = (on != 0) & (on != all_)
        if split.any():
            k = int(np.flatnonzero(split[wk])[0])
            raise PtxError(f"{what} is warp-collective (.aligned): its guard must be the same for every lane "
                           f"of the warp, but it is true for {int(on[wk[k]])} of its {int(all_[wk[k]])} lanes",
                           line=site.line, source=site.text, thread=_thread(T, ids, k))
        pos = pos[mask]
    counts = np.bincount(wk[pos], minlength=T.nwkeys)
    short = counts[wk[pos]] != WARP
    if short.any():
        k = int(pos[np.flatnonzero(short)[0]])
        raise PtxError(f"{what} is warp-collective (.sync.aligned): all 32 lanes of the warp must execute it "
                       f"together, but only {int(counts[wk[k]])} do (a partial warp, lanes that exited, or "
                       f"lanes that diverged)", line=site.line, source=site.text, thread=_thread(T, ids, k))
    order = pos[np.lexsort((lane[pos], wk[pos]))]
    return order.reshape(-1, WARP)


def _thread(T, ids, k):
    return thread_text(T, k if ids is None else ids[k])


def stack_registers(regs, n, dtype):
    """Per-thread register values as an (n, len(regs)) array."""
    return np.stack([np.broadcast_to(np.asarray(r).view(dtype) if np.asarray(r).dtype.itemsize == 4
                                     else np.asarray(r).astype(dtype), (n,)) for r in regs], axis=1)


# -- mma --------------------------------------------------------------------------------------------


def elements(regs, frag: Fragment):
    """(W, 32, regs) uint32 registers -> (W, 32, elements) element bit patterns (low bits first)."""
    if frag.per_reg == 1:
        return regs
    shifts = (np.arange(frag.per_reg, dtype=U32) * np.uint32(frag.bits))
    field = (regs[..., None] >> shifts) & np.uint32((1 << frag.bits) - 1)
    return field.reshape(regs.shape[0], WARP, -1)


def element_values(bits, t: str):
    """Element bit patterns of type ``t`` as float64 (floats) or int64 (integers)."""
    if t == "f16":
        return bits.astype(U16).view(F16).astype(F64)
    if t == "bf16":
        return (bits.astype(U32) << np.uint32(16)).view(F32).astype(F64)
    if t == "tf32":
        f = bits.view(F32)
        kept = (bits & np.uint32(0xFFFFE000)).view(F32).astype(F64)
        return np.where(np.isnan(f), np.nan, kept)
    if t == "s8":
        return bits.astype(U8).view(I8).astype(I64)
    if t == "u8":
        return bits.astype(I64)
    raise ValueError(t)


def place(values, frag: Fragment, rows: int, cols: int):
    out = np.zeros((values.shape[0], rows, cols), values.dtype)
    out[:, frag.rows, frag.cols] = values
    return out


_NONE = 1 << 40  # the bit positions of zero: above every lowest bit, below every top


def _bit_range(x):
    """Per float64 element: the position of its lowest set bit and a bound ``top`` with
    |x| < 2**top (zeros: _NONE and -_NONE), and whether it is finite."""
    finite = np.isfinite(x)
    m, e = np.frexp(np.where(finite, x, 0.0))
    mant = np.abs(m * 2.0 ** 53).astype(I64)
    zero = mant == 0
    trailing = np.log2(np.where(zero, 1, mant & -mant)).astype(I64)
    low = np.where(zero, _NONE, e.astype(I64) - 53 + trailing)
    top = np.where(zero, -_NONE, e.astype(I64))
    return low, top, finite


def float_mma(A, B, C, out=F32):
    """D = A @ B + C (float64 matrices of exact values, batched over warps), each output the
    exact sum rounded once to ``out`` (f32, or f16 for wgmma) with canonical NaNs.  An output
    whose terms' bits all fit one float64 window (bounded from its row of A, column of B and
    c) is exact in float64 in any order, so a float64 matmul gives it; the others are summed
    term by term."""
    la, ta, fa = _bit_range(A)
    lb, tb, fb = _bit_range(B)
    lc, tc, fc = _bit_range(C)
    low = np.minimum(la.min(2)[:, :, None] + lb.min(1)[:, None, :], lc)
    top = np.maximum(ta.max(2)[:, :, None] + tb.max(1)[:, None, :], tc)
    finite = fa.all(2)[:, :, None] & fb.all(1)[:, None, :] & fc
    k = A.shape[2]
    with np.errstate(all="ignore"):
        R = A @ B + C
        # a zero's sign depends on the terms' (-0 only when all are -0): those go term by term too
        easy = finite & (top + int(np.ceil(np.log2(k + 1))) - low <= 53) & (R != 0)
        D = R.astype(out)
        rest = np.nonzero(~easy)
        if len(rest[0]):
            w, i, j = rest
            terms = np.concatenate([A[w, i, :] * B[w, :, j], C[w, i, j][:, None]], axis=1)
            D[rest] = sum_rounded_f32(terms) if out == F32 else _sum_rounded_f16(terms)
    nan = np.isnan(D)
    if nan.any():
        D.view(U32 if out == F32 else U16)[nan] = CANON_F32 if out == F32 else CANON_F16
    return D


def _sum_rounded_f16(terms):
    """Each row's exact sum rounded once to f16 (rows of float64 terms; rare: exact fractions)."""
    out = np.zeros(len(terms), F16)
    for r, row in enumerate(terms):
        if not np.isfinite(row).all():
            out[r] = np.float16(row.sum())  # IEEE on infinities and NaNs
            continue
        q = sum((Fraction(float(x)) for x in row), Fraction(0))
        out[r] = np.float16(round_fraction(q, "f16", "rn", negative_zero=bool(np.signbit(row).all())))
    return out


def execute_mma(T, ids, form: MmaForm, site, mask, a, b, c):
    """``mma.sync`` for the warps of the threads ``ids`` (None: all): D = A*B + C, as the
    per-thread values of D's registers (threads outside ``mask`` get zeros)."""
    n = len(T.wkey) if ids is None else len(ids)
    warps = warp_lanes(T, ids, mask, site, form.text)
    W = len(warps)
    out_dtype = F32 if form.is_float else I32
    if W == 0:  # a guard false for every warp here (a warp slot of a guarded mma)
        return [np.zeros(n, out_dtype) for _ in range(form.c.rows.shape[1])]
    flat = warps.reshape(-1)
    ra = stack_registers(a, n, U32)[flat].reshape(W, WARP, -1)
    rb = stack_registers(b, n, U32)[flat].reshape(W, WARP, -1)
    A = place(element_values(elements(ra, form.a), form.atype), form.a, form.m, form.k)
    B = place(element_values(elements(rb, form.b), form.btype), form.b, form.k, form.n)
    if form.is_float:
        C = place(stack_registers(c, n, F32)[flat].reshape(W, WARP, -1).astype(F64), form.c, form.m, form.n)
        D = float_mma(A, B, C)
    else:
        C = place(stack_registers(c, n, I32)[flat].reshape(W, WARP, -1).astype(I64), form.c, form.m, form.n)
        exact = np.einsum("wmk,wkn->wmn", A, B) + C  # |sum| < 2**48: exact in int64
        if form.satfinite:
            exact = np.clip(exact, np.iinfo(I32).min, np.iinfo(I32).max)
        D = exact.astype(I32)  # wraps modulo 2**32 without .satfinite
    lanes = D[:, form.c.rows, form.c.cols].reshape(W * WARP, -1)
    out = np.zeros((n, lanes.shape[1]), out_dtype)
    out[flat] = lanes
    return [out[:, j] for j in range(out.shape[1])]


# -- ldmatrix / stmatrix ---------------------------------------------------------------------------

ROW_BYTES = 16  # one row of an 8x8 matrix of 16-bit elements


def _row_threads(ids, warps, num):
    """The threads (indices into T, or None for all) giving the row addresses: lanes 0..8*num-1."""
    providers = warps[:, :8 * num].reshape(-1)
    return providers, (providers if ids is None else ids[providers])


def _shared_addresses(T, where, site, addr, generic: bool):
    """Shared state-space addresses of the row threads ``where`` (indices into T)."""
    addr = np.asarray(addr, np.uint64)
    if not generic:
        return addr
    window = addr >> np.uint64(memory.WINDOW_SHIFT)
    bad = np.flatnonzero(window != 2)
    if len(bad):
        k = int(bad[0])
        raise PtxMemoryError(f"{site.text.split()[0]}: the generic address 0x{int(addr[k]):x} is not in shared "
                             f"memory (ldmatrix and stmatrix access shared memory only)", address=int(addr[k]),
                             line=site.line, source=site.text, thread=thread_text(T, where[k]))
    return addr - np.uint64(memory.SHARED_WINDOW)


def _fragment_words(mats, trans: bool):
    """(W, num, 8, 8) uint16 matrices -> (W, 32, num) uint32: lane l's word i holds row
    l >> 2, columns 2 * (l % 4) and the next (low half first) of matrix i (transposed with
    ``trans``)."""
    if trans:
        mats = np.swapaxes(mats, 2, 3)
    lane = np.arange(WARP)
    lo = mats[:, :, lane >> 2, 2 * (lane % 4)].astype(U32)
    hi = mats[:, :, lane >> 2, 2 * (lane % 4) + 1].astype(U32)
    return np.swapaxes(lo | (hi << np.uint32(16)), 1, 2)


def matrix_load(T, ids, site, mask, addr, num: int, trans: bool, generic: bool):
    """``ldmatrix.sync.aligned.m8n8.x{num}{.trans}.b16``: lane 8i + r gives the address of
    row r of matrix i (16 bytes, 16-byte aligned); returns each thread's ``num`` words."""
    n = len(T.wkey) if ids is None else len(ids)
    warps = warp_lanes(T, ids, mask, site, site.text.split()[0])
    W = len(warps)
    if W == 0:
        return [np.zeros(n, U32) for _ in range(num)]
    providers, where = _row_threads(ids, warps, num)
    rows = _shared_addresses(T, where, site, np.broadcast_to(addr, (n,))[providers], generic)
    if T.prof is not None:
        T.prof.matrix_rows("ldmatrix", T, where, rows)
    data = memory.shared_load(T, where, site, rows, U32, ROW_BYTES // 4)  # (W * 8num, 4) words
    mats = np.ascontiguousarray(data).view(U16).reshape(W, num, 8, 8)
    words = _fragment_words(mats, trans).reshape(W * WARP, num)
    out = np.zeros((n, num), U32)
    out[warps.reshape(-1)] = words
    return [out[:, j] for j in range(num)]


def matrix_store(T, ids, site, mask, addr, values, trans: bool, generic: bool):
    """``stmatrix.sync.aligned.m8n8.x{num}{.trans}.b16``: the inverse of :func:`matrix_load`."""
    n = len(T.wkey) if ids is None else len(ids)
    num = len(values)
    warps = warp_lanes(T, ids, mask, site, site.text.split()[0])
    W = len(warps)
    if W == 0:
        return
    words = stack_registers(values, n, U32)[warps.reshape(-1)].reshape(W, WARP, num)
    lane = np.arange(WARP)
    mats = np.zeros((W, num, 8, 8), U16)
    mats[:, :, lane >> 2, 2 * (lane % 4)] = np.swapaxes(words & np.uint32(0xFFFF), 1, 2).astype(U16)
    mats[:, :, lane >> 2, 2 * (lane % 4) + 1] = np.swapaxes(words >> np.uint32(16), 1, 2).astype(U16)
    if trans:
        mats = np.swapaxes(mats, 2, 3)
    providers, where = _row_threads(ids, warps, num)
    rows = _shared_addresses(T, where, site, np.broadcast_to(addr, (n,))[providers], generic)
    if T.prof is not None:
        T.prof.matrix_rows("stmatrix", T, where, rows)
    data = np.ascontiguousarray(mats).reshape(-1, 8).view(U32)  # (W * num * 8, 4): row r of matrix i
    memory.shared_store(T, where, site, rows, data, U32, ROW_BYTES // 4)
