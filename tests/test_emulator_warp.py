"""The PTX emulator's warps: shuffles, votes and reductions, under full and partial member
masks and in divergent code; vector loads and stores, packing and the warp forms."""

from __future__ import annotations


import numpy as np



from emulator_support import (ARCH, assembled, assert_bits_equal, compile_ir, elementwise_ir, forms_of, launch, ptx_kernel, run_elementwise, simple_kernel, WARP_DECLS, NEEDS_PTXAS)

pytestmark = NEEDS_PTXAS


def _ballots(mask_rows):
    return np.array([sum(1 << k for k in range(32) if row[k]) for row in mask_rows], np.int64).astype(
        np.uint32).view(np.int32)


def test_warp_shuffles_votes_reductions():
    body = """
    %s1 = call i32 @llvm.nvvm.shfl.sync.bfly.i32(i32 -1, i32 %a0, i32 16, i32 31)
    %x1 = add i32 %a0, %s1
    %s2 = call i32 @llvm.nvvm.shfl.sync.bfly.i32(i32 -1, i32 %x1, i32 8, i32 31)
    %x2 = add i32 %x1, %s2
    %s3 = call i32 @llvm.nvvm.shfl.sync.bfly.i32(i32 -1, i32 %x2, i32 4, i32 31)
    %x3 = add i32 %x2, %s3
    %s4 = call i32 @llvm.nvvm.shfl.sync.bfly.i32(i32 -1, i32 %x3, i32 2, i32 31)
    %x4 = add i32 %x3, %s4
    %s5 = call i32 @llvm.nvvm.shfl.sync.bfly.i32(i32 -1, i32 %x4, i32 1, i32 31)
    %r0 = add i32 %x4, %s5
    %fv = sitofp i32 %a0 to float
    %r1 = call float @llvm.nvvm.shfl.sync.down.f32(i32 -1, float %fv, i32 3, i32 31)
    %r2 = call i32 @llvm.nvvm.shfl.sync.idx.i32(i32 -1, i32 %a0, i32 5, i32 6175)
    %up = call {i32, i1} @llvm.nvvm.shfl.sync.up.i32p(i32 -1, i32 %a0, i32 2, i32 6144)
    %upv = extractvalue {i32, i1} %up, 0
    %upp = extractvalue {i32, i1} %up, 1
    %r3 = select i1 %upp, i32 %upv, i32 -7
    %pos = icmp sgt i32 %a0, 50
    %r4 = call i32 @llvm.nvvm.vote.ballot.sync(i32 -1, i1 %pos)
    %al = call i1 @llvm.nvvm.vote.all.sync(i32 -1, i1 %pos)
    %an = call i1 @llvm.nvvm.vote.any.sync(i32 -1, i1 %pos)
    %un = call i1 @llvm.nvvm.vote.uni.sync(i32 -1, i1 %pos)
    %al32 = zext i1 %al to i32
    %an32 = zext i1 %an to i32
    %un32 = zext i1 %un to i32
    %an2 = shl i32 %an32, 1
    %un2 = shl i32 %un32, 2
    %fl = or i32 %al32, %an2
    %r5 = or i32 %fl, %un2
    %r6 = call i32 @llvm.nvvm.redux.sync.add(i32 %a0, i32 -1)
    %r7 = call i32 @llvm.nvvm.redux.sync.min(i32 %a0, i32 -1)
    %m3 = and i32 %a0, 3
    %r8 = call i32 @llvm.nvvm.match.any.sync.i32(i32 -1, i32 %m3)
    """
    ptx = compile_ir(elementwise_ir("warp", ["i32"], ["i32", "float"] + ["i32"] * 7, body, WARP_DECLS))
    assert {"shfl.sync.bfly.b32", "shfl.sync.up.b32", "vote.sync.ballot.b32", "redux.sync.add.s32",
            "match.any.sync.b32"} <= forms_of(ptx)
    n = 128
    v = np.random.default_rng(0).integers(0, 100, n).astype(np.int32)
    outs = run_elementwise(ptx, "warp", [v], [np.int32, np.float32] + [np.int32] * 7)
    lane, warp = np.arange(n) % 32, np.arange(n) // 32
    w = v.reshape(-1, 32)
    assert_bits_equal(outs[0], np.repeat(w.sum(1), 32), "butterfly sum")
    assert_bits_equal(outs[1], np.where(lane + 3 <= 31, np.roll(v, -3), v).astype(np.float32), "shfl.down")
    assert_bits_equal(outs[2], v[warp * 32 + ((lane & 0x18) | 5)], "shfl.idx in 8-lane segments")
    j = lane - 2
    assert_bits_equal(outs[3], np.where(j >= (lane & 0x18), v[np.clip(warp * 32 + j, 0, n - 1)], -7),
                      "shfl.up in segments, with the predicate")
    pos = (v > 50).reshape(-1, 32)
    assert_bits_equal(outs[4], np.repeat(_ballots(pos), 32), "vote.ballot")
    al, an = pos.all(1), pos.any(1)
    assert_bits_equal(outs[5], np.repeat(al * 1 + an * 2 + (al | ~an) * 4, 32), "vote.all/any/uni")
    assert_bits_equal(outs[6], np.repeat(w.sum(1), 32), "redux.add")
    assert_bits_equal(outs[7], np.repeat(w.min(1), 32), "redux.min")
    m = (v & 3).reshape(-1, 32)
    assert_bits_equal(outs[8], np.concatenate([_ballots([row == row[k] for k in range(32)]) for row in m]),
                      "match.any")


def test_warp_ops_in_divergent_code_with_partial_member_masks():
    """Lanes 0..19 take one path and shuffle among themselves (membermask 0xfffff), the
    others another path; activemask and bar.red see exactly the threads executing them."""
    ptx = simple_kernel("partial", """
        mov.u32 %r1, %tid.x;
        and.b32 %r2, %r1, 31;
        ld.param.u64 %rd1, [buf];
        mul.wide.u32 %rd2, %r1, 4;
        add.s64 %rd3, %rd1, %rd2;
        setp.lt.u32 %p1, %r2, 20;
        @!%p1 bra $HIGH;
        shfl.sync.bfly.b32 %r3, %r1, 1, 31, 0xfffff;
        activemask.b32 %r4;
        bra.uni $JOIN;
        $HIGH:
        mul.lo.u32 %r3, %r1, 10;
        activemask.b32 %r4;
        $JOIN:
        setp.ge.u32 %p2, %r1, 48;
        bar.red.popc.u32 %r5, 0, %p2;
        add.s32 %r6, %r3, %r5;
        xor.b32 %r7, %r6, %r4;
        st.global.u32 [%rd3], %r7;
        ret;
    """)
    (out,) = launch(ptx, "partial", [np.zeros(64, np.uint32)], 1, 64)
    t = np.arange(64)
    low = (t % 32) < 20
    r3 = np.where(low, t ^ 1, t * 10)
    r4 = np.where(low, 0xFFFFF, 0xFFFFFFFF ^ 0xFFFFF)
    assert_bits_equal(out, ((r3 + 16) ^ r4).astype(np.uint32), "partial-warp shuffles, activemask, bar.red.popc")


def test_vectors_packing_warp_forms_and_debug_directives():
    """Vector loads and stores, register packing, bar.warp.sync, match.all, redux max/and,
    elect.sync, %lanemask_lt -- in a module with .file/.loc directives, block comments and
    performance directives."""
    body = """
        .loc 1 7 3
        mov.u32 %r1, %tid.x;
        ld.param.u64 %rd1, [buf];
        cvta.to.global.u64 %rd1, %rd1;
        mul.wide.u32 %rd2, %r1, 16;
        add.s64 %rd3, %rd1, %rd2;
        ld.global.nc.v4.f32 {%r2, %r3, %r4, %r5}, [%rd3];
        /* swap the halves of each pair */
        mov.b64 %rd4, {%r2, %r3};
        mov.b64 {%r6, %r7}, %rd4;
        cvt.rn.f16.f32 %h1, %r4;
        cvt.rn.f16.f32 %h2, %r5;
        mov.b32 %r8, {%h1, %h2};
        mov.b32 {%h3, %h4}, %r8;
        cvt.f32.f16 %r9, %h4;
        bar.warp.sync -1;
        and.b32 %r10, %r1, 3;
        match.all.sync.b32 %r11|%p1, %r10, -1;
        selp.u32 %r12, 1, 0, %p1;
        redux.sync.max.u32 %r13, %r1, -1;
        redux.sync.and.b32 %r14, %r1, -1;
        elect.sync %r15|%p2, -1;
        selp.u32 %r16, 1, 0, %p2;
        mov.u32 %r17, %lanemask_lt;
        popc.b32 %r18, %r17;
        add.s32 %r19, %r12, %r16;
        add.s32 %r20, %r19, %r18;
        cvt.rn.f32.u32 %r21, %r20;
        cvt.rn.f32.u32 %r22, %r13;
        cvt.rn.f32.u32 %r23, %r14;
        add.rn.f32 %r24, %r22, %r23;
        cvt.rn.f32.u32 %r25, %r15;
        add.rn.f32 %r26, %r24, %r25;
        st.global.v4.f32 [%rd3], {%r7, %r6, %r9, %r21};
        mul.wide.u32 %rd5, %r1, 8;
        add.s64 %rd6, %rd1, %rd5;
        st.global.v2.f32 [%rd6+1024], {%r26, 0f3F800000};
        ret;
    """
    text = ptx_kernel("misc", [("buf", "u64")], body, arch="sm_90")
    text = text.replace(".address_size 64\n", ".address_size 64\n.file 1 \"kernel.py\"\n// a comment\n", 1)
    text = text.replace("\n)\n{", "\n)\n.maxntid 64, 1, 1\n.minnctapersm 1\n{", 1)
    ptx = assembled(text, "sm_90")
    x = np.random.default_rng(5).standard_normal(64 * 4 + 64 * 4).astype(np.float32)
    (out,) = launch(ptx, "misc", [x.copy()], 1, 64)
    v = x[:256].reshape(64, 4)
    got = out[:256].reshape(64, 4)
    assert_bits_equal(got[:, 0], v[:, 1], "v4 load / b64 pack-unpack")
    assert_bits_equal(got[:, 1], v[:, 0], "v4 load / b64 pack-unpack")
    assert_bits_equal(got[:, 2], v[:, 3].astype(np.float16).astype(np.float32), "f16 pack-unpack")
    lane = np.arange(64) % 32
    assert_bits_equal(got[:, 3], (0 + (lane == 0) + lane).astype(np.float32), "match.all / elect / lanemask")
    side = out[256:384].reshape(64, 2)
    assert_bits_equal(side[:, 0], (np.repeat([31, 63], 32) + np.repeat([0, 32], 32)).astype(np.float32),
                      "redux.max + redux.and + elected lane 0")
    assert_bits_equal(side[:, 1], np.ones(64, np.float32), "v2 store of an immediate")


def test_vector_store_and_warp_reductions_values():
    body = """
        mov.u32 %r1, %tid.x;
        ld.param.u64 %rd1, [buf];
        mul.wide.u32 %rd2, %r1, 8;
        add.s64 %rd3, %rd1, %rd2;
        redux.sync.max.u32 %r13, %r1, -1;
        redux.sync.and.b32 %r14, %r1, -1;
        st.global.v2.u32 [%rd3], {%r13, %r14};
        ret;
    """
    ptx = assembled(ptx_kernel("red2", [("buf", "u64")], body), ARCH)
    (out,) = launch(ptx, "red2", [np.zeros(128, np.uint32)], 1, 64)
    pairs = out.reshape(64, 2)
    assert_bits_equal(pairs[:, 0], np.repeat([31, 63], 32), "redux.max")
    assert_bits_equal(pairs[:, 1], np.repeat([0, 32], 32), "redux.and")
