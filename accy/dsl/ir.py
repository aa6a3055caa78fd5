"""The typed SSA graph: values, ops, blocks and the kernel graph.

Vocabulary (after xDSL/MLIR): an :class:`Op` has operands (values), results
(values), constant attributes and nested regions; each region is one
:class:`Block` whose arguments are the values the region receives (a loop's
induction variable and loop-carried accumulators, a launch's thread indices).
A region ends with a ``yield`` op naming what it hands back.
"""

from __future__ import annotations

import os
from typing import Iterator

import attrs

from .types import DType


@attrs.frozen
class SourceLocation:
    """The line of user code that recorded an op."""

    filename: str
    lineno: int
    function: str
    code: str = ""

    def __str__(self) -> str:
        where = f"{os.path.basename(self.filename)}:{self.lineno} in {self.function}"
        return f"{where}: {self.code}" if self.code else where


@attrs.frozen
class Axis:
    """A named logical axis of a launch, ``extent`` threads long."""

    name: str
    extent: int

    def __str__(self) -> str:
        return f"{self.name}={self.extent}"


@attrs.frozen
class Param:
    """A kernel parameter: a buffer of ``dtype``, optionally of a fixed element count."""

    name: str
    dtype: DType
    count: int | None = None

    def __str__(self) -> str:
        size = "?" if self.count is None else str(self.count)
        return f"%{self.name}: buffer<{self.dtype}, {size}>"


class Value:
    """One SSA value: the result of an op or an argument of a block."""

    __slots__ = ("type", "owner", "block", "__weakref__")

    def __init__(self, type: DType, owner, block: "Block"):
        self.type = type
        self.owner = owner  # the defining Op, or the Block for a block argument
        self.block = block  # the block the value is visible in (and nested blocks)

    def __repr__(self) -> str:
        return f"<Value {self.type} of {getattr(self.owner, 'opcode', 'block arg')}>"

    # -- the seed's explicit spelling: value.mul(inner, other), value.raw() ------
    def raw(self) -> "Value":
        """The untyped SSA value (the seed's typed loads wrap one; here they are the same)."""
        return self

    def _via(self, opcode, args):
        """``value.op(builder, other)`` or ``value.op(other)`` (current builder)."""
        from .builder import Builder

        if args and isinstance(args[0], Builder):
            builder, args = args[0], args[1:]
        else:
            builder = tracing.current()
        return getattr(builder, opcode)(self, *args)

    def add(self, *args): return self._via("add", args)
    def sub(self, *args): return self._via("sub", args)
    def mul(self, *args): return self._via("mul", args)
    def div(self, *args): return self._via("div", args)
    def max(self, *args): return self._via("max", args)
    def min(self, *args): return self._via("min", args)
    def neg(self, *args): return self._via("neg", args)
    def exp(self, *args): return self._via("exp", args)
    def sqrt(self, *args): return self._via("sqrt", args)
    def cast(self, *args): return self._via("cast", args)

    # -- the Pythonic spelling: operators record into the current builder -------
    def __add__(self, other): return tracing.current().add(self, other)
    def __radd__(self, other): return tracing.current().add(other, self)
    def __sub__(self, other): return tracing.current().sub(self, other)
    def __rsub__(self, other): return tracing.current().sub(other, self)
    def __mul__(self, other): return tracing.current().mul(self, other)
    def __rmul__(self, other): return tracing.current().mul(other, self)
    def __truediv__(self, other): return tracing.current().true_div(self, other)
    def __rtruediv__(self, other): return tracing.current().true_div(other, self)
    def __floordiv__(self, other): return tracing.current().floor_div(self, other)
    def __rfloordiv__(self, other): return tracing.current().floor_div(other, self)
    def __neg__(self): return tracing.current().neg(self)
    def __lt__(self, other): return tracing.current().lt(self, other)
    def __le__(self, other): return tracing.current().le(self, other)
    def __gt__(self, other): return tracing.current().gt(self, other)
    def __ge__(self, other): return tracing.current().ge(self, other)
    def __and__(self, other): return tracing.current().logical_and(self, other)
    def __rand__(self, other): return tracing.current().logical_and(other, self)
    def __or__(self, other): return tracing.current().logical_or(self, other)
    def __ror__(self, other): return tracing.current().logical_or(other, self)
    def __invert__(self): return tracing.current().logical_not(self)
    def __eq__(self, other): return tracing.current().eq(self, other)  # noqa: E704
    def __ne__(self, other): return tracing.current().ne(self, other)  # noqa: E704
    __hash__ = object.__hash__  # values are identities; == records an op (as in JAX)

    # -- Python control flow cannot see traced values ---------------------------
    def _no_python_value(self, what):
        from ..errors import TraceError

        raise TraceError(
            f"a traced {self.type} value cannot be used as a Python {what}: its value is only "
            "known when the kernel runs. Use select(cond, a, b) for a choice between values "
            "and fold_range(...) for a loop",
            tracing.user_location(),
        )

    def __bool__(self): self._no_python_value("bool (if/while/and/or/not)")
    def __index__(self): self._no_python_value("int index")
    def __int__(self): self._no_python_value("int")
    def __float__(self): self._no_python_value("float")
    def __iter__(self): self._no_python_value("iterable")


class Op:
    __slots__ = ("opcode", "operands", "attrs", "results", "regions", "location", "block")

    def __init__(self, opcode, operands, attrs, result_types, regions, location, block):
        self.opcode: str = opcode
        self.operands: tuple[Value, ...] = tuple(operands)
        self.attrs: dict = dict(attrs)
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
        return self.ops[-1] if self.ops and self.ops[-1].opcode == "yield" else None

    def walk(self) -> Iterator[Op]:
        """Every op in this block and its nested regions, in program order."""
        for op in self.ops:
            yield op
            for region in op.regions:
                yield from region.walk()


class Graph:
    """A traced kernel: its name, parameters and body block."""

    __slots__ = ("name", "params", "body", "_facts", "__weakref__")

    def __init__(self, name: str, params: tuple[Param, ...], body: Block):
        self.name = name
        self.params = params
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
    def launch_op(self) -> Op | None:
        for op in self.body.ops:
            if op.opcode == "for_each":
                return op
        return None

    @property
    def axes(self) -> tuple[Axis, ...]:
        op = self.launch_op
        return op.attrs["axes"] if op is not None else ()

    def stored_buffers(self) -> frozenset[str]:
        return self._fact("stored", lambda: frozenset(
            op.attrs["buffer"] for op in self.body.walk() if op.opcode == "store"))

    def loaded_buffers(self) -> frozenset[str]:
        return self._fact("loaded", lambda: frozenset(
            op.attrs["buffer"] for op in self.body.walk() if op.opcode == "load"))

    def text(self) -> str:
        from .printer import print_graph

        return print_graph(self)

    def __str__(self) -> str:
        return self.text()


from . import tracing  # noqa: E402  (tracing imports SourceLocation from here)
