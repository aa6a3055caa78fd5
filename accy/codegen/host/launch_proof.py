"""The host's launch proof: every access whose index interval over the whole launch can
be computed before it runs is checked once, there, instead of in every thread."""

from __future__ import annotations

import attrs
from llvmlite import ir

from ...dsl.analysis.intervals import BY_CONSTANT, RULES
from ...dsl.ir import Block, Op, Value
from ..llvm import Lowering
from ..llvm_types import I1, I64


@attrs.frozen
class Bounds:
    """An index's interval over a whole launch, computed before it runs."""

    lo: ir.Value
    hi: ir.Value
    valid: ir.Value  # i1: no step overflowed (else nothing is known)
    reached: ir.Value  # i1: some thread may compute it (false: an empty loop's index)


class LaunchProof:
    """Checks, once before a launch, every access whose index is made of thread indices, loop
    indices and kernel-scope values with ``+ - *``, ``min``, ``max``, ``select``, and ``//`` and
    ``%`` by positive constants: its interval over the whole launch must lie in bounds (and a
    divisor's must exclude 0).  Conservative: a loop's index ranges from its lowest start to
    its highest stop, and of a branch's condition only comparisons of indices (``and``-ed
    together) narrow them inside the ``then`` side, for every value computed from them there
    (``row > 0`` and ``row < n - 1`` guarding ``x[row - 1]`` and ``x[row + 1]``).  Where it holds, those
    accesses need no check at run time; where every check of a kernel is covered, the
    kernel cannot fail, and the host runs it on the caller's arrays with no scratch copies."""

    def __init__(self, lw: Lowering, narrowed: dict | None = None):
        self.lw = lw
        self.b = lw.b
        self.bounds: dict[Value, Bounds | None] = {}
        if narrowed is not None:  # inside a branch: the narrowed indices, the rest computed again
            self.bounds.update(narrowed)
            return
        launch = lw.graph.launch_op
        region = launch.regions[0]
        yes, one = ir.Constant(I1, 1), ir.Constant(I64, 1)
        if lw.graph.is_block_launch:
            extents = list(lw.extents) + [ir.Constant(I64, e) for e in lw.graph.block_shape]
        else:
            extents = list(lw.extents)
        for arg, extent in zip(region.args, extents):
            self.bounds[arg] = Bounds(ir.Constant(I64, 0), self.b.sub(extent, one), yes, yes)

    def prove(self) -> tuple[ir.Value, frozenset[Op], bool]:
        """(all covered checks pass, the ops covered, whether every check is covered)."""
        ok, covered, complete = ir.Constant(I1, 1), set(), True

        def walk(proof: "LaunchProof", block: Block) -> None:
            nonlocal ok, complete
            for op in block.ops:
                fits = proof._fits(op)
                if fits is None:
                    complete = False
                elif fits is not False:  # (False: no check to cover)
                    ok = self.b.and_(ok, fits)
                    covered.add(op)
                for k, region in enumerate(op.regions):
                    walk(proof._narrowed(op.operands[0]) if op.opcode == "if" and k == 0 else proof, region)

        walk(self, self.lw.graph.launch_op.regions[0])
        return ok, frozenset(covered), complete

    def _narrowed(self, condition: Value) -> "LaunchProof":
        """The proof inside a branch taken where ``condition`` holds: each index it compares
        with a value of known bounds narrowed (``i < e``: i <= e.hi - 1, ...)."""
        narrowed: dict[Value, Bounds] = {}
        b, one = self.b, ir.Constant(I64, 1)
        conjuncts, facts = [condition], []
        while conjuncts:
            c = conjuncts.pop()
            if c.op is not None and c.op.opcode == "and" and c.type.is_bool:
                conjuncts.extend(c.op.operands)
            elif c.op is not None and c.op.opcode in ("lt", "le", "gt", "ge") and c.op.operands[0].type.is_index:
                x, y = c.op.operands
                opcode = c.op.opcode
                facts.append((x, opcode, y))  # and the same fact seen from y's side
                facts.append((y, {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}[opcode], x))
        for x, opcode, y in facts:
            bx = narrowed.get(x) or self.of(x)
            by = self.of(y)
            if bx is None or by is None:
                continue
            if opcode in ("lt", "le"):  # x < y <= y.hi
                limit = b.ssub_with_overflow(by.hi, one) if opcode == "lt" else None
                hi = by.hi if limit is None else b.extract_value(limit, 0)
                valid = by.valid if limit is None else b.and_(by.valid, b.not_(b.extract_value(limit, 1)))
                lo, hi = bx.lo, self.lw.call("llvm.smin", [bx.hi, hi])
            else:  # x > y >= y.lo
                limit = b.sadd_with_overflow(by.lo, one) if opcode == "gt" else None
                lo = by.lo if limit is None else b.extract_value(limit, 0)
                valid = by.valid if limit is None else b.and_(by.valid, b.not_(b.extract_value(limit, 1)))
                lo, hi = self.lw.call("llvm.smax", [bx.lo, lo]), bx.hi
            # where the narrowed interval is empty, no thread takes the branch
            narrowed[x] = Bounds(lo, hi, b.and_(bx.valid, valid),
                                  b.and_(b.and_(bx.reached, by.reached), b.icmp_signed("<=", lo, hi)))
        if not narrowed:
            return self
        indices = {v: bounds for v, bounds in self.bounds.items() if v.op is None}  # the launch's own
        return LaunchProof(self.lw, {**indices, **narrowed})

    def _fits(self, op: Op):
        """An i1 proving ``op``'s check passes everywhere, None if unknown, False if it has none."""
        b = self.b
        if op.opcode in ("load", "store", "atomic"):
            if not self.lw.memory.checked(op):
                return False
            bounds = self.of(op.operands[0])
            if bounds is None:
                return None
            count = self.lw.memory.count(op)  # a load or store of vec elements: its last element inside too
            if op.attrs.get("vec", 1) != 1:
                count = b.sub(count, ir.Constant(I64, op.attrs["vec"] - 1))
            inside = b.and_(b.icmp_signed(">=", bounds.lo, ir.Constant(I64, 0)),
                            b.icmp_signed("<", bounds.hi, count))
        elif op.opcode in ("div", "mod") and op.result.type.is_int:
            divisor = op.operands[1]
            if divisor.op is not None and divisor.op.opcode == "const" and divisor.op.attrs["value"] != 0:
                return False
            bounds = self.of(divisor)
            if bounds is None:
                return None
            inside = b.or_(b.icmp_signed(">", bounds.lo, ir.Constant(I64, 0)),
                           b.icmp_signed("<", bounds.hi, ir.Constant(I64, 0)))
        else:
            return False
        return b.and_(bounds.valid, b.or_(b.not_(bounds.reached), inside))

    def of(self, v: Value) -> Bounds | None:
        if v not in self.bounds:
            self.bounds[v] = self._compute(v)
        return self.bounds[v]

    def _compute(self, v: Value) -> Bounds | None:
        b, yes = self.b, ir.Constant(I1, 1)
        if not v.type.is_index:
            return None
        if v.block is self.lw.graph.body:  # kernel scope: one value for the whole launch
            value = self.lw.values[v]
            return Bounds(value, value, yes, yes)
        op = v.op
        if op is None:
            return self._loop_index(v)
        if op.opcode == "const":
            c = ir.Constant(I64, op.attrs["value"])
            return Bounds(c, c, yes, yes)
        if op.opcode in BY_CONSTANT:
            return self._by_constant(op)
        if op.opcode not in RULES:
            return None
        operands = op.operands[1:] if op.opcode == "select" else op.operands  # a select's bounds: its sides'
        parts = [self.of(x) for x in operands]
        if None in parts:
            return None
        domain = _Llvm(self.lw)
        lo, hi = RULES[op.opcode](domain, *([None] if op.opcode == "select" else []), *((x.lo, x.hi) for x in parts))
        valid = b.and_(domain.valid, b.and_(parts[0].valid, parts[1].valid))
        join = b.or_ if op.opcode == "select" else b.and_  # a select reaches what either side reaches
        return Bounds(lo, hi, valid, join(parts[0].reached, parts[1].reached))

    def _by_constant(self, op: Op) -> Bounds | None:
        """``x // c`` (floor) and ``x % c`` for a constant ``c > 0``."""
        divisor = op.operands[1]
        if divisor.op is None or divisor.op.opcode != "const" or divisor.op.attrs["value"] <= 0:
            return None
        x = self.of(op.operands[0])
        if x is None:
            return None
        lo, hi = BY_CONSTANT[op.opcode](_Llvm(self.lw), (x.lo, x.hi), divisor.op.attrs["value"])
        return Bounds(lo, hi, x.valid, x.reached)

    def _loop_index(self, v: Value) -> Bounds | None:
        """A fold's index runs from its lowest start to its highest stop (exclusive)."""
        owner = v.owner.parent
        if owner is None or owner.opcode != "fold" or v is not v.owner.args[0]:
            return None
        start, stop = (self.of(x) for x in owner.operands[:2])
        if start is None or stop is None:
            return None
        b, one = self.b, ir.Constant(I64, 1)
        if owner.attrs["step"] > 0:
            lo, hi = start.lo, b.ssub_with_overflow(stop.hi, one)
        else:
            lo, hi = b.sadd_with_overflow(stop.lo, one), start.hi
        over = b.extract_value(hi if owner.attrs["step"] > 0 else lo, 1)
        lo, hi = (lo, b.extract_value(hi, 0)) if owner.attrs["step"] > 0 else (b.extract_value(lo, 0), hi)
        valid = b.and_(b.and_(start.valid, stop.valid), b.not_(over))
        reached = b.and_(b.and_(start.reached, stop.reached), b.icmp_signed("<=", lo, hi))
        return Bounds(lo, hi, valid, reached)


class _Llvm:
    """The launch proof's domain for :data:`~accy.dsl.analysis.intervals.RULES`: i64 LLVM
    values computed before the launch; a step that overflows clears ``valid``."""

    def __init__(self, lw: Lowering):
        self.lw, self.b = lw, lw.b
        self.valid = ir.Constant(I1, 1)

    def const(self, c: int) -> ir.Value:
        return ir.Constant(I64, c)

    def _checked(self, step, x, y) -> ir.Value:
        pair = step(x, y)
        self.valid = self.b.and_(self.valid, self.b.not_(self.b.extract_value(pair, 1)))
        return self.b.extract_value(pair, 0)

    def add(self, x, y):
        return self._checked(self.b.sadd_with_overflow, x, y)

    def sub(self, x, y):
        return self._checked(self.b.ssub_with_overflow, x, y)

    def mul(self, x, y):
        return self._checked(self.b.smul_with_overflow, x, y)

    def _fold(self, name: str, values) -> ir.Value:
        result = values[0]
        for value in values[1:]:
            result = self.lw.call(name, [result, value])
        return result

    def min(self, values):
        return self._fold("llvm.smin", values)

    def max(self, values):
        return self._fold("llvm.smax", values)

    def floor_div(self, n, c: int) -> ir.Value:
        b = self.b
        q = b.sdiv(n, ir.Constant(I64, c))
        below = b.and_(b.icmp_signed("<", n, ir.Constant(I64, 0)),
                       b.icmp_signed("!=", b.srem(n, ir.Constant(I64, c)), ir.Constant(I64, 0)))
        return b.sub(q, b.zext(below, I64))
