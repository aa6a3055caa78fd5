"""The stable text form of a graph (what ``accy ir`` prints).

Values are numbered ``%0, %1, ...`` in definition order, so the same program
always prints the same text; the text is also the disk-cache key of compiled code.
"""

from __future__ import annotations

from .ir import Block, Graph, Op, Value


class _Namer:
    def __init__(self, lines: dict | None = None):
        self.names: dict[int, str] = {}
        self.lines = lines  # when given: op id -> the op's (first) line of text

    def define(self, value: Value) -> str:
        name = f"%{len(self.names)}"
        self.names[id(value)] = name
        return name

    def __call__(self, value: Value) -> str:
        return self.names.get(id(value), "%<undefined>")


def _const_text(op: Op) -> str:
    value = op.attrs["value"]
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def _print_op(op: Op, name: _Namer, indent: str, out: list[str]) -> None:
    first = len(out)
    _print_op_lines(op, name, indent, out)
    if name.lines is not None:
        name.lines[id(op)] = out[first].strip()


def _print_op_lines(op: Op, name: _Namer, indent: str, out: list[str]) -> None:
    ops = ", ".join(name(v) for v in op.operands)
    if op.opcode == "for_each":
        block = op.regions[0]
        args = ", ".join(f"{name.define(v)} = {a.name}<{a.extent}>" for v, a in zip(block.args, op.attrs["axes"]))
        out.append(f"{indent}for_each ({args}) {{")
        _print_block(block, name, indent + "  ", out)
        out.append(f"{indent}}}")
        return
    if op.opcode == "fold":
        start, stop, *inits = op.operands
        block = op.regions[0]
        types = ", ".join(str(v.type) for v in op.results)
        init_text = ", ".join(name(v) for v in inits)
        lhs = ", ".join(name.define(v) for v in op.results)
        out.append(
            f"{indent}{lhs} = fold {name(start)} to {name(stop)} step {op.attrs['step']} "
            f"init({init_text}) -> ({types}) {{"
        )
        args = ", ".join(f"{name.define(v)}: {v.type}" for v in block.args)
        out.append(f"{indent}^({args}):")
        _print_block(block, name, indent + "  ", out)
        out.append(f"{indent}}}")
        return
    if op.opcode == "yield":
        out.append(f"{indent}yield {ops}")
        return
    if op.opcode == "store":
        idx, value = op.operands
        out.append(f"{indent}store %{op.attrs['buffer']}[{name(idx)}] = {name(value)} : {op.attrs['dtype']}")
        return
    if op.opcode == "const":
        rhs = f"const {_const_text(op)} :"
    elif op.opcode == "load":
        rhs = f"load %{op.attrs['buffer']}[{ops}] :"
    elif op.opcode == "cast":
        rhs = f"cast {ops} : {op.operands[0].type} ->"
    else:
        rhs = f"{op.opcode} {ops} :"
    out.append(f"{indent}{name.define(op.result)} = {rhs} {op.result.type}")


def _print_block(block: Block, name: _Namer, indent: str, out: list[str]) -> None:
    for op in block.ops:
        _print_op(op, name, indent, out)


def op_lines(graph: Graph) -> dict[int, str]:
    """Each op's line in the text form (a fold's or launch's header line), by op id."""
    lines: dict[int, str] = {}
    _print_block(graph.body, _Namer(lines), "  ", [])
    return lines


def print_graph(graph: Graph) -> str:
    params = ", ".join(str(p) for p in graph.params)
    out = [f"kernel @{graph.name}({params}) {{"]
    _print_block(graph.body, _Namer(), "  ", out)
    out.append("}")
    return "\n".join(out) + "\n"
