"""Strength reduction of a loop's index products (the NVPTX tile pipeline's ``strength-reduce``):
``(i + k) * s`` in a fold over ``i``, with ``k`` a constant and ``s`` a value from before the
loop (a stride), becomes a value the loop carries, ``(start + k) * s`` before it and
``step * s`` more each trip; ``(e + i + k) * s`` with ``e`` computed in the loop (an inner
loop's element) becomes ``e * s`` plus the same carried value.

A tile program's copies address rows ``ahead * stride`` down a tensor: without this, each trip
multiplies the row by the stride again (a 64-bit multiply is three integer instructions, the
add two; in 32 bits one and one, the add on a uniform register).  LLVM's own loop strength
reduction leaves them, its cost model counting the carried value's registers before the
instructions it saves.  What stays: a product by a constant (it costs what the add costs) and
one whose offset is computed per thread (below, :func:`_offset_from`).  The carried value is an
induction the interval analysis bounds by the loop's trips, so a launch whose products fit in
32 bits still runs its 32-bit variant (:mod:`accy.lowering.narrow_indices`).
"""

from __future__ import annotations

import attrs

from ..dsl.ir import Block, Graph, Op, Value
from ..dsl.ops import ConstAttrs, NoAttrs
from ..dsl.passes import _Rebuilder, eliminate_dead_code, verify
from ..dsl.types import DType, index


def _is_index(v: Value) -> bool:
    return isinstance(v.type, DType) and v.type == index


@attrs.frozen
class _Product:
    """A mul of a fold's body that the fold reduces: ``(e + x) * s`` (``e`` None: ``x * s``),
    with ``x`` the fold's index plus ``k`` (None: the index itself); ``s`` and ``k`` computed
    before the fold."""

    mul: Op
    e: Value | None
    k: Value | None
    s: Value

    @property
    def carried(self) -> tuple:
        """What the loop carries for it: ``(i + k) * s``, shared by every product of the same."""
        return (self.k, self.s)


def _products(fold: Op, claimed: set) -> list[_Product]:
    """The products in ``fold``'s body, its inner loops' included, that it reduces (the
    module), less those ``claimed`` by an inner loop."""
    region = fold.regions[0]
    iv = region.args[0]
    inside = set(region.args) | {v for op in region.walk()
                                 for v in (*op.results, *(a for inner in op.regions for a in inner.args))}
    outside = lambda v: v not in inside  # noqa: E731
    found = []
    for op in region.walk():
        if op.opcode != "mul" or not _is_index(op.result) or op in claimed:
            continue
        for x, s in (op.operands, op.operands[::-1]):
            if not outside(s) or _is_constant(s):
                continue
            k = _offset_from(x, iv, outside)
            if k is not False:
                found.append(_Product(op, None, k, s))
                break
            # (e + i + k) * s, e computed in the loop (an inner loop's element): i's part reduced,
            # e's multiplied where it is (one from before the loop would be hoisted, a register each)
            if x.op is not None and x.op.opcode == "add":
                a, b = x.op.operands
                for e, rest in ((a, b), (b, a)):
                    k = _offset_from(rest, iv, outside)
                    if k is not False and not outside(e):
                        found.append(_Product(op, e, k, s))
                        break
                else:
                    continue
                break
    return found


def _offset_from(x: Value, iv: Value, outside) -> Value | None | bool:
    """``k`` where ``x`` is ``iv + k`` with ``k`` a constant (None where it is ``iv``), False
    where it is neither.  An offset computed per thread (a row of a thread's own elements) keeps
    its multiply: the offset stays live for the masks that compare it, and one carried product
    per offset would hold a register more each (a register-fed FMA matmul: 128 to 140)."""
    if x is iv:
        return None
    op = x.op
    if op is not None and op.opcode == "add":
        a, b = op.operands
        if a is iv and outside(b) and _is_constant(b):
            return b
        if b is iv and outside(a) and _is_constant(a):
            return a
    return False


def _is_constant(v: Value) -> bool:
    return v.op is not None and v.op.opcode == "const"


class _Reducer(_Rebuilder):
    def __init__(self, plans: dict[Op, list[_Product]]):
        super().__init__(self._on_op)
        self.plans = plans
        self.reduced: dict[Op, tuple[_Product, Value]] = {}  # a reduced mul -> its product, its carried value

    def _on_op(self, rb, op: Op, operands):
        if op in self.reduced:
            product, carried = self.reduced[op]
            if product.e is None:
                return [carried]
            rest = self.emit("mul", [self.map[product.e], self.map[product.s]], NoAttrs(), op.location).result
            return [self.emit("add", [rest, carried], NoAttrs(), op.location).result]
        if op.opcode != "fold" or op not in self.plans:
            return None
        start, stop, *inits = operands
        step = self.const(op.attrs.step)
        keys = list(dict.fromkeys(p.carried for p in self.plans[op]))
        firsts, deltas = [], []
        for k, s in keys:
            first = start if k is None else self.plus(start, self.map[k], op)
            firsts.append(self.emit("mul", [first, self.map[s]], NoAttrs(), op.location).result)
            deltas.append(self.emit("mul", [step, self.map[s]], NoAttrs(), op.location).result)
        region = op.regions[0]
        body = Block([a.type for a in region.args] + [index] * len(keys))
        self.map.update(zip(region.args, body.args))
        carried = dict(zip(keys, body.args[len(region.args):]))
        for product in self.plans[op]:
            self.reduced[product.mul] = (product, carried[product.carried])
        outer, self.block = self.block, body
        self.scopes.append(body)
        for inner in region.ops[:-1]:
            self._copy(inner)
        terminator = region.ops[-1]
        following = [self.emit("add", [carried[key], delta], NoAttrs(), terminator.location).result
                     for key, delta in zip(keys, deltas)]
        self.emit("yield", [self.map[v] for v in terminator.operands] + following, terminator.attrs,
                  terminator.location)
        self.scopes.pop()
        self.block = outer
        new = self.emit("fold", [start, stop, *inits, *firsts], op.attrs, op.location, [body])
        return new.results[:len(op.results)]

    def _copy(self, op: Op) -> None:
        operands = [self.map[v] for v in op.operands]
        results = self._on_op(self, op, operands)
        if results is None:
            results = self.emit(op.opcode, operands, op.attrs, op.location,
                                [self.copy_block(r) for r in op.regions]).results
        self.map.update(zip(op.results, results))

    def plus(self, a: Value, b: Value, op: Op) -> Value:
        """``a + b``, a constant where both are (a loop from 0, a row offset)."""
        if _is_constant(a) and _is_constant(b):
            return self.const(a.op.attrs.value + b.op.attrs.value)
        return self.emit("add", [a, b], NoAttrs(), op.location).result

    def const(self, value: int) -> Value:
        return self.emit("const", [], ConstAttrs(dtype=index, value=value), None).result


def strength_reduce(graph: Graph) -> Graph:
    """``graph`` with its loops' index products by a value computed before them carried (the
    module); the same values, computed with adds."""
    plans, claimed = {}, set()
    for op in reversed(list(graph.body.walk())):  # an inner loop first: a product its index varies is its own
        if op.opcode == "fold":
            found = _products(op, claimed)
            if found:
                plans[op] = found
                claimed.update(p.mul for p in found)
    if not plans:
        return graph
    return verify(eliminate_dead_code(_Reducer(plans).graph(graph)))
