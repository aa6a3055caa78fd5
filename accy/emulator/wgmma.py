"""Warpgroup matrix multiply-accumulate (``wgmma.mma_async``, sm_90a): forms, register
fragments, shared-memory matrix descriptors and arithmetic.  Written from the PTX ISA
(section 9.7.15, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"); the
asynchrony (groups, waits, the checks) is :mod:`.wgmma_async`, the handlers :mod:`.ops_wgmma`.

Warpgroups.  Four consecutive warps of a block (warp id // 4) execute a wgmma together:
D (64 x N) = A (64 x K) * B (K x N) + D, each warp holding 16 rows of D (warp w of the
group rows 16w..16w+15) and, in the register form, the same 16 rows of A.

Fragments (``g = lane >> 2``, ``t = lane % 4``, element i of a lane numbered from the low
bits of its first register up).  D: ``row = g + 8 * ((i >> 1) & 1)``, ``col = 8 * (i >> 2) +
2t + (i & 1)``, N/2 elements, one per register (f32, s32) or two (f16, low half first).
A in registers: the warp's 16 rows laid out as ``mma.sync``'s A of the same K (m16n8k16
f16/bf16, m16n8k8 tf32, m16n8k32 8-bit types: :data:`.mma.FORMS`).

Descriptors (64 bits): start address bits 0-13, the leading-dimension byte offset (LBO)
bits 16-29 and the stride-dimension byte offset (SBO) bits 32-45, each field the byte
value >> 4; the base offset bits 49-51; the swizzle mode bits 62-63 (0 none, 1 128-byte,
2 64-byte, 3 32-byte).  One instruction reads 32 bytes of K per row (K elements of ``e``
bytes), in units of 16-byte chunks.  With ``S`` the swizzle width in bytes, element
(r, k) of a 64 x K (A) or N x K (B) operand is at ``start + offset``:

* K-major, no swizzle: ``(r % 8) * 16 + (r // 8) * SBO + (k*e) % 16 + (k*e // 16) * LBO``
  (8 x 16-byte core matrices: SBO steps 8 rows, LBO the second 16 bytes of K);
* K-major, swizzle S: ``(r % 8) * S + (r // 8) * SBO + k*e`` (rows of S bytes, 8 of them
  an atom, SBO steps atoms; LBO is unused);
* MN-major, no swizzle: ``(r*e) % 16 + (r*e // 16) * SBO + (k % 8) * 16 + (k // 8) * LBO``
  (16 bytes of r per K row, 8 K rows a core matrix; SBO steps 16 bytes of r, LBO 8 K rows);
* MN-major, swizzle S: ``(r*e) % S + (r*e // S) * LBO + (k % 8) * S + (k // 8) * SBO``
  (S bytes of r per K row, 8 K rows an atom; LBO steps S bytes of r, SBO 8 K rows).

The swizzle then permutes 16-byte chunks by address bits, as the hardware does: for an
address ``a``, ``a ^ ((((a >> 7) - base_offset) & (S/16 - 1)) << 4)``: bits 4.. take the
XOR of the 128-byte row number counted from the pattern's start, which the base offset
gives ((start of the pattern >> 7) & 7; 0 when the pattern starts on an S*8-byte boundary).

Arithmetic, as :mod:`.mma`: products exact, each output's K products plus C summed exactly
and rounded once (to nearest even) to the accumulator's type; tf32 operands truncated to
10 fraction bits; s8/u8 exact in int32, wrapping or (``.satfinite``) clamped.  fp8
(e4m3/e5m2) with an f32 accumulator is the exception, modelling Hopper's reduced-precision
fp8 accumulation: the exactly rounded f32 result of each instruction is then truncated
toward zero to :data:`FP8_FRACTION_BITS` fraction bits (14 significant bits).  The figure is
DeepSeek-V3's measurement (technical report, arXiv:2412.19437, section 3.3.2: the H800's
fp8 wgmma keeps about 14 bits of its accumulation), the reason Triton splits fp8 dots by
``max_num_imprecise_acc``.  Per instruction the result differs from the exact sum by less
than ``2**-FP8_FRACTION_BITS * |D| + 2**-24 * |D|`` (the truncation below one unit of the
13th fraction bit, the rounding half an f32 unit); real hardware truncates inside the sum, so
its results may differ from the model's within that bound, never beyond.  With an f16
accumulator (10 fraction bits) the reduction does not show and the result is the exact sum
rounded to f16.
"""

from __future__ import annotations

import enum
import attrs
import numpy as np

from .errors import PtxError
from .mma import WARP, Fragment, element_values, elements, float_mma, fragment
from .memory import thread_text
from .numerics import CANON_F32, F16, F32, F64, I32, I64, U16, U32, U64

WARPGROUP = 4 * WARP
M = 64
KBYTES = 32  # bytes of K one instruction reads per row, for every type
FP8_FRACTION_BITS = 13  # fp8 accumulation: fraction bits kept of each instruction's f32 result


class Swizzle(enum.IntEnum):
    """The descriptor's swizzle mode (bits 62-63)."""

    NONE = 0
    B128 = 1
    B64 = 2
    B32 = 3

    @property
    def width(self) -> int:
        """Bytes of one swizzled row (16 without swizzle: one chunk)."""
        return {Swizzle.NONE: 16, Swizzle.B128: 128, Swizzle.B64: 64, Swizzle.B32: 32}[self]


class Family(enum.Enum):
    """Input types that share a K, fragments and accumulators."""

    HALF = "half"  # f16, bf16: K=16
    TF32 = "tf32"  # K=8
    FP8 = "fp8"  # e4m3, e5m2: K=32
    INT8 = "int8"  # s8, u8: K=32


_FAMILY = {"f16": Family.HALF, "bf16": Family.HALF, "tf32": Family.TF32, "e4m3": Family.FP8, "e5m2": Family.FP8,
           "s8": Family.INT8, "u8": Family.INT8}
_BYTES = {Family.HALF: 2, Family.TF32: 4, Family.FP8: 1, Family.INT8: 1}
# the ISA's N for s8/u8 (every multiple of 8 for the other types)
INT8_N = (8, 16, 24) + tuple(range(32, 257, 16))

# A in registers: mma.sync's A fragment of the same K (a warp's 16 rows)
_A_FRAGMENTS = {
    Family.HALF: (8, 2, lambda g, t, i: (g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2))),
    Family.TF32: (4, 1, lambda g, t, i: (g + 8 * (i & 1), t + 4 * (i >> 1))),
    Family.FP8: (16, 4, lambda g, t, i: (g + 8 * ((i >> 2) & 1), 4 * t + (i & 3) + 16 * (i >> 3))),
}
_A_FRAGMENTS[Family.INT8] = _A_FRAGMENTS[Family.FP8]


def _d_fragment(n: int, per_reg: int) -> Fragment:
    return fragment(n // 2, per_reg, lambda g, t, i: (g + 8 * ((i >> 1) & 1), 8 * (i >> 2) + 2 * t + (i & 1)))


@attrs.frozen(eq=False)
class WgmmaForm:
    """One ``wgmma.mma_async.sync.aligned.m64nNkK{.satfinite}.dtype.atype.btype`` form."""

    n: int
    atype: str
    btype: str
    dtype: str  # "f32", "f16" or "s32"
    satfinite: bool
    family: Family
    d: Fragment
    a: Fragment  # A's fragment when it comes from registers

    @property
    def k(self) -> int:
        return KBYTES // _BYTES[self.family]

    @property
    def element_bytes(self) -> int:
        return _BYTES[self.family]

    @property
    def shape(self) -> str:
        return f"m{M}n{self.n}k{self.k}"

    @property
    def text(self) -> str:
        sat = ".satfinite" if self.satfinite else ""
        return f"wgmma.mma_async.sync.aligned.{self.shape}{sat}.{self.dtype}.{self.atype}.{self.btype}"

    @property
    def transposable(self) -> bool:
        """Whether the form takes imm-trans-a/-b (16-bit types only)."""
        return self.family is Family.HALF

    @property
    def scalable(self) -> bool:
        """Whether the form takes imm-scale-a/-b (floating types only)."""
        return self.family is not Family.INT8


def wgmma_form(shape: str, dtype: str, atype: str, btype: str, satfinite: bool) -> WgmmaForm | None:
    """The form, or None where the ISA defines none."""
    fam = _FAMILY.get(atype)
    if fam is None or _FAMILY.get(btype) != fam or (fam in (Family.HALF, Family.TF32) and atype != btype):
        return None
    if not (shape.startswith(f"m{M}n") and "k" in shape):
        return None
    n_text, k_text = shape[len(f"m{M}n"):].split("k", 1)
    if not (n_text.isdigit() and k_text.isdigit()) or int(k_text) != KBYTES // _BYTES[fam]:
        return None
    n = int(n_text)
    if fam is Family.INT8:
        if dtype != "s32" or n not in INT8_N:
            return None
    else:
        allowed = ("f32",) if atype in ("bf16", "tf32") else ("f32", "f16")
        if satfinite or dtype not in allowed or n % 8 or not 8 <= n <= 256:
            return None
    per_reg = 2 if dtype == "f16" else 1
    return WgmmaForm(n, atype, btype, dtype, satfinite, fam, _d_fragment(n, per_reg), fragment(*_A_FRAGMENTS[fam]))


# -- descriptors -----------------------------------------------------------------------------------


@attrs.frozen(eq=False)
class Descriptors:
    """Decoded matrix descriptors, one per warpgroup (int64 arrays of byte values)."""

    start: np.ndarray
    lbo: np.ndarray
    sbo: np.ndarray
    base_offset: np.ndarray
    swizzle: np.ndarray  # Swizzle values

    @classmethod
    def decode(cls, desc) -> "Descriptors":
        d = np.asarray(desc, U64)
        field = lambda shift, bits: ((d >> np.uint64(shift)) & np.uint64((1 << bits) - 1)).astype(I64)  # noqa: E731
        return cls(field(0, 14) << 4, field(16, 14) << 4, field(32, 14) << 4, field(49, 3), field(62, 2))


def _widths(swizzle) -> np.ndarray:
    return np.array([Swizzle(int(s)).width for s in range(4)], I64)[swizzle]


def operand_addresses(desc: Descriptors, rows: int, ebytes: int, mn_major: bool) -> np.ndarray:
    """(G, rows, K) shared addresses of element (r, k) of each warpgroup's operand (see the
    module's doc for the formulas)."""
    G = len(desc.start)
    k = np.arange(KBYTES // ebytes)[None, None, :]
    r = np.arange(rows)[None, :, None]
    S = _widths(desc.swizzle)[:, None, None]
    lbo, sbo = desc.lbo[:, None, None], desc.sbo[:, None, None]
    plain = S == 16
    if mn_major:
        rb = r * ebytes
        off = np.where(plain, rb % 16 + rb // 16 * sbo + k % 8 * 16 + k // 8 * lbo,
                       rb % S + rb // S * lbo + k % 8 * S + k // 8 * sbo)
    else:
        kb = k * ebytes
        off = np.where(plain, r % 8 * 16 + r // 8 * sbo + kb % 16 + kb // 16 * lbo, r % 8 * S + r // 8 * sbo + kb)
    a = desc.start[:, None, None] + off
    phase = ((a >> 7) - desc.base_offset[:, None, None]) & (S // 16 - 1)
    return np.broadcast_to(a ^ (phase << 4), (G, rows, k.shape[2]))


# -- values ----------------------------------------------------------------------------------------


def _fp8_table(exp_bits: int, man_bits: int, e4m3: bool) -> np.ndarray:
    """float64 value of each of the 256 bit patterns."""
    bits = np.arange(256)
    sign = np.where(bits & 0x80, -1.0, 1.0)
    e = (bits >> man_bits) & ((1 << exp_bits) - 1)
    m = bits & ((1 << man_bits) - 1)
    bias = (1 << (exp_bits - 1)) - 1
    normal = (1 + m / (1 << man_bits)) * np.exp2(e - bias)
    value = sign * np.where(e == 0, m / (1 << man_bits) * 2.0 ** (1 - bias), normal)
    top = e == (1 << exp_bits) - 1
    if e4m3:  # no infinities; S.1111.111 is NaN
        value = np.where(top & (m == (1 << man_bits) - 1), np.nan, value)
    else:
        value = np.where(top, np.where(m == 0, sign * np.inf, np.nan), value)
    return value


_FP8 = {"e4m3": _fp8_table(4, 3, True), "e5m2": _fp8_table(5, 2, False)}


def values(bits, t: str):
    """Element bit patterns (uint32) of type ``t`` as float64 (floats) or int64 (integers)."""
    if t in _FP8:
        return _FP8[t][bits.astype(I64) & 0xFF]
    return element_values(bits, t)


def load_operand(smem, base, addrs, ebytes: int) -> np.ndarray:
    """Element bit patterns (uint32) at the shared addresses ``addrs`` (G, ...) of the blocks
    whose flat shared memory starts at ``base`` (G,)."""
    flat = base.reshape((-1,) + (1,) * (addrs.ndim - 1)) + addrs
    out = np.zeros(addrs.shape, U32)
    for b in range(ebytes):
        out |= smem[flat + b].astype(U32) << np.uint32(8 * b)
    return out


# -- arithmetic ------------------------------------------------------------------------------------


def _truncate(D, fraction_bits: int):
    """f32 values with their fraction truncated (toward zero) to ``fraction_bits`` bits."""
    bits = D.view(U32)
    finite = (bits & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
    mask = np.uint32((0xFFFFFFFF << (23 - fraction_bits)) & 0xFFFFFFFF)
    return np.where(finite, bits & mask, bits).view(F32)


def multiply(form: WgmmaForm, A, B, C):
    """D = A (G, 64, K) @ B (G, K, N) + C (G, 64, N), as the module's doc says: float32,
    float16 or int32 (G, 64, N)."""
    if form.family is Family.INT8:
        exact = np.einsum("gmk,gkn->gmn", A, B) + C  # |sum| < 2**48: exact in int64
        if form.satfinite:
            exact = np.clip(exact, np.iinfo(I32).min, np.iinfo(I32).max)
        return exact.astype(I32)  # wraps modulo 2**32 without .satfinite
    if form.dtype == "f16":
        return float_mma(A, B, C, F16)
    D = float_mma(A, B, C)
    if form.family is Family.FP8:
        D = _truncate(D, FP8_FRACTION_BITS)
        D.view(U32)[np.isnan(D)] = CANON_F32
    return D


def register_matrix(regs, frag: Fragment, t: str, cols: int) -> np.ndarray:
    """(G, 128, regs) uint32 registers of a warpgroup -> its (G, 64, cols) matrix of values."""
    G = regs.shape[0]
    per_warp = values(elements(regs.reshape(G * 4, WARP, -1), frag), t)  # (G*4, 32, elements)
    out = np.zeros((G * 4, 16, cols), per_warp.dtype)
    out[:, frag.rows, frag.cols] = per_warp
    return out.reshape(G, M, cols)


def d_registers(D, frag: Fragment) -> np.ndarray:
    """(G, 64, N) results -> (G, 128, regs) register words (uint32) of each thread."""
    G = D.shape[0]
    lanes = D.reshape(G * 4, 16, -1)[:, frag.rows, frag.cols]  # (G*4, 32, elements)
    if frag.per_reg == 1:
        return lanes.view(U32).reshape(G, WARPGROUP, -1)
    half = lanes.view(U16).astype(U32)
    return (half[..., 0::2] | (half[..., 1::2] << np.uint32(16))).reshape(G, WARPGROUP, -1)


def accumulator_matrix(regs, form: WgmmaForm) -> np.ndarray:
    """(G, 128, regs) uint32 words of C -> (G, 64, N) float64 or int64 values."""
    t = {"f32": "f32", "f16": "f16", "s32": "s32"}[form.dtype]
    G = regs.shape[0]
    words = regs.reshape(G * 4, WARP, -1)
    if t == "f32":
        vals = words.view(F32).astype(F64)
    elif t == "s32":
        vals = words.view(I32).astype(I64)
    else:
        vals = elements(words, form.d).astype(U16).view(F16).astype(F64)
    out = np.zeros((G * 4, 16, form.n), vals.dtype)
    out[:, form.d.rows, form.d.cols] = vals
    return out.reshape(G, M, form.n)


def uniform(values_, what: str, site, T, lanes) -> np.ndarray:
    """The per-warpgroup value of an operand every thread of the warpgroup must give alike
    (``values_``: (G, 128)); a PtxError names the first warpgroup that differs."""
    first = values_[:, :1]
    bad = np.flatnonzero((values_ != first).any(axis=1))
    if len(bad):
        g = int(bad[0])
        k = int(np.flatnonzero(values_[g] != first[g, 0])[0])
        raise PtxError(f"{site.text.split()[0]}: {what} must be the same for the 128 threads of the warpgroup, "
                       f"but thread {k} of it gives another value", line=site.line, source=site.text,
                       thread=thread_text(T, lanes[g, k]))
    return first[:, 0]
