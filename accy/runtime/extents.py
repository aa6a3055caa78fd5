"""Launch extents known only at run time: the kernel-scope ops they are computed from
(constants, buffer sizes, scalars and the arithmetic on them) run once, before the launch,
with the reference semantics.  Every backend's launch asks this (:func:`accy.runtime.resolve_launch`)."""

from __future__ import annotations

import numpy as np

from ..dsl.ir import Graph, Op, Value
from ..errors import ExecutionError
from .interpreter import numerics
from ..diagnostics import at
from .interpreter.simt import EVAL


def evaluate_extents(graph: Graph, sizes: dict[str, int], scalars: dict[str, object]) -> tuple[int, ...]:
    """The launch's extents for these buffer sizes and scalar values: the kernel's top-level
    ops that compute them run once, here (they use only constants, scalars and sizes)."""
    launch = graph.launch_op
    env: dict[Value, object] = dict(zip(graph.body.args, (scalars[p.name] for p in graph.scalars)))
    needed = _defining_ops(launch.operands)
    with np.errstate(all="ignore"):
        for op in graph.body.ops:
            if op not in needed:
                continue
            if op.opcode == "const":
                env[op.result] = op.attrs["dtype"].numpy.type(op.attrs["value"])
            elif op.opcode == "size":
                env[op.result] = np.int64(sizes[op.attrs["buffer"]])
            elif op.opcode == "cast":
                env[op.result] = numerics.cast(env[op.operands[0]], op.operands[0].type, op.result.type)
            elif op.opcode in ("div", "mod") and op.result.type.is_int:
                a, b = (env[v] for v in op.operands)
                if b == 0:
                    raise ExecutionError(f"{op.opcode}: {op.operands[0].type} division by zero while computing "
                                         f"the launch extents{at(op)}")
                env[op.result] = (np.floor_divide if op.opcode == "div" else np.remainder)(a, b)
            else:
                env[op.result] = EVAL[op.opcode](*[env[v] for v in op.operands])
    return tuple(int(env[v]) for v in launch.operands)


def _defining_ops(values) -> set[Op]:
    ops, todo = set(), list(values)
    while todo:
        op = todo.pop().op
        if op is not None and op not in ops:
            ops.add(op)
            todo.extend(op.operands)
    return ops
