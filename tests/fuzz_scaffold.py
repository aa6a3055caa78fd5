"""What both differential fuzzers share: tests/test_fuzz.py (programs from
tests/fuzz_programs.py) and tests/test_fuzz_cooperative.py (tests/fuzz_cooperative.py).

* the ``--fuzz-long`` option and hypothesis's settings for a fuzzer;
* the backends a program runs on (``ACCY_FUZZ_BACKENDS``, comma-separated: numpy, the
  reference, and any of llvm, ptx and cuda; default ``numpy,llvm,ptx``; scripts/gpu_check.sh
  adds cuda on a GPU);
* running one program with one set of arguments on each of them and on the variants that
  must give the same bits (the traced graph, ``memory_cap=1``, ``threads=3``,
  ``checks=False``): :func:`backend_runs`;
* comparing the runs' outputs bit for bit (or within a tolerance): :func:`mismatch`,
  :func:`compare`.

The tests are collected with the ``fuzz`` marker (pyproject.toml), which the quick subset,
pytest's default selection, leaves out: ``pytest -m fuzz`` runs them.
"""

from __future__ import annotations

import os
from typing import Any

import attrs
import numpy as np
from hypothesis import HealthCheck, settings

from accy.runtime import bind_arguments
from accy.runtime.interpreter import simt as interpreter
from accy.errors import AccyError

# -- the --fuzz-long option ----------------------------------------------------------------------

DEFAULT_EXAMPLES = 150
LONG_EXAMPLES = 2000


def add_fuzz_option(parser) -> None:
    """Register ``--fuzz-long`` (call from ``pytest_addoption`` in tests/conftest.py)."""
    parser.addoption("--fuzz-long", action="store_true", default=False,
                     help=f"run the differential fuzzers with many more examples per test "
                          f"(about {LONG_EXAMPLES // DEFAULT_EXAMPLES} times the default)")


def fuzz_examples(config, default: int = DEFAULT_EXAMPLES, long: int = LONG_EXAMPLES) -> int:
    """``long`` under ``--fuzz-long``, else ``default``."""
    try:
        is_long = config.getoption("--fuzz-long", default=False)
    except ValueError:
        is_long = False
    return long if is_long else default


def fuzz_settings(request, default: int, long: int, *, derandomize: bool = False):
    """Hypothesis's settings for a fuzzer of ``default`` examples (``long`` with --fuzz-long):
    no deadline, no example database (nothing is written to the checkout)."""
    return settings(
        max_examples=fuzz_examples(request.config, default, long),
        deadline=None,
        derandomize=derandomize,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


# -- the backends --------------------------------------------------------------------------------

FUZZ_BACKENDS = tuple(os.environ.get("ACCY_FUZZ_BACKENDS", "numpy,llvm,ptx").split(","))
if "numpy" not in FUZZ_BACKENDS or set(FUZZ_BACKENDS) - {"numpy", "llvm", "ptx", "cuda"}:
    raise ValueError(f"ACCY_FUZZ_BACKENDS: expected numpy and any of llvm, ptx, cuda, got {FUZZ_BACKENDS}")
DEVICE_BACKENDS = tuple(b for b in FUZZ_BACKENDS if b in ("ptx", "cuda"))

TRACED = "numpy, traced graph"  # the run of the unoptimised graph
# the optimised graph without multiply-add contraction, where the program contracts: the traced
# graph's bits (contraction rounds a product once, docs/ir.md; the other passes change no bit)
UNFUSED = "numpy, unfused"


@attrs.frozen
class Outcome:
    """What one run gave: its arrays (the arguments after the run; or a dict of them), or the
    AccyError it raised."""

    outputs: Any = None
    error: AccyError | None = None

    def describe(self) -> str:
        return "ran" if self.error is None else f"raised {type(self.error).__name__}: {self.error}"


def copies(args) -> list:
    """Fresh copies of the arrays among ``args`` (scalars as they are)."""
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def run(program, args, backend: str, **options) -> Outcome:
    """``program`` run on copies of ``args``."""
    args = copies(args)
    try:
        program.run(args, backend=backend, **options)
    except AccyError as e:
        return Outcome(error=e)
    return Outcome(args)


def run_traced(program, args) -> Outcome:
    """The interpreter, with its memory checks (the race detector), on the unoptimised graph:
    the passes other than multiply-add contraction must not change a bit (docs/ir.md)."""
    args = copies(args)
    graph = program.traced_graph
    try:
        launch = program.launch(args=args)
        interpreter.run_graph(graph, bind_arguments(graph, args), launch, check_memory=True)
    except AccyError as e:
        return Outcome(error=e)
    return Outcome(args)


def backend_runs(program, args, *, arch: str, checks_off: bool = True) -> dict[str, Outcome]:
    """Every run both fuzzers make of ``program`` with ``args``, by name:

    * ``numpy`` (the reference, with the memory checks: every fuzzed program is race-free and
      writes every output), ``numpy, traced graph``, ``numpy, memory_cap=1`` (vectorised
      folds one iteration per chunk) and, where the program contracts multiply-adds,
      ``numpy, unfused`` (the traced graph's counterpart, see :func:`pairs`);
    * ``llvm``, ``llvm, 3 threads`` (the launch split over host threads) and, where
      ``checks_off`` (programs in bounds by construction), ``llvm, checks=False``;
    * each device backend: ``ptx`` (the PTX the cuda backend would launch for ``arch``, on
      the emulator) and ``cuda``.

    A name with a comma is a variant of the run its first word names (see :func:`pairs`)."""
    runs = {"numpy": run(program, args, "numpy", check_memory=True),
            TRACED: run_traced(program, args),
            "numpy, memory_cap=1": run(program, args, "numpy", memory_cap=1)}
    if program.fp_fusion and any(op.opcode == "fma" for op in program.graph.body.walk()):
        runs[UNFUSED] = run(program.with_fp_fusion(False), args, "numpy")
    if failures(runs):  # the reference refused it: a generator's bug, reported as it is, nothing native run
        return runs
    if "llvm" in FUZZ_BACKENDS:
        runs["llvm"] = run(program, args, "llvm")
        runs["llvm, 3 threads"] = run(program, args, "llvm", threads=3)
        # only once the checked runs passed: an access the generator wrongly thought in bounds
        # would write past a buffer unchecked and take the process down instead of failing
        if checks_off and not failures(runs):
            runs["llvm, checks=False"] = run(program, args, "llvm", checks=False)
    for backend in DEVICE_BACKENDS:
        runs[backend] = run(program, args, backend, **({"arch": arch} if backend == "ptx" else {}))
    return runs


def failures(runs: dict[str, Outcome]) -> dict[str, str]:
    """The runs that raised, by name, with what they raised."""
    return {name: r.describe() for name, r in runs.items() if r.error is not None}


def pairs(runs, compared=lambda name: True) -> list[tuple[str, str]]:
    """(reference, run) pairs that must agree: numpy against each backend (those ``compared``
    accepts), and each variant against its own backend's plain run; the traced graph against
    the unfused run where there is one (which is then no variant of numpy's fused one)."""
    out = [("numpy", name) for name in runs if "," not in name and name != "numpy" and compared(name)]
    base = lambda name: UNFUSED if name == TRACED and UNFUSED in runs else name.split(",")[0]  # noqa: E731
    return out + [(base(name), name) for name in runs if "," in name and name != UNFUSED]


# -- comparing -------------------------------------------------------------------------------------


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def mismatch(name: str, expected: np.ndarray, got: np.ndarray, *, rtol: float = 0.0, atol: float = 0.0) -> str | None:
    """None if the arrays agree, else a description of the first disagreement.

    Floats (ml_dtypes' bf16 included): equal bits (a zero's sign counts), or both NaN (any
    payload), or with a tolerance within ``atol + rtol * |expected|``; integers and bools: equal."""
    floats = expected.dtype.kind in "fV"
    if floats:
        wide_e, wide_g = expected.astype(np.float64), got.astype(np.float64)
        ok = (_bits(expected) == _bits(got)) | (np.isnan(wide_e) & np.isnan(wide_g))
        if rtol or atol:
            with np.errstate(all="ignore"):
                ok |= (wide_e == wide_g) | (np.abs(wide_e - wide_g) <= atol + rtol * np.abs(wide_e))
    else:
        ok = expected == got
    if ok.all():
        return None
    bad = np.flatnonzero(~ok)
    i = int(bad[0])
    bits = f" (bits {int(_bits(expected)[i]):#x} vs {int(_bits(got)[i]):#x})" if floats else ""
    return (f"{name}: {bad.size} of {ok.size} elements differ; first at [{i}]: "
            f"{expected[i]!r} vs {got[i]!r}{bits}\n  expected {expected!r}\n  got      {got!r}")


def compare(names, runs: dict[str, Outcome], left: str, right: str, *, prefix: str = "",
            tolerance: dict[str, tuple[float, float]] | None = None) -> list[str]:
    """The disagreements between runs ``left`` and ``right`` over the arrays among the
    parameters ``names`` (none where ``left`` failed); ``tolerance``: parameter name ->
    (rtol, atol) for the outputs compared with one."""
    ref, got = runs[left].outputs, runs[right].outputs
    if ref is None:
        return []
    found = []
    for name, x, y in zip(names, ref, got):
        if isinstance(x, np.ndarray):
            rtol, atol = (tolerance or {}).get(name, (0.0, 0.0))
            found.append(mismatch(f"{prefix}{name}: {left} vs {right}", x, y, rtol=rtol, atol=atol))
    return [p for p in found if p]
