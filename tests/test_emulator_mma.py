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
        want[k] = np.float32(math.copysign(float(r), v) if float(r) < 2.0 ** 128 else math.copysign(math.inf, v)).view(np.uint32)
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
             "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", "cp.async.bulk.shared::cluster.global.b64",
             "ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8"]
    assert unsupported(have + lacks) == set(lacks)
