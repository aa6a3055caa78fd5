"""The PTX emulator's tensor-core data path: ``mma.sync`` in every form it runs, ``ldmatrix``
and ``stmatrix``, ``cp.async`` with its groups and its checks, and the PTX LLVM emits around
them (``cvt.rna.tf32.f32``, packing with ``mov.b32``).

The fragment layouts are written here from the PTX ISA's tables ("Matrix Fragments for
mma.m16n8k16 ..."), independently of ``accy/emulator/mma.py``: each test packs operands
and reads results lane by lane with them, on matrices whose every element is distinct,
and checks float results against an exact rational reference rounded to f32 here and
against NumPy's float64 matmul within the bound the emulator promises."""

from __future__ import annotations

import math
import re
from fractions import Fraction

import attrs
import numpy as np
import pytest

from accy.emulator import (Device, PtxAsyncCopyError, PtxBarrierError, PtxError, PtxMemoryError,
                           instruction_forms, unsupported)

from emulator_support import NEEDS_PTXAS, SREGS, assembled, compile_ir, launch, ptx_kernel

pytestmark = NEEDS_PTXAS

WARPS = 2  # every mma kernel runs two warps, each with its own matrices


# -- the ISA's fragment layouts (g = groupID = lane >> 2, t = threadID_in_group = lane % 4) ------------


def a_k16_half(g, t, i):  # m16n8k16 .f16/.bf16, a0..a7
    return (g if i in (0, 1, 4, 5) else g + 8), 2 * t + (i & 1) + (8 if i >= 4 else 0)


def b_k16_half(g, t, i):  # b0..b3
    return 2 * t + (i & 1) + (8 if i >= 2 else 0), g


def a_k8_half(g, t, i):  # m16n8k8 .f16/.bf16, a0..a3
    return (g if i < 2 else g + 8), 2 * t + (i & 1)


def b_k8_half(g, t, i):  # b0, b1
    return 2 * t + i, g


def a_k8_tf32(g, t, i):  # m16n8k8 .tf32, a0..a3
    return (g if i in (0, 2) else g + 8), (t if i < 2 else t + 4)


def b_k8_tf32(g, t, i):
    return (t if i == 0 else t + 4), g


def a_k16_int8(g, t, i):  # m16n8k16 .s8/.u8, a0..a7
    return (g if i < 4 else g + 8), 4 * t + (i & 3)


def b_k16_int8(g, t, i):  # b0..b3
    return 4 * t + i, g


def a_k32_int8(g, t, i):  # m16n8k32 .s8/.u8, a0..a15
    return (g if i < 4 or 8 <= i < 12 else g + 8), 4 * t + (i & 3) + (16 if i >= 8 else 0)


def b_k32_int8(g, t, i):  # b0..b7
    return 4 * t + (i & 3) + (16 if i >= 4 else 0), g


def c_16x8(g, t, i):  # C and D of every m16n8 shape, c0..c3
    return (g if i < 2 else g + 8), 2 * t + (i & 1)


@attrs.frozen
class Form:
    ptx: str  # the form after "mma.sync.aligned."
    k: int
    atype: str
    btype: str
    a_layout: object
    b_layout: object

    m = 16
    n = 8

    @property
    def ctype(self):
        return "s32" if self.atype in ("s8", "u8") else "f32"

    @property
    def per_reg(self):
        return {"f16": 2, "bf16": 2, "tf32": 1, "s8": 4, "u8": 4}[self.atype]

    @property
    def a_regs(self):
        return self.m * self.k // 32 // self.per_reg

    @property
    def b_regs(self):
        return self.k * self.n // 32 // self.per_reg

    @property
    def is_float(self):
        return self.ctype == "f32"


FORMS = {f.ptx: f for f in [
    Form("m16n8k16.row.col.f32.bf16.bf16.f32", 16, "bf16", "bf16", a_k16_half, b_k16_half),
    Form("m16n8k16.row.col.f32.f16.f16.f32", 16, "f16", "f16", a_k16_half, b_k16_half),
    Form("m16n8k8.row.col.f32.bf16.bf16.f32", 8, "bf16", "bf16", a_k8_half, b_k8_half),
    Form("m16n8k8.row.col.f32.f16.f16.f32", 8, "f16", "f16", a_k8_half, b_k8_half),
    Form("m16n8k8.row.col.f32.tf32.tf32.f32", 8, "tf32", "tf32", a_k8_tf32, b_k8_tf32),
    Form("m16n8k32.row.col.s32.s8.s8.s32", 32, "s8", "s8", a_k32_int8, b_k32_int8),
    Form("m16n8k32.row.col.s32.u8.s8.s32", 32, "u8", "s8", a_k32_int8, b_k32_int8),
    Form("m16n8k32.row.col.s32.s8.u8.s32", 32, "s8", "u8", a_k32_int8, b_k32_int8),
    Form("m16n8k32.row.col.satfinite.s32.u8.u8.s32", 32, "u8", "u8", a_k32_int8, b_k32_int8),
    Form("m16n8k16.row.col.s32.s8.s8.s32", 16, "s8", "s8", a_k16_int8, b_k16_int8),
]}
FLOAT_FORMS = [f for f in FORMS if FORMS[f].is_float]


# -- element encodings ------------------------------------------------------------------------------------


def encode(values, t):
    """Float64 (or integer) values -> element bit patterns of type ``t`` (the values must fit exactly)."""
    v = np.asarray(values)
    if t == "f16":
        bits = v.astype(np.float16).view(np.uint16)
        assert (bits.view(np.float16).astype(np.float64) == v).all() | np.isnan(v).any()
        return bits
    if t == "bf16":
        f = v.astype(np.float32).view(np.uint32)
        assert ((f & 0xFFFF) == 0).all(), "not a bf16 value"
        return (f >> 16).astype(np.uint16)
    if t == "tf32":
        return v.astype(np.float32).view(np.uint32)
    return v.astype(np.int64).astype(np.uint8)  # s8 as two's complement bytes


def decode(bits, t):
    """Element bit patterns -> float64 values (what the mma multiplies) or int64."""
    if t == "f16":
        return bits.astype(np.uint16).view(np.float16).astype(np.float64)
    if t == "bf16":
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if t == "tf32":
        return (bits.astype(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    if t == "s8":
        return bits.astype(np.uint8).view(np.int8).astype(np.int64)
    return bits.astype(np.int64)


def pack(mats, layout, per_reg):
    """(warps, rows, cols) element bit patterns -> (warps * 32, regs) registers, per the layout."""
    width = 32 // per_reg
    count = mats.shape[1] * mats.shape[2] // 32
    regs = np.zeros((len(mats) * 32, count // per_reg), np.uint64)
    for w, mat in enumerate(mats):
        for lane in range(32):
            for i in range(count):
                r, c = layout(lane >> 2, lane % 4, i)
                regs[w * 32 + lane, i // per_reg] |= (int(mat[r, c]) & ((1 << width) - 1)) << (width * (i % per_reg))
    return regs.astype(np.uint32)


def unpack_c(regs, rows=16, cols=8):
    """(warps * 32, 4) registers of C/D -> (warps, 16, 8) matrices, per the C layout."""
    out = np.zeros((len(regs) // 32, rows, cols), regs.dtype)
    seen = np.zeros(out.shape, bool)
    for k in range(len(regs)):
        w, lane = divmod(k, 32)
        for i in range(4):
            r, c = c_16x8(lane >> 2, lane % 4, i)
            out[w, r, c] = regs[k, i]
            seen[w, r, c] = True
    assert seen.all()
    return out


def test_the_layouts_written_here_cover_every_element_once():
    for f in FORMS.values():
        for layout, rows, cols in ((f.a_layout, f.m, f.k), (f.b_layout, f.k, f.n), (c_16x8, f.m, f.n)):
            count = rows * cols // 32
            cells = {layout(lane >> 2, lane % 4, i) for lane in range(32) for i in range(count)}
            assert len(cells) == rows * cols and all(0 <= r < rows and 0 <= c < cols for r, c in cells), f.ptx


# -- the kernels --------------------------------------------------------------------------------------------


def mma_kernel(form: Form, guard: str = "", prologue: str = "", arch: str = "sm_80") -> str:
    """Thread k loads its A, B and C registers from ain/bin/cin[k], runs the mma and stores D to out[k]."""
    ctype = "f32" if form.is_float else "s32"
    nc = 4
    body = ["mov.u32 %r1, %tid.x;"] + [f"ld.param.u64 %rd{j + 1}, [{p}];" for j, p in
                                       enumerate(("out", "ain", "bin", "cin"))]
    body += [f"cvta.to.global.u64 %rd{j}, %rd{j};" for j in range(1, 5)] + [prologue]

    def loads(base, count, name, t):
        body.extend([f"mul.wide.u32 %rd10, %r1, {4 * count};", f"add.s64 %rd11, {base}, %rd10;"])
        body.extend(f"ld.global.{t} {name}{j}, [%rd11+{4 * j}];" for j in range(count))
        return ", ".join(f"{name}{j}" for j in range(count))

    a = loads("%rd2", form.a_regs, "%ra", "b32")
    b = loads("%rd3", form.b_regs, "%rb", "b32")
    c = loads("%rd4", nc, "%rc", ctype)
    d = ", ".join(f"%rz{j}" for j in range(nc))
    body.append(f"{guard}mma.sync.aligned.{form.ptx} {{{d}}}, {{{a}}}, {{{b}}}, {{{c}}};")
    body.extend([f"mul.wide.u32 %rd10, %r1, {4 * nc};", "add.s64 %rd11, %rd1, %rd10;"])
    body.extend(f"st.global.{ctype} [%rd11+{4 * j}], %rz{j};" for j in range(nc))
    body.append("ret;")
    regs = (f"  .reg .b32 %ra<{form.a_regs}>;\n  .reg .b32 %rb<{form.b_regs}>;\n"
            f"  .reg .{ctype} %rc<{nc}>;\n  .reg .{ctype} %rz<{nc}>;\n")
    params = [("out", "u64"), ("ain", "u64"), ("bin", "u64"), ("cin", "u64")]
    return assembled(ptx_kernel("mma_k", params, "\n".join(body), regs=regs, arch=arch), arch)


def run_mma(form: Form, A, B, C, threads=None, ptx=None):
    """D for (warps, 16, K) A, (warps, K, 8) B (element bit patterns) and (warps, 16, 8) C, through
    the layouts above: returns D as (warps, 16, 8) f32 or int32."""
    ctype = np.float32 if form.is_float else np.int32
    ra = pack(A, form.a_layout, form.per_reg)
    rb = pack(B, form.b_layout, form.per_reg)
    rc = np.zeros((len(C) * 32, 4), ctype)
    for w in range(len(C)):
        for lane in range(32):
            for i in range(4):
                rc[w * 32 + lane, i] = C[w][c_16x8(lane >> 2, lane % 4, i)]
    out = np.zeros_like(rc)
    got = launch(ptx or mma_kernel(form), "mma_k", [out, ra, rb, rc], 1, threads or len(C) * 32)[0]
    return unpack_c(got)


# -- references ----------------------------------------------------------------------------------------------


def round_to_f32(q: Fraction) -> np.float32:
    """The rational ``q`` rounded to f32, to nearest even (values in f32's finite range)."""
    if q == 0:
        return np.float32(0.0)
    near = np.float32(float(q))
    cands = {near, np.nextafter(near, np.float32(np.inf)), np.nextafter(near, np.float32(-np.inf))}
    return min(cands, key=lambda x: (abs(Fraction(float(x)) - q), int(x.view(np.uint32)) & 1))


def exact_mma(form, A, B, C):
    """The exact D, rounded once to f32 (floats) or wrapped/clamped to int32, from bit patterns."""
    a, b = decode(A, form.atype), decode(B, form.btype)
    if not form.is_float:
        exact = np.einsum("wmk,wkn->wmn", a, b) + C.astype(np.int64)
        if "satfinite" in form.ptx:
            return np.clip(exact, -2 ** 31, 2 ** 31 - 1).astype(np.int32)
        return ((exact + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)
    out = np.zeros(C.shape, np.float32)
    for w, m, n in np.ndindex(*C.shape):
        q = sum((Fraction(float(a[w, m, k])) * Fraction(float(b[w, k, n])) for k in range(form.k)),
                Fraction(float(C[w, m, n])))
        out[w, m, n] = round_to_f32(q)
    return out


def within_dot_bound(form, A, B, C, D):
    """|D - A @ B - C| (NumPy, float64) within the IR reference's bound for dot with 2u:
    2u * (sum |a_k b_k| + |c|) plus one f32 rounding of the result."""
    a, b = decode(A, form.atype), decode(B, form.btype)
    ref = np.einsum("wmk,wkn->wmn", a, b) + C.astype(np.float64)
    mag = np.einsum("wmk,wkn->wmn", np.abs(a), np.abs(b)) + np.abs(C.astype(np.float64))
    u = 2.0 ** -24
    return np.abs(D.astype(np.float64) - ref) <= 2 * u * mag + 2.0 ** -149


def assert_same_bits(got, want, what):
    g = np.asarray(got)
    w = np.asarray(want).astype(g.dtype)
    g, w = np.atleast_1d(g), np.atleast_1d(w)
    bad = g.view(f"u{g.dtype.itemsize}") != w.view(f"u{g.dtype.itemsize}")
    if bad.any():
        idx = tuple(int(x[0]) for x in np.nonzero(bad))
        pytest.fail(f"{what}: {int(bad.sum())} of {bad.size} differ; first at {idx}: got {g[idx]!r}, "
                    f"expected {w[idx]!r}")


# -- matrices whose every element is distinct ------------------------------------------------------------------


def distinct_values(form, t, shape, rng, block_cols=None):
    """Values of type ``t`` with every element of each (rows, block_cols) block distinct, small
    enough that every sum of products below is exact in f32."""
    count = int(np.prod(shape[1:]))
    if t in ("s8", "u8"):
        lo = -128 if t == "s8" else 0
        per = shape[1] * (block_cols or shape[2])
        assert per <= 256
        out = np.zeros(shape, np.int64)
        for w in range(shape[0]):
            for c0 in range(0, shape[2], block_cols or shape[2]):
                blk = out[w, :, c0:c0 + (block_cols or shape[2])]
                blk[...] = (rng.permutation(256)[:per] + lo).reshape(blk.shape)
        return out
    # floats: distinct integers (times a power of two) that f16, bf16 and tf32 hold exactly
    span = 256 if t == "bf16" else 2048
    assert count <= span
    vals = np.stack([rng.permutation(span)[:count] - span // 2 for _ in range(shape[0])]).reshape(shape)
    return vals.astype(np.float64) * 2.0 ** -3


@pytest.mark.parametrize("name", list(FORMS))
def test_mma_a_fragment_layout(name):
    """B selects columns of A (B[k, n] = 1 where k = n + 8j): every element of A is seen in D at
    the place the layouts put it, lane by lane."""
    form = FORMS[name]
    rng = np.random.default_rng(1)
    A = distinct_values(form, form.atype, (WARPS, 16, form.k), rng, block_cols=8)
    for j in range(form.k // 8):
        B = np.zeros((WARPS, form.k, 8))
        B[:, np.arange(8) + 8 * j, np.arange(8)] = 1
        D = run_mma(form, encode(A, form.atype), encode(B, form.btype), np.zeros((WARPS, 16, 8)))
        assert_same_bits(D, A[:, :, 8 * j:8 * j + 8].astype(D.dtype), f"{name}: D = A[:, {8 * j}:{8 * j + 8}]")


@pytest.mark.parametrize("name", list(FORMS))
def test_mma_b_fragment_layout(name):
    """A selects rows of B (A[m, k] = 1 where k = m + 16j): every element of B is seen in D."""
    form = FORMS[name]
    rng = np.random.default_rng(2)
    B = distinct_values(form, form.btype, (WARPS, form.k, 8), rng, block_cols=8)
    for j in range(max(1, form.k // 16)):
        A = np.zeros((WARPS, 16, form.k))
        rows = np.arange(min(16, form.k))
        A[:, rows, rows + 16 * j] = 1
        D = run_mma(form, encode(A, form.atype), encode(B, form.btype), np.zeros((WARPS, 16, 8)))
        want = np.zeros(D.shape, D.dtype)
        want[:, rows] = B[:, rows + 16 * j]
        assert_same_bits(D, want, f"{name}: D = B[{16 * j}:...]")


@pytest.mark.parametrize("name", list(FORMS))
def test_mma_c_is_d_and_distinct_products(name):
    """Every element of A, B and C distinct: D lane by lane is A @ B + C, exact (the sums fit f32),
    so bit for bit NumPy's float64 result; and with A = 0, D = C."""
    form = FORMS[name]
    rng = np.random.default_rng(3)
    A = distinct_values(form, form.atype, (WARPS, 16, form.k), rng, block_cols=8)
    B = distinct_values(form, form.btype, (WARPS, form.k, 8), rng, block_cols=8)
    C = (rng.permutation(WARPS * 128).reshape(WARPS, 16, 8) - 100).astype(np.float64)
    if not form.is_float:
        C = C.astype(np.int32)
    D = run_mma(form, encode(A, form.atype), encode(B, form.btype), C)
    want = np.einsum("wmk,wkn->wmn", A, B) + C
    assert_same_bits(D, want.astype(D.dtype), f"{name}: D = A @ B + C")
    D0 = run_mma(form, encode(np.zeros(A.shape), form.atype), encode(B, form.btype), C)
    assert_same_bits(D0, C.astype(D0.dtype), f"{name}: D = C when A = 0")


def random_operand(t, shape, rng):
    """Random bit patterns of type ``t`` (finite; tf32 with garbage in the 13 ignored bits)."""
    if t == "f16":
        v = rng.standard_normal(shape) * 2.0 ** rng.integers(-12, 8, shape)
        return v.astype(np.float16).view(np.uint16)
    if t == "bf16":
        v = (rng.standard_normal(shape) * 2.0 ** rng.integers(-40, 40, shape)).astype(np.float32)
        return (v.view(np.uint32) >> 16).astype(np.uint16)
    if t == "tf32":
        v = (rng.standard_normal(shape) * 2.0 ** rng.integers(-30, 30, shape)).astype(np.float32)
        return v.view(np.uint32)
    return rng.integers(0, 256, shape).astype(np.uint8)


@pytest.mark.parametrize("name", list(FORMS))
def test_mma_random_against_exact_and_numpy(name):
    """Random operands (wide exponent ranges): D is the exact sum rounded once to f32 (the
    rational reference here, bit for bit) and within the dot bound of NumPy's float64 result;
    integer forms exact (wrapping, or clamped with .satfinite)."""
    form = FORMS[name]
    rng = np.random.default_rng(4)
    A = random_operand(form.atype, (WARPS, 16, form.k), rng)
    B = random_operand(form.btype, (WARPS, form.k, 8), rng)
    if form.is_float:
        C = (rng.standard_normal((WARPS, 16, 8)) * 2.0 ** rng.integers(-20, 20, (WARPS, 16, 8))).astype(np.float32)
    else:  # near the int32 limits, so that sums wrap (or clamp)
        C = rng.integers(-2 ** 31, 2 ** 31, (WARPS, 16, 8)).astype(np.int32)
        C[:, :4] = 2 ** 31 - 5
        C[:, 4:8] = -2 ** 31 + 5
    D = run_mma(form, A, B, C)
    assert_same_bits(D, exact_mma(form, A, B, C), f"{name}: the exact sum rounded once")
    if form.is_float:
        assert within_dot_bound(form, A, B, C, D).all()


def _pair(form, a_vals, b_vals, c_val):
    """Matrices whose output (0, 0) is sum a_vals[k] * b_vals[k] + c_val (other outputs: 0 + c)."""
    A = np.zeros((1, 16, form.k))
    B = np.zeros((1, form.k, 8))
    A[0, 0, :len(a_vals)] = a_vals
    B[0, :len(b_vals), 0] = b_vals
    C = np.zeros((1, 16, 8))
    C[0, 0, 0] = c_val
    return encode(A, form.atype), encode(B, form.btype), C.astype(np.float32)


HARD = {  # (a values, b values, c): cancellation, ties, underflow of partial sums, wide ranges
    "cancel": ([2.0 ** 20, 1.0, -(2.0 ** 20)], [2.0 ** 20, 2.0 ** -20, 2.0 ** 20], 0.0),
    "tie_up": ([1.0, 2.0 ** -12], [1.0, 2.0 ** -12], 2.0 ** -24),  # 1 + 2**-24 + 2**-24: not a tie
    "tie_even": ([1.0], [1.0], 2.0 ** -24),  # exactly half an ulp: stays 1
    "sticky": ([1.0, 2.0 ** -10], [1.0, 2.0 ** -14], -(2.0 ** -24) + 2.0 ** -40),
    "wide": ([2.0 ** 60, -(2.0 ** 60), 2.0 ** -60], [2.0 ** 60, 2.0 ** 60, 2.0 ** -60], 3.0),
    "tiny": ([2.0 ** -60, 2.0 ** -70], [2.0 ** -70, 2.0 ** -60], 0.0),
    # a float64 sum would round to an f32 tie first and then the wrong way
    "double_rounding_up": ([1.0, 2.0 ** -40], [1.0, 2.0 ** -40], 2.0 ** -24),
    "double_rounding_down": ([1.0, -(2.0 ** -40)], [1.0, 2.0 ** -40], 3 * 2.0 ** -24),
}


@pytest.mark.parametrize("name", ["m16n8k16.row.col.f32.bf16.bf16.f32", "m16n8k8.row.col.f32.tf32.tf32.f32"])
@pytest.mark.parametrize("case", list(HARD))
def test_mma_sums_are_rounded_once(name, case):
    form = FORMS[name]
    a, b, c = HARD[case]
    A, B, C = _pair(form, a, b, c)
    D = run_mma(form, A, B, C, threads=32)
    want = round_to_f32(sum((Fraction(x) * Fraction(y) for x, y in zip(a, b)), Fraction(c)))
    assert_same_bits(D[0, 0, 0], want, case)
    assert_same_bits(D[0, 1:, :], np.zeros((15, 8), np.float32), case)


def test_mma_f16_subnormals_are_exact():
    form = FORMS["m16n8k16.row.col.f32.f16.f16.f32"]
    tiny = 2.0 ** -24  # the smallest f16 subnormal
    A, B, C = _pair(form, [tiny, 3 * tiny, -tiny], [tiny, tiny, 2 * tiny], 0.0)
    D = run_mma(form, A, B, C, threads=32)
    assert_same_bits(D[0, 0, 0], np.float32(2.0 ** -48 * (1 + 3 - 2)), "f16 subnormal products")


@pytest.mark.parametrize("case,a,b,c,want", [
    ("inf*0", [np.inf], [0.0], 1.0, np.nan),
    ("inf-inf", [np.inf, 1.0], [1.0, -np.inf], 0.0, np.nan),
    ("inf+x", [np.inf, 1.0], [2.0, 3.0], -5.0, np.inf),
    ("c=-inf", [1.0], [2.0], -np.inf, -np.inf),
    ("nan", [np.nan], [1.0], 0.0, np.nan),
    ("overflow", [2.0 ** 100, 2.0 ** 100], [2.0 ** 28, 2.0 ** 28], 0.0, np.inf),
    ("-0", [-0.0] * 16, [1.0], -0.0, -0.0),  # every product -0 (-0 * +0 too) and c = -0
    ("+0", [-0.0] * 15, [1.0], -0.0, 0.0),  # one product +0 * +0
])
def test_mma_special_values_as_ieee_on_the_exact_sum(case, a, b, c, want):
    form = FORMS["m16n8k16.row.col.f32.bf16.bf16.f32"]
    A, B, C = _pair(form, a, b, c)
    D = run_mma(form, A, B, C, threads=32)
    got = D[0, 0, 0]
    if np.isnan(want):
        assert got.view(np.uint32) == 0x7FFFFFFF, f"{case}: the canonical NaN, got {got!r}"
    else:
        assert_same_bits(got, np.float32(want), case)


def test_mma_tf32_uses_only_the_tf32_bits():
    """tf32 operands: the low 13 mantissa bits of the f32 registers are ignored (truncated)."""
    form = FORMS["m16n8k8.row.col.f32.tf32.tf32.f32"]
    one = np.float32(1.0).view(np.uint32)
    A = np.zeros((1, 16, 8), np.uint32)
    B = np.zeros((1, 8, 8), np.uint32)
    A[0, 0, 0] = one | 0x1FFF  # 1 + (2**13 - 1) * 2**-23: the tf32 value is 1
    B[0, 0, 0] = np.float32(3.0).view(np.uint32) | 0x1000
    D = run_mma(form, A, B, np.zeros((1, 16, 8), np.float32), threads=32)
    assert_same_bits(D[0, 0, 0], np.float32(3.0), "tf32 truncation")


CVT_TF32 = r"""
declare i32 @llvm.nvvm.f2tf32.rna(float)
"""


def test_cvt_rna_tf32_rounds_to_nearest_ties_away():
    from emulator_support import elementwise_ir, run_elementwise

    ptx = compile_ir(elementwise_ir("tf", ["float"], ["i32"], "%r0 = call i32 @llvm.nvvm.f2tf32.rna(float %a0)",
                                    CVT_TF32))
    assert "cvt.rna.tf32.f32" in instruction_forms(ptx)
    rng = np.random.default_rng(5)
    bits = rng.integers(0, 2 ** 32, 4000, dtype=np.uint64).astype(np.uint32)
    bits[:8] = [0x3F801000, 0xBF801000, 0x3F803000, 0x3F800FFF, 0x7F7FFFFF, 0x7F800000, 0x00001000, 0x80000FFF]
    x = bits.view(np.float32)
    (got,) = run_elementwise(ptx, "tf", [x], [np.uint32])
    # reference: exact rational rounding to 10 fraction bits, ties away from zero
    want = np.zeros_like(bits)
    for k, v in enumerate(x.tolist()):
        if math.isnan(v):
            want[k] = 0x7FFFFFFF
            continue
        if math.isinf(v) or v == 0:
            want[k] = np.float32(v).view(np.uint32)
            continue
        e = math.frexp(abs(v))[1] - 1
        quantum = Fraction(2) ** (max(e, -126) - 10)
        q = Fraction(abs(v)) / quantum
        r = math.floor(q + Fraction(1, 2)) * quantum
        big = float(r) >= 2.0 ** 128
        want[k] = np.float32(math.copysign(math.inf if big else float(r), v)).view(np.uint32)
    assert_same_bits(got, want, "cvt.rna.tf32.f32")


# -- the warp must be whole ------------------------------------------------------------------------------------


def test_mma_by_part_of_a_warp_is_an_error_naming_it():
    form = FORMS["m16n8k16.row.col.f32.bf16.bf16.f32"]
    z = np.zeros((WARPS, 16, 16))
    with pytest.raises(PtxError, match=r"mma\.sync\.aligned\.m16n8k16.*all 32 lanes.*only 16") as err:
        run_mma(form, encode(z, "bf16"), encode(np.zeros((WARPS, 16, 8)), "bf16"), np.zeros((WARPS, 16, 8)),
                threads=48)
    assert "mma.sync" in str(err.value) and "line" in str(err.value)
    # lanes 16..31 exit before the mma
    exits = mma_kernel(form, prologue="and.b32 %r2, %r1, 31;\n setp.ge.u32 %p1, %r2, 16;\n @%p1 ret;")
    with pytest.raises(PtxError, match=r"all 32 lanes of the warp must execute it together, but only 16"):
        run_mma(form, encode(z, "bf16"), encode(np.zeros((WARPS, 16, 8)), "bf16"), np.zeros((WARPS, 16, 8)),
                ptx=exits)


def test_mma_on_diverged_paths_is_an_error_naming_both():
    """Half a warp at one mma, the other half at another: they can never meet."""
    form = FORMS["m16n8k16.row.col.f32.bf16.bf16.f32"]
    body = """
    mov.u32 %r1, %laneid;
    mov.b32 %r2, 0;
    mov.f32 %f1, 0f00000000;
    setp.lt.u32 %p1, %r1, 16;
    @%p1 bra LOW;
    mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f2, %f3, %f4, %f5}, {%r2, %r2, %r2, %r2}, {%r2, %r2}, {%f1, %f1, %f1, %f1};
    bra DONE;
    LOW:
    mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f2, %f3, %f4, %f5}, {%r2, %r2, %r2, %r2}, {%r2, %r2}, {%f1, %f1, %f1, %f1};
    DONE:
    ret;
    """
    ptx = assembled(ptx_kernel("div", [("buf", "u64")], body, regs="  .reg .f32 %f<8>;\n"))
    lines = [i for i, line in enumerate(ptx.splitlines(), 1) if line.strip().startswith("mma.")]
    with pytest.raises(PtxBarrierError) as err:
        Device().load_module(ptx).function("div").launch(1, 32, [0])
    assert all(f"line {n}" in str(err.value) for n in lines), str(err.value)
    assert form.ptx in str(err.value)


def test_guarded_mma_must_be_uniform_in_the_warp():
    form = FORMS["m16n8k16.row.col.f32.bf16.bf16.f32"]
    z = encode(np.zeros((WARPS, 16, 16)), "bf16")
    zb = encode(np.zeros((WARPS, 16, 8)), "bf16")
    c = np.ones((WARPS, 16, 8), np.float32)
    # a guard false in warp 1 only: warp 0 computes, warp 1 keeps the registers' old values
    uniform = mma_kernel(form, guard="@%p1 ", prologue="setp.lt.u32 %p1, %r1, 32;")
    D = run_mma(form, z, zb, c, ptx=uniform)
    assert (D[0] == 1).all() and (D[1] == 0).all()
    split = mma_kernel(form, guard="@%p1 ", prologue="setp.lt.u32 %p1, %r1, 40;")
    with pytest.raises(PtxError, match=r"guard must be the same for every lane of the warp"):
        run_mma(form, z, zb, c, ptx=split)


def test_mma_forms_the_emulator_lacks_are_reported():
    have = [f"mma.sync.aligned.{f}" for f in FORMS]
    lacks = ["mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16", "mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32",
             "mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32", "mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64",
             "wgmma.mma_async.sp.sync.aligned.m64n128k32.f32.bf16.bf16", "cp.async.bulk.shared::cluster.global.b64",
             "ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8"]
    assert unsupported(have + lacks) == set(lacks)


# -- ldmatrix / stmatrix -----------------------------------------------------------------------------------------

SMEM = 2048  # bytes of shared memory in the matrix kernels: 128 rows of 16 bytes


def ldmatrix_kernel(num: int, trans: bool, generic: bool = False) -> str:
    """Fill shared memory from src (64 bytes a thread), then lane l gives the shared offset rowoff[l]
    (the row addresses) to ldmatrix; thread l stores its num words to out[l]."""
    space = ".shared::cta" if num == 2 else ".shared"  # both spellings of the space
    regs = ", ".join(f"%q{j}" for j in range(num))
    address = ("cvta.shared.u64 %rd9, %rd8;\n ldmatrix.sync.aligned.m8n8.x{n}{t}.b16 {{{r}}}, [%rd9];" if generic
               else "ldmatrix.sync.aligned.m8n8.x{n}{t}" + space + ".b16 {{{r}}}, [%r7];")
    body = f"""
    mov.u32 %r1, %tid.x;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [src];
    ld.param.u64 %rd3, [rowoff];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    cvta.to.global.u64 %rd3, %rd3;
    mov.u32 %r2, sm;
    shl.b32 %r3, %r1, 6;
    add.u32 %r4, %r2, %r3;
    mul.wide.u32 %rd4, %r1, 64;
    add.s64 %rd5, %rd2, %rd4;
    ld.global.v4.u32 {{%r10, %r11, %r12, %r13}}, [%rd5];
    st.shared.v4.u32 [%r4], {{%r10, %r11, %r12, %r13}};
    ld.global.v4.u32 {{%r10, %r11, %r12, %r13}}, [%rd5+16];
    st.shared.v4.u32 [%r4+16], {{%r10, %r11, %r12, %r13}};
    ld.global.v4.u32 {{%r10, %r11, %r12, %r13}}, [%rd5+32];
    st.shared.v4.u32 [%r4+32], {{%r10, %r11, %r12, %r13}};
    ld.global.v4.u32 {{%r10, %r11, %r12, %r13}}, [%rd5+48];
    st.shared::cta.v4.u32 [%r4+48], {{%r10, %r11, %r12, %r13}};
    bar.sync 0;
    mul.wide.u32 %rd6, %r1, 4;
    add.s64 %rd7, %rd3, %rd6;
    ld.global.u32 %r6, [%rd7];
    add.u32 %r7, %r2, %r6;
    cvt.u64.u32 %rd8, %r7;
    {address.format(n=num, t='.trans' if trans else '', r=regs)}
    mul.wide.u32 %rd10, %r1, {4 * num};
    add.s64 %rd11, %rd1, %rd10;
    """ + "\n".join(f"st.global.u32 [%rd11+{4 * j}], %q{j};" for j in range(num)) + "\nret;"
    return assembled(ptx_kernel("ldm", [("out", "u64"), ("src", "u64"), ("rowoff", "u64")], body,
                                regs=f"  .reg .b32 %q<{num}>;\n", extra=f".shared .align 16 .b8 sm[{SMEM}];\n"))


def run_ldmatrix(ptx, shared_u16, rowoff, num):
    out = np.zeros((32, num), np.uint32)
    return launch(ptx, "ldm", [out, shared_u16, rowoff.astype(np.uint32)], 1, 32)[0]


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
@pytest.mark.parametrize("generic", [False, True])
def test_ldmatrix_fragments(num, trans, generic):
    """Lane 8i + r gives the address of row r of matrix i (rows scattered over shared memory); lane l
    receives in word i elements (l >> 2, 2 (l % 4)) and (l >> 2, 2 (l % 4) + 1) of matrix i (low half
    first), of its transpose with .trans.  Lanes past 8 * num give addresses that are not used."""
    rng = np.random.default_rng(num * 10 + trans)
    shared = rng.permutation(SMEM // 2).astype(np.uint16) + 1000  # every element distinct
    slots = rng.permutation(SMEM // 16)[:32]
    rowoff = slots * 16
    rowoff[8 * num:] = 2 ** 31 + 3  # unused: neither aligned nor inside shared memory
    got = run_ldmatrix(ldmatrix_kernel(num, trans, generic), shared, rowoff, num)
    for lane in range(32):
        for i in range(num):
            def element(r, c):
                return int(shared[(rowoff[8 * i + r] + 2 * c) // 2])
            r, c = lane >> 2, 2 * (lane % 4)
            lo, hi = (element(c, r), element(c + 1, r)) if trans else (element(r, c), element(r, c + 1))
            assert int(got[lane, i]) == lo | (hi << 16), (lane, i)


def test_ldmatrix_row_addresses_are_checked():
    ptx = ldmatrix_kernel(4, False)
    shared = np.zeros(SMEM // 2, np.uint16)
    rowoff = np.arange(32) * 16
    rowoff[13] = 13 * 16 + 8
    with pytest.raises(PtxMemoryError, match=r"misaligned shared load of 16 bytes .*multiple of 16") as err:
        run_ldmatrix(ptx, shared, rowoff, 4)
    assert "ldmatrix" in str(err.value) and "thread (13, 0, 0)" in str(err.value)
    rowoff[13] = SMEM
    with pytest.raises(PtxMemoryError, match=r"out-of-bounds shared load of 16 bytes") as err:
        run_ldmatrix(ptx, shared, rowoff, 4)
    assert "thread (13, 0, 0)" in str(err.value)
    generic = ldmatrix_kernel(1, False, generic=True).replace("cvta.shared.u64 %rd9, %rd8;", "mov.u64 %rd9, %rd2;")
    with pytest.raises(PtxMemoryError, match=r"generic address .* is not in shared memory"):
        run_ldmatrix(generic, shared, np.arange(32) * 16, 1)


@pytest.mark.parametrize("num", [1, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_stmatrix_is_the_inverse_of_ldmatrix(num, trans):
    """sm_90's stmatrix: lane l's word i holds (row l >> 2, columns 2 (l % 4), +1) of matrix i, stored
    to the rows lanes 8i + r address."""
    regs = ", ".join(f"%q{j}" for j in range(num))
    body = f"""
    mov.u32 %r1, %tid.x;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [src];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    mul.wide.u32 %rd4, %r1, {4 * num};
    add.s64 %rd5, %rd2, %rd4;
    """ + "\n".join(f"ld.global.u32 %q{j}, [%rd5+{4 * j}];" for j in range(num)) + f"""
    mov.u32 %r2, sm;
    mul.lo.u32 %r3, %r1, 48;
    add.u32 %r4, %r2, %r3;
    stmatrix.sync.aligned.m8n8.x{num}{'.trans' if trans else ''}.shared.b16 [%r4], {{{regs}}};
    bar.sync 0;
    shl.b32 %r5, %r1, 6;
    add.u32 %r6, %r2, %r5;
    mul.wide.u32 %rd6, %r1, 64;
    add.s64 %rd7, %rd1, %rd6;
    ld.shared.v4.u32 {{%r10, %r11, %r12, %r13}}, [%r6];
    st.global.v4.u32 [%rd7], {{%r10, %r11, %r12, %r13}};
    ld.shared.v4.u32 {{%r10, %r11, %r12, %r13}}, [%r6+16];
    st.global.v4.u32 [%rd7+16], {{%r10, %r11, %r12, %r13}};
    ld.shared.v4.u32 {{%r10, %r11, %r12, %r13}}, [%r6+32];
    st.global.v4.u32 [%rd7+32], {{%r10, %r11, %r12, %r13}};
    ld.shared.v4.u32 {{%r10, %r11, %r12, %r13}}, [%r6+48];
    st.global.v4.u32 [%rd7+48], {{%r10, %r11, %r12, %r13}};
    ret;
    """
    ptx = assembled(ptx_kernel("stm", [("out", "u64"), ("src", "u64")], body, regs=f"  .reg .b32 %q<{num}>;\n",
                               arch="sm_90", extra=f".shared .align 16 .b8 sm[{SMEM}];\n"), "sm_90")
    words = np.random.default_rng(7).permutation(2 ** 16)[:64 * num].astype(np.uint32)
    words = (words[:32 * num] | (words[32 * num:] << 16)).reshape(32, num)
    out = launch(ptx, "stm", [np.zeros(SMEM // 2, np.uint16), words], 1, 32)[0]
    for i in range(num):
        for r in range(8):
            row = out[(48 * (8 * i + r)) // 2:(48 * (8 * i + r)) // 2 + 8]
            for c in range(8):
                rr, cc = (c, r) if trans else (r, c)  # element (r, c) of the stored matrix
                lane = 4 * rr + cc // 2
                assert int(row[c]) == (int(words[lane, i]) >> (16 * (cc % 2))) & 0xFFFF, (i, r, c)


# -- cp.async ------------------------------------------------------------------------------------------------------

COPY_SMEM = 1024


def copy_kernel(body: str, arch: str = "sm_80") -> str:
    """A kernel (out, src, n): thread t has %r1 = t, %r2 = the shared base, %r4 = sm + 16 t (its
    slot), %rd1 = out, %rd4 = src + 16 t, %rd6 = out + 16 t, %r20 = n; ``body`` does the rest."""
    head = """
    mov.u32 %r1, %tid.x;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [src];
    ld.param.u32 %r20, [n];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    mov.u32 %r2, sm;
    shl.b32 %r3, %r1, 4;
    add.u32 %r4, %r2, %r3;
    mul.wide.u32 %rd3, %r1, 16;
    add.s64 %rd4, %rd2, %rd3;
    add.s64 %rd6, %rd1, %rd3;
    """
    return assembled(ptx_kernel("cp", [("out", "u64"), ("src", "u64"), ("n", "u32")], head + body, arch=arch,
                                extra=f".shared .align 16 .b8 sm[{COPY_SMEM}];\n"), arch)


STORE_SLOT = """
    ld.shared.v4.u32 {%r10, %r11, %r12, %r13}, [%r5];
    st.global.v4.u32 [%rd6], {%r10, %r11, %r12, %r13};
"""


def run_copy(ptx, src, n=0, threads=64, out=None):
    """Launch under the lockstep schedule: the messages checked below name the first thread to
    trip, which depends on the order the warps run in."""
    out = np.zeros(threads * 16, np.uint8) if out is None else out
    return launch(ptx, "cp", [out, src], 1, threads, extra=[n], schedule="lockstep")[0]


def line_of(ptx, text):
    return next(i for i, line in enumerate(ptx.splitlines(), 1) if text in line)


def test_cp_async_copies_land_after_wait_and_barrier():
    """.cg 16 bytes and .ca 4/8/16 bytes; after wait_group 0 and bar.sync every thread reads another
    thread's slot (the next one, cyclically)."""
    body = """
    cp.async.cg.shared.global [%r4], [%rd4], 16;
    cp.async.commit_group;
    cp.async.wait_group 0;
    bar.sync 0;
    add.u32 %r8, %r1, 1;
    and.b32 %r8, %r8, 63;
    shl.b32 %r8, %r8, 4;
    add.u32 %r5, %r2, %r8;
    """ + STORE_SLOT + "ret;"
    src = np.random.default_rng(8).integers(0, 256, 1024).astype(np.uint8)
    got = run_copy(copy_kernel(body), src)
    assert (got.reshape(64, 16) == np.roll(src.reshape(64, 16), -1, axis=0)).all()
    small = """
    cp.async.ca.shared.global [%r4], [%rd4], 4;
    cp.async.ca.shared::cta.global [%r4+4], [%rd4+4], 4;
    cp.async.ca.shared.global.L2::128B [%r4+8], [%rd4+8], 8;
    cp.async.wait_all;
    mov.u32 %r5, %r4;
    """ + STORE_SLOT + "ret;"
    assert (run_copy(copy_kernel(small), src) == src).all()


def test_cp_async_partial_source_is_zero_filled():
    """src-size n < cp-size: n bytes read, the rest zero; a source ending at the allocation's end is
    in bounds as long as its src-size bytes are."""
    body = """
    and.b32 %r9, %r1, 15;
    cp.async.ca.shared.global [%r4], [%rd4], 16, %r9;
    cp.async.commit_group;
    cp.async.wait_group 0;
    mov.u32 %r5, %r4;
    """ + STORE_SLOT + "ret;"
    src = np.random.default_rng(9).integers(1, 256, 1024).astype(np.uint8)
    got = run_copy(copy_kernel(body), src).reshape(64, 16)
    want = src.reshape(64, 16).copy()
    for t in range(64):
        want[t, t % 16:] = 0
    assert (got == want).all()
    tail = """
    cp.async.ca.shared.global [%r4], [%rd2+16], 16, %r20;
    cp.async.wait_all;
    mov.u32 %r5, %r4;
    """ + STORE_SLOT + "ret;"
    ptx = copy_kernel(tail)
    src20 = np.arange(1, 21, dtype=np.uint8)
    got = run_copy(ptx, src20, n=4, threads=1)
    assert list(got) == [17, 18, 19, 20] + [0] * 12
    with pytest.raises(PtxMemoryError, match=r"out-of-bounds global load of 1 bytes") as err:
        run_copy(ptx, src20, n=5, threads=1)
    assert f"line {line_of(ptx, 'cp.async.ca')}" in str(err.value)


def test_cp_async_ignore_src_copies_zeros():
    body = """
    and.b32 %r9, %r1, 1;
    setp.eq.u32 %p1, %r9, 1;
    cp.async.cg.shared.global [%r4], [%rd4], 16, %p1;
    cp.async.wait_all;
    mov.u32 %r5, %r4;
    """ + STORE_SLOT + "ret;"
    src = np.random.default_rng(10).integers(1, 256, 1024).astype(np.uint8)
    got = run_copy(copy_kernel(body), src).reshape(64, 16)
    want = src.reshape(64, 16).copy()
    want[1::2] = 0
    assert (got == want).all()


def test_cp_async_groups_retire_in_order():
    """Three groups (one copy each, to three slots); wait_group 2 retires the first, 1 the second,
    0 the third: each slot is read after its own group retired."""
    body = """
    cp.async.cg.shared.global [%r4], [%rd4], 16;
    cp.async.commit_group;
    cp.async.cg.shared.global [%r4+256], [%rd4+256], 16;
    cp.async.commit_group;
    cp.async.cg.shared.global [%r4+512], [%rd4+512], 16;
    cp.async.commit_group;
    cp.async.wait_group 2;
    mov.u32 %r5, %r4;
    ld.shared.v4.u32 {%r10, %r11, %r12, %r13}, [%r5];
    st.global.v4.u32 [%rd6], {%r10, %r11, %r12, %r13};
    cp.async.wait_group 1;
    ld.shared.v4.u32 {%r10, %r11, %r12, %r13}, [%r5+256];
    st.global.v4.u32 [%rd6+256], {%r10, %r11, %r12, %r13};
    cp.async.wait_group 0;
    ld.shared.v4.u32 {%r10, %r11, %r12, %r13}, [%r5+512];
    st.global.v4.u32 [%rd6+512], {%r10, %r11, %r12, %r13};
    ret;
    """
    src = np.random.default_rng(11).integers(0, 256, 1024).astype(np.uint8)
    got = run_copy(copy_kernel(body), src, threads=16, out=np.zeros(1024, np.uint8))
    for base in (0, 256, 512):
        assert (got[base:base + 256] == src[base:base + 256]).all()
    # reading the second slot after wait_group 2: its group is still in flight
    early = body.replace("cp.async.wait_group 1;", "").replace("cp.async.wait_group 2;", "cp.async.wait_group 2;")
    early = early.replace("st.global.v4.u32 [%rd6], {%r10, %r11, %r12, %r13};",
                          "st.global.v4.u32 [%rd6], {%r10, %r11, %r12, %r13};\n cp.async.wait_group 2;", 1)
    ptx = copy_kernel(early)
    with pytest.raises(PtxAsyncCopyError) as err:
        run_copy(ptx, src, threads=16, out=np.zeros(1024, np.uint8))
    message = str(err.value)
    assert f"PTX line {line_of(ptx, '[%r4+256]')}" in message and f"line {line_of(ptx, '[%r5+256]')}" in message
    assert "has not retired the copy's group" in message and message.count("thread (0, 0, 0)") == 2


def test_cp_async_premature_read_by_the_issuing_thread():
    body = """
    cp.async.cg.shared.global [%r4], [%rd4], 16;
    cp.async.commit_group;
    mov.u32 %r5, %r4;
    """ + STORE_SLOT + """
    cp.async.wait_group 0;
    ret;
    """
    ptx = copy_kernel(body)
    with pytest.raises(PtxAsyncCopyError) as err:
        run_copy(ptx, np.zeros(1024, np.uint8))
    message = str(err.value)
    assert f"the cp.async at PTX line {line_of(ptx, 'cp.async.cg')}" in message
    assert f"at PTX line {line_of(ptx, 'ld.shared')}" in message
    assert "shared load" in message and "thread (0, 0, 0)" in message


READ_NEIGHBOUR = """
    add.u32 %r8, %r1, 1;
    and.b32 %r8, %r8, 63;
    shl.b32 %r8, %r8, 4;
    add.u32 %r5, %r2, %r8;
""" + STORE_SLOT


@pytest.mark.parametrize("order", ["wait, no barrier", "barrier, then wait", "barrier, read, wait"])
def test_cp_async_read_by_another_thread_needs_wait_then_barrier(order):
    """Thread 0 reads thread 1's slot: only a barrier after thread 1's wait makes that safe."""
    sync, after = {"wait, no barrier": ("cp.async.wait_all;", ""),
                   "barrier, then wait": ("bar.sync 0;\n cp.async.wait_all;", ""),
                   "barrier, read, wait": ("bar.sync 0;", "cp.async.wait_all;\n")}[order]
    ptx = copy_kernel("cp.async.cg.shared.global [%r4], [%rd4], 16;\n" + sync + READ_NEIGHBOUR + after + "ret;")
    with pytest.raises(PtxAsyncCopyError) as err:
        run_copy(ptx, np.zeros(1024, np.uint8))
    message = str(err.value)
    assert f"the cp.async at PTX line {line_of(ptx, 'cp.async.cg')}" in message
    assert f"at PTX line {line_of(ptx, 'ld.shared')}" in message
    assert "issued by block (0, 0, 0) thread (1, 0, 0)" in message and message.rstrip().endswith("thread (0, 0, 0)")
    if order == "barrier, read, wait":
        assert "has not retired the copy's group" in message
    else:  # the writer has waited (the emulator runs the threads' waits before the reads that follow them)
        assert "no block barrier (bar.sync) since has made its bytes visible" in message
    fine = copy_kernel("cp.async.cg.shared.global [%r4], [%rd4], 16;\n cp.async.wait_all;\n bar.sync 0;"
                       + READ_NEIGHBOUR + "ret;")
    src = np.arange(1024).astype(np.uint8)
    assert (run_copy(fine, src).reshape(64, 16) == np.roll(src.reshape(64, 16), -1, axis=0)).all()


@pytest.mark.parametrize("schedule", ["lockstep", "reverse", "random:3"])
def test_cp_async_over_a_slot_another_warp_still_reads_is_a_race(schedule):
    """A pipeline stage refilled before every thread is done reading it: thread 31 reads thread
    32's slot (another warp), then thread 32 refills it by cp.async with no barrier between.
    With the barrier, the same kernel is clean."""
    from accy.errors import RaceError

    refill = "cp.async.cg.shared.global [%r4], [%rd4], 16;\n cp.async.wait_all;\n ret;"
    racy = copy_kernel(READ_NEIGHBOUR + refill)
    with pytest.raises(RaceError) as err:
        launch(racy, "cp", [np.zeros(1024, np.uint8), np.zeros(1024, np.uint8)], 1, 64, extra=[0],
               schedule=schedule)
    assert "cp.async" in str(err.value) and "ld.shared" in str(err.value)
    src = np.random.default_rng(5).integers(0, 256, 1024).astype(np.uint8)
    ordered = copy_kernel(READ_NEIGHBOUR + "bar.sync 0;\n" + refill)
    launch(ordered, "cp", [np.zeros(1024, np.uint8), src], 1, 64, extra=[0], schedule=schedule)


def test_cp_async_writes_and_copies_to_bytes_in_flight_are_errors():
    store = copy_kernel("""
    cp.async.cg.shared.global [%r4], [%rd4], 16;
    st.shared.u32 [%r4+12], %r1;
    cp.async.wait_all;
    ret;
    """)
    with pytest.raises(PtxAsyncCopyError, match=r"shared store touches shared address 0xc, which a cp.async"):
        run_copy(store, np.zeros(1024, np.uint8), threads=1)
    twice = copy_kernel("""
    cp.async.cg.shared.global [%r4], [%rd4], 16;
    cp.async.commit_group;
    cp.async.ca.shared.global [%r4+8], [%rd4], 8;
    cp.async.wait_all;
    ret;
    """)
    with pytest.raises(PtxAsyncCopyError, match=r"shared cp.async touches shared address 0x8"):
        run_copy(twice, np.zeros(1024, np.uint8), threads=1)
    same = copy_kernel("""
    cp.async.cg.shared.global [%r2], [%rd4], 16;
    cp.async.wait_all;
    ret;
    """)
    with pytest.raises(PtxAsyncCopyError, match=r"two copies of one cp.async write shared address 0x0"):
        run_copy(same, np.zeros(1024, np.uint8), threads=2)


def test_cp_async_alignment_and_bounds():
    dst = copy_kernel("cp.async.cg.shared.global [%r4+8], [%rd4], 16;\n cp.async.wait_all;\n ret;")
    with pytest.raises(PtxMemoryError, match=r"misaligned shared cp.async of 16 bytes at shared address 0x8"):
        run_copy(dst, np.zeros(1024, np.uint8), threads=1)
    src = copy_kernel("cp.async.ca.shared.global [%r4], [%rd4+4], 8;\n cp.async.wait_all;\n ret;")
    with pytest.raises(PtxMemoryError, match=r"misaligned global load of 8 bytes"):
        run_copy(src, np.zeros(1024, np.uint8), threads=1)
    partial = copy_kernel("cp.async.ca.shared.global [%r4], [%rd4+4], 8, %r20;\n cp.async.wait_all;\n ret;")
    with pytest.raises(PtxMemoryError, match=r"misaligned cp.async source .* multiple of cp-size, 8"):
        run_copy(partial, np.zeros(1024, np.uint8), n=3, threads=1)
    outside = copy_kernel("cp.async.cg.shared.global [%r4], [%rd4], 16;\n cp.async.wait_all;\n ret;")
    with pytest.raises(PtxMemoryError, match=r"out-of-bounds shared cp.async of 16 bytes"):
        run_copy(outside, np.zeros(2048, np.uint8), threads=65, out=np.zeros(2048, np.uint8))
    with pytest.raises(PtxMemoryError, match=r"out-of-bounds global load of 16 bytes"):
        run_copy(outside, np.zeros(1000, np.uint8), threads=63, out=np.zeros(1024, np.uint8))


def test_cp_async_left_pending_at_exit_is_fine():
    ptx = copy_kernel("cp.async.cg.shared.global [%r4], [%rd4], 16;\n cp.async.commit_group;\n ret;")
    run_copy(ptx, np.zeros(1024, np.uint8))


# -- what LLVM emits for the NVVM intrinsics -----------------------------------------------------------------

PIPELINE = SREGS + r"""
declare void @llvm.nvvm.cp.async.cg.shared.global.16(ptr addrspace(3), ptr addrspace(1))
declare void @llvm.nvvm.cp.async.commit.group()
declare void @llvm.nvvm.cp.async.wait.group(i32)
declare void @llvm.nvvm.barrier0()
declare {i32, i32, i32, i32} @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16(ptr addrspace(3))
declare {i32, i32} @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x2.trans.b16(ptr addrspace(3))
declare {float, float, float, float} @llvm.nvvm.mma.m16n8k16.row.col.bf16(i32, i32, i32, i32, i32, i32, float, float, float, float)
@sa = internal addrspace(3) global [256 x i16] undef, align 16
@sb = internal addrspace(3) global [128 x i16] undef, align 16

; D (16 x 8, f32, row-major) = A (16 x 16 bf16, row-major) @ B (16 x 8 bf16, row-major): one warp
define ptx_kernel void @tile(ptr addrspace(1) %d, ptr addrspace(1) %a, ptr addrspace(1) %b) {
entry:
  %l = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %l64 = zext i32 %l to i64
  %off = mul i64 %l64, 16
  %ga = getelementptr i8, ptr addrspace(1) %a, i64 %off
  %sa16 = getelementptr i8, ptr addrspace(3) @sa, i64 %off
  call void @llvm.nvvm.cp.async.cg.shared.global.16(ptr addrspace(3) %sa16, ptr addrspace(1) %ga)
  %low = icmp ult i32 %l, 16
  br i1 %low, label %copyb, label %wait
copyb:
  %gb = getelementptr i8, ptr addrspace(1) %b, i64 %off
  %sb16 = getelementptr i8, ptr addrspace(3) @sb, i64 %off
  call void @llvm.nvvm.cp.async.cg.shared.global.16(ptr addrspace(3) %sb16, ptr addrspace(1) %gb)
  br label %wait
wait:
  call void @llvm.nvvm.cp.async.commit.group()
  call void @llvm.nvvm.cp.async.wait.group(i32 0)
  call void @llvm.nvvm.barrier0()
  %r = and i32 %l, 15
  %h = lshr i32 %l, 4
  %r64 = zext i32 %r to i64
  %h64 = zext i32 %h to i64
  %rowa = mul i64 %r64, 32
  %cola = mul i64 %h64, 16
  %oa = add i64 %rowa, %cola
  %pa = getelementptr i8, ptr addrspace(3) @sa, i64 %oa
  %fa = call {i32, i32, i32, i32} @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16(ptr addrspace(3) %pa)
  %ob = mul i64 %r64, 16
  %pb = getelementptr i8, ptr addrspace(3) @sb, i64 %ob
  %fb = call {i32, i32} @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x2.trans.b16(ptr addrspace(3) %pb)
  %a0 = extractvalue {i32, i32, i32, i32} %fa, 0
  %a1 = extractvalue {i32, i32, i32, i32} %fa, 1
  %a2 = extractvalue {i32, i32, i32, i32} %fa, 2
  %a3 = extractvalue {i32, i32, i32, i32} %fa, 3
  %b0 = extractvalue {i32, i32} %fb, 0
  %b1 = extractvalue {i32, i32} %fb, 1
  %acc = call {float, float, float, float} @llvm.nvvm.mma.m16n8k16.row.col.bf16(i32 %a0, i32 %a1, i32 %a2, i32 %a3, i32 %b0, i32 %b1, float 0.0, float 0.0, float 0.0, float 0.0)
  %g = lshr i32 %l, 2
  %t = and i32 %l, 3
  %g64 = zext i32 %g to i64
  %t64 = zext i32 %t to i64
  %row0 = mul i64 %g64, 8
  %col = mul i64 %t64, 2
  %i0 = add i64 %row0, %col
  %i2 = add i64 %i0, 64
  %p0 = getelementptr float, ptr addrspace(1) %d, i64 %i0
  %p2 = getelementptr float, ptr addrspace(1) %d, i64 %i2
  %c0 = extractvalue {float, float, float, float} %acc, 0
  %c1 = extractvalue {float, float, float, float} %acc, 1
  %c2 = extractvalue {float, float, float, float} %acc, 2
  %c3 = extractvalue {float, float, float, float} %acc, 3
  store float %c0, ptr addrspace(1) %p0
  %p1 = getelementptr float, ptr addrspace(1) %p0, i64 1
  store float %c1, ptr addrspace(1) %p1
  store float %c2, ptr addrspace(1) %p2
  %p3 = getelementptr float, ptr addrspace(1) %p2, i64 1
  store float %c3, ptr addrspace(1) %p3
  ret void
}
"""


def test_llvm_cp_async_ldmatrix_mma_tile():
    """A 16x8x16 bf16 tile as LLVM lowers the NVVM intrinsics: cp.async to shared, ldmatrix (x4 for A,
    x2.trans for the row-major B), mma: D = A @ B exactly (small integers), bit for bit."""
    ptx = compile_ir(PIPELINE)
    assert {"cp.async.cg.shared.global", "cp.async.commit_group", "cp.async.wait_group",
            "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16",
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"} <= instruction_forms(ptx)
    rng = np.random.default_rng(12)
    a = (rng.permutation(256) - 128).reshape(16, 16).astype(np.float32)
    b = (rng.permutation(128) - 64).reshape(16, 8).astype(np.float32)
    d = np.zeros((16, 8), np.float32)
    got = launch(ptx, "tile", [d, encode(a, "bf16"), encode(b, "bf16")], 1, 32)[0]
    assert_same_bits(got, (a.astype(np.float64) @ b).astype(np.float32), "D = A @ B")


FRAGMENT_IR = SREGS + r"""
declare i32 @llvm.nvvm.f2tf32.rna(float)
declare {float, float, float, float} @llvm.nvvm.mma.m16n8k8.row.col.tf32(i32, i32, i32, i32, i32, i32, float, float, float, float)
declare {float, float, float, float} @llvm.nvvm.mma.m16n8k16.row.col.f32.f32(<2 x half>, <2 x half>, <2 x half>, <2 x half>, <2 x half>, <2 x half>, float, float, float, float)

; lane l: tf32 A/B fragments from fa/fb (f32, 4 and 2 a lane, rounded here with cvt.rna.tf32.f32),
; f16 A/B fragments from ha/hb (8 and 4 halves a lane, packed in pairs); C = 0
define ptx_kernel void @frag(ptr addrspace(1) %dt, ptr addrspace(1) %dh, ptr addrspace(1) %fa, ptr addrspace(1) %fb,
                             ptr addrspace(1) %ha, ptr addrspace(1) %hb) {
entry:
  %l = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %l64 = zext i32 %l to i64
""" + "".join(f"""  %ia{j} = add i64 %l64, {32 * j}
  %pfa{j} = getelementptr float, ptr addrspace(1) %fa, i64 %ia{j}
  %xa{j} = load float, ptr addrspace(1) %pfa{j}
  %ta{j} = call i32 @llvm.nvvm.f2tf32.rna(float %xa{j})
""" for j in range(4)) + "".join(f"""  %ib{j} = add i64 %l64, {32 * j}
  %pfb{j} = getelementptr float, ptr addrspace(1) %fb, i64 %ib{j}
  %xb{j} = load float, ptr addrspace(1) %pfb{j}
  %tb{j} = call i32 @llvm.nvvm.f2tf32.rna(float %xb{j})
""" for j in range(2)) + "".join(f"""  %iha{j} = add i64 %l64, {32 * j}
  %pha{j} = getelementptr half, ptr addrspace(1) %ha, i64 %iha{j}
  %ya{j} = load half, ptr addrspace(1) %pha{j}
""" for j in range(8)) + "".join(f"""  %ihb{j} = add i64 %l64, {32 * j}
  %phb{j} = getelementptr half, ptr addrspace(1) %hb, i64 %ihb{j}
  %yb{j} = load half, ptr addrspace(1) %phb{j}
""" for j in range(4)) + "".join(f"""  %va{j}x = insertelement <2 x half> undef, half %ya{2 * j}, i32 0
  %va{j} = insertelement <2 x half> %va{j}x, half %ya{2 * j + 1}, i32 1
""" for j in range(4)) + "".join(f"""  %vb{j}x = insertelement <2 x half> undef, half %yb{2 * j}, i32 0
  %vb{j} = insertelement <2 x half> %vb{j}x, half %yb{2 * j + 1}, i32 1
""" for j in range(2)) + r"""
  %rt = call {float, float, float, float} @llvm.nvvm.mma.m16n8k8.row.col.tf32(i32 %ta0, i32 %ta1, i32 %ta2, i32 %ta3, i32 %tb0, i32 %tb1, float 0.0, float 0.0, float 0.0, float 0.0)
  %rh = call {float, float, float, float} @llvm.nvvm.mma.m16n8k16.row.col.f32.f32(<2 x half> %va0, <2 x half> %va1, <2 x half> %va2, <2 x half> %va3, <2 x half> %vb0, <2 x half> %vb1, float 0.0, float 0.0, float 0.0, float 0.0)
""" + "".join(f"""  %et{j} = extractvalue {{float, float, float, float}} %rt, {j}
  %eh{j} = extractvalue {{float, float, float, float}} %rh, {j}
  %io{j} = add i64 %l64, {32 * j}
  %pot{j} = getelementptr float, ptr addrspace(1) %dt, i64 %io{j}
  %poh{j} = getelementptr float, ptr addrspace(1) %dh, i64 %io{j}
  store float %et{j}, ptr addrspace(1) %pot{j}
  store float %eh{j}, ptr addrspace(1) %poh{j}
""" for j in range(4)) + """  ret void
}
"""


def rna_tf32(x):
    """f32 values rounded to tf32 (10 fraction bits), to nearest with ties away from zero."""
    out = []
    for v in np.asarray(x, np.float32).tolist():
        m, e = math.frexp(v)
        q = Fraction(m) * 2 ** 11
        r = math.floor(abs(q) + Fraction(1, 2))
        out.append(math.copysign(r * 2.0 ** (e - 11), v))
    return np.array(out, np.float32)


def test_llvm_tf32_and_f16_fragments():
    """The register forms LLVM gives the tf32 (cvt.rna.tf32.f32 results in .b32 registers) and f16
    mma (<2 x half> packed with mov.b32 {lo, hi}), lane by lane through the ISA layouts."""
    ptx = compile_ir(FRAGMENT_IR)
    forms = instruction_forms(ptx)
    assert {"cvt.rna.tf32.f32", "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"} <= forms
    assert any(re.search(r"mov\.b32\s+%r\d+, \{%rs\d+, %rs\d+\}", line) for line in ptx.splitlines())
    rng = np.random.default_rng(13)
    at = (rng.standard_normal((16, 8)) * 4).astype(np.float32)
    bt = (rng.standard_normal((8, 8)) * 4).astype(np.float32)
    ah = (rng.permutation(256) - 128).reshape(16, 16).astype(np.float16)
    bh = (rng.permutation(128) - 64).reshape(16, 8).astype(np.float16)

    def lanes(mat, layout, count):  # (32 * count) values, element i of lane l at i * 32 + l
        return np.array([[mat[layout(l >> 2, l % 4, i)] for l in range(32)] for i in range(count)]).reshape(-1)

    dt, dh = np.zeros(128, np.float32), np.zeros(128, np.float32)
    got_t, got_h = launch(ptx, "frag", [dt, dh, lanes(at, a_k8_tf32, 4), lanes(bt, b_k8_tf32, 2),
                                        lanes(ah, a_k16_half, 8), lanes(bh, b_k16_half, 4)], 1, 32)[:2]
    D_t = unpack_c(got_t.reshape(4, 32).T.copy())[0]
    D_h = unpack_c(got_h.reshape(4, 32).T.copy())[0]
    ra, rb = rna_tf32(at.reshape(-1)).reshape(16, 8), rna_tf32(bt.reshape(-1)).reshape(8, 8)
    want = np.array([[round_to_f32(sum(Fraction(float(ra[m, k])) * Fraction(float(rb[k, n])) for k in range(8)))
                      for n in range(8)] for m in range(16)], np.float32)
    assert_same_bits(D_t, want, "tf32 mma of rna-rounded operands")
    assert_same_bits(D_h, (ah.astype(np.float64) @ bh).astype(np.float32), "f16 mma")


def test_sum_rounded_once_against_rationals():
    """numerics.sum_rounded_f32 (what mma rounds with) on rows built to defeat float64 sums:
    cancellation, sticky bits far below, near-ties, wide exponent ranges."""
    from accy.emulator.numerics import sum_rounded_f32

    rng = np.random.default_rng(14)
    rows = []
    for trial in range(600):
        n = int(rng.integers(1, 18))
        kind = trial % 4
        if kind == 0:
            row = rng.integers(-255, 256, n) * 2.0 ** rng.integers(-140, 120, n)
        elif kind == 1:
            row = rng.integers(-2 ** 20, 2 ** 20, n) * 2.0 ** rng.integers(-60, 60, n)
            row = np.concatenate([row, -row[:n // 2], [2.0 ** -150] * int(rng.integers(0, 2))])
        elif kind == 2:
            base = float(np.float32(rng.standard_normal()))
            ulp = float(np.spacing(np.float32(abs(base))))
            row = np.array([base, ulp / 2, float(rng.choice([-1, 1])) * ulp * 2.0 ** -int(rng.integers(20, 80))])
        else:
            row = (rng.standard_normal(n) * 2.0 ** rng.integers(-30, 30, n)).astype(np.float32).astype(np.float64)
        rows.append(np.pad(row, (0, 30 - len(row))))
    rows = np.array(rows)
    got = sum_rounded_f32(rows)
    want = np.array([round_to_f32(sum((Fraction(float(x)) for x in row), Fraction(0))) for row in rows])
    assert_same_bits(got, want, "exact sums rounded once")
