"""The SASS counter (accy/codegen/nvptx/sass.py): a listing's functions, its main loop and
the trip an in-bounds program takes through it, on listings written by hand and on a small
kernel whose loop is known by hand, assembled by ptxas and disassembled by nvdisasm."""

from __future__ import annotations

import pytest

from accy.codegen.nvptx import toolchain
from accy.codegen.nvptx.sass import Kind, disassemble, find_nvdisasm, main_loop, parse

HEADER = """\
//--------------------- .text.k             --------------------------
        .section        .text.k,"ax",@progbits
k:
.text.k:
"""


def listing(body: str) -> str:
    """A one-function listing from lines of ``OPCODE operands`` and ``.L_x_N:`` labels."""
    lines, address = [HEADER], 0
    for line in body.strip().splitlines():
        line = line.strip()
        if line.endswith(":"):
            lines.append(line + "\n")
        else:
            lines.append(f"        /*{address:04x}*/                   {line} ;\n")
            address += 16
    return "".join(lines)


def test_a_trip_skips_the_report_and_takes_the_prefetch():
    # head: 3 hot; a failed check's report (cold: 3, with the CAS); a prefetch the trip takes
    # (its two copies) beside a branch around it; the latch; padding never counted
    text = listing("""
        MOV R0, RZ
    .L_x_1:
        ISETP.GE.U32.AND P0, PT, R0, c[0x0][0x170], PT
        HMMA.16816.F32.BF16 R4, R8, R12, R4
        @!P0 BRA `(.L_x_2)
        MOV R20, c[0x0][0x168]
        ATOMG.E.CAS.64.STRONG.GPU PT, RZ, [R20], R8, R10
        MOV R21, RZ
    .L_x_2:
        ISETP.GE.AND P1, PT, R0, 0x10, PT
        @P1 BRA `(.L_x_3)
        LDGSTS.E.BYPASS.128 [R2], [R22.64]
        LDGSTS.E.BYPASS.128 [R2+0x10], [R22.64+0x10]
    .L_x_3:
        LDGDEPBAR
        NOP
        @!PT LDS RZ, [RZ]
        @!UPT UIADD3 URZ, URZ, URZ, URZ
        IADD3 R0, R0, 0x1, RZ
        BAR.SYNC.DEFER_BLOCKING 0x0
        @!P2 BRA `(.L_x_1)
        EXIT
    .L_x_4:
        BRA `(.L_x_4)
        NOP
    """)
    (fn,) = parse(text)
    assert fn.name == "k" and len(fn.instructions) == 21
    trip = main_loop(fn)
    opcodes = [i.base for i in trip.path]
    assert opcodes == ["ISETP", "HMMA", "BRA", "ISETP", "BRA", "LDGSTS", "LDGSTS", "LDGDEPBAR", "IADD3", "BAR", "BRA"]
    assert trip.count == 11 and trip.tensor == 1 and trip.loop_size == 14 and trip.forks == 1
    assert trip.mix() == {Kind.TENSOR: 1, Kind.ASYNC_COPY: 3, Kind.BARRIER: 1, Kind.INTEGER: 1,
                          Kind.PREDICATE: 2, Kind.BRANCH: 3}


def test_the_main_loop_is_the_one_with_the_tensor_work():
    text = listing("""
    .L_x_1:
        IADD3 R0, R0, 0x1, RZ
        IADD3 R1, R1, 0x1, RZ
        IADD3 R2, R2, 0x1, RZ
        @P0 BRA `(.L_x_1)
    .L_x_2:
        HMMA.16816.F32.BF16 R4, R8, R12, R4
        @P1 BRA `(.L_x_2)
        EXIT
    """)
    trip = main_loop(parse(text)[0])
    assert [i.base for i in trip.path] == ["HMMA", "BRA"]


def test_a_function_with_no_loop_has_no_trip():
    assert main_loop(parse(listing("MOV R0, RZ\nEXIT"))[0]) is None


# A loop known by hand: per trip one bounds check (a report on failure, out of line), one load,
# one add and the loop's own increment, compare and branch.
COUNTED = """\
.version 7.0
.target sm_80
.address_size 64

.visible .entry counted(.param .u64 x, .param .u64 status, .param .u32 n)
{
    .reg .pred %p<4>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<8>;
    .reg .f32 %f<4>;
    ld.param.u64 %rd1, [x];
    ld.param.u64 %rd2, [status];
    ld.param.u32 %r1, [n];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    mov.u32 %r2, 0;
    mov.f32 %f1, 0f00000000;
LOOP:
    .pragma "nounroll";
    setp.ge.u32 %p1, %r2, 1000000;
    @%p1 bra REPORT;
BACK:
    mul.wide.u32 %rd3, %r2, 4;
    add.s64 %rd4, %rd1, %rd3;
    ld.global.f32 %f2, [%rd4];
    add.f32 %f1, %f1, %f2;
    add.u32 %r2, %r2, 1;
    setp.lt.u32 %p2, %r2, %r1;
    @%p2 bra LOOP;
    st.global.f32 [%rd1], %f1;
    ret;
REPORT:
    atom.global.cas.b64 %rd5, [%rd2], 0, 1;
    bra BACK;
}
"""


@pytest.mark.skipif(find_nvdisasm() is None or toolchain.find_ptxas() is None,
                    reason="needs ptxas and nvdisasm: pip install nvidia-cuda-nvcc nvidia-cuda-nvdisasm "
                           "(the test extra does)")
def test_a_loop_known_by_hand_counts_its_hot_path():
    (fn,) = parse(disassemble(toolchain.assemble(COUNTED, "sm_80")))
    assert fn.name == "counted"
    trip = main_loop(fn)
    kinds = [i.base for i in trip.path]
    # ptxas's choice of address arithmetic may vary; the work of a trip may not
    assert kinds.count("LDG") == 1 and kinds.count("FADD") == 1 and "ATOMG" not in kinds
    assert kinds.count("ISETP") == 2 and kinds.count("BRA") == 2 and kinds[-1] == "BRA"
    assert trip.count <= 10, kinds  # 9 with CUDA 13.5's ptxas: the 7 PTX instructions, the address in 2
    assert trip.loop_size > trip.count  # the report, out of the path, is in the loop's body
    assert all(not i.padding for i in trip.path)


def test_the_same_loop_in_ptx_has_its_seven_statements_and_two_branches():
    from accy.codegen.nvptx.sass import parse_ptx

    (fn,) = parse_ptx(COUNTED)
    trip = main_loop(fn)
    assert [i.opcode for i in trip.path] == ["setp.ge.u32", "bra", "mul.wide.u32", "add.s64", "ld.global.f32",
                                             "add.f32", "add.u32", "setp.lt.u32", "bra"]
    assert trip.loop_size == 11  # the report (atom.cas, bra) is in the loop's body, off the path
    assert trip.mix()[Kind.GLOBAL] == 1 and trip.mix()[Kind.FLOAT] == 1


def test_a_latch_placed_before_its_head_is_still_the_loop():
    """LLVM may place a loop's latch block before its head: the loop is found by the back edge
    of a depth-first search, not by addresses."""
    text = listing("""
        BRA `(.L_x_1)
    .L_x_2:
        HMMA.16816.F32.BF16 R4, R8, R12, R4
        @P0 BRA `(.L_x_1)
        EXIT
    .L_x_1:
        LDSM.16.M88.4 R8, [R2]
        BRA `(.L_x_2)
    """)
    trip = main_loop(parse(text)[0])
    assert [i.base for i in trip.path] == ["LDSM", "BRA", "HMMA", "BRA"]


@pytest.mark.skipif(toolchain.find_ptxas() is None, reason="needs ptxas: pip install nvidia-cuda-nvcc")
def test_accy_profile_reports_a_trip_in_ptx_and_sass():
    import sys
    from pathlib import Path

    import numpy as np

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    from tile_matmul import make_matmul

    from accy import bf16

    program = make_matmul(bf16, 64, 64, 32, warps=4, num_stages=2)
    a, b = np.ones((64, 96), bf16.numpy), np.ones((96, 64), bf16.numpy)
    loop = program.profile([np.zeros((64, 64), np.float32), a, b], arch="sm_80").loop
    assert loop.mma_units == 16  # 64 x 64 x 32 on 4 warps: 16 m16n8k16 products per warp and trip
    assert loop.ptx > loop.mma_units
    if find_nvdisasm() is not None:
        assert loop.sass > loop.mma_units and "SASS" in loop.describe()


def test_a_prefetch_by_plain_loads_is_taken_and_a_vector_load_beats_its_elements():
    """Where no side of a fork has tensor, ldmatrix or cp.async work (a Triton-style masked
    load copies element by element), the side that moves the most bytes is the steady state's
    (a prefetch, not the branch around it); of sides moving as many, the shorter (one 16-byte
    load, not eight 2-byte ones)."""
    text = listing("""
    .L_x_1:
        @P0 BRA `(.L_x_2)
        LDG.E.U16 R4, [R2.64]
        STS.U16 [R3], R4
    .L_x_2:
        @P1 BRA `(.L_x_3)
        LDG.E.128 R4, [R2.64]
        BRA `(.L_x_4)
    .L_x_3:
        LDG.E.U16 R4, [R2.64]
        LDG.E.U16 R5, [R2.64+0x2]
        LDG.E.U16 R6, [R2.64+0x4]
        LDG.E.U16 R7, [R2.64+0x6]
        LDG.E.U16 R8, [R2.64+0x8]
        LDG.E.U16 R9, [R2.64+0xa]
        LDG.E.U16 R10, [R2.64+0xc]
        LDG.E.U16 R11, [R2.64+0xe]
    .L_x_4:
        HMMA.16816.F32.BF16 R12, R8, R12, R12
        @P2 BRA `(.L_x_1)
        EXIT
    """)
    trip = main_loop(parse(text)[0])
    assert [i.base for i in trip.path] == ["BRA", "LDG", "STS", "BRA", "LDG", "BRA", "HMMA", "BRA"]
    assert [i.bytes for i in trip.path if i.base in ("LDG", "STS")] == [2, 2, 16]


@pytest.mark.full
def test_the_bench_sets_tritons_ptx_on_the_same_emulator_beside_accys():
    """bench.sass's yardstick for issue 32's estimates: Triton's sm_80 PTX for a job, launched on
    accy's emulator at the issue's size and priced by the same H200 model (zeros in: the counts
    do not depend on them)."""
    pytest.importorskip("triton")
    import sys as _sys

    root = str(__import__("pathlib").Path(__file__).resolve().parent.parent)
    if root not in _sys.path:
        _sys.path.append(root)
    from bench import sass

    (job,) = [j for j in sass.JOBS if j.name.startswith("attention hd 64")]
    theirs = sass.triton_estimate(job)
    assert isinstance(theirs, float) and 100 < theirs < 400
