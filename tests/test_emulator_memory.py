"""The PTX emulator's memory: shared memory and barriers, atomics on global and shared memory
(and as compare-and-swap loops), module variables, constants, dynamic shared memory and
generic addressing, kernel parameters by value, the Device's memory API."""

from __future__ import annotations


import numpy as np
import pytest

from accy.emulator import Device, PtxError, PtxMemoryError
from accy.emulator import numerics as N


from emulator_support import (assembled, assert_bits_equal, compile_ir, forms_of, launch, ptx_kernel, simple_kernel, SREGS, WARP_DECLS, NEEDS_PTXAS)

pytestmark = NEEDS_PTXAS


BLOCKSUM = SREGS + WARP_DECLS + r'''
@buf = internal addrspace(3) global [256 x float] undef, align 4
define ptx_kernel void @blocksum(ptr addrspace(1) %out, ptr addrspace(1) %in) {
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %c = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %nt = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %base = mul i32 %c, %nt
  %g = add i32 %base, %t
  %gi = zext i32 %g to i64
  %p = getelementptr float, ptr addrspace(1) %in, i64 %gi
  %v = load float, ptr addrspace(1) %p
  %ti = zext i32 %t to i64
  %sp = getelementptr [256 x float], ptr addrspace(3) @buf, i64 0, i64 %ti
  store float %v, ptr addrspace(3) %sp
  call void @llvm.nvvm.barrier0()
  %s0 = lshr i32 %nt, 1
  br label %loop
loop:
  %s = phi i32 [%s0, %entry], [%sn, %sync]
  %more = icmp ugt i32 %s, 0
  br i1 %more, label %step, label %done
step:
  %act = icmp ult i32 %t, %s
  br i1 %act, label %add, label %sync
add:
  %o = add i32 %t, %s
  %oi = zext i32 %o to i64
  %po = getelementptr [256 x float], ptr addrspace(3) @buf, i64 0, i64 %oi
  %x = load float, ptr addrspace(3) %po
  %y = load float, ptr addrspace(3) %sp
  %z = fadd float %x, %y
  store float %z, ptr addrspace(3) %sp
  br label %sync
sync:
  call void @llvm.nvvm.barrier0()
  %sn = lshr i32 %s, 1
  br label %loop
done:
  %first = icmp eq i32 %t, 0
  br i1 %first, label %w, label %end
w:
  %r = load float, ptr addrspace(3) @buf
  %ci = zext i32 %c to i64
  %q = getelementptr float, ptr addrspace(1) %out, i64 %ci
  store float %r, ptr addrspace(1) %q
  br label %end
end:
  ret void
}
'''


def test_shared_memory_tree_reduction_with_barriers_in_a_loop():
    ptx = compile_ir(BLOCKSUM)
    assert {"bar.sync", "ld.shared.b32", "st.shared.b32"} <= forms_of(ptx)
    x = (np.arange(4 * 128) % 17).astype(np.float32)  # small integers: every order sums exactly
    (out, _) = launch(ptx, "blocksum", [np.zeros(4, np.float32), x], (4, 1, 1), (128, 1, 1))
    assert_bits_equal(out, x.reshape(4, 128).sum(1), "block sums")


ATOMICS = SREGS + WARP_DECLS + r'''
@hist_s = internal addrspace(3) global [16 x i32] undef, align 4
declare void @llvm.memset.p3.i64(ptr addrspace(3), i8, i64, i1)
define ptx_kernel void @atoms(ptr addrspace(1) %hist, ptr addrspace(1) %fsum, ptr addrspace(1) %mx,
                              ptr addrspace(1) %tickets, ptr addrspace(1) %cnt, ptr addrspace(1) %win,
                              ptr addrspace(1) %hist2, ptr addrspace(1) %xch, ptr addrspace(1) %dsum,
                              ptr addrspace(1) %in) {
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %c = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %nt = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %base = mul i32 %c, %nt
  %g = add i32 %base, %t
  %gi = zext i32 %g to i64
  %p = getelementptr i32, ptr addrspace(1) %in, i64 %gi
  %v = load i32, ptr addrspace(1) %p
  %bin = and i32 %v, 15
  %bi = zext i32 %bin to i64
  %hp = getelementptr i32, ptr addrspace(1) %hist, i64 %bi
  %o1 = atomicrmw add ptr addrspace(1) %hp, i32 1 monotonic
  %fv = sitofp i32 %v to float
  %o2 = atomicrmw fadd ptr addrspace(1) %fsum, float %fv monotonic
  %dv = sitofp i32 %v to double
  %o6 = atomicrmw fadd ptr addrspace(1) %dsum, double %dv monotonic
  %o3 = atomicrmw max ptr addrspace(1) %mx, i32 %v monotonic
  %tk = atomicrmw add ptr addrspace(1) %cnt, i32 1 monotonic
  %tp = getelementptr i32, ptr addrspace(1) %tickets, i64 %gi
  store i32 %tk, ptr addrspace(1) %tp
  %cx = cmpxchg ptr addrspace(1) %win, i32 -1, i32 %g monotonic monotonic
  %xo = atomicrmw xchg ptr addrspace(1) %xch, i32 %g monotonic
  %xp = getelementptr i32, ptr addrspace(1) %xch, i64 1
  %xs = add i32 %xo, 1
  %o7 = atomicrmw add ptr addrspace(1) %xp, i32 %xs monotonic
  %first = icmp eq i32 %t, 0
  br i1 %first, label %init, label %after
init:
  call void @llvm.memset.p3.i64(ptr addrspace(3) @hist_s, i8 0, i64 64, i1 false)
  br label %after
after:
  call void @llvm.nvvm.barrier0()
  %sp = getelementptr [16 x i32], ptr addrspace(3) @hist_s, i64 0, i64 %bi
  %o4 = atomicrmw add ptr addrspace(3) %sp, i32 1 monotonic
  call void @llvm.nvvm.barrier0()
  %small = icmp ult i32 %t, 16
  br i1 %small, label %flush, label %end
flush:
  %ti = zext i32 %t to i64
  %sq = getelementptr [16 x i32], ptr addrspace(3) @hist_s, i64 0, i64 %ti
  %hv = load i32, ptr addrspace(3) %sq
  %gq = getelementptr i32, ptr addrspace(1) %hist2, i64 %ti
  %o5 = atomicrmw add ptr addrspace(1) %gq, i32 %hv monotonic
  br label %end
end:
  ret void
}
'''


def test_atomics_on_global_and_shared_memory():
    ptx = compile_ir(ATOMICS)
    assert {"atom.global.add.u32", "atom.global.add.f32", "atom.global.add.f64", "atom.global.max.s32",
            "atom.shared.add.u32", "atom.global.exch.b32"} <= forms_of(ptx)
    assert any(f.startswith("atom.") and ".cas." in f for f in forms_of(ptx))
    n = 256
    v = np.random.default_rng(3).integers(-1000, 1000, n).astype(np.int32)
    outs = launch(ptx, "atoms", [np.zeros(16, np.int32), np.zeros(1, np.float32), np.full(1, -10 ** 6, np.int32),
                                 np.zeros(n, np.int32), np.zeros(1, np.int32), np.full(1, -1, np.int32),
                                 np.zeros(16, np.int32), np.zeros(2, np.int32), np.zeros(1, np.float64), v],
                  (2, 1, 1), (128, 1, 1))
    hist, fsum, mx, tickets, cnt, win, hist2, xch, dsum = outs[:9]
    assert_bits_equal(hist, np.bincount(v & 15, minlength=16), "global histogram")
    assert fsum[0] == v.sum() and dsum[0] == v.sum()  # small integers: exact in any order
    assert mx[0] == v.max()
    assert sorted(tickets.tolist()) == list(range(n)) and cnt[0] == n, "atomic add must hand out unique tickets"
    assert 0 <= win[0] < n, "exactly one compare-and-swap wins"
    # exchanges form a chain: the old values are 0 and every id but the last one, each once
    assert xch[1] == (n * (n - 1) // 2 - xch[0]) + n
    assert_bits_equal(hist2, np.bincount(v & 15, minlength=16), "shared histogram flushed to global")


def test_device_memory_api():
    dev = Device()
    a, b, z = dev.alloc(100), dev.alloc(64), dev.alloc(0)
    assert a and b and z and a % 256 == 0 and b % 256 == 0 and len({a, b, z}) == 3
    dev.copy_to_device(a, np.arange(25, dtype=np.int32))
    dev.copy_device(b, a + 8, 64)
    dev.memset(a, 0xFF, 4)
    out, out2 = np.empty(25, np.int32), np.empty(16, np.int32)
    dev.copy_from_device(out, a)
    dev.copy_from_device(out2, b)
    assert out[0] == -1 and (out[1:] == np.arange(1, 25)).all() and (out2 == np.arange(2, 18)).all()
    with pytest.raises(PtxMemoryError):
        dev.copy_to_device(a, np.zeros(26, np.int32))
    with pytest.raises(ValueError):
        dev.copy_from_device(np.zeros((4, 4), np.int32)[:, ::2], a)


def test_module_variables_constants_dynamic_shared_and_generic_addressing():
    """.global and .const variables with initialisers, extern (dynamic) shared memory, a local
    depot reached through cvta.local / generic loads, and generic pointers into shared."""
    extra = (".global .align 4 .u32 table[4] = {10, 20, 30, 40};\n"
             ".const .align 8 .f64 coef[2] = {0d3FF8000000000000, 0dC000000000000000};\n"
             ".extern .shared .align 16 .b8 dyn[];\n")
    ptx = simple_kernel("spaces", """
        .local .align 8 .b8 __local_depot0[16];
        .reg .b64 %SP;
        .reg .b64 %SPL;
        mov.u64 %SPL, __local_depot0;
        cvta.local.u64 %SP, %SPL;
        mov.u32 %r1, %tid.x;
        and.b32 %r2, %r1, 3;
        mul.wide.u32 %rd1, %r2, 4;
        mov.u64 %rd2, table;
        add.s64 %rd3, %rd2, %rd1;
        ld.global.u32 %r3, [%rd3];
        ld.const.f64 %rd4, [coef+8];
        cvt.rzi.s32.f64 %r4, %rd4;
        add.s32 %r5, %r3, %r4;
        st.u32 [%SP+4], %r5;
        ld.local.u32 %r6, [%SPL+4];
        mov.u32 %r7, dyn;
        shl.b32 %r8, %r1, 2;
        add.s32 %r9, %r7, %r8;
        cvt.u64.u32 %rd5, %r9;
        cvta.shared.u64 %rd6, %rd5;
        st.u32 [%rd6], %r6;
        bar.sync 0;
        xor.b32 %r10, %r1, 31;
        shl.b32 %r11, %r10, 2;
        add.s32 %r12, %r7, %r11;
        ld.shared.u32 %r13, [%r12];
        ld.param.u64 %rd7, [buf];
        mul.wide.u32 %rd8, %r1, 4;
        add.s64 %rd9, %rd7, %rd8;
        isspacep.shared %p1, %rd6;
        selp.u32 %r14, 1000, 0, %p1;
        add.s32 %r15, %r13, %r14;
        st.global.u32 [%rd9], %r15;
        ret;
    """, extra=extra)
    dev = Device()
    fn = dev.load_module(ptx).function("spaces")
    out = dev.alloc(128)
    fn.launch(1, 32, [out], shared_bytes=128)
    got = np.empty(32, np.int32)
    dev.copy_from_device(got, out)
    partner = np.arange(32) ^ 31
    assert_bits_equal(got, np.array([10, 20, 30, 40])[partner & 3] - 2 + 1000, "through every state space")
    with pytest.raises(PtxMemoryError, match="shared"):
        fn.launch(1, 32, [out], shared_bytes=64)  # too little dynamic shared memory for 32 words


def test_scalar_kernel_parameters_by_value():
    ptx = assembled(ptx_kernel("scal", [("out", "u64"), ("x", "f32"), ("k", "u32"), ("d", "s64"), ("h", "b16")], """
        ld.param.u64 %rd1, [out];
        ld.param.f32 %r1, [x];
        ld.param.u32 %r2, [k];
        ld.param.s64 %rd2, [d];
        ld.param.b16 %h1, [h];
        cvt.rn.f32.u32 %r3, %r2;
        mul.rn.f32 %r4, %r1, %r3;
        st.global.f32 [%rd1], %r4;
        st.global.s64 [%rd1+8], %rd2;
        st.global.b16 [%rd1+16], %h1;
        ret;
    """))
    dev = Device()
    fn = dev.load_module(ptx).function("scal")
    assert fn.param_types == ("u64", "f32", "u32", "s64", "b16")
    out = dev.alloc(24)
    fn.launch(1, 1, [out, np.float32(1.5), 7, -3, 0xBEEF])
    raw = dev.read(out, 18)
    assert np.frombuffer(raw[:4], np.float32)[0] == 10.5
    assert np.frombuffer(raw[8:16], np.int64)[0] == -3 and np.frombuffer(raw[16:18], np.uint16)[0] == 0xBEEF
    with pytest.raises(PtxError, match="must be an integer"):
        fn.launch(1, 1, [out, 1.0, 2.5, 0, 0])


def test_more_atomics_and_reductions():
    ptx = assembled(ptx_kernel("atomics2", [("buf", "u64")], """
        mov.u32 %r1, %tid.x;
        ld.param.u64 %rd1, [buf];
        atom.global.inc.u32 %r2, [%rd1], 9;
        atom.global.dec.u32 %r3, [%rd1+4], 100;
        cvt.u64.u32 %rd2, %r1;
        atom.global.min.u64 %rd3, [%rd1+8], %rd2;
        atom.global.cas.b64 %rd4, [%rd1+16], 0, %rd2;
        red.global.add.f32 [%rd1+24], 0f3F000000;
        red.global.or.b32 [%rd1+28], %r1;
        cvt.rn.f16.f32 %h1, 0f3F800000;
        atom.global.add.noftz.f16 %h2, [%rd1+32], %h1;
        cvt.rn.bf16.f32 %h3, 0f40000000;
        atom.global.add.noftz.bf16 %h4, [%rd1+34], %h3;
        mov.u32 %r4, sm;
        atom.shared.max.s32 %r5, [%r4], %r1;
        bar.sync 0;
        ld.shared.u32 %r6, [%r4];
        setp.eq.u32 %p1, %r1, 0;
        @%p1 st.global.u32 [%rd1+36], %r6;
        ret;
    """, arch="sm_90", extra=".shared .align 4 .b8 sm[4];\n"), "sm_90")
    init = np.zeros(40, np.uint8)
    init[4:8] = np.frombuffer(np.uint32(5).tobytes(), np.uint8)
    init[8:16] = np.frombuffer(np.uint64(2 ** 64 - 1).tobytes(), np.uint8)
    # lockstep: the lanes of one instruction take turns in thread order (which thread wins the
    # cas below depends on which warp runs first under the other schedules)
    (out,) = launch(ptx, "atomics2", [init], 1, 64, schedule="lockstep")
    raw = out.tobytes()
    u32 = lambda o: np.frombuffer(raw[o:o + 4], np.uint32)[0]
    u64 = lambda o: np.frombuffer(raw[o:o + 8], np.uint64)[0]
    assert u32(0) == 64 % 10  # inc wraps to 0 after 9
    dec = 5
    for _ in range(64):
        dec = 100 if dec == 0 or dec > 100 else dec - 1
    assert u32(4) == dec
    assert u64(8) == 0  # the minimum thread id
    assert u64(16) == 1  # thread 0 swaps 0 for 0, thread 1 still finds 0 and stores 1, then nobody matches
    assert np.frombuffer(raw[24:28], np.float32)[0] == 32.0
    assert u32(28) == 63
    assert np.frombuffer(raw[32:34], np.float16)[0] == 64.0
    assert N.bf16_to_f32(np.frombuffer(raw[34:36], np.uint16))[0] == 128.0
    assert u32(36) == 63


CAS_LOOPS = SREGS + r'''
define ptx_kernel void @casloops(ptr addrspace(1) %p, ptr addrspace(1) %in) {
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ti = zext i32 %t to i64
  %q = getelementptr float, ptr addrspace(1) %in, i64 %ti
  %f = load float, ptr addrspace(1) %q
  %o1 = atomicrmw fmax ptr addrspace(1) %p, float %f monotonic
  %p2 = getelementptr i8, ptr addrspace(1) %p, i64 4
  %o2 = atomicrmw fsub ptr addrspace(1) %p2, float 1.0 monotonic
  %p3 = getelementptr i8, ptr addrspace(1) %p, i64 8
  %h = trunc i32 %t to i16
  %o3 = atomicrmw add ptr addrspace(1) %p3, i16 %h monotonic
  %p4 = getelementptr i8, ptr addrspace(1) %p, i64 13
  %b = trunc i32 %t to i8
  %o4 = atomicrmw xchg ptr addrspace(1) %p4, i8 %b monotonic
  ret void
}
'''


def test_atomics_lowered_to_compare_and_swap_loops():
    """fmax/fsub on f32 and sub-word atomics become CAS loops in which the contending threads
    diverge and win one by one; the neighbouring bytes must be left alone."""
    ptx = compile_ir(CAS_LOOPS)
    assert any(".cas." in f for f in forms_of(ptx))
    x = np.random.default_rng(8).standard_normal(64).astype(np.float32)
    mem = np.zeros(16, np.uint8)
    mem[4:8] = np.frombuffer(np.float32(100).tobytes(), np.uint8)
    mem[10:12] = [0xAB, 0xCD]
    mem[12] = 0x11
    mem[14:16] = [0x22, 0x33]
    out, _ = launch(ptx, "casloops", [mem, x], 1, 64)
    raw = out.tobytes()
    assert np.frombuffer(raw[0:4], np.float32)[0] == max(0.0, x.max())
    assert np.frombuffer(raw[4:8], np.float32)[0] == 36.0
    assert np.frombuffer(raw[8:10], np.uint16)[0] == sum(range(64)) and raw[10:12] == b"\xab\xcd"
    assert raw[13] in range(64) and raw[12] == 0x11 and raw[14:16] == b"\x22\x33"
