"""Programs: a named kernel body with buffer parameters and a schedule."""

from __future__ import annotations

import functools
import re
from typing import Callable, Mapping

import attrs

from ..errors import TraceError
from .builder import Builder, BufferHandle
from .ir import Block, Graph, Param
from .schedule import DEFAULT_THREADS, Launch, Limits, ThreadBlocks
from .types import BUFFER_DTYPES, DType, as_dtype

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@attrs.frozen
class BufferSpec:
    """A parameter's declaration: element type and, when fixed, element count."""

    dtype: DType = attrs.field(converter=as_dtype)
    count: int | None = None


def dynamic_buffer(dtype) -> BufferSpec:
    """A buffer of ``dtype`` whose length is given by the argument at run time."""
    return BufferSpec(dtype)


def buffer(dtype, count: int) -> BufferSpec:
    """A buffer of ``dtype`` holding exactly ``count`` elements (checked at run time)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise TraceError(f"buffer: count must be a non-negative int, got {count!r}")
    return BufferSpec(dtype, count)


dynamicBuffer = dynamic_buffer


def _params(parameters: Mapping[str, BufferSpec]) -> tuple[Param, ...]:
    if isinstance(parameters, tuple) and all(isinstance(p, Param) for p in parameters):
        return parameters
    params = []
    for name, spec in dict(parameters).items():
        if not isinstance(name, str) or not _IDENT.match(name):
            raise TraceError(f"parameter name {name!r} is not an identifier")
        if not isinstance(spec, BufferSpec):
            raise TraceError(f"parameter '{name}': expected dynamic_buffer(dtype) or buffer(dtype, n), got {spec!r}")
        if spec.dtype not in BUFFER_DTYPES:
            raise TraceError(f"parameter '{name}': buffers hold {', '.join(map(str, BUFFER_DTYPES))}, not {spec.dtype}")
        params.append(Param(name, spec.dtype, spec.count))
    return tuple(params)


class KernelArgs:
    """The parameters as a kernel body sees them: ``args.param("dst")``, ``args.dst``."""

    def __init__(self, params: tuple[Param, ...]):
        self._handles = {p.name: BufferHandle(p) for p in params}

    def param(self, name: str) -> BufferHandle:
        try:
            return self._handles[name]
        except KeyError:
            raise TraceError(f"no parameter named {name!r}; parameters are {', '.join(self._handles)}") from None

    __getitem__ = param

    def __getattr__(self, name: str) -> BufferHandle:
        if name.startswith("_"):
            raise AttributeError(name)
        return self.param(name)

    def __iter__(self):
        return iter(self._handles.values())


def _check_name(instance, attribute, value):
    if not isinstance(value, str) or not _IDENT.match(value):
        raise TraceError(f"program name must be an identifier (it names the GPU entry point), got {value!r}")


@attrs.frozen(eq=False)
class Program:
    """``Program(name, parameters={"dst": dynamic_buffer(f32), ...}, body)``.

    ``body(k, args)`` is called once, at trace time, with the top-level builder
    ``k`` and the parameters; it must open one launch with ``k.for_each_Nd``.
    """

    name: str = attrs.field(validator=_check_name)
    parameters: tuple[Param, ...] = attrs.field(converter=_params)
    body: Callable
    schedule: ThreadBlocks | None = None

    def with_schedule(self, schedule: ThreadBlocks) -> "Program":
        if not isinstance(schedule, ThreadBlocks):
            raise TraceError(f"with_schedule: expected schedule.thread_blocks(...), got {schedule!r}")
        return attrs.evolve(self, schedule=schedule)

    withSchedule = with_schedule

    @functools.cached_property
    def traced_graph(self) -> Graph:
        """The graph exactly as the body recorded it (verified, not optimised)."""
        from .passes import verify

        block = Block()
        k = Builder(block)
        try:
            with k:
                self.body(k, KernelArgs(self.parameters))
        except Exception as e:
            if not isinstance(e, TraceError):
                e.add_note(f"(raised by the body of kernel '{self.name}' while accy traced it)")
            raise
        graph = Graph(self.name, self.parameters, block)
        if graph.launch_op is None:
            raise TraceError(f"kernel '{self.name}': the body never opened a launch with for_each_1d/2d/3d")
        verify(graph)
        return graph

    @functools.cached_property
    def graph(self) -> Graph:
        """The optimised graph: constant folding, CSE and dead-code removal."""
        from .passes import optimize

        return optimize(self.traced_graph)

    @property
    def threads(self) -> ThreadBlocks:
        return self.schedule if self.schedule is not None else DEFAULT_THREADS[len(self.traced_graph.axes)]

    def launch(self, limits: Limits | None = None) -> Launch:
        launch = self.threads.launch(self.traced_graph.axes)
        return (limits or Limits.default).check(launch)

    def create_kernel_call_artifact(self, backend_state, limits: Limits | None = None, *, version: int = 1):
        """Compile with ``backend_state`` into a registry-ready artifact (target = the program's name)."""
        from ..backends.artifacts import create_kernel_call_artifact

        return create_kernel_call_artifact(self, backend_state, target=self.name, version=version, limits=limits)

    def run(self, args, backend: str = "numpy", *, limits: Limits | None = None, **options):
        """Run on ``backend`` with NumPy arrays (by position or by name); outputs are written in place."""
        from ..backends import run

        return run(self, args, backend=backend, limits=limits, **options)
