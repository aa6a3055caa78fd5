"""Elementwise tile ops and the ops that only move elements, for :mod:`.tiles`: a pointwise op or
cast lowered by the scalar op table on vectors of elements (so every element rounds as the
scalar op does), splat and arange; broadcast, reshape and transpose (2-D by L x L blocks in
registers, else by gathers), static slices (vector loads along unit-step rows, else gathers) and
cat (each operand's rows stored into the result's)."""

from __future__ import annotations

from llvmlite import ir

from ...dsl.ir import Op
from ...dsl.types import DType
from ..llvm import LOWER, Lowering
from ..llvm_types import I32, I64
from .tile_vectors import Fused, Tail, Tile


class _Element:
    __slots__ = ("type",)

    def __init__(self, t: DType):
        self.type = t


class ElementOp:
    """An op seen element by element: operands and result typed by their element types, so
    the scalar op table lowers it on vectors of elements; ``real`` is the graph's op (for
    the status word)."""

    def __init__(self, opcode: str, operand_types, result_type: DType, real: Op, attrs_=None):
        self.opcode = opcode
        self.operands = tuple(_Element(t) for t in operand_types)
        self.results = (_Element(result_type),)
        self.attrs = attrs_
        self.real = real
        self.location = real.location

    @property
    def result(self):
        return self.results[0]


class ElementwiseEmitter:
    """Pointwise ops, casts, splat and arange: one loop over a tile's elements in vectors."""

    def __init__(self, lw: Lowering):
        self.lw = lw  # the TileHostLowering: its builder, values, tiles and checks
        self.v = lw.vectors

    def tail(self, op: Op, ins, element: ElementOp) -> Tail | None:
        """The tail of a pointwise op's result (see :class:`.tile_vectors.Tail`): from the last of
        its operands' tails, the op of their values (computed once, here), where they all have one."""
        if op.result not in self.lw.tails or any(t.tail is None for t in ins):
            return None
        start = ins[0].tail.start
        for t in ins[1:]:
            start = self.lw.call("llvm.smax", [start, t.tail.start])
        return Tail(start, LOWER[op.opcode](self.lw, element, [t.tail.value for t in ins]))

    def pointwise(self, op: Op) -> None:
        out = self.lw.new_tile(op.result)
        ins = [self.lw.tile(v) for v in op.operands]
        element = ElementOp(op.opcode, [t.dtype for t in ins], out.dtype, op, op.attrs)
        lower = LOWER[op.opcode]

        def chunk(j, valid, carries):
            args = [self.v.load(t, j, valid) for t in ins]
            self.lw.valid = valid
            self.v.store(out, j, lower(self.lw, element, args))
            self.lw.valid = None
            return []

        tail = self.tail(op, ins, element)
        self.v.chunks_between(out.size, None, tail and tail.start, chunk)
        if tail is not None:
            self.lw.tiles[op.result] = Tile(out.ptr, out.type, tail)

    def fused(self, op: Op) -> Fused:
        """``op``'s tile as chunks computed where they are read (see :class:`.tile_vectors.Fused`)."""
        if op.opcode == "splat":
            x = self.lw.value(op.operands[0])
            v = self.v.splat(x)  # here: it dominates every reader
            tail = Tail(ir.Constant(I64, 0), x) if op.result in self.lw.tails else None
            return Fused(lambda idx, mask: v, op.result.type, tail)
        if op.opcode == "arange":
            return Fused(lambda idx, mask: self.lw.b.add(self.v.splat(idx), self.v.iota()), op.result.type)
        ins = [self.lw.tile(v) for v in op.operands]
        element = ElementOp(op.opcode, [t.dtype for t in ins], op.result.type.dtype, op, op.attrs)
        lower = LOWER[op.opcode]

        def chunk(idx, mask):
            args = [self.v.load(t, idx, mask) for t in ins]
            outer, self.lw.valid = self.lw.valid, mask
            value = lower(self.lw, element, args)
            self.lw.valid = outer
            return value

        return Fused(chunk, op.result.type, self.tail(op, ins, element))

    def splat(self, op: Op) -> None:
        out = self.lw.new_tile(op.result)
        v = self.v.splat(self.lw.value(op.operands[0]))
        self.v.chunks(out.size, lambda j, valid, cs: (self.v.store(out, j, v), [])[1])

    def arange(self, op: Op) -> None:
        out = self.lw.new_tile(op.result)
        self.v.chunks(out.size,
                      lambda j, valid, cs: (self.v.store(out, j, self.lw.b.add(self.v.splat(j), self.v.iota())), [])[1])


class ShapeEmitter:
    """Broadcast, reshape, transpose, slice and cat: elements moved, none computed."""

    def __init__(self, lw: Lowering):
        self.lw = lw  # the TileHostLowering: its builder, values, tiles and checks
        self.v = lw.vectors
        self.L = lw.L

    def reshape(self, op: Op) -> None:
        self.lw.tiles[op.result] = Tile(self.lw.tile(op.operands[0]).ptr, op.result.type)

    def broadcast(self, op: Op) -> None:
        src = self.lw.tile(op.operands[0])
        out = self.lw.new_tile(op.result)
        shape, n = out.shape, out.shape[-1]
        strides = _strides(src.shape)
        b = self.lw.b

        def row(r, idx):
            offset = ir.Constant(I64, 0)
            for d, i in enumerate(idx):
                if src.shape[d] == shape[d] and src.shape[d] > 1:
                    offset = b.add(offset, b.mul(i, ir.Constant(I64, strides[d])))
            first = b.mul(r, ir.Constant(I64, n))
            if src.shape[-1] == n:
                self.v.chunks(n, lambda j, valid, cs: (self.v.store(out, b.add(first, j),
                                                                    self.v.load(src, b.add(offset, j))), [])[1])
            else:
                v = self.v.splat(self.v.load1(src, offset))
                self.v.chunks(n, lambda j, valid, cs: (self.v.store(out, b.add(first, j), v), [])[1])

        self.v.rows(shape[:-1], row)

    def transpose_block(self, rows: list[ir.Value]) -> list[ir.Value]:
        """The transpose of an L x L block held as L row vectors: the off-diagonal halves of
        ever smaller square blocks swapped, each step one two-vector shuffle per row."""
        b = self.lw.b
        L = len(rows)
        v = list(rows)
        h = L // 2
        while h:
            for i in range(L):
                if i & h:
                    continue
                top, bottom = v[i], v[i + h]
                mask_top = [k if not k & h else L + k - h for k in range(L)]
                mask_bottom = [k + h if not k & h else L + k for k in range(L)]
                v[i] = b.shuffle_vector(top, bottom, ir.Constant(self.v.vec(I32), mask_top))
                v[i + h] = b.shuffle_vector(top, bottom, ir.Constant(self.v.vec(I32), mask_bottom))
            h //= 2
        return v

    def trans(self, op: Op) -> None:
        src = self.lw.tile(op.operands[0])
        out = self.lw.new_tile(op.result)
        perm = op.attrs.perm
        L = self.L
        if perm == (1, 0) and src.shape[0] % L == 0 and src.shape[1] % L == 0:  # by L x L blocks in registers
            R, C = src.shape
            b = self.lw.b

            def block(rb, cb):
                r0, c0 = b.mul(rb, ir.Constant(I64, L)), b.mul(cb, ir.Constant(I64, L))
                rows = [self.v.load(src, b.add(b.mul(b.add(r0, ir.Constant(I64, i)), ir.Constant(I64, C)), c0))
                        for i in range(L)]
                for j, column in enumerate(self.transpose_block(rows)):
                    self.v.store(out, b.add(b.mul(b.add(c0, ir.Constant(I64, j)), ir.Constant(I64, R)), r0), column)

            self.v.loop(0, R // L, lambda rb, cs: (self.v.loop(0, C // L, lambda cb, cs: (block(rb, cb), [])[1],
                                                           name="trans_c"), [])[1], name="trans_r")
            return
        strides = _strides(src.shape)
        self.copy_affine(src, out, 0, [strides[p] for p in perm])

    def slice(self, op: Op) -> None:
        src = self.lw.tile(op.operands[0])
        strides = _strides(src.shape)
        base = sum(start * s for start, s in zip(op.attrs.starts, strides))
        self.copy_affine(src, self.lw.new_tile(op.result), base, [step * s for step, s in zip(op.attrs.steps, strides)])

    def cat(self, op: Op) -> None:
        """Each operand's rows written into the result's, the second's shifted along the axis."""
        out = self.lw.new_tile(op.result)
        axis, b = op.attrs.axis, self.lw.b
        out_strides = _strides(out.shape)
        shift = 0
        for v in op.operands:
            src = self.lw.tile(v)
            n = src.shape[-1]

            def row(r, idx, src=src, n=n, base=shift * out_strides[axis]):
                to = ir.Constant(I64, base)
                for i, s in zip(idx, out_strides):
                    to = b.add(to, b.mul(i, ir.Constant(I64, s)))
                first = b.mul(r, ir.Constant(I64, n))
                self.v.chunks(n, lambda j, valid, cs: (self.v.store(out, b.add(to, j), self.v.load(src, b.add(first, j)),
                                                                    valid), [])[1])

            self.v.rows(src.shape[:-1], row)
            shift += src.shape[axis]

    def copy_affine(self, src: Tile, out: Tile, base: int, along: list[int]) -> None:
        """``out``'s element ``i`` read from ``src``'s flat position ``base + along . i``: vector
        loads along a row where ``along[-1]`` is 1, gathers otherwise."""
        n = out.shape[-1]
        b = self.lw.b
        all_lanes = self.v.below(self.L)

        def row(r, idx):
            offset = ir.Constant(I64, base)
            for d, i in enumerate(idx):
                offset = b.add(offset, b.mul(i, ir.Constant(I64, along[d])))
            first = b.mul(r, ir.Constant(I64, n))

            def chunk(j, valid, cs):
                if along[-1] == 1:
                    v = self.v.load(src, b.add(offset, j), valid)
                else:
                    at = b.add(self.v.splat(b.add(offset, b.mul(j, ir.Constant(I64, along[-1])))),
                               b.mul(self.v.iota(), self.v.splat(ir.Constant(I64, along[-1]))))
                    passthru = ir.Constant(self.v.vec(src.mem), [ir.Constant(src.mem, 0)] * self.L)
                    v = self.v.from_memory(self.v.gather(self.v.addresses(src.ptr, src.mem, at), valid or all_lanes,
                                                         passthru, src.dtype.itemsize), src.dtype)
                self.v.store(out, b.add(first, j), v)
                return []

            self.v.chunks(n, chunk)

        self.v.rows(out.shape[:-1], row)


def _strides(shape: tuple[int, ...]) -> list[int]:
    out, s = [], 1
    for n in reversed(shape):
        out.append(s)
        s *= n
    return out[::-1]
