"""accy's benchmark, every figure a ratio against a baseline measured in the same run.

    python -m bench [--sections targets,tiles,triton,attention,interpreter,launch,ptx,compile,autotune,sass] [--quick] [--json out.json]

Sections:
- ``targets``: the kernels people write (vector add, Black-Scholes, softmax, layer norm,
  Jacobi, tiled matmul, histogram, sum, flash and naive attention) on the llvm backend and
  the interpreter, against plain NumPy (and torch SDPA), with the project's targets
  (bench/targets.py); drawn as a chart when matplotlib is installed;
- ``tiles``: the tile programs (examples/tile_*.py, the tile attention entry) on llvm and the
  numpy backend against NumPy and torch SDPA, with issue 18's targets (bench/tiles.py), and
  a tile kernel's cold trace + compile;
- ``triton``: the same jobs as Triton users write them (a program per row, a power-of-two
  block, masked ``load``/``store`` through index tiles), one thread (``llvm-1t``, the least of
  the repeats) and two against NumPy, the numpy backend beside them, at issue 31's row widths
  in f32 and bf16 (bench/triton_style.py);
- ``attention``: every attention entry at tiny..large shapes on every CPU backend, against
  NumPy, einsum, the same loop nest in C and torch SDPA (bench/attention.py);
- ``interpreter`` (not run by default: the attention section holds the same rows): the
  attention entries on the interpreter alone (``numpy``), against einsum, in a minute;
- ``launch``: what a cached launch costs on llvm (an empty launch, a 1-element vector add);
- ``ptx``: the ptx backend against Numba's CUDA simulator running the same kernel;
- ``compile``: trace, passes, lowering, PTX and host JIT times, cold and cached, for every
  library entry, and a later process's first call of each (bench/second_process.py).
- ``autotune``: the tile matmul and the tile attention entry autotuned on llvm: tuning time,
  the chosen config, tuned vs first-config time, a second process reusing the stored choice
  (bench/autotune.py).
- ``sass``: the SASS of the tile matmul and the tile attention entry for sm_80 and sm_90
  (ptxas, then nvdisasm: no GPU), registers, spills, shared memory, stages in effect and the
  main loop's SASS per tensor-core instruction, beside Triton's compile of the same jobs where
  Triton is installed (bench/sass.py).

Each figure is the median of several timed runs after a warm-up.  The machine's load and
the other processes using the CPU are recorded before and after: figures measured beside
other work are slower, and ratios measured in one run less so.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys

import numpy as np

from . import attention, autotune, chart, sass, second_process, targets, tiles, triton_style
from .timing import contention, machine, measure

SECTIONS = ("launch", "targets", "tiles", "triton", "attention", "interpreter", "ptx", "compile", "autotune", "sass")
DEFAULT_SECTIONS = ("launch", "targets", "tiles", "triton", "attention", "ptx", "compile", "autotune", "sass")  # attention has the interpreter's rows too
RESULTS = os.path.join(os.path.dirname(__file__), "results")


def bench_launch() -> dict:
    """Seconds per cached launch on llvm: nothing to do, and one element to add."""
    import accy

    vector_add = targets.example("vector_add").vector_add

    @accy.kernel(dst=accy.dynamic_buffer(accy.f32), n=accy.scalar(accy.index))
    def nothing(k, a):
        k.for_each_1d(accy.axis("i", a.n), lambda inner, idx: None)

    one = [np.zeros(1, np.float32), np.ones(1, np.float32), np.ones(1, np.float32)]
    figures = {}
    for label, fn in (("empty launch", lambda: nothing.run([one[0], 0], backend="llvm")),
                      ("1-element vector add", lambda: vector_add.run(one, backend="llvm"))):
        seconds, _ = measure(fn, 60.0, target=0.5)
        figures[label] = seconds
    return figures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sections", default=",".join(DEFAULT_SECTIONS),
                        help=f"any of {', '.join(SECTIONS)} (default: {','.join(DEFAULT_SECTIONS)})")
    parser.add_argument("--shapes", default="tiny,small,medium,large", help="the attention and interpreter sections' shapes")
    parser.add_argument("--only", default=None, help="targets whose kernel name contains this")
    parser.add_argument("--json", default=os.path.join(RESULTS, "latest.json"))
    parser.add_argument("--chart", default=os.path.join(RESULTS, "latest.png"))
    parser.add_argument("--budget", type=float, default=30.0, help="seconds one run may take before it is skipped")
    parser.add_argument("--quick", action="store_true", help="skip the largest workloads")
    ns = parser.parse_args(argv)
    sections = [s for s in ns.sections.split(",") if s]
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown sections {unknown}; choose from {', '.join(SECTIONS)}")
    shapes = [n for n in ns.shapes.split(",") if n]
    if [n for n in shapes if n not in attention.SHAPES]:
        parser.error(f"unknown shapes; choose from {', '.join(attention.SHAPES)}")
    report = {"machine": machine(), "contention_before": contention()}
    print("accy benchmark: " + ", ".join(f"{k} {v}" for k, v in report["machine"].items()))
    print(f"load before: {report['contention_before']}")
    # launch first: importing torch (a baseline of the later sections) slows every ctypes call
    if "launch" in sections:
        report["launch"] = bench_launch()
        print("\n== a cached launch on llvm ==")
        for label, seconds in report["launch"].items():
            print(f"  {label}: {seconds * 1e6:.1f} us")
    if "targets" in sections:
        print("\n== targets: llvm (and the interpreter) against plain NumPy ==")
        rows = targets.run_workloads(measure, ns.budget, ns.quick, ns.only)
        targets.print_rows(rows)
        report["targets"] = rows
        if ns.chart:
            os.makedirs(os.path.dirname(os.path.abspath(ns.chart)), exist_ok=True)
            why = chart.draw(rows, ns.chart)
            print(f"chart: {why or ns.chart}")
    if "tiles" in sections:
        print("\n== tiles: tile programs on llvm and the numpy backend against NumPy ==")
        rows = targets.run_workloads(measure, ns.budget, ns.quick, ns.only, tiles.WORKLOADS, tiles.QUICK)
        targets.print_rows(rows)
        cold = tiles.cold_compile()
        print("  cold tile matmul: " + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in cold.items()))
        report["tiles"] = {"rows": rows, "cold": cold}
    if "triton" in sections:
        print("\n== Triton-style tile kernels: llvm on one thread (least of repeats) and two, numpy backend ==")
        rows = targets.run_workloads(functools.partial(measure, statistic=min), ns.budget, ns.quick, ns.only,
                                     triton_style.WORKLOADS, triton_style.QUICK)
        targets.print_rows(rows)
        cold = triton_style.cold_compiles()
        print(f"  cold compiles (target < {triton_style.COLD_TARGET_SECONDS:g} s): "
              + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in cold.items()))
        report["triton"] = {"rows": rows, "cold": cold}
    if "attention" in sections:
        print("\n== attention entries on every CPU backend ==")
        rows = attention.bench_kernels(shapes, quick=ns.quick)
        attention.print_rows(rows)
        report["attention"] = rows
    if "interpreter" in sections:
        print("\n== attention entries on the interpreter (numpy) ==")
        rows = attention.bench_interpreter(shapes)
        attention.print_rows(rows)
        report["interpreter"] = rows
    if "ptx" in sections:
        ptx = report["ptx_vs_numba_simulator"] = attention.bench_ptx_vs_simulator()
        print(f"\n== ptx backend vs Numba's CUDA simulator, naive entry at {tuple(ptx['shape'])} ==")
        line = f"  ptx {ptx['ptx_seconds'] * 1e3:.1f} ms"
        if "speedup" in ptx:
            line += (f", simulator {ptx['numba_simulator_seconds'] * 1e3:.0f} ms: {ptx['speedup']:.0f}x faster "
                     f"(target {ptx['target_speedup']:.0f}x)")
        else:
            line += f"; simulator {ptx['numba_simulator']}"
        print(line)
    if "compile" in sections:
        report["compile"] = attention.bench_compile()
        print("\n== compile path (medium shape) ==")
        for kernel, timings in report["compile"].items():
            print(f"  {kernel:8} " + "  ".join(f"{k} {v * 1e3:.1f} ms" for k, v in timings.items()))
        report["second_process"] = second_process.bench_second_process()
        print("\n== a later process's first call on llvm (medium shape; the launcher from the disk cache) ==")
        second_process.print_second_process(report["second_process"])
    if "autotune" in sections:
        print("\n== autotune: tile matmul and tile attention tuned on llvm, then reused by a second process ==")
        rows = autotune.bench_autotune(quick=ns.quick)
        autotune.print_rows(rows)
        report["autotune"] = rows
    if "sass" in sections:
        print("\n== sass: the tile kernels' SASS (ptxas + nvdisasm, no GPU), accy beside Triton ==")
        report["sass"] = sass.run(estimates=not ns.quick)
    report["contention_after"] = contention()
    print(f"\nload after: {report['contention_after']}")
    if ns.json:
        os.makedirs(os.path.dirname(os.path.abspath(ns.json)), exist_ok=True)
        with open(ns.json, "w") as f:
            json.dump(report, f, indent=2, default=str)
        print(f"wrote {ns.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
