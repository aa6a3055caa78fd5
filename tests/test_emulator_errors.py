"""The PTX emulator's errors name the line, the address, the allocation and the thread:
divergent and deadlocked barriers, out-of-bounds, misaligned and freed global, shared and local
accesses, unknown instructions, traps, bad launch arguments and geometry."""

from __future__ import annotations

import re

import numpy as np
import pytest

from accy.emulator import (Device, PtxBarrierError, PtxError, PtxMemoryError, instruction_forms,
                               unsupported)
from accy.errors import AccyError


from emulator_support import (assert_bits_equal, simple_kernel, NEEDS_PTXAS)

pytestmark = NEEDS_PTXAS


def test_divergent_barrier_raises_naming_both_lines():
    ptx = simple_kernel("divbar", """
        mov.u32 %r1, %tid.x;
        setp.lt.u32 %p1, %r1, 16;
        @%p1 bra $LOW;
        bar.sync 0;
        bra.uni $END;
        $LOW:
        bar.sync 0;
        $END:
        ret;
    """)
    dev = Device()
    fn = dev.load_module(ptx).function("divbar")
    with pytest.raises(PtxBarrierError) as err:
        fn.launch((1, 1, 1), (32, 1, 1), [dev.alloc(8)])
    text = str(err.value)
    assert "different barriers" in text and text.count("bar.sync 0") >= 2
    assert re.search(r"line \d+", text) and "block (0, 0, 0)" in text
    assert isinstance(err.value, AccyError)


def test_barrier_waiting_for_a_warp_sync_deadlocks():
    ptx = simple_kernel("dead", """
        mov.u32 %r1, %tid.x;
        setp.lt.u32 %p1, %r1, 16;
        @%p1 bra $LOW;
        shfl.sync.idx.b32 %r2, %r1, 0, 31, -1;
        bra.uni $END;
        $LOW:
        bar.sync 0;
        $END:
        ret;
    """)
    dev = Device()
    with pytest.raises(PtxBarrierError, match="never"):
        dev.load_module(ptx).function("dead").launch(1, 32, [dev.alloc(8)])


OOB = """
    mov.u32 %r1, %tid.x;
    ld.param.u64 %rd1, [buf];
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    ld.global.f32 %r2, [%rd3];
    add.rn.f32 %r3, %r2, %r2;
    st.global.f32 [%rd3], %r3;
    ret;
"""


def test_out_of_bounds_global_access_names_line_address_allocation_and_thread():
    ptx = simple_kernel("oob", OOB)
    dev = Device()
    fn = dev.load_module(ptx).function("oob")
    buf = dev.alloc(32 * 4)
    dev.copy_to_device(buf, np.arange(32, dtype=np.float32))
    fn.launch(1, 32, [buf])
    out = np.empty(32, np.float32)
    dev.copy_from_device(out, buf)
    assert_bits_equal(out, 2 * np.arange(32, dtype=np.float32), "in bounds")
    with pytest.raises(PtxMemoryError) as err:
        fn.launch(1, 33, [buf])  # thread 32 reads one element past the end
    text = str(err.value)
    line = next(i for i, l in enumerate(ptx.splitlines(), 1) if "ld.global.f32" in l)
    assert f"line {line}" in text and "ld.global.f32" in text
    assert f"0x{buf + 128:x}" in text and "0 bytes past the end" in text and f"0x{buf:x}" in text
    assert "thread (32, 0, 0)" in text and "block (0, 0, 0)" in text
    assert isinstance(err.value, IndexError) and err.value.address == buf + 128


def test_misaligned_and_freed_memory_are_reported():
    ptx = simple_kernel("oob", OOB)
    dev = Device()
    fn = dev.load_module(ptx).function("oob")
    buf = dev.alloc(256)
    with pytest.raises(PtxMemoryError, match="misaligned"):
        fn.launch(1, 4, [buf + 2])
    dev.free(buf)
    with pytest.raises(PtxMemoryError, match="freed allocation"):
        fn.launch(1, 4, [buf])


def test_shared_out_of_bounds_is_reported():
    ptx = simple_kernel("soob", """
        mov.u32 %r1, %tid.x;
        shl.b32 %r2, %r1, 2;
        mov.u32 %r3, sm;
        add.s32 %r4, %r3, %r2;
        st.shared.u32 [%r4], %r1;
        ret;
    """, extra=".shared .align 4 .b8 sm[64];\n")
    dev = Device()
    fn = dev.load_module(ptx).function("soob")
    fn.launch(1, 16, [0])
    with pytest.raises(PtxMemoryError, match=r"out-of-bounds shared store .* 64 bytes of shared memory") as err:
        fn.launch(1, 17, [0])
    assert "thread (16, 0, 0)" in str(err.value)


def test_unknown_instruction_is_an_error_naming_its_form_and_line():
    ptx = simple_kernel("unk", """
        mov.u32 %r1, sm;
        mbarrier.arrive_drop.shared.b64 _, [%r1];
        ret;
    """, extra=".shared .align 8 .b8 sm[8];\n")
    assert unsupported(instruction_forms(ptx)) == {"mbarrier.arrive_drop.shared.b64"}
    with pytest.raises(PtxError, match=r"mbarrier\.arrive_drop\.shared\.b64") as err:
        Device().load_module(ptx)
    line = next(i for i, l in enumerate(ptx.splitlines(), 1) if "mbarrier" in l)
    assert f"line {line}" in str(err.value)


def test_trap_names_the_thread():
    ptx = simple_kernel("trapper", """
        mov.u32 %r1, %tid.x;
        setp.eq.u32 %p1, %r1, 5;
        @%p1 trap;
        ret;
    """)
    dev = Device()
    with pytest.raises(PtxError, match=r"trap executed[\s\S]*thread \(5, 0, 0\)"):
        dev.load_module(ptx).function("trapper").launch(1, 8, [dev.alloc(8)])


def test_launch_checks_arguments_and_geometry():
    ptx = simple_kernel("oob", OOB)
    dev = Device()
    fn = dev.load_module(ptx).function("oob")
    assert fn.param_types == ("u64",)
    with pytest.raises(PtxError, match="takes 1 arguments"):
        fn.launch(1, 1, [])
    with pytest.raises(PtxError, match="2048 threads, over 1024"):
        fn.launch(1, (64, 32, 1), [dev.alloc(8)])
    with pytest.raises(PtxError, match="no kernel entry"):
        dev.load_module(ptx).function("nope")
    assert dev.load_module(ptx) is dev.load_module(ptx)  # prepared once per text


def test_local_memory_is_checked():
    ptx = simple_kernel("loc", """
        .local .align 4 .b8 __local_depot0[16];
        .reg .b64 %SPL;
        mov.u64 %SPL, __local_depot0;
        mov.u32 %r1, %tid.x;
        mul.wide.u32 %rd1, %r1, 4;
        add.s64 %rd2, %SPL, %rd1;
        st.local.u32 [%rd2], %r1;
        ret;
    """)
    dev = Device()
    fn = dev.load_module(ptx).function("loc")
    fn.launch(1, 4, [0])
    with pytest.raises(PtxMemoryError, match=r"out-of-bounds local store[\s\S]*thread \(4, 0, 0\)"):
        fn.launch(1, 5, [0])
