"""Differential fuzzing: random well-typed programs (tests/fuzz_programs.py) run on the
NumPy interpreter, the LLVM host backend and the PTX emulator with the same arguments, and
must agree.

Each example runs once per *world* (one or two argument sets: scalar values and input
sizes, so launches computed at run time differ in size), and each run also

* runs the interpreter on the *traced* (unoptimised) graph, which must give
  bit-identical results to the optimised one (float ops are never folded), so a pass
  bug that both backends would share still shows up;
* runs the interpreter with ``memory_cap=1`` (vectorised folds one iteration per
  chunk) and the LLVM backend split over 3 host threads and, for programs that are
  in bounds by construction, with ``checks=False``: each bit-identical to its
  backend's plain run;
* replays one logical thread alone on the interpreter (as ``debug_thread`` does: every
  value 0-d, every fold a plain loop), whose elements must equal the whole launch's;
* runs on ``ptx`` (the PTX the cuda backend would launch, for the drawn arch, on the
  emulator) and, on a GPU, ``cuda``: ``ACCY_FUZZ_BACKENDS`` lists the backends
  (default ``numpy,llvm,ptx``; scripts/gpu_check.sh adds ``cuda``).  NVPTX computes the
  math functions with libdevice, so a device backend's outputs are compared where no
  math function is drawn, or in the numpy-math test (tainted outputs within tolerance);
* emits PTX for sm_80, and for a quarter of the programs sm_90 too (conftest's
  listener assembles every PTX with ptxas).

Agreement.  Every op but the inexact math functions (exp exp2 expm1 log log2 log1p
erf tanh sigmoid sin cos pow) is specified bit for bit (docs/ir.md,
accy/runtime/interpreter/numerics.py): integer and bool results, f16 and bf16 (arithmetic
rounds once from f32; math functions compute in f32 and round once), and f32/f64
add, sub, mul, div, mod, fma, sqrt, rounding, casts (and f32 rsqrt).  The math functions
differ: the interpreter computes in float64 with NumPy and rounds, the llvm host inlines
vecmath's routines (within the ulp bounds docs/ir.md states, tests/test_math_accuracy.py),
and a one-ulp difference is unbounded after a cast to an integer, a comparison or a
cancelling subtraction.  So:

* ``test_numpy_and_llvm_agree`` (the main fuzzer) and
  ``test_numpy_and_llvm_agree_on_failing_programs`` patch the interpreter's op table
  (``interpreter.EVAL``) for the test so that it computes each math function with
  vecmath's routine, JIT-compiled on its own (tests/host_math.py: f32 and f64; f16 and
  bf16 widened to f32 and rounded once, as the lowering does).  Then every output must
  agree bit for bit (NaN payloads aside).  The generator still hides possibly-constant
  arguments of math functions behind ``x + negz`` (see fuzz_programs.py), so that a
  compile-time fold can never stand in for the routine.
* ``test_numpy_and_llvm_agree_with_numpy_math`` keeps NumPy's functions and lets a
  value that depends on one flow only into ops that keep its relative error bounded
  and into stores; the outputs it reaches are compared within ``rtol=2e-2`` (two
  ulps of bf16, the coarsest type, since a tainted bf16 value may be widened before
  it is stored) and ``atol=1e-7`` (an f16 subnormal step), every other output bit for
  bit.

``test_numpy_and_llvm_agree_on_failing_programs`` draws programs whose loads may be
out of bounds and whose integer divisions may divide by zero: every run must then
fail (each backend reports the first failure it meets, so which error may differ)
or every run must succeed and agree, except that the traced graph may fail where
the optimised one runs (dead-code removal drops unused loads and divisions).

A failure prints (hypothesis ``note``) the description, the program's text form, the
arguments of each world and what each run did.  Every test here carries the ``fuzz``
marker (the quick subset, pytest's default selection, leaves them out; ``-m fuzz`` runs
them); the running and comparing both fuzzers share is tests/fuzz_scaffold.py.
"""

from __future__ import annotations

import collections
import numpy as np
import pytest
from hypothesis import given, note

import fuzz_programs
import host_math as host_math_module
from accy.runtime import bind_arguments
from accy.runtime.interpreter import simt as interpreter
from accy.codegen.machine import emit_ptx
from accy.targets import Target
from accy.dsl.ops import OPS, OpTypeError, infer
from accy.dsl.types import DTYPES
from accy.errors import AccyError

from fuzz_programs import build, make_arguments, programs
from fuzz_scaffold import (DEVICE_BACKENDS, TRACED, Outcome, backend_runs, compare, copies, failures, fuzz_examples,
                           fuzz_settings, mismatch, pairs)

# every test here fuzzes (the generator's coverage test draws 500 descriptions): not in the quick subset
pytestmark = pytest.mark.fuzz

# tolerance for outputs a NumPy math function reaches (test_numpy_and_llvm_agree_with_numpy_math)
RTOL, ATOL = 2e-2, 1e-7

# NVPTX computes these with libdevice (f32 rsqrt too, to 1.5 ulp): neither the interpreter's
# nor vecmath's bits, so a program with one is compared on a device backend only where the
# generator tracked the error (numpy math, tainted outputs within tolerance)
NVPTX_INEXACT = frozenset(fuzz_programs.INEXACT) | set(fuzz_programs.INEXACT_BINARY) | {"rsqrt"}

# -- the math functions as the LLVM host lowering computes them ----------------------------------


@pytest.fixture
def host_math(monkeypatch):
    """The interpreter computes the inexact math functions as the llvm host does (vecmath's
    routines), for this test."""
    for name in HOST_MATH:
        assert name in interpreter.EVAL and name not in interpreter.STRUCTURAL, \
            f"the interpreter's {name} moved: update the host_math patch"
        monkeypatch.setitem(interpreter.EVAL, name, host_math_module.interpreter_op(name))


# every inexact function the generator draws (atan2 too: NumPy's f64 arctan2 and vecmath's may
# differ in the last bit); f64 rsqrt: the interpreter rounds twice
HOST_MATH = (*fuzz_programs.INEXACT, *fuzz_programs.INEXACT_BINARY, "rsqrt")


# -- running and comparing (the shared part: tests/fuzz_scaffold.py) ------------------------------------


def _run_one_thread(program, args, lane):
    """The interpreter replaying one logical thread with plain loops (every value 0-d, as
    ``debug_thread`` does): that thread's own element of each output, or the AccyError."""
    graph = program.graph
    try:
        binding = bind_arguments(graph, copies(args))
        extents = program.launch(args=args).extents
        coords = np.unravel_index(lane, tuple(reversed(extents)))[::-1]  # x fastest
        buffers = {name: a.copy() for name, a in binding.flat.items()}
        thread = {name: int(c) for name, c in zip(graph.launch_op.attrs["axes"], coords)}
        interpreter.Interpreter(graph, buffers, binding.scalars, extents, thread=thread, plain=True).run()
    except AccyError as e:
        return Outcome(error=e)
    return Outcome({name: buffers[name][lane:lane + 1] for name in binding.outputs})


def check_world(desc, program, world, *, checked=True, exact_math=True):
    args = make_arguments(desc, world)
    names = [p.name for p in program.graph.params]
    note(f"world {world}: extents {desc.extent_values(world)}, arguments:\n"
         + "\n".join(f"  {n} = {a!r}" for n, a in zip(names, args)))

    runs = backend_runs(program, args, arch=desc.arch, checks_off=checked)  # unchecked: checks may fire
    # a device backend's outputs are compared only where no math function runs there (NVPTX_INEXACT)
    device_compared = not exact_math or not any(op.opcode in NVPTX_INEXACT for op in program.graph.body.walk())
    compared = lambda name: name not in DEVICE_BACKENDS or device_compared  # noqa: E731
    threads = desc.threads(world)
    lane = (desc.fill_seed * 7919) % threads if threads else None
    one = _run_one_thread(program, args, lane) if lane is not None else None

    outcomes = {name: r.describe() for name, r in runs.items()}
    note(f"world {world} outcomes:\n" + "\n".join(f"  {k}: {v}" for k, v in outcomes.items()))
    if checked:
        assert not failures(runs), f"world {world}: a valid program failed: {failures(runs)}"
    else:
        # dead-code removal may drop a failing load or division of the traced graph, so
        # the traced graph may fail where the optimised one runs, never the other way
        optimised = {r.error is None for name, r in runs.items() if name != TRACED and compared(name)}
        assert len(optimised) == 1, f"world {world}: backends disagree on failing: {outcomes}"
        traced_err = runs[TRACED].error
        assert traced_err is not None or optimised == {True}, f"the passes made a program fail: {outcomes}"
        if traced_err is not None:
            del runs[TRACED]

    # numpy vs each backend (tainted outputs within tolerance); each against its own variants bit for bit
    tainted = {fuzz_programs.output_name(j): (RTOL, ATOL) for j, t in enumerate(desc.tainted) if t}
    problems = []
    for left, right in pairs(runs, compared):
        problems += compare(names, runs, left, right, prefix=f"world {world}: ",
                            tolerance=tainted if "," not in right else None)
    # the one thread replayed alone: its elements as the whole launch computed them
    whole = runs["numpy"].outputs
    if one is not None and whole is not None:  # (if the launch failed, the thread may too)
        if one.error is not None:
            problems.append(f"world {world}: thread {lane} alone raised {one.error!r}, the whole launch ran")
        else:
            problems += [mismatch(f"world {world}: {name}: numpy vs numpy, thread {lane} alone", x[lane:lane + 1],
                                  one.outputs[name]) for name, x in zip(names, whole) if name in one.outputs]
    problems = [p for p in problems if p]
    assert not problems, "\n".join(problems)


def check_program(desc, *, checked=True, exact_math=True):
    """Build, run (in each world) and compare one description; ``checked=False`` programs
    may fail at run time, and then every run must fail."""
    note(f"description: {desc!r}")
    program = build(desc)
    note(f"program (optimised graph):\n{program.graph.text()}")
    for world in range(desc.worlds):
        check_world(desc, program, world, checked=checked, exact_math=exact_math)
    block = program.threads.block
    emit_ptx(program.graph, Target.nvptx("sm_80"), block)
    if desc.arch != "sm_80":
        emit_ptx(program.graph, Target.nvptx(desc.arch), block)


# -- the fuzzers ---------------------------------------------------------------------------------------


def test_numpy_and_llvm_agree(request, host_math):
    @fuzz_settings(request, 150, 2000, derandomize=True)
    @given(programs(exact_math=True))
    def fuzz(desc):
        check_program(desc)

    fuzz()


def test_numpy_and_llvm_agree_on_failing_programs(request, host_math):
    """Loads that may be out of bounds, divisions that may divide by zero: either every
    run fails or none does, and then they agree."""

    @fuzz_settings(request, 50, 700, derandomize=True)
    @given(programs(exact_math=True, checked=False))
    def fuzz(desc):
        check_program(desc, checked=False)

    fuzz()


def test_numpy_and_llvm_agree_with_numpy_math(request):
    @fuzz_settings(request, 40, 500, derandomize=True)
    @given(programs(exact_math=False))
    def fuzz(desc):
        check_program(desc, exact_math=False)

    fuzz()


# -- the generator reaches the whole language ------------------------------------------------------------


def _walk(node):
    """Every description node below ``node`` (attrs instances and tuples)."""
    yield node
    if isinstance(node, tuple):
        for x in node:
            yield from _walk(x)
    elif hasattr(type(node), "__attrs_attrs__"):
        for field in type(node).__attrs_attrs__:
            yield from _walk(getattr(node, field.name))


def test_generator_covers_the_language(request, monkeypatch):
    """Descriptions only (nothing is built or run): what the generator reaches.  By default
    (500 descriptions): every pointwise op and every dtype (as input, output, scalar and
    value), casts, each form of if_, fold, extent, spelling and guard.  With --fuzz-long
    (2000): every pointwise op on every operand type its type rule accepts, and at least 90%
    of the cast pairs."""
    long = fuzz_examples(request.config, 0, 1) == 1
    seen = collections.Counter()
    monkeypatch.setattr(fuzz_programs, "COVERAGE", seen)

    @fuzz_settings(request, 500, 2000, derandomize=True)
    @given(programs(exact_math=True, checked=False))
    def draw(desc):
        seen["descriptions"] += 1
        seen.update(("input", b.type) for b in desc.inputs)
        seen.update(("output", t) for t in desc.outputs)
        seen.update(("scalar", s.type) for s in desc.scalars)
        seen[("worlds", desc.worlds)] += 1
        seen[("arch", desc.arch)] += 1
        for node in _walk((desc.extents, desc.prelude, desc.statements)):
            name = type(node).__name__
            seen[("node", name)] += 1
            if name == "If":
                results = len(node.then.results)
                seen[("if", node.otherwise is not None, min(results, 2))] += 1
            if name == "Fold" and (node.stmts or any(isinstance(u, fuzz_programs.Op) for u in node.updates)):
                seen[("fold", "body statements" if node.stmts else "combine")] += 1

    draw()
    pairs = [(name, t.name) for name, opdef in OPS.items() if opdef.pointwise for t in DTYPES.values()
             if _accepts(name, opdef, t)]
    missing = [f"{name}({t})" for name, t in pairs if not seen[("op", name, t)]]
    casts = sum(1 for s in DTYPES for d in DTYPES if seen[("cast", s, d)])
    print(f"\ngenerator coverage over {fuzz_examples(request.config, 500, 2000)} descriptions: "
          f"{len(pairs) - len(missing)} of {len(pairs)} (op, operand type) pairs, {casts} of {len(DTYPES) ** 2} "
          f"cast pairs; never drawn: {missing}; drawn {seen['descriptions']}")
    if long:
        assert not missing, f"never generated: {missing}"
        assert casts >= 0.9 * len(DTYPES) ** 2, casts
    else:
        ops = {name for name, _ in pairs}
        assert ops == {key[1] for key in seen if key[0] == "op"}, ops - {key[1] for key in seen if key[0] == "op"}
        assert casts >= len(DTYPES) ** 2 // 2, casts
    for role in ("input", "output", "scalar", "value", "let"):
        assert {key[1] for key in seen if key[0] == role} == set(DTYPES), role
    nodes = ("XScalar", "XSize", "XBin", "XVia", "Fold", "FoldE", "IfS", "IfE", "Opaque", "SpanDiv", "Load",
             "LoadAffine", "LoadOwn", "LoadRaw", "IDiv", "Size", "Store", "Let")
    for feature in [("node", n) for n in nodes] + [("worlds", 2), ("arch", "sm_90"), ("fold", "combine"),
                                                     ("fold", "body statements")]:
        assert seen[feature], feature
    forms = {key[1:] for key in seen if key[0] == "if"}
    assert {(False, 0), (True, 0), (True, 1), (True, 2)} <= forms, forms
    for feature in ("operator", "ufunc", "literal") + tuple(f"guard {g}" for g in
                                                             ("max1", "select", "or1", "const", "span", "none")):
        assert seen[("feature", feature)], feature


def _accepts(name, opdef, t) -> bool:
    try:
        infer(name, [t] * opdef.arity if name != "select" else [DTYPES["bool"], t, t], {})
    except OpTypeError:
        return False
    return True
