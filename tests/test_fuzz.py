"""Differential fuzzing: random well-typed programs (tests/fuzz_programs.py) run on the
NumPy interpreter and on the LLVM host backend with the same inputs, and must agree.

Each example also

* runs the interpreter on the *traced* (unoptimised) graph, which must give
  bit-identical results to the optimised one (docs/ir.md: float ops are never
  folded), so a pass bug that both backends would share still shows up;
* runs the interpreter with ``memory_cap=1`` (vectorised folds one iteration per
  chunk) and the LLVM backend split over 3 host threads and, for programs that are
  in bounds by construction, with ``checks=False``: each bit-identical to its
  backend's plain run;
* emits PTX for sm_80 (conftest's listener assembles it with ptxas).

Tolerance.  Apart from ``exp`` every op is IEEE-exact (add, sub, mul, div, sqrt are
correctly rounded; max, min, neg, select, casts and comparisons are exact) and LLVM
contracts nothing without fast-math flags, so the two backends should agree bit for
bit.  ``exp`` is the exception: NumPy's float32 ``exp`` and the libm ``expf`` that
LLVM's ``llvm.exp.f32`` calls differ by up to 2 ulps on about a third of all inputs
(measured on 3M inputs), and a difference of one ulp is unbounded after a cast to
index, a comparison, a cancelling subtraction or another ``exp``.  So:

* ``test_numpy_and_llvm_agree`` (the main fuzzer) and
  ``test_numpy_and_llvm_agree_on_failing_programs`` make the interpreter compute
  ``exp`` with the same libm ``expf`` (by patching its op table for the test), and
  then allow ``exp`` anywhere;
* ``test_numpy_and_llvm_agree_with_numpy_exp`` keeps NumPy's ``exp`` and only lets
  a value that depends on an ``exp`` flow into ops that do not amplify its relative
  error (neg, max, min, sqrt, select branches) and into stores, so it stays within
  2 ulps (2.4e-7 relative) of the other backend's.

numpy vs llvm compares f32 outputs as equal where they are equal or both NaN (a
zero's sign counts: -0.0 and 0.0 differ, as 1/x would show), and otherwise within
``|a - b| <= atol + rtol * |a|`` with rtol=1e-5, atol=1e-6: far above the 2-ulp bound
above (1e-5 is about 170 ulps), the absolute term covering results that underflow to
subnormals, where one ulp is a large relative error.  With the shared ``expf`` the
backends in practice agree bit for bit; the tolerance only absorbs the rare ``exp``
of a constant that LLVM folds at compile time (in double precision, which differs
from ``expf`` in about 4e-4 of inputs).  Index outputs must be equal.

``test_numpy_and_llvm_agree_on_failing_programs`` draws programs whose loads may be
out of bounds and whose index divisions may divide by zero: every run must then
fail (each backend reports the first failure it meets, so which error may differ)
or every run must succeed and agree, except that the traced graph may fail where
the optimised one runs (dead-code removal drops unused loads and divisions).
"""

from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np
from hypothesis import HealthCheck, given, note, settings

from accy.backends import bind_arguments
from accy.backends import interpreter
from accy.backends.codegen import emit_ptx
from accy.backends.llvm import Target
from accy.errors import AccyError

from fuzz_programs import build, fuzz_examples, make_arguments, programs

RTOL, ATOL = 1e-5, 1e-6

_libm = ctypes.CDLL(ctypes.util.find_library("m"))
_libm.expf.restype = ctypes.c_float
_libm.expf.argtypes = [ctypes.c_float]


def libm_exp(x):
    """float32 exp computed element by element with libm's expf (what LLVM calls)."""
    x = np.asarray(x, np.float32)
    unique, inverse = np.unique(x.reshape(-1), return_inverse=True)
    out = np.array([_libm.expf(float(v)) for v in unique], np.float32)[inverse].reshape(x.shape)
    return out[()] if out.ndim == 0 else out


def _fuzz_settings(request, default, long):
    return settings(
        max_examples=fuzz_examples(request.config, default, long),
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


def _mismatch(name, expected, got, *, rtol, atol) -> str | None:
    """None if the arrays agree, else a description of the first disagreement.

    f32: equal bits up to NaN payloads (a zero's sign counts), or, with rtol/atol > 0,
    within ``atol + rtol * |expected|`` of each other; index: equal."""
    if expected.dtype.kind == "f":
        both_nan = np.isnan(expected) & np.isnan(got)
        with np.errstate(all="ignore"):
            equal = (expected == got) & (np.signbit(expected) == np.signbit(got))
            wide = expected.astype(np.float64)
            close = (expected != got) & (np.abs(wide - got) <= atol + rtol * np.abs(wide))
        ok = both_nan | equal | close
    else:
        ok = expected == got
    if ok.all():
        return None
    bad = np.flatnonzero(~ok)
    i = int(bad[0])
    return (f"{name}: {bad.size} of {ok.size} elements differ; first at [{i}]: "
            f"{expected[i]!r} vs {got[i]!r}\n  expected {expected!r}\n  got      {got!r}")


def _run(program, args, backend, **options):
    """(outputs, None) or (None, the AccyError it raised)."""
    args = [a.copy() for a in args]
    try:
        program.run(args, backend=backend, **options)
    except AccyError as e:
        return None, e
    return args, None


def _run_traced(program, args):
    """The interpreter on the unoptimised graph."""
    args = [a.copy() for a in args]
    try:
        interpreter.run_graph(program.traced_graph, bind_arguments(program.traced_graph, args), program.launch())
    except AccyError as e:
        return None, e
    return args, None


def _options(backend):
    """The options ``run`` takes for ``backend`` (none known if accy has no table)."""
    from accy import backends

    return backends.get_backend(backend).options


def check_program(desc, *, rtol=RTOL, atol=ATOL, checked=True):
    """Build, run and compare one description; ``checked=False`` programs may fail at
    run time, and then every run must fail (each backend reports the first failure it
    meets, so which one may differ)."""
    note(f"description: {desc!r}")
    program = build(desc)
    note(f"program (optimised graph):\n{program.graph.text()}")
    args = make_arguments(desc)
    names = [p.name for p in program.graph.params]
    note("arguments:\n" + "\n".join(f"  {n} = {a!r}" for n, a in zip(names, args)))

    runs = {"numpy": _run(program, args, "numpy"), "llvm": _run(program, args, "llvm")}
    # the unoptimised graph on the interpreter: the passes must not change any bit
    runs["numpy, traced graph"] = _run_traced(program, args)
    if "memory_cap" in _options("numpy"):  # vectorised folds one iteration per chunk
        runs["numpy, memory_cap=1"] = _run(program, args, "numpy", memory_cap=1)
    options = _options("llvm")
    if "threads" in options:  # the launch split across host threads
        runs["llvm, 3 threads"] = _run(program, args, "llvm", threads=3)
    if checked and "checks" in options:  # in bounds by construction: checks change nothing
        runs["llvm, checks=False"] = _run(program, args, "llvm", checks=False)

    outcomes = {name: (f"raised {type(err).__name__}: {err}" if err is not None else "ran")
                for name, (_, err) in runs.items()}
    note("outcomes:\n" + "\n".join(f"  {k}: {v}" for k, v in outcomes.items()))
    if checked:
        failed = {name: err for name, (_, err) in runs.items() if err is not None}
        assert not failed, f"a valid program failed: {failed}"
    else:
        # dead-code removal may drop a failing load or division of the traced graph, so
        # the traced graph may fail where the optimised one runs, never the other way
        optimised = {err is None for name, (_, err) in runs.items() if name != "numpy, traced graph"}
        assert len(optimised) == 1, f"backends disagree on failing: {outcomes}"
        traced_err = runs["numpy, traced graph"][1]
        assert traced_err is not None or optimised == {True}, f"the passes made a program fail: {outcomes}"
        if traced_err is not None:
            del runs["numpy, traced graph"]

    # numpy vs llvm within the tolerance; each against its own variants bit for bit
    pairs = [("numpy", "llvm", rtol, atol)] + [
        (run_name.split(",")[0], run_name, 0.0, 0.0) for run_name in runs if "," in run_name]
    problems = []
    for left, right, rt, at in pairs:
        (ref, _), (got, _) = runs[left], runs[right]
        if ref is None:
            continue
        problems += [_mismatch(f"{name}: {left} vs {right}", x, y, rtol=rt, atol=at)
                     for name, x, y in zip(names, ref, got)]
    problems = [p for p in problems if p]
    assert not problems, "\n".join(problems)

    emit_ptx(program.graph, Target.nvptx("sm_80"), program.launch().block)


def test_numpy_and_llvm_agree(request, monkeypatch):
    assert "exp" in interpreter.EVAL and "exp" not in interpreter.STRUCTURAL, \
        "the interpreter's exp moved: update libm_exp's patch"
    monkeypatch.setitem(interpreter.EVAL, "exp", libm_exp)

    @_fuzz_settings(request, 150, 2000)
    @given(programs(exact_exp=True))
    def fuzz(desc):
        check_program(desc)

    fuzz()


def test_numpy_and_llvm_agree_on_failing_programs(request, monkeypatch):
    """Loads that may be out of bounds, divisions that may divide by zero: either every
    run fails or none does, and then they agree."""
    monkeypatch.setitem(interpreter.EVAL, "exp", libm_exp)

    @_fuzz_settings(request, 60, 800)
    @given(programs(exact_exp=True, checked=False))
    def fuzz(desc):
        check_program(desc, checked=False)

    fuzz()


def test_numpy_and_llvm_agree_with_numpy_exp(request):
    @_fuzz_settings(request, 40, 500)
    @given(programs(exact_exp=False))
    def fuzz(desc):
        check_program(desc)

    fuzz()
