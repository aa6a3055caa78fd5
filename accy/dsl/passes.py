"""Passes over the graph: verifier, constant folding, CSE and dead-code removal.

Each transforming pass rebuilds the graph (the input is never mutated, so a
program's traced graph stays as the user recorded it) through one small
:class:`_Rebuilder` that copies ops block by block and lets the pass replace an
op by existing values.
"""

from __future__ import annotations

from typing import Callable

from ..errors import VerificationError
from .ir import Block, Graph, Op, Value
from .ops import OPS, OpTypeError
from .types import INDEX_MIN, index

# ----------------------------------------------------------------------------- verify


def verify(graph: Graph) -> Graph:
    """Check the graph's invariants; raise VerificationError naming the broken one."""
    params = {p.name: p for p in graph.params}
    launches = [op for op in graph.body.ops if op.opcode == "for_each"]
    if len(launches) != 1:
        raise VerificationError(f"kernel '{graph.name}' must hold exactly one for_each, found {len(launches)}")
    _verify_block(graph.body, set(), params, top_level=True)
    for op in graph.body.ops:  # stores belong to the launch, at any depth below it
        if op.opcode != "for_each" and any(inner.opcode == "store" for inner in [op, *(
                o for region in op.regions for o in region.walk())]):
            _fail(op, "store outside for_each")
    return graph


def _fail(op: Op, message: str):
    where = f" (recorded at {op.location})" if op.location is not None else ""
    raise VerificationError(f"{op.opcode}: {message}{where}")


def _verify_block(block: Block, visible: set[int], params, top_level: bool) -> None:
    visible = set(visible) | {id(a) for a in block.args}
    for i, op in enumerate(block.ops):
        for v in op.operands:
            if id(v) not in visible:
                _fail(op, "uses a value that is not defined before it in this or an enclosing block")
        try:
            types = OPS[op.opcode].infer(tuple(v.type for v in op.operands), op.attrs)
        except OpTypeError as e:
            _fail(op, str(e))
        if tuple(types) != tuple(r.type for r in op.results):
            _fail(op, "result types do not match the op's type rule")
        if op.opcode in ("load", "store"):
            param = params.get(op.attrs["buffer"])
            if param is None or param.dtype != op.attrs["dtype"]:
                _fail(op, f"buffer '{op.attrs['buffer']}' is not a parameter of that dtype")
        if op.opcode == "for_each":
            if not top_level:
                _fail(op, "for_each nested inside another region")
            _verify_region(op, [index] * len(op.attrs["axes"]), None)
        if op.opcode == "fold":
            if not isinstance(op.attrs.get("step"), int) or op.attrs["step"] == 0:
                _fail(op, "step must be a non-zero int")
            _verify_region(op, [index] + [r.type for r in op.results], [r.type for r in op.results])
        if op.opcode == "yield" and (block.parent is None or i != len(block.ops) - 1):
            _fail(op, "yield must end a fold region")
        for region in op.regions:
            _verify_block(region, visible, params, top_level=False)
        visible.update(id(r) for r in op.results)


def _verify_region(op: Op, arg_types, yield_types) -> None:
    (region,) = op.regions
    if region.parent is not op:
        _fail(op, "region's parent link is broken")
    if [a.type for a in region.args] != list(arg_types):
        _fail(op, "region arguments do not match the op")
    term = region.terminator
    if yield_types is None:
        if term is not None:
            _fail(op, "for_each region must not yield")
    elif term is None or [v.type for v in term.operands] != list(yield_types):
        _fail(op, "region must end with a yield of the loop-carried types")


# ----------------------------------------------------------------------------- rebuild

# on_op(rebuilder, op, new_operands) -> new result values, or None to copy the op
OnOp = Callable[["_Rebuilder", Op, list[Value]], "list[Value] | None"]


class _Rebuilder:
    def __init__(self, on_op: OnOp | None = None):
        self.on_op = on_op
        self.map: dict[int, Value] = {}
        self.block: Block | None = None
        self.scopes: list[Block] = []  # the block being built and its enclosing ones

    def graph(self, graph: Graph) -> Graph:
        return Graph(graph.name, graph.params, self.copy_block(graph.body))

    def copy_block(self, old: Block) -> Block:
        new = Block([a.type for a in old.args])
        self.map.update((id(a), b) for a, b in zip(old.args, new.args))
        outer, self.block = self.block, new
        self.scopes.append(new)
        for op in old.ops:
            operands = [self.map[id(v)] for v in op.operands]
            results = self.on_op(self, op, operands) if self.on_op else None
            if results is None:
                results = self.emit(op.opcode, operands, op.attrs, op.location, [self.copy_block(r) for r in op.regions]).results
            self.map.update((id(a), b) for a, b in zip(op.results, results))
        self.scopes.pop()
        self.block = outer
        return new

    def emit(self, opcode, operands, attrs, location, regions=(), block: Block | None = None) -> Op:
        block = block if block is not None else self.block
        types = OPS[opcode].infer(tuple(v.type for v in operands), attrs)
        op = Op(opcode, operands, attrs, types, regions, location, block)
        block.ops.append(op)
        return op


# ----------------------------------------------------------------------------- fold


def _const_value(v: Value):
    owner = v.owner
    if isinstance(owner, Op) and owner.opcode == "const":
        return owner.attrs["value"]
    return None


def _wrap(value: int) -> int:
    """Index arithmetic wraps at 64 bits, as in LLVM and NumPy."""
    return (value - INDEX_MIN) % 2**64 + INDEX_MIN


def _fold_op(rb: _Rebuilder, op: Op, operands: list[Value]):
    opdef = OPS[op.opcode]
    if opdef.fold is None or op.regions:
        return None
    result_type = op.results[0].type
    consts = [_const_value(v) for v in operands]
    if op.opcode == "select" and consts[0] is not None:
        return [operands[1] if consts[0] else operands[2]]
    if any(v.type.is_float for v in operands) or result_type.is_float:
        return None  # float folding would have to reproduce f32 rounding exactly
    if all(c is not None for c in consts):
        value = opdef.fold(*consts)
        if value is None:  # e.g. division by zero: leave it to run time
            return None
        value = bool(value) if result_type.is_bool else _wrap(int(value))
        return rb.emit("const", [], {"value": value, "dtype": result_type}, op.location).results
    return _fold_identity(op.opcode, operands, consts)


def _fold_identity(opcode: str, operands, consts):
    if len(operands) != 2:
        return None
    (a, b), (ca, cb) = operands, consts
    if opcode == "add" and ca == 0:
        return [b]
    if opcode in ("add", "sub") and cb == 0:
        return [a]
    if opcode == "mul" and (ca == 0 or cb == 0):  # index only: no NaN to keep
        return [a if ca == 0 else b]
    if opcode == "mul" and ca == 1:
        return [b]
    if opcode in ("mul", "div") and cb == 1:
        return [a]
    return None


def fold_constants(graph: Graph) -> Graph:
    """Evaluate index and bool ops whose operands are constants; drop x+0, x*1."""
    return _Rebuilder(_fold_op).graph(graph)


# ----------------------------------------------------------------------------- CSE


def _attr_key(value):
    if isinstance(value, float):
        return ("float", repr(value))  # keeps 0.0 and -0.0 apart
    return value


class _CSE:
    def __init__(self, graph: Graph):
        self.stored = graph.stored_buffers()
        self.seen: dict[tuple, tuple[Block, Value]] = {}

    def __call__(self, rb: _Rebuilder, op: Op, operands: list[Value]):
        opdef = OPS[op.opcode]
        if not opdef.pure or op.regions or (op.opcode == "load" and op.attrs["buffer"] in self.stored):
            return None
        ids = [id(v) for v in operands]
        if opdef.commutative:
            ids.sort()
        key = (op.opcode, tuple(ids), tuple(sorted((k, _attr_key(v)) for k, v in op.attrs.items())))
        hit = self.seen.get(key)
        # reuse only a value defined in this block or an enclosing one
        if hit is not None and any(hit[0] is b for b in rb.scopes):
            return list(hit[1].owner.results)
        # constants depend on nothing: hoist them to the kernel's top level, where
        # every later copy in any region can share them
        block = rb.scopes[0] if op.opcode == "const" else rb.block
        results = rb.emit(op.opcode, operands, op.attrs, op.location, block=block).results
        self.seen[key] = (block, results[0])
        return results


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    """Merge identical pure ops; a later copy reuses a value from an enclosing block."""
    return _Rebuilder(_CSE(graph)).graph(graph)


# ----------------------------------------------------------------------------- LICM

# ops that can never fail, so running one where the loop would not have is harmless:
# not loads (an index the loop never reaches may be out of bounds), not index division
_HOISTABLE = {"const", "add", "sub", "mul", "max", "min", "neg", "exp", "sqrt", "lt", "le", "gt", "ge", "eq", "ne",
              "and", "or", "not", "select", "cast"}


def _hoist(rb: _Rebuilder, op: Op, operands: list[Value]):
    hoistable = op.opcode in _HOISTABLE or (op.opcode == "div" and op.results[0].type.is_float)
    if not hoistable or op.regions:
        return None
    depth = {id(b): n for n, b in enumerate(rb.scopes)}
    target = max((depth.get(id(v.block), len(rb.scopes) - 1) for v in operands), default=0)
    if target == len(rb.scopes) - 1:
        return None
    return rb.emit(op.opcode, operands, op.attrs, op.location, block=rb.scopes[target]).results


def hoist_loop_invariants(graph: Graph) -> Graph:
    """Move pure ops that cannot fail out of the loops and launch whose values they
    do not depend on, to the outermost block where all their operands exist."""
    return _Rebuilder(_hoist).graph(graph)


# ----------------------------------------------------------------------------- DCE


def _has_effects(op: Op) -> bool:
    """Writes memory, here or in a nested region (a yield only hands values back)."""
    if op.opcode != "yield" and not OPS[op.opcode].pure:
        return True
    return any(_has_effects(inner) for region in op.regions for inner in region.ops)


def eliminate_dead_code(graph: Graph) -> Graph:
    """Drop ops whose results are never used and that have no side effects."""
    used: set[int] = set()
    live: set[int] = set()

    def mark(block: Block) -> None:
        for op in reversed(block.ops):
            if op.opcode == "yield" or _has_effects(op) or any(id(r) in used for r in op.results):
                live.add(id(op))
                used.update(id(v) for v in op.operands)
                for region in op.regions:
                    mark(region)

    mark(graph.body)

    def keep(rb: _Rebuilder, op: Op, operands):
        return None if id(op) in live else [None] * len(op.results)

    return _Rebuilder(keep).graph(graph)


def optimize(graph: Graph) -> Graph:
    """The standard pipeline, verified before and after."""
    verify(graph)
    for run_pass in (fold_constants, eliminate_common_subexpressions, hoist_loop_invariants,
                     eliminate_common_subexpressions, eliminate_dead_code):
        graph = run_pass(graph)
    return verify(graph)
