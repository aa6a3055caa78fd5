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
accy/backends/numerics.py): integer and bool results, f16 and bf16 (arithmetic
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
arguments of each world and what each run did.
"""

from __future__ import annotations

import collections
import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings

import fuzz_programs
import host_math as host_math_module
from accy.backends import bind_arguments
from accy.backends import interpreter
from accy.backends.codegen import emit_ptx
from accy.backends.targets import Target
from accy.dsl.ops import OPS, OpTypeError, infer
from accy.dsl.types import DTYPES
from accy.errors import AccyError

from fuzz_programs import DEVICE_BACKENDS, FUZZ_BACKENDS, build, fuzz_examples, make_arguments, programs

# tolerance for outputs a NumPy math function reaches (test_numpy_and_llvm_agree_with_numpy_math)
RTOL, ATOL = 2e-2, 1e-7

# NVPTX computes these with libdevice (f32 rsqrt too, to 1.5 ulp): neither the interpreter's
# nor vecmath's bits, so a program with one is compared on a device backend only where the
# generator tracked the error (numpy math, tainted outputs within tolerance)
NVPTX_INEXACT = frozenset(fuzz_programs.INEXACT) | {"pow", "rsqrt"}

# -- the math functions as the LLVM host lowering computes them ----------------------------------


@pytest.fixture
def host_math(monkeypatch):
    """The interpreter computes the inexact math functions as the llvm host does (vecmath's
    routines), for this test."""
    for name in HOST_MATH:
        assert name in interpreter.EVAL and name not in interpreter.STRUCTURAL, \
            f"the interpreter's {name} moved: update the host_math patch"
        monkeypatch.setitem(interpreter.EVAL, name, host_math_module.interpreter_op(name))


HOST_MATH = (*fuzz_programs.INEXACT, "pow", "rsqrt")  # f64 rsqrt: the interpreter rounds twice


# -- running and comparing -----------------------------------------------------------------------------


def _fuzz_settings(request, default, long):
    return settings(
        max_examples=fuzz_examples(request.config, default, long),
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _mismatch(name, expected, got, *, tolerance=False) -> str | None:
    """None if the arrays agree, else a description of the first disagreement.

    Floats: equal bits, or both NaN (a zero's sign counts), or with ``tolerance`` within
    ``ATOL + RTOL * |expected|``; integers and bools: equal."""
    if expected.dtype.kind in "fV":
        wide_e, wide_g = expected.astype(np.float64), got.astype(np.float64)
        ok = (_bits(expected) == _bits(got)) | (np.isnan(wide_e) & np.isnan(wide_g))
        if tolerance:
            with np.errstate(all="ignore"):
                ok |= (wide_e == wide_g) | (np.abs(wide_e - wide_g) <= ATOL + RTOL * np.abs(wide_e))
    else:
        ok = expected == got
    if ok.all():
        return None
    bad = np.flatnonzero(~ok)
    i = int(bad[0])
    bits = ""
    if expected.dtype.kind in "fV":
        bits = f" (bits {int(_bits(expected)[i]):#x} vs {int(_bits(got)[i]):#x})"
    return (f"{name}: {bad.size} of {ok.size} elements differ; first at [{i}]: "
            f"{expected[i]!r} vs {got[i]!r}{bits}\n  expected {expected!r}\n  got      {got!r}")


def _copy(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def _run(program, args, backend, **options):
    """(outputs, None) or (None, the AccyError it raised)."""
    args = _copy(args)
    try:
        program.run(args, backend=backend, **options)
    except AccyError as e:
        return None, e
    return args, None


def _run_traced(program, args):
    """The interpreter on the unoptimised graph."""
    args = _copy(args)
    try:
        launch = program.launch(args=args)
        interpreter.run_graph(program.traced_graph, bind_arguments(program.traced_graph, args), launch)
    except AccyError as e:
        return None, e
    return args, None


def _run_one_thread(program, args, lane):
    """The interpreter replaying one logical thread with plain loops (every value 0-d, as
    ``debug_thread`` does): that thread's own element of each output, or the AccyError."""
    graph = program.graph
    try:
        binding = bind_arguments(graph, _copy(args))
        extents = program.launch(args=args).extents
        coords = np.unravel_index(lane, tuple(reversed(extents)))[::-1]  # x fastest
        buffers = {name: a.copy() for name, a in binding.flat.items()}
        thread = {name: int(c) for name, c in zip(graph.launch_op.attrs["axes"], coords)}
        interpreter.Interpreter(graph, buffers, binding.scalars, extents, thread=thread, plain=True).run()
    except AccyError as e:
        return None, e
    return {name: buffers[name][lane:lane + 1] for name in binding.outputs}, None


def check_world(desc, program, world, *, checked=True, exact_math=True):
    args = make_arguments(desc, world)
    names = [p.name for p in program.graph.params]
    note(f"world {world}: extents {desc.extent_values(world)}, arguments:\n"
         + "\n".join(f"  {n} = {a!r}" for n, a in zip(names, args)))

    runs = {"numpy": _run(program, args, "numpy")}
    # the unoptimised graph on the interpreter: the passes must not change any bit
    runs["numpy, traced graph"] = _run_traced(program, args)
    runs["numpy, memory_cap=1"] = _run(program, args, "numpy", memory_cap=1)  # a fold iteration per chunk
    if "llvm" in FUZZ_BACKENDS:
        runs["llvm"] = _run(program, args, "llvm")
        runs["llvm, 3 threads"] = _run(program, args, "llvm", threads=3)  # the launch split across host threads
        if checked:  # in bounds by construction: checks change nothing
            runs["llvm, checks=False"] = _run(program, args, "llvm", checks=False)
    device = {}  # device backend -> whether its outputs are compared (see NVPTX_INEXACT)
    for backend in DEVICE_BACKENDS:
        runs[backend] = _run(program, args, backend, **({"arch": desc.arch} if backend == "ptx" else {}))
        device[backend] = not exact_math or not any(op.opcode in NVPTX_INEXACT for op in program.graph.body.walk())
    threads = desc.threads(world)
    lane = (desc.fill_seed * 7919) % threads if threads else None
    one = _run_one_thread(program, args, lane) if lane is not None else None

    outcomes = {name: (f"raised {type(err).__name__}: {err}" if err is not None else "ran")
                for name, (_, err) in runs.items()}
    note(f"world {world} outcomes:\n" + "\n".join(f"  {k}: {v}" for k, v in outcomes.items()))
    if checked:
        failed = {name: err for name, (_, err) in runs.items() if err is not None}
        assert not failed, f"world {world}: a valid program failed: {failed}"
    else:
        # dead-code removal may drop a failing load or division of the traced graph, so
        # the traced graph may fail where the optimised one runs, never the other way
        optimised = {err is None for name, (_, err) in runs.items()
                     if name != "numpy, traced graph" and device.get(name, True)}
        assert len(optimised) == 1, f"world {world}: backends disagree on failing: {outcomes}"
        traced_err = runs["numpy, traced graph"][1]
        assert traced_err is not None or optimised == {True}, f"the passes made a program fail: {outcomes}"
        if traced_err is not None:
            del runs["numpy, traced graph"]

    # numpy vs llvm; each against its own variants bit for bit
    tainted = dict(zip((fuzz_programs.output_name(j) for j in range(len(desc.outputs))), desc.tainted))
    pairs = [("numpy", name, True) for name in ("llvm", *device) if name in runs and device.get(name, True)]
    pairs += [(run_name.split(",")[0], run_name, False) for run_name in runs if "," in run_name]
    problems = []
    for left, right, tolerant in pairs:
        (ref, _), (got, _) = runs[left], runs[right]
        if ref is None:
            continue
        problems += [_mismatch(f"world {world}: {name}: {left} vs {right}", x, y,
                               tolerance=tolerant and tainted.get(name, False))
                     for name, x, y in zip(names, ref, got) if isinstance(x, np.ndarray)]
    # the one thread replayed alone: its elements as the whole launch computed them
    if one is not None and runs["numpy"][0] is not None:  # (if the launch failed, the thread may too)
        if one[0] is None:
            problems.append(f"world {world}: thread {lane} alone raised {one[1]!r}, the whole launch ran")
        else:
            problems += [_mismatch(f"world {world}: {name}: numpy vs numpy, thread {lane} alone", x[lane:lane + 1],
                                   one[0][name]) for name, x in zip(names, runs["numpy"][0]) if name in one[0]]
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
    @_fuzz_settings(request, 150, 2000)
    @given(programs(exact_math=True))
    def fuzz(desc):
        check_program(desc)

    fuzz()


def test_numpy_and_llvm_agree_on_failing_programs(request, host_math):
    """Loads that may be out of bounds, divisions that may divide by zero: either every
    run fails or none does, and then they agree."""

    @_fuzz_settings(request, 50, 700)
    @given(programs(exact_math=True, checked=False))
    def fuzz(desc):
        check_program(desc, checked=False)

    fuzz()


def test_numpy_and_llvm_agree_with_numpy_math(request):
    @_fuzz_settings(request, 40, 500)
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

    @_fuzz_settings(request, 500, 2000)
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
