"""``t.dot`` on tensor cores in the tile distribution (a mixin of its distributor,
:mod:`accy.backends.distribute`), for NVPTX at sm_80 and later.

- The accumulator lives in the :class:`~accy.backends.layouts.Mma` layout (``mma.sync``
  m16n8's C fragments), and so does the result.
- The operands are staged in shared memory, each row padded to an odd number of 16-byte
  units so that the 8 rows an ``ldmatrix`` reads fall in distinct banks, and read into
  fragments by ``ldmatrix``: A as m rows of k; B as k rows of n through ``.trans`` (16-bit
  types), or as n rows of k read straight (a transposed operand such as attention's
  ``key.T``, staged as its rows lie in memory); a tf32 or i8 B in k rows of n by plain loads
  (ldmatrix transposes only 16-bit elements).
- An A already in an Mma layout (FA2's P: the scores' registers, cast to 16 bits) is its own
  fragments: nothing is staged.
- An operand that a ``tile_load`` reads for this dot alone (:class:`Deferred`) is copied
  from global memory straight to its staging rows by ``cp.async``, 16 bytes a copy and the
  edges zero-filled by the copy's source size, where its rows are contiguous and 16-byte
  aligned (checked when it runs: element loads and shared stores otherwise).  In a
  ``fold_range`` with ``num_stages`` > 1 the copies run ahead of the math: the copies of trip
  ``i + num_stages - 1`` are in flight while trip ``i`` computes, each trip's operands in
  their own staging buffer (software pipelining).
"""

from __future__ import annotations

import attrs

from ..dsl.ir import Op, constant_of
from ..dsl.ops import AsyncCopyAttrs, MatrixOrder, MmaKind, Precision
from ..dsl.traced import SharedArray
from ..dsl.types import DType, bf16, f16, f32, i8
from .layouts import WARP, Blocked, Mma, Permute, unit_reshape

# the element type each kind's operands are staged in
STAGED = {MmaKind.F16: f16, MmaKind.BF16: bf16, MmaKind.TF32: f32, MmaKind.S8: i8}
COPY_BYTES = 16


@attrs.frozen(eq=False)
class Deferred:
    """A ``tile_load`` not yet done, whose one use is a tensor-core dot's operand: the load, the
    distributor's values of its operands (offsets, other, mask), the unit reshapes and the
    transpose between it and the dot (``steps``: ("reshape", shape) or ("trans", perm)), the
    2-D ``shape`` the dot sees, and whether that is the transpose of the rows in memory."""

    op: Op
    operands: tuple
    steps: tuple = ()
    shape: tuple = ()
    transposed: bool = False

    @property
    def dtype(self) -> DType:
        return self.op.attrs.dtype

    def then(self, step: tuple, shape: tuple) -> "Deferred":
        return attrs.evolve(self, steps=self.steps + (step,), shape=tuple(shape),
                            transposed=self.transposed ^ (step[0] == "trans"))


@attrs.frozen
class Staging:
    """Where a dot's operands sit in shared memory: A's ``m`` rows of ``a_pitch`` elements from
    ``a_base`` (none when A is held in registers), B's rows (``k`` rows of n, or ``n`` rows of
    k where ``b_rows_n``) of ``b_pitch`` from ``b_base``; ``size`` elements in all."""

    a_base: int
    a_pitch: int
    b_base: int
    b_pitch: int
    b_rows_n: bool
    size: int


def pitch(elements: int, itemsize: int) -> int:
    """A shared row's length in elements: an odd number of 16-byte units, so the 8 rows an
    ldmatrix reads (or 8 consecutive rows at one column) fall in distinct banks."""
    units = -(-elements * itemsize // 16)
    return (units + (units % 2 == 0)) * 16 // itemsize


class TensorCoreDot:
    """The distributor's dot on ``mma.sync`` (see the module's doc)."""

    # -- which dots, and which loads go straight to shared memory -------------------------
    def mma_kind(self, op: Op) -> MmaKind | None:
        """The mma a dot runs on, or None (FMA): tensor cores where the distribution has them,
        the inputs 16-bit floats, fp8 (widened to f16 exactly), f32 with tf32 precision or i8,
        and every warp whole 16-row tiles of the result, 8-column tiles and k-steps."""
        if not self.tensor_cores:
            return None
        a, b_ = (v.type for v in op.operands[:2])
        name = a.dtype.name
        if name in ("f16", "f8e4m3", "f8e5m2"):
            kind = MmaKind.F16
        elif name == "bf16":
            kind = MmaKind.BF16
        elif name == "f32" and op.attrs.precision is Precision.TF32:
            kind = MmaKind.TF32
        elif name == "i8":
            kind = MmaKind.S8
        else:
            return None
        (m, k), n = a.shape, b_.shape[1]
        return kind if Mma.fits((m, n), self.T) and k % kind.k == 0 else None

    def direct_loads(self) -> frozenset:
        """The tile_loads whose one use (through unit reshapes, and for B a transpose) is an
        operand of a tensor-core dot in the same region, of its staged type with 0 past the
        edges: they can go from global to shared memory without registers."""
        users: dict = {}
        for op in self.graph.body.walk():
            for v in op.operands:
                users.setdefault(v, []).append(op)
        out = set()
        for dot in self.graph.body.walk():
            kind = dot.opcode == "dot" and self.mma_kind(dot)
            if not kind or kind is MmaKind.TF32:  # tf32 rounds its inputs on the way in
                continue
            for position in (0, 1):
                v = dot.operands[position]
                while v.op is not None and len(users.get(v, ())) == 1 and (
                        (v.op.opcode == "reshape" and unit_reshape(v.op.operands[0].type.shape, v.type.shape))
                        or (v.op.opcode == "trans" and position == 1)):
                    v = v.op.operands[0]
                load = v.op
                if (load is not None and load.opcode == "tile_load" and len(users.get(v, ())) == 1
                        and load.block is dot.block and load.attrs.dtype == STAGED[kind]
                        and constant_of(load.operands[1]) == 0):
                    out.add(load)
        return frozenset(out)

    # -- staging --------------------------------------------------------------------------------
    def staging(self, op: Op, kind: MmaKind, a, b_) -> Staging:
        (m, kk), n = op.operands[0].type.shape, op.operands[1].type.shape[1]
        el = STAGED[kind]
        a_held = self.held_a(op, kind, a)
        b_rows_n = (isinstance(b_, Deferred) and b_.transposed) or (hasattr(b_, "layout")
                                                                     and isinstance(b_.layout, Permute))
        a_pitch = pitch(kk, el.itemsize)
        if b_rows_n:
            b_pitch, b_rows = pitch(kk, el.itemsize), n
        elif kind is MmaKind.TF32:  # B read a word a lane: rows 8 words apart mod 32 banks
            b_pitch, b_rows = n + (8 - n) % 32, kk
        else:
            b_pitch, b_rows = pitch(n, el.itemsize), kk
        b_base = 0 if a_held else m * a_pitch
        return Staging(0, a_pitch, b_base, b_pitch, b_rows_n, b_base + b_rows * b_pitch)

    def held_a(self, op: Op, kind: MmaKind, a) -> bool:
        (m, kk) = op.operands[0].type.shape
        return (hasattr(a, "layout") and a.layout.same(Mma((m, kk), self.T)) and a.dtype == STAGED[kind]
                and kind in (MmaKind.F16, MmaKind.BF16))

    def fill(self, array: SharedArray, x, base, row_pitch: int, rows_n: bool, kind: MmaKind) -> bool:
        """Stage the operand ``x`` at ``base`` (rows of ``row_pitch``; a B with ``rows_n`` as n
        rows of k); True where it went by asynchronous copies (to be waited for)."""
        if isinstance(x, Deferred):
            if self.copy(x, array, base, row_pitch):
                return True
            x = self.load_now(x)
        x = self.regs(x)
        el = STAGED[kind]

        def convert(v):
            v = self.b.cast(v, el) if v.type != el else v
            return self.tf32(v) if kind is MmaKind.TF32 else v

        def place(c):
            row, col = (c[1], c[0]) if rows_n else (c[0], c[1])
            return self.add(self.add(self.mul(row, row_pitch), col), base)

        self.stage(array, x, place, convert)
        return False

    def load_now(self, x: Deferred):
        """The deferred load done the ordinary way (into registers), then its reshapes and
        transpose as the graph has them (they move no data)."""
        regs = self.tile_load_regs(x.op, *x.operands)
        for step in x.steps:
            regs = self.unit_reshape_regs(regs, step[1]) if step[0] == "reshape" else self.trans_regs(regs, step[1])
        return regs

    def copy(self, x: Deferred, array: SharedArray, base, row_pitch: int) -> bool:
        """``cp.async`` of the loaded tile's rows into ``array`` (row ``r`` at ``base + r *
        row_pitch``), 16 bytes a copy, where the rows are contiguous in memory and each copy's
        source is 16-byte aligned (checked when it runs, element loads otherwise); False
        where the load's form does not allow it at all."""
        op = x.op
        offsets, other, mask = x.operands
        loaded = op.result.type.shape
        itemsize = op.attrs.dtype.itemsize
        vec = COPY_BYTES // itemsize
        if loaded[-1] % vec or self.shapes.box(op.operands[-1]) is None:
            return False
        layout = Blocked(tuple(loaded), self.T, vec=vec)
        if layout.dims[-1].per_thread != vec:
            return False
        plan = self.vector_plan(op, layout)
        if plan is None or plan.vec != vec:
            return False
        offs = self.regs(offsets, layout, op).values
        masks = self.mask(mask, layout)
        owners = self.owners(layout)
        coords = self.coords(layout)
        b = self.b

        def shared_at(r):
            c = tuple(ci for n, ci in zip(loaded, coords[r]) if n != 1)
            row, col = (c if len(c) == 2 else (0,) + c)[-2:]
            return self.add(self.add(self.mul(row, row_pitch), col), base)

        def copies(inner):
            with self.region(inner):
                for group in plan.groups:
                    valid = None
                    for r in group:
                        one = self.const(itemsize) if masks[r] is None else b.select(masks[r], itemsize, 0)
                        valid = one if valid is None else self.add(valid, one)
                    attrs_ = AsyncCopyAttrs(shared=array.name, buffer=op.attrs.buffer, bytes=COPY_BYTES,
                                            dtype=op.attrs.dtype)
                    issue = lambda g=group, v=valid: self._record(  # noqa: E731
                        "async_copy", [shared_at(g[0]), offs[g[0]], v], attrs_) and None
                    self.owned(owners[group[0]], issue)

        def elements(inner):
            with self.region(inner):
                for r in range(layout.registers):
                    value = (self.load_element(op, offs[r]) if masks[r] is None else b.if_(
                        masks[r], lambda inner, r=r: self._in(inner, lambda: self.load_element(op, offs[r])),
                        lambda inner: other))  # noqa: B023
                    self.owned(owners[r], lambda r=r, value=value: self.store_shared(array, value, shared_at(r)))

        if plan.fast is None:
            copies(b)
        else:
            b.if_(plan.fast, copies, elements)
        return True

    def owned(self, owner, fn) -> None:
        if owner is None:
            fn()
        else:
            self.b.if_(owner, lambda inner: self._in(inner, fn) and None)

    # -- the dot ------------------------------------------------------------------------------
    def mma_dot(self, op: Op, kind: MmaKind) -> None:
        a, b_, acc = (self.env[v] for v in op.operands)
        (m, kk), n = op.operands[0].type.shape, op.operands[1].type.shape[1]
        layout = Mma((m, n), self.T)
        acc = self.regs(acc, layout, op)
        plan = self.staging(op, kind, a, b_)
        a_held = self.held_a(op, kind, a)
        pipelined = self.pipelined.get(op)
        if pipelined is not None:
            array, a_base, b_base = pipelined
        else:
            array = self.scratch(STAGED[kind], plan.size, op)
            a_base, b_base = plan.a_base, plan.b_base
            self.before_write()
            copied = False
            if not a_held:
                copied |= self.fill(array, a, a_base, plan.a_pitch, False, kind)
            copied |= self.fill(array, b_, b_base, plan.b_pitch, plan.b_rows_n, kind)
            if copied:
                self.b.async_commit()
                self.b.async_wait(0)
            self.written()
        values = list(acc.values)
        b = self.b
        warps = self.T // WARP
        lane = b.bitwise_and(self.tid, WARP - 1)
        warp_row = self.mul(b.shr(self.tid, 5), 8)
        row_in = b.bitwise_and(lane, 7)  # the row of its matrix whose address a lane gives
        matrix = b.shr(lane, 3)
        per_row = 16 // STAGED[kind].itemsize  # elements in an ldmatrix row
        tiles_m, tiles_n = m // (16 * warps), n // 8
        for k0 in range(0, kk, kind.k):
            frags_a = []
            for q in range(tiles_m):
                if a_held:
                    js = [(2 * q + h, 4 * (k0 // 16) + w) for w, h in ((0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (3, 0),
                                                                         (2, 1), (3, 1))]
                    frags_a.append([a.values[a.layout.register(j)] for j in js])
                    continue
                row = self.add(self.add(self.mul(self.add(b.bitwise_and(matrix, 1), 2 * q), 8 * warps), warp_row),
                               row_in)
                col = self.add(self.mul(b.shr(lane, 4), per_row), k0)
                at = self.add(self.add(self.mul(row, plan.a_pitch), col), a_base)
                frags_a.append(list(b.ldmatrix(array, at, 4)))
            frags_b = self.b_fragments(kind, plan, array, b_base, k0, tiles_n, lane, row_in, matrix)
            for q in range(tiles_m):
                for p in range(tiles_n):
                    regs = [layout.register((2 * q + (i >> 1), 2 * p + (i & 1))) for i in range(4)]
                    out = b.mma(kind, frags_a[q], frags_b[p], [values[r] for r in regs])
                    for r, v in zip(regs, out):
                        values[r] = v
        self.dirty = True
        self.env[op.result] = type(acc)(layout, acc.dtype, tuple(values))

    def b_fragments(self, kind, plan: Staging, array, base, k0, tiles_n, lane, row_in, matrix) -> list:
        """Each 8-column tile's B fragment for the k-step at ``k0``."""
        b = self.b
        per_row = 16 // array.dtype.itemsize
        out = []
        if plan.b_rows_n or kind in (MmaKind.F16, MmaKind.BF16):
            for p in range(0, tiles_n, 2):
                count = 4 if p + 1 < tiles_n else 2
                tile = self.add(self.mul(b.shr(matrix, 1), 8), 8 * p) if count == 4 else 8 * p
                half = b.bitwise_and(matrix, 1)
                if plan.b_rows_n:  # n rows of k: the fragment's own rows, read straight
                    row, col, order = self.add(tile, row_in), self.add(self.mul(half, per_row), k0), MatrixOrder.ROW
                else:  # k rows of n: transposed on the way
                    row, col, order = self.add(self.add(self.mul(half, 8), row_in), k0), tile, MatrixOrder.TRANS
                got = b.ldmatrix(array, self.add(self.add(self.mul(row, plan.b_pitch), col), base), count, order)
                each = len(got) * 2 // count  # the elements of one 8-column tile
                out.extend(list(got[i:i + each]) for i in range(0, len(got), each))
            return out
        g, t = b.shr(lane, 2), b.bitwise_and(lane, 3)
        rows = [(t, 0), (t, 4)] if kind is MmaKind.TF32 else [(self.mul(t, 4), d) for d in (0, 1, 2, 3, 16, 17, 18, 19)]
        for p in range(tiles_n):
            col = self.add(g, 8 * p)
            out.append([self.load_shared(array, self.add(self.add(self.mul(self.add(r, k0 + d), plan.b_pitch), col),
                                                         base), array.dtype) for r, d in rows])
        return out


__all__ = ["TensorCoreDot", "Deferred", "Staging", "STAGED", "pitch"]
