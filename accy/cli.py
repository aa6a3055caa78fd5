"""The ``accy`` command line: ``accy demo``, ``accy ir attention ...``."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from .errors import AccyError

DEMO_SHAPE = dict(batch=2, queries=16, keys=32, qk=16, value=16)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _threads(text: str) -> tuple[int, int, int]:
    parts = text.split(",")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"expected X,Y,Z (three positive integers), got {text!r}")
    return tuple(_positive_int(p) for p in parts)


def _add_shape(parser: argparse.ArgumentParser, defaults: dict) -> None:
    for flag in ("batch", "queries", "keys", "qk", "value"):
        parser.add_argument(f"--{flag}", type=_positive_int, default=defaults[flag], help=f"{flag} extent (default {defaults[flag]})")
    parser.add_argument("--threads", type=_threads, default=None, metavar="X,Y,Z", help="threads per block")
    parser.add_argument("--fused", action="store_true", help="the fused one-pass entry (online softmax)")
    parser.add_argument("--causal", action="store_true", help="mask keys after the query (k <= q)")


def _entry(ns):
    from .library.attention import ScaledDotProduct, Threads3D, scaled_dot_product_f32, scaled_dot_product_fused_f32

    threads = Threads3D(*ns.threads) if ns.threads else Threads3D()
    spec = ScaledDotProduct(ns.batch, ns.queries, ns.keys, ns.qk, ns.value, threads=threads, causal=ns.causal)
    return (scaled_dot_product_fused_f32 if ns.fused else scaled_dot_product_f32)(spec)


def _demo(ns) -> int:
    from .library.attention import reference

    entry = _entry(ns)
    rng = np.random.default_rng(ns.seed)
    b, q, k, h, v = ns.batch, ns.queries, ns.keys, ns.qk, ns.value
    query = rng.standard_normal((b, q, h), dtype=np.float32)
    key = rng.standard_normal((b, k, h), dtype=np.float32)
    value = rng.standard_normal((b, k, v), dtype=np.float32)
    dst = np.zeros((b, q, v), np.float32)
    start = time.perf_counter()
    entry.run([dst, query, key, value], backend=ns.backend)
    elapsed = time.perf_counter() - start
    error = float(np.abs(dst - reference(query, key, value, causal=ns.causal)).max())
    ok = error <= 1e-4
    print(f"accy demo: {entry.target}")
    print(f"  shape    B={b} Q={q} K={k} H={h} V={v} (query {query.shape}, key {key.shape}, value {value.shape})")
    print(f"  backend  {ns.backend}")
    print(f"  max |accy - numpy reference| = {error:.3g}  ({'ok' if ok else 'MISMATCH'}, tolerance 1e-4)")
    print(f"  time     {elapsed * 1e3:.1f} ms (first run, includes tracing)")
    return 0 if ok else 1


def _ir(ns) -> int:
    program = _entry(ns).program
    graph = program.traced_graph if ns.raw else program.graph
    if ns.format == "dot":
        from .dsl.dot import graph_to_dot

        return _write(graph_to_dot(graph), ns.output)
    return _write(graph.text(), ns.output)


def _compare(ns) -> int:
    from .compare import compare

    entry = _entry(ns)
    b, q, k, h, v = ns.batch, ns.queries, ns.keys, ns.qk, ns.value
    rng = np.random.default_rng(ns.seed)
    args = [np.zeros((b, q, v), np.float32)] + [rng.standard_normal(s, dtype=np.float32)
                                                for s in ((b, q, h), (b, k, h), (b, k, v))]
    report = compare(entry, args, [s.strip() for s in ns.backends.split(",") if s.strip()],
                     rtol=ns.rtol, atol=ns.atol)
    print(report.to_json() if ns.json else report)
    return 0 if report.agree else 1


def _write(text: str, output: str | None) -> int:
    if output is None or output == "-":
        sys.stdout.write(text)
    else:
        with open(output, "w") as f:
            f.write(text)
        print(f"wrote {output} ({len(text)} bytes)", file=sys.stderr)
    return 0


def _ptx(ns) -> int:
    from .backends.codegen import emit_ptx
    from .backends.llvm import Target

    entry = _entry(ns)
    target = Target.nvptx(ns.arch, fast_exp=ns.fast_exp, checks=not ns.no_checks)
    return _write(emit_ptx(entry.program.graph, target, entry.launch().block), ns.output)


def _llvm_ir(ns) -> int:
    from .backends.codegen import llvm_ir
    from .backends.llvm import Target

    entry = _entry(ns)
    checks = not ns.no_checks
    target = Target.host(checks=checks) if ns.target == "host" else Target.nvptx(ns.arch, fast_exp=ns.fast_exp, checks=checks)
    return _write(llvm_ir(entry.program.graph, target, entry.launch().block), ns.output)


def _add_codegen(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kernel", choices=["attention"], help="library kernel")
    _add_shape(parser, dict(batch=2, queries=2, keys=3, qk=2, value=2))
    parser.add_argument("--arch", default="sm_80", help="compute capability of the PTX (default sm_80)")
    parser.add_argument("--fast-exp", action="store_true", help="exp via ex2.approx instead of libdevice's __nv_expf")
    parser.add_argument("--no-checks", action="store_true", help="omit bounds and division checks")
    parser.add_argument("-o", "--output", help="write to this file instead of standard output")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="accy", description="accy: GPU compute kernels written in Python.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help="run the prebuilt attention entry on the CPU and check it against NumPy")
    _add_shape(demo, DEMO_SHAPE)
    demo.add_argument("--seed", type=int, default=0, help="random seed of the inputs")
    demo.add_argument("--backend", default="numpy", choices=["numpy", "llvm", "cuda"], help="backend to run on")
    demo.set_defaults(run=_demo)

    ir = sub.add_parser("ir", help="print a kernel's SSA graph")
    ir.add_argument("kernel", choices=["attention"], help="library kernel")
    _add_shape(ir, dict(batch=2, queries=2, keys=3, qk=2, value=2))
    ir.add_argument("--raw", action="store_true", help="print the graph as traced, before optimisation")
    ir.add_argument("--format", choices=["text", "dot"], default="text", help="text form, or Graphviz dot")
    ir.add_argument("-o", "--output", help="write to this file instead of standard output")
    ir.set_defaults(run=_ir)

    cmp = sub.add_parser("compare", help="run a kernel on several backends; exit 1 if they disagree")
    cmp.add_argument("kernel", choices=["attention"], help="library kernel")
    _add_shape(cmp, dict(batch=2, queries=4, keys=5, qk=3, value=2))
    cmp.add_argument("--backends", default="numpy,llvm,cuda", help="comma-separated (default numpy,llvm,cuda)")
    cmp.add_argument("--rtol", type=float, default=1e-5)
    cmp.add_argument("--atol", type=float, default=1e-6)
    cmp.add_argument("--seed", type=int, default=0, help="random seed of the inputs")
    cmp.add_argument("--json", action="store_true", help="print the report as JSON")
    cmp.set_defaults(run=_compare)

    ptx = sub.add_parser("ptx", help="print or write the PTX of a kernel")
    _add_codegen(ptx)
    ptx.set_defaults(run=_ptx)

    llvm_ir = sub.add_parser("llvm-ir", help="print or write the LLVM IR of a kernel")
    _add_codegen(llvm_ir)
    llvm_ir.add_argument("--target", choices=["host", "nvptx"], default="nvptx", help="lowering target")
    llvm_ir.set_defaults(run=_llvm_ir)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    try:
        return ns.run(ns)
    except (AccyError, ValueError) as e:
        parser.exit(2, f"accy {ns.command}: error: {e}\n")


if __name__ == "__main__":
    sys.exit(main())
