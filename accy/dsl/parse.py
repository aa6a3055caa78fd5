"""Reading the text form back: ``parse(graph.text())`` rebuilds the graph.

The text form (see :func:`accy.dsl.ir.print_graph`) is made from each op's text
template in the op table, and this parser reads the same templates back
(:mod:`accy.dsl.textformat`): no op is spelled here.  The text states every
value's type (an op whose template states no result type has the types its
attributes give: a ``load`` its ``dtype``); the graph returned is checked by the
verifier.  ``parse(g.text()).text() == g.text()`` holds for every graph.
"""

from __future__ import annotations

import re

from ..errors import VerificationError
from .ir import Block, Graph, Op, Param, ParamKind, Value
from .ops import OPS, OpAttrsError, OpTypeError, RegionKind, Space, infer
from .passes import verify
from .textformat import NAME, FormatError, Reading, split
from .types import DTYPES, DType

_HEADER = re.compile(r"kernel @(\w+)\((.*)\) \{$")
_PARAM = re.compile(r"%(\w+): (buffer<(\w+), (\?|\d+)>|scalar<(\w+)>)$")
_OP = re.compile(rf"(?:({NAME}(?:, {NAME})*) = )?(\w+)(.*)$")  # results, the op's name, the rest
_ELSE = "} else {"


class ParseError(VerificationError):
    """The text is not a well-formed graph; the message names the line."""


def _dtype(name: str, line: int) -> DType:
    if name not in DTYPES:
        raise ParseError(f"line {line}: unknown type {name!r}")
    return DTYPES[name]


class _Parser:
    def __init__(self, text: str):
        self.lines = [(n + 1, line.strip()) for n, line in enumerate(text.splitlines()) if line.strip()]
        self.pos = 0
        self.values: dict[str, Value] = {}
        self.shared: set[str] = set()

    def next(self) -> tuple[int, str]:
        if self.pos >= len(self.lines):
            raise ParseError("unexpected end of text (a region is not closed)")
        item = self.lines[self.pos]
        self.pos += 1
        return item

    def use(self, name: str, line: int) -> Value:
        if name not in self.values:
            raise ParseError(f"line {line}: {name} is used before it is defined")
        return self.values[name]

    def define(self, names, values, line: int) -> None:
        names = split(names) if isinstance(names, str) else names
        if len(names) != len(values):
            raise ParseError(f"line {line}: {len(names)} names for {len(values)} values")
        for name, value in zip(names, values):
            if name in self.values:
                raise ParseError(f"line {line}: {name} is defined twice")
            self.values[name] = value

    def graph(self) -> Graph:
        line, text = self.next()
        m = _HEADER.match(text)
        if not m:
            raise ParseError(f"line {line}: expected 'kernel @name(...) {{', got {text!r}")
        params = []
        items = re.findall(r"%\w+: (?:buffer<\w+, (?:\?|\d+)>|scalar<\w+>)", m.group(2))
        if ", ".join(items) != m.group(2):
            raise ParseError(f"line {line}: bad parameter list {m.group(2)!r}")
        for item in items:
            pm = _PARAM.match(item)
            if not pm:
                raise ParseError(f"line {line}: bad parameter {item!r}")
            if pm.group(5):
                params.append(Param(pm.group(1), _dtype(pm.group(5), line), kind=ParamKind.scalar))
            else:
                count = None if pm.group(4) == "?" else int(pm.group(4))
                params.append(Param(pm.group(1), _dtype(pm.group(3), line), count))
        self.params = {p.name: p for p in params}
        scalars = [p for p in params if p.is_scalar]
        body = Block([p.dtype for p in scalars])
        self.define([f"%{p.name}" for p in scalars], body.args, line)
        end = self.block(body)
        if end != "}":
            raise ParseError(f"line {self.lines[self.pos - 1][0]}: 'else' outside an if")
        if self.pos != len(self.lines):
            raise ParseError(f"line {self.lines[self.pos][0]}: text after the kernel's closing brace")
        return Graph(m.group(1), tuple(params), body)

    def block(self, block: Block) -> str:
        """Parse ops into ``block`` until its closing line; returns that line ("}" or "} else {")."""
        while True:
            line, text = self.next()
            if text in ("}", _ELSE):
                return text
            self.op(block, line, text)

    def memory(self, attrs_, line: int) -> None:
        """The buffer or shared array an op's attributes name exists."""
        name = attrs_.buffer
        if getattr(attrs_, "space", Space.GLOBAL) is Space.SHARED:
            if name not in self.shared:
                raise ParseError(f"line {line}: %{name} is not a declared shared array")
            return
        param = self.params.get(name)
        if param is None or param.is_scalar:
            raise ParseError(f"line {line}: %{name} is not a buffer parameter")

    def op(self, block: Block, line: int, text: str) -> None:
        m = _OP.match(text)
        results, opcode, rest = m.groups() if m else (None, None, None)
        opdef = OPS.get(opcode)
        if opdef is None:
            raise ParseError(f"line {line}: cannot read {text!r}" + (f": no op named {opcode!r}" if opcode else ""))
        reading = Reading(lambda name: self.use(name, line))
        try:
            opdef.text.read(0, rest, reading)
            for k in range(1, len(opdef.text.lines)):
                line_k, text_k = self.next()
                opdef.text.read(k, text_k, reading)
            attrs_ = opdef.text.attributes(reading)
            operands = [reading.operands[k] for k in range(len(reading.operands))]
            for k, t in reading.type_checks:
                if str(operands[k].type) != t:
                    raise FormatError(f"operand {k} is {operands[k].type}, not {t}")
            types = reading.types if opdef.text.states_types else infer(opcode, (v.type for v in operands), attrs_)
        except FormatError as e:
            raise ParseError(f"line {line}: cannot read {text!r} ({e}): a {opcode} is written "
                             f"{opcode + opdef.text.spelling!r}") from None
        except (OpAttrsError, OpTypeError) as e:
            raise ParseError(f"line {line}: {opcode}: {e}") from None
        if opdef.names_buffer:
            self.memory(attrs_, line)
        if opdef.declares_shared:
            if attrs_.name in self.shared or attrs_.name in self.params:
                raise ParseError(f"line {line}: shared array %{attrs_.name} is declared twice or shadows a parameter")
            self.shared.add(attrs_.name)
        regions = self.regions(opdef.regions, reading.region_args, line) if opdef.regions else ()
        op = Op(opcode, operands, attrs_, types, regions, None, block)
        block.ops.append(op)
        self.define(results or "", op.results, line)

    def regions(self, kind: RegionKind, args, line: int) -> list[Block]:
        """The regions after an op's header: the first with the arguments the header defined;
        a branch's else region after ``} else {``."""
        region = Block([t for _, t in args])
        self.define([name for name, _ in args], region.args, line)
        regions = [region]
        end = self.block(region)
        if end == _ELSE and kind is RegionKind.BRANCH:
            regions.append(Block())
            end = self.block(regions[-1])
        if end != "}":
            raise ParseError(f"line {line}: unexpected {end!r}")
        return regions


def parse(text: str) -> Graph:
    """The graph a text form describes, verified (``VerificationError`` if it is broken)."""
    return verify(_Parser(text).graph())
