"""Library entries: a program plus the metadata a registry and a scheduler need.

The metadata is plain, immutable data (attrs classes), declared by each kernel
family and checked against the traced program where the two can disagree
(:meth:`Entry.schedule_snapshot` is taken from the program, not the metadata).
"""

from __future__ import annotations

import enum
import math
from typing import Sequence

import attrs
import numpy as np

from ..dsl.ir import Axis, Graph
from ..dsl.schedule import Launch, Limits, ThreadBlocks
from ..dsl.tensors import declared_parameters
from ..dsl.types import DType
from ..runtime import run
from ..runtime.arguments import _by_name, device_array
from ..errors import ArgumentError
from ..program import Program
from ..targets import WARP_SIZE


class Layer(enum.Enum):
    logical = "logical"  # written over logical axes; the schedule maps them to blocks
    block = "block"  # written over blocks of cooperating threads (shared memory, barriers)
    tile = "tile"  # a tile program (for_each_tile): whole-tile ops the compiler spreads over threads


class Category(enum.Enum):
    attention = "attention"


@attrs.frozen
class Operation:
    """What an entry computes, as ``family.kind`` (``attention.scaled_dot_product``)."""

    family: str
    kind: str

    def __str__(self) -> str:
        return f"{self.family}.{self.kind}"


ATTENTION_SCALED_DOT_PRODUCT = Operation("attention", "scaled_dot_product")


class ReductionOperator(enum.Enum):
    dot_product = "dot_product"
    maximum = "maximum"
    minimum = "minimum"
    sum = "sum"
    sum_exp_shifted = "sum_exp_shifted"
    weighted_sum = "weighted_sum"
    # online softmax (one pass): each term also rescales what was summed so far
    online_sum_exp_shifted = "online_sum_exp_shifted"
    online_weighted_sum = "online_weighted_sum"

    @property
    def element_ops(self) -> int:
        """Combine operations per reduced term: a multiply-accumulate counts 2, others 1,
        and an online (rescaling) form one more."""
        return _ELEMENT_OPS[self]


_ELEMENT_OPS = {
    ReductionOperator.dot_product: 2,
    ReductionOperator.weighted_sum: 2,
    ReductionOperator.maximum: 1,
    ReductionOperator.minimum: 1,
    ReductionOperator.sum: 1,
    ReductionOperator.sum_exp_shifted: 1,
    ReductionOperator.online_sum_exp_shifted: 2,
    ReductionOperator.online_weighted_sum: 3,
}


@attrs.frozen
class Shape:
    """A named-axis shape, outermost axis first: ``Shape.of(("b", 3), ("q", 2))``."""

    axes: tuple[Axis, ...]

    @classmethod
    def of(cls, *pairs: tuple[str, int]) -> "Shape":
        return cls(tuple(Axis(name, extent) for name, extent in pairs))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.axes)

    @property
    def extents(self) -> tuple[int, ...]:
        return tuple(a.extent for a in self.axes)

    def element_count(self) -> int:
        return math.prod(self.extents)

    def __str__(self) -> str:
        return " ".join(map(str, self.axes))


@attrs.frozen
class Reduction:
    name: str
    operator: ReductionOperator
    extents: Shape  # the reduced axes
    dependencies: tuple[str, ...] = ()


@attrs.frozen
class ReductionReuse:
    """A reduction's result is computed once per point of ``scope`` and reused."""

    reduction: str
    scope: Shape


@attrs.frozen
class ScheduleSnapshot:
    """A schedule as the traced program realises it under given limits."""

    axes: tuple[Axis, ...]  # logical axes bound to x, y, z
    threads: tuple[int, int, int]
    launch: Launch


@attrs.frozen
class ThreadBlocks3D:
    """Declared schedule: logical axes on x, y, z (one to three of them), tiled by
    blocks of ``threads``."""

    axes: tuple[Axis, ...]
    threads: tuple[int, int, int]

    def launch(self) -> Launch:
        return ThreadBlocks(*self.threads).launch([a.extent for a in self.axes])

    def matches_snapshot(self, snapshot: ScheduleSnapshot) -> bool:
        return (
            tuple(self.axes) == tuple(snapshot.axes)
            and tuple(self.threads) == tuple(snapshot.threads)
            and self.launch() == snapshot.launch
        )


@attrs.frozen
class BlockGrid:
    """Declared schedule of a block-layer entry: one block per point of ``grid`` (its axes
    count tiles), each of ``threads`` threads."""

    grid: tuple[Axis, ...]
    threads: tuple[int, int, int]

    @property
    def axes(self) -> tuple[Axis, ...]:
        return self.grid

    def launch(self) -> Launch:
        extents = tuple(a.extent for a in self.grid)
        return Launch(grid=extents + (1,) * (3 - len(extents)), block=self.threads, extents=extents)

    def matches_snapshot(self, snapshot: ScheduleSnapshot) -> bool:
        return (tuple(self.grid) == tuple(snapshot.axes) and tuple(self.threads) == tuple(snapshot.threads)
                and self.launch() == snapshot.launch)


@attrs.frozen
class TileGrid:
    """Declared schedule of a tile-layer entry: one tile program per point of ``grid`` (its axes
    count tiles), ``warps`` * 32 GPU threads each; how a tile spreads over them is the
    compiler's (on the CPU a program runs on one core)."""

    grid: tuple[Axis, ...]
    warps: int

    @property
    def axes(self) -> tuple[Axis, ...]:
        return self.grid

    @property
    def threads(self) -> tuple[int, int, int]:
        return (self.warps * WARP_SIZE, 1, 1)

    def launch(self) -> Launch:
        extents = tuple(a.extent for a in self.grid)
        return Launch(grid=extents + (1,) * (3 - len(extents)), block=self.threads, extents=extents)

    def matches_snapshot(self, snapshot: ScheduleSnapshot) -> bool:
        return (tuple(self.grid) == tuple(snapshot.axes) and tuple(self.threads) == tuple(snapshot.threads)
                and self.launch() == snapshot.launch)


@attrs.frozen
class TileReuse:
    """A tile of an operand staged in shared memory once per block and reused there: ``tile``
    is its named-axis shape, ``scope`` the outputs of the block that read it."""

    operand: str
    tile: Shape
    scope: Shape


@attrs.frozen
class Specialization:
    dtype: DType
    operation: Operation
    equation: str
    inputs: tuple[Shape, ...]
    outputs: tuple[Shape, ...]
    reductions: tuple[Reduction, ...]
    reduction_reuse: tuple[ReductionReuse, ...]
    launch: Launch
    schedule: ThreadBlocks3D | BlockGrid | TileGrid
    # groups of reductions computed together in one loop (online softmax fuses three)
    fused_reductions: tuple[tuple[str, ...], ...] = ()
    causal: bool = False  # key k attends to query q only where k <= q
    tiles: tuple[TileReuse, ...] = ()  # shared-memory tiles of a block-layer entry

    def operation_is(self, operation) -> bool:
        return str(operation) == str(self.operation)

    def reduction(self, name: str) -> Reduction | None:
        return next((r for r in self.reductions if r.name == name), None)

    def reduction_matches(self, i: int, *, name: str, operator, extents: Sequence[int],
                          dependencies: Sequence[str] = ()) -> bool:
        if not 0 <= i < len(self.reductions):
            return False
        r = self.reductions[i]
        return (
            r.name == name
            and r.operator == ReductionOperator(operator)
            and r.extents.extents == tuple(extents)
            and r.dependencies == tuple(dependencies)
        )

    def reduction_reuse_matches(self, i: int, *, reduction: str, extents: Sequence[int]) -> bool:
        if not 0 <= i < len(self.reduction_reuse):
            return False
        reuse = self.reduction_reuse[i]
        return reuse.reduction == reduction and reuse.scope.extents == tuple(extents)

    def _axis_extents(self) -> dict[str, int] | None:
        known: dict[str, int] = {}
        for shape in self.inputs + self.outputs:
            for a in shape.axes:
                if known.setdefault(a.name, a.extent) != a.extent:
                    return None
        return known

    def reduction_reuse_scopes_are_valid(self) -> bool:
        """Each reuse names a reduction; its scope uses known axes at their extents,
        never the axes it reduces, and covers what its dependencies are reused over."""
        known = self._axis_extents()
        if known is None:
            return False
        scopes = {reuse.reduction: reuse.scope for reuse in self.reduction_reuse}
        if len(scopes) != len(self.reduction_reuse):
            return False
        for name, scope in scopes.items():
            r = self.reduction(name)
            if r is None or len(set(scope.names)) != len(scope.names):
                return False
            if any(known.get(a.name) != a.extent for a in scope.axes + r.extents.axes):
                return False
            if set(scope.names) & set(r.extents.names):
                return False
            available = set(scope.names) | set(r.extents.names)
            if any(d in scopes and not set(scopes[d].names) <= available for d in r.dependencies):
                return False
        return True

    def estimated_element_ops(self) -> int:
        """Σ over reductions of (ops per term) × (reduced extent) × (points it is computed at).

        A reduction is computed once per point of its reuse scope, or once per
        output element when it declares none; a multiply-accumulate (dot
        product, weighted sum) counts 2 ops per term, max/min/sum count 1.
        For attention: 2·BQK·H + BQ·K + BQ·K + 2·BQV·K (432 for 3x2x4x5x3).
        """
        scopes = {reuse.reduction: reuse.scope for reuse in self.reduction_reuse}
        total = 0
        for r in self.reductions:
            points = scopes.get(r.name, self.outputs[0]).element_count()
            total += r.operator.element_ops * r.extents.element_count() * points
        return total


@attrs.frozen(eq=False)
class Entry:
    """A prebuilt kernel: its program, registry identity and specialization metadata."""

    program: Program
    target: str
    layer: Layer
    category: Category
    specialization: Specialization
    version: int = 1

    Limits = Limits

    @property
    def name(self) -> str:
        """The kernel's entry-point symbol (its program's name)."""
        return self.program.name

    @property
    def graph(self) -> Graph:
        """The optimised graph of its program, as ``Program.graph``."""
        return self.program.graph

    @property
    def traced_graph(self) -> Graph:
        """The graph as its program's body recorded it, as ``Program.traced_graph``."""
        return self.program.traced_graph

    @property
    def argument_shapes(self) -> dict[str, Shape]:
        """Each parameter's named-axis shape: outputs first, then inputs, in parameter order."""
        shapes = self.specialization.outputs + self.specialization.inputs
        return {p.name: s for p, s in zip(declared_parameters(self.program.parameters), shapes)}

    def launch(self, limits: Limits = Limits.default) -> Launch:
        return self.program.launch(limits)

    def schedule_snapshot(self, limits: Limits = Limits.default) -> ScheduleSnapshot:
        graph = self.program.graph
        return ScheduleSnapshot(graph.axes, self.program.threads.block, self.launch(limits))

    @property
    def schedule(self) -> ThreadBlocks3D | BlockGrid | TileGrid:
        return self.specialization.schedule

    def run(self, args, backend: str = "numpy", *, limits: Limits | None = None, **options):
        """Run on NumPy arrays (by position or name); ``dst`` is written in place.
        Returns what the backend returns (a timing, a thread trace), usually None."""
        shapes = self.argument_shapes
        tensors = {t.name for t in self.program.tensors}
        if tensors:  # a tensor's array has a shape to check (its span's count says nothing of a view's)
            _check_tensor_shapes(self.program.parameters, args, {n: shapes[n] for n in tensors})
        shapes = {n: s for n, s in shapes.items() if n not in tensors}
        return run(self.program, args, backend=backend, limits=limits,  # None: the backends' fast launchers
            counts={n: s.element_count() for n, s in shapes.items()} or None,
            shapes={n: str(s) for n, s in shapes.items()} or None, **options)

    def profile(self, args, arch: str = "sm_90", gpu=None, *, sample: int | None = None,
                limits: Limits | None = None):
        """The entry's :meth:`accy.Program.profile` (its arguments checked as :meth:`run` checks them)."""
        from ..runtime.emulated import profile

        shapes = self.argument_shapes
        tensors = {t.name for t in self.program.tensors}
        if tensors:
            _check_tensor_shapes(self.program.parameters, args, {n: shapes[n] for n in tensors})
        shapes = {n: s for n, s in shapes.items() if n not in tensors}
        return profile(self.program, args, arch=arch, gpu=gpu, sample=sample, limits=limits,
                       counts={n: s.element_count() for n, s in shapes.items()} or None,
                       shapes={n: str(s) for n, s in shapes.items()} or None)

    def run_cpu(self, args, limits: Limits = Limits.default) -> None:
        """Run on the NumPy interpreter, checking the launch against ``limits``."""
        self.run(args, backend="numpy", limits=limits)

    def create_kernel_call_artifact(self, backend_state, limits: Limits = Limits.default):
        """Compile with ``backend_state`` into a registry-ready kernel-call artifact."""
        return self.program.create_kernel_call_artifact(backend_state, limits, version=self.version,
                                                        target=self.target)

    # the seed's spellings
    runCpu = run_cpu
    scheduleSnapshot = schedule_snapshot
    createKernelCallArtifact = create_kernel_call_artifact


def _check_tensor_shapes(params, args, shapes: dict[str, Shape]) -> None:
    """Each tensor argument's shape is its declared one, else an ArgumentError naming it."""
    named = _by_name(declared_parameters(params), args)
    for name, shape in shapes.items():
        value = named[name]
        device = device_array(name, value)  # CUDA memory: its interface or its DLPack capsule says the shape
        got = device.shape if device is not None else np.shape(value)
        if tuple(got) != shape.extents:
            raise ArgumentError(f"argument '{name}': expected shape {shape.extents} ({shape}), got {tuple(got)}")
