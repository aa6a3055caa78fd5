"""Differential fuzzing of the tile level: random tile programs (tests/fuzz_tiles.py) run on
the numpy backend (the reference, accy/runtime/interpreter/tiles.py), llvm (the native tile
path) and ptx (the distribution into SIMT blocks, on the emulator) must agree: every output
array bit for bit (the gaps of strided views, the elements a mask keeps off, NaN payloads
aside), except float sums, cumsums and dots, each within gamma_n * sum |terms| of the float64
value (the tile level's accuracy rule, docs/ir.md), on every backend the reference included.
Every drawn program is valid and in bounds by construction (masked-off indices may be wild),
so any error a run raises is a failure too.

Each example is one seed; the programs are small (tiny tiles and grids, which the emulator
runs in a fraction of a second).  ``test_tile_programs_agree_at_larger_tiles`` draws larger
tiles for numpy and llvm alone (and llvm split over 3 threads and with checks off).

Scaling: ``ACCY_FUZZ_EXAMPLES`` (examples per test; default 24, 10x with ``--fuzz-long``)
and ``ACCY_FUZZ_TILE_SEED`` (the first seed, default 0: the default run is the same every
time; a failure names its seed, and ``ACCY_FUZZ_TILE_SEED=<seed> ACCY_FUZZ_EXAMPLES=1``
reruns just it).  ``ACCY_FUZZ_BACKENDS`` (tests/fuzz_scaffold.py) picks the backends.
Bugs it found are pinned, minimised, in tests/test_tile_regressions.py.

``test_out_of_bounds_tile_programs_stop_cleanly`` runs programs with one access moved outside
its tensor (tests/fuzz_tiles_outside.py): where numpy raises OutOfBoundsError every backend
must raise it naming the same tensor and dimension, every array as it was; where it runs (a
box masks its outside; a loosened mask may let nothing outside through), every backend must
agree with it.  Its seeds start at OUTSIDE_SEEDS (``ACCY_FUZZ_TILE_SEED`` and
``ACCY_FUZZ_EXAMPLES=1`` rerun one as above); its summary counts the draws that reached outside.
"""

from __future__ import annotations

import os
import warnings

import pytest

import fuzz_tiles
import fuzz_tiles_outside
from fuzz_scaffold import FUZZ_BACKENDS, fuzz_examples

pytestmark = pytest.mark.fuzz

EXAMPLES = int(os.environ.get("ACCY_FUZZ_EXAMPLES", "24"))
FIRST_SEED = int(os.environ.get("ACCY_FUZZ_TILE_SEED", "0"))
BIG_SEEDS = 1_000_000  # the larger programs' seeds start here, so the two tests draw different programs
OUTSIDE_SEEDS = 2_000_000  # and the out-of-bounds ones here
OUTSIDE_EXAMPLES = int(os.environ.get("ACCY_FUZZ_EXAMPLES", "60"))  # about 45 s on one core


def _seeds(request, first: int, default: int) -> range:
    n = fuzz_examples(request.config, default, default * 10)
    return range(first, first + n)


def _report(drawn, problems) -> str:
    return (f"{len(problems)} disagreement(s) in tile program seed {drawn.seed} (rerun: ACCY_FUZZ_TILE_SEED="
            f"{drawn.seed - (BIG_SEEDS if drawn.seed >= BIG_SEEDS else 0)} ACCY_FUZZ_EXAMPLES=1)\n"
            + drawn.describe() + "\n" + "\n".join(problems) + "\n" + drawn.program.graph.text())


def _fuzz(request, first: int, default: int, backends, *, big: bool, variants: bool) -> None:
    failed = []
    for seed in _seeds(request, first, default):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            drawn = fuzz_tiles.draw(seed, big=big)
            runs = {b: fuzz_tiles.run_on(drawn, b) for b in backends}
            if variants and "llvm" in backends:
                runs["llvm, 3 threads"] = fuzz_tiles.run_on(drawn, "llvm", threads=3)
                runs["llvm, checks=False"] = fuzz_tiles.run_on(drawn, "llvm", checks=False)
            if "ptx" in backends and any(op.opcode == "dot" for op in drawn.program.graph.body.walk()):
                runs["ptx, sm_90a"] = fuzz_tiles.run_on(drawn, "ptx", arch="sm_90a")  # wgmma where a dot fits
            problems = fuzz_tiles.check(drawn, runs)
        if problems:
            failed.append(_report(drawn, problems))
            if len(failed) >= 3:
                break
    assert not failed, "\n\n".join(failed)


def test_tile_programs_agree(request):
    backends = [b for b in FUZZ_BACKENDS if b in ("numpy", "llvm", "ptx", "cuda")]
    _fuzz(request, FIRST_SEED, EXAMPLES, backends, big=False, variants=False)


def test_tile_programs_agree_at_larger_tiles(request):
    backends = [b for b in FUZZ_BACKENDS if b in ("numpy", "llvm")]
    _fuzz(request, BIG_SEEDS + FIRST_SEED, max(1, EXAMPLES // 2), backends, big=True, variants=True)


def test_out_of_bounds_tile_programs_stop_cleanly(request):
    backends = [b for b in FUZZ_BACKENDS if b in ("numpy", "llvm", "ptx", "cuda")]
    seeds = _seeds(request, OUTSIDE_SEEDS + FIRST_SEED, OUTSIDE_EXAMPLES)
    failed, reached, drawn = [], 0, 0
    for seed in seeds:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            outside = fuzz_tiles_outside.draw_outside(seed)
            runs = {b: fuzz_tiles_outside.run_kept(outside.drawn, b) for b in backends}
            if "llvm" in backends:  # a launch split over host threads writes nothing either
                runs["llvm, 3 threads"] = fuzz_tiles_outside.run_kept(outside.drawn, "llvm", threads=3)
            out, problems = fuzz_tiles_outside.check_outside(outside, runs)
        reached, drawn = reached + out, drawn + 1
        if problems:
            failed.append(f"{len(problems)} problem(s) in out-of-bounds tile program seed {seed} (rerun: "
                          f"ACCY_FUZZ_TILE_SEED={seed - OUTSIDE_SEEDS} ACCY_FUZZ_EXAMPLES=1)\n"
                          + outside.describe() + "\n" + "\n".join(problems) + "\n" + outside.drawn.program.graph.text())
            if len(failed) >= 3:
                break
    summary = f"{reached} of {drawn} out-of-bounds draws reached outside their tensor on numpy"
    print(summary)
    assert not failed, summary + "\n\n" + "\n\n".join(failed)
    assert reached >= drawn // 3, summary + ": too few to test the bounds checks"
