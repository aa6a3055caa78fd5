"""Passes over the graph: verifier, constant folding, CSE, LICM and dead-code removal.

Each transforming pass rebuilds the graph (the input is never mutated, so a
program's traced graph stays as the user recorded it) through one small
:class:`_Rebuilder` that copies ops block by block and lets the pass replace an
op by existing values.  Maps are keyed by the values and ops themselves.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

import attrs

from ..errors import VerificationError
from .ir import Block, Graph, Op, Value, constant_of
from .ops import OPS, ConstAttrs, NoAttrs, OpTypeError, RegionKind, ShuffleMode, Space, infer
from .types import DType, TileType, index

# ----------------------------------------------------------------------------- verify

# Called with every graph that passes verification (traced, optimised or parsed): a test
# suite uses this to check that every graph's text form parses back.
verified_listeners: list = []


def verify(graph: Graph) -> Graph:
    """Check the graph's invariants; raise VerificationError naming the broken one."""
    launches = [op for op in graph.body.ops if op.opcode in OPS and op.opdef.launch]
    if len(launches) != 1:
        raise VerificationError(f"kernel '{graph.name}' must hold exactly one launch, found {len(launches)}")
    scalars = graph.scalars
    if [a.type for a in graph.body.args] != [p.dtype for p in scalars]:
        raise VerificationError(f"kernel '{graph.name}': body arguments do not match its scalar parameters")
    _Verifier({p.name: p for p in graph.params}, graph.shared_arrays()).block(
        graph.body, set(), top_level=True, in_launch=False)
    for listener in verified_listeners:
        listener(graph)
    return graph


def _fail(op: Op, message: str):
    where = f" (recorded at {op.location})" if op.location is not None else ""
    raise VerificationError(f"{op.opcode}: {message}{where}")


SHUFFLE_MODES = tuple(m.value for m in ShuffleMode)


class _Verifier:
    def __init__(self, params, shared):
        self.params = params
        self.shared = shared
        self.launch: Op | None = None  # the launch op being verified

    def in_blocks(self, op: Op) -> None:
        if self.launch is None or not self.launch.opdef.thread_blocks:
            _fail(op, "only inside a for_each_block launch")

    def block(self, block: Block, visible: set[Value], *, top_level: bool, in_launch: bool) -> None:
        visible = visible | set(block.args)
        for i, op in enumerate(block.ops):
            if op.opcode not in OPS:
                _fail(op, "no such op")
            for v in op.operands:
                if v not in visible:
                    _fail(op, "uses a value that is not defined before it in this or an enclosing block")
            opdef = OPS[op.opcode]
            if not isinstance(op.attrs, opdef.schema):
                _fail(op, f"attributes must be a {opdef.schema.__name__}, got {type(op.attrs).__name__}")
            if opdef.pointwise and len(op.operands) != opdef.arity:
                _fail(op, f"takes {opdef.arity} operands, got {len(op.operands)}")
            if opdef.verify is not None and (message := opdef.verify(op)) is not None:
                _fail(op, message)
            try:
                types = infer(op.opcode, (v.type for v in op.operands), op.attrs)
            except OpTypeError as e:
                _fail(op, str(e))
            if tuple(types) != tuple(r.type for r in op.results):
                _fail(op, "result types do not match the op's type rule")
            self.memory(op)
            if opdef.writes and not in_launch:
                _fail(op, f"{op.opcode} outside the launch")
            if opdef.in_blocks:
                self.in_blocks(op)
            if opdef.declares_shared and block is not self.launch.regions[0]:
                _fail(op, "a shared array is declared at the top of the block body, not in a loop or branch")
            if opdef.terminator and (block.parent is None or i != len(block.ops) - 1):
                _fail(op, "yield must end a loop or branch region")
            self.regions(op, visible, top_level=top_level, in_launch=in_launch)
            visible.update(op.results)

    def memory(self, op: Op) -> None:
        opdef = op.opdef
        if not opdef.names_buffer:
            return
        name = op.attrs.buffer
        if getattr(op.attrs, "space", Space.GLOBAL) is Space.SHARED:
            self.in_blocks(op)
            declared = self.shared.get(name)
            if declared is None:
                _fail(op, f"'{name}' is not a declared shared array")
            if declared.attrs.dtype != op.attrs.dtype:
                _fail(op, f"shared array '{name}' holds {declared.attrs.dtype}, not {op.attrs.dtype}")
            return
        param = self.params.get(name)
        if param is None or param.is_scalar:
            _fail(op, f"'{name}' is not a buffer parameter")
        if opdef.memory and param.dtype != op.attrs.dtype:
            _fail(op, f"buffer '{name}' holds {param.dtype}, not {op.attrs.dtype}")

    def regions(self, op: Op, visible, *, top_level: bool, in_launch: bool) -> None:
        results = [r.type for r in op.results]
        kind = op.opdef.regions
        if kind is RegionKind.LAUNCH:
            if not top_level:
                _fail(op, "a launch nested inside another region")
            threads = op.attrs.threads if op.opdef.thread_blocks else ()
            self.region(op, op.regions[0] if len(op.regions) == 1 else None,
                        [index] * (len(op.operands) + len(threads)), None)
            self.launch = op
            in_launch = True
        elif kind is RegionKind.LOOP:
            self.region(op, op.regions[0] if len(op.regions) == 1 else None, [index] + results, results)
        elif kind is RegionKind.BRANCH:
            if len(op.regions) not in (1, 2) or (results and len(op.regions) != 2):
                _fail(op, "needs a then region, and an else region when it has results")
            for region in op.regions:
                self.region(op, region, [], results)
        elif op.regions:
            _fail(op, "has regions but is not a loop, branch or launch")
        for region in op.regions:
            self.block(region, visible, top_level=False, in_launch=in_launch)

    @staticmethod
    def region(op: Op, region: Block | None, arg_types, yield_types) -> None:
        if region is None:
            _fail(op, "needs exactly one region")
        if region.parent is not op:
            _fail(op, "region's parent link is broken")
        if [a.type for a in region.args] != list(arg_types):
            _fail(op, "region arguments do not match the op")
        term = region.terminator
        if yield_types is None:
            if term is not None:
                _fail(op, "a launch region must not yield")
        elif term is None or [v.type for v in term.operands] != list(yield_types):
            _fail(op, "region must end with a yield of the result types")


# ----------------------------------------------------------------------------- rebuild

# on_op(rebuilder, op, new_operands) -> new result values, or None to copy the op
OnOp = Callable[["_Rebuilder", Op, list[Value]], "list[Value] | None"]


class _Rebuilder:
    def __init__(self, on_op: OnOp | None = None):
        self.on_op = on_op
        self.map: dict[Value, Value] = {}
        self.block: Block | None = None
        self.scopes: list[Block] = []  # the block being built and its enclosing ones

    def graph(self, graph: Graph) -> Graph:
        return Graph(graph.name, graph.params, self.copy_block(graph.body))

    def copy_block(self, old: Block) -> Block:
        new = Block([a.type for a in old.args])
        self.map.update(zip(old.args, new.args))
        outer, self.block = self.block, new
        self.scopes.append(new)
        for op in old.ops:
            operands = [self.map[v] for v in op.operands]
            results = self.on_op(self, op, operands) if self.on_op else None
            if results is None:
                regions = [self.copy_block(r) for r in op.regions]
                results = self.emit(op.opcode, operands, op.attrs, op.location, regions).results
            self.map.update(zip(op.results, results))
        self.scopes.pop()
        self.block = outer
        return new

    def emit(self, opcode, operands, attrs, location, regions=(), block: Block | None = None) -> Op:
        block = block if block is not None else self.block
        types = infer(opcode, (v.type for v in operands), attrs)
        op = Op(opcode, operands, attrs, types, regions, location, block)
        block.ops.append(op)
        return op


# ----------------------------------------------------------------------------- fold


def _is_exact(types) -> bool:
    """Integer and bool values fold exactly; float folding would have to reproduce each
    type's rounding, so floats are left to run time."""
    return all(t.is_int or t.is_bool for t in types)


def _fold_op(rb: _Rebuilder, op: Op, operands: list[Value]):
    if op.regions or not operands:
        return None
    result_type = op.results[0].type if op.results else None
    consts = [constant_of(v) for v in operands]
    if op.opcode == "select" and consts[0] is not None:  # a constant condition picks a side
        return [operands[1] if consts[0] else operands[2]]
    if op.opcode == "cast" and operands[0].type == result_type:  # x.cast(f32) of an f32: x itself
        return [operands[0]]
    if result_type is None or not _is_exact([result_type, *(v.type for v in operands)]):
        return None
    if all(c is not None for c in consts):
        value = _evaluate(op, operands, consts)
        if value is None:  # e.g. division by zero: leave it to run time
            return None
        return rb.emit("const", [], ConstAttrs(dtype=result_type, value=value), op.location).results
    return _fold_identity(op, operands, consts)


def _evaluate(op: Op, operands, consts):
    result_type = op.results[0].type
    fold = OPS[op.opcode].fold
    if fold is None:
        return None
    value = fold(operands[0].type, *consts)
    if value is None:
        return None
    return bool(value) if result_type.is_bool else result_type.wrap(int(value))


def _fold_identity(op: Op, operands, consts):
    opdef = OPS[op.opcode]
    if len(operands) != 2 or not op.results[0].type.is_int:
        return None
    (a, b), (ca, cb) = operands, consts
    if opdef.absorbing is not None and opdef.absorbing in (ca, cb):
        return [a if ca == opdef.absorbing else b]
    if opdef.identity is not None:
        if cb == opdef.identity:
            return [a]
        if opdef.commutative and ca == opdef.identity:
            return [b]
    return None


def fold_constants(graph: Graph) -> Graph:
    """Evaluate integer and bool ops whose operands are constants; drop x+0, x*1, x*0 and a
    cast to the type a value has."""
    return _Rebuilder(_fold_op).graph(graph)


# each comparison op: of two intervals (lo, hi; None unbounded), True, False, or None (undecided)
DECIDED = {
    "lt": lambda a, b: True if a[1] < b[0] else False if a[0] >= b[1] else None,
    "le": lambda a, b: True if a[1] <= b[0] else False if a[0] > b[1] else None,
    "gt": lambda a, b: True if a[0] > b[1] else False if a[1] <= b[0] else None,
    "ge": lambda a, b: True if a[0] >= b[1] else False if a[1] < b[0] else None,
    "eq": lambda a, b: False if a[1] < b[0] or b[1] < a[0] else None,
    "ne": lambda a, b: True if a[1] < b[0] or b[1] < a[0] else None,
}


def fold_decided_comparisons(graph: Graph) -> Graph:
    """Replace an index comparison that the value ranges decide (:mod:`.analysis.intervals`: a
    loop index within its bounds, thread numbers within the block) by its constant: a tile
    box's ``row >= 0`` for a row counted up from 0, say.  fold-constants and dce then drop the
    selects and branches it decided."""
    from .analysis.intervals import index_ranges

    ranges = index_ranges(graph)
    inf = float("inf")

    def interval(v: Value):
        c = constant_of(v)
        lo, hi = (c, c) if isinstance(c, int) and not isinstance(c, bool) else ranges.get(v, (None, None))
        return (-inf if lo is None else lo), (inf if hi is None else hi)

    def fold(rb: _Rebuilder, op: Op, operands: list[Value]):
        decide = DECIDED.get(op.opcode)
        if decide is None or len(op.operands) != 2 or not all(v.type == index for v in op.operands):
            return None
        value = decide(interval(op.operands[0]), interval(op.operands[1]))
        if value is None:
            return None
        return rb.emit("const", [], ConstAttrs(dtype=op.results[0].type, value=value), op.location).results

    return _Rebuilder(fold).graph(graph)


# ----------------------------------------------------------------------------- CSE


def _attr_key(value):
    if isinstance(value, float):
        return ("float", repr(value))  # keeps 0.0 and -0.0 apart
    return value


def _pure(op: Op, stored: frozenset[str]) -> bool:
    """Its result depends only on its operands: reads qualify only from buffers nothing writes."""
    if not op.opdef.pure or op.regions:
        return False
    if op.opdef.reads:
        return op.attrs.space is Space.GLOBAL and op.attrs.buffer not in stored
    return True


class _CSE:
    def __init__(self, graph: Graph):
        self.stored = graph.stored_buffers()
        self.seen: dict[tuple, tuple[Block, Op]] = {}

    def __call__(self, rb: _Rebuilder, op: Op, operands: list[Value]):
        if not _pure(op, self.stored):
            return None
        keys = list(operands)
        if op.opdef.commutative:
            keys.sort(key=id)
        key = (op.opcode, tuple(keys), tuple(_attr_key(v) for v in attrs.astuple(op.attrs, recurse=False)))
        hit = self.seen.get(key)
        # reuse only a value defined in this block or an enclosing one
        if hit is not None and any(hit[0] is b for b in rb.scopes):
            return list(hit[1].results)
        # constants depend on nothing: hoist them to the kernel's top level, where
        # every later copy in any region can share them
        block = rb.scopes[0] if op.opdef.constant else rb.block
        new = rb.emit(op.opcode, operands, op.attrs, op.location, block=block)
        self.seen[key] = (block, new)
        return list(new.results)


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    """Merge identical pure ops; a later copy reuses a value from an enclosing block."""
    return _Rebuilder(_CSE(graph)).graph(graph)


# ----------------------------------------------------------------------------- LICM


def speculatable(op: Op) -> bool:
    """Pure and unable to fail, so running it where the program would not have is harmless:
    not loads (an index the loop never reaches may be out of bounds), not integer division."""
    opdef = op.opdef
    if op.regions or not opdef.pure:
        return False
    return not any(opdef.can_fail(v.type) for v in op.operands)


def _hoist(rb: _Rebuilder, op: Op, operands: list[Value]):
    if not speculatable(op):
        return None
    depth = {b: n for n, b in enumerate(rb.scopes)}
    target = max((depth.get(v.block, len(rb.scopes) - 1) for v in operands), default=0)
    if op.opdef.tiles or any(isinstance(t, TileType) for t in (r.type for r in op.results)):
        target = max(target, 1)  # a tile exists only inside its program: never above the launch's body
    if target == len(rb.scopes) - 1:
        return None
    return rb.emit(op.opcode, operands, op.attrs, op.location, block=rb.scopes[target]).results


def hoist_loop_invariants(graph: Graph) -> Graph:
    """Move pure ops that cannot fail out of the loops, branches and launch whose values
    they do not depend on, to the outermost block where all their operands exist."""
    return _Rebuilder(_hoist).graph(graph)


# ----------------------------------------------------------------------------- contraction


_FUSED = frozenset({"f32", "f64"})  # f16 and bf16 arithmetic rounds through f32 on most targets: left alone


def _fusible(v: Value) -> bool:
    t = v.type.dtype if isinstance(v.type, TileType) else v.type
    return isinstance(t, DType) and t.name in _FUSED


def contract_multiply_adds(graph: Graph) -> Graph:
    """Multiply-add contraction, on by default as Triton's ``enable_fp_fusion``: an ``add`` or
    ``sub`` of f32 or f64 values (scalars or tiles) one of whose operands is a ``mul`` of the
    same type that nothing else uses becomes one ``fma``, rounded once: ``a * b + c`` and
    ``c + a * b`` are ``fma(a, b, c)``, ``a * b - c`` is ``fma(a, b, -c)`` and ``c - a * b``
    is ``fma(-a, b, c)`` (negation is exact); where both operands qualify, the first is fused.
    The result differs from the unfused one by at most the product's rounding, and every
    backend computes the same bits: they all run this graph.  ``Program.with_fp_fusion(False)``
    (``@accy.kernel(..., fp_fusion=False)``) skips it."""
    uses = Counter(v for op in graph.body.walk() for v in op.operands)

    def product(v: Value) -> Op | None:
        op = v.op
        single = op is not None and op.opcode == "mul" and uses[v] == 1 and v.type == op.operands[0].type
        return op if single else None

    def fuse(rb: _Rebuilder, op: Op, operands: list[Value]):
        if op.opcode not in ("add", "sub") or not _fusible(op.result):
            return None
        x, y = op.operands
        neg = lambda v: rb.emit("neg", [v], NoAttrs(), op.location).result  # noqa: E731
        fma = lambda a, b, c: [rb.emit("fma", [a, b, c], NoAttrs(), op.location).result]  # noqa: E731
        if product(x) is not None:
            a, b = (rb.map[v] for v in x.op.operands)
            return fma(a, b, operands[1] if op.opcode == "add" else neg(operands[1]))
        if product(y) is not None:
            a, b = (rb.map[v] for v in y.op.operands)
            return fma(a if op.opcode == "add" else neg(a), b, operands[0])
        return None

    if not any(op.opcode in ("add", "sub") and _fusible(op.result) and any(product(v) for v in op.operands)
               for op in graph.body.walk()):
        return graph  # nothing to fuse: no copy
    return eliminate_dead_code(_Rebuilder(fuse).graph(graph))


# ----------------------------------------------------------------------------- DCE


def has_effects(op: Op) -> bool:
    """Writes memory, here or in a nested region (a yield only hands values back)."""
    if not op.opdef.terminator and not op.opdef.pure:
        return True
    return any(has_effects(inner) for region in op.regions for inner in region.ops)


def eliminate_dead_code(graph: Graph) -> Graph:
    """Drop ops whose results are never used and that have no side effects."""
    used: set[Value] = set()
    live: set[Op] = set()

    def mark(block: Block) -> None:
        for op in reversed(block.ops):
            if op.opdef.terminator or has_effects(op) or any(r in used for r in op.results):
                live.add(op)
                used.update(op.operands)
                for region in op.regions:
                    mark(region)

    mark(graph.body)
    if len(live) == graph.op_count:
        return graph  # nothing to drop: no copy (graphs are never mutated)

    def keep(rb: _Rebuilder, op: Op, operands):
        return None if op in live else [None] * len(op.results)

    return _Rebuilder(keep).graph(graph)


def optimize(graph: Graph, *, verified: bool = False) -> Graph:
    """The standard pipeline, verified before (unless ``verified``: the caller just did, as
    tracing does) and after."""
    if not verified:
        verify(graph)
    for run_pass in (fold_constants, eliminate_common_subexpressions, hoist_loop_invariants,
                     eliminate_common_subexpressions, eliminate_dead_code, contract_multiply_adds):
        graph = run_pass(graph)
    return verify(graph)
