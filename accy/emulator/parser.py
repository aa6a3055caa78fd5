"""Parsing PTX text into a small syntax tree.

The parser reads a whole module as LLVM's NVPTX backend (and ``ptxas``-valid
hand-written PTX) spells it: the module directives, ``.global``/``.const``/
``.shared`` variables with initialisers, ``.entry`` and ``.func`` definitions
and declarations, and in function bodies ``.reg`` declarations (with ``<N>``
ranges), ``.local``/``.shared``/``.param`` variables, nested ``{ }`` scopes
(call sequences, inline assembly), labels, ``.callprototype`` and
``.branchtargets`` definitions, and instructions with guards, modifiers and
every operand form (registers, immediates, addresses, vectors, ``d|p`` pairs,
``!p``, call argument lists).  ``.section`` (DWARF) and ``.pragma`` are skipped.

Every instruction keeps its source line number and text, so errors found later
(at preparation or execution) can name them, and the kernel source line of the
``.loc`` before it (``.loc FILE LINE COLUMN``, with ``.file FILE "name"``), where
the PTX has debug lines.
"""

from __future__ import annotations

import functools
import re
import struct
from typing import NamedTuple

import attrs

from .errors import PtxError

# -- syntax tree -----------------------------------------------------------------------------


@attrs.frozen
class Reg:
    name: str  # unique within the function (scoped declarations are renamed)


@attrs.frozen
class Special:
    name: str  # "%tid.x", "%laneid", ...


@attrs.frozen
class Imm:
    kind: str  # "int", "f32" (bit pattern), "f64" (bit pattern), "float" (a decimal literal)
    value: int | float


@attrs.frozen
class Sym:
    name: str  # a label, variable, function or parameter name


@attrs.frozen
class Addr:
    base: object  # Reg, Sym, or None (an absolute address)
    offset: int


@attrs.frozen
class TensorRef:
    """``[tensorMap, {c0, ...}]``: a tensor map's address and a box's coordinates (TMA)."""

    base: Addr
    coords: "Vec"


@attrs.frozen
class Vec:
    items: tuple  # Reg / Imm / Sink


@attrs.frozen
class Pair:
    first: object
    second: object


@attrs.frozen
class Not:
    operand: object


@attrs.frozen
class Paren:
    items: tuple


@attrs.frozen
class Sink:
    pass


SINK = Sink()


@attrs.define
class Instruction:
    opcode: str
    mods: tuple[str, ...]
    operands: list
    guard: tuple[str, bool] | None  # (register name, negated)
    line: int
    text: str
    loc: tuple[int, int] | None = None  # (.file number, source line) of the .loc in force


    @property
    def form(self) -> str:
        return ".".join((self.opcode,) + self.mods)


@attrs.define
class Label:
    name: str
    line: int


@attrs.define
class VarDecl:
    space: str  # "global", "const", "shared", "local", "param"
    name: str
    type: str  # "b8", "u32", "f32", ...
    align: int
    count: int | None  # array elements (None for a scalar; 0 for an unsized extern array)
    vector: int  # 1, 2 or 4 (.v2/.v4 declarations)
    init: list | None  # flat list of ints / floats / ("sym", name, offset)
    extern: bool
    line: int

    @property
    def elem_size(self) -> int:
        return type_size(self.type) * self.vector

    @property
    def size(self) -> int:
        return self.elem_size * (1 if self.count is None else self.count)


@attrs.define
class RegDecl:
    name: str
    type: str  # "pred", "b32", "f32", ...


@attrs.define
class Function:
    name: str
    kind: str  # "entry" or "func"
    params: list[VarDecl]
    rets: list[VarDecl]
    regs: dict[str, RegDecl]
    variables: list[VarDecl]  # function-scope .local / .shared / .param (call sequences) variables
    body: list  # Instruction / Label
    directives: dict
    line: int
    defined: bool
    prototypes: dict
    branch_targets: dict


@attrs.define
class Module:
    version: str
    target: list[str]
    address_size: int
    functions: dict[str, Function]
    variables: list[VarDecl]
    lines: list[str]
    files: dict[int, str] = attrs.Factory(dict)  # .file number -> file name

    def source_line(self, loc) -> str | None:
        """``name.py:12`` for an instruction's ``loc`` (None without one, or line 0)."""
        if loc is None or loc[1] <= 0:
            return None
        name = self.files.get(loc[0])
        if name is None:
            return None
        return f"{name.replace(chr(92), '/').rsplit('/', 1)[-1]}:{loc[1]}"


_SIZES = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2,
          "b32": 4, "u32": 4, "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4, "tf32": 4,
          "b64": 8, "u64": 8, "s64": 8, "f64": 8, "b128": 16, "pred": 1,
          "e4m3": 1, "e5m2": 1, "e4m3x2": 2, "e5m2x2": 2}


def type_size(t: str) -> int:
    try:
        return _SIZES[t]
    except KeyError:
        raise PtxError(f"unknown PTX type .{t}") from None


SPECIAL_REGISTERS = {
    "%tid", "%ntid", "%ctaid", "%nctaid", "%laneid", "%warpid", "%nwarpid", "%smid", "%nsmid",
    "%gridid", "%lanemask_eq", "%lanemask_le", "%lanemask_lt", "%lanemask_ge", "%lanemask_gt",
    "%clock", "%clock64", "%globaltimer", "%globaltimer_lo", "%globaltimer_hi",
    "%dynamic_smem_size", "%total_smem_size", "%clusterid", "%nclusterid", "%cluster_ctaid",
    "%cluster_nctaid", "%cluster_ctarank", "%cluster_nctarank", "%is_explicit_cluster",
}

_NUMBERED = re.compile(r"^(.*?)(\d+)$")  # %r12: register 12 of a %r<N> range

# -- tokens ------------------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<nl>\n)
  | (?P<ws>[ \t\r\f\v]+)
  | (?P<lcomment>//[^\n]*)
  | (?P<bcomment>/\*.*?\*/)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<num>0[fF][0-9a-fA-F]{8}(?![0-9A-Za-z_])|0[dD][0-9a-fA-F]{16}(?![0-9A-Za-z_])
        |0[xX][0-9a-fA-F]+U?|0[bB][01]+U?
        |[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+|[0-9]+U?)
  | (?P<id>[A-Za-z_$%.][A-Za-z0-9_$.]*(?:::[A-Za-z0-9_$]+(?:\.[A-Za-z0-9_$]+)*)*)  # .shared::cta, .L2::128B
  | (?P<punct>[{}()\[\],;:@!|+\-<>=*])
""", re.VERBOSE | re.DOTALL)


class Tok(NamedTuple):
    """A token (a tuple: a module has hundreds of thousands of them)."""

    kind: str
    text: str
    line: int


def tokenize(text: str) -> list[Tok]:
    tokens = []
    line = 1
    pos, end = 0, len(text)
    match = _TOKEN.match
    while pos < end:
        m = match(text, pos)
        if m is None:
            raise PtxError(f"unexpected character {text[pos]!r}", line=line,
                           source=text.splitlines()[line - 1] if text.splitlines() else "")
        kind = m.lastgroup
        value = m.group()
        if kind == "nl":
            line += 1
        elif kind == "bcomment":
            line += value.count("\n")
        elif kind not in ("ws", "lcomment"):
            tokens.append(Tok(kind, value, line))
        pos = m.end()
    tokens.append(Tok("eof", "", line))
    return tokens


def parse_int(text: str) -> int:
    t = text.rstrip("U")
    if t[:2] in ("0x", "0X"):
        return int(t[2:], 16)
    if t[:2] in ("0b", "0B"):
        return int(t[2:], 2)
    if len(t) > 1 and t[0] == "0" and t.isdigit():
        return int(t, 8)
    return int(t)


def number_imm(text: str, negative: bool = False) -> Imm:
    if text[:2] in ("0f", "0F") and len(text) == 10:
        bits = int(text[2:], 16)
        return Imm("f32", bits ^ 0x80000000 if negative else bits)
    if text[:2] in ("0d", "0D") and len(text) == 18:
        bits = int(text[2:], 16)
        return Imm("f64", bits ^ (1 << 63) if negative else bits)
    if any(c in text for c in ".eE") and not text[:2].lower() in ("0x", "0b"):
        v = float(text)
        return Imm("float", -v if negative else v)
    v = parse_int(text)
    return Imm("int", -v if negative else v)


# -- the parser ----------------------------------------------------------------------------------


class _Cursor:
    """A cursor over the tokens of a PTX text, and errors that name the line."""

    def __init__(self, text: str):
        self.text = text
        self.lines = text.splitlines()
        self.toks = tokenize(text)
        self.i = 0
        self.files: dict[int, str] = {}

    def peek(self, k: int = 0) -> Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> Tok:
        t = self.toks[self.i]
        self.i += 1
        return t

    def source(self, line: int) -> str:
        return self.lines[line - 1] if 0 < line <= len(self.lines) else ""

    def error(self, message: str, tok: Tok | None = None) -> PtxError:
        tok = tok or self.peek()
        return PtxError(message, line=tok.line, source=self.source(tok.line))

    def expect(self, text: str) -> Tok:
        t = self.next()
        if t.text != text:
            raise self.error(f"expected {text!r}, found {t.text or 'end of text'!r}", t)
        return t

    def accept(self, text: str) -> bool:
        if self.peek().text == text:
            self.i += 1
            return True
        return False

    def skip_line(self, line: int) -> None:
        while self.peek().kind != "eof" and self.peek().line == line:
            self.i += 1

    def skip_balanced(self) -> None:
        """Skip a ``{ ... }`` group (the current token is ``{``)."""
        depth = 0
        while True:
            t = self.next()
            if t.kind == "eof":
                raise self.error("unbalanced braces", t)
            if t.text == "{":
                depth += 1
            elif t.text == "}":
                depth -= 1
                if depth == 0:
                    return


class _InstructionParser(_Cursor):
    """One instruction: its guard, opcode and modifiers, and its operands.  The names it
    meets resolve through ``_resolve`` and ``_regs``, set per function by the module parser."""

    def instruction(self) -> Instruction:
        guard = None
        if self.accept("@"):
            negated = self.accept("!")
            g = self.next()
            name = self._resolve(g.text)
            if name is None:
                raise self.error(f"undeclared guard predicate {g.text}", g)
            guard = (name, negated)
        op = self.next()
        if op.kind != "id" or op.text.startswith((".", "%")):
            raise self.error(f"expected an instruction, found {op.text!r}", op)
        parts = op.text.split(".")
        opcode, mods = parts[0], tuple(p for p in parts[1:])
        if any(m == "" for m in mods):
            raise self.error(f"malformed instruction {op.text!r}", op)
        operands = []
        if self.peek().text != ";":
            operands.append(self.operand())
            while self.accept(","):
                operands.append(self.operand())
        self.expect(";")
        return Instruction(opcode, mods, operands, guard, op.line, self.source(op.line).strip())

    def operand(self):
        t = self.peek()
        x = t.text
        if x == "[":
            self.next()
            result = self.address()
        elif x == "{":
            self.next()
            items = [self.operand()]
            while self.accept(","):
                items.append(self.operand())
            self.expect("}")
            result = Vec(tuple(items))
        elif x == "(":
            self.next()
            items = []
            if not self.accept(")"):
                items.append(self.operand())
                while self.accept(","):
                    items.append(self.operand())
                self.expect(")")
            result = Paren(tuple(items))
        elif x == "!":
            self.next()
            result = Not(self.operand())
        elif x == "-":
            self.next()
            n = self.next()
            if n.kind != "num":
                raise self.error("expected a number after '-'", n)
            result = number_imm(n.text, negative=True)
        elif t.kind == "num":
            self.next()
            result = number_imm(x)
        elif t.kind == "id":
            self.next()
            result = self.name_operand(t)
        else:
            raise self.error(f"unexpected {x!r} in an operand", t)
        if self.peek().text == "|":
            self.next()
            result = Pair(result, self.operand())
        return result

    def name_operand(self, t: Tok):
        x = t.text
        if x == "_":
            return SINK
        if x.startswith("%"):
            unique = self._resolve(x)
            if unique is not None:
                return Reg(unique)
            base = x.split(".")[0]
            if base in SPECIAL_REGISTERS or re.match(r"^%envreg\d+$", x) or re.match(r"^%pm\d", x):
                return Special(x)
            raise self.error(f"undeclared register {x}", t)
        unique = self._resolve(x)
        if unique is not None and unique in self._regs:
            return Reg(unique)
        return Sym(unique if unique is not None else x)

    def address(self) -> Addr:
        base = None
        offset = 0
        t = self.next()
        if t.kind == "num":
            offset = parse_int(t.text)
        elif t.kind == "id":
            op = self.name_operand(t)
            if isinstance(op, Special):
                raise self.error("a special register cannot be an address", t)
            base = op
        else:
            raise self.error(f"bad address {t.text!r}", t)
        while self.peek().text in ("+", "-"):
            sign = 1 if self.next().text == "+" else -1
            if self.accept("-"):
                sign = -sign
            n = self.next()
            if n.kind != "num":
                raise self.error("expected a number in an address", n)
            offset += sign * parse_int(n.text)
        if self.accept(","):  # [tensorMap, {coordinates}] (cp.async.bulk.tensor)
            coords = self.operand()
            if not isinstance(coords, Vec):
                raise self.error("expected {coordinates} after the tensor map's address", self.peek())
            self.expect("]")
            return TensorRef(Addr(base, offset), coords)
        self.expect("]")
        return Addr(base, offset)


class _Parser(_InstructionParser):
    """A module: its directives, variables and functions, and each function's body."""

    def module(self) -> Module:
        version, target, address_size = "", [], 64
        functions: dict[str, Function] = {}
        variables: list[VarDecl] = []
        while True:
            t = self.peek()
            if t.kind == "eof":
                break
            x = t.text
            if x == ".version":
                self.next()
                version = self.next().text
            elif x == ".target":
                self.next()
                target.append(self.next().text)
                while self.accept(","):
                    target.append(self.next().text)
            elif x == ".address_size":
                self.next()
                address_size = parse_int(self.next().text)
            elif x == ".file":
                self.file_directive()
            elif x == ".loc":
                self.next()
                self.skip_line(t.line)
            elif x == ".section":
                self.next()
                while self.peek().text != "{":
                    self.next()
                self.skip_balanced()
            elif x == ".pragma":
                self.next()
                while self.next().text != ";":
                    pass
            elif x == ";":
                self.next()
            elif x == ".alias":
                raise self.error(".alias is not supported")
            else:
                # linkage and attributes, then a function or variables
                start = self.i
                extern = False
                while self.peek().text in (".visible", ".extern", ".weak", ".common"):
                    extern |= self.next().text == ".extern"
                k = self.peek().text
                if k in (".entry", ".func"):
                    fn = self.function(extern)
                    old = functions.get(fn.name)
                    if old is None or (fn.defined and not old.defined):
                        functions[fn.name] = fn
                    elif fn.defined and old.defined:
                        raise PtxError(f"function {fn.name} is defined twice", line=fn.line,
                                       source=self.source(fn.line))
                elif k in (".global", ".const", ".shared", ".local"):
                    variables.extend(self.variables(extern))
                else:
                    self.i = start
                    raise self.error(f"unexpected {t.text!r} at module level")
        return Module(version, target, address_size, functions, variables, self.lines, self.files)

    def file_directive(self) -> None:
        """``.file N "name"`` (and optional timestamp and size)."""
        t = self.next()
        number, name = self.peek(), self.peek(1)
        if number.kind == "num" and name.kind == "string":
            self.files[parse_int(number.text)] = name.text[1:-1].encode().decode("unicode_escape")
        self.skip_line(t.line)

    def loc_directive(self) -> tuple[int, int] | None:
        """``.loc FILE LINE COLUMN`` (and anything after, e.g. ``inlined_at``)."""
        t = self.next()
        file, line = self.peek(), self.peek(1)
        loc = None
        if file.kind == "num" and line.kind == "num" and file.line == t.line and line.line == t.line:
            loc = (parse_int(file.text), parse_int(line.text))
        self.skip_line(t.line)
        return loc

    def variables(self, extern: bool) -> list[VarDecl]:
        """``.global .align 4 .b8 name[24] = {...}, other;`` (the space is the current token)."""
        first = self.next()
        space = first.text[1:]
        align, vector, vtype = 0, 1, None
        while self.peek().text.startswith("."):
            d = self.next().text
            if d == ".align":
                align = parse_int(self.next().text)
            elif d in (".v2", ".v4", ".v8"):
                vector = int(d[2:])
            elif d in (".ptr", ".attribute", ".managed", ".unified"):
                if self.peek().text == "(":
                    self.skip_parens()
            elif d[1:] in _SIZES:
                vtype = d[1:]
            else:
                raise self.error(f"unsupported variable attribute {d}")
        if vtype is None:
            raise self.error("variable declaration without a type", first)
        out = []
        while True:
            name_tok = self.next()
            if name_tok.kind != "id":
                raise self.error("expected a variable name", name_tok)
            count = None
            while self.accept("["):
                if self.accept("]"):
                    n = 0
                else:
                    n = parse_int(self.next().text)
                    self.expect("]")
                count = n if count is None else count * n
            init = None
            if self.accept("="):
                init = self.initializer()
            size = _SIZES[vtype] * vector
            out.append(VarDecl(space, name_tok.text, vtype, align or size, count, vector, init, extern,
                               name_tok.line))
            if self.accept(","):
                continue
            self.expect(";")
            return out

    def skip_parens(self) -> None:
        depth = 0
        while True:
            t = self.next()
            if t.text == "(":
                depth += 1
            elif t.text == ")":
                depth -= 1
                if depth == 0:
                    return
            elif t.kind == "eof":
                raise self.error("unbalanced parentheses", t)

    def initializer(self) -> list:
        flat: list = []

        def value():
            t = self.peek()
            if t.text == "{":
                self.next()
                if not self.accept("}"):
                    value()
                    while self.accept(","):
                        value()
                    self.expect("}")
                return
            negative = self.accept("-")
            t = self.next()
            if t.kind == "num":
                imm = number_imm(t.text, negative)
                flat.append(imm)
            elif t.kind == "id":
                name = t.text
                if name in ("generic", "mask") and self.peek().text == "(":
                    self.next()
                    name = self.next().text
                    self.expect(")")
                offset = 0
                if self.accept("+"):
                    offset = parse_int(self.next().text)
                flat.append(("sym", name, offset))
            else:
                raise self.error("bad initializer", t)

        value()
        return flat

    def params(self) -> list[VarDecl]:
        """``( .param .u64 name, .param .align 16 .b8 name[16] )`` (the current token is ``(``)."""
        self.expect("(")
        out = []
        if self.accept(")"):
            return out
        while True:
            t = self.next()
            if t.text not in (".param", ".reg"):
                raise self.error(f"expected .param, found {t.text!r}", t)
            align, vtype, vector = 0, None, 1
            while self.peek().text.startswith("."):
                d = self.next().text
                if d == ".align":
                    align = parse_int(self.next().text)
                elif d in (".v2", ".v4"):
                    vector = int(d[2:])
                elif d in (".ptr", ".global", ".shared", ".const", ".local"):
                    pass
                elif d[1:] in _SIZES:
                    vtype = d[1:]
                else:
                    raise self.error(f"unsupported parameter attribute {d}")
            name = self.next()
            count = None
            if self.accept("["):
                count = parse_int(self.next().text)
                self.expect("]")
            size = _SIZES[vtype] * vector
            out.append(VarDecl("param", name.text, vtype, align or size, count, vector, None, False, name.line))
            if self.accept(")"):
                return out
            self.expect(",")

    def function(self, extern: bool) -> Function:
        kind_tok = self.next()
        kind = kind_tok.text[1:]
        rets: list[VarDecl] = []
        if kind == "func" and self.peek().text == "(":
            rets = self.params()
        name = self.next()
        if name.kind != "id":
            raise self.error("expected a function name", name)
        params = self.params() if self.peek().text == "(" else []
        directives: dict = {}
        while True:
            t = self.peek()
            if t.text in ("{", ";"):
                break
            d = self.next().text
            if d == ".pragma":
                while self.next().text != ";":
                    pass
                continue
            values = []
            while self.peek().kind == "num":
                values.append(parse_int(self.next().text))
                if not self.accept(","):
                    break
            directives[d[1:]] = tuple(values)
        fn = Function(name.text, kind, params, rets, {}, [], [], directives, name.line, False, {}, {})
        if self.accept(";"):
            return fn
        self.body(fn)
        fn.defined = True
        return fn

    # function bodies
    def body(self, fn: Function) -> None:
        self.expect("{")
        scopes: list[dict] = [{}]  # name -> unique name; "<prefix" -> (count, unique prefix)
        counter = [0]
        for p in fn.params + fn.rets:
            scopes[0][p.name] = p.name

        resolved: dict = {}  # name -> unique name, while the scopes stay as they are

        def declare(name: str, unique_hint: str | None = None) -> str:
            if len(scopes) == 1:
                unique = name
            else:
                counter[0] += 1
                unique = f"{name}@{counter[0]}"
            scopes[-1][name] = unique
            resolved.clear()
            return unique

        def resolve(name: str):
            if name in resolved:
                return resolved[name]
            unique = None
            for scope in reversed(scopes):
                if name in scope:
                    unique = scope[name]
                    break
            else:
                m = _NUMBERED.match(name)
                if m:
                    prefix, number = m.group(1), int(m.group(2))
                    for scope in reversed(scopes):
                        entry = scope.get("<" + prefix)
                        if entry is not None and number < entry[0]:
                            unique = f"{entry[1]}{number}"
                            break
            resolved[name] = unique
            return unique

        self._resolve = resolve
        self._regs = fn.regs
        depth = 1
        loc = None
        while True:
            t = self.peek()
            x = t.text
            if t.kind == "eof":
                raise self.error(f"function {fn.name} has no closing brace", t)
            if x == "}":
                self.next()
                depth -= 1
                scopes.pop()
                resolved.clear()
                if depth == 0:
                    return
                continue
            if x == "{":
                self.next()
                depth += 1
                scopes.append({})
                resolved.clear()
                continue
            if x == ";":
                self.next()
                continue
            if x == ".loc":
                loc = self.loc_directive()
                continue
            if x == ".file":
                self.file_directive()
                continue
            if x == ".pragma":
                while self.next().text != ";":
                    pass
                continue
            if x == ".reg":
                self.next()
                rtype = None
                while self.peek().text.startswith("."):
                    d = self.next().text
                    if d in (".v2", ".v4"):
                        raise self.error("vector registers are not supported")
                    rtype = d[1:]
                if rtype not in _SIZES:
                    raise self.error(f"unsupported register type .{rtype}", t)
                while True:
                    n = self.next()
                    if self.accept("<"):
                        count = parse_int(self.next().text)
                        self.expect(">")
                        unique = n.text if len(scopes) == 1 else f"{n.text}@{counter[0] + 1}_"
                        if len(scopes) > 1:
                            counter[0] += 1
                        scopes[-1]["<" + n.text] = (count, unique)
                        resolved.clear()
                        for k in range(count):
                            fn.regs[f"{unique}{k}"] = RegDecl(f"{unique}{k}", rtype)
                    else:
                        unique = declare(n.text)
                        fn.regs[unique] = RegDecl(unique, rtype)
                    if not self.accept(","):
                        break
                self.expect(";")
                continue
            if x in (".local", ".shared", ".param", ".const", ".global"):
                decls = self.variables(False)
                for d in decls:
                    d.name = declare(d.name)
                    if d.space in ("const", "global"):
                        raise self.error(f"function-scope .{d.space} variables are not supported", t)
                fn.variables.extend(decls)
                continue
            if t.kind == "id" and self.peek(1).text == ":" and not x.startswith("%"):
                self.next()
                self.next()
                nxt = self.peek().text
                if nxt == ".callprototype":
                    self.next()
                    rets = self.params() if self.peek().text == "(" else []
                    self.accept("_")
                    params = self.params() if self.peek().text == "(" else []
                    while self.peek().text != ";":
                        self.next()
                    self.next()
                    fn.prototypes[x] = (rets, params)
                    continue
                if nxt == ".branchtargets":
                    self.next()
                    targets = [self.next().text]
                    while self.accept(","):
                        targets.append(self.next().text)
                    self.expect(";")
                    fn.branch_targets[x] = targets
                    continue
                fn.body.append(Label(x, t.line))
                continue
            ins = self.instruction()
            ins.loc = loc
            fn.body.append(ins)


def parse(text: str) -> Module:
    """Parse a PTX module; a :class:`PtxError` names the offending line."""
    return _Parser(text).module()


@functools.lru_cache(maxsize=8)
def parsed(text: str) -> Module:
    """:func:`parse`, remembered for the last few texts (a module is often asked for its
    instruction forms, then loaded): the tree is shared, so never change it."""
    return parse(text)


def imm_bits(imm: Imm, size: int, is_float: bool) -> int:
    """The bit pattern (``size`` bytes) an immediate stands for as an operand of that size."""
    bits = size * 8
    mask = (1 << bits) - 1
    if imm.kind == "int":
        return imm.value & mask
    if imm.kind == "f32":
        if size == 4:
            return imm.value
        value = struct.unpack("<f", struct.pack("<I", imm.value))[0]
    elif imm.kind == "f64":
        if size == 8:
            return imm.value
        value = struct.unpack("<d", struct.pack("<Q", imm.value))[0]
    else:
        value = imm.value
    if size == 8:
        return struct.unpack("<Q", struct.pack("<d", value))[0]
    if size == 4:
        return struct.unpack("<I", struct.pack("<f", value))[0]
    if size == 2:
        import numpy as np

        return int(np.array(value, np.float16).view(np.uint16))
    raise PtxError(f"a float immediate cannot be a {bits}-bit operand")
