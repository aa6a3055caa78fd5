"""The PTX emulator's Hopper asynchronous copies: mbarrier, TMA tensor loads and stores, bulk
copies and groups, tensormap.replace, the asynchronous proxy's race checks, deadlocks and misuse.

Every kernel is hand-written PTX, assembled by ptxas for sm_90a first, run on the emulator and
checked against NumPy.  The box placement is computed here from the documentation (the CUDA
programming guide's TMA swizzle: the 16-byte chunk index within each swizzle span XOR the
128-byte row number modulo span/16), independently of accy/emulator/tma.py."""

from __future__ import annotations

import numpy as np
import pytest

from accy.emulator import Device, PtxError, RaceError
from accy.emulator.tensor_map import ElementType, OobFill, Swizzle, TensorMapFields, encode

from emulator_support import NEEDS_PTXAS, assembled

pytestmark = NEEDS_PTXAS

ARCH = "sm_90a"
SCHEDULES = ("lockstep", "reverse", "random")
HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n"
NP = {ElementType.FLOAT32: np.float32, ElementType.FLOAT16: np.uint16, ElementType.BFLOAT16: np.uint16,
      ElementType.UINT8: np.uint8}


def ptx_of(text: str) -> str:
    return assembled(HEAD + text, ARCH)


# -- the documented placement, written here ----------------------------------------------------------------


def swizzle_place(offset: int, span: int) -> int:
    """Where the byte at ``offset`` of a dense box lands: its 16-byte chunk within the span-byte
    row is XORed with the 128-byte row's number modulo span / 16."""
    if span == 0:
        return offset
    return offset ^ (((offset >> 7) % (span // 16)) << 4)


def expected_box(tensor: np.ndarray, f: TensorMapFields, coords) -> np.ndarray:
    """The shared-memory bytes of the box, from the tensor (NumPy, outermost first, with the
    map's dims as its trailing extent)."""
    e = f.element_type.itemsize
    counts = [-(-b // s) for b, s in zip(f.box, f.element_strides)]
    dense = np.zeros(int(np.prod(counts)) * e, np.uint8)
    fill = None
    if f.oob_fill is OobFill.NAN:
        fill = np.array([np.nan], np.float32).view(np.uint8)
    pos = 0
    for idx in np.ndindex(*counts[::-1]):
        g = [c + i * s for c, i, s in zip(coords, idx[::-1], f.element_strides)]
        if all(0 <= x < n for x, n in zip(g, f.dims)):
            dense[pos:pos + e] = np.ascontiguousarray(tensor[tuple(g[::-1])]).view(np.uint8).reshape(-1)
        elif fill is not None:
            dense[pos:pos + e] = np.frombuffer(np.array(0x7FFFFFFF, np.uint32).tobytes()[:e], np.uint8)
        pos += e
    out = np.zeros_like(dense)
    span = f.swizzle.span
    for o in range(0, len(dense), 16):
        p = swizzle_place(o, span)
        out[p:p + 16] = dense[o:o + 16]
    return out


def tensor_data(etype, shape):
    """Distinct elements (outermost first)."""
    n = int(np.prod(shape))
    if etype is ElementType.FLOAT32:
        return (np.arange(n, dtype=np.float32) + 0.5).reshape(shape)
    if etype is ElementType.UINT8:
        assert n <= 256
        return np.arange(n, dtype=np.uint8).reshape(shape)
    return (np.arange(n, dtype=np.uint16) + 1).reshape(shape)


# -- kernels -----------------------------------------------------------------------------------------------


def load_kernel(rank: int, nbytes: int, wait: bool = True) -> str:
    """Thread 0 loads the box at (c0 .. c<rank-1>) into ``buf``; every thread waits, then the block
    copies buf's words to ``out``."""
    coords = ", ".join(f"%r{2 + d}" for d in range(rank))
    params = "".join(f", .param .u32 c{d}" for d in range(rank))
    loads = "".join(f"    ld.param.u32 %r{2 + d}, [c{d}];\n" for d in range(rank))
    waiting = ("WAIT:\n    mbarrier.try_wait.parity.shared::cta.b64 %p2, [bar], 0;\n    @!%p2 bra WAIT;\n"
               if wait else "")
    return ptx_of(f""".visible .entry tload(.param .align 64 .b8 tmap[128], .param .u64 out{params})
{{
    .reg .b64 %rd<12>;
    .reg .b32 %r<24>;
    .reg .pred %p<4>;
    .shared .align 1024 .b8 buf[{max(nbytes, 16)}];
    .shared .align 8 .b64 bar;
    mov.u32 %r1, %tid.x;
    setp.eq.u32 %p1, %r1, 0;
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    fence.mbarrier_init.release.cluster;
    bar.sync 0;
    @!%p1 bra ISSUED;
    mov.b64 %rd1, tmap;
    cvta.param.u64 %rd2, %rd1;
{loads}    mbarrier.arrive.expect_tx.shared::cta.b64 %rd3, [bar], {nbytes};
    cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [buf], [%rd2, {{{coords}}}], [bar];
ISSUED:
{waiting}    ld.param.u64 %rd4, [out];
    mov.u32 %r10, %r1;
LOOP:
    setp.ge.u32 %p3, %r10, {nbytes // 4};
    @%p3 bra DONE;
    shl.b32 %r11, %r10, 2;
    mov.u32 %r12, buf;
    add.u32 %r12, %r12, %r11;
    ld.shared.u32 %r13, [%r12];
    mul.wide.u32 %rd5, %r10, 4;
    add.u64 %rd6, %rd4, %rd5;
    st.global.u32 [%rd6], %r13;
    add.u32 %r10, %r10, 128;
    bra LOOP;
DONE:
    ret;
}}
""")


def map_arg(f: TensorMapFields):
    return np.frombuffer(encode(f), np.uint8)


def run_load(tensor, f, coords, schedule="lockstep", wait=True):
    e = f.element_type.itemsize
    counts = [-(-b // s) for b, s in zip(f.box, f.element_strides)]
    nbytes = int(np.prod(counts)) * e
    dev = Device()
    g = dev.alloc(tensor.nbytes)
    dev.copy_to_device(g, tensor)
    f = TensorMapFields(f.element_type, int(g), f.dims, f.strides, f.box, f.element_strides,
                        swizzle=f.swizzle, oob_fill=f.oob_fill)
    out = dev.alloc(nbytes)
    fn = dev.load_module(load_kernel(len(f.dims), nbytes, wait)).function("tload")
    fn.launch((1, 1, 1), (128, 1, 1), [map_arg(f), out, *[np.int32(c) for c in coords]], schedule=schedule)
    got = np.zeros(nbytes, np.uint8)
    dev.copy_from_device(got, out)
    return got, f


def fields(etype, dims, box, strides=None, es=None, swizzle=Swizzle.NONE, fill=OobFill.ZEROS):
    e = etype.itemsize
    if strides is None:
        strides, s = [], e
        for d in dims[:-1]:
            s *= d
            strides.append(s)
    return TensorMapFields(etype, 0, tuple(dims), tuple(strides), tuple(box), tuple(es or (1,) * len(dims)),
                           swizzle=swizzle, oob_fill=fill)


F32, F16, BF16, U8 = ElementType.FLOAT32, ElementType.FLOAT16, ElementType.BFLOAT16, ElementType.UINT8

LOADS = {
    "1d-past-the-end": (F32, (100,), (32,), (80,), {}),
    "2d": (F32, (40, 20), (16, 8), (8, 4), {}),
    "2d-right-bottom-edges": (F32, (40, 20), (16, 8), (32, 16), {}),
    "2d-negative-left-top-edges": (F32, (40, 20), (16, 8), (-8, -3), {}),
    "2d-past-every-edge": (F32, (12, 5), (16, 8), (-2, -1), {}),
    "2d-padded-rows": (F32, (20, 10), (8, 4), (12, 7), {"strides": (96,)}),
    "2d-element-strides": (F32, (40, 20), (16, 8), (3, 2), {"es": (2, 3)}),
    "f16-swizzle-32": (F16, (64, 24), (16, 8), (16, 5), {"swizzle": Swizzle.B32}),
    "bf16-swizzle-64": (BF16, (64, 24), (32, 8), (16, 20), {"swizzle": Swizzle.B64}),
    "f16-swizzle-128": (F16, (96, 30), (64, 8), (50, 26), {"swizzle": Swizzle.B128}),
    "f32-swizzle-128-tall": (F32, (32, 40), (32, 16), (0, 30), {"swizzle": Swizzle.B128}),
    "u8": (U8, (16, 16), (16, 8), (0, 12), {}),
    "u8-swizzle-128": (U8, (16, 16), (16, 16), (0, -3), {"swizzle": Swizzle.B128}),
    "3d": (F32, (8, 6, 5), (8, 4, 3), (0, 4, -1), {}),
    "3d-strided-bf16": (BF16, (16, 7, 6), (8, 4, 4), (4, -1, 3), {"es": (1, 2, 1)}),
    "4d": (BF16, (8, 3, 2, 3), (8, 2, 2, 2), (0, 2, -1, 2), {}),
    "5d": (F32, (4, 3, 3, 2, 3), (4, 2, 2, 2, 2), (0, 2, -1, 1, 2), {}),
    "nan-fill": (F32, (12, 6), (8, 4), (8, 4), {"fill": OobFill.NAN}),
}


@pytest.mark.parametrize("case", sorted(LOADS))
def test_tensor_load_box(case):
    etype, dims, box, coords, extra = LOADS[case]
    f = fields(etype, dims, box, **extra)
    e = etype.itemsize
    # the tensor in memory: outermost first, padded where a stride leaves a gap
    padded = [f.strides[0] // e] + list(dims[1:]) if len(dims) == 2 and f.strides[0] != dims[0] * e else list(dims)
    full = tensor_data(etype, tuple(padded[::-1]) if padded != list(dims) else tuple(dims[::-1]))
    view = full[..., :dims[0]] if padded != list(dims) else full
    got, f = run_load(full, f, coords)
    np.testing.assert_array_equal(got, expected_box(view, f, coords))


def test_tensor_load_under_every_schedule():
    f = fields(F16, (96, 30), (64, 8), swizzle=Swizzle.B128)
    data = tensor_data(F16, (30, 96))
    for schedule in SCHEDULES:
        got, g = run_load(data, f, (40, 25), schedule)
        np.testing.assert_array_equal(got, expected_box(data, g, (40, 25)))


# -- a producer/consumer ring ---------------------------------------------------------------------------------

RING = """.visible .entry ring(.param .align 64 .b8 tmap[128], .param .u64 out)
{{
    .reg .b64 %rd<16>;
    .reg .b32 %r<40>;
    .reg .pred %p<8>;
    .reg .f32 %f<8>;
    .shared .align 1024 .b8 buf[{nbytes}];
    .shared .align 8 .b64 full[{stages}];
    .shared .align 8 .b64 empty[{stages}];
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra INITED;
    mov.u32 %r2, 0;
INIT:
    mov.u32 %r3, full;
    mad.lo.u32 %r3, %r2, 8, %r3;
    mbarrier.init.shared::cta.b64 [%r3], 1;
    mov.u32 %r3, empty;
    mad.lo.u32 %r3, %r2, 8, %r3;
    mbarrier.init.shared::cta.b64 [%r3], 32;
    add.u32 %r2, %r2, 1;
    setp.lt.u32 %p2, %r2, {stages};
    @%p2 bra INIT;
INITED:
    fence.mbarrier_init.release.cluster;
    bar.sync 0;
    setp.ge.u32 %p3, %r1, 32;
    @%p3 bra CONSUMER;
    // the producer warp: one elected lane issues every tile
    elect.sync _|%p4, -1;
    @!%p4 bra END;
    mov.b64 %rd1, tmap;
    cvta.param.u64 %rd2, %rd1;
    mov.u32 %r4, 0;
PRODUCE:
    rem.u32 %r5, %r4, {stages};
    div.u32 %r6, %r4, {stages};
    setp.lt.u32 %p5, %r4, {stages};
    @%p5 bra FREE;
    mov.u32 %r7, empty;
    mad.lo.u32 %r7, %r5, 8, %r7;
    add.u32 %r8, %r6, 1;
    and.b32 %r8, %r8, 1;
{empty_wait}FREE:
    mov.u32 %r9, full;
    mad.lo.u32 %r9, %r5, 8, %r9;
    mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r9], 1024;
    mov.u32 %r10, buf;
    mad.lo.u32 %r10, %r5, 1024, %r10;
    mul.lo.u32 %r11, %r4, 8;
    mov.u32 %r12, 0;
    cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r10], [%rd2, {{%r12, %r11}}], [%r9];
    add.u32 %r4, %r4, 1;
    setp.lt.u32 %p6, %r4, {tiles};
    @%p6 bra PRODUCE;
    bra END;
CONSUMER:
    // the consumer warp: lane l sums column l of every tile
    sub.u32 %r20, %r1, 32;
    mov.f32 %f1, 0f00000000;
    mov.u32 %r4, 0;
CONSUME:
    rem.u32 %r5, %r4, {stages};
    div.u32 %r6, %r4, {stages};
    and.b32 %r21, %r6, 1;
    mov.u32 %r9, full;
    mad.lo.u32 %r9, %r5, 8, %r9;
WAITFULL:
    mbarrier.try_wait.parity.shared::cta.b64 %p7, [%r9], %r21;
    @!%p7 bra WAITFULL;
    mov.u32 %r10, buf;
    mad.lo.u32 %r10, %r5, 1024, %r10;
    shl.b32 %r22, %r20, 2;
    add.u32 %r10, %r10, %r22;
    mov.u32 %r23, 0;
ROWS:
    ld.shared.f32 %f2, [%r10];
    add.f32 %f1, %f1, %f2;
    add.u32 %r10, %r10, 128;
    add.u32 %r23, %r23, 1;
    setp.lt.u32 %p7, %r23, 8;
    @%p7 bra ROWS;
    mov.u32 %r7, empty;
    mad.lo.u32 %r7, %r5, 8, %r7;
    mbarrier.arrive.release.cta.shared::cta.b64 _, [%r7];
    add.u32 %r4, %r4, 1;
    setp.lt.u32 %p7, %r4, {tiles};
    @%p7 bra CONSUME;
    ld.param.u64 %rd3, [out];
    mov.u32 %r24, %ctaid.x;
    mad.lo.u32 %r24, %r24, 32, %r20;
    mul.wide.u32 %rd4, %r24, 4;
    add.u64 %rd5, %rd3, %rd4;
    st.global.f32 [%rd5], %f1;
END:
    ret;
}}
"""
EMPTY_WAIT = """WAITEMPTY:
    mbarrier.try_wait.parity.shared::cta.b64 %p5, [%r7], %r8;
    @!%p5 bra WAITEMPTY;
"""


def run_ring(stages, tiles, schedule, blocks=1):
    ptx = ptx_of(RING.format(stages=stages, tiles=tiles, nbytes=stages * 1024, empty_wait=EMPTY_WAIT))
    data = (np.arange(tiles * 8 * 32, dtype=np.float32) % 97 + np.arange(tiles * 8 * 32) / 4096).astype(
        np.float32).reshape(tiles * 8, 32)
    dev = Device()
    g = dev.alloc(data.nbytes)
    dev.copy_to_device(g, data)
    out = dev.alloc(128 * blocks)
    f = TensorMapFields(F32, int(g), (32, tiles * 8), (128,), (32, 8), (1, 1))
    dev.load_module(ptx).function("ring").launch((blocks, 1, 1), (64, 1, 1), [map_arg(f), out], schedule=schedule)
    got = np.zeros((blocks, 32), np.float32)
    dev.copy_from_device(got, out)
    want = np.zeros(32, np.float32)
    for row in data:  # the consumer's order: tile after tile, row after row
        want = (want + row).astype(np.float32)
    return got, np.tile(want, (blocks, 1))


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("stages", (2, 3))
def test_ring_of_stages(stages, schedule):
    got, want = run_ring(stages, 7, schedule)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("schedule", ("lockstep", "random"))
def test_ring_in_several_blocks(schedule):
    got, want = run_ring(2, 5, schedule, blocks=3)
    np.testing.assert_array_equal(got, want)


REFILL = """.visible .entry refill(.param .align 64 .b8 tmap[128], .param .u64 out)
{{
    .reg .b64 %rd<8>;
    .reg .b32 %r<16>;
    .reg .pred %p<4>;
    .shared .align 1024 .b8 buf[1024];
    .shared .align 8 .b64 full;
    .shared .align 8 .b64 empty;
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra INITED;
    mbarrier.init.shared::cta.b64 [full], 1;
    mbarrier.init.shared::cta.b64 [empty], 32;
INITED:
    fence.mbarrier_init.release.cluster;
    bar.sync 0;
    shl.b32 %r2, %r1, 2;
    mov.u32 %r3, buf;
    add.u32 %r3, %r3, %r2;
    setp.lt.u32 %p2, %r1, 32;
    @%p2 bra PRODUCER;
    // the consumer warp reads the stage's old contents, then frees it
    ld.shared.u32 %r4, [%r3];
    mbarrier.arrive.shared::cta.b64 _, [empty];
    bra WAITFULL;
PRODUCER:
    @%p1 bra WAITFULL;
{wait}    mbarrier.arrive.expect_tx.shared::cta.b64 _, [full], 1024;
    mov.b64 %rd1, tmap;
    cvta.param.u64 %rd2, %rd1;
    mov.u32 %r5, 0;
    cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [buf], [%rd2, {{%r5, %r5}}], [full];
WAITFULL:
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [full], 0;
    @!%p3 bra WAITFULL;
    ld.shared.u32 %r6, [%r3];
    ld.param.u64 %rd3, [out];
    mul.wide.u32 %rd4, %r1, 4;
    add.u64 %rd5, %rd3, %rd4;
    st.global.u32 [%rd5], %r6;
    ret;
}}
"""
EMPTY = """WAITEMPTY:
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [empty], 0;
    @!%p3 bra WAITEMPTY;
"""


def run_refill(schedule, wait):
    ptx = ptx_of(REFILL.format(wait=EMPTY if wait else ""))
    data = np.arange(256, dtype=np.uint32).reshape(8, 32) * 3 + 1
    dev = Device()
    g = dev.alloc(data.nbytes)
    dev.copy_to_device(g, data)
    out = dev.alloc(256)
    f = TensorMapFields(ElementType.UINT32, int(g), (32, 8), (128,), (32, 8), (1, 1))
    dev.load_module(ptx).function("refill").launch((1, 1, 1), (64, 1, 1), [map_arg(f), out], schedule=schedule)
    got = np.zeros(64, np.uint32)
    dev.copy_from_device(got, out)
    np.testing.assert_array_equal(got, data.reshape(-1)[:64])


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_refilling_a_stage_before_the_consumers_freed_it_races(schedule):
    """Rule (b): the producer issues into a stage the consumers still read, without waiting on the
    'empty' mbarrier they arrive on (where the load lands before their read, rule (a) reports it)."""
    run_refill(schedule, wait=True)
    with pytest.raises(RaceError) as e:
        run_refill(schedule, wait=False)
    text = str(e.value)
    assert "cp.async.bulk.tensor.2d" in text and "ld.shared.u32 %r4" in text
    if schedule != "random":  # the consumer warp runs first: its read precedes the unordered issue
        assert "nothing orders that access before the load's issue" in text


# -- rule (a): reading a TMA destination before observing its phase -------------------------------------------


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_reading_before_the_wait_races(schedule):
    f = fields(F32, (64, 8), (32, 8))
    data = tensor_data(F32, (8, 64))
    got, g = run_load(data, f, (0, 0), schedule)  # the correct program
    np.testing.assert_array_equal(got, expected_box(data, g, (0, 0)))
    with pytest.raises(RaceError) as e:
        run_load(data, f, (0, 0), schedule, wait=False)
    text = str(e.value)
    assert "cp.async.bulk.tensor.2d" in text and "ld.shared.u32" in text


# -- TMA stores, bulk groups, rules (c) and (d) ---------------------------------------------------------------

STORE = """.visible .entry tstore(.param .align 64 .b8 tmap[128], .param .u32 c0, .param .u32 c1)
{{
    .reg .b64 %rd<8>;
    .reg .b32 %r<16>;
    .reg .pred %p<4>;
    .shared .align 1024 .b8 buf[2048];
    mov.u32 %r1, %tid.x;
    // each thread writes four words of the 16 x 32 box (f32), values 1000 + index
    mov.u32 %r2, %r1;
FILL:
    shl.b32 %r3, %r2, 2;
    mov.u32 %r4, buf;
    add.u32 %r4, %r4, %r3;
    add.u32 %r5, %r2, 1000;
    cvt.rn.f32.u32 %r6, %r5;
    st.shared.b32 [%r4], %r6;
    add.u32 %r2, %r2, 128;
    setp.lt.u32 %p1, %r2, 512;
    @%p1 bra FILL;
{fence}    bar.sync 0;
    setp.ne.u32 %p2, %r1, 0;
    @%p2 bra END;
{issuer_fence}    mov.b64 %rd1, tmap;
    cvta.param.u64 %rd2, %rd1;
    ld.param.u32 %r7, [c0];
    ld.param.u32 %r8, [c1];
    cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%rd2, {{%r7, %r8}}], [buf];
    cp.async.bulk.commit_group;
{early}    cp.async.bulk.wait_group.read 0;
    mov.u32 %r9, buf;
    st.shared.u32 [%r9], %r1;
    cp.async.bulk.wait_group 0;
END:
    ret;
}}
"""


def run_store(coords, schedule, fence="writer", early=False):
    text = "    fence.proxy.async.shared::cta;\n"
    ptx = ptx_of(STORE.format(fence=text if fence == "writer" else "", issuer_fence=text if fence == "issuer" else "",
                              early="    mov.u32 %r9, buf;\n    st.shared.u32 [%r9], %r1;\n" if early else ""))
    H, W = 20, 40
    base = -np.arange(H * W, dtype=np.float32).reshape(H, W) - 1
    dev = Device()
    g = dev.alloc(base.nbytes)
    dev.copy_to_device(g, base)
    f = TensorMapFields(F32, int(g), (W, H), (W * 4,), (32, 16), (1, 1))
    dev.load_module(ptx).function("tstore").launch((1, 1, 1), (128, 1, 1),
                                                    [map_arg(f), *[np.int32(c) for c in coords]], schedule=schedule)
    got = np.zeros_like(base)
    dev.copy_from_device(got, g)
    want = base.copy()
    box = (1000 + np.arange(512, dtype=np.float32)).reshape(16, 32)
    x, y = coords
    for r in range(16):
        for c in range(32):
            if 0 <= y + r < H and 0 <= x + c < W:
                want[y + r, x + c] = box[r, c]
    return got, want


@pytest.mark.parametrize("coords", [(4, 2), (24, 10), (-20, -9), (-5, 15)])
def test_tensor_store_clips_at_the_edges(coords):
    got, want = run_store(coords, "lockstep")
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_store_without_proxy_fence_races(schedule):
    for fence in ("writer", "issuer"):  # the writers fence before the barrier, or the issuing thread after it
        got, want = run_store((3, 3), schedule, fence)
        np.testing.assert_array_equal(got, want)
    with pytest.raises(RaceError) as e:
        run_store((3, 3), schedule, fence=None)
    text = str(e.value)
    assert "st.shared.b32" in text and "cp.async.bulk.tensor.2d.global" in text and "fence.proxy.async" in text


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_overwriting_a_store_source_before_wait_read_races(schedule):
    with pytest.raises(RaceError) as e:
        run_store((3, 3), schedule, early=True)
    text = str(e.value)
    assert "st.shared.u32" in text and "cp.async.bulk.tensor.2d.global" in text and "wait_group.read" in text


# -- the mbarrier forms ------------------------------------------------------------------------------------

FORMS = """.visible .entry forms(.param .u64 out)
{
    .reg .b64 %rd<12>;
    .reg .b32 %r<16>;
    .reg .pred %p<8>;
    .shared .align 8 .b64 bars[4];
    mov.u32 %r1, %tid.x;
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %r1, 16;
    add.u64 %rd3, %rd1, %rd2;
    mov.u32 %r2, bars;
    cvta.shared.u64 %rd4, bars;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra INITED;
    mbarrier.init.shared::cta.b64 [%r2], 64;
    mbarrier.init.shared::cta.b64 [%r2+8], 3;
    mbarrier.init.shared.b64 [%r2+16], 1;
    // through a generic address: the fourth, invalidated and initialised again
    mbarrier.init.b64 [%rd4+24], 5;
    mbarrier.inval.b64 [%rd4+24];
    mbarrier.init.b64 [%rd4+24], 1;
INITED:
    fence.mbarrier_init.release.cluster;
    bar.sync 0;
    // every thread arrives on the first; the state's pending count tells the arrival's rank
    mbarrier.arrive.release.cta.shared::cta.b64 %rd5, [%r2];
    mbarrier.pending_count.b64 %r3, %rd5;
    st.global.u32 [%rd3], %r3;
    mbarrier.test_wait.shared::cta.b64 %p2, [%r2], %rd5;
    selp.u32 %r4, 1, 0, %p2;
    st.global.u32 [%rd3+4], %r4;
    // thread 0 arrives twice over on the second (count 2), thread 1 once
    setp.gt.u32 %p3, %r1, 1;
    @%p3 bra COUNTED;
    setp.eq.u32 %p4, %r1, 0;
    selp.u32 %r5, 2, 1, %p4;
    mbarrier.arrive.shared::cta.b64 _, [%r2+8], %r5;
COUNTED:
    mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 %p5, [%r2+8], 0, 1000;
    selp.u32 %r6, 1, 0, %p5;
    st.global.u32 [%rd3+8], %r6;
    // the third completes when thread 0's arrive and thread 1's complete_tx of 48 bytes are in
    @%p1 bra NOTZERO;
    mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%r2+16], 48;
    mbarrier.arrive.expect_tx.b64 _, [%rd4+24], 0;
    mbarrier.arrive.shared::cta.b64 _, [%r2+16];
NOTZERO:
    setp.ne.u32 %p6, %r1, 1;
    @%p6 bra WAIT3;
    mbarrier.complete_tx.relaxed.cta.shared::cta.b64 [%r2+16], 48;
WAIT3:
    mbarrier.try_wait.parity.b64 %p7, [%rd4+16], 0;
    @!%p7 bra WAIT3;
    mbarrier.try_wait.parity.b64 %p7, [%rd4+24], 0;
    selp.u32 %r7, 1, 0, %p7;
    st.global.u32 [%rd3+12], %r7;
    ret;
}
"""


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_mbarrier_forms(schedule):
    dev = Device()
    out = dev.alloc(64 * 16)
    dev.load_module(ptx_of(FORMS)).function("forms").launch((1, 1, 1), (64, 1, 1), [out], schedule=schedule)
    got = np.zeros((64, 4), np.uint32)
    dev.copy_from_device(got, out)
    assert sorted(got[:, 0]) == list(range(64))  # each arrival left a different pending count
    assert (got[:, 1:] == 1).all()


DEADLOCK = """.visible .entry stuck()
{
    .reg .b32 %r<4>;
    .reg .pred %p<4>;
    .shared .align 8 .b64 bar;
    mov.u32 %r1, %tid.x;
    setp.eq.u32 %p1, %r1, 0;
    @%p1 mbarrier.init.shared::cta.b64 [bar], 2;
    bar.sync 0;
    @%p1 mbarrier.arrive.shared::cta.b64 _, [bar];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [bar], 0;
    @!%p2 bra WAIT;
    ret;
}
"""


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_phase_that_never_completes_is_a_deadlock(schedule):
    dev = Device()
    with pytest.raises(PtxError, match=r"deadlock[\s\S]*mbarrier.try_wait.parity[\s\S]*1 of 2 arrivals pending"):
        dev.load_module(ptx_of(DEADLOCK)).function("stuck").launch((1, 1, 1), (64, 1, 1), [], schedule=schedule)


# -- misuse -----------------------------------------------------------------------------------------------------


def misuse_kernel(body: str, params: str = "") -> str:
    return ptx_of(f""".visible .entry bad(.param .align 64 .b8 tmap[128]{params})
{{
    .reg .b64 %rd<8>;
    .reg .b32 %r<8>;
    .reg .pred %p<4>;
    .shared .align 1024 .b8 buf[4096];
    .shared .align 8 .b64 bar[2];
    mov.u32 %r1, bar;
    mov.b64 %rd1, tmap;
    cvta.param.u64 %rd2, %rd1;
    mov.u32 %r2, 0;
    mov.u32 %r3, buf;
{body}
    ret;
}}
""")


MISUSE = {
    "uninitialised": ("mbarrier.arrive.shared::cta.b64 _, [%r1];", r"not initialised"),
    "count-zero": ("mov.u32 %r4, 0;\n    mbarrier.init.shared::cta.b64 [%r1], %r4;", r"count 0: it must lie in 1 \.\. 1048575"),
    "count-too-big": ("mov.u32 %r4, 1048576;\n    mbarrier.init.shared::cta.b64 [%r1], %r4;", r"count 1048576"),
    "misaligned": ("cvta.shared.u64 %rd3, bar;\n    mbarrier.init.b64 [%rd3+4], 1;", r"not 8-byte aligned"),
    "tx-overflow": ("mbarrier.init.shared::cta.b64 [%r1], 1;\n    mbarrier.expect_tx.shared::cta.b64 [%r1], 1048575;\n"
                    "    mbarrier.expect_tx.shared::cta.b64 [%r1], 1;", r"tx-count .* 1048576"),
    "tx-underflow": ("mbarrier.init.shared::cta.b64 [%r1], 1;\n    mbarrier.complete_tx.shared::cta.b64 [%r1], 1048575;\n"
                     "    mbarrier.complete_tx.shared::cta.b64 [%r1], 1;", r"tx-count .* -1048576"),
    "too-many-arrivals": ("mbarrier.init.shared::cta.b64 [%r1], 1;\n    mbarrier.expect_tx.shared::cta.b64 [%r1], 16;\n"
                          "    mbarrier.arrive.shared::cta.b64 _, [%r1], 2;", r"2 arrivals .* only 1 pending"),
}


@pytest.mark.parametrize("case", sorted(MISUSE))
def test_mbarrier_misuse(case):
    body, message = MISUSE[case]
    dev = Device()
    fn = dev.load_module(misuse_kernel(body)).function("bad")
    with pytest.raises(PtxError, match=message):
        fn.launch((1, 1, 1), (1, 1, 1), [map_arg(fields(F32, (32, 8), (32, 8)))])


LOAD_BODY = """mbarrier.init.shared::cta.b64 [%r1], 1;
    mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r1], 1024;
    cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r3+{offset}], [%rd2, {{%r2, %r2}}], [%r1];"""

BAD_MAPS = {
    "box-over-256": ({"box": (8, 300)}, r"box dimension 1 is 300"),
    "inner-box-not-16-bytes": ({"box": (5, 8)}, r"inner dimension is 20 bytes"),
    "inner-box-over-the-span": ({"box": (32, 8), "swizzle": Swizzle.B64}, r"over the 64-byte swizzle span"),
    "stride-not-16": ({"strides": (136,)}, r"stride of dimension 1 is 136 bytes"),
    "element-stride": ({"es": (1, 9)}, r"element stride of dimension 1 is 9"),
    "nan-fill-of-integers": ({"etype": U8, "fill": OobFill.NAN}, r"NaN out-of-bounds fill"),
}


@pytest.mark.parametrize("case", sorted(BAD_MAPS))
def test_the_driver_checks_of_a_map(case):
    extra, message = BAD_MAPS[case]
    extra = dict(extra)
    etype = extra.pop("etype", F32)
    f = fields(etype, (32, 8), extra.pop("box", (32, 8)), **extra)
    dev = Device()
    g = dev.alloc(32 * 8 * 4 + 1024)
    f = TensorMapFields(f.element_type, int(g), f.dims, f.strides, f.box, f.element_strides, swizzle=f.swizzle,
                        oob_fill=f.oob_fill)
    fn = dev.load_module(misuse_kernel(LOAD_BODY.format(offset=0))).function("bad")
    with pytest.raises(PtxError, match=message):
        fn.launch((1, 1, 1), (1, 1, 1), [map_arg(f)])


@pytest.mark.parametrize("offset, swizzle, message", [
    (16, Swizzle.NONE, r"0x10 is not 128-byte aligned"),
    (128, Swizzle.B128, r"0x80 is not 1024-byte aligned"),
    (3968, Swizzle.NONE, r"runs past the block's"),
])
def test_tma_destination_checks(offset, swizzle, message):
    dev = Device()
    g = dev.alloc(32 * 8 * 4)
    f = fields(F32, (32, 8), (32, 8) if swizzle is Swizzle.NONE else (32, 8), swizzle=swizzle)
    f = TensorMapFields(F32, int(g), f.dims, f.strides, f.box, f.element_strides, swizzle=swizzle)
    fn = dev.load_module(misuse_kernel(LOAD_BODY.format(offset=offset))).function("bad")
    with pytest.raises(PtxError, match=message):
        fn.launch((1, 1, 1), (1, 1, 1), [map_arg(f)])


def test_rank_must_match_and_prefetch_checks_the_map():
    dev = Device()
    g = dev.alloc(4096)
    f = TensorMapFields(F32, int(g), (32, 8, 2), (128, 1024), (32, 8, 1), (1, 1, 1))
    fn = dev.load_module(misuse_kernel(LOAD_BODY.format(offset=0))).function("bad")
    with pytest.raises(PtxError, match=r"its rank is 3, the instruction's \.2d names 2"):
        fn.launch((1, 1, 1), (1, 1, 1), [map_arg(f)])
    fn = dev.load_module(misuse_kernel("prefetch.tensormap [%rd2];")).function("bad")
    fn.launch((1, 1, 1), (1, 1, 1), [map_arg(f)])  # a map: fine
    with pytest.raises(PtxError, match=r"not a tensor map"):
        fn.launch((1, 1, 1), (1, 1, 1), [np.zeros(128, np.uint8)])


# -- rule (c) for wgmma: a generic write of an operand needs fence.proxy.async --------------------------------

WGMMA = """.visible .entry wg()
{{
    .reg .b64 %rd<8>;
    .reg .b32 %r<16>;
    .reg .f32 %f<4>;
    .reg .pred %p<2>;
    .shared .align 1024 .b8 ops[2304];
    mov.u32 %r1, %tid.x;
    // A (64 x 16 f16) in 2048 bytes, B (8 x 16) in 256 more: every thread writes 16 bytes of A,
    // threads 0 .. 15 16 bytes of B
    mov.u32 %r2, ops;
    shl.b32 %r3, %r1, 4;
    add.u32 %r4, %r2, %r3;
    add.u32 %r5, %r1, 1;
    st.shared.v4.u32 [%r4], {{%r5, %r5, %r5, %r5}};
    setp.lt.u32 %p1, %r1, 16;
    @%p1 st.shared.v4.u32 [%r4+2048], {{%r5, %r5, %r5, %r5}};
{writer}    bar.sync 0;
{reader}    cvt.u64.u32 %rd1, %r2;
    shr.u64 %rd1, %rd1, 4;
    or.b64 %rd2, %rd1, {a_bits};
    add.u64 %rd3, %rd1, 128;
    or.b64 %rd3, %rd3, {b_bits};
    setp.ne.u32 %p1, %r1, %r1;
    wgmma.fence.sync.aligned;
    wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {{%f0, %f1, %f2, %f3}}, %rd2, %rd3, %p1, 1, 1, 0, 0;
    wgmma.commit_group.sync.aligned;
    wgmma.wait_group.sync.aligned 0;
    ret;
}}
"""


def wgmma_kernel(fence):
    # no swizzle, K-major: LBO 128 bytes (between the K halves), SBO 256 (between row octets)
    bits = (128 >> 4) << 16 | (256 >> 4) << 32
    text = "    fence.proxy.async.shared::cta;\n"
    return ptx_of(WGMMA.format(writer=text if fence == "writer" else "", reader=text if fence == "reader" else "",
                               a_bits=bits, b_bits=bits))


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_wgmma_operand_written_without_proxy_fence_races(schedule):
    dev = Device()
    for fence in ("writer", "reader"):  # the writers fence before the barrier, or the wgmma's threads after it
        dev.load_module(wgmma_kernel(fence)).function("wg").launch((1, 1, 1), (128, 1, 1), [], schedule=schedule)
    with pytest.raises(RaceError) as e:
        dev.load_module(wgmma_kernel(None)).function("wg").launch((1, 1, 1), (128, 1, 1), [], schedule=schedule)
    text = str(e.value)
    assert "st.shared.v4.u32" in text and "wgmma.mma_async" in text and "fence.proxy.async" in text


# -- tensormap.replace, then a load through the edited map ---------------------------------------------------

REPLACE = """.visible .entry repl(.param .u64 map, .param .u64 other, .param .u64 out)
{{
    .reg .b64 %rd<12>;
    .reg .b32 %r<16>;
    .reg .pred %p<4>;
    .shared .align 1024 .b8 buf[1024];
    .shared .align 128 .b8 smap[128];
    .shared .align 8 .b64 bar;
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra ISSUED;
    ld.param.u64 %rd1, [map];
    ld.param.u64 %rd2, [other];
    mbarrier.init.shared::cta.b64 [bar], 1;
{edits}    fence.proxy.tensormap::generic.release.gpu;
    fence.proxy.tensormap::generic.acquire.gpu [%rd1], 128;
    prefetch.tensormap [%rd1];
    mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], 1024;
    mov.u32 %r2, 0;
    cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [buf], [%rd1, {{%r2, %r2}}], [bar];
ISSUED:
    bar.sync 0;
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [bar], 0;
    @!%p2 bra WAIT;
    // the map edited in shared memory too: its 128 bytes go out after the box's 1024
    ld.param.u64 %rd4, [out];
    shl.b32 %r3, %r1, 2;
    mov.u32 %r4, buf;
    add.u32 %r4, %r4, %r3;
    ld.shared.u32 %r5, [%r4];
    ld.shared.u32 %r6, [%r4+512];
    mul.wide.u32 %rd5, %r1, 4;
    add.u64 %rd6, %rd4, %rd5;
    st.global.u32 [%rd6], %r5;
    st.global.u32 [%rd6+512], %r6;
    ret;
}}
"""


def test_tensormap_replace_then_load():
    edits = ("    tensormap.replace.tile.global_address.global.b1024.b64 [%rd1], %rd2;\n"
             "    tensormap.replace.tile.global_dim.global.b1024.b32 [%rd1], 1, 5;\n"
             "    tensormap.replace.tile.swizzle_mode.global.b1024.b32 [%rd1], 3;\n")
    ptx = ptx_of(REPLACE.format(edits=edits))
    first = tensor_data(F32, (16, 32))
    other = first + 10000
    dev = Device()
    g1, g2 = dev.alloc(first.nbytes), dev.alloc(other.nbytes)
    dev.copy_to_device(g1, first)
    dev.copy_to_device(g2, other)
    f = TensorMapFields(F32, int(g1), (32, 16), (128,), (32, 8), (1, 1))
    m = dev.alloc(128)
    dev.copy_to_device(m, map_arg(f))
    out = dev.alloc(1024)
    dev.load_module(ptx).function("repl").launch((1, 1, 1), (128, 1, 1), [m, g2, out])
    got = np.zeros(1024, np.uint8)
    dev.copy_from_device(got, out)
    edited = TensorMapFields(F32, int(g2), (32, 5), (128,), (32, 8), (1, 1), swizzle=Swizzle.B128)
    np.testing.assert_array_equal(got, expected_box(other, edited, (0, 0)))
    back = np.zeros(128, np.uint8)
    dev.copy_from_device(back, m)
    from accy.emulator.tensor_map import decode
    assert decode(back.tobytes()) == edited


def test_tensormap_replace_in_shared_memory_and_its_ordinal():
    ptx = ptx_of(""".visible .entry srepl(.param .u64 map)
{
    .reg .b64 %rd<8>;
    .reg .b32 %r<8>;
    .reg .pred %p<2>;
    .shared .align 128 .b8 smap[128];
    mov.u32 %r1, %tid.x;
    ld.param.u64 %rd1, [map];
    mul.wide.u32 %rd2, %r1, 8;
    add.u64 %rd3, %rd1, %rd2;
    mov.u32 %r2, smap;
    shl.b32 %r3, %r1, 3;
    add.u32 %r4, %r2, %r3;
    ld.global.u64 %rd4, [%rd3];
    st.shared.u64 [%r4], %rd4;
    bar.sync 0;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra DONE;
    tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [smap], 1, 4;
    mov.b64 %rd5, 256;
    tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [smap], 0, %rd5;
DONE:
    bar.sync 0;
    ld.shared.u64 %rd6, [%r4];
    st.global.u64 [%rd3], %rd6;
    ret;
}
""")
    dev = Device()
    f = TensorMapFields(F32, 1 << 36, (32, 16), (128,), (32, 8), (1, 1))
    m = dev.alloc(128)
    dev.copy_to_device(m, map_arg(f))
    dev.load_module(ptx).function("srepl").launch((1, 1, 1), (16, 1, 1), [m])
    back = np.zeros(128, np.uint8)
    dev.copy_from_device(back, m)
    from accy.emulator.tensor_map import decode
    assert decode(back.tobytes()) == TensorMapFields(F32, 1 << 36, (32, 16), (256,), (32, 4), (1, 1))


# -- plain bulk copies, cp.async.mbarrier.arrive, elect.sync, setmaxnreg, refusals -----------------------------

BULK = """.visible .entry bulk(.param .u64 src, .param .u64 dst)
{
    .reg .b64 %rd<8>;
    .reg .b32 %r<16>;
    .reg .pred %p<4>;
    .shared .align 128 .b8 buf[512];
    .shared .align 8 .b64 bar;
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    ld.param.u64 %rd1, [src];
    ld.param.u64 %rd2, [dst];
    @%p1 bra ISSUED;
    mbarrier.init.shared::cta.b64 [bar], 1;
    mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], 512;
    cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [buf], [%rd1], 512, [bar];
ISSUED:
    bar.sync 0;
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [bar], 0;
    @!%p2 bra WAIT;
    // every word doubled in place, then thread 0 stores the buffer in bulk
    shl.b32 %r2, %r1, 2;
    mov.u32 %r3, buf;
    add.u32 %r3, %r3, %r2;
    ld.shared.u32 %r4, [%r3];
    shl.b32 %r4, %r4, 1;
    st.shared.u32 [%r3], %r4;
    fence.proxy.async.shared::cta;
    bar.sync 0;
    @%p1 bra DONE;
    cp.async.bulk.global.shared::cta.bulk_group [%rd2], [buf], 512;
    cp.async.bulk.commit_group;
    cp.async.bulk.wait_group 0;
DONE:
    ret;
}
"""


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_plain_bulk_copies(schedule):
    data = np.arange(128, dtype=np.uint32) * 7 + 3
    dev = Device()
    src, dst = dev.alloc(512), dev.alloc(512)
    dev.copy_to_device(src, data)
    dev.load_module(ptx_of(BULK)).function("bulk").launch((1, 1, 1), (128, 1, 1), [src, dst], schedule=schedule)
    got = np.zeros(128, np.uint32)
    dev.copy_from_device(got, dst)
    np.testing.assert_array_equal(got, data * 2)


CP_ARRIVE = """.visible .entry cparrive(.param .u64 src, .param .u64 dst)
{{
    .reg .b64 %rd<8>;
    .reg .b32 %r<16>;
    .reg .pred %p<4>;
    .shared .align 16 .b8 buf[2048];
    .shared .align 8 .b64 bar;
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra INITED;
    mbarrier.init.shared::cta.b64 [bar], {count};
INITED:
    bar.sync 0;
    // each thread copies 16 bytes with cp.async and has the mbarrier arrive when they land
    ld.param.u64 %rd1, [src];
    mul.wide.u32 %rd2, %r1, 16;
    add.u64 %rd3, %rd1, %rd2;
    shl.b32 %r2, %r1, 4;
    mov.u32 %r3, buf;
    add.u32 %r3, %r3, %r2;
    cp.async.cg.shared.global [%r3], [%rd3], 16;
    cp.async.mbarrier.arrive{noinc}.shared::cta.b64 [bar];
{arrive}WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [bar], 0;
    @!%p2 bra WAIT;
    // read a neighbour's copy (another warp's): the phase orders it
    add.u32 %r4, %r1, 64;
    and.b32 %r4, %r4, 127;
    shl.b32 %r5, %r4, 4;
    mov.u32 %r6, buf;
    add.u32 %r6, %r6, %r5;
    ld.shared.u32 %r7, [%r6];
    ld.param.u64 %rd4, [dst];
    mul.wide.u32 %rd5, %r1, 4;
    add.u64 %rd6, %rd4, %rd5;
    st.global.u32 [%rd6], %r7;
    ret;
}}
"""


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("noinc", (True, False))
def test_cp_async_mbarrier_arrive(noinc, schedule):
    """The phase orders the copies before another warp's reads (the generic race checker asks the
    mbarriers' clocks); without the wait it does not."""
    run_cp_arrive(noinc, schedule, wait=True)
    with pytest.raises(PtxError) as e:
        run_cp_arrive(noinc, schedule, wait=False)
    assert "cp.async.cg" in str(e.value) and "ld.shared.u32 %r7" in str(e.value)


def run_cp_arrive(noinc, schedule, wait):
    ptx = CP_ARRIVE.format(count=128, noinc=".noinc" if noinc else "",
                           arrive="" if noinc else "    mbarrier.arrive.shared::cta.b64 _, [bar];\n")
    if not wait:
        wait_loop = "WAIT:\n    mbarrier.try_wait.parity.shared::cta.b64 %p2, [bar], 0;\n    @!%p2 bra WAIT;\n"
        assert wait_loop in ptx
        ptx = ptx.replace(wait_loop, "")
    ptx = ptx_of(ptx)
    data = np.arange(512, dtype=np.uint32)
    dev = Device()
    src, dst = dev.alloc(2048), dev.alloc(512)
    dev.copy_to_device(src, data)
    dev.load_module(ptx).function("cparrive").launch((1, 1, 1), (128, 1, 1), [src, dst], schedule=schedule)
    got = np.zeros(128, np.uint32)
    dev.copy_from_device(got, dst)
    np.testing.assert_array_equal(got, data.reshape(128, 4)[(np.arange(128) + 64) % 128, 0])


def test_elect_sync_elects_the_lowest_lane_of_the_mask():
    ptx = ptx_of(""".visible .entry el(.param .u64 out)
{
    .reg .b64 %rd<6>;
    .reg .b32 %r<8>;
    .reg .pred %p<4>;
    mov.u32 %r1, %tid.x;
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %r1, 8;
    add.u64 %rd3, %rd1, %rd2;
    mov.u32 %r2, 99;
    mov.u32 %r5, %laneid;
    setp.lt.u32 %p1, %r5, 4;
    @%p1 bra DONE;
    elect.sync %r2|%p2, 0xFFFFFFF0;
    elect.sync _|%p3, 0xFFFFFFF0;
    selp.u32 %r3, 1, 0, %p2;
    selp.u32 %r4, 1, 0, %p3;
    add.u32 %r3, %r3, %r4;
    st.global.u32 [%rd3+4], %r3;
DONE:
    st.global.u32 [%rd3], %r2;
    ret;
}
""")
    dev = Device()
    out = dev.alloc(64 * 8)
    dev.load_module(ptx).function("el").launch((1, 1, 1), (64, 1, 1), [out])
    got = np.zeros((64, 2), np.uint32)
    dev.copy_from_device(got, out)
    lane = np.arange(64) % 32
    np.testing.assert_array_equal(got[:, 0], np.where(lane < 4, 99, 4))
    np.testing.assert_array_equal(got[:, 1], np.where(lane == 4, 2, 0))


SETMAXNREG = """.visible .entry regs()
{{
    .reg .b32 %r<4>;
    .reg .pred %p<2>;
    mov.u32 %r1, %tid.x;
    setp.lt.u32 %p1, %r1, 128;
    @%p1 bra PRODUCER;
    setmaxnreg.inc.sync.aligned.u32 {inc};
    bra DONE;
PRODUCER:
    setmaxnreg.dec.sync.aligned.u32 40;
DONE:
    ret;
}}
"""


def test_setmaxnreg_per_warpgroup():
    from accy.emulator.profile import LaunchCounters

    dev = Device()
    counters = LaunchCounters()
    dev.load_module(ptx_of(SETMAXNREG.format(inc=232))).function("regs").launch((1, 1, 1), (256, 1, 1), [],
                                                                                 profile=counters)
    assert counters.warp_registers == {((0, 0, 0), w): 40 if w < 4 else 232 for w in range(8)}
    with pytest.raises(PtxError, match=r"setmaxnreg is warpgroup-collective"):
        dev.load_module(ptx_of(SETMAXNREG.format(inc=232))).function("regs").launch((1, 1, 1), (192, 1, 1), [])
    with pytest.raises(PtxError, match=r"multiple of 8 in 24 \.\. 256"):
        dev.load_module(HEAD + SETMAXNREG.format(inc=20))


def test_multicast_is_refused():
    ptx = HEAD + """.visible .entry mc(.param .u64 m)
{
    .reg .b64 %rd<4>;
    .reg .b32 %r<4>;
    .reg .b16 %rs<2>;
    .shared .align 128 .b8 buf[1024];
    .shared .align 8 .b64 bar;
    ld.param.u64 %rd1, [m];
    mov.u32 %r1, 0;
    mov.b16 %rs1, 3;
    cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [buf], [%rd1, {%r1, %r1}], [bar], %rs1;
    ret;
}
"""
    assembled(ptx, ARCH)
    with pytest.raises(PtxError, match=r"multicast::cluster is not emulated"):
        Device().load_module(ptx)


def test_generic_reads_through_a_kernel_parameter_address():
    """``mov`` of a kernel parameter's name gives its .param address, ``cvta.param`` the generic one."""
    ptx = ptx_of(""".visible .entry par(.param .align 64 .b8 tmap[128], .param .u64 out)
{
    .reg .b64 %rd<8>;
    mov.b64 %rd1, tmap;
    cvta.param.u64 %rd2, %rd1;
    ld.u64 %rd3, [%rd2+16];
    ld.u32 %rd4, [%rd2+24];
    ld.param.u64 %rd5, [out];
    st.global.u64 [%rd5], %rd3;
    st.global.u64 [%rd5+8], %rd4;
    ret;
}
""")
    dev = Device()
    out = dev.alloc(16)
    f = TensorMapFields(F32, 0x1234560, (48, 8), (192,), (16, 8), (1, 1))
    dev.load_module(ptx).function("par").launch((1, 1, 1), (1, 1, 1), [map_arg(f), out])
    got = np.zeros(2, np.uint64)
    dev.copy_from_device(got, out)
    assert list(got) == [0x1234560, 48]


# -- a bulk load feeding wgmma, and one overwriting its operands in flight ---------------------------------------

TMA_WGMMA = """.visible .entry tw(.param .u64 src, .param .u64 out)
{{
    .reg .b64 %rd<12>;
    .reg .b32 %r<16>;
    .reg .f32 %f<4>;
    .reg .pred %p<4>;
    .shared .align 1024 .b8 ops[2304];
    .shared .align 8 .b64 bar;
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    ld.param.u64 %rd1, [src];
    @%p1 bra INITED;
    mbarrier.init.shared::cta.b64 [bar], 1;
    mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], 2304;
    cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [ops], [%rd1], 2304, [bar];
INITED:
    bar.sync 0;
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [bar], 0;
    @!%p2 bra WAIT;
    mov.u32 %r2, ops;
    cvt.u64.u32 %rd2, %r2;
    shr.u64 %rd2, %rd2, 4;
    or.b64 %rd3, %rd2, {bits};
    add.u64 %rd4, %rd2, 128;
    or.b64 %rd4, %rd4, {bits};
    setp.ne.u32 %p3, %r1, %r1;
    wgmma.fence.sync.aligned;
    wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {{%f0, %f1, %f2, %f3}}, %rd3, %rd4, %p3, 1, 1, 0, 0;
    wgmma.commit_group.sync.aligned;
{early}    wgmma.wait_group.sync.aligned 0;
{late}    ld.param.u64 %rd5, [out];
    mul.wide.u32 %rd6, %r1, 16;
    add.u64 %rd7, %rd5, %rd6;
    st.global.v4.f32 [%rd7], {{%f0, %f1, %f2, %f3}};
    ret;
}}
"""
REFILL_LOAD = """    @%p1 bra REFILLED{n};
    mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], 2304;
    cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [ops], [%rd1], 2304, [bar];
REFILLED{n}:
"""


def run_tma_wgmma(schedule, refill):
    bits = (128 >> 4) << 16 | (256 >> 4) << 32  # no swizzle, K-major: LBO 128, SBO 256
    ptx = ptx_of(TMA_WGMMA.format(bits=bits, early=REFILL_LOAD.format(n=0) if refill == "early" else "",
                                  late=REFILL_LOAD.format(n=1) if refill == "late" else ""))
    rng = np.random.default_rng(5)
    A = rng.integers(-4, 5, (64, 16)).astype(np.float16)
    B = rng.integers(-4, 5, (8, 16)).astype(np.float16)
    image = np.zeros(2304 // 2, np.float16)
    for r in range(64):
        for k in range(16):
            image[((r // 8) * 256 + (r % 8) * 16 + (k // 8) * 128 + (k % 8) * 2) // 2] = A[r, k]
    for n in range(8):
        for k in range(16):
            image[(2048 + (n % 8) * 16 + (k // 8) * 128 + (k % 8) * 2) // 2] = B[n, k]
    dev = Device()
    src, out = dev.alloc(2304), dev.alloc(128 * 16)
    dev.copy_to_device(src, image)
    dev.load_module(ptx).function("tw").launch((1, 1, 1), (128, 1, 1), [src, out], schedule=schedule)
    got = np.zeros((128, 4), np.float32)
    dev.copy_from_device(got, out)
    D = A.astype(np.float64) @ B.astype(np.float64).T
    for tid in range(128):
        w, lane = divmod(tid, 32)
        g, t = lane >> 2, lane % 4
        for i in range(4):
            assert got[tid, i] == D[16 * w + g + 8 * (i >> 1), 2 * t + (i & 1)]


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_bulk_load_feeding_wgmma(schedule):
    run_tma_wgmma(schedule, None)
    run_tma_wgmma(schedule, "late")  # refilling the operands after wgmma.wait_group: fine
    with pytest.raises(RaceError) as e:
        run_tma_wgmma(schedule, "early")
    text = str(e.value)
    assert "wgmma.mma_async" in text and "cp.async.bulk.shared::cluster" in text and "in flight" in text
