"""Tiles in memory and the vector code over them, for :mod:`.tiles`: a tile's stack array, vectors
of ``L`` lanes (constants, loads and stores of a tile's elements, masked, gathered and scattered
accesses) and the loops every tile op is written with (counted loops, chunks of ``L`` elements,
rows).  Kept apart from the lowering so that each op's emitter builds on one vocabulary."""

from __future__ import annotations

import math

import attrs
from llvmlite import ir

from ...dsl.types import DType, TileType
from ..llvm import Lowering
from ..llvm_types import I1, I8, I32, I64, VOID, intrinsic_suffix, memory_type


def i64(x) -> ir.Value:
    return x if isinstance(x, ir.Value) else ir.Constant(I64, int(x))


@attrs.frozen(eq=False)
class Tail:
    """Every lane of a 1-D tile from ``start`` (a multiple of the vector width) on holds
    ``value``: its array (or fused chunks) is built only up to ``start``."""

    start: ir.Value
    value: ir.Value


class _Shaped:
    """What a tile's ``type`` says of it."""

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def size(self) -> int:
        return self.type.size


@attrs.frozen(eq=False)
class Tile(_Shaped):
    """A tile's stack array: ``ptr`` to its elements, row-major, bools as bytes (``tail``: the
    array holds only the lanes before it)."""

    ptr: ir.Value
    type: TileType
    tail: Tail | None = None

    @property
    def mem(self) -> ir.Type:
        return memory_type(self.type.dtype)


@attrs.frozen(eq=False)
class Fused(_Shaped):
    """A tile with no array (:func:`accy.lowering.tile_fusion.plan_fusion`): ``chunk(idx, mask)``
    emits, where its reader is, the vector of its ``L`` elements from flat position ``idx``
    (``mask``: the lanes that matter, for a check; None for all)."""

    chunk: object
    type: TileType
    tail: Tail | None = None
    tail_in_chunks: bool = False  # its chunks past the tail's start are the tail already (a masked load's)
    at: object = None  # at(rows, col, mask): the chunk at a row's position per axis and a column, if it has one


def _suffix_sizes(shape: tuple[int, ...]) -> list[int]:
    """Each axis's stride in a row-major tile, but the last's."""
    return [math.prod(shape[d + 1:]) for d in range(len(shape) - 1)]


class TileVectors:
    """Vector code over tiles at the lowering's builder, ``L`` lanes per vector (the lowering's
    ``b`` changes with each function it emits, so it is read at each use)."""

    def __init__(self, lw: Lowering):
        self.lw = lw  # the TileHostLowering: its builder, values, tiles and checks
        self.L = lw.L

    def vec(self, ty: ir.Type, n: int | None = None) -> ir.VectorType:
        return ir.VectorType(ty, n or self.L)

    def iota(self, n: int | None = None) -> ir.Constant:
        n = n or self.L
        return ir.Constant(self.vec(I64, n), [ir.Constant(I64, k) for k in range(n)])

    def below(self, count: int) -> ir.Constant:
        """The lanes ``< count`` of a vector, as a constant mask."""
        return ir.Constant(self.vec(I1), [ir.Constant(I1, int(k < count)) for k in range(self.L)])

    def splat(self, x: ir.Value, n: int | None = None) -> ir.Value:
        n = n or self.L
        if isinstance(x, ir.Constant) and not isinstance(x.type, ir.VectorType):
            return ir.Constant(self.vec(x.type, n), [x] * n)
        one = self.lw.b.insert_element(ir.Constant(self.vec(x.type, n), None), x, ir.Constant(I32, 0))
        return self.lw.b.shuffle_vector(one, ir.Constant(one.type, None), ir.Constant(self.vec(I32, n), None))

    def spread(self, v: ir.Value, step: int, fill: ir.Value | None = None) -> ir.Value:
        """``v``'s lanes ``step`` lanes apart in a vector ``step`` times as long (a strided access
        as one contiguous one); the lanes between hold ``fill``'s first lane (else ``v``'s)."""
        n = v.type.count
        between = n if fill is not None else 0
        order = [k // step if k % step == 0 else between for k in range(n * step)]
        return self.lw.b.shuffle_vector(v, fill if fill is not None else v,
                                        ir.Constant(self.vec(I32, n * step), order))

    def every(self, v: ir.Value, step: int) -> ir.Value:
        """Every ``step``-th lane of ``v`` (the inverse of :meth:`spread`)."""
        n = v.type.count // step
        return self.lw.b.shuffle_vector(v, v, ir.Constant(self.vec(I32, n), [k * step for k in range(n)]))

    def spread_load(self, where: ir.Value, step: int, lanes: ir.Value | None, passthru: ir.Value, align: int) -> ir.Value:
        """The elements ``step`` apart from ``where`` in the ``lanes``: one masked load of their
        span; every lane (None): a plain load of it, which its caller has found inside the buffer."""
        if lanes is None:
            return self.every(self.lw.b.load(where, typ=self.vec(passthru.type.element, self.L * step), align=align), step)
        wide = self.masked_load(where, self.spread(lanes, step, ir.Constant(lanes.type, None)),
                                self.spread(passthru, step), align)
        return self.every(wide, step)

    def spread_store(self, v: ir.Value, where: ir.Value, step: int, lanes: ir.Value | None, align: int) -> None:
        """``v``'s ``lanes`` (every one for None) stored ``step`` elements apart from ``where``: one
        masked store (the elements between are not its own)."""
        lanes = lanes if lanes is not None else self.below(self.L)
        self.masked_store(self.spread(v, step), where, self.spread(lanes, step, ir.Constant(lanes.type, None)), align)

    def extract(self, v: ir.Value, k) -> ir.Value:
        return self.lw.b.extract_element(v, ir.Constant(I32, k) if isinstance(k, int) else k)

    def at(self, tile: Tile, idx) -> ir.Value:
        return self.lw.b.gep(tile.ptr, [i64(idx)], source_etype=tile.mem)

    def from_memory(self, v: ir.Value, dtype: DType) -> ir.Value:
        return self.lw.b.trunc(v, self.vec(I1, v.type.count) if isinstance(v.type, ir.VectorType) else I1) \
            if dtype.is_bool else v

    def to_memory(self, v: ir.Value, dtype: DType) -> ir.Value:
        return self.lw.b.zext(v, self.vec(I8, v.type.count) if isinstance(v.type, ir.VectorType) else I8) \
            if dtype.is_bool else v

    def intrinsic(self, name: str, ret: ir.Type, args) -> ir.Value:
        return self.lw.b.call(self.lw.declare(name, ret, [a.type for a in args]), list(args))

    def masked_load(self, ptr: ir.Value, mask: ir.Value, passthru: ir.Value, align: int) -> ir.Value:
        ty = passthru.type
        return self.intrinsic(f"llvm.masked.load.{intrinsic_suffix(ty)}.p0", ty,
                               [ptr, ir.Constant(I32, align), mask, passthru])

    def masked_store(self, value: ir.Value, ptr: ir.Value, mask: ir.Value, align: int) -> None:
        self.intrinsic(f"llvm.masked.store.{intrinsic_suffix(value.type)}.p0", VOID,
                        [value, ptr, ir.Constant(I32, align), mask])

    def addresses(self, base: ir.Value, etype: ir.Type, offsets: ir.Value) -> ir.Value:
        pointers = self.lw.b.gep(base, [offsets], source_etype=etype)
        pointers.type = self.vec(pointers.type, offsets.type.count)  # llvmlite types a vector GEP as one pointer
        return pointers

    def gather(self, pointers: ir.Value, mask: ir.Value, passthru: ir.Value, align: int) -> ir.Value:
        ty = passthru.type
        return self.intrinsic(f"llvm.masked.gather.{intrinsic_suffix(ty)}.v{ty.count}p0", ty,
                               [pointers, ir.Constant(I32, align), mask, passthru])

    def scatter(self, value: ir.Value, pointers: ir.Value, mask: ir.Value, align: int) -> None:
        self.intrinsic(f"llvm.masked.scatter.{intrinsic_suffix(value.type)}.v{value.type.count}p0", VOID,
                        [value, pointers, ir.Constant(I32, align), mask])

    def load(self, tile: Tile, idx, mask: ir.Value | None = None, n: int | None = None) -> ir.Value:
        """``n`` (default ``L``) elements of ``tile`` from ``idx``; ``mask``: zeros elsewhere (a
        fused tile's masked-off lanes are computed, and not checked)."""
        if tile.tail is not None and not (isinstance(tile, Fused) and tile.tail_in_chunks):
            return self._with_tail(tile, i64(idx), mask, n)
        if isinstance(tile, Fused):
            assert n is None, "a fused tile is read by whole vectors"
            return tile.chunk(i64(idx), mask)
        ty = self.vec(tile.mem, n)
        ptr = self.at(tile, idx)
        if mask is None:
            v = self.lw.b.load(ptr, typ=ty, align=tile.dtype.itemsize)
        else:
            v = self.masked_load(ptr, mask, ir.Constant(ty, [ir.Constant(tile.mem, 0)] * ty.count),
                                  tile.dtype.itemsize)
        return self.from_memory(v, tile.dtype)

    def store(self, tile: Tile, idx, v: ir.Value, mask: ir.Value | None = None) -> None:
        v = self.to_memory(v, tile.dtype)
        if mask is None:
            self.lw.b.store(v, self.at(tile, idx), align=tile.dtype.itemsize)
        else:
            self.masked_store(v, self.at(tile, idx), mask, tile.dtype.itemsize)

    def _with_tail(self, tile, idx: ir.Value, mask, n) -> ir.Value:
        """A read of a tile with a tail: its lanes before the tail's start, the tail's value after
        (a fused tile's chunk is computed only where some lane is before it)."""
        b = self.lw.b
        head = attrs.evolve(tile, tail=None)
        rest = self.splat(tile.tail.value, n)
        if isinstance(tile, Tile):
            lanes = b.add(self.splat(idx, n), self.iota(n))
            return b.select(b.icmp_signed("<", lanes, self.splat(tile.tail.start, n)), self.load(head, idx, mask, n), rest)
        return self.either(b.icmp_signed("<", idx, tile.tail.start), lambda: self.load(head, idx, mask, n), lambda: rest)

    def load_in_row(self, tile, rows: list[ir.Value], col: int) -> ir.Value:
        """The vector at column ``col`` of the row at ``rows`` (a position per axis but the last):
        a fused tile that can finds its row at once, any other is read at the flat position."""
        if isinstance(tile, Fused) and tile.at is not None and tile.tail is None:
            return tile.at(rows, i64(col), None)
        flat = i64(col)
        for i, extent in zip(rows, _suffix_sizes(tile.shape)):
            flat = self.lw.b.add(flat, self.lw.b.mul(i, i64(extent)))
        return self.load(tile, flat)

    def load1(self, tile: Tile, idx) -> ir.Value:
        if tile.tail is not None:
            b = self.lw.b
            return b.select(b.icmp_signed("<", i64(idx), tile.tail.start), self.load1(attrs.evolve(tile, tail=None), idx),
                            tile.tail.value)
        return self.from_memory(self.lw.b.load(self.at(tile, idx), typ=tile.mem, align=tile.dtype.itemsize), tile.dtype)

    def store1(self, tile: Tile, idx, v: ir.Value) -> None:
        self.lw.b.store(self.to_memory(v, tile.dtype), self.at(tile, idx), align=tile.dtype.itemsize)

    def loop(self, lo, hi, body, carries=(), *, step: int = 1, name: str = "t") -> list[ir.Value]:
        """``for i in range(lo, hi, step)``: ``carries = body(i, carries)``; returns the last."""
        b = self.lw.b
        carries = list(carries)
        if not isinstance(lo, ir.Value) and not isinstance(hi, ir.Value):
            if hi <= lo:
                return carries
            if hi - lo <= step:  # one trip: no loop
                return list(body(i64(lo), carries))
        lo, hi = i64(lo), i64(hi)
        pre = b.block
        head, loop, done = (b.append_basic_block(f"{name}_{n}") for n in ("head", "body", "done"))
        b.branch(head)
        b.position_at_end(head)
        iv = b.phi(I64, name=name)
        iv.add_incoming(lo, pre)
        phis = []
        for c in carries:
            phi = b.phi(c.type)
            phi.add_incoming(c, pre)
            phis.append(phi)
        b.cbranch(b.icmp_signed("<", iv, hi), loop, done)
        b.position_at_end(loop)
        new = list(body(iv, phis))
        latch = b.block
        iv.add_incoming(b.add(iv, ir.Constant(I64, step)), latch)
        for phi, value in zip(phis, new):
            phi.add_incoming(value, latch)
        b.branch(head)
        b.position_at_end(done)
        return phis

    def chunks_between(self, n: int, begin: ir.Value | None, end: ir.Value | None, body, carries=()) -> list[ir.Value]:
        """:meth:`chunks` of elements ``[begin, end)`` of ``n`` (multiples of ``L``, ``n`` too,
        ``begin <= end <= n``); None, None: all of them."""
        if end is None:
            return self.chunks(n, body, carries)
        b = self.lw.b
        width = ir.Constant(I64, self.L)
        first = ir.Constant(I64, 0) if begin is None else b.udiv(begin, width)
        return self.loop(first, b.udiv(end, width), lambda k, cs: body(b.mul(k, width), None, cs), carries,
                         name="chunk")

    def whole_vectors(self, x: ir.Value, up: bool) -> ir.Value:
        """``x`` rounded to a multiple of ``L``, ``up`` or down."""
        b = self.lw.b
        if up:
            x = b.add(x, ir.Constant(I64, self.L - 1))
        return b.and_(x, ir.Constant(I64, -self.L))

    def chunks(self, n: int, body, carries=()) -> list[ir.Value]:
        """``body(j, valid, carries)`` for each chunk of ``L`` of ``n`` elements (``j`` its first;
        ``valid`` None for a whole chunk, else the constant mask of the last one's lanes)."""
        full, rest = divmod(n, self.L)
        carries = list(carries)
        if full:
            width = ir.Constant(I64, self.L)
            carries = self.loop(0, full, lambda k, cs: body(self.lw.b.mul(k, width), None, cs), carries, name="chunk")
        if rest:
            carries = list(body(ir.Constant(I64, full * self.L), self.below(rest), carries))
        return carries

    def rows(self, outer: tuple[int, ...], body, name: str = "row") -> None:
        """``body(r, idx)`` for each row ``r`` of a tile whose axes before the last are ``outer``
        (``idx``: the row's position along each of them)."""
        b = self.lw.b

        def row(r, carries):
            body(r, self.unravel(r, outer))
            return []

        self.loop(0, math.prod(outer), row, name=name)

    def unravel(self, flat: ir.Value, shape: tuple[int, ...]) -> list[ir.Value]:
        """The position along each axis of element ``flat`` (below the product of ``shape``) of a
        row-major tile of ``shape``."""
        b = self.lw.b
        idx, rest = [], flat
        for d in reversed(range(len(shape))):
            extent = shape[d]
            if extent == 1:
                idx.append(ir.Constant(I64, 0))
            elif d == 0:  # the outermost: what is left
                idx.append(rest)
            else:
                idx.append(b.urem(rest, ir.Constant(I64, extent)))
                rest = b.udiv(rest, ir.Constant(I64, extent))
        return idx[::-1]

    def either(self, cond: ir.Value, then, otherwise) -> ir.Value:
        """``then()`` where ``cond`` holds, else ``otherwise()``: each emitted on its own branch."""
        b = self.lw.b
        with b.if_else(cond) as (yes, no):
            with yes:
                first, first_block = then(), b.block
            with no:
                second, second_block = otherwise(), b.block
        v = b.phi(first.type)
        v.add_incoming(first, first_block)
        v.add_incoming(second, second_block)
        return v

    def copy(self, dst: Tile, src: Tile) -> None:
        if dst.ptr is src.ptr:
            return
        self.chunks(src.size, lambda j, valid, cs: (self.store(dst, j, self.load(src, j)), [])[1])
