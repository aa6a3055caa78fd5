"""From an LLVM module to machine code: PTX text for NVPTX, a JIT-compiled
function for the host.  Both run LLVM's O3 pipeline first, and both keep what they
compile in the disk cache (:mod:`.cache`; the host's object code: :mod:`.host_code`)."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc
import os
import threading
import weakref

import attrs
import llvmlite.binding as llvm

from ..dsl.ir import Graph, Op
from ..dsl.ops import BlockUnit
from ..errors import CompileError
from .. import cache
from .host import code_store as host_code
from .abi import host_signature, prepare_signature
from .nvptx.debug_lines import locations_key
from .llvm import LoweredModule
from .nvptx.lowering import NVPTX_TRIPLE, lower_nvptx
from .host.spmd import lower_host, lower_host_checked
from .host.tiles import lower_tile_host
from ..targets import HostTarget, NvptxTarget, Target, init_llvm, init_native
from .nvptx.toolchain import find_libdevice

_lock = threading.RLock()  # LLVM's context is not safe to use from several threads at once


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector paused while a module is lowered and compiled: the
    lowering makes tens of thousands of IR objects, and a full collection among them costs
    as much as a fifth of a compile."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@functools.cache
def _nvptx_machine(arch: str) -> llvm.TargetMachine:
    init_llvm()
    return llvm.Target.from_triple(NVPTX_TRIPLE).create_target_machine(cpu=arch, opt=3)


@functools.cache
def host_machine() -> llvm.TargetMachine:
    """The host's target machine, for optimising and for the data layout."""
    return _new_host_machine()


@functools.cache
def _load_libm() -> None:
    """Math functions (expf, erff, ...) come from the C library, loaded once a process: by
    glibc's name where that loads (``find_library`` runs ``ldconfig``: milliseconds)."""
    try:
        llvm.load_library_permanently("libm.so.6")
        return
    except RuntimeError:
        pass
    libm = ctypes.util.find_library("m")
    if libm:
        llvm.load_library_permanently(libm)


def _new_host_machine() -> llvm.TargetMachine:
    init_native()
    _load_libm()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3, jit=True
    )


def _optimise(module: llvm.ModuleRef, machine: llvm.TargetMachine, *, unroll: bool = True) -> None:
    options = llvm.create_pipeline_tuning_options(speed_level=3)
    options.loop_unrolling = unroll
    builder = llvm.create_pass_builder(machine, options)
    builder.getModulePassManager().run(module, builder)


def optimised_host_module(ir_text: str) -> llvm.ModuleRef:
    """``ir_text`` parsed for the host target machine (the host CPU's name and features) and
    run through LLVM's O3 pipeline, as accy's own host kernels are: for benchmarks and tests
    that compile LLVM IR of their own (vecmath's routines alone)."""
    with _lock:
        machine = host_machine()
        try:
            module = llvm.parse_assembly(ir_text)
            module.triple = machine.triple
            module.data_layout = str(machine.target_data)
            module.verify()
        except RuntimeError as e:
            raise CompileError(f"LLVM rejected the module: {e}") from None
        _optimise(module, machine)
        return module


def jit_host_module(ir_text: str) -> llvm.ExecutionEngine:
    """:func:`optimised_host_module`, JIT-compiled: the engine holds the machine code, so keep
    it alive while its functions are called."""
    with _lock:
        # the engine owns (and frees with itself) the target machine it is given: give it its own
        engine = llvm.create_mcjit_compiler(optimised_host_module(ir_text), _new_host_machine())
        engine.finalize_object()
        return engine


def _drop_unused(module: llvm.ModuleRef) -> None:
    """Global dead-code elimination before O3, which would otherwise optimise all of libdevice."""
    passes = llvm.create_new_module_pass_manager()
    passes.add_global_dead_code_eliminate_pass()
    passes.run(module, llvm.create_pass_builder(_nvptx_machine("sm_80"), llvm.create_pipeline_tuning_options()))


@functools.cache
def _libdevice_subset(path: str, wanted: frozenset[str]) -> bytes:
    """libdevice cut down to ``wanted`` and what they call (once per process, and in
    the disk cache): linking all of it and letting O3 discard the rest costs a
    hundred milliseconds a kernel."""
    stat = os.stat(path)
    key = cache.cache_key("libdevice", path, str(stat.st_size), str(stat.st_mtime_ns), *sorted(wanted))
    return cache.cached(key, lambda: _cut_libdevice(path, wanted))


def _cut_libdevice(path: str, wanted: frozenset[str]) -> bytes:
    with open(path, "rb") as f:
        module = llvm.parse_bitcode(f.read())
    for fn in module.functions:
        if not fn.is_declaration and fn.name not in wanted:
            fn.linkage = "internal"
    _drop_unused(module)
    for fn in module.functions:  # back to linkable, so the kernel's declarations resolve
        if fn.name in wanted:
            fn.linkage = "external"
    return module.as_bitcode()


@attrs.frozen
class Emitter:
    """How a target's graphs become machine code: its lowering and its LLVM target machine."""

    lower: object  # (graph, target, block) -> LoweredModule
    machine: object  # target -> llvm.TargetMachine


# the code generators, by the name a target gives (Target.emitter)
EMITTERS: dict[str, Emitter] = {
    "host": Emitter(lambda graph, target, block: (lower_tile_host if graph.is_tile_launch else lower_host)(
        graph, target), lambda target: host_machine()),
    "nvptx": Emitter(lower_nvptx, lambda target: _nvptx_machine(target.arch)),
}


def _codegen(target: Target) -> Emitter:
    try:
        return EMITTERS[target.emitter]
    except KeyError:
        raise CompileError(f"no code generator for target {target!r}; code generators: "
                           f"{', '.join(EMITTERS)}") from None


def _machine(target: Target) -> llvm.TargetMachine:
    return _codegen(target).machine(target)


def lower(graph: Graph, target: Target, block=(1, 1, 1)) -> LoweredModule:
    """Lower ``graph`` for ``target`` (``block``: the launch's block shape, for NVPTX)."""
    return _codegen(target).lower(graph, target, block)


def _lower(graph: Graph, target: Target, block=(1, 1, 1)) -> LoweredModule:
    """Lower and stamp the module with the target machine's triple and data layout."""
    return _stamped(lower(graph, target, block), target)


def _stamped(lowered: LoweredModule, target: Target) -> LoweredModule:
    machine = _machine(target)
    lowered.module.triple = machine.triple
    lowered.module.data_layout = str(machine.target_data)
    return lowered


def _parse(lowered: LoweredModule, machine: llvm.TargetMachine, context=None) -> llvm.ModuleRef:
    try:
        module = llvm.parse_assembly(str(lowered.module), context)
        module.verify()
    except RuntimeError as e:
        raise CompileError(f"LLVM rejected the lowered module of {lowered.entry_name}: {e}") from None
    return module


def llvm_ir(graph: Graph, target: Target, block=(1, 1, 1)) -> str:
    """The textual LLVM IR of ``graph`` for ``target``, before optimisation."""
    with _lock:
        return str(_lower(graph, target, block).module)


def ptx_options(target: Target, block) -> str:
    return f"{target!r} block={tuple(block)}"


def emit_ptx(graph: Graph, target: Target, block=(1, 1, 1), *, use_cache: bool = True) -> str:
    """PTX for ``graph``, from the disk cache when it holds this exact build."""
    if not isinstance(target, NvptxTarget):
        raise CompileError(f"emit_ptx needs an NVPTX target, got {target.name}")
    # the PTX names the ops' source lines (.loc), which the graph's text leaves out
    key = cache.cache_key("ptx", graph.text(), ptx_options(target, block), locations_key(graph))
    build = lambda: _build_ptx(graph, target, block).encode()  # noqa: E731
    ptx = (cache.cached(key, build) if use_cache else build()).decode()
    for listener in ptx_listeners:
        listener(ptx, target)
    return ptx


# Called with (ptx, target) after every emission, cached or not: a test suite uses
# this to assemble every PTX it produces; a user can use it to dump PTX.
ptx_listeners: list = []


def _build_ptx(graph: Graph, target: Target, block) -> str:
    with _lock, _collector_paused():
        compilations["ptx"] += 1
        machine = _machine(target)
        lowered = _lower(graph, target, block)
        module = _parse(lowered, machine)
        if lowered.needs_libdevice:
            path = find_libdevice()
            if path is None:
                raise CompileError(
                    "math functions on NVPTX need libdevice (__nv_expf, ...), which was not found: pip install "
                    "nvidia-cuda-nvcc (accy's cuda and test extras do) or set CUDA_HOME; or choose the approximate "
                    "instructions with fast_math=True"
                )
            wanted = frozenset(fn.name for fn in module.functions if fn.is_declaration and fn.name.startswith("__nv_"))
            module.link_in(llvm.parse_bitcode(_libdevice_subset(path, wanted)))
            module.triple = NVPTX_TRIPLE
            module.data_layout = str(machine.target_data)
            for fn in module.functions:  # only the kernel stays visible
                if not fn.is_declaration and fn.name != lowered.entry_name:
                    fn.linkage = "internal"
        distributed = _tile_distributed(graph)
        _optimise(module, machine, unroll=not distributed)
        with _without_lsr() if distributed and _stages_copies(graph) else contextlib.nullcontext():
            return machine.emit_assembly(module)


def _stages_copies(graph: Graph) -> bool:
    """The program copies operands into shared memory by cp.async, each copy with a cold
    element-by-element fallback (accy.lowering.tensor_cores)."""
    return graph._fact("stages copies", lambda: any(op.opcode == "async_copy" for op in graph.body.walk()))


@contextlib.contextmanager
def _without_lsr():
    """LLVM's loop strength reduction off while the PTX of a tile program that stages its
    operands is generated (the option is the process's: callers hold ``_lock``).  The tile
    pipeline's ``strength-reduce`` has made the copies' stride products carried adds already;
    LSR would add 64-bit pointers of its own for the cold paths' addresses (a misaligned copy's
    element loop), a register pair each carried through the hot loop: at sm_90 the attention at
    head dim 128 holds 225 registers with it, 213 without.  A program that loads its operands
    into registers (an FMA dot) keeps it: there it saves registers (136 to 126 in a 64x64 f32
    matmul)."""
    llvm.set_option("", "-disable-lsr=true")
    try:
        yield
    finally:
        llvm.set_option("", "-disable-lsr=false")


def _tile_distributed(graph: Graph) -> bool:
    """A tile program distributed over a block's threads (accy.lowering.distribute): its loops are
    unrolled where it wants them (the dots, reductions and accesses by hand), and LLVM's unrolling
    of the rest (a fold's trips, the cold loops of a misaligned copy or a failed shape check)
    only lengthens the code and the registers' live ranges, as for a host tile launch."""
    launch = graph.launch_op
    return launch is not None and launch.opcode == "for_each_block" and launch.attrs.unit is BlockUnit.PROGRAM


@attrs.define(eq=False)
class HostKernel:
    """A JIT-compiled host launcher: ``launcher(fits)(pointers, counts, scalars, status, begin,
    end)`` runs units ``[begin, end)`` of ``plan.chunking.units(extents)``; ``prepare(pointers,
    counts, scalars, status, extents)`` writes the extents and says whether the launch fits."""

    graph: Graph
    target: Target
    ordinals: tuple[Op, ...]  # the ops in the status word's numbering
    plan: object  # accy.codegen.host.spmd.HostPlan
    engine: object  # the MCJIT engine must outlive the function pointers
    function: object
    prepare_function: object
    check_function: object = None  # a tile launcher's check-only pass over units [begin, end), if it has one
    checked: "HostKernel | None" = None  # the launcher with every check, once a launch needed it

    def launcher(self, fits: bool):
        """The native function for a launch whose prepare said ``fits``: a launcher without the
        checks the launch proof covers needs them back where it does not fit."""
        if fits or not self.plan.checked_separately:
            return self._call
        with _lock:
            if self.checked is None:
                self.checked = _jit(self.graph, self.target, every_check=True)
        return self.checked._call

    def _call(self, pointers, counts, scalars, status_pointer, begin: int, end: int) -> None:
        self.function(*pointers, *counts, *scalars, status_pointer, begin, end)

    def prepare(self, pointers, counts, scalars, status_pointer, extents_pointer) -> bool:
        return bool(self.prepare_function(*pointers, *counts, *scalars, status_pointer, extents_pointer))

    def check(self, pointers, counts, scalars, status_pointer, begin: int, end: int) -> None:
        self.check_function(*pointers, *counts, *scalars, status_pointer, begin, end)


# by graph text, so graphs of one text share a launcher; held weakly: a launcher lives while a
# graph holds it (in its facts), and a dropped Program's machine code goes with its graph
_host_kernels: "weakref.WeakValueDictionary[tuple[str, Target], HostKernel]" = weakref.WeakValueDictionary()
# how many modules this process compiled (tests count them), and host launchers it loaded from disk
compilations = {"host": 0, "ptx": 0, "host_loaded": 0}


def host_kernel(graph: Graph, target: Target | None = None) -> HostKernel:
    """The host launcher of ``graph``, compiled once per graph text while a graph of that text
    lives (it goes with the last one; the disk cache has it for the next)."""
    target = target or Target.host()
    with _lock:
        # per graph object, so a repeated launch skips printing the graph to find its key (not in a
        # WeakKeyDictionary: its value, the launcher, holds the graph, which would never go)
        per_graph = graph._fact("host kernels", dict)
        kernel = per_graph.get(target)
        if kernel is None:
            key = (graph.text(), target)
            kernel = _host_kernels.get(key)
            if kernel is None:
                kernel = _host_kernels[key] = _jit(graph, target)
            per_graph[target] = kernel
        return kernel


def _jit(graph: Graph, target: Target, *, every_check: bool = False) -> HostKernel:
    """The launcher of ``graph`` (``every_check``: its version with every check), from the disk
    cache when it holds this exact build, else compiled (and stored there)."""
    key = host_code.host_code_key(graph, target, "every check" if every_check else "launcher")
    code = host_code.load(key)
    if code is not None:
        compilations["host_loaded"] += 1
    else:
        code = _compile_host(graph, target, every_check)
        host_code.store(key, code)
    # the kept engine holds the object code alone, as one loaded from the disk cache does: the
    # compiling engine's module (the optimised IR, about ten times its size) goes with it
    return _host_kernel(graph, target, code, _engine_from_object(code.obj))


def _compile_host(graph: Graph, target: Target, every_check: bool) -> host_code.HostCode:
    """Lower, optimise and compile ``graph``'s launcher to the object MCJIT emits."""
    with _collector_paused():
        return _compile_host_now(graph, target, every_check)


def _compile_host_now(graph: Graph, target: Target, every_check: bool) -> host_code.HostCode:
    machine = host_machine()
    lowered = _stamped(lower_host_checked(graph, target), target) if every_check else _lower(graph, target)
    # a context of its own, freed with the module: the global one keeps every constant, type and
    # metadata string a module ever interned there, for the life of the process
    module = _parse(lowered, machine, llvm.create_context())
    # a tile kernel's loops are already vectors of whole registers (and its dot unrolled by hand):
    # LLVM's unrolling of them costs a third of the compile and gains nothing measurable
    _optimise(module, machine, unroll=not graph.is_tile_launch)
    # the engine owns (and frees with itself) the target machine it is given: give it its own
    engine = llvm.create_mcjit_compiler(module, _new_host_machine())
    emitted = []
    engine.set_object_cache(lambda _module, obj: emitted.append(obj), lambda _module: None)
    engine.finalize_object()
    compilations["host"] += 1
    prepare = "" if every_check else f"{graph.name}_prepare"
    check = f"{graph.name}_check" if getattr(lowered.host, "checked_whole", False) else ""
    return host_code.HostCode(lowered.entry_name, prepare, lowered.host, emitted[0], check)


def _engine_from_object(obj: bytes) -> llvm.ExecutionEngine:
    """An engine holding the object code ``obj`` (an empty module to start it: nothing to compile)."""
    module = llvm.parse_assembly("")
    module.triple = host_machine().triple
    engine = llvm.create_mcjit_compiler(module, _new_host_machine())
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    return engine


def _host_kernel(graph: Graph, target: Target, code: host_code.HostCode, engine: llvm.ExecutionEngine) -> HostKernel:
    address = engine.get_function_address(code.entry)
    prepare = engine.get_function_address(code.prepare) if code.prepare else None
    check = engine.get_function_address(code.check) if code.check else None
    if not address or (code.prepare and not prepare) or (code.check and not check):
        raise CompileError(f"JIT compilation of {code.entry} produced no function")
    # the ops in the status word's numbering: both host lowerings number the graph's walk
    return HostKernel(graph, target, tuple(graph.body.walk()), code.plan, engine, host_signature(graph)(address),
                      prepare and prepare_signature(graph)(prepare), check and host_signature(graph)(check))
