"""The typed SSA graph: values, ops, blocks, the kernel graph, and its text form.

Vocabulary (after xDSL/MLIR): an :class:`Op` has operands (values), results
(values), constant attributes and nested regions; each region is one
:class:`Block` whose arguments are the values the region receives (a loop's
induction variable and loop-carried accumulators, a launch's thread indices,
the kernel's scalar parameters).  A loop or branch region ends with a
``yield`` op naming what it hands back.

This module knows nothing of tracing: it is plain data, each op's attributes an
instance of its op table entry's schema (:mod:`accy.dsl.ops`), printed by
:func:`print_graph` (``Graph.text()``) from each op's text template in a form that
:func:`accy.dsl.parse` reads back.
"""

from __future__ import annotations

import enum
import os
from typing import Iterator

import attrs

from .ops import OPS, OpAttrs, OpDef, Space
from .types import DType


@attrs.frozen
class SourceLocation:
    """The line of user code that recorded an op."""

    filename: str
    lineno: int
    function: str
    code: str = ""

    @property
    def line(self) -> str:
        """``file.py:12``."""
        name = self.filename if self.filename.startswith("<") else os.path.basename(self.filename)
        return f"{name}:{self.lineno}"

    def __str__(self) -> str:
        where = f"{self.line} in {self.function}"
        return f"{where}: {self.code}" if self.code else where


@attrs.frozen
class Axis:
    """A named logical axis, ``extent`` long (None when it is known only at run time)."""

    name: str
    extent: int | None

    def __str__(self) -> str:
        return f"{self.name}={'?' if self.extent is None else self.extent}"


class ParamKind(enum.Enum):
    buffer = "buffer"
    scalar = "scalar"


@attrs.frozen
class Param:
    """A kernel parameter: a buffer of ``dtype`` (optionally of a fixed element count)
    or a scalar of ``dtype`` passed by value."""

    name: str
    dtype: DType
    count: int | None = None
    kind: ParamKind = ParamKind.buffer

    @property
    def is_scalar(self) -> bool:
        return self.kind is ParamKind.scalar

    def __str__(self) -> str:
        if self.is_scalar:
            return f"%{self.name}: scalar<{self.dtype}>"
        size = "?" if self.count is None else str(self.count)
        return f"%{self.name}: buffer<{self.dtype}, {size}>"


class Value:
    """One SSA value: the result of an op or an argument of a block.

    Values are identities: they hash and compare by object, so analyses key
    their maps by the value itself.
    """

    __slots__ = ("type", "owner", "block", "__weakref__")

    def __init__(self, type: DType, owner, block: "Block"):
        self.type = type
        self.owner = owner  # the defining Op, or the Block for a block argument
        self.block = block  # the block the value is visible in (and nested blocks)

    @property
    def op(self) -> "Op | None":
        """The op defining this value; None for a block argument."""
        return self.owner if isinstance(self.owner, Op) else None

    def __repr__(self) -> str:
        return f"<Value {self.type} of {getattr(self.owner, 'opcode', 'block arg')}>"


class Op:
    __slots__ = ("opcode", "operands", "attrs", "results", "regions", "location", "block")

    def __init__(self, opcode, operands, attrs, result_types, regions, location, block):
        self.opcode: str = opcode
        self.operands: tuple[Value, ...] = tuple(operands)
        self.attrs: OpAttrs = attrs  # an instance of the op's schema (OPS[opcode].schema)
        self.block: Block = block
        self.results: tuple[Value, ...] = tuple(Value(t, self, block) for t in result_types)
        self.regions: tuple[Block, ...] = tuple(regions)
        for region in self.regions:
            region.parent = self
        self.location: SourceLocation | None = location

    @property
    def result(self) -> Value:
        (value,) = self.results
        return value

    @property
    def opdef(self) -> OpDef:
        """The op's table entry: its schema, text form and traits."""
        return OPS[self.opcode]

    def walk(self) -> Iterator["Op"]:
        """This op and every op in its regions, in program order."""
        yield self
        for region in self.regions:
            yield from region.walk()

    def __repr__(self) -> str:
        return f"<Op {self.opcode}>"


class Block:
    """A list of ops with typed arguments; the body of a region."""

    __slots__ = ("args", "ops", "parent")

    def __init__(self, arg_types=(), parent: Op | None = None):
        self.args: tuple[Value, ...] = tuple(Value(t, self, self) for t in arg_types)
        self.ops: list[Op] = []
        self.parent = parent  # the Op owning this region, None for the kernel body

    @property
    def terminator(self) -> Op | None:
        last = self.ops[-1] if self.ops else None
        return last if last is not None and last.opcode in OPS and last.opdef.terminator else None

    def walk(self) -> Iterator[Op]:
        """Every op in this block and its nested regions, in program order."""
        for op in self.ops:
            yield from op.walk()


# derived from the op table's traits, for readers that want names
LAUNCH_OPS = tuple(name for name, d in OPS.items() if d.launch)
MEMORY_OPS = tuple(name for name, d in OPS.items() if d.memory)  # ops that touch a buffer or a shared array


class Graph:
    """A traced kernel: its name, parameters and body block.

    The body's arguments are the scalar parameters, in parameter order.
    """

    __slots__ = ("name", "params", "body", "_facts", "__weakref__")

    def __init__(self, name: str, params: tuple[Param, ...], body: Block):
        self.name = name
        self.params = tuple(params)
        self.body = body
        self._facts: dict = {}  # derived facts, computed once (graphs are not changed after building)

    def _fact(self, key: str, compute):
        if key not in self._facts:
            self._facts[key] = compute()
        return self._facts[key]

    @property
    def op_count(self) -> int:
        return self._fact("op_count", lambda: sum(1 for _ in self.body.walk()))

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    @property
    def buffers(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if not p.is_scalar)

    @property
    def scalars(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.is_scalar)

    def scalar_value(self, name: str) -> Value:
        """The body argument that stands for scalar parameter ``name``."""
        for p, v in zip(self.scalars, self.body.args):
            if p.name == name:
                return v
        raise KeyError(name)

    @property
    def launch_op(self) -> Op | None:
        for op in self.body.ops:
            if op.opdef.launch:
                return op
        return None

    @property
    def axes(self) -> tuple[Axis, ...]:
        """The launch's logical axes (a block launch's grid axes), x first; an extent is None
        where it is computed at run time."""
        op = self.launch_op
        if op is None:
            return ()
        return tuple(Axis(name, constant_of(v)) for name, v in zip(op.attrs.axes, op.operands))

    @property
    def is_block_launch(self) -> bool:
        op = self.launch_op
        return op is not None and op.opdef.thread_blocks

    @property
    def is_tile_launch(self) -> bool:
        """A ``for_each_tile`` launch: one program per grid point, computing on tiles."""
        op = self.launch_op
        return op is not None and op.opdef.tile_launch

    @property
    def block_shape(self) -> tuple[int, ...]:
        """A block launch's threads per block along its thread axes, x first."""
        return tuple(extent for _, extent in self.launch_op.attrs.threads) if self.is_block_launch else ()

    def lane_axes(self, extents) -> tuple[Axis, ...]:
        """The axes a linear thread number decodes into, fastest first, for ``extents`` of the
        launch: a block launch's thread axes, then its grid axes."""
        op = self.launch_op
        grid = tuple(Axis(name, e) for name, e in zip(op.attrs.axes, extents))
        if op.opdef.thread_blocks:
            return tuple(Axis(name, e) for name, e in op.attrs.threads) + grid
        return grid

    def shared_arrays(self) -> dict[str, Op]:
        """The shared arrays a block launch declares, by name."""
        return self._fact("shared", lambda: {
            op.attrs.name: op for op in self.body.walk() if op.opdef.declares_shared})

    @property
    def static_extents(self) -> tuple[int, ...] | None:
        """The launch's extents when every one is a constant, else None."""
        extents = tuple(a.extent for a in self.axes)
        return None if None in extents else extents

    def _global(self, trait: str) -> frozenset[str]:
        return frozenset(op.attrs.buffer for op in self.body.walk()
                         if getattr(op.opdef, trait) and op.attrs.space is Space.GLOBAL)

    def stored_buffers(self) -> frozenset[str]:
        """Buffers the kernel writes (stores, atomics): its outputs."""
        return self._fact("stored", lambda: self._global("writes"))

    def loaded_buffers(self) -> frozenset[str]:
        """Buffers the kernel reads (loads, atomics, which return the old value)."""
        return self._fact("loaded", lambda: self._global("reads"))

    def text(self) -> str:
        return self._fact("text", lambda: print_graph(self))

    def __str__(self) -> str:
        return self.text()


def constant_of(value: Value):
    """The Python value of a ``const`` op's result, else None."""
    op = value.op
    return op.attrs.value if op is not None and op.opdef.constant else None


# ----------------------------------------------------------------------------- text form


class _Printer:
    """Prints ops by their op table entries' text templates (``OpDef.text``); the parser reads
    the same templates back."""

    def __init__(self, graph: Graph):
        self.names: dict[Value, str] = {v: f"%{p.name}" for p, v in zip(graph.scalars, graph.body.args)}
        self.count = 0
        self.lines: dict[Op, str] = {}  # each op's (first) line, for tools
        self.out: list[str] = []

    def define(self, value: Value) -> str:
        name = self.names[value] = f"%{self.count}"
        self.count += 1
        return name

    def __call__(self, value: Value) -> str:
        return self.names.get(value, "%<undefined>")

    def block(self, block: Block, indent: str) -> None:
        for op in block.ops:
            first = len(self.out)
            self.op(op, indent)
            self.lines[op] = self.out[first].strip()

    def op(self, op: Op, indent: str) -> None:
        opdef = OPS.get(op.opcode)
        text = opdef.text if opdef is not None else _UNKNOWN
        # results are named first, then the region arguments the header defines, then the regions
        lhs = ", ".join(self.define(v) for v in op.results) + " = " if op.results else ""
        first, *more = text.show(op, self)
        self.out.append(f"{indent}{lhs}{op.opcode}{first}")
        self.out.extend(f"{indent}{line}" for line in more)
        for k, region in enumerate(op.regions):
            if k:
                self.out.append(f"{indent}}} else {{")
            self.block(region, indent + "  ")
        if op.regions:
            self.out.append(f"{indent}}}")


_UNKNOWN = OPS["add"].text  # an op not in the table (the verifier refuses it) prints as a pointwise one


def print_graph(graph: Graph) -> str:
    printer = _Printer(graph)
    printer.out.append(f"kernel @{graph.name}({', '.join(str(p) for p in graph.params)}) {{")
    printer.block(graph.body, "  ")
    printer.out.append("}")
    return "\n".join(printer.out) + "\n"


def op_lines(graph: Graph) -> dict[Op, str]:
    """Each op's line in the text form (a loop's or launch's header line)."""
    printer = _Printer(graph)
    printer.block(graph.body, "  ")
    return printer.lines


def value_names(graph: Graph) -> dict[Value, str]:
    """Each value's name in the text form (``%3``; ``%n`` for a scalar parameter), region
    arguments included: what a tool showing values calls them."""
    printer = _Printer(graph)
    printer.block(graph.body, "  ")
    return printer.names
