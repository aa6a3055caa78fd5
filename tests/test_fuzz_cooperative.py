"""Differential fuzzing of cooperative (block-level) kernels: random race-free programs
(tests/fuzz_cooperative.py: shared memory, barriers, atomics, shuffles, warp and block
reductions under uniform loops and branches) run on every CPU backend, which must agree
bit for bit; and the same programs with one planted bug, which the race detector must catch
(and, for a race, the PTX emulator's race checker on the program's PTX).

Each program runs on

* ``numpy`` with ``check_memory=True`` (the race detector: every program is race-free by
  construction, so a report is a bug in the generator or in the detector);
* ``numpy`` on the *traced* (unoptimised) graph, through ``interpreter.run_graph``: the
  passes must not change a bit (docs/ir.md);
* ``numpy`` with ``memory_cap=1`` (vectorised folds one iteration per chunk);
* ``llvm`` (each block on one host thread, its threads as loops split at barriers and
  shuffles), ``llvm`` with ``threads=3`` (blocks spread over host threads, so global
  atomics really are concurrent) and ``llvm`` with ``checks=False`` (every access is in
  bounds by construction, so dropping the bounds checks changes nothing);
* ``ptx``: the PTX the cuda backend would launch for the drawn ``arch`` (sm_75, sm_80 or
  sm_90: atomics lower differently), on accy's emulator (conftest's listener assembles it
  with ptxas);
* ``cuda`` on a GPU.  ``ACCY_FUZZ_BACKENDS`` (tests/fuzz_scaffold.py) chooses among llvm,
  ptx and cuda (default ``numpy,llvm,ptx``).

Tolerance: none (see the generator's docstring): every output, atomics' targets included,
must be bit-identical across the runs, with any NaN equal to any NaN and the sign of zero
counted.

``--fuzz-long`` runs many more examples; the three fuzzers carry the ``fuzz`` marker
(the quick subset, pytest's default selection, leaves them out; the deterministic tests stay in).
"""

from __future__ import annotations

import numpy as np
import pytest
from fuzz_cooperative import (
    Arith,
    Atomic,
    CoopProgram,
    Exchange,
    GridAxis,
    Lin,
    Loop,
    Operand,
    Reduce,
    Shape,
    Shuffle,
    Trips,
    bug_sites,
    build,
    make_arguments,
    params_of,
    planted_programs,
    programs,
)
from fuzz_scaffold import backend_runs, compare, copies, failures, fuzz_settings, pairs, run_traced
from hypothesis import given, note

from accy import axis, bf16, dynamic_buffer, f16, kernel
from accy.errors import RaceError, UninitializedError

ERRORS = {"RaceError": RaceError, "UninitializedError": UninitializedError}


def check_program(desc: CoopProgram, log=note) -> None:
    """Run ``desc`` on every backend; all must succeed and agree bit for bit.  ``log`` is
    hypothesis's ``note`` (printed for the failing example) or ``print`` outside hypothesis."""
    log(f"description: {desc!r}")
    program = build(desc)
    log(f"program (optimised graph):\n{program.graph.text()}")
    args = make_arguments(desc)
    names = list(params_of(desc))
    runs = backend_runs(program, args, arch=desc.arch)  # in bounds by construction: checks=False too
    assert not failures(runs), f"a race-free, in-bounds program failed: {failures(runs)}"
    problems = [p for left, right in pairs(runs) for p in compare(names, runs, left, right)]
    assert not problems, "\n".join(problems)


@pytest.mark.fuzz
def test_backends_agree_on_cooperative_programs(request):
    @fuzz_settings(request, 40, 1000)
    @given(programs())
    def fuzz(desc):
        check_program(desc)

    fuzz()


@pytest.mark.fuzz
def test_backends_agree_on_warp_programs(request):
    """Blocks of whole warps, so shuffles and reductions are drawn often."""
    @fuzz_settings(request, 20, 500)
    @given(programs(warps=True))
    def fuzz(desc):
        check_program(desc)

    fuzz()


def test_a_contracted_product_is_held_to_the_unfused_run_not_the_traced_graph():
    """Found by the fuzzer: x times a wide integer from shared memory plus another, contracted
    to one fma, differs from the traced graph's two roundings in the last bit; the traced graph
    is compared with the optimised graph run without contraction (its bits), the fused run with
    every backend."""
    desc = CoopProgram(
        shape=Shape(grid=(GridAxis(extent=1, source="static", per=1, slack=0),), threads=(32,)),
        stages=(Exchange(space="shared", dtype="f32", source="i", read=Lin(terms=(("t", -1),), const=31), into="f",
                         combine="mul", offset=0, pad=0),
                Arith(target="f", op="add", operand=Operand(kind="i", const=0, lin=None), swap=False),
                Arith(target="f", op="add", operand=Operand(kind="f", const=0, lin=None), swap=False)),
        trips=0, flag=False, seed=0, floats="ints", ints="wide", arch="sm_75")
    assert any(op.opcode == "fma" for op in build(desc).graph.body.walk())
    check_program(desc, log=lambda *_: None)


@pytest.mark.fuzz
def test_the_race_detector_catches_planted_bugs(request):
    @fuzz_settings(request, 60, 1500)
    @given(planted_programs())
    def fuzz(planted):
        note(f"bug: {planted.bug!r}, expecting {planted.expect}")
        note(f"description: {planted.program!r}")
        program = build(planted.program, planted.bug)
        note(f"program with the bug (optimised graph):\n{program.graph.text()}")
        args = make_arguments(planted.program, planted.bug)
        with pytest.raises(ERRORS[planted.expect]):
            program.run(copies(args), backend="numpy", check_memory=True)
        assert isinstance(run_traced(program, args).error, ERRORS[planted.expect]), "the traced graph hid the bug"
        if planted.expect == "RaceError":  # the emulator's race checker sees it in the PTX too
            with pytest.raises(RaceError):
                program.run(copies(args), backend="ptx", arch=planted.program.arch)

    fuzz()


# -- the generator itself ---------------------------------------------------------------------------------


def test_a_hand_written_description_covers_every_stage_and_agrees():
    """One description with each kind of stage, so a generator change that breaks a
    builder fails here plainly, before any fuzzing."""
    shape = Shape((GridAxis(2, "scalar"), GridAxis(2, "size", 3, 1)), (16, 4))
    rev = Lin((("t", -1),), 63)
    stages = (
        Arith("f", "mul", Operand("const", 2.0)),
        Exchange("shared", "f32", "f", rev, "f", "add", 1, 1),
        Exchange("global", "i32", "i", Lin((("t", 1),), 1), "i", "xor"),
        Shuffle("xor", "f32", "f", "f", "max", 5),
        Reduce("block", "sum", "i32", "i", "i", "add"),
        Loop(Trips("block", 3, Lin((("b", 1),), 1)), (Exchange("shared", "u32", "i", Lin((("t", 1),), 32), "i", "add"),)),
        Atomic("global", "add", "f32", 3, Lin((("g", 1),)), "i", 0.0, False),
        Atomic("shared", "max", "i64", 7, Lin((("t", 5),)), "i", -50, False, read=Lin((("t", 1),))),
        Atomic("global", "cas", "i32", 5, Lin((("t", 1),)), "i", -1, False),
    )
    desc = CoopProgram(shape, stages, trips=2, flag=True, seed=7, floats="ints")
    check_program(desc, log=print)
    assert {b.kind for b, _ in bug_sites(desc)} == {"racy_store", "drop_barrier", "read_first", "plain_atomic"}


# -- bugs the fuzzer found -------------------------------------------------------------------------------
# A 16-bit atomic add was a CAS loop on the aligned 32-bit word (LLVM widens a 16-bit cmpxchg),
# which reached 2 bytes past the end of an odd-length buffer (PtxMemoryError on the ptx backend).
# Fixed: atom.add.noftz.f16 (sm_75+: PTX 6.3) and .bf16 (sm_90+), else a loop of atom.cas.b16.


@pytest.mark.parametrize("dtype", [f16, bf16], ids=str)
def test_f16_atomic_add_on_the_last_element_of_an_odd_length_buffer(dtype):
    @kernel(out=dynamic_buffer(dtype), x=dynamic_buffer(dtype))
    def accumulate(k, a):
        @k.for_each_1d(axis("i", a.x.size))
        def each(inner, idx):
            inner.atomic_add(a.out, idx["i"], a.x[idx["i"]])

    for arch in ("sm_75", "sm_80", "sm_90"):
        out, x = np.zeros(5, dtype.numpy), np.ones(5, dtype.numpy)
        accumulate.run([out, x], backend="ptx", arch=arch)
        np.testing.assert_array_equal(out, x)
