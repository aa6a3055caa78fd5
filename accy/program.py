"""Programs: a named kernel body with parameters and a schedule, and what you do with one:
trace it, run it on a backend, emit its PTX or LLVM IR, build an artifact."""

from __future__ import annotations

import collections
import functools
import threading
from typing import Callable, Sequence

import attrs

from .runtime import get_backend, resolve_launch, run
from .runtime.arguments import _by_name, bind_arguments
from .runtime.tensor_arguments import expand_tensor_arguments
from .dsl.constexpr import Constexpr, value_text
from .dsl.ir import Graph, Param
from .dsl.context import user_location
from .dsl.schedule import DEFAULT_THREADS, Launch, Limits, ThreadBlocks
from .dsl.tensors import TensorParams, declared_parameters, tensor_parameters
from .dsl.trace import declarations, parameters, trace
from .errors import ArgumentError, TraceError
from .graph_store import body_name, stored_graph
from .trace_cache import KEPT, OPTIMISED, TRACED, body_key
from .lowering.pipeline import lower, run_passes
from .targets import FRONT_END, WARP_SIZE, Target


def _check_name(instance, attribute, value):
    if not isinstance(value, str) or not value.isidentifier():
        raise TraceError(f"program name must be an identifier (it names the GPU entry point), got {value!r}",
                         user_location())


@attrs.frozen(eq=False)
class Program:
    """``Program(name, parameters={"dst": dynamic_buffer(f32), "n": scalar(index)}, body)``.

    ``body(k, args)`` is called once, at trace time, with the top-level builder
    ``k`` and the parameters; it must open one launch with ``k.for_each_Nd``.

    A body that accy's library named (:func:`accy.graph_store.name_body`) keeps its optimised
    graph on disk for later processes.

    ``constexprs`` are parameters whose values the body reads as Python values (``@kernel(...,
    window=constexpr(int))``): each distinct value is a graph of its own, so such a program
    has no graph until :meth:`specialized` binds them; a run takes them among its arguments and
    specialises on them.  ``constants`` are the values bound so far.
    """

    name: str = attrs.field(validator=_check_name)
    parameters: tuple[Param, ...] = attrs.field(converter=parameters)
    body: Callable
    schedule: ThreadBlocks | None = None
    # a single-use f32/f64 product and the add or sub using it as one fma (accy.dsl.contraction)
    fp_fusion: bool = attrs.field(default=True, kw_only=True)
    constexprs: tuple[Constexpr, ...] = attrs.field(default=(), kw_only=True, converter=tuple,
                                                    validator=lambda program, _, value: _check_constexprs(program, value))
    constants: tuple[tuple[str, object], ...] = attrs.field(default=(), kw_only=True, converter=tuple)

    def with_schedule(self, schedule: ThreadBlocks) -> "Program":
        if not isinstance(schedule, ThreadBlocks):
            raise TraceError(f"with_schedule: expected schedule.thread_blocks(...), got {schedule!r}")
        return attrs.evolve(self, schedule=schedule)

    def with_fp_fusion(self, fused: bool) -> "Program":
        """This program with multiply-add contraction on (the default) or off: off, each
        product is rounded before the add that uses it, as the body says."""
        if not isinstance(fused, bool):
            raise TraceError(f"with_fp_fusion: expected True or False, got {fused!r}")
        return attrs.evolve(self, fp_fusion=fused)

    withSchedule = with_schedule

    @functools.cached_property
    def tensors(self) -> tuple[TensorParams, ...]:
        """The tensor parameters, each with the graph parameters it became (its buffer, then
        its hidden shape, stride and offset scalars, right after it in ``parameters``)."""
        return tensor_parameters(self.parameters)

    @functools.cached_property
    def _trace_key(self):
        """What the body's graph depends on (:mod:`accy.trace_cache`), or None."""
        body = body_key(self.body)
        return None if body is None else (self.name, self.parameters, body, _constants_key(self.constants))

    @functools.cached_property
    def traced_graph(self) -> Graph:
        """The graph exactly as the body recorded it (verified, not optimised); a Program of
        the same name, parameters, body and constants traced before in this process gives its graph."""
        self._check_bound("traced_graph")
        return TRACED.get(self._trace_key, lambda: trace(self.name, self.parameters, self.body, self.constants))

    @functools.cached_property
    def graph(self) -> Graph:
        """The optimised graph: constant folding, CSE, loop-invariant hoisting, dead-code removal,
        multiply-add contraction (unless :meth:`with_fp_fusion` turned it off)."""
        self._check_bound("graph")
        passes = FRONT_END if self.fp_fusion else tuple(p for p in FRONT_END if p != "contract")
        build = lambda: run_passes(self.traced_graph, Target.reference(), passes)  # noqa: E731 (trace verifies)
        key = None if self._trace_key is None else (*self._trace_key, self.fp_fusion)
        name = body_name(self.body)
        if name is not None:
            stored = name if self.fp_fusion else f"{name} (fp_fusion off)"
            if self.constants:
                stored = f"{stored} [{value_text(self.constants)}]"
            return OPTIMISED.get(key, lambda: stored_graph(stored, self.name, self.parameters, build))
        return OPTIMISED.get(key, build)

    # -- constexpr parameters ------------------------------------------------------------------

    @functools.cached_property
    def call_order(self) -> tuple[Param | Constexpr, ...]:
        """What a call passes one argument for, in order: the declared parameters (a tensor
        once) with the unbound constexprs among them where they were declared."""
        declared = list(declared_parameters(self.parameters))
        for inserted, c in enumerate(self.constexprs):  # in declaration order: those before it are in
            declared.insert(c.position + inserted, c)
        return tuple(declared)

    def specialized(self, **values) -> "Program":
        """This program with constexpr parameters bound: ``pool.specialized(window=3, stride=2)``
        is the Program of those values (its graph, its PTX; a run of it takes the other
        arguments).  Each value is checked against its parameter; the same values give the
        same Program object (its graph traced and its code compiled once)."""
        if not values:
            return self
        declared = {c.name: c for c in self.constexprs}
        unknown = [n for n in values if n not in declared]
        if unknown:
            bound = f"; bound already: {value_text(self.constants)}" if self.constants else ""
            raise ArgumentError(f"{self.name}.specialized: no constexpr parameter {unknown[0]!r} (its constexpr "
                                f"parameters: {', '.join(declared) or 'none'}{bound})")
        checked = tuple((c.name, c.spec.checked(c.name, values[c.name])) for c in self.constexprs if c.name in values)
        key = _constants_key(checked)
        with self._specializations_lock:
            found = self._specializations.get(key)
            if found is not None:
                self._specializations.move_to_end(key)
                return found
        program = attrs.evolve(self, constexprs=tuple(c for c in self.constexprs if c.name not in values),
                               constants=self.constants + checked)
        with self._specializations_lock:
            program = self._specializations.setdefault(key, program)  # a racing thread's, if it came first
            while len(self._specializations) > KEPT:
                self._specializations.popitem(last=False)
        return program

    def specialized_for(self, args):
        """``(program, rest)``: this program specialised on the constexpr values among ``args``
        (by position or by name, as a run takes them), and the other arguments, as the
        specialised program's run takes them.  A program with no constexpr gives itself and
        ``args`` unchanged."""
        if not self.constexprs:
            return self, args
        order = self.call_order
        if isinstance(args, (list, tuple)) and len(args) == len(order):  # by position: kept so (the fast path)
            values = {p.name: a for p, a in zip(order, args) if isinstance(p, Constexpr)}
            return self.specialized(**values), [a for p, a in zip(order, args) if not isinstance(p, Constexpr)]
        named = _by_name(order, args)
        values = {c.name: named.pop(c.name) for c in self.constexprs}
        return self.specialized(**values), named

    def _check_bound(self, what: str) -> None:
        if self.constexprs:
            names = ", ".join(c.name for c in self.constexprs)
            values = ", ".join(f"{c.name}=..." for c in self.constexprs)
            raise TraceError(f"kernel '{self.name}': its {what} depends on the values of its constexpr parameters "
                             f"({names}): use {self.name}.specialized({values}).{what}, or pass the values among "
                             f"a run's arguments")

    @functools.cached_property
    def _specializations(self) -> collections.OrderedDict:
        """The constants' key -> the Program :meth:`specialized` made (the least recently used
        dropped past ``KEPT``)."""
        return collections.OrderedDict()

    @functools.cached_property
    def _specializations_lock(self) -> threading.Lock:
        return threading.Lock()

    def stored_buffers(self) -> frozenset[str]:
        """The parameters the kernel stores to (its outputs)."""
        return self.graph.stored_buffers()

    def graph_for(self, backend: str, arch: str | None = None) -> Graph:
        """The graph ``backend`` compiles: the optimised graph lowered by the passes of the
        backend's target (:func:`lowered`); for ``arch`` (None: the device's, taken to be sm_80
        or later)."""
        return self.lowered(get_backend(backend).target(arch))

    def lowered(self, target: Target) -> Graph:
        """The optimised graph through ``target``'s own passes (:attr:`accy.targets.Target.passes`):
        for NVPTX a tile program becomes a SIMT block launch, its ``dot`` on tensor cores where
        the target has them (:func:`accy.lowering.distribute.distribute`); the NumPy interpreter
        and the host run tile programs as they are."""
        if not self.graph.is_tile_launch or not target.tile_pipeline:
            return self.graph
        key = (target.tile_pipeline, target.capabilities)
        cache = self._lowered
        if key not in cache:
            cache[key] = lower(self.graph, target)
        return cache[key]

    def distributed(self, tensor_cores: bool = True) -> Graph:
        """A tile program's SIMT block launch, optimised, with ``dot`` on tensor cores or FMA."""
        return self.lowered(Target.nvptx("sm_80" if tensor_cores else "sm_75"))

    @functools.cached_property
    def _lowered(self) -> dict:
        return {}

    @functools.cached_property
    def launchers(self) -> dict:
        """(backend, limits, *options) -> the backend's launcher for repeated calls (a cache)."""
        return {}

    @functools.cached_property
    def threads(self) -> ThreadBlocks:
        """The block shape: a block launch's own, else the schedule's (or the default for the rank)."""
        graph = self.graph  # the launch as traced (the passes keep it), and a stored graph has no trace
        if graph.is_block_launch:
            return ThreadBlocks(*graph.block_shape)
        if graph.is_tile_launch:  # a program is a block of warps * WARP_SIZE threads (on the CPU, one lane)
            return ThreadBlocks(graph.launch_op.attrs.warps * WARP_SIZE)
        return self.schedule if self.schedule is not None else DEFAULT_THREADS[len(graph.axes)]

    def launch(self, limits: Limits | None = None, *, args=None) -> Launch:
        """The launch geometry, checked against ``limits``; a program whose extents are
        computed from run-time values needs its arguments to be sized."""
        if args is not None and self.constexprs:
            program, args = self.specialized_for(args)
            return program.launch(limits, args=args)
        binding = None
        if args is not None and self.graph.static_extents is None:
            binding = bind_arguments(self.graph, expand_tensor_arguments(self.graph, args))
        return resolve_launch(self.graph, self.threads, binding, limits)

    def run(self, args, backend: str = "numpy", *, limits: Limits | None = None, **options):
        """Run on ``backend`` with arrays (by position or by name) and scalars; outputs are
        written in place; the values of constexpr parameters are among them, and choose the
        graph that runs (:meth:`specialized`)."""
        program, args = self.specialized_for(args)
        return run(program, args, backend=backend, limits=limits, **options)

    def profile(self, args, arch: str = "sm_90", gpu=None, *, sample: int | None = None,
                limits: Limits | None = None):
        """What a launch with ``args`` costs a GPU, counted on the CPU: the PTX ``cuda`` would
        launch for ``arch`` runs on the emulator (as ``backend="ptx"``, outputs to scratch: the
        arrays are untouched) with counters on, and the counts go through a roofline model of
        ``gpu`` ("h200", "h100", "a100"; None: an A100 for sm_8x, an H200 for sm_90).  A big
        grid runs a sample of its blocks (``sample``: that many; None: chosen by size) and the
        counts are scaled up.  Returns an :class:`accy.Profile` (see docs/tools.md)."""
        from .runtime.emulated import profile

        program, args = self.specialized_for(args)
        return profile(program, args, arch=arch, gpu=gpu, sample=sample, limits=limits)

    def ptx(self, arch: str = "sm_80", *, fast_math: bool = False, checks: bool = True, args=None) -> str:
        """The kernel's PTX for ``arch``, exactly as the cuda backend compiles it; with ``args``,
        the PTX a launch with those arguments runs (32-bit index arithmetic where they fit)."""
        from .codegen.machine import emit_ptx

        if args is not None and self.constexprs:
            program, args = self.specialized_for(args)
            return program.ptx(arch, fast_math=fast_math, checks=checks, args=args)
        graph = self.graph_for("cuda", arch)
        if args is not None:
            graph = self._launch_graph(graph, args)
        return emit_ptx(graph, Target.nvptx(arch, fast_math=fast_math, checks=checks), _block_of(graph, self.threads))

    def _launch_graph(self, graph: Graph, args) -> Graph:
        from .runtime.gpu import launch_graph

        if self.tensors:
            args = expand_tensor_arguments(self.graph, args)
        binding = bind_arguments(graph, args)
        return launch_graph(graph, binding, resolve_launch(graph, self.threads, binding, None))

    def indices_32_bit(self, args, arch: str = "sm_80") -> bool:
        """Whether a device launch with ``args`` runs the kernel's 32-bit index arithmetic."""
        if self.constexprs:
            program, args = self.specialized_for(args)
            return program.indices_32_bit(args, arch)
        graph = self.graph_for("cuda", arch)
        return self._launch_graph(graph, args) is not graph

    def llvm_ir(self, target: str = "host", *, arch: str = "sm_80", fast_math: bool = False,
                checks: bool = True) -> str:
        """The LLVM IR the kernel lowers to, for ``target`` "host" or "nvptx" (before optimisation)."""
        from .codegen.machine import llvm_ir

        if target not in ("host", "nvptx"):
            raise TraceError(f"llvm_ir: target must be 'host' or 'nvptx', got {target!r}")
        lowering = Target.host(checks=checks) if target == "host" else Target.nvptx(arch, fast_math=fast_math,
                                                                                   checks=checks)
        graph = self.graph_for("llvm" if target == "host" else "cuda", arch)
        return llvm_ir(graph, lowering, _block_of(graph, self.threads))

    def create_kernel_call_artifact(self, backend_state, limits: Limits | None = None, *, version: int = 1,
                                    target: str | None = None):
        """Compile with ``backend_state`` into a registry-ready artifact (target = the program's name)."""
        from .runtime.artifacts import KernelCallArtifact, build_artifact

        graph = self.graph_for("cuda")
        launch = resolve_launch(graph, self.threads, None, limits) if graph.static_extents is not None else None
        artifact = build_artifact(graph, launch, _block_of(graph, self.threads), backend_state,
                                  target=target or self.name, version=version)
        return KernelCallArtifact((artifact,), backend_state)

    createKernelCallArtifact = create_kernel_call_artifact


def _check_constexprs(program: Program, constexprs: tuple) -> None:
    taken = {p.name for p in program.parameters}
    for c in constexprs:
        if not isinstance(c, Constexpr):
            raise TraceError(f"program '{program.name}': constexprs= takes the Constexpr declarations "
                             f"accy.dsl.trace.declarations makes, got {c!r}")
        if c.name in taken:
            raise TraceError(f"program '{program.name}': '{c.name}' is declared twice")
        taken.add(c.name)


def _constants_key(constants) -> tuple:
    """Bound constants as a key: by repr, in which 0.0 and -0.0 differ and NaN is itself."""
    return tuple(sorted((name, repr(value)) for name, value in constants))


def _block_of(graph: Graph, threads: ThreadBlocks) -> tuple[int, int, int]:
    """The block shape a lowering of ``graph`` gets: a block launch's own (a tile program's
    distributed graph is one), else the program's."""
    return ThreadBlocks(*graph.block_shape).block if graph.is_block_launch else threads.block


def kernel(name: str | None = None, /, *, fp_fusion: bool = True, specialize: Sequence[str] = (),
           **declared) -> Callable[[Callable], Program]:
    """``@accy.kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32), n=scalar(index))`` over
    ``def name(k, args)`` makes the :class:`Program` ``name``; ``@accy.kernel("gelu_f16", ...)``
    names it explicitly (it names the GPU entry point); ``fp_fusion=False`` keeps every product
    rounded before the add that uses it (:meth:`Program.with_fp_fusion`).  A parameter declared
    ``constexpr(int)`` (or ``bool``, ``float``), and an integer or boolean ``scalar`` named in
    ``specialize=("n", ...)``, reaches the body as a Python value, fixed per call: each value
    traces its own graph (:meth:`Program.specialized`)."""
    params, constexprs = declarations(declared, specialize)
    if not isinstance(fp_fusion, bool):
        raise TraceError(f"@kernel: fp_fusion must be True or False, got {fp_fusion!r}")

    def make(body: Callable) -> Program:
        if not callable(body):
            raise TraceError(f"@kernel must decorate a function (k, args), got {body!r}")
        return Program(name or body.__name__, params, body, fp_fusion=fp_fusion, constexprs=constexprs)

    return make
