"""``dot`` of tiles on the host, for :mod:`.tiles`: a register-blocked micro-kernel (``MR`` rows by
``NV`` vectors of the accumulator in registers over k, one broadcast of ``a`` and ``NV`` vector
loads of ``b`` per k), column blocks outermost; the accumulator tile in memory between dots."""

from __future__ import annotations

from llvmlite import ir

from ...dsl.ir import Op
from ...dsl.ops import Precision
from ...dsl.types import DType
from ..llvm import Lowering
from ..llvm_types import I1, I32, I64, constant
from .tile_vectors import Tile


def micro_kernel_shape(acc: DType, lanes: int) -> tuple[int, int]:
    """(MR rows, NV vectors) of the dot micro-kernel's register block: MR * NV accumulators,
    NV vectors of ``b`` and one broadcast of ``a`` fit the vector registers (32 with AVX-512,
    16 below), with enough independent FMAs in flight to cover their latency."""
    if lanes >= 16:
        return (8, 2) if acc.bits <= 32 else (4, 2)
    return (4, 2) if acc.bits <= 32 else (2, 2)


class DotEmitter:
    """A tile ``dot``: its inputs converted to the accumulator's type, then the micro-kernel."""

    def __init__(self, lw: Lowering):
        self.lw = lw  # the TileHostLowering: its builder, values, tiles and checks
        self.v = lw.vectors
        self.L = lw.L

    def as_accumulator(self, tile: Tile, acc_t: DType, tf32: bool) -> Tile:
        """``tile`` converted to the accumulator's type (and rounded to tf32), in a temporary."""
        if tile.dtype == acc_t and not tf32:
            return tile
        out = self.lw.temporary(tile.type.with_dtype(acc_t))
        b = self.lw.b

        def chunk(j, valid, cs):
            v = self.lw.numerics.convert(self.v.load(tile, j), tile.dtype, acc_t)
            if tf32:
                bits = b.bitcast(v, self.v.vec(I32))
                finite = b.icmp_unsigned("!=", b.and_(bits, constant(bits, 0x7F800000)), constant(bits, 0x7F800000))
                rounded = b.and_(b.add(bits, constant(bits, 0x1000)), constant(bits, -0x2000))
                v = b.bitcast(b.select(finite, rounded, bits), v.type)
            self.v.store(out, j, v)
            return []

        self.v.chunks(tile.size, chunk)
        return out

    def dot(self, op: Op) -> None:
        a_tile, b_tile, acc = (self.lw.tile(v) for v in op.operands)
        out = self.lw.new_tile(op.result)
        acc_t = out.dtype
        tf32 = op.attrs.precision is Precision.TF32
        a_tile = self.as_accumulator(a_tile, acc_t, tf32)
        b_tile = self.as_accumulator(b_tile, acc_t, tf32)
        M, K = a_tile.shape
        N = b_tile.shape[1]
        lanes = max(1, self.L * 32 // acc_t.bits)  # one vector register of the accumulator's type
        mr, nv = micro_kernel_shape(acc_t, self.L)
        nr = nv * lanes
        b = self.lw.b

        def block(i0, j0, rows: int, vectors: int, last: int) -> None:
            """Rows ``i0 .. i0+rows`` by ``vectors`` vectors from column ``j0``; the last vector
            holds ``last`` columns."""
            tail = None if last == lanes else ir.Constant(self.v.vec(I1, lanes), [ir.Constant(I1, int(k < last))
                                                                                 for k in range(lanes)])
            masks = [None] * (vectors - 1) + [tail]
            where = [[b.add(b.mul(b.add(i0, ir.Constant(I64, i)), ir.Constant(I64, N)),
                            b.add(j0, ir.Constant(I64, v * lanes))) for v in range(vectors)] for i in range(rows)]
            c = [self.v.load(acc, where[i][v], masks[v], n=lanes) for i in range(rows) for v in range(vectors)]

            def step(k, cs):
                row_b = b.mul(k, ir.Constant(I64, N))
                bs = [self.v.load(b_tile, b.add(row_b, b.add(j0, ir.Constant(I64, v * lanes))), masks[v], n=lanes)
                      for v in range(vectors)]
                new = []
                for i in range(rows):
                    a_row = b.mul(b.add(i0, ir.Constant(I64, i)), ir.Constant(I64, K))
                    a_ik = self.v.splat(self.v.load1(a_tile, b.add(a_row, k)), lanes)
                    for v in range(vectors):
                        acc_v = cs[i * vectors + v]
                        if acc_t.is_float:
                            new.append(self.lw.call("llvm.fma", [a_ik, bs[v], acc_v]))
                        else:
                            new.append(b.add(acc_v, b.mul(a_ik, bs[v])))
                return new

            pair = ir.Constant(I64, 2)  # two k per trip: the loop's own instructions are a tenth of a pair's
            c = self.v.loop(0, K // 2, lambda kk, cs: step(b.add(b.mul(kk, pair), ir.Constant(I64, 1)),
                                                      step(b.mul(kk, pair), cs)), c, name="dot_k")
            if K % 2:
                c = step(ir.Constant(I64, K - 1), c)
            for i in range(rows):
                for v in range(vectors):
                    self.v.store(out, where[i][v], c[i * vectors + v], masks[v])

        full_cols, rest_cols = divmod(N, nr)
        column_blocks = []  # (first column, vectors, columns in the last vector)
        if full_cols:
            column_blocks.append((None, nv, lanes))
        if rest_cols:
            column_blocks.append((full_cols * nr, -(-rest_cols // lanes), rest_cols - (-(-rest_cols // lanes) - 1) * lanes))
        full_rows, rest_rows = divmod(M, mr)

        def column_block(j0, vectors, last):
            """One block of columns down every row: its panel of ``b`` stays in L1 while ``a``
            streams past (``a`` is read as broadcasts; ``b`` as whole vectors)."""
            if full_rows:
                self.v.loop(0, full_rows, lambda ib, cs: (block(b.mul(ib, ir.Constant(I64, mr)), j0, mr, vectors, last),
                                                        [])[1], name="dot_i")
            if rest_rows:
                block(ir.Constant(I64, full_rows * mr), j0, rest_rows, vectors, last)

        for first, vectors, last in column_blocks:
            if first is None:
                self.v.loop(0, full_cols, lambda jb, cs: (column_block(b.mul(jb, ir.Constant(I64, nr)), nv, lanes), [])[1],
                          name="dot_j")
            else:
                column_block(ir.Constant(I64, first), vectors, last)

