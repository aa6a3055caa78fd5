"""What the host's tile lowering knows about a tile program before it emits a line: how each
access's offsets and mask are built, which tiles it must hold in memory, and where they live.

* Offsets: a ``tile_load``/``tile_store`` whose offsets are ``base + sum_d coef_d * i_d`` (i_d the
  element's position along axis d), read off the arange/splat/broadcast/reshape/trans/slice/add/sub/mul
  chain that built them (:class:`Affine`), runs row by row over the tile; with ``coef`` 1 along
  the last axis a row is consecutive elements: vector loads.  The offsets tile itself is then
  never built.
* Masks: a conjunction of comparisons of one axis's position with scalars (``rows < M``,
  ``cols >= 0``) is a box (:class:`Box`): the lowering turns it into a range per axis and masks
  only the lanes outside it.  Other masks are built and read element by element.
* Shape guards: a tensor access's offsets are ``select(code == 0, flat, OUT_OF_SHAPE + code)``,
  ``code`` a digit per dimension saying whether its index is past the end or below 0 (see
  :mod:`accy.dsl.tensors`).  Where the digits compare affine indices with scalars, the guard is
  a :class:`Guard`: the box where every index is inside, checked against the mask's box once per
  access (O(programs), not O(elements)), and the access runs on ``flat``.
* Liveness (:func:`liveness`): what a run lowers, backwards from its stores, atomics and (for
  a check-only run) its checks; a tile read only through an access's form is never built.
* Storage: each tile the program builds lives in a stack array; tiles whose lifetimes do not
  overlap share one (:func:`plan_storage`); a reshape is its operand's array, a fold's carried
  tile and its result are one array, and a ``dot`` whose accumulator dies there accumulates in
  place.

Scalar expressions (:data:`Expr`) are Python ints, scalar graph values, or ``(op, a, b)`` with
``op`` one of ``add`` and ``mul``; the lowering evaluates them where the access is.
"""

from __future__ import annotations

import math
from typing import Union

import attrs

from ..dsl.ir import Block, Graph, Op, Value, constant_of, value_names
from ..dsl.tensors import OUT_OF_SHAPE
from ..dsl.types import TileType, shape_of

Expr = Union[int, Value, tuple]


# -- scalar expressions -------------------------------------------------------------------------


def _is_int(e, value=None) -> bool:
    return isinstance(e, int) and (value is None or e == value)


def add(a: Expr, b: Expr) -> Expr:
    if _is_int(a) and _is_int(b):
        return a + b
    if _is_int(a, 0):
        return b
    if _is_int(b, 0):
        return a
    return ("add", a, b)


def mul(a: Expr, b: Expr) -> Expr:
    if _is_int(a) and _is_int(b):
        return a * b
    if _is_int(a, 0) or _is_int(b, 0):
        return 0
    if _is_int(a, 1):
        return b
    if _is_int(b, 1):
        return a
    return ("mul", a, b)


def constant_factor(e: Expr) -> tuple[int, Expr | None]:
    """``e`` as a constant times the rest (None when it is all constant): a tensor's stride times
    a box's step is ``(step, stride)``."""
    if _is_int(e):
        return e, None
    if isinstance(e, tuple) and e[0] == "mul":
        for k, rest in ((e[1], e[2]), (e[2], e[1])):
            if _is_int(k):
                inner, left = constant_factor(rest)
                return k * inner, left
    return 1, e


def neg(a: Expr) -> Expr:
    return mul(-1, a)


def sub(a: Expr, b: Expr) -> Expr:
    return add(a, neg(b))


def scalar(v: Value) -> Expr:
    """An index scalar as an expression (a constant folds to its int)."""
    c = constant_of(v)
    return int(c) if isinstance(c, int) and not isinstance(c, bool) else v


@attrs.frozen
class Affine:
    """Element ``i`` of an index tile is ``base + sum_d coefs[d] * i[d]``."""

    base: Expr
    coefs: tuple

    @property
    def uniform(self) -> bool:
        return all(_is_int(c, 0) for c in self.coefs)


@attrs.frozen
class Box:
    """A bool tile true exactly where ``lows[d] <= i[d] < highs[d]`` for every bound of every
    axis d, ``zero_lows <= 0 < zero_highs`` for each bound there (conditions that do not
    depend on the position) and every scalar bool in ``flags`` holds."""

    lows: tuple  # per axis, a tuple of expressions
    highs: tuple
    zero_lows: tuple = ()
    zero_highs: tuple = ()
    flags: tuple = ()

    @staticmethod
    def full(rank: int) -> "Box":
        return Box(((),) * rank, ((),) * rank)

    def merge(self, other: "Box") -> "Box":
        return Box(tuple(a + b for a, b in zip(self.lows, other.lows)),
                   tuple(a + b for a, b in zip(self.highs, other.highs)),
                   self.zero_lows + other.zero_lows, self.zero_highs + other.zero_highs, self.flags + other.flags)


@attrs.frozen
class Guard:
    """A tensor access's shape guard: ``inside``, the box where every index is inside the
    tensor's shape, and the marker's code for the error message, ``digits``: the code at an
    element is the sum over digits of the weight of a digit's first box holding it (0 if none)."""

    inside: Box
    digits: tuple  # of tuples of (Box, int)


def unit_map(src: tuple[int, ...], dst: tuple[int, ...]):
    """For a reshape that only adds or drops axes of length 1: each result axis's source axis
    (None for a new axis of length 1); None for any other reshape."""
    big_src = [d for d, n in enumerate(src) if n != 1]
    big_dst = [d for d, n in enumerate(dst) if n != 1]
    if [src[d] for d in big_src] != [dst[d] for d in big_dst]:
        return None
    mapping = [None] * len(dst)
    for s, d in zip(big_src, big_dst):
        mapping[d] = s
    return mapping


# the comparisons a box is made of, as bounds on i for D = c*i + base (c = 1 or -1): low or high
_BOUNDS = {
    ("lt", 1): ("high", 0, -1), ("le", 1): ("high", 1, -1), ("gt", 1): ("low", 1, -1), ("ge", 1): ("low", 0, -1),
    ("lt", -1): ("low", 1, 1), ("le", -1): ("low", 0, 1), ("gt", -1): ("high", 0, 1), ("ge", -1): ("high", 1, 1),
}


class Shapes:
    """The affine and box forms of a tile program's values (memoised)."""

    def __init__(self):
        self._affine: dict[Value, Affine | None] = {}
        self._box: dict[Value, Box | None] = {}

    def affine(self, v: Value, conditions=frozenset()) -> Affine | None:
        """``v`` (an index scalar or tile) as an :class:`Affine`, or None.  ``conditions``: bool
        tiles known true where the form is used (a ``select`` on one of them is its true arm)."""
        op = v.op
        if op is not None and op.opcode == "select" and op.operands[0] in conditions:
            return self.affine(op.operands[1], conditions)
        if v not in self._affine:
            self._affine[v] = self._affine_of(v)
        return self._affine[v]

    def _affine_of(self, v: Value) -> Affine | None:
        t = v.type
        if not isinstance(t, TileType):
            return Affine(scalar(v), ()) if t.is_index else None
        op = v.op
        if not t.dtype.is_index or op is None:
            return None
        rank, code = len(t.shape), op.opcode
        if code == "arange":
            return Affine(0, (1,))
        if code == "splat":
            s = op.operands[0]
            return Affine(scalar(s), (0,) * rank) if s.type.is_index else None
        if code in ("broadcast", "reshape", "trans"):
            x = self.affine(op.operands[0])
            if x is None:
                return None
            src = shape_of(op.operands[0].type)
            if code == "broadcast":
                return Affine(x.base, tuple(c if src[d] == t.shape[d] else 0 for d, c in enumerate(x.coefs)))
            if code == "trans":
                return Affine(x.base, tuple(x.coefs[p] for p in op.attrs.perm))
            mapping = unit_map(src, t.shape)
            if mapping is None:
                return None
            return Affine(x.base, tuple(0 if m is None else x.coefs[m] for m in mapping))
        if code == "slice":  # position i of the result is starts + steps * i of the operand
            x = self.affine(op.operands[0])
            if x is None:
                return None
            base = x.base
            for c, start in zip(x.coefs, op.attrs.starts):
                base = add(base, mul(c, start))
            return Affine(base, tuple(mul(c, step) for c, step in zip(x.coefs, op.attrs.steps)))
        if code in ("add", "sub", "mul"):
            x, y = (self.affine(o) for o in op.operands)
            if x is None or y is None:
                return None
            if code == "add":
                return Affine(add(x.base, y.base), tuple(add(a, b) for a, b in zip(x.coefs, y.coefs)))
            if code == "sub":
                return Affine(sub(x.base, y.base), tuple(sub(a, b) for a, b in zip(x.coefs, y.coefs)))
            if y.uniform:
                return Affine(mul(x.base, y.base), tuple(mul(c, y.base) for c in x.coefs))
            if x.uniform:
                return Affine(mul(y.base, x.base), tuple(mul(c, x.base) for c in y.coefs))
        return None

    def box(self, v: Value) -> Box | None:
        """The bool tile ``v`` as a :class:`Box`, or None."""
        if v not in self._box:
            self._box[v] = self._box_of(v)
        return self._box[v]

    def _box_of(self, v: Value) -> Box | None:
        t = v.type
        op = v.op
        if not isinstance(t, TileType) or not t.dtype.is_bool or op is None:
            return None
        rank, code = len(t.shape), op.opcode
        if code == "splat":
            s = op.operands[0]
            c = constant_of(s)
            if c is True:
                return Box.full(rank)
            if c is False:
                return attrs.evolve(Box.full(rank), zero_highs=(0,))
            return attrs.evolve(Box.full(rank), flags=(s,))
        if code == "and":
            x, y = (self.box(o) for o in op.operands)
            return None if x is None or y is None else x.merge(y)
        if code in ("broadcast", "reshape", "trans"):
            x = self.box(op.operands[0])
            return None if x is None else self._map_box(op, x)
        if code in _NEGATED:
            return self._compare_box(code, op.operands, rank)
        return None

    def _compare_box(self, code: str, operands, rank: int) -> Box | None:
        """The box where ``operands[0] <code> operands[1]`` holds (rank 0 for scalars)."""
        x, y = (self.affine(o) for o in operands)
        if x is None or y is None:
            return None
        coefs = [sub(a, b) for a, b in zip(x.coefs, y.coefs)]
        base = sub(x.base, y.base)
        moving = [d for d, c in enumerate(coefs) if not _is_int(c, 0)]
        box = Box.full(rank)
        if not moving:  # the same for every element: a bound on a position that is 0
            kind, shift, sign = _BOUNDS[(code, 1)]
            bound = add(mul(sign, base), shift)
            return attrs.evolve(box, zero_lows=(bound,)) if kind == "low" else attrs.evolve(box, zero_highs=(bound,))
        if len(moving) != 1 or not (_is_int(coefs[moving[0]], 1) or _is_int(coefs[moving[0]], -1)):
            return None
        (d,) = moving
        kind, shift, sign = _BOUNDS[(code, coefs[d])]
        bound = add(mul(sign, base), shift)
        bounds = tuple((bound,) if k == d else () for k in range(rank))
        return attrs.evolve(box, lows=bounds) if kind == "low" else attrs.evolve(box, highs=bounds)

    def guard(self, offsets: Value) -> tuple[Value, Guard] | None:
        """``offsets`` as a shape guard over ``flat`` (see :mod:`accy.dsl.tensors`):
        ``(flat, guard)``, or None where it is not one or its digits are not boxes."""
        op = offsets.op
        if op is None or op.opcode != "select":
            return None
        cond, flat, marker = op.operands
        if cond.op is None or cond.op.opcode != "eq" or _int_value(cond.op.operands[1]) != 0:
            return None
        code = cond.op.operands[0]
        if marker.op is None or marker.op.opcode != "add" or marker.op.operands[0] is not code \
                or _int_value(marker.op.operands[1]) != OUT_OF_SHAPE:
            return None
        found = self._digits(code)
        if found is None:
            return None
        digits, inside = found
        return flat, Guard(inside, digits)

    def _digits(self, v: Value):
        """A guard's code ``v`` as (digits, the box where it is 0), or None."""
        t = v.type
        rank = len(t.shape) if isinstance(t, TileType) else 0
        if _int_value(v) == 0:
            return (), Box.full(rank)
        op = v.op
        if op is None:
            return None
        code = op.opcode
        if code == "add":
            parts = [self._digits(o) for o in op.operands]
            if None in parts:
                return None
            return parts[0][0] + parts[1][0], parts[0][1].merge(parts[1][1])
        if code in ("splat", "broadcast", "reshape", "trans"):
            inner = self._digits(op.operands[0])
            if inner is None:
                return None
            lift = (lambda box: _lift(box, rank)) if code == "splat" else (lambda box: self._map_box(op, box))
            digits = tuple(tuple((lift(box), w) for box, w in digit) for digit in inner[0])
            inside = lift(inner[1])
            if inside is None or any(box is None for digit in digits for box, _ in digit):
                return None  # a reshape that is not only unit axes
            return digits, inside
        if code == "select":  # select(c, weight, rest): a digit's choices, first match
            cond, weight, rest = op.operands
            w = _int_value(weight)
            if not w or cond.op is None or cond.op.opcode not in _NEGATED:
                return None
            holds = self._compare_box(cond.op.opcode, cond.op.operands, rank)
            fails = self._compare_box(_NEGATED[cond.op.opcode], cond.op.operands, rank)
            tail = self._digits(rest)
            if holds is None or fails is None or tail is None or len(tail[0]) > 1:
                return None
            return (((holds, w), *(tail[0][0] if tail[0] else ())),), fails.merge(tail[1])
        return None

    def _map_box(self, op: Op, x: Box) -> Box | None:
        """Box ``x`` of ``op``'s operand as a box of its result (a broadcast, reshape or trans)."""
        rank = len(op.result.type.shape)
        src = shape_of(op.operands[0].type)
        if op.opcode == "trans":
            perm = op.attrs.perm
            return attrs.evolve(x, lows=tuple(x.lows[p] for p in perm), highs=tuple(x.highs[p] for p in perm))
        if op.opcode == "broadcast":
            mapping = [d if src[d] == op.result.type.shape[d] else None for d in range(rank)]
        else:
            mapping = unit_map(src, op.result.type.shape)
            if mapping is None:
                return None
        kept = {m for m in mapping if m is not None}
        dropped = [d for d in range(len(src)) if d not in kept]  # a length-1 axis: its position is 0
        return Box(tuple(() if m is None else x.lows[m] for m in mapping),
                   tuple(() if m is None else x.highs[m] for m in mapping),
                   x.zero_lows + tuple(e for d in dropped for e in x.lows[d]),
                   x.zero_highs + tuple(e for d in dropped for e in x.highs[d]), x.flags)


_NEGATED = {"lt": "ge", "ge": "lt", "le": "gt", "gt": "le"}


def _int_value(v: Value):
    """The int a value (or a splat of one) holds, else None."""
    if v.op is not None and v.op.opcode == "splat":
        v = v.op.operands[0]
    c = constant_of(v)
    return int(c) if isinstance(c, int) and not isinstance(c, bool) else None


def _lift(box: Box, rank: int) -> Box:
    """A scalar's box (conditions alone) as a box of a rank-``rank`` tile."""
    return Box(((),) * rank, ((),) * rank, box.zero_lows, box.zero_highs, box.flags)


def conjuncts(v: Value) -> frozenset[Value]:
    """The bool values whose ``and`` is ``v`` (``v`` itself among them)."""
    out, todo = set(), [v]
    while todo:
        x = todo.pop()
        out.add(x)
        if x.op is not None and x.op.opcode == "and":
            todo.extend(x.op.operands)
    return frozenset(out)


@attrs.frozen
class AccessPlan:
    """How a tile access runs: ``offsets`` row by row from its affine form (None: read from the
    offsets tile, element by element), ``box`` its mask as ranges (None: read the mask tile),
    ``guard`` its shape guard, checked once (None: no guard, or one read through the offsets)."""

    offsets: Affine | None
    box: Box | None
    guard: Guard | None = None

    @property
    def contiguous(self) -> bool:
        """Consecutive elements along the last axis (vector loads and stores)."""
        return self.offsets is not None and _is_int(self.offsets.coefs[-1], 1)


ACCESSES = ("tile_load", "tile_store", "tile_atomic")


def plan_accesses(region: Block) -> dict[Op, AccessPlan]:
    shapes = Shapes()
    plans = {}
    for op in region.walk():
        if op.opcode not in ACCESSES:
            continue
        offsets, mask = op.operands[0], op.operands[-1]
        if op.opcode == "tile_atomic":
            plans[op] = AccessPlan(None, None)
            continue
        box = shapes.box(mask)
        guarded = shapes.guard(offsets) if box is not None else None
        flat = shapes.affine(guarded[0]) if guarded is not None else None
        if flat is not None:
            plans[op] = AccessPlan(flat, box, guarded[1])
            continue
        affine = shapes.affine(offsets, conjuncts(mask))
        plans[op] = AccessPlan(affine, box if affine is not None else None)
    return plans


def _leaves(e, out: list) -> list:
    """The scalar graph values an expression reads."""
    if isinstance(e, tuple):
        _leaves(e[1], out)
        _leaves(e[2], out)
    elif isinstance(e, Value):
        out.append(e)
    return out


def plan_leaves(plan: AccessPlan) -> list[Value]:
    out: list[Value] = []
    if plan.offsets is not None:
        for e in (plan.offsets.base, *plan.offsets.coefs):
            _leaves(e, out)
    boxes = [] if plan.box is None else [plan.box]
    if plan.guard is not None:
        boxes += [plan.guard.inside, *(box for digit in plan.guard.digits for box, _ in digit)]
    for box in boxes:
        for e in (*(e for d in box.lows for e in d), *(e for d in box.highs for e in d), *box.zero_lows,
                  *box.zero_highs):
            _leaves(e, out)
        out.extend(box.flags)
    return out


_EFFECTS = frozenset({"tile_store", "tile_atomic", "store", "atomic"})


@attrs.frozen
class Liveness:
    """What a run of the program computes: the ops it lowers and the values they read.  A
    check-only run (``check_only``) lowers just what its bounds and division checks need:
    stores and atomics check their indices and write nothing, loads whose values nothing
    needs only check."""

    ops: frozenset
    values: frozenset
    check_only: bool
    plans: dict

    def reads(self, op: Op) -> list[Value]:
        """The values ``op`` reads when it runs (a tile through its array, a scalar as itself)."""
        code, plan = op.opcode, self.plans.get(op)
        if plan is not None:
            last = len(op.operands) - 1
            results_live = any(r in self.values for r in op.results)
            kept = []
            for k, v in enumerate(op.operands):
                if (k == 0 and plan.offsets is not None) or (k == last and plan.box is not None):
                    continue  # read through its form
                if k == 1 and ((code == "tile_load" and not results_live) or (code != "tile_load" and self.check_only)):
                    continue  # a load's other, a store's value
                kept.append(v)
            return kept + plan_leaves(plan)
        if self.check_only and code in ("store", "atomic"):
            return [op.operands[0]]
        if code in ("fold", "if"):
            return []  # their operands are read as their regions' liveness says (see liveness)
        return list(op.operands)


# the ops with an emitter of their own on the host (the others with a tile result are pointwise)
SHAPED = frozenset({"fold", "if", "yield", "splat", "arange", "broadcast", "reshape", "trans", "slice", "cat", "reduce",
                    "argreduce", "scan", "dot", "tile_load", "tile_store", "tile_atomic"})


def is_pointwise(op: Op) -> bool:
    """An elementwise op with a tile result (lowered chunk by chunk from its operands' chunks)."""
    return op.opcode not in SHAPED and bool(op.results) and isinstance(op.results[0].type, TileType)


def is_checked_division(op: Op) -> bool:
    return op.opcode in ("div", "mod") and element_of(op.result.type).is_int


def element_of(t):
    return t.dtype if isinstance(t, TileType) else t


def liveness(region: Block, plans: dict[Op, AccessPlan], check_only: bool = False) -> Liveness:
    """The ops a run of the program lowers and the values it reads (a backward fixpoint:
    a fold's carried value is live where its result or a read in the body needs it)."""
    ops = list(region.walk())
    live_ops: set[Op] = set()
    values: set[Value] = set()
    state = Liveness(live_ops, values, check_only, plans)  # reads() sees the sets as they grow

    def root(op: Op) -> bool:
        if op.opcode in _EFFECTS:
            return True
        return check_only and (op.opcode in ("tile_load", "load") or is_checked_division(op))

    changed = True
    while changed:
        changed = False
        size = (len(live_ops), len(values))
        for op in reversed(ops):
            code = op.opcode
            if code == "yield":
                parent = op.block.parent
                if parent is None or parent.opcode not in ("fold", "if"):
                    continue
                targets = parent.regions[0].args[1:] if parent.opcode == "fold" else parent.results
                values.update(v for v, t in zip(op.operands, targets) if t in values)
                continue
            if code in ("fold", "if"):
                inner = any(o in live_ops for r in op.regions for o in r.walk())
                if code == "fold":
                    body = op.regions[0]
                    for arg, result, init in zip(body.args[1:], op.results, op.operands[2:]):
                        if result in values:
                            values.add(arg)
                        if arg in values:
                            values.add(init)
                if inner or any(r in values for r in op.results):
                    live_ops.add(op)
                    values.update(op.operands[:2] if code == "fold" else op.operands[:1])
                continue
            if root(op) or any(r in values for r in op.results):
                live_ops.add(op)
                values.update(state.reads(op))
                if is_checked_division(op):  # checked as it is computed, into its own array
                    values.update(op.results)
        changed = size != (len(live_ops), len(values))
    return Liveness(frozenset(live_ops), frozenset(values), check_only, plans)


# -- storage ------------------------------------------------------------------------------------


class _Groups:
    def __init__(self):
        self.parent: dict[Value, Value] = {}

    def find(self, v: Value) -> Value:
        root = v
        while self.parent.get(root, root) is not root:
            root = self.parent[root]
        while v is not root:
            v, self.parent[v] = self.parent.get(v, v), root
        return root

    def union(self, a: Value, b: Value) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra is not rb:
            self.parent[rb] = ra


@attrs.frozen
class StoragePlan:
    """Each built tile's stack array (``slot_of``: value -> slot number), each slot's size
    in bytes, and the dots that accumulate in place."""

    slot_of: dict
    slot_bytes: tuple[int, ...]
    in_place: frozenset


def tile_bytes(t: TileType, lanes: int) -> int:
    """A tile's array: its elements and a vector's worth more (row loops write whole vectors)."""
    return (t.size + lanes) * t.dtype.itemsize


def plan_storage(region: Block, live: Liveness, lanes: int, fused: frozenset = frozenset()) -> StoragePlan:
    """Each built tile's array (``fused``: tiles with none, :mod:`.tile_fusion`, whose reads are
    their readers')."""
    ops = list(region.walk())
    # in program order (a dict as an ordered set): slots go to tiles by (start, stop), and ties
    # must not fall back to a set's order, which varies from run to run
    needed = dict.fromkeys(v for op in ops for v in (*op.results, *(a for r in op.regions for a in r.args))
                           if v in live.values and isinstance(v.type, TileType) and v not in fused)

    def arrays(values) -> list[Value]:
        """The arrays ``values`` are read from: a fused tile's, those its chunks read, at its reader."""
        out = []
        for v in values:
            if v in fused:
                out += arrays(v.op.operands)
            elif v in needed:
                out.append(v)
        return out

    def uses(op: Op) -> list[Value]:
        if op.opcode == "yield":
            return [v for v in op.operands if v in needed]
        if op not in live.ops or op.results and op.results[0] in fused:
            return []
        if op.opcode == "fold":  # the inits are copied in
            return [i for a, i in zip(op.regions[0].args[1:], op.operands[2:]) if a in needed]
        return arrays(live.reads(op))

    pos = {op: k for k, op in enumerate(ops)}
    end = {}  # a region op's last position
    for op in reversed(ops):
        end[op] = max([pos[op]] + [end[o] for r in op.regions for o in r.ops])

    def defined_at(v: Value) -> int:
        if v.op is not None:
            return pos[v.op]
        owner = v.owner.parent  # a block argument: the op whose region it is
        return pos[owner] if owner in pos else -1

    last = {v: defined_at(v) for v in needed}
    for op in ops:
        for v in uses(op):
            at, start = pos[op], defined_at(v)
            parent = op.block.parent
            while parent is not None and parent in pos:  # used in a loop defined outside it: live all the loop
                if parent.opcode == "fold" and not pos[parent] <= start <= end[parent]:
                    at = max(at, end[parent])
                parent = parent.block.parent
            last[v] = max(last[v], at)
    groups = _Groups()
    for op in ops:
        if op.opcode == "reshape" and op.result in needed:
            groups.union(op.operands[0], op.result)
        if op.opcode == "fold":
            for arg, result in zip(op.regions[0].args[1:], op.results):
                if arg in needed:
                    groups.union(arg, result)
                    last[arg] = max(last[arg], end[op])

    def group_last(root: Value) -> int:
        return max(last[v] for v in needed if groups.find(v) is root)

    in_place = set()
    for op in ops:
        if op.opcode != "dot" or op.result not in needed:
            continue
        acc = op.operands[2]
        owner = acc.owner.parent if acc.op is None else None
        if owner is not None and owner.opcode == "fold":  # a carried accumulator: its own uses end here
            k = owner.regions[0].args.index(acc) - 1
            yields = owner.regions[0].terminator.operands
            if last_use(acc, ops, pos, uses) <= pos[op] and [j for j, y in enumerate(yields) if y is op.result] == [k]:
                groups.union(acc, op.result)
                in_place.add(op)
        elif acc.op is not None and group_last(groups.find(acc)) <= pos[op]:
            groups.union(acc, op.result)
            in_place.add(op)
    for op in ops:  # a carry updated by a pointwise op that reads it last: written in place, no copy
        parent = op.block.parent
        if op.opcode != "yield" or parent is None or parent.opcode != "fold":
            continue
        for arg, y in zip(parent.regions[0].args[1:], op.operands):
            if (arg in needed and y in needed and y.op is not None and y.op in live.ops and is_pointwise(y.op)
                    and y.op.block is op.block and op.operands.count(y) == 1
                    and last_use(y, ops, pos, uses) == pos[op] and last_use(arg, ops, pos, uses) <= pos[y.op]
                    and groups.find(y) is y):
                groups.union(arg, y)
    spans: dict[Value, list] = {}
    for v in needed:
        root = groups.find(v)
        span = spans.setdefault(root, [math.inf, -1, 0])
        span[0] = min(span[0], defined_at(v))
        span[1] = max(span[1], last[v])
        span[2] = max(span[2], tile_bytes(v.type, lanes))
    slot_bytes: list[int] = []
    busy: list[tuple[int, int]] = []  # (last position, slot)
    free: list[int] = []
    slot_of_root = {}
    for root, (start, stop, size) in sorted(spans.items(), key=lambda item: (item[1][0], item[1][1])):
        for entry in [e for e in busy if e[0] < start]:
            busy.remove(entry)
            free.append(entry[1])
        fits = [s for s in free if slot_bytes[s] >= size]
        if fits:
            slot = min(fits, key=lambda s: slot_bytes[s])
        elif free:
            slot = max(free, key=lambda s: slot_bytes[s])
            slot_bytes[slot] = size
        else:
            slot = len(slot_bytes)
            slot_bytes.append(size)
        if slot in free:
            free.remove(slot)
        busy.append((stop, slot))
        slot_of_root[root] = slot
    return StoragePlan({v: slot_of_root[groups.find(v)] for v in needed}, tuple(slot_bytes), frozenset(in_place))


def last_use(v: Value, ops, pos, uses) -> int:
    """The last position at which ``v`` is read (its own uses, not its group's)."""
    at = -1
    for op in ops:
        if v in uses(op):
            at = max(at, pos[op])
    return at



def _expression(e: Expr, names: dict) -> str:
    if isinstance(e, tuple):  # ("add" | "mul", a, b)
        return f"({_expression(e[1], names)} {'+' if e[0] == 'add' else '*'} {_expression(e[2], names)})"
    return str(e) if isinstance(e, int) else names.get(e, "%?")


def describe_plans(graph: Graph) -> str:
    """The access plan of each tile load, store and atomic of a tile program, one line each, as
    comments after its graph text: row by row from an affine form (and contiguous) or element by
    element, its mask as ranges or read from the mask tile."""
    if not graph.is_tile_launch:
        return "// plan-tile-accesses: not a tile program"
    names = value_names(graph)
    lines = ["// plan-tile-accesses: how the host runs each tile access"]
    for op, plan in plan_accesses(graph.launch_op.regions[0]).items():
        where = f" ({op.location.line})" if op.location is not None else ""
        result = names.get(op.results[0], "") + " = " if op.results else ""
        if plan.offsets is None:
            how = "element by element (offsets read from their tile)"
        else:
            terms = ", ".join(_expression(c, names) for c in plan.offsets.coefs)
            how = (f"row by row: {_expression(plan.offsets.base, names)} + [{terms}] . i"
                   f"{' (contiguous)' if plan.contiguous else ''}")
        mask = "mask as ranges" if plan.box is not None else "mask read from its tile"
        guard = "; indices checked against the shape once" if plan.guard is not None else ""
        lines.append(f"//   {result}{op.opcode}{where}: {how}; {mask}{guard}")
    return "\n".join(lines)
