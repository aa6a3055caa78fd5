"""Branches on NVPTX: an ``if`` that only stores becomes predicated stores.

LLVM makes a branch of every store under a condition (it may not speculate a store), and
ptxas keeps most of them: a tile program's stores at its edges, each vector group taken whole
where its mask holds and element by element where it does not, were a diamond of branches a
group (an attention's bf16 output: 510 of its kernel's SASS).  An ``if`` whose regions hold
only stores that need no check (and ``if``s of the same kind) is lowered here as those stores
with a predicate each, ``@p st.global``, ``p`` the conjunction of the conditions above it:
straight-line code, the conditions computed once.  What the stores write, and when, is what
the branches wrote.
"""

from __future__ import annotations

from llvmlite import ir

from ...dsl.ir import Op
from ..llvm_types import I1, I32, I64, VOID
from ..loops import ControlFlow

I16 = ir.IntType(16)

# an element's bits -> its register class in inline PTX, the integer it is carried as, its name
_REGISTERS = {8: ("h", I16, "b8"), 16: ("h", I16, "b16"), 32: ("r", I32, "b32"), 64: ("l", I64, "b64")}


class NvptxControlFlow(ControlFlow):
    def branch(self, op: Op) -> None:
        if op.results or not self._only_stores(op):
            return super().branch(op)
        self._predicate(op, None)

    def _only_stores(self, op: Op) -> bool:
        for region in op.regions:
            for inner in region.ops:
                if inner.opcode == "yield" and not inner.operands:
                    continue
                if inner.opcode == "if" and not inner.results and self._only_stores(inner):
                    continue
                if inner.opcode == "store" and self._predicable(inner):
                    continue
                return False
        return True

    def _predicable(self, store: Op) -> bool:
        dtype, vec = store.attrs.dtype, store.attrs.get("vec", 1)
        bits = 8 if dtype.is_bool else dtype.itemsize * 8
        return (store.attrs.get("space", "global") == "global" and not self.lw.memory.checked(store)
                and bits in _REGISTERS and vec in (1, 2, 4, 8) and vec * bits <= 128 and (vec < 8 or bits == 16))

    def _predicate(self, op: Op, outer: ir.Value | None) -> None:
        """``op``'s stores, each under ``outer`` (None: always) and its side's condition."""
        b = self.b
        cond = self.lw.value(op.operands[0])
        sides = (cond, b.not_(cond))
        for region, side in zip(op.regions, sides):
            guard = side if outer is None else b.and_(outer, side)
            for inner in region.ops:
                if inner.opcode == "if":
                    self._predicate(inner, guard)
                elif inner.opcode == "store":
                    self._store(inner, guard)

    def _store(self, op: Op, guard: ir.Value) -> None:
        """``@guard st.global[.vN].bK [address], value(s)``."""
        b = self.b
        dtype, vec = op.attrs.dtype, op.attrs.get("vec", 1)
        letter, carrier, name = _REGISTERS[8 if dtype.is_bool else dtype.itemsize * 8]
        pointer = self.lw.memory.element(op, self.lw.value(op.operands[0]))
        values = []
        for v in (self.lw.value(x) for x in op.operands[1:]):
            if not isinstance(v.type, ir.IntType):  # a float's bits
                v = b.bitcast(v, ir.IntType(dtype.itemsize * 8))
            if v.type != carrier:  # a bool or an 8-bit value rides in a 16-bit register
                v = b.zext(v, carrier)
            values.append(v)
        if vec == 8:  # 16-bit values in pairs, one 32-bit register each: st.global.v4.b32
            letter, carrier, name = _REGISTERS[32]
            pairs = [b.bitcast(b.insert_element(b.insert_element(ir.Constant(ir.VectorType(I16, 2), None), lo,
                                                                 ir.Constant(I32, 0)), hi, ir.Constant(I32, 1)), I32)
                     for lo, hi in zip(values[::2], values[1::2])]
            values, vec = pairs, 4
        shape = f".v{vec}" if vec > 1 else ""
        operands = ", ".join(f"${k + 2}" for k in range(vec))
        text = f"@$0 st.global{shape}.{name} [$1], {'{' + operands + '}' if vec > 1 else operands};"
        constraints = ",".join(["b", "l"] + [letter] * vec + ["~{memory}"])
        fn = ir.FunctionType(VOID, [I1, pointer.type] + [carrier] * vec)
        b.call(ir.InlineAsm(fn, text, constraints, side_effect=True), [guard, pointer, *values])
