"""The graph as Graphviz dot text (no graphviz needed to write it): ops are nodes,
value uses are edges, and each region (a fold's body, the launch) is a cluster."""

from __future__ import annotations

from .ir import Block, Graph, Value, op_lines


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def graph_to_dot(graph: Graph) -> str:
    lines = {op: line.removesuffix(" {") for op, line in op_lines(graph).items()}
    producer: dict[Value, str] = {}  # value -> node name
    out = [f"digraph {_quote(graph.name)} {{", "  node [shape=box, fontname=monospace, fontsize=10];"]
    for p in graph.params:
        out.append(f"  {_quote('param_' + p.name)} [label={_quote(str(p))}, shape=cylinder];")
    counter = iter(range(1 << 30))

    def block(b: Block, indent: str) -> None:
        for arg in b.args:
            producer[arg] = name = f"arg{next(counter)}"
            out.append(f"{indent}{name} [label={_quote(f'{arg.type} (region argument)')}, shape=ellipse];")
        for op in b.ops:
            node = f"op{next(counter)}"
            for r in op.results:
                producer[r] = node
            if op.regions:
                out.append(f"{indent}subgraph cluster_{node} {{")
                out.append(f"{indent}  label={_quote(lines.get(op, op.opcode))};")
                out.append(f"{indent}  {node} [label={_quote(op.opcode)}, shape=octagon];")
                for region in op.regions:
                    block(region, indent + "  ")
                out.append(f"{indent}}}")
            else:
                out.append(f"{indent}{node} [label={_quote(lines.get(op, op.opcode))}];")
            for v in op.operands:
                if v in producer:
                    out.append(f"{indent}{producer[v]} -> {node};")
            if op.opdef.names_buffer:  # memory edges, dashed: param -> load, store -> param
                param = _quote(f"param_{op.attrs.buffer}")
                edge = f"{node} -> {param}" if op.opdef.writes else f"{param} -> {node}"
                out.append(f"{indent}{edge} [style=dashed];")

    block(graph.body, "  ")
    out.append("}")
    return "\n".join(out) + "\n"
