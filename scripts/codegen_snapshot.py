"""Snapshot of accy's generated code, to check that a refactoring changes no output.

``python scripts/codegen_snapshot.py OUT`` writes, for each kernel of examples/*.py (their
``PROGRAMS``), of accy.library (the f32 naive, fused and flash attention entries and the tile
entry in f32, bf16 and f16, at a few shapes, causal or not) and of bench/ (the GPU check's
tile matmuls, tile attentions and transposes, the autotuner's configs, the CPU benchmarks'
tiles and attention shapes; of shapes that differ only in constants, a few), its PTX for
sm_80 and sm_90 and its host LLVM IR (checks on, default options; ``host`` at vector width
8, ``host_w4`` and ``host_w16`` at 4 and 16, whatever this CPU's) to
``OUT/<kernel>.<target>.txt``, built afresh (the compile cache off), each kernel in a process
forked for it after collection (``--jobs`` at once), and normalised up to names, nothing
else: the checkout's path becomes ``<repo>`` and this script's ``<caller>`` (in the PTX's
file table), the PTX's ``.loc`` line markers go (a tile program's vary from run to run),
llvmlite's anonymous values (``%".12"``) are renumbered in order of appearance in each
function, and a target a kernel does not compile for holds the error.  ``python
scripts/codegen_snapshot.py --compare A B`` lists the files that differ (the head of a
unified diff of each) or that one side lacks, and exits 1 if there are any.  It uses public
entry points only (``accy``, ``Program.ptx``, ``Program.llvm_ir``, ``accy.library``, bench/'s
and examples/' kernels), so it runs unchanged across a move of accy.backends' modules.
Known limit: the host IR of block launches (softmax, layer norm, matmul, sum, flash
attention) varies from run to run (their stack slots are allocated in the order of a set of
values), as does a causal tile attention's choice between stack slots of equal lifetime.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import multiprocessing
import os
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PTX_ARCHS = ("sm_80", "sm_90")
HOST_WIDTHS = {"host": "8", "host_w4": "4", "host_w16": "16"}  # file suffix -> ACCY_VECTOR_WIDTH
DIFF_LINES = 40  # of each differing file's unified diff


def _example(name: str):
    spec = importlib.util.spec_from_file_location(f"codegen_snapshot_{name}", os.path.join(ROOT, "examples",
                                                                                           f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _examples():
    for file in sorted(os.listdir(os.path.join(ROOT, "examples"))):
        if file.endswith(".py"):
            stem = file[:-3]
            for program in _example(stem).PROGRAMS:
                yield f"examples.{stem}.{program.name}", program


def _library():
    from accy import ThreadBlocks, bf16, f16, f32
    from accy.library import (ScaledDotProduct, ScaledDotProductAttention2x2x3x2x2F32,
                              scaled_dot_product_f32, scaled_dot_product_flash_f32, scaled_dot_product_fused_f32,
                              scaled_dot_product_tile)

    yield _named("library", ScaledDotProductAttention2x2x3x2x2F32.program)
    # `accy ptx attention`'s default shape (with --causal, --threads), a mid-sized one, one past a warp
    specs = [ScaledDotProduct(2, 2, 3, 2, 2), ScaledDotProduct(2, 2, 3, 2, 2, causal=True),
             ScaledDotProduct(2, 2, 3, 2, 2, threads=ThreadBlocks(4, 2, 1)),
             ScaledDotProduct(2, 16, 32, 16, 16), ScaledDotProduct(2, 16, 32, 16, 16, causal=True),
             ScaledDotProduct(1, 37, 53, 40, 24)]
    for spec in specs:
        flash = () if spec.threads != specs[0].threads else (scaled_dot_product_flash_f32,)  # its own tiling
        for make in (scaled_dot_product_f32, scaled_dot_product_fused_f32, *flash):
            yield _named("library", make(spec).program)
    for spec, dtypes in ((specs[0], (f32, bf16, f16)), (specs[3], (f32, bf16, f16)), (specs[4], (f32, f16))):
        for dtype in dtypes:
            yield _named("library", scaled_dot_product_tile(spec, dtype).program)


def _bench():
    """bench/'s kernels; of its attention shapes, those that differ in more than constants (in
    their tiles, head dimensions, edges): the rest add seconds, not code paths."""
    from accy import f32
    from accy.library import AttentionTiles, ScaledDotProduct, scaled_dot_product_tile
    from bench import attention, autotune, gpu, gpu_kernels, tiles

    for case in gpu_kernels.SMALL.values():  # BENCH: the same matmuls, its attentions at 4096 tokens
        yield _named("bench", case.program)
    for dtype, (bm, bn, bk, warps), precision in gpu.TILE_MATMULS:
        yield _named("bench", gpu_kernels.tile_matmul(dtype, bm, bn, bk, warps, precision))
    for shape, dtype, causal in gpu.TILE_ATTENTION:
        if shape == gpu.TILE_ATTENTION[0][0]:  # the odd shape in every type, causal or not
            yield _named("bench", scaled_dot_product_tile(ScaledDotProduct(*shape, causal=causal), dtype).program)
    for shape in (*gpu.COMPARE_SHAPES[:3], autotune.ATTENTION_SHAPE):
        for make in attention.compile_entries().values():
            yield _named("bench", make(ScaledDotProduct(*shape)).program)
    make_matmul = _example("tile_matmul").make_matmul
    matmuls = [dict(bm=bm, bn=bn, bk=bk) for bm, bn, bk in (tiles.CPU_MATMUL_TILES, (32, 32, 16))]
    matmuls += [dict(bm=c["BM"], bn=c["BN"], bk=c["BK"], warps=c["warps"], num_stages=c["num_stages"])
                for c in autotune.MATMUL_CONFIGS[1:]]  # the first is the example's default
    for config in matmuls:
        program = make_matmul(**config)
        yield f"bench.{program.name}_" + "_".join(f"{k}{v}" for k, v in config.items()), program
    for config in autotune.ATTENTION_CONFIGS[1:]:  # the first is the entry's default, above
        spec = ScaledDotProduct(*autotune.ATTENTION_SHAPE)
        yield _named("bench", scaled_dot_product_tile(spec, f32, AttentionTiles(**config)).program)


def _named(group: str, program):
    return f"{group}.{program.name}", program


def kernels() -> dict:
    """label -> Program, each kernel once."""
    found, seen = {}, set()
    for label, program in (*_examples(), *_library(), *_bench()):
        if id(program) in seen:
            continue
        seen.add(id(program))
        if label not in found:
            found[label] = program
        elif not _same(found[label], program):
            raise SystemExit(f"codegen_snapshot: two different kernels labelled {label!r}")
    return found


def _same(a, b) -> bool:
    """The same kernel built twice (a memoised maker called with other arguments)."""
    return a.parameters == b.parameters and a.traced_graph.text() == b.traced_graph.text()


_ANONYMOUS = re.compile(r'%"\.(\d+)"')


def _renumber_anonymous(ir: str) -> str:
    """llvmlite's unnamed values (``%".12"``) renumbered from 1 in order of appearance in each
    function: their numbers count every value the builder made, placed or not."""
    out, numbers = [], {}
    for line in ir.splitlines(keepends=True):
        if line.startswith("define "):
            numbers = {}
        out.append(_ANONYMOUS.sub(lambda m: f'%".{numbers.setdefault(m.group(1), len(numbers) + 1)}"', line))
    return "".join(out)


def normalise(text: str) -> str:
    """``text`` up to names: the checkout's path becomes ``<repo>``, this script (debug info
    names the frame that asked for a tile program's PTX) ``<caller>``, and the PTX's line
    markers (``.loc``) go: which of a tile op's lines its instructions get varies from run
    to run (the distributor tags the ops it recorded by ``id``, reused once one is freed)."""
    text = text.replace(ROOT + os.sep, "<repo>/").replace(ROOT, "<repo>")
    script = "<repo>/" + os.path.relpath(os.path.abspath(__file__), ROOT).replace(os.sep, "/")
    return re.sub(r"^\t\.loc\t.*\n", "", text.replace(script, "<caller>"), flags=re.M)


def _text(make) -> str:
    """What ``make()`` returns, or the error it raises: a kernel that does not compile for a
    target (a CPU-sized tile matmul's shared memory on a GPU) must go on failing the same way."""
    import accy

    try:
        return make()
    except accy.AccyError as e:
        return f"error: {type(e).__name__}: {e}\n"


def outputs(program) -> dict:
    """target -> normalised text: PTX per arch, host LLVM IR per vector width."""
    texts = {arch: normalise(_text(lambda: program.ptx(arch))) for arch in PTX_ARCHS}
    for suffix, width in HOST_WIDTHS.items():
        os.environ["ACCY_VECTOR_WIDTH"] = width  # read at each lowering (the host's own width by default)
        texts[suffix] = _renumber_anonymous(normalise(_text(lambda: program.llvm_ir("host"))))
    return texts


_KERNELS: dict = {}  # label -> Program, for the workers (forked: they inherit it)


def _write_kernel(job) -> tuple[str, int, float]:
    """Writes one kernel's files; returns its label, their count and the CPU seconds taken."""
    label, out = job
    began = time.process_time()
    texts = outputs(_KERNELS[label])
    for target, text in texts.items():
        with open(os.path.join(out, f"{label}.{target}.txt"), "w") as f:
            f.write(text)
    return label, len(texts), time.process_time() - began


def write_snapshot(out: str, jobs: int) -> int:
    start = time.perf_counter()
    os.makedirs(out, exist_ok=True)
    stale = [f for f in os.listdir(out) if f.endswith(".txt")]
    if stale:
        raise SystemExit(f"codegen_snapshot: {out} already holds {len(stale)} snapshot files; give an empty folder")
    _KERNELS.update(kernels())
    work = [(label, out) for label in _KERNELS]
    # a process forked for each kernel, so that none sees what another compiled (fork: the
    # Programs are closures, which do not pickle)
    with multiprocessing.get_context("fork").Pool(jobs, maxtasksperchild=1) as pool:
        files, cpu = 0, 0.0
        for label, count, seconds in pool.imap_unordered(_write_kernel, work):
            files, cpu = files + count, cpu + seconds
            print(f"  {label}: {seconds:.2f} s", file=sys.stderr)
    print(f"codegen_snapshot: {len(_KERNELS)} kernels, {files} files in {out} "
          f"({time.perf_counter() - start:.1f} s, {jobs} processes, {cpu:.1f} CPU s compiling)")
    return 0


def _snapshot_files(folder: str) -> set[str]:
    files = {f for f in os.listdir(folder) if f.endswith(".txt")} if os.path.isdir(folder) else set()
    if not files:
        raise SystemExit(f"codegen_snapshot: {folder} holds no snapshot")
    return files


def compare(a: str, b: str) -> int:
    names_a, names_b = _snapshot_files(a), _snapshot_files(b)
    differ = 0
    for name in sorted(names_a | names_b):
        if name not in names_b or name not in names_a:
            print(f"only in {a if name in names_a else b}: {name}")
            differ += 1
            continue
        with open(os.path.join(a, name)) as f:
            left = f.readlines()
        with open(os.path.join(b, name)) as f:
            right = f.readlines()
        if left != right:
            differ += 1
            diff = list(difflib.unified_diff(left, right, os.path.join(a, name), os.path.join(b, name), n=2))
            print(f"differs: {name}")
            sys.stdout.writelines(diff[:DIFF_LINES])
            if len(diff) > DIFF_LINES:
                print(f"  ... {len(diff) - DIFF_LINES} more diff lines")
    print(f"codegen_snapshot: {len(names_a | names_b)} files, {differ} differ or missing")
    return 1 if differ else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", help="write the snapshot to this (empty or new) folder")
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two snapshot folders")
    parser.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1,
                        help="processes compiling at once (default: one per CPU)")
    ns = parser.parse_args(argv)
    if (ns.out is None) == (ns.compare is None):
        parser.error("give OUT, or --compare A B")
    if ns.compare:
        return compare(*ns.compare)
    os.environ["ACCY_CACHE"] = "0"  # every file built afresh, not read from a compile cache or graph store
    sys.path.insert(0, ROOT)  # this checkout's accy, whatever an installed one points to
    import accy

    if not os.path.abspath(accy.__file__).startswith(os.path.join(ROOT, "accy") + os.sep):
        raise SystemExit(f"codegen_snapshot: accy imported from {accy.__file__}, not from {ROOT}")
    return write_snapshot(ns.out, max(1, ns.jobs))


if __name__ == "__main__":
    sys.exit(main())
