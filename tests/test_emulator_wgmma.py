"""The PTX emulator's warpgroup MMA (sm_90a): ``wgmma.mma_async`` in its forms, with
operands in shared memory (every swizzle mode, K-major and MN-major) or A in registers,
``wgmma.fence``/``commit_group``/``wait_group``, the checks on in-flight wgmmas, and
Triton's own sm_90a PTX as the outside check.

The shared-memory placement, the descriptors and the register fragments are written here
from the PTX ISA (9.7.15.5.1, "Register Fragments and Shared Memory Matrix Layouts", and the
matrix descriptor format), independently of ``accy/emulator/wgmma.py``: each test places its
matrices in shared memory by its own formulas, runs the wgmma on the emulator, and checks
every lane's raw D registers against NumPy's float64 product laid out by the ISA's fragment
formulas.  Every kernel is assembled by ptxas for sm_90a first."""

from __future__ import annotations

import attrs
import numpy as np
import pytest

from accy.emulator import PtxError, RaceError
from accy.emulator.wgmma import FP8_FRACTION_BITS

from emulator_support import NEEDS_PTXAS, assembled, launch, ptx_kernel

pytestmark = NEEDS_PTXAS

ARCH = "sm_90a"
THREADS = 128
BYTES = {"f16": 2, "bf16": 2, "tf32": 4, "e4m3": 1, "e5m2": 1, "s8": 1, "u8": 1}
MODES = {0: 0, 128: 1, 64: 2, 32: 3}  # swizzle width in bytes (0: none) -> descriptor mode


# -- the ISA's formulas, written here ---------------------------------------------------------------------


def element_offset(r, k, e, major, width, lbo, sbo):
    """Byte offset of element (r, k) (r along M or N) in the canonical layout: 16-byte chunks,
    8 of them (rows of K, or of MN) a core matrix / swizzle atom."""
    if major == "K":
        if width == 0:  # core matrices of 8 rows x 16 bytes: SBO between row octets, LBO between K halves
            return (r // 8) * sbo + (r % 8) * 16 + (k * e // 16) * lbo + (k * e) % 16
        return (r // 8) * sbo + (r % 8) * width + k * e  # rows of `width` bytes; SBO between atoms
    if width == 0:  # 8 K-rows x 16 bytes of MN: SBO between 16-byte MN pieces, LBO between K octets
        return (r * e // 16) * sbo + (r * e) % 16 + (k // 8) * lbo + (k % 8) * 16
    return (r * e // width) * lbo + (r * e) % width + (k // 8) * sbo + (k % 8) * width


def swizzle(address, width, base_offset=0):
    """The 16-byte chunk of a 128-byte line XOR the line's number (from the pattern's start)."""
    if width == 0:
        return address
    line = ((address >> 7) - base_offset) % (width // 16)
    return address ^ (line << 4)


def descriptor(start, lbo, sbo, width, base_offset=0):
    return ((start >> 4) & 0x3FFF) | ((lbo >> 4) & 0x3FFF) << 16 | ((sbo >> 4) & 0x3FFF) << 32 \
        | (base_offset & 7) << 49 | MODES[width] << 62


def d_position(tid, i):
    """Row and column of element i of thread tid's D fragment."""
    w, lane = divmod(tid, 32)
    g, t = lane >> 2, lane % 4
    return 16 * w + g + 8 * ((i >> 1) & 1), 8 * (i >> 2) + 2 * t + (i & 1)


def a_position(tid, i, family):
    """Row and column of element i of thread tid's A fragment (register form)."""
    w, lane = divmod(tid, 32)
    g, t = lane >> 2, lane % 4
    if family == "half":
        r, c = g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)
    elif family == "tf32":
        r, c = g + 8 * (i & 1), t + 4 * (i >> 1)
    else:
        r, c = g + 8 * ((i >> 2) & 1), 4 * t + (i & 3) + 16 * (i >> 3)
    return 16 * w + r, c


def family_of(t):
    return {"f16": "half", "bf16": "half", "tf32": "tf32"}.get(t, "byte")


def fp8_value(code, t):
    s = -1.0 if code & 0x80 else 1.0
    eb, mb = (4, 3) if t == "e4m3" else (5, 2)
    e, m = (code >> mb) & ((1 << eb) - 1), code & ((1 << mb) - 1)
    bias = (1 << (eb - 1)) - 1
    return s * (m / (1 << mb) * 2.0 ** (1 - bias) if e == 0 else (1 + m / (1 << mb)) * 2.0 ** (e - bias))


def encode(values, t):
    """Element bit patterns (uint32) of exactly representable values."""
    v = np.asarray(values, np.float64)
    if t == "f16":
        return v.astype(np.float16).view(np.uint16).astype(np.uint32)
    if t == "bf16":
        return v.astype(np.float32).view(np.uint32) >> 16
    if t == "tf32":
        return v.astype(np.float32).view(np.uint32)
    if t in ("s8", "u8"):
        return v.astype(np.int64).astype(np.uint8).astype(np.uint32)
    table = {fp8_value(c, t): c for c in range(256) if c not in (0x80,)}
    return np.vectorize(lambda x: table[float(x)])(v).astype(np.uint32)


def image(chunks):
    """A shared-memory image (bytes) from (address, bits, width) triples."""
    size = max(a + w for a, _, w in chunks)
    img = np.zeros(-(-size // 1024) * 1024, np.uint8)
    for a, bits, w in chunks:
        img[a:a + w] = np.frombuffer(int(bits).to_bytes(w, "little"), np.uint8)
    return img


@attrs.frozen
class Layout:
    major: str = "K"  # "K" or "MN"
    width: int = 128  # swizzle bytes, 0 for none
    lbo: int = 0
    sbo: int = 1024
    start: int = 0  # the operand's offset in shared memory
    base_offset: int = 0

    def place(self, M, e, t):
        """(address, bits, e) of every element of M (rows x K)."""
        bits = encode(M, t)
        return [(swizzle(self.start + element_offset(r, k, e, self.major, self.width, self.lbo, self.sbo),
                         self.width, self.base_offset), int(bits[r, k]), e)
                for r in range(M.shape[0]) for k in range(M.shape[1])]

    def desc(self):
        return descriptor(self.start, self.lbo, self.sbo, self.width, self.base_offset)


# -- kernels ------------------------------------------------------------------------------------------------


@attrs.frozen
class Wg:
    """One wgmma.mma_async form and how a test drives it."""

    n: int
    atype: str
    dtype: str = "f32"
    btype: str = ""
    a_regs: bool = False
    sat: bool = False

    @property
    def b(self):
        return self.btype or self.atype

    @property
    def k(self):
        return 32 // BYTES[self.atype]

    @property
    def d_regs(self):
        return self.n // 4 if self.dtype == "f16" else self.n // 2

    @property
    def ptx(self):
        sat = ".satfinite" if self.sat else ""
        return f"wgmma.mma_async.sync.aligned.m64n{self.n}k{self.k}{sat}.{self.dtype}.{self.atype}.{self.b}"

    def args(self, scale_d="1", scale_a=1, scale_b=1, trans_a=0, trans_b=0):
        if self.atype in ("s8", "u8"):
            return f"{scale_d}"
        tail = f"{scale_d}, {scale_a}, {scale_b}"
        if self.atype in ("f16", "bf16"):
            tail += f", {trans_b}" if self.a_regs else f", {trans_a}, {trans_b}"
        return tail


def wgmma_kernel(form: Wg, smem_bytes: int, mmas: list[str], after: str = "", waits="wgmma.wait_group.sync.aligned 0;",
                 stores=None, regs="") -> str:
    """128 threads copy ``smem`` (global) into shared memory, load their C (and A) registers,
    run ``mmas`` (lines using {d}, {a}, %rd20 = desc A, %rd21 = desc B, with shared memory's
    address added), then store D raw to out[tid * regs + j]."""
    dr, ar = form.d_regs, 4  # A in registers: four words for every type
    dt = "f32" if form.dtype == "f32" else "b32"
    d = ", ".join(f"%d{j}" for j in range(dr))
    a = ", ".join(f"%a{j}" for j in range(ar))
    body = f"""
    mov.u32 %r1, %tid.x;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [src];
    ld.param.u64 %rd3, [cin];
    ld.param.u64 %rd4, [ain];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    cvta.to.global.u64 %rd3, %rd3;
    cvta.to.global.u64 %rd4, %rd4;
    mov.u32 %r2, smem;
    mov.u32 %r3, %r1;
    mov.u32 %r8, %ntid.x;
COPY:
    setp.ge.u32 %p1, %r3, {smem_bytes // 4};
    @%p1 bra COPIED;
    mul.wide.u32 %rd5, %r3, 4;
    add.s64 %rd6, %rd2, %rd5;
    ld.global.b32 %r4, [%rd6];
    shl.b32 %r5, %r3, 2;
    add.u32 %r5, %r5, %r2;
    st.shared.b32 [%r5], %r4;
    add.u32 %r3, %r3, %r8;
    bra COPY;
COPIED:
    bar.sync 0;
    fence.proxy.async.shared::cta;
    mul.wide.u32 %rd7, %r1, {4 * dr};
    add.s64 %rd8, %rd3, %rd7;
""" + "\n".join(f"ld.global.{dt} %d{j}, [%rd8+{4 * j}];" for j in range(dr)) + f"""
    mul.wide.u32 %rd9, %r1, {4 * ar};
    add.s64 %rd10, %rd4, %rd9;
""" + "\n".join(f"ld.global.b32 %a{j}, [%rd10+{4 * j}];" for j in range(ar)) + """
    shr.u32 %r6, %r2, 4;
    cvt.u64.u32 %rd11, %r6;
    ld.param.u64 %rd20, [desca];
    ld.param.u64 %rd21, [descb];
    add.s64 %rd20, %rd20, %rd11;
    add.s64 %rd21, %rd21, %rd11;
    wgmma.fence.sync.aligned;
""" + "\n".join(m.format(d=d, a=a) for m in mmas) + f"""
    wgmma.commit_group.sync.aligned;
    {after}
    {waits}
    mul.wide.u32 %rd12, %r1, {4 * dr};
    add.s64 %rd13, %rd1, %rd12;
""" + "\n".join(stores or [f"st.global.b32 [%rd13+{4 * j}], %d{j};" for j in range(dr)]) + "\n    ret;"
    regs = f"  .reg .{dt} %d<{dr}>;\n  .reg .b32 %a<{ar}>;\n" + regs
    params = [("out", "u64"), ("src", "u64"), ("cin", "u64"), ("ain", "u64"), ("desca", "u64"), ("descb", "u64")]
    extra = f".shared .align 1024 .b8 smem[{smem_bytes}];\n"
    ptx = ptx_kernel("wg", params, body, regs=regs, arch=ARCH, extra=extra)
    return assembled(ptx.replace(".version 8.3", ".version 8.4"), ARCH)  # 8.4: wgmma with mixed integer types


# -- operands and references -------------------------------------------------------------------------------


def operands(form: Wg, rng, small=True):
    """A (64 x K), B (N x K, rows = columns of the product), C (64 x N) of exactly representable
    values whose float64 products and sums are exact."""
    lo = 0 if form.atype == "u8" else -4
    A = rng.integers(lo, 5, (64, form.k)).astype(np.float64)
    B = rng.integers(0 if form.b == "u8" else -4, 5, (form.n, form.k)).astype(np.float64)
    if form.dtype == "s32":
        C = rng.integers(-1000, 1000, (64, form.n)).astype(np.float64)
    elif form.dtype == "f16":
        C = rng.integers(-64, 64, (64, form.n)).astype(np.float64)
    else:  # distinct: every output's C names its position
        C = (np.arange(64)[:, None] * 512 + np.arange(form.n)[None, :]).astype(np.float64)
    return A, B, C


def d_words(form: Wg, D):
    """The per-thread D registers (THREADS, regs) uint32 of a 64 x N result, by the ISA's formulas."""
    out = np.zeros((THREADS, form.d_regs), np.uint32)
    for tid in range(THREADS):
        for j in range(form.d_regs):
            if form.dtype == "f16":
                lo, hi = (D[d_position(tid, 2 * j + h)] for h in (0, 1))
                out[tid, j] = int(np.float16(lo).view(np.uint16)) | int(np.float16(hi).view(np.uint16)) << 16
            elif form.dtype == "s32":
                out[tid, j] = np.int64(D[d_position(tid, j)]).astype(np.int32).view(np.uint32)
            else:
                out[tid, j] = np.float32(D[d_position(tid, j)]).view(np.uint32)
    return out


def a_words(form: Wg, A):
    fam = family_of(form.atype)
    per = {"half": 2, "tf32": 1, "byte": 4}[fam]
    bits = encode(A, form.atype)
    out = np.zeros((THREADS, 4), np.uint32)
    for tid in range(THREADS):
        for i in range(4 * per):
            out[tid, i // per] |= np.uint32(int(bits[a_position(tid, i, fam)]) << (32 // per * (i % per)))
    return out


def run(form: Wg, A, B, C, la: Layout, lb: Layout, mmas, **kw):
    e = BYTES[form.atype]
    chunks = lb.place(B, e, form.b) + ([] if form.a_regs else la.place(A, e, form.atype))
    img = image(chunks)
    cw = d_words(form, C)
    ptx = wgmma_kernel(form, len(img), mmas, **kw)
    out = np.zeros((THREADS, form.d_regs), np.uint32)
    aw = a_words(form, A) if form.a_regs else np.zeros((THREADS, 4), np.uint32)
    got = launch(ptx, "wg", [out, img, cw, aw], 1, THREADS, extra=[la.desc(), lb.desc()])[0]
    return got


def mma_line(form: Wg, **kw):
    a = "{{{a}}}" if form.a_regs else "%rd20"
    return form.ptx + " {{{d}}}, " + a + ", %rd21, " + form.args(**kw) + ";"


def check(form: Wg, la: Layout, lb: Layout, rng, scale_d=1, scale_a=1, scale_b=1, trans=(0, 0)):
    A, B, C = operands(form, rng)
    line = mma_line(form, scale_d=str(scale_d), scale_a=scale_a, scale_b=scale_b, trans_a=trans[0], trans_b=trans[1])
    got = run(form, A, B, C, la, lb, [line])
    want = (scale_a * A) @ (scale_b * B).T + (C if scale_d else 0)
    if form.atype in ("e4m3", "e5m2") and form.dtype == "f32":
        want = fp8_accumulated(want)
    np.testing.assert_array_equal(got, d_words(form, want))


def fp8_accumulated(x):
    """The emulator's fp8 model on exact f32 values: truncated toward zero to FP8_FRACTION_BITS bits."""
    unit = 2.0 ** (np.floor(np.log2(np.where(x == 0, 1, np.abs(x)))) - FP8_FRACTION_BITS)
    return np.sign(x) * np.floor(np.abs(x) / unit) * unit


# -- per form ----------------------------------------------------------------------------------------------

K_LAYOUTS = {  # (A, B) per swizzle width, K-major, with strides other than the densest where they are free
    0: (Layout("K", 0, lbo=128, sbo=256), Layout("K", 0, lbo=2048, sbo=128, start=8192)),
    32: (Layout("K", 32, sbo=256), Layout("K", 32, sbo=512, start=8192)),
    64: (Layout("K", 64, sbo=512), Layout("K", 64, sbo=1024, start=8192)),
    128: (Layout("K", 128, sbo=1024), Layout("K", 128, sbo=2048, start=16384)),
}


def mn_layouts(width, e, n):
    """MN-major A (64 rows) and B (n rows) for swizzle ``width``: atoms of `width` bytes of MN
    by 8 K-rows, K octets SBO apart, MN atoms LBO apart (no swizzle: 16-byte pieces SBO apart,
    K octets LBO apart)."""
    k_octets = 32 // e // 8
    if width == 0:
        return (Layout("MN", 0, lbo=128, sbo=128 * k_octets), Layout("MN", 0, lbo=128 * (n * e // 16), sbo=128,
                                                                     start=16384))
    atom = 8 * width
    return (Layout("MN", width, lbo=atom * k_octets, sbo=atom),
            Layout("MN", width, lbo=atom * k_octets, sbo=atom, start=16384))


@pytest.mark.parametrize("width", [0, 32, 64, 128])
@pytest.mark.parametrize("atype", ["f16", "bf16"])
def test_k_major_every_swizzle(atype, width):
    form = Wg(64, atype)
    check(form, *K_LAYOUTS[width], np.random.default_rng(width))


@pytest.mark.parametrize("width", [0, 32, 64, 128])
def test_mn_major_every_swizzle(width):
    form = Wg(64, "bf16")
    la, lb = mn_layouts(width, 2, 64)
    check(form, la, lb, np.random.default_rng(width), trans=(1, 1))


@pytest.mark.parametrize("n", [8, 128, 256])
def test_n(n):
    form = Wg(n, "f16")
    la, lb = K_LAYOUTS[128][0], Layout("K", 128, sbo=1024, start=16384)
    check(form, la, lb, np.random.default_rng(n))


def test_f16_accumulator():
    form = Wg(64, "f16", dtype="f16")
    check(form, *K_LAYOUTS[64], np.random.default_rng(1))


@pytest.mark.parametrize("trans", [(0, 1), (1, 0)])
def test_mixed_majors(trans):
    form = Wg(64, "f16")
    la = mn_layouts(128, 2, 64)[0] if trans[0] else K_LAYOUTS[128][0]
    lb = mn_layouts(128, 2, 64)[1] if trans[1] else K_LAYOUTS[128][1]
    check(form, la, lb, np.random.default_rng(5), trans=trans)


@pytest.mark.parametrize("atype,trans_b", [("f16", 0), ("bf16", 1), ("tf32", 0), ("e4m3", 0), ("s8", 0)])
def test_a_from_registers(atype, trans_b):
    form = Wg(32, atype, dtype="s32" if atype == "s8" else "f32", a_regs=True)
    lb = mn_layouts(32, BYTES[atype], 32)[1] if trans_b else K_LAYOUTS[32][1]
    check(form, K_LAYOUTS[32][0], lb, np.random.default_rng(3), trans=(0, trans_b))


@pytest.mark.parametrize("atype,btype,dtype", [("tf32", "", "f32"), ("e4m3", "e5m2", "f32"), ("e5m2", "e4m3", "f16"),
                                               ("e4m3", "", "f16"), ("s8", "u8", "s32"), ("u8", "u8", "s32")])
def test_other_types(atype, btype, dtype):
    form = Wg(48, atype, dtype=dtype, btype=btype)
    check(form, *K_LAYOUTS[128], np.random.default_rng(7))


def test_scale_d_zero_and_negated_operands():
    form = Wg(16, "bf16")
    check(form, *K_LAYOUTS[0], np.random.default_rng(8), scale_d=0, scale_a=-1)
    check(form, *K_LAYOUTS[0], np.random.default_rng(9), scale_b=-1)


def test_base_offset_counts_swizzle_lines_from_the_pattern_start():
    # the B pattern starts 512 bytes into a 1024-byte 128B-swizzle repeat: base offset (512 >> 7) & 7 = 4
    form = Wg(16, "f16")
    lb = Layout("K", 128, sbo=1024, start=16384 + 512, base_offset=4)
    check(form, K_LAYOUTS[128][0], lb, np.random.default_rng(10))


def test_start_address_inside_a_swizzle_atom():
    # the second K step of a 128-byte row: start + 32 bytes, swizzled by address as the hardware does
    form = Wg(16, "f16")
    rng = np.random.default_rng(11)
    A, B, C = operands(form, rng)
    A2 = np.concatenate([np.zeros_like(A), A], axis=1)  # K 0..31: the wgmma reads columns 16..31
    B2 = np.concatenate([np.zeros_like(B), B], axis=1)
    la, lb = Layout("K", 128, sbo=1024), Layout("K", 128, sbo=1024, start=16384)
    chunks = la.place(A2, 2, "f16") + lb.place(B2, 2, "f16")
    img = image(chunks)
    ptx = wgmma_kernel(form, len(img), [mma_line(form)])
    out = np.zeros((THREADS, form.d_regs), np.uint32)
    got = launch(ptx, "wg", [out, img, d_words(form, C), np.zeros((THREADS, 4), np.uint32)], 1, THREADS,
                 extra=[la.desc() + 2, lb.desc() + 2])[0]
    np.testing.assert_array_equal(got, d_words(form, A @ B.T + C))


def test_satfinite_clamps_and_plain_wraps():
    form = Wg(8, "s8", dtype="s32")
    A = np.full((64, 32), 4.0)
    B = np.full((8, 32), 4.0)
    C = np.full((64, 8), 2.0 ** 31 - 100)
    la, lb = K_LAYOUTS[0]
    wrap = run(form, A, B, C, la, lb, [mma_line(form)])
    np.testing.assert_array_equal(wrap, d_words(form, C + 512 - 2 ** 32))
    sat = Wg(8, "s8", dtype="s32", sat=True)
    np.testing.assert_array_equal(run(sat, A, B, C, la, lb, [mma_line(sat)]), d_words(form, np.full((64, 8), 2.0 ** 31 - 1)))


def test_fp8_accumulation_keeps_the_modelled_fraction_bits():
    form = Wg(8, "e4m3")
    A = np.zeros((64, 32))
    A[:, 0] = 1.0
    B = np.zeros((8, 32))
    B[:, 0] = 0.5
    C = np.full((64, 8), 16384.0 + 1.0)  # 15 significant bits: exact sum 16385.5
    got = run(form, A, B, C, *K_LAYOUTS[0], [mma_line(form)])
    exact = 16385.5
    ulp = 2.0 ** (np.floor(np.log2(exact)) - FP8_FRACTION_BITS)
    np.testing.assert_array_equal(got, d_words(form, np.full((64, 8), np.floor(exact / ulp) * ulp)))
    # bf16 keeps the whole f32 sum
    form16 = Wg(8, "bf16")
    A16, B16 = A[:, :16], B[:, :16]
    got16 = run(form16, A16, B16, C, *K_LAYOUTS[0], [mma_line(form16)])
    np.testing.assert_array_equal(got16, d_words(form16, np.full((64, 8), exact)))


def test_two_groups_and_wait_group_1():
    # wgmma 1 into %d, wgmma 2 (A negated) into %e, each its own group: after wait_group 1 the
    # first is retired and stored, after wait_group 0 the second
    form = Wg(8, "f16")
    A, B, C = operands(form, np.random.default_rng(12))
    la, lb = K_LAYOUTS[0]
    mmas = [mma_line(form, scale_d="0"), "wgmma.commit_group.sync.aligned;",
            form.ptx + " {{%e0, %e1, %e2, %e3}}, %rd20, %rd21, 0, -1, 1, 0, 0;"]
    stores = [f"st.global.b32 [%rd13+{4 * j}], %d{j};" for j in range(4)] + ["wgmma.wait_group.sync.aligned 0;"] \
        + [f"st.global.b32 [%rd10+{4 * j}], %e{j};" for j in range(4)]
    img = image(la.place(A, 2, "f16") + lb.place(B, 2, "f16"))
    ptx = wgmma_kernel(form, len(img), mmas, waits="wgmma.wait_group.sync.aligned 1;", stores=stores,
                       regs="  .reg .f32 %e<4>;\n")
    got = launch(ptx, "wg", [np.zeros((THREADS, 4), np.uint32), img, d_words(form, C), np.zeros((THREADS, 4), np.uint32)],
                 1, THREADS, extra=[la.desc(), lb.desc()])
    np.testing.assert_array_equal(got[0], d_words(form, A @ B.T))
    np.testing.assert_array_equal(got[3], d_words(form, -A @ B.T))


# -- Triton's sm_90a PTX: the outside check -----------------------------------------------------------------


def _triton(name, constants, warps, stages):
    pytest.importorskip("triton")
    from bench.triton_kernels import compile_for

    compiled = compile_for(name, constants, warps, stages, 90)
    return compiled.asm["ptx"], compiled.metadata


def _bf16(rng, shape):
    bits = rng.uniform(-1, 1, shape).astype(np.float32).view(np.uint32) >> 16
    return bits.astype(np.uint16), (bits << 16).view(np.float32).astype(np.float64)


def _launch_triton(ptx, meta, arrays, scalars, grid, block):
    from accy.emulator import Device

    dev = Device()
    fn = dev.load_module(ptx).function(meta.name)
    ptrs = []
    for a in arrays:
        ptrs.append(dev.alloc(max(a.nbytes, 8)))
        dev.copy_to_device(ptrs[-1], a)
    values = ptrs + list(scalars)
    values += [0] * (len(fn.param_types) - len(values))  # Triton's scratch pointers: none used
    fn.launch(grid, block, values, shared_bytes=meta.shared)
    out = np.empty_like(arrays[-1])
    dev.copy_from_device(out, ptrs[-1])
    return out


def test_triton_matmul_sm90_ptx():
    """Triton's 128x128x64, 8-warp, 3-stage bf16 matmul (wgmma m64n128k16 with both operands
    from 128B-swizzled shared memory, A K-major, B N-major; cp.async pipeline) against NumPy.
    Bound: each output is K bf16 products (exact in f32) summed with one f32 rounding per
    wgmma (K/16 of them), so |error| <= K/16 * 2**-24 * sum_k |a||b| (a generous 2**-18 here)."""
    ptx, meta = _triton("matmul", dict(BM=128, BN=128, BK=64), 8, 3)
    assert "wgmma.mma_async" in ptx
    rng = np.random.default_rng(0)
    m, n, k = 128, 256, 192
    a, A = _bf16(rng, (m, k))
    b, B = _bf16(rng, (k, n))
    c = np.zeros((m, n), np.float32)
    got = _launch_triton(ptx, meta, [a, b, c], [m, n, k, k, n, n], (1, 2, 1), (256, 1, 1))
    want = A @ B
    bound = 2.0 ** -18 * (np.abs(A) @ np.abs(B))
    assert (np.abs(got - want) <= bound).all()


@pytest.mark.parametrize("head,tiles,warps", [(64, dict(BM=64, BN=64, HEAD=64), 4), (128, dict(BM=128, BN=64, HEAD=128), 8)])
def test_triton_attention_sm90_ptx(head, tiles, warps):
    """Triton's FlashAttention-2 forward (wgmma for Q K^T from shared memory, and for P V with P
    in registers) against NumPy's softmax(q k^T / sqrt(d)) v.  Bound: P is rounded to bf16
    before the second product and the output to bf16 (2**-9 relative each), with |v| <= 1 and
    the weights summing to 1: |error| <= 2**-7."""
    ptx, meta = _triton("attention", tiles, warps, 2)
    rng = np.random.default_rng(1)
    batch, tokens = 1, 128
    (q, Q), (kk, K), (v, V) = (_bf16(rng, (batch, tokens, head)) for _ in range(3))
    o = np.zeros((batch, tokens, head), np.uint16)
    scale = float(np.log2(np.e) / np.sqrt(head))
    strides = [tokens * head, head] * 4
    got = _launch_triton(ptx, meta, [q, kk, v, o], [tokens, scale] + strides, (tokens // tiles["BM"], batch, 1),
                         (warps * 32, 1, 1))
    got = (got.astype(np.uint32) << 16).view(np.float32)
    s = Q @ np.swapaxes(K, 1, 2) / np.sqrt(head)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ V
    assert np.abs(got - want).max() <= 2.0 ** -7


# -- in flight: the checks --------------------------------------------------------------------------------


ONE_STORE = "setp.eq.u32 %p4, %r1, 0;\n    @%p4 st.shared.b32 [%r2], %r1;"  # thread 0 writes A's first bytes


def _race_kernel(after="", waits="wgmma.wait_group.sync.aligned 0;", mmas=None, form=Wg(8, "f16")):
    la, lb = K_LAYOUTS[0]
    A, B, C = operands(form, np.random.default_rng(13))
    img = image(la.place(A, 2, "f16") + lb.place(B, 2, "f16"))
    ptx = wgmma_kernel(form, len(img), mmas or [mma_line(form)], after=after, waits=waits)
    return ptx, [np.zeros((THREADS, form.d_regs), np.uint32), img, d_words(form, C), np.zeros((THREADS, 4), np.uint32)], \
        [la.desc(), lb.desc()]


def _run_race(threads=THREADS, **kw):
    ptx, arrays, descs = _race_kernel(**kw)
    arrays = [np.zeros((threads, a.shape[1]), a.dtype) if a.shape[0] == THREADS else a for a in arrays]
    return launch(ptx, "wg", arrays, 1, threads, extra=descs)


def test_a_store_into_an_operand_in_flight_is_a_race_naming_both():
    with pytest.raises(RaceError) as e:
        _run_race(after=ONE_STORE)  # A's first bytes, before the wait
    text = str(e.value)
    assert "wgmma.mma_async" in text and "@%p4 st.shared.b32 [%r2], %r1" in text and "wait_group" in text
    assert e.value.first.line != e.value.second.line


def test_the_same_store_after_the_wait_is_fine():
    _run_race(waits="wgmma.wait_group.sync.aligned 0;\n" + ONE_STORE)


def test_another_warpgroups_store_after_a_barrier_but_before_the_wait_races():
    # warpgroup 0 issues, a barrier, warpgroup 1 writes A, then warpgroup 0 waits: nothing orders
    # the write after the wgmma's completion (the reads last until the wait)
    mmas = ["setp.lt.u32 %p3, %r1, 128;", "@!%p3 bra SKIP;", mma_line(Wg(8, "f16")), "SKIP:"]
    after = "bar.sync 0;\n    setp.eq.u32 %p2, %r1, 128;\n    @%p2 st.shared.b32 [%r2], %r1;"
    for schedule in ("lockstep", "reverse"):
        with pytest.raises(RaceError) as e:
            ptx, arrays, descs = _race_kernel(after=after, mmas=mmas)
            arrays = [np.zeros((256, a.shape[1]), a.dtype) if a.shape[0] == THREADS else a for a in arrays]
            launch(ptx, "wg", arrays, 1, 256, extra=descs, schedule=schedule)
        assert "wgmma.mma_async" in str(e.value) and "st.shared.b32" in str(e.value)


def test_reading_the_accumulator_before_the_wait_is_an_error():
    with pytest.raises(PtxError, match="accumulator of the wgmma.mma_async at PTX line"):
        _run_race(after="mov.b32 %r7, %d0;")
    _run_race(waits="wgmma.wait_group.sync.aligned 0;\n    mov.b32 %r7, %d0;")


def test_a_partial_warpgroup_is_an_error_naming_the_instruction():
    for schedule in ("lockstep", "reverse"):
        with pytest.raises(PtxError, match="wgmma.fence.*warpgroup|warpgroup.*wgmma.fence"):
            ptx, arrays, descs = _race_kernel()
            arrays = [np.zeros((96, a.shape[1]), a.dtype) if a.shape[0] == THREADS else a for a in arrays]
            launch(ptx, "wg", arrays, 1, 96, extra=descs, schedule=schedule)


def test_a_guard_that_differs_in_the_warpgroup_is_an_error():
    form = Wg(8, "f16")
    mmas = ["setp.lt.u32 %p3, %r1, 64;", "@%p3 " + mma_line(form)]
    with pytest.raises(PtxError, match="guard must be the same for the 128 threads"):
        _run_race(mmas=mmas)


def test_profile_counts_a_wgmma_once_per_warpgroup_against_the_wgmma_peak():
    from accy.emulator.profile import GPUS, Pipe, classify

    cost = classify("wgmma", ("mma_async", "sync", "aligned", "m64n128k16", "f32", "bf16", "bf16"))
    assert cost.pipe is Pipe.WGMMA_F16 and 4 * cost.warp_flops == 2 * 64 * 128 * 16
    fp8 = classify("wgmma", ("mma_async", "sync", "aligned", "m64n256k32", "f32", "e4m3", "e5m2"))
    assert fp8.pipe is Pipe.WGMMA_FP8 and 4 * fp8.warp_flops == 2 * 64 * 256 * 32
    h100 = GPUS["h100"]
    assert h100.peak(Pipe.WGMMA_F16) == 989.4e12 and h100.peak(Pipe.WGMMA_TF32) == 494.7e12
    assert h100.peak(Pipe.WGMMA_FP8) == h100.peak(Pipe.WGMMA_INT8) == 1978.9e12
    assert h100.peak(Pipe.TENSOR_F16) < h100.peak(Pipe.WGMMA_F16)  # mma.sync stays below
    assert classify("wgmma", ("wait_group", "sync", "aligned")).warp_flops == 0
