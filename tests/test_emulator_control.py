"""The PTX emulator's threads and control flow: thread and block indices, divergent loops that
reconverge, calls (recursive and indirect), jump tables, exit, predicated stores, grids larger
than one batch, barriers after early exits, the endless-loop guard."""

from __future__ import annotations


import numpy as np
import pytest

from accy.emulator import Device, PtxError


from emulator_support import (ARCH, assembled, assert_bits_equal, compile_ir, forms_of, HEADER, launch, ptx_kernel, simple_kernel, SREGS, WARP_DECLS, NEEDS_PTXAS)

pytestmark = NEEDS_PTXAS


def test_thread_index_mapping_3d():
    """Each thread writes its special registers at its linear position: a wrong mapping of
    (block, thread) to tid/ctaid/laneid/warpid, or x/y/z swapped, breaks the comparison."""
    names = ["tid.x", "tid.y", "tid.z", "ctaid.x", "ctaid.y", "ctaid.z", "ntid.x", "ntid.y", "ntid.z",
             "nctaid.x", "nctaid.y", "nctaid.z", "laneid", "warpid"]
    body = [f"%v{k} = call i32 @llvm.nvvm.read.ptx.sreg.{n}()" for k, n in enumerate(names)]
    body += ["%l0 = mul i32 %v2, %v7", "%l1 = add i32 %l0, %v1", "%l2 = mul i32 %l1, %v6", "%lin = add i32 %l2, %v0",
             "%b0 = mul i32 %v5, %v10", "%b1 = add i32 %b0, %v4", "%b2 = mul i32 %b1, %v9", "%blk = add i32 %b2, %v3",
             "%tpb0 = mul i32 %v6, %v7", "%tpb = mul i32 %tpb0, %v8", "%s0 = mul i32 %blk, %tpb",
             "%slot = add i32 %s0, %lin", "%si = zext i32 %slot to i64"]
    params = ", ".join(f"ptr addrspace(1) %o{k}" for k in range(len(names)))
    for k in range(len(names)):
        body += [f"%q{k} = getelementptr i32, ptr addrspace(1) %o{k}, i64 %si", f"store i32 %v{k}, ptr addrspace(1) %q{k}"]
    ir = SREGS + f"define ptx_kernel void @ids({params}) {{\n" + "\n".join("  " + x for x in body) + "\n  ret void\n}\n"
    ptx = compile_ir(ir)
    grid, block = (3, 2, 2), (5, 3, 4)
    tpb, n = 60, 60 * 12
    outs = launch(ptx, "ids", [np.full(n, -1, np.int32) for _ in names], grid, block)
    slot = np.arange(n)
    lin, blk = slot % tpb, slot // tpb
    expected = [lin % 5, (lin // 5) % 3, lin // 15, blk % 3, (blk // 3) % 2, blk // 6,
                [5] * n, [3] * n, [4] * n, [3] * n, [2] * n, [2] * n, lin % 32, lin // 32]
    for name, got, exp in zip(names, outs, expected):
        assert_bits_equal(got, np.asarray(exp, np.int32), f"%{name}")


DIVERGENT = SREGS + WARP_DECLS + r'''
define internal i32 @poly(i32 %x, i32 %k) noinline {
  %a = mul i32 %x, %x
  %b = add i32 %a, %k
  ret i32 %b
}
define internal i32 @fib(i32 %n) noinline {
entry:
  %small = icmp slt i32 %n, 2
  br i1 %small, label %base, label %rec
base:
  ret i32 %n
rec:
  %n1 = sub i32 %n, 1
  %n2 = sub i32 %n, 2
  %f1 = call i32 @fib(i32 %n1)
  %f2 = call i32 @fib(i32 %n2)
  %s = add i32 %f1, %f2
  ret i32 %s
}
define ptx_kernel void @div(ptr addrspace(1) %o0, ptr addrspace(1) %o1, ptr addrspace(1) %o2,
                            ptr addrspace(1) %o3, ptr addrspace(1) %o4, ptr addrspace(1) %in) {
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %c = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %nt = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %base = mul i32 %c, %nt
  %g = add i32 %base, %t
  %gi = zext i32 %g to i64
  %p = getelementptr i32, ptr addrspace(1) %in, i64 %gi
  %v = load volatile i32, ptr addrspace(1) %p
  %trip = urem i32 %v, 13
  %arr = alloca [16 x i32], align 4
  br label %loop
loop:
  %i = phi i32 [0, %entry], [%in1, %body]
  %acc = phi i32 [0, %entry], [%acc2, %body]
  %go = icmp ult i32 %i, %trip
  br i1 %go, label %body, label %exit
body:
  %sq = mul i32 %i, %i
  %acc2 = add i32 %acc, %sq
  %ii = zext i32 %i to i64
  %slot = getelementptr [16 x i32], ptr %arr, i64 0, i64 %ii
  store volatile i32 %acc2, ptr %slot
  %in1 = add i32 %i, 1
  br label %loop
exit:
  %all = call i32 @llvm.nvvm.vote.ballot.sync(i32 -1, i1 true)
  %q0 = getelementptr i32, ptr addrspace(1) %o0, i64 %gi
  store i32 %acc, ptr addrspace(1) %q0
  %q1 = getelementptr i32, ptr addrspace(1) %o1, i64 %gi
  store i32 %all, ptr addrspace(1) %q1
  %pk = call i32 @poly(i32 %v, i32 %t)
  %q2 = getelementptr i32, ptr addrspace(1) %o2, i64 %gi
  store i32 %pk, ptr addrspace(1) %q2
  %fn = and i32 %v, 15
  %fb = call i32 @fib(i32 %fn)
  %q3 = getelementptr i32, ptr addrspace(1) %o3, i64 %gi
  store i32 %fb, ptr addrspace(1) %q3
  %last = add i32 %trip, 15
  %idx = urem i32 %last, 16
  %ix = zext i32 %idx to i64
  %lp = getelementptr [16 x i32], ptr %arr, i64 0, i64 %ix
  %lv = load volatile i32, ptr %lp
  %hasone = icmp ugt i32 %trip, 0
  %lz = select i1 %hasone, i32 %lv, i32 0
  %q4 = getelementptr i32, ptr addrspace(1) %o4, i64 %gi
  store i32 %lz, ptr addrspace(1) %q4
  ret void
}
'''


def test_divergent_loops_reconverge_and_calls_recurse():
    """Per-thread trip counts diverge the warp; the ballot after the loop must see all 32
    lanes (it would not if the threads had not reconverged).  Then a non-inlined call, a
    recursive one (its own stack frames) and a local array indexed at run time."""
    ptx = compile_ir(DIVERGENT)
    assert {"call.uni", "st.local.b32", "ld.local.b32", "vote.sync.ballot.b32"} <= forms_of(ptx)
    n = 96
    v = np.random.default_rng(4).integers(0, 1000, n).astype(np.int32)
    outs = launch(ptx, "div", [np.zeros(n, np.int32) for _ in range(5)] + [v], (3, 1, 1), (32, 1, 1))
    trip = v % 13
    acc = np.array([sum(i * i for i in range(t)) for t in trip])
    assert_bits_equal(outs[0], acc, "per-thread loop sums")
    assert (outs[1].view(np.uint32) == 0xFFFFFFFF).all(), "the warp did not reconverge after the loop"
    assert_bits_equal(outs[2], v * v + np.arange(n) % 32, "noinline call")
    fib = [0, 1]
    for _ in range(16):
        fib.append(fib[-1] + fib[-2])
    assert_bits_equal(outs[3], np.array([fib[x & 15] for x in v]), "recursive calls")
    assert_bits_equal(outs[4], acc, "local array written in the loop, read at run-time index")


def test_barrier_waits_for_every_thread_even_when_some_exit_early():
    """Threads that exit do not count; the others meet at the barrier and see each other's
    shared-memory stores."""
    ptx = simple_kernel("early", """
        mov.u32 %r1, %tid.x;
        setp.ge.u32 %p1, %r1, 48;
        @%p1 bra $OUT;
        shl.b32 %r2, %r1, 2;
        mov.u32 %r3, sm;
        add.s32 %r4, %r3, %r2;
        st.shared.u32 [%r4], %r1;
        bar.sync 0;
        xor.b32 %r5, %r1, 1;
        shl.b32 %r6, %r5, 2;
        add.s32 %r7, %r3, %r6;
        ld.shared.u32 %r8, [%r7];
        ld.param.u64 %rd1, [buf];
        mul.wide.u32 %rd2, %r1, 4;
        add.s64 %rd3, %rd1, %rd2;
        st.global.u32 [%rd3], %r8;
        $OUT:
        ret;
    """, extra=".shared .align 4 .b8 sm[256];\n")
    (out,) = launch(ptx, "early", [np.full(64, -1, np.int32)], 1, 64)
    assert_bits_equal(out, np.r_[np.arange(48) ^ 1, np.full(16, -1)], "neighbours' values through shared memory")


INDIRECT = """
.func (.param .b32 r) twice(.param .b32 x)
{
    .reg .b32 %a<3>;
    ld.param.b32 %a1, [x];
    shl.b32 %a2, %a1, 1;
    st.param.b32 [r], %a2;
    ret;
}
.func (.param .b32 r) negate(.param .b32 x)
{
    .reg .b32 %a<3>;
    .reg .pred %q;
    ld.param.b32 %a1, [x];
    setp.eq.s32 %q, %a1, 13;
    @%q exit;
    neg.s32 %a2, %a1;
    st.param.b32 [r], %a2;
    ret;
}
"""


def test_indirect_calls_jump_tables_exit_and_predicated_stores():
    body = """
        mov.u32 %r1, %tid.x;
        ld.param.u64 %rd1, [buf];
        mul.wide.u32 %rd2, %r1, 4;
        add.s64 %rd3, %rd1, %rd2;
        and.b32 %r2, %r1, 1;
        setp.eq.u32 %p1, %r2, 0;
        mov.u64 %rd4, twice;
        mov.u64 %rd5, negate;
        selp.b64 %rd6, %rd4, %rd5, %p1;
        {
        .param .b32 a0;
        .param .b32 r0;
        st.param.b32 [a0], %r1;
        prototype_0 : .callprototype (.param .b32 _) _ (.param .b32 _);
        call (r0), %rd6, (a0), prototype_0;
        ld.param.b32 %r3, [r0];
        }
        rem.u32 %r4, %r1, 3;
        $TARGETS: .branchtargets $T0, $T1, $T2;
        brx.idx %r4, $TARGETS;
        $T0:
        add.s32 %r3, %r3, 100;
        bra.uni $JOIN;
        $T1:
        add.s32 %r3, %r3, 200;
        bra.uni $JOIN;
        $T2:
        add.s32 %r3, %r3, 300;
        $JOIN:
        setp.lt.u32 %p2, %r1, 40;
        @%p2 st.global.u32 [%rd3], %r3;
        ret;
    """
    ptx = assembled(HEADER.format(arch=ARCH) + INDIRECT + ptx_kernel("calls", [("buf", "u64")], body).split("\n", 3)[3])
    (out,) = launch(ptx, "calls", [np.full(48, -1, np.int32)], 1, 48)
    t = np.arange(48)
    value = np.where(t % 2 == 0, 2 * t, -t) + np.array([100, 200, 300])[t % 3]
    expected = np.where(t < 40, value, -1)
    expected[13] = -1  # thread 13 exits inside negate: it stores nothing
    assert_bits_equal(out, expected, "indirect calls, brx.idx, exit in a callee, predicated stores")


def test_grids_larger_than_one_batch():
    """More threads than the emulator runs at once: blocks run batch after batch."""
    ptx = simple_kernel("big", """
        mov.u32 %r1, %tid.x;
        mov.u32 %r2, %ctaid.x;
        mov.u32 %r3, %ntid.x;
        mad.lo.s32 %r4, %r2, %r3, %r1;
        ld.param.u64 %rd1, [buf];
        mul.wide.u32 %rd2, %r4, 4;
        add.s64 %rd3, %rd1, %rd2;
        mul.lo.u32 %r5, %r4, 3;
        st.global.u32 [%rd3], %r5;
        ret;
    """)
    n = 150 * 256
    (out,) = launch(ptx, "big", [np.zeros(n, np.uint32)], 150, 256)
    assert_bits_equal(out, (np.arange(n) * 3).astype(np.uint32), "40k threads")


def test_endless_loop_is_stopped():
    ptx = simple_kernel("forever", """
        $LOOP:
        bra.uni $LOOP;
    """)
    dev = Device(step_limit=1000)
    with pytest.raises(PtxError, match="endless loop"):
        dev.load_module(ptx).function("forever").launch(1, 32, [0])
