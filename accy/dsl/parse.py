"""Reading the text form back: ``parse(graph.text())`` rebuilds the graph.

The text form (see :func:`accy.dsl.ir.print_graph`) states every value's type,
so the parser needs no type inference; the graph it returns is checked by the
verifier.  ``parse(g.text()).text() == g.text()`` holds for every graph.
"""

from __future__ import annotations

import ast
import re

from ..errors import VerificationError
from .ir import Block, Graph, Op, Param, ParamKind, Value
from .passes import verify
from .types import DTYPES, DType, index

_NAME = r"%[A-Za-z0-9_]+"
_LIST = rf"(?:{_NAME}(?:, {_NAME})*)?"
_TYPES = r"[A-Za-z0-9_]+(?:, [A-Za-z0-9_]+)*"

_HEADER = re.compile(r"kernel @(\w+)\((.*)\) \{$")
_PARAM = re.compile(r"%(\w+): (buffer<(\w+), (\?|\d+)>|scalar<(\w+)>)$")
_FOR_EACH = re.compile(r"(for_each|for_each_block) \((.*?)\)(?: threads \((.*)\))? \{$")
_THREAD_AXIS = re.compile(rf"({_NAME}) = (\w+)<(\d+)>$")
_AXIS = re.compile(rf"({_NAME}) = (\w+)<({_NAME})>$")
_FOLD = re.compile(rf"(?:({_LIST}) = )?fold ({_NAME}) to ({_NAME}) step (-?\d+) init\(({_LIST})\) -> \(({_TYPES})?\) \{{$")
_REGION_ARGS = re.compile(r"\^\((.*)\):$")
_IF = re.compile(rf"(?:({_LIST}) = )?if ({_NAME})(?: -> \(({_TYPES})\))? \{{$")
_YIELD = re.compile(rf"yield ?({_LIST})$")
_SPACE = r"(?:(shared) )?%(\w+)"
_STORE = re.compile(rf"store {_SPACE}\[({_NAME})\] = ({_NAME}) : (\w+)$")
_SHARED = re.compile(r"shared %(\w+) : (\w+)\[(\d+)\]$")
_ATOMIC = re.compile(rf"(%\d+) = atomic (\w+) {_SPACE}\[({_NAME})\], ({_LIST}) : (\w+)$")
_SHUFFLE = re.compile(rf"(%\d+) = shuffle (\w+) ({_NAME}), ({_NAME}) : (\w+)$")
_CONST = re.compile(r"(%\d+) = const (\S+) : (\w+)$")
_LOAD = re.compile(rf"(%\d+) = load {_SPACE}\[({_NAME})\] : (\w+)$")
_SIZE = re.compile(r"(%\d+) = size %(\w+) : (\w+)$")
_CAST = re.compile(rf"(%\d+) = cast ({_NAME}) : (\w+) -> (\w+)$")
_GENERIC = re.compile(rf"(%\d+) = (\w+) ({_LIST}) : (\w+)$")


class ParseError(VerificationError):
    """The text is not a well-formed graph; the message names the line."""


def _dtype(name: str, line: int) -> DType:
    if name not in DTYPES:
        raise ParseError(f"line {line}: unknown type {name!r}")
    return DTYPES[name]


def _split(text: str) -> list[str]:
    return [s for s in text.split(", ") if s] if text else []


def _literal(text: str, dtype: DType, line: int):
    if dtype.is_bool:
        if text not in ("true", "false"):
            raise ParseError(f"line {line}: bool constant must be true or false, got {text!r}")
        return text == "true"
    if dtype.is_float:
        try:
            return float(text)
        except ValueError:
            raise ParseError(f"line {line}: bad float constant {text!r}") from None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParseError(f"line {line}: bad integer constant {text!r}")
    return value


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
        names = _split(names) if isinstance(names, str) else names
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
            if text in ("}", "} else {"):
                return text
            self.op(block, line, text)

    def buffer(self, name: str, line: int, space: str | None = None) -> None:
        if space == "shared":
            if name not in self.shared:
                raise ParseError(f"line {line}: %{name} is not a declared shared array")
            return
        param = self.params.get(name)
        if param is None or param.is_scalar:
            raise ParseError(f"line {line}: %{name} is not a buffer parameter")

    def emit(self, block, opcode, operands, attrs, types, regions=()) -> Op:
        op = Op(opcode, operands, attrs, types, regions, None, block)
        block.ops.append(op)
        return op

    def region(self, arg_types, line: int, closers=("}",)) -> tuple[Block, str]:
        region = Block(arg_types)
        end = self.block(region)
        if end not in closers:
            raise ParseError(f"line {line}: unexpected {end!r}")
        return region, end

    def op(self, block: Block, line: int, text: str) -> None:
        if m := _FOR_EACH.match(text):
            opcode, grid, threads = m.groups()
            axes = [_AXIS.match(a) for a in _split(grid)]
            thread_axes = [_THREAD_AXIS.match(a) for a in _split(threads or "")]
            if None in axes or None in thread_axes or (opcode == "for_each_block") != (threads is not None):
                raise ParseError(f"line {line}: bad launch axes {text!r}")
            extents = [self.use(a.group(3), line) for a in axes]
            region = Block([index] * (len(axes) + len(thread_axes)))
            self.define([a.group(1) for a in axes + thread_axes], region.args, line)
            if self.block(region) != "}":
                raise ParseError(f"line {line}: a launch has no else")
            attrs_ = {"axes": tuple(a.group(2) for a in axes)}
            if threads is not None:
                attrs_["threads"] = tuple((a.group(2), int(a.group(3))) for a in thread_axes)
            self.emit(block, opcode, extents, attrs_, (), (region,))
        elif m := _SHARED.match(text):
            name, dtype, count = m.groups()
            if name in self.shared or name in self.params:
                raise ParseError(f"line {line}: shared array %{name} is declared twice or shadows a parameter")
            self.shared.add(name)
            self.emit(block, "shared", [], {"name": name, "dtype": _dtype(dtype, line), "count": int(count)}, ())
        elif text == "barrier":
            self.emit(block, "barrier", [], {}, ())
        elif m := _ATOMIC.match(text):
            name, kind, space, buffer, idx, values, t = m.groups()
            self.buffer(buffer, line, space)
            dtype = _dtype(t, line)
            operands = [self.use(idx, line)] + [self.use(v, line) for v in _split(values)]
            attrs_ = {"op": kind, "buffer": buffer, "space": space or "global", "dtype": dtype}
            op = self.emit(block, "atomic", operands, attrs_, [dtype])
            self.define([name], op.results, line)
        elif m := _SHUFFLE.match(text):
            name, mode, value, lane, t = m.groups()
            op = self.emit(block, "shuffle", [self.use(value, line), self.use(lane, line)], {"mode": mode},
                           [_dtype(t, line)])
            self.define([name], op.results, line)
        elif m := _FOLD.match(text):
            lhs, start, stop, step, inits, types = m.groups()
            result_types = [_dtype(t, line) for t in types.split(", ")] if types else []
            operands = [self.use(start, line), self.use(stop, line)] + [self.use(v, line) for v in _split(inits)]
            arg_line, arg_text = self.next()
            am = _REGION_ARGS.match(arg_text)
            if not am:
                raise ParseError(f"line {arg_line}: expected the loop's region arguments ^(...):")
            names, arg_types = [], []
            for item in _split(am.group(1)):
                name, _, t = item.partition(": ")
                names.append(name)
                arg_types.append(_dtype(t, arg_line))
            region = Block(arg_types)
            self.define(names, region.args, arg_line)
            if self.block(region) != "}":
                raise ParseError(f"line {line}: fold has no else")
            op = self.emit(block, "fold", operands, {"step": int(step)}, result_types, (region,))
            self.define(lhs or "", op.results, line)
        elif m := _IF.match(text):
            lhs, cond, types = m.groups()
            result_types = tuple(_dtype(t, line) for t in types.split(", ")) if types else ()
            then, end = self.region((), line, ("}", "} else {"))
            regions = [then]
            if end == "} else {":
                regions.append(self.region((), line)[0])
            op = self.emit(block, "if", [self.use(cond, line)], {"results": result_types}, result_types, regions)
            self.define(lhs or "", op.results, line)
        elif m := _YIELD.match(text):
            self.emit(block, "yield", [self.use(v, line) for v in _split(m.group(1))], {}, ())
        elif m := _STORE.match(text):
            space, buffer, idx, value, dtype = m.groups()
            self.buffer(buffer, line, space)
            self.emit(block, "store", [self.use(idx, line), self.use(value, line)],
                      {"buffer": buffer, "space": space or "global", "dtype": _dtype(dtype, line)}, ())
        elif m := _CONST.match(text):
            name, literal, t = m.groups()
            dtype = _dtype(t, line)
            op = self.emit(block, "const", [], {"value": _literal(literal, dtype, line), "dtype": dtype}, [dtype])
            self.define([name], op.results, line)
        elif m := _LOAD.match(text):
            name, space, buffer, idx, t = m.groups()
            self.buffer(buffer, line, space)
            dtype = _dtype(t, line)
            op = self.emit(block, "load", [self.use(idx, line)], {"buffer": buffer, "space": space or "global",
                                                                  "dtype": dtype}, [dtype])
            self.define([name], op.results, line)
        elif m := _SIZE.match(text):
            name, buffer, t = m.groups()
            self.buffer(buffer, line)
            op = self.emit(block, "size", [], {"buffer": buffer}, [_dtype(t, line)])
            self.define([name], op.results, line)
        elif m := _CAST.match(text):
            name, source, _, t = m.groups()
            dtype = _dtype(t, line)
            op = self.emit(block, "cast", [self.use(source, line)], {"dtype": dtype}, [dtype])
            self.define([name], op.results, line)
        elif m := _GENERIC.match(text):
            name, opcode, operands, t = m.groups()
            op = self.emit(block, opcode, [self.use(v, line) for v in _split(operands)], {}, [_dtype(t, line)])
            self.define([name], op.results, line)
        else:
            raise ParseError(f"line {line}: cannot read {text!r}")


def parse(text: str) -> Graph:
    """The graph a text form describes, verified (``VerificationError`` if it is broken)."""
    return verify(_Parser(text).graph())
