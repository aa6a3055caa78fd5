"""32-bit index arithmetic for a launch whose indices provably fit (NVPTX).

A SIMT graph computes its ``index`` values (i64) in 64-bit integer arithmetic: on a GPU every
add and compare of an offset is two instructions and every hoisted offset two registers.
:func:`narrow_indices` makes the same graph compute them in ``i32`` (:func:`_plan`): index
comparisons, the arithmetic they use, a loop's carried indices, and whatever an address is
computed from, widened by one sign extension where an ``index`` is required.  An address's
own affine part (add, sub, mul, neg, select) stays 64-bit, computed beside its 32-bit form
where a comparison wants that too, so LLVM still folds constant offsets into the address and
strength-reduces loop-varying ones into pointer increments.  The narrowed graph computes
what the original does when every value it computes or truncates to 32 bits lies in
[-2**31, 2**31 - 1]; :func:`fits_in_32_bits` proves that for one launch with the interval
analysis (:mod:`accy.dsl.analysis.intervals`), given the launch's scalars, buffer sizes and
extents as exact values.  :func:`launch_graph` is the choice both device backends (``cuda``,
``ptx``) make per launch.
"""

from __future__ import annotations

import attrs
import numpy as np

from ..dsl.analysis.intervals import index_ranges
from ..dsl.ir import Block, Graph, Op, Value
from ..dsl.ops import CastAttrs, ConstAttrs
from ..dsl.passes import (DECIDED, _Rebuilder, eliminate_common_subexpressions, eliminate_dead_code,
                          fold_constants, verify)
from ..dsl.types import DType, i32, index

# the ops that compute an index from indices exactly as i32 does while every value fits
ARITHMETIC = frozenset({"add", "sub", "mul", "neg", "min", "max", "select", "div", "mod", "and", "or", "xor",
                        "shl", "shr"})
COMPARISONS = frozenset(DECIDED)  # the six comparison ops
_I32_LIMITS = (i32.min, i32.max)
# an address's affine part stays 64-bit (see _plan), and so does a select in it (a checked
# access picks its offset or an error code far outside 32 bits); what they use need not
_AFFINE = frozenset({"add", "sub", "mul", "neg", "select"})


def _is_index(v: Value) -> bool:
    return isinstance(v.type, DType) and v.type == index


def _narrowable(op: Op) -> bool:
    """Computes on i32 in the narrowed graph: index arithmetic, index comparisons, index
    constants that fit, casts to index (from i32 they cast the narrowed value)."""
    if op.regions or len(op.results) != 1:
        return False
    if op.opcode == "const":
        return _is_index(op.result) and i32.min <= op.attrs.value <= i32.max
    if op.opcode == "cast":
        return _is_index(op.result) and isinstance(op.operands[0].type, DType)
    if op.opcode in ARITHMETIC:
        return _is_index(op.result)
    return op.opcode in COMPARISONS and all(_is_index(v) for v in op.operands)


@attrs.frozen
class _Plan:
    """Which form each index value takes in the narrowed graph: ``wide`` ones are computed in
    64 bits (an address's affine part), ``narrow`` ones in 32 (a value in both is computed
    twice: one form for its address, one for its comparisons)."""

    wide: frozenset
    narrow: frozenset


def _plan(graph: Graph) -> _Plan:
    """An index operand of a non-arithmetic op (a memory op, a loop bound) and what it is
    computed from through add, sub, mul, neg and select stay 64-bit: LLVM strength-reduces their
    loop-varying parts into pointer increments and folds their constant offsets into the
    address, which a sign extension in between would prevent.  Every other index value that
    an i32 op or comparison uses is computed in 32 bits from its operands' own 32-bit forms."""
    ops = list(graph.body.walk())
    wide: set[Value] = set()
    for op in reversed(ops):  # every use before its definition
        if not _narrowable(op) or (op.result in wide and op.opcode in _AFFINE):
            carried = _narrow_operands(op)
            wide.update(v for i, v in enumerate(op.operands) if _is_index(v) and i not in carried)
    narrow: set[Value] = set()
    for op in reversed(ops):
        if _narrowable(op) and (op.opcode not in _AFFINE or op.result not in wide or op.result in narrow):
            narrow.update(v for v in (*op.operands, op.result) if _is_index(v))
        narrow.update(op.operands[i] for i in _narrow_operands(op))
        if op.opcode == "fold":  # its carried indices, and its bounds where computed by index
            # arithmetic from the launch's values (its trips then counted in 32 bits; a bound
            # loaded from memory stays 64-bit, so the launch need not bound it)
            narrow.update(v for v in (*op.regions[0].args[1:], *op.results) if _is_index(v))
            narrow.update(v for v in op.operands[:2] if _is_index(v) and (v.op is None or _narrowable(v.op)))
    return _Plan(frozenset(wide), frozenset(narrow))


def _narrow_operands(op: Op) -> frozenset[int]:
    """The operands of a fold or a fold's yield that are carried indices: i32 in the narrowed
    graph (the software pipeline's stage counter, a Triton-style offset carried along)."""
    if op.opcode == "fold":
        return frozenset(i for i, v in enumerate(op.operands) if i >= 2 and _is_index(v))
    parent = op.block.parent if op.block is not None else None
    if op.opcode == "yield" and parent is not None and parent.opcode == "fold":
        return frozenset(i for i, v in enumerate(op.operands) if _is_index(v))
    return frozenset()


class _Narrower(_Rebuilder):
    """Copies a graph with its index arithmetic on i32, as :func:`_plan` says.  An index value
    may have both forms: ``narrow`` (i32) and ``map`` (index); where only one is computed and
    the other is asked for, a cast right after the definition makes it (dce drops the unused)."""

    def __init__(self, plan: _Plan):
        super().__init__()
        self.plan = plan
        self.narrow: dict[Value, Value] = {}

    def copy_block(self, old: Block, types=None) -> Block:
        new = Block(types or [a.type for a in old.args])
        outer, self.block = self.block, new
        self.scopes.append(new)
        for arg, new_arg in zip(old.args, new.args):
            self.define(arg, new_arg)
        for op in old.ops:
            self.copy_op(op)
        self.scopes.pop()
        self.block = outer
        return new

    def define(self, old: Value, new: Value) -> None:
        """``old``'s copy is ``new``; an index gets its other form by a cast."""
        if _is_index(old) and new.type == i32:
            self.narrow[old], self.map[old] = new, self.cast(new, index)
        else:
            self.map[old] = new
            if _is_index(old):
                self.narrow[old] = self.cast(new, i32)

    def cast(self, value: Value, dtype: DType) -> Value:
        return self.emit("cast", [value], CastAttrs(dtype=dtype), None).result

    def copy_op(self, op: Op) -> None:
        if not _narrowable(op):
            carried = _narrow_operands(op)
            operands = [self.narrow[v] if i in carried else self.map[v] for i, v in enumerate(op.operands)]
            if op.opcode == "fold":  # its 32-bit bounds made index: the code counts its trips in 32 bits
                operands[:2] = [self.cast(self.narrow[v], index) if v in self.plan.narrow else self.map[v]
                                for v in op.operands[:2]]
            regions = [self.copy_block(r, self.carry_types(op)) for r in op.regions]
            results = self.emit(op.opcode, operands, op.attrs, op.location, regions).results
            for old, new in zip(op.results, results):
                self.define(old, new)
            return
        in_wide = op.result in self.plan.wide and op.opcode in _AFFINE
        in_narrow = not in_wide or op.result in self.plan.narrow
        if in_wide:
            wide = self.emit(op.opcode, [self.map[v] for v in op.operands], op.attrs, op.location).result
            if not in_narrow:
                self.define(op.result, wide)
        if in_narrow:
            new = self.narrowed(op)
            if not _is_index(op.result):
                self.map[op.result] = new
            elif in_wide:
                self.map[op.result], self.narrow[op.result] = wide, new
            else:
                self.define(op.result, new)

    def narrowed(self, op: Op) -> Value:
        if op.opcode == "const":
            return self.emit("const", [], ConstAttrs(dtype=i32, value=op.attrs.value), op.location).result
        if op.opcode == "cast":
            source = op.operands[0]
            operand = self.narrow[source] if _is_index(source) else self.map[source]
            return self.cast(operand, i32) if operand.type != i32 else operand
        operands = [self.narrow[v] if _is_index(v) else self.map[v] for v in op.operands]
        return self.emit(op.opcode, operands, op.attrs, op.location).result

    @staticmethod
    def carry_types(op: Op):
        if op.opcode != "fold":
            return None
        region = op.regions[0]
        return [region.args[0].type] + [i32 if _is_index(a) else a.type for a in region.args[1:]]


def narrow_indices(graph: Graph) -> Graph:
    """``graph`` with its index arithmetic on i32 (see the module); its values equal
    ``graph``'s for a launch that :func:`fits_in_32_bits`."""
    narrowed = _Narrower(_plan(graph)).graph(graph)
    for run_pass in (fold_constants, eliminate_common_subexpressions, eliminate_dead_code):
        narrowed = run_pass(narrowed)
    return verify(narrowed)


def known_values(graph: Graph, scalars, sizes, extents) -> dict[Value, int]:
    """The exact ints of one launch: its integer scalar parameters (by name), its ``size``
    results (by buffer) and its launch's extents (in the launch op's operand order)."""
    known: dict[Value, int] = {}
    for param, arg in zip(graph.scalars, graph.body.args):
        if param.dtype.is_int and param.name in scalars:
            known[arg] = int(scalars[param.name])
    for op in graph.body.walk():
        if op.opcode == "size" and op.attrs.buffer in sizes:
            known[op.result] = int(sizes[op.attrs.buffer])
    launch = graph.launch_op
    if launch is not None and len(extents) == len(launch.operands):
        known.update(zip(launch.operands, (int(e) for e in extents)))
    return known


def narrowed_values(graph: Graph) -> frozenset[Value]:
    """The index values :func:`narrow_indices` computes or uses in 32 bits (an operand from
    outside, a scalar or a thread's index, is truncated)."""
    return _plan(graph).narrow


def fits_in_32_bits(graph: Graph, scalars, sizes, extents) -> bool:
    """Every index value :func:`narrow_indices` computes in 32 bits, in every thread and trip of
    the launch with these ``scalars`` (name -> value), buffer ``sizes`` (name -> elements) and
    ``extents``, lies in [-2**31, 2**31 - 1]: then the narrowed graph computes what ``graph``
    does.  (What stays 64-bit, an address computed from them, needs no bound.)"""
    ranges = index_ranges(graph, known_values(graph, scalars, sizes, extents))
    lo, hi = _I32_LIMITS
    for v in _checked(graph):
        interval = ranges.get(v)
        if interval is None or interval[0] is None or interval[1] is None \
                or not lo <= interval[0] <= interval[1] <= hi:
            return False
    return True


def _checked(graph: Graph) -> frozenset:
    return graph._fact("32-bit values", lambda: frozenset(narrowed_values(graph)))


def narrowed(graph: Graph) -> Graph:
    """:func:`narrow_indices` of ``graph``, once per graph (a graph's derived fact)."""
    return graph._fact("32-bit graph", lambda: narrow_indices(graph))


def launch_graph(graph: Graph, binding, launch) -> Graph:
    """The graph a device launch of ``graph`` with ``binding`` and ``launch`` runs: the
    narrowed one where :func:`fits_in_32_bits` proves it exact, else ``graph`` itself.  Only
    block launches (a distributed tile program, a block kernel) are narrowed."""
    if not graph.is_block_launch:
        return graph
    scalars = tuple(sorted((n, int(v)) for n, v in binding.scalars.items()
                           if isinstance(v, (int, np.integer)) and not isinstance(v, bool)))
    sizes = tuple(sorted(binding.sizes.items()))
    key = (scalars, sizes, tuple(launch.extents))
    decisions = graph._fact("32-bit decisions", dict)  # per launch's values
    fits = decisions.get(key)
    if fits is None:
        fits = decisions[key] = fits_in_32_bits(graph, dict(scalars), dict(sizes), launch.extents)
    return narrowed(graph) if fits else graph
