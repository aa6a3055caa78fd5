"""The ``accy`` command line: ``accy demo``, ``accy ir|ptx|llvm-ir|compare|info|profile KERNEL``.

Backend names come from the registry (:data:`accy.runtime.BACKENDS`).

``KERNEL`` is ``attention`` (the library entry, shaped by the flags) or
``FILE.py:NAME``, a :class:`~accy.Program` or library entry defined in a module of
yours.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
import time

import numpy as np

from .errors import AccyError

DEMO_SHAPE = dict(batch=2, queries=16, keys=32, qk=16, value=16)
DEMO_BACKENDS = ("numpy", "llvm", "ptx")  # the CPU ones: the interpreter, native code, the PTX on the emulator
DEMO_TOLERANCE = 1e-4
GPU_NAMES = ("a100", "h100", "h200")  # accy.emulator.profile.GPUS (not imported with the command line)


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


def _backend_list(text: str) -> tuple[str, ...]:
    """Comma-separated backend names, each one the registry knows (accy.runtime.BACKENDS)."""
    from .runtime import BACKENDS

    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in BACKENDS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"expected backends from {', '.join(BACKENDS)} separated by commas, "
                                         f"got {text!r}")
    return names


def _kernel_name(text: str) -> str:
    if text != "attention" and (":" not in text or not text.rsplit(":", 1)[0].endswith(".py")):
        raise argparse.ArgumentTypeError(f"kernel must be 'attention' or FILE.py:NAME, got {text!r}")
    return text


def _size(text: str) -> tuple[str | None, int]:
    name, sep, value = text.rpartition("=")
    if sep and not name.isidentifier():
        raise argparse.ArgumentTypeError(f"expected N or NAME=N, got {text!r}")
    return (name or None), _positive_int(value)


def _scalar_assignment(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def _add_shape(parser: argparse.ArgumentParser, defaults: dict) -> None:
    for flag in ("batch", "queries", "keys", "qk", "value"):
        parser.add_argument(f"--{flag}", type=_positive_int, default=defaults[flag],
                            help=f"attention: {flag} extent (default {defaults[flag]})")
    parser.add_argument("--threads", type=_threads, default=None, metavar="X,Y,Z", help="attention: threads per block")
    parser.add_argument("--fused", action="store_true", help="attention: the fused one-pass entry (online softmax)")
    parser.add_argument("--causal", action="store_true", help="attention: mask keys after the query (k <= q)")


def _add_kernel(parser: argparse.ArgumentParser, defaults: dict) -> None:
    parser.add_argument("kernel", type=_kernel_name, metavar="KERNEL",
                        help="'attention', or FILE.py:NAME for a Program or library entry in your module")
    parser.add_argument("--constexpr", type=_scalar_assignment, action="append", default=[], metavar="NAME=VALUE",
                        help="FILE.py:NAME: the value of a constexpr parameter (the kernel is specialised on it); "
                             "repeatable")
    _add_shape(parser, defaults)


def _attention(ns):
    from .library.attention import (ScaledDotProduct, ThreadBlocks, scaled_dot_product_f32,
                                    scaled_dot_product_flash_f32, scaled_dot_product_fused_f32)

    threads = {"threads": ThreadBlocks(*ns.threads)} if ns.threads else {}
    spec = ScaledDotProduct(ns.batch, ns.queries, ns.keys, ns.qk, ns.value, causal=ns.causal, **threads)
    if getattr(ns, "flash", False):
        return scaled_dot_product_flash_f32(spec)
    return (scaled_dot_product_fused_f32 if ns.fused else scaled_dot_product_f32)(spec)


def load_kernel(spec: str):
    """The Program or library entry ``NAME`` of ``FILE.py`` (``FILE.py:NAME``)."""
    from .library.entry import Entry
    from .program import Program

    path, _, name = spec.rpartition(":")
    if not os.path.isfile(path):
        raise AccyError(f"{spec}: no file {path!r}")
    module_name = f"accy_user_{os.path.splitext(os.path.basename(path))[0]}"
    loader = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(loader)
    sys.modules[module_name] = module
    folder = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, folder)  # the file's own imports resolve as they do under `python FILE.py`
    try:
        loader.loader.exec_module(module)
    except AccyError:
        raise
    except Exception as e:
        raise AccyError(f"{spec}: importing {path} failed: {type(e).__name__}: {e}") from None
    finally:
        sys.path.remove(folder)
    kernel = getattr(module, name, None)
    if kernel is None:
        found = sorted(k for k, v in vars(module).items() if isinstance(v, (Program, Entry)))
        raise AccyError(f"{spec}: {path} has no {name!r}; its kernels are {', '.join(found) or 'none'}")
    if not isinstance(kernel, (Program, Entry)):
        raise AccyError(f"{spec}: {name} is a {type(kernel).__name__}, not a Program or library entry")
    return kernel


def _kernel(ns):
    kernel = _attention(ns) if ns.kernel == "attention" else load_kernel(ns.kernel)
    kernel = specialised(kernel, dict(ns.constexpr)) if ns.constexpr else kernel
    unbound = [c.name for c in getattr(kernel, "constexprs", ())]
    if unbound:
        raise AccyError(f"{ns.kernel} has constexpr parameters without a value ({', '.join(unbound)}): give each "
                        f"with --constexpr NAME=VALUE")
    return kernel


def specialised(kernel, texts: dict[str, str]):
    """``kernel`` specialised on constexpr values given as text (``--constexpr NAME=VALUE``),
    each read as the Python type its parameter takes."""
    constexprs = {c.name: c for c in getattr(kernel, "constexprs", ())}
    values = {}
    for name, text in texts.items():
        if name not in constexprs:
            raise AccyError(f"--constexpr {name}: no such constexpr parameter (the kernel's: "
                            f"{', '.join(constexprs) or 'none'})")
        kind = constexprs[name].spec.kind
        try:
            values[name] = {"True": True, "False": False}[text] if kind is bool else kind(text)
        except (KeyError, ValueError):
            raise AccyError(f"--constexpr {name}={text}: expected {'True or False' if kind is bool else kind.__name__}"
                            ) from None
    return kernel.specialized(**values)


def _program(ns):
    kernel = _kernel(ns)
    return getattr(kernel, "program", kernel)


def _demo(ns) -> int:
    from .compare import unavailable
    from .library.attention import reference

    entry = _attention(ns)
    entry.launch()  # a geometry over the limits is a usage error, whatever the backend
    rng = np.random.default_rng(ns.seed)
    b, q, k, h, v = ns.batch, ns.queries, ns.keys, ns.qk, ns.value
    query = rng.standard_normal((b, q, h), dtype=np.float32)
    key = rng.standard_normal((b, k, h), dtype=np.float32)
    value = rng.standard_normal((b, k, v), dtype=np.float32)
    expected = reference(query, key, value, causal=ns.causal)
    print(f"accy demo: {entry.target}")
    print(f"  shape    B={b} Q={q} K={k} H={h} V={v} (query {query.shape}, key {key.shape}, value {value.shape})")
    # the first run traces and compiles; the second is the launch alone
    print(f"  {'backend':8} {'first run':>10} {'again':>10}  max |accy - numpy reference|")
    outputs, failed = {}, False
    for backend in ns.backends:
        dst = np.zeros((b, q, v), np.float32)
        times = []
        try:
            for _ in range(2):
                start = time.perf_counter()
                entry.run([dst, query, key, value], backend=backend)
                times.append(time.perf_counter() - start)
        except AccyError as e:
            why = unavailable(e)
            failed |= why is None
            print(f"  {backend:8} {'skipped' if why else 'FAILED'}: {why or f'{type(e).__name__}: {e}'}")
            continue
        error = float(np.abs(dst - expected).max())
        verdict = "ok" if error <= DEMO_TOLERANCE else "MISMATCH"
        failed |= verdict != "ok"
        print(f"  {backend:8} {times[0] * 1e3:7.1f} ms {times[1] * 1e3:7.2f} ms  {error:.3g} ({verdict})")
        outputs[backend] = dst
    if len(outputs) > 1:
        names = list(outputs)
        spread = max(float(np.abs(outputs[x] - outputs[y]).max()) for i, x in enumerate(names) for y in names[i + 1:])
        agree = spread <= DEMO_TOLERANCE
        failed |= not agree
        print(f"  backends {', '.join(names)} {'agree' if agree else 'DISAGREE'}: they differ by at most "
              f"{spread:.3g} (tolerance {DEMO_TOLERANCE:.0e})")
    return 0 if outputs and not failed else 1


def _ir(ns) -> int:
    program = _program(ns)
    if ns.passes:
        return _write(_pass_listing(ns, program), ns.output)
    if ns.after is not None:
        graph, text = _after(ns, program)
    else:
        graph = program.traced_graph if ns.raw else program.graph
        text = graph.text()
    if ns.format == "dot":
        from .dsl.dot import graph_to_dot

        return _write(graph_to_dot(graph), ns.output)
    return _write(text, ns.output)


def _pass_listing(ns, program) -> str:
    """``--passes``: the kernel's pipeline for the backend, numbered."""
    from .lowering.pipeline import stages
    from .runtime import get_backend

    target = get_backend(ns.backend).target(ns.arch)
    where = f"{ns.backend} ({target.name}{', ' + target.arch if hasattr(target, 'arch') else ''})"
    lines = [f"# the passes of {program.name} on {where}; `accy ir ... --after N|NAME` prints the graph after one"]
    for stage in stages(target, program.traced_graph.is_tile_launch):
        when = "traced" if stage.at_trace else "compiled"
        lines.append(f"{stage.position:3d}  {stage.name:24s} [{when}] {stage.summary}")
    return "\n".join(lines) + "\n"


def _after(ns, program):
    """``--after PASS``: the graph after PASS as the backend lowers it, and its text (with an
    analysis's report)."""
    from .lowering.pipeline import find_stage, run_passes, stage_text
    from .runtime import get_backend

    target = get_backend(ns.backend).target(ns.arch)
    stage = find_stage(target, program.traced_graph.is_tile_launch, ns.after)
    if stage.position == 0:
        graph = program.traced_graph
    elif stage.at_trace:
        graph = run_passes(program.traced_graph, target, target.pipeline, until=stage.position)
    else:
        graph = run_passes(program.graph, target, target.tile_pipeline, first=len(target.pipeline) + 1,
                           until=stage.position)
    return graph, stage_text(graph, target, stage.name)


def example_arguments(kernel, size: int, scalars: dict[str, str], seed: int = 0,
                      sizes: dict[str, int] | None = None) -> list:
    """Random arguments for ``kernel``: a library entry's shapes, or ``sizes[name]`` (else
    ``size``) elements per buffer of unknown length (per dimension of a tensor); integer
    buffers hold values in [0, size) (safe as indices); scalars from ``scalars`` (NAME ->
    text), else the size for an index, 1 for a number."""
    sizes = sizes or {}
    from .dsl.tensors import declared_parameters
    from .library.entry import Entry

    rng = np.random.default_rng(seed)
    program = getattr(kernel, "program", kernel)
    shapes = kernel.argument_shapes if isinstance(kernel, Entry) else {}
    args = []
    params = declared_parameters(program.graph.params)
    ndims = {t.name: t.ndim for t in program.tensors}
    for p in params:
        if p.is_scalar:
            text = scalars.get(p.name)
            if text is None:
                value = size if p.dtype.is_index else True if p.dtype.is_bool else 1
            else:
                value = text == "True" if p.dtype.is_bool else float(text) if p.dtype.is_float else int(text)
            args.append(value)
            continue
        count = (shapes[p.name].element_count() if p.name in shapes else p.count if p.count is not None
                 else sizes.get(p.name, size))
        if p.name in ndims:
            count = (count,) * ndims[p.name]
        if p.dtype.is_float:
            args.append(rng.standard_normal(count).astype(p.dtype.numpy))
        elif p.dtype.is_bool:
            args.append(rng.integers(0, 2, count).astype(bool))
        else:
            args.append(rng.integers(0, max(min(size, p.dtype.max), 1), count).astype(p.dtype.numpy))
    unknown = sorted(set(scalars) - {p.name for p in params if p.is_scalar})
    if unknown:
        raise AccyError(f"--scalar {', '.join(unknown)}: no such scalar parameter")
    unknown = sorted(set(sizes) - {p.name for p in params if not p.is_scalar})
    if unknown:
        raise AccyError(f"--size {', '.join(unknown)}: no such buffer parameter")
    return args


def _arguments(ns, kernel) -> list:
    """The arguments ``accy compare`` and ``accy profile`` run ``kernel`` with: the attention
    flags' shapes, or :func:`example_arguments` from ``--size`` (default 64) and ``--scalar``."""
    if ns.kernel == "attention":
        b, q, k, h, v = ns.batch, ns.queries, ns.keys, ns.qk, ns.value
        rng = np.random.default_rng(ns.seed)
        return [np.zeros((b, q, v), np.float32)] + [rng.standard_normal(s, dtype=np.float32)
                                                    for s in ((b, q, h), (b, k, h), (b, k, v))]
    default = next((n for name, n in ns.size if name is None), 64)
    return example_arguments(kernel, default, dict(ns.scalar), ns.seed,
                             {name: n for name, n in ns.size if name is not None})


def _compare(ns) -> int:
    from .compare import compare

    kernel = _kernel(ns)
    args = _arguments(ns, kernel)
    backends = {} if ns.backends is None else {"backends": ns.backends}  # else accy.compare's own default
    options = {} if ns.arch is None else {"options": {"ptx": {"arch": ns.arch}}}
    report = compare(kernel, args, rtol=ns.rtol, atol=ns.atol, **backends, **options)
    print(report.to_json() if ns.json else report)
    if not ns.json and report.failed and not report.ran:
        print("  every backend failed: the generated inputs may not fit this kernel; set buffer sizes with "
              "--size NAME=N and scalars with --scalar NAME=VALUE")
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
    program = _program(ns)
    return _write(program.ptx(ns.arch, fast_math=ns.fast_math, checks=not ns.no_checks), ns.output)


def _llvm_ir(ns) -> int:
    program = _program(ns)
    return _write(program.llvm_ir(ns.target, arch=ns.arch, fast_math=ns.fast_math, checks=not ns.no_checks),
                  ns.output)


def _info(ns) -> int:
    from .codegen.abi import dynamic_shared_bytes
    from .codegen.nvptx.occupancy import occupancy
    from .codegen.nvptx.toolchain import resources
    from .lowering.software_pipeline import stages_in_effect
    from .lowering.warpgroups import WARPGROUP_THREADS

    program = _program(ns)
    launch = program.threads
    threads = launch.x * launch.y * launch.z
    program_threads = threads
    print(f"{program.name}: {threads} threads per block {launch.block}"
          f"{'' if program.graph.static_extents is None else f', grid {program.launch().grid}'}")
    print(f"  {'arch':6} {'registers':>9} {'spills (st/ld)':>15} {'stack':>6} {'shared':>8} "
          f"{'blocks/SM':>9} {'occupancy':>9} {'mma':>5} {'wgmma':>5} {'warpgroups':>10} {'stages':>6}  limited by")
    for arch in (a.strip() for a in ns.arch.split(",")):
        ptx = program.ptx(arch, fast_math=ns.fast_math, checks=not ns.no_checks)
        graph = program.graph_for("cuda", arch)
        threads = math.prod(graph.block_shape) if graph.is_block_launch else program_threads  # warp roles add some
        used = resources(ptx, arch)
        occ = occupancy(used, threads)
        spills = f"{used.spill_stores}/{used.spill_loads} B"
        lines = [line.lstrip() for line in ptx.splitlines()]
        mma = sum(line.startswith("mma.sync") for line in lines)  # in the code, not executed
        wgmma = sum(line.startswith("wgmma.mma_async") for line in lines)
        groups = program_threads // WARPGROUP_THREADS if wgmma else 0  # computing ones (roles: + a producer)
        stages = stages_in_effect(program.graph_for("cuda", arch)) if program.graph.is_tile_launch else 1
        shared = used.shared_bytes + dynamic_shared_bytes(program.graph_for("cuda", arch))
        print(f"  {arch:6} {used.registers:>9} {spills:>15} {used.stack_bytes:>4} B {shared:>6} B "
              f"{occ.blocks_per_sm:>9} {occ.fraction:>8.0%} {mma:>5} {wgmma:>5} {groups:>10} {stages:>6}  "
              f"{occ.limiter}")
        for line in _roles_and_copies(graph, used.registers):
            print(f"         {line}")
    return 0


def _roles_and_copies(graph, registers: int) -> list[str]:
    """What ``accy info`` says of a GPU graph's warp roles (registers each after setmaxnreg) and
    of how each tensor reaches shared memory (TMA boxes, cp.async)."""
    from .codegen.abi import tensor_maps
    from .lowering.warp_roles import PRODUCER_THREADS
    from .lowering.warpgroups import WARPGROUP_THREADS

    out = []
    moves = {op.attrs.action.value: op.attrs.count for op in graph.body.walk() if op.opcode == "setmaxnreg"}
    if moves and graph.is_block_launch:
        consumers = (math.prod(graph.block_shape) - PRODUCER_THREADS) // WARPGROUP_THREADS
        out.append(f"roles: {consumers} consumer warpgroup{'s' * (consumers != 1)} at {moves.get('inc', registers)} "
                   f"registers, 1 producer warpgroup at {moves.get('dec', registers)} (setmaxnreg; "
                   f"{registers} at launch)")
    maps = tensor_maps(graph)
    copied = {op.attrs.buffer for op in graph.body.walk() if op.opcode == "async_copy"}
    for tensor in dict.fromkeys([m.tensor for m in maps] + sorted(copied)):
        boxes = ", ".join(f"{'x'.join(map(str, m.box))}" + (f" swizzle {m.swizzle}" if m.swizzle else "")
                          for m in maps if m.tensor == tensor)
        if boxes:
            also = ", cp.async where the launch cannot describe it" if tensor in copied else ""
            out.append(f"{tensor}: TMA (boxes {boxes}){also}")
        else:
            out.append(f"{tensor}: cp.async")
    return out


def _profile(ns) -> int:
    kernel = _kernel(ns)
    result = kernel.profile(_arguments(ns, kernel), arch=ns.arch, gpu=ns.gpu, sample=ns.sample)
    if ns.json:
        import json

        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(result)
    return 0


def _add_sizes(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", type=_size, action="append", default=[], metavar="N|NAME=N",
                        help="FILE.py:NAME: elements of each buffer of unknown length (default 64; per dimension "
                             "of a tensor), or of one buffer by name; repeatable")
    parser.add_argument("--scalar", type=_scalar_assignment, action="append", default=[], metavar="NAME=VALUE",
                        help="FILE.py:NAME: a scalar argument (default: the size for index, else 1)")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the inputs")


def _add_codegen(parser: argparse.ArgumentParser) -> None:
    _add_kernel(parser, dict(batch=2, queries=2, keys=3, qk=2, value=2))
    parser.add_argument("--arch", default="sm_80", help="compute capability of the PTX (default sm_80)")
    parser.add_argument("--fast-math", action="store_true",
                        help="f32 math with NVPTX's approximate instructions instead of libdevice")
    parser.add_argument("--no-checks", action="store_true", help="omit bounds and division checks")
    parser.add_argument("-o", "--output", help="write to this file instead of standard output")


def build_parser() -> argparse.ArgumentParser:
    from .runtime import BACKENDS

    parser = argparse.ArgumentParser(prog="accy", description="accy: GPU compute kernels written in Python.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help="run the prebuilt attention entry on numpy, llvm and ptx, time each and check "
                                       "them against NumPy and each other")
    _add_shape(demo, DEMO_SHAPE)
    demo.add_argument("--seed", type=int, default=0, help="random seed of the inputs")
    demo.add_argument("--backends", "--backend", dest="backends", type=_backend_list, default=DEMO_BACKENDS,
                      metavar="A,B", help=f"comma-separated backends to run on, of {', '.join(BACKENDS)} "
                                          f"(default {','.join(DEMO_BACKENDS)})")
    demo.set_defaults(run=_demo)

    ir = sub.add_parser("ir", help="print a kernel's SSA graph")
    _add_kernel(ir, dict(batch=2, queries=2, keys=3, qk=2, value=2))
    ir.add_argument("--raw", action="store_true", help="print the graph as traced, before optimisation")
    ir.add_argument("--passes", action="store_true", help="list the kernel's passes for --backend, in order")
    ir.add_argument("--after", metavar="PASS", help="print the graph after PASS (a name from --passes, its first "
                    "run, or a position), as --backend lowers it")
    ir.add_argument("--backend", choices=BACKENDS, default="ptx",
                    help="whose pipeline --passes and --after show (default ptx: NVPTX's, as cuda compiles it)")
    ir.add_argument("--arch", default=None, help="the NVPTX arch for ptx and cuda (default sm_80)")
    ir.add_argument("--format", choices=["text", "dot"], default="text", help="text form, or Graphviz dot")
    ir.add_argument("-o", "--output", help="write to this file instead of standard output")
    ir.set_defaults(run=_ir)

    cmp = sub.add_parser("compare", help="run a kernel on several backends; exit 1 if they disagree")
    _add_kernel(cmp, dict(batch=2, queries=4, keys=5, qk=3, value=2))
    cmp.add_argument("--backends", type=_backend_list, default=None, metavar="A,B",
                     help=f"comma-separated, of {', '.join(BACKENDS)} (default: every one, as accy.compare does; "
                          "those that cannot run here are listed as skipped, with the reason)")
    _add_sizes(cmp)
    cmp.add_argument("--arch", default=None, help="the PTX the ptx backend runs (default sm_80; sm_90a: wgmma)")
    cmp.add_argument("--rtol", type=float, default=1e-5)
    cmp.add_argument("--atol", type=float, default=1e-6)
    cmp.add_argument("--json", action="store_true", help="print the report as JSON")
    cmp.set_defaults(run=_compare)

    prof = sub.add_parser("profile", help="count a kernel's GPU cost on the emulator (instructions, memory "
                                          "sectors, bank conflicts, flops) and estimate its time on a GPU")
    _add_kernel(prof, dict(batch=2, queries=4, keys=5, qk=3, value=2))
    _add_sizes(prof)
    prof.add_argument("--arch", default="sm_90", help="compute capability of the PTX (default sm_90)")
    prof.add_argument("--gpu", choices=sorted(GPU_NAMES), default=None,
                      help="the GPU of the estimate (default: a100 for sm_8x, h200 for sm_90)")
    prof.add_argument("--sample", type=_positive_int, default=None, metavar="BLOCKS",
                      help="emulate this many blocks, evenly spaced, and scale the counts up (default: the "
                           "whole grid when it is small, else a sample; see docs/tools.md)")
    prof.add_argument("--json", action="store_true", help="print the profile as JSON")
    prof.set_defaults(run=_profile)

    ptx = sub.add_parser("ptx", help="print or write the PTX of a kernel")
    _add_codegen(ptx)
    ptx.set_defaults(run=_ptx)

    info = sub.add_parser("info", help="registers, spills, shared memory and occupancy of a kernel (ptxas -v)")
    _add_kernel(info, dict(batch=2, queries=64, keys=64, qk=64, value=64))
    info.add_argument("--arch", default="sm_80,sm_90,sm_90a",
                      help="comma-separated architectures (default sm_80,sm_90,sm_90a)")
    info.add_argument("--fast-math", action="store_true", help="f32 math with NVPTX's approximate instructions")
    info.add_argument("--no-checks", action="store_true", help="omit bounds and division checks")
    info.add_argument("--flash", action="store_true", help="attention: the flash entry (blocks, shared tiles)")
    info.set_defaults(run=_info)

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
    except BrokenPipeError:  # the reader stopped early (accy ir ... | head): no traceback, as other tools
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's own flush at exit must not fail
        return 0


if __name__ == "__main__":
    sys.exit(main())
