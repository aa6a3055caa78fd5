"""Each op's text form, described once by a small template (``OpDef.text``) from which both
the printer (:func:`accy.dsl.ir.print_graph`) and the parser (:func:`accy.dsl.parse`) are
made, so the two cannot drift apart.

A template is what follows the op's name on its line (the line starts ``%r, ... = name``
when the op has results), one string per line of the op's header:

``$0``, ``$1``
    operand 0, 1
``$2...``
    the operands from 2 on, comma-separated (none is the empty text)
``$0:type``
    operand 0's type (printed; read back, it must match)
``$type``, ``$types``
    the result's type; the result types, comma-separated.  Without either, the parser
    takes the result types from the op's type rule (a ``load`` states its ``dtype``)
``{name}``
    the attribute ``name``, in the form its schema field's :class:`Codec` gives
``{? ...}``
    printed only when something inside is: an attribute not at its default, a non-empty
    list of operands or types
``$grid``, ``$threads``, ``$args``
    a launch's grid axes (``%arg = name<%extent>``), a block launch's thread axes
    (``%arg = name<extent>``), a loop's region arguments (``%arg: type``): each defines
    the region's arguments it names

An op with regions ends its first line with `` {``; the regions follow, separated by
``} else {``, and ``}`` closes the last one.  This module knows the templates' language
only; the templates themselves are in the op table (:mod:`accy.dsl.ops`).
"""

from __future__ import annotations

import ast
import re
from typing import Any, Callable

import attrs

from .types import DType, index, type_named

NAME = r"%[A-Za-z0-9_]+"
_LIST = rf"(?:{NAME}(?:, {NAME})*)?"
TYPE = r"(?:tile<\w+, \d+(?:x\d+)*>|\w+)"  # a scalar type or a tile type
_TYPES = rf"(?:{TYPE}(?:, {TYPE})*)?"


class FormatError(Exception):
    """Text that does not have an op's form; the parser adds the line."""


def split(text: str | None) -> list[str]:
    return [s for s in text.split(", ") if s] if text else []


# -- attribute codecs --------------------------------------------------------------------------


@attrs.frozen
class Codec:
    """How one attribute is written: the regex of its text (no groups), and both ways."""

    pattern: str
    show: Callable[[Any], str]
    # (text, the attributes read so far, in schema field order) -> value; raises FormatError
    read: Callable[[str, dict], Any]


def _dtype(text: str, _=None) -> DType:
    try:
        return type_named(text)
    except KeyError:
        raise FormatError(f"unknown type {text!r}") from None


def split_types(text: str | None) -> list[str]:
    """A comma-separated list of types (a tile type has a comma of its own)."""
    return re.findall(TYPE, text) if text else []


def const_text(value) -> str:
    """A constant's text: ``true``/``false``, or the Python literal (``0.5``, ``-0.0``, ``inf``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def _literal(text: str, read: dict):
    dtype = read.get("dtype")
    if dtype is None or dtype.is_bool:
        if text not in ("true", "false"):
            raise FormatError(f"bool constant must be true or false, got {text!r}")
        return text == "true"
    if dtype.is_float:
        try:
            return float(text)
        except ValueError:
            raise FormatError(f"bad float constant {text!r}") from None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = None
    if isinstance(value, bool) or not isinstance(value, int):
        raise FormatError(f"bad integer constant {text!r}")
    return value


def enum_codec(cls) -> Codec:
    def read(text, _):
        try:
            return cls(text)
        except ValueError:
            raise FormatError(f"{text!r} is not one of {', '.join(m.value for m in cls)}") from None

    return Codec(r"\w+", lambda v: v.value, read)


WORD = Codec(r"\w+", str, lambda text, _: text)
INT = Codec(r"-?\d+", str, lambda text, _: int(text))
DTYPE = Codec(r"\w+", str, _dtype)
DTYPE_LIST = Codec(rf"{TYPE}(?:, {TYPE})*", lambda ts: ", ".join(map(str, ts)),
                   lambda text, _: tuple(_dtype(t) for t in split_types(text)))
SHAPE = Codec(r"\d+(?:x\d+)*", lambda shape: "x".join(map(str, shape)),
              lambda text, _: tuple(int(d) for d in text.split("x")))
INTS = Codec(r"-?\d+(?:,-?\d+)*", lambda ints: ",".join(map(str, ints)),
             lambda text, _: tuple(int(d) for d in text.split(",")))
LITERAL = Codec(r"\S+", const_text, _literal)  # a const's value; its field follows ``dtype``


def codec_of(field: attrs.Attribute) -> Codec | None:
    return field.metadata.get("text")


# -- reading one op ----------------------------------------------------------------------------


@attrs.define
class Reading:
    """What the directives of one op's lines read; ``use`` resolves a value's name."""

    use: Callable[[str], Any]
    operands: dict = attrs.Factory(dict)  # position -> value
    raw: dict = attrs.Factory(dict)  # attribute -> its text
    values: dict = attrs.Factory(dict)  # attribute -> value (read by the axis directives)
    types: list | None = None  # the result types the text states, if it states them
    region_args: list = attrs.Factory(list)  # (name, type) of the first region's arguments
    type_checks: list = attrs.Factory(list)  # (operand position, type text)


# -- directives --------------------------------------------------------------------------------
# Each holds one regex group (literals none): ``show`` prints it, ``present`` says whether it
# makes an optional group print, ``read`` takes its group's text (None: an absent optional).


class _Piece:
    pattern = ""
    writes: tuple[str, ...] = ()  # the attributes it reads back
    states_types = False

    def leaves(self):
        yield self

    def present(self, op) -> bool:
        return True


@attrs.frozen
class _Literal(_Piece):
    text: str

    @property
    def pattern(self):
        return re.escape(self.text)

    def leaves(self):
        return iter(())

    def show(self, op, names) -> str:
        return self.text

    def present(self, op) -> bool:
        return False


@attrs.frozen
class _Operand(_Piece):
    position: int
    pattern = f"({NAME})"

    def show(self, op, names) -> str:
        return names(op.operands[self.position]) if self.position < len(op.operands) else "%<missing>"

    def read(self, text, reading: Reading) -> None:
        reading.operands[self.position] = reading.use(text)


@attrs.frozen
class _Operands(_Piece):
    start: int
    pattern = f"({_LIST})"

    def show(self, op, names) -> str:
        return ", ".join(names(v) for v in op.operands[self.start:])

    def present(self, op) -> bool:
        return len(op.operands) > self.start

    def read(self, text, reading: Reading) -> None:
        for k, name in enumerate(split(text)):
            reading.operands[self.start + k] = reading.use(name)


@attrs.frozen
class _OperandType(_Piece):
    position: int
    pattern = f"({TYPE})"

    def show(self, op, names) -> str:
        return str(op.operands[self.position].type)

    def read(self, text, reading: Reading) -> None:
        reading.type_checks.append((self.position, text))


class _ResultType(_Piece):
    pattern = f"({TYPE})"
    states_types = True

    def show(self, op, names) -> str:
        return ", ".join(str(v.type) for v in op.results)

    def read(self, text, reading: Reading) -> None:
        reading.types = [_dtype(text)]


class _ResultTypes(_Piece):
    pattern = f"({_TYPES})"
    states_types = True

    def show(self, op, names) -> str:
        return ", ".join(str(v.type) for v in op.results)

    def present(self, op) -> bool:
        return bool(op.results)

    def read(self, text, reading: Reading) -> None:
        reading.types = [_dtype(t) for t in split_types(text)]


@attrs.frozen
class _Attr(_Piece):
    name: str
    codec: Codec
    default: Any

    @property
    def pattern(self):
        return f"({self.codec.pattern})"

    @property
    def writes(self):
        return (self.name,)

    def show(self, op, names) -> str:
        return self.codec.show(getattr(op.attrs, self.name))

    def present(self, op) -> bool:
        return self.default is attrs.NOTHING or getattr(op.attrs, self.name) != self.default

    def read(self, text, reading: Reading) -> None:
        if text is not None:
            reading.raw[self.name] = text


_GRID_AXIS = re.compile(rf"({NAME}) = (\w+)<({NAME})>$")
_THREAD_AXIS = re.compile(rf"({NAME}) = (\w+)<(\d+)>$")
_REGION_ARG = re.compile(rf"({NAME}): ({TYPE})$")


def _items(text, regex, what):
    items = [regex.match(item) for item in split(text)]
    if None in items:
        raise FormatError(f"bad {what} {text!r}")
    return items


class _Grid(_Piece):
    pattern = rf"((?:{NAME} = \w+<{NAME}>(?:, {NAME} = \w+<{NAME}>)*)?)"
    writes = ("axes",)

    def show(self, op, names) -> str:
        args = op.regions[0].args
        return ", ".join(f"{names.define(v)} = {axis}<{names(e)}>"
                         for v, axis, e in zip(args, op.attrs.axes, op.operands))

    def read(self, text, reading: Reading) -> None:
        axes = []
        for k, m in enumerate(_items(text, _GRID_AXIS, "launch axes")):
            reading.region_args.append((m.group(1), index))
            reading.operands[k] = reading.use(m.group(3))
            axes.append(m.group(2))
        reading.values["axes"] = tuple(axes)


class _Threads(_Piece):
    pattern = rf"((?:{NAME} = \w+<\d+>(?:, {NAME} = \w+<\d+>)*)?)"
    writes = ("threads",)

    def show(self, op, names) -> str:
        args = op.regions[0].args[len(op.operands):]
        return ", ".join(f"{names.define(v)} = {axis}<{extent}>" for v, (axis, extent) in zip(args, op.attrs.threads))

    def read(self, text, reading: Reading) -> None:
        threads = []
        for m in _items(text, _THREAD_AXIS, "thread axes"):
            reading.region_args.append((m.group(1), index))
            threads.append((m.group(2), int(m.group(3))))
        reading.values["threads"] = tuple(threads)


class _Args(_Piece):
    pattern = rf"((?:{NAME}: {TYPE}(?:, {NAME}: {TYPE})*)?)"

    def show(self, op, names) -> str:
        return ", ".join(f"{names.define(v)}: {v.type}" for v in op.regions[0].args)

    def read(self, text, reading: Reading) -> None:
        args = re.findall(_REGION_ARG.pattern[:-1], text or "")  # a tile type holds ", " itself
        if ", ".join(f"{name}: {t}" for name, t in args) != (text or ""):
            raise FormatError(f"bad region arguments {text!r}")
        for name, t in args:
            reading.region_args.append((name, _dtype(t)))


@attrs.frozen
class _Optional(_Piece):
    pieces: tuple

    @property
    def pattern(self):
        return "(?:" + "".join(p.pattern for p in self.pieces) + ")?"

    def leaves(self):
        for p in self.pieces:
            yield from p.leaves()

    def show(self, op, names) -> str:
        return "".join(p.show(op, names) for p in self.pieces) if self.present(op) else ""

    def present(self, op) -> bool:
        return any(p.present(op) for p in self.pieces)


_TOKEN = re.compile(r"\$(\d+)\.\.\.|\$(\d+):type|\$(\d+)|\$(types|type|grid|threads|args)|\{(\w+)\}|(\{\?)|(\})"
                    r"|([^${}]+|\{(?![?\w]))")
_NAMED = {"type": _ResultType, "types": _ResultTypes, "grid": _Grid, "threads": _Threads, "args": _Args}


def _compile(line: str, fields: dict) -> tuple:
    stack: list[list] = [[]]
    pos = 0
    while pos < len(line):
        m = _TOKEN.match(line, pos)
        if m is None:
            raise ValueError(f"bad template {line!r} at {line[pos:]!r}")
        pos = m.end()
        rest, typed, one, named, attr, opens, closes, literal = m.groups()
        if rest is not None:
            stack[-1].append(_Operands(int(rest)))
        elif typed is not None:
            stack[-1].append(_OperandType(int(typed)))
        elif one is not None:
            stack[-1].append(_Operand(int(one)))
        elif named is not None:
            stack[-1].append(_NAMED[named]())
        elif attr is not None:
            field = fields.get(attr)
            if field is None or codec_of(field) is None:
                raise ValueError(f"template {line!r}: no attribute {attr!r} with a text codec")
            stack[-1].append(_Attr(attr, codec_of(field), field.default))
        elif opens:
            stack.append([])
        elif closes:
            if len(stack) == 1:
                raise ValueError(f"template {line!r}: '}}' closes no '{{?'")
            inner = stack.pop()
            stack[-1].append(_Optional(tuple(inner)))
        else:
            stack[-1].append(_Literal(literal))
    if len(stack) != 1:
        raise ValueError(f"template {line!r}: '{{?' is not closed")
    return tuple(stack[0])


class TextFormat:
    """One op's text form, compiled from its template lines against its attribute schema."""

    def __init__(self, template: str | tuple[str, ...], schema: type):
        self.template = (template,) if isinstance(template, str) else tuple(template)
        fields = {f.name: f for f in attrs.fields(schema)}
        self.schema = schema
        self.lines = tuple(_compile(line, fields) for line in self.template)
        self._leaves = tuple(tuple(leaf for p in pieces for leaf in p.leaves()) for pieces in self.lines)
        self._regexes = tuple(re.compile("".join(p.pattern for p in pieces)) for pieces in self.lines)
        self.states_types = any(leaf.states_types for leaves in self._leaves for leaf in leaves)
        written = {name for leaves in self._leaves for leaf in leaves for name in leaf.writes}
        if written != set(fields):
            raise ValueError(f"template {self.template!r} writes attributes {sorted(written)}, "
                             f"its schema {schema.__name__} has {sorted(fields)}")

    @property
    def spelling(self) -> str:
        """The template, for error messages: ``fold $0 to $1 step {step} ...``."""
        return " / ".join(self.template)

    def show(self, op, names) -> list[str]:
        """The op's header lines after its name (``names(v)`` names a value, ``names.define(v)``
        gives a new value its name)."""
        return ["".join(p.show(op, names) for p in pieces) for pieces in self.lines]

    def read(self, k: int, text: str, reading: Reading) -> None:
        """Read header line ``k`` (after the op's name, on the first line) into ``reading``."""
        m = self._regexes[k].fullmatch(text)
        if m is None:
            raise FormatError("does not have the form")
        for leaf, group in zip(self._leaves[k], m.groups()):
            leaf.read(group, reading)

    def attributes(self, reading: Reading):
        """The schema instance the text gave (defaults where an optional part was left out)."""
        values = dict(reading.values)
        for field in attrs.fields(self.schema):
            if field.name in reading.raw:
                values[field.name] = codec_of(field).read(reading.raw[field.name], values)
        return self.schema(**values)
