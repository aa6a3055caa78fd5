"""``t.dot`` on tensor cores in the tile distribution (a mixin of its distributor,
:mod:`accy.lowering.distribute`), for NVPTX at sm_80 and later.

- The accumulator lives in the :class:`~accy.lowering.layouts.Mma` layout (``mma.sync``
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
from ..dsl.traced import _NO_CTX, SharedArray
from ..dsl.types import DType, bf16, f16, f32, i8
from .layouts import Blocked, Mma, Permute, unit_reshape
from ..targets import WARP_SIZE

# the element type each kind's operands are staged in
STAGED = {MmaKind.F16: f16, MmaKind.BF16: bf16, MmaKind.TF32: f32, MmaKind.S8: i8}
STAGED_KIND = {el: kind for kind, el in STAGED.items()}
COPY_BYTES = 16
# the shared memory a pipeline's stages may take: 48 KiB less what the program's scratch holds
SHARED_BUDGET = 48 * 1024


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
        a_held = self.held_a(op, kind, a) or op in self.a_fragments
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
        box = self.shapes.box(op.operands[-1])
        if loaded[-1] % vec or box is None:
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
        b = self.b  # the builder around the choice; each side builds in its own region (inner)

        def shared_at(r):
            c = tuple(ci for n, ci in zip(loaded, coords[r]) if n != 1)
            row, col = (c if len(c) == 2 else (0,) + c)[-2:]
            return self.add(self.add(self.mul(row, row_pitch), col), base)

        def valid_bytes(first):
            """The bytes a copy reads: none where its first element is masked off, else up to the
            box's upper bound along the contiguous axis (a prefix: no lower bound cuts a group)."""
            if masks[first] is None:
                return self.const(COPY_BYTES)
            b = self.b
            count = self.const(vec)
            for high in box.highs[-1]:
                count = b.min(count, b.sub(self._expr(high), self.traced(coords[first][-1])))
            return b.select(masks[first], self.mul(count, itemsize), 0)

        def copies(inner):
            with self.region(inner):
                for group in plan.groups:
                    valid = valid_bytes(group[0])
                    attrs_ = AsyncCopyAttrs(shared=array.name, buffer=op.attrs.buffer, bytes=COPY_BYTES,
                                            dtype=op.attrs.dtype)
                    issue = lambda g=group, v=valid: self._record(  # noqa: E731
                        "async_copy", [shared_at(g[0]), offs[g[0]], v], attrs_) and None
                    self.owned(owners[group[0]], issue)

        def elements(inner):
            with self.region(inner):
                for r in range(layout.registers):
                    value = (self.load_element(op, offs[r]) if masks[r] is None else inner.if_(
                        masks[r], lambda inner, r=r: self._in(inner, lambda: self.load_element(op, offs[r])),
                        lambda inner: other))  # noqa: B023
                    self.owned(owners[r], lambda r=r, value=value: self.store_shared(array, value, shared_at(r)))

        # a copy reads a prefix of its 16 bytes, so a lower bound along the contiguous axis must
        # not cut a group: each is a multiple of the group (the groups start at multiples of vec)
        cuts = []
        for low in box.lows[-1]:
            low = self._expr(low)
            if isinstance(low, int):
                if low % vec:
                    return False
            else:
                cuts.append(b.eq(b.bitwise_and(low, vec - 1), 0))
        fast = self.all_of([plan.fast] + cuts)
        if fast is None:
            copies(b)
        else:
            b.if_(fast, copies, elements)
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
        hoisted = self.a_fragments.get(op)
        a_held = self.held_a(op, kind, a) or hoisted is not None
        if self.collecting is not None:
            self.collecting.append((op, kind, plan, a, b_))
        pipelined = self.pipelined.get(op)
        if pipelined is not None:  # the copies of this trip's Deferred operands have landed
            array, a_base, b_base = pipelined
            filled = [(x, base, row_pitch, rows_n) for x, base, row_pitch, rows_n in (
                (a, a_base, plan.a_pitch, False), (b_, b_base, plan.b_pitch, plan.b_rows_n))
                if not isinstance(x, Deferred) and not (x is a and a_held)]
            if filled:
                for x, base, row_pitch, rows_n in filled:
                    self.fill(array, x, base, row_pitch, rows_n, kind)
                self.written()
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
        warps = self.T // WARP_SIZE
        lane = b.bitwise_and(self.tid, WARP_SIZE - 1)
        warp_row = self.mul(b.shr(self.tid, 5), 8)
        row_in = b.bitwise_and(lane, 7)  # the row of its matrix whose address a lane gives
        matrix = b.shr(lane, 3)
        per_row = 16 // STAGED[kind].itemsize  # elements in an ldmatrix row
        tiles_m, tiles_n = m // (16 * warps), n // 8
        for k0 in range(0, kk, kind.k):
            frags_a = []
            for q in range(tiles_m):
                if hoisted is not None:
                    frags_a.append(hoisted[k0 // kind.k][q])
                    continue
                if a_held:
                    js = [(2 * q + h, 4 * (k0 // 16) + w) for w, h in ((0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (3, 0),
                                                                         (2, 1), (3, 1))]
                    frags_a.append([a.values[a.layout.register(j)] for j in js])
                    continue
                frags_a.append(self.a_fragment(array, a_base, plan.a_pitch, q, k0))
            frags_b = self.b_fragments(kind, plan, array, b_base, k0, tiles_n, lane, row_in, matrix)
            for q in range(tiles_m):
                for p in range(tiles_n):
                    regs = [layout.register((2 * q + (i >> 1), 2 * p + (i & 1))) for i in range(4)]
                    out = b.mma(kind, frags_a[q], frags_b[p], [values[r] for r in regs])
                    for r, v in zip(regs, out):
                        values[r] = v
        self.dirty = True
        self.env[op.result] = type(acc)(layout, acc.dtype, tuple(values))

    # -- software pipelining -----------------------------------------------------------------
    def pipeline(self, op: Op, dots: list):
        """For a fold whose dots take operands loaded per trip (Deferred, computed from the
        trip's index and values from before the loop alone): (stages, the staging array's
        element type, the stage's size, per dot its staging plan and offset in a stage, per
        deferred operand (dot, role, load, its steps, base, row pitch)); None where nothing
        is to be pipelined or only one stage fits."""
        stages = self.launch.attrs.num_stages
        region = op.regions[0]
        if stages < 2 or not dots:
            return None
        carried = self._carried(region)
        types = {STAGED[kind] for _, kind, _, _, _ in dots}
        if len(types) != 1:
            return None
        (el,) = types
        offsets, operands, size = {}, [], 0
        for dot, kind, plan, a, b_ in dots:
            if dot.block is not region:
                continue
            mine = [(role, x, base, row_pitch) for role, x, base, row_pitch in (
                (0, a, plan.a_base, plan.a_pitch), (1, b_, plan.b_base, plan.b_pitch))
                if isinstance(x, Deferred) and self._prefetchable(x.op, region, carried)]
            if not mine:
                continue
            offsets[dot] = (size, plan)
            operands += [(dot, role, x, size + base, row_pitch) for role, x, base, row_pitch in mine]
            size += -(-plan.size * el.itemsize // 16) * 16 // el.itemsize  # stages start 16-byte aligned
        if not operands:
            return None
        budget = SHARED_BUDGET - sum(a.count * a.dtype.itemsize for a, _ in self.pool.values()) - sum(
            a.count * a.dtype.itemsize for t, a in self.stage_arrays.items() if t != el)
        while stages > 1 and stages * size * el.itemsize > budget:
            stages -= 1
        if stages < 2:
            return None
        return stages, el, size, offsets, operands

    def _carried(self, region) -> set:
        """The values of a fold body that depend on its carries."""
        out = set(region.args[1:])
        for op in region.ops:
            inner = {v for o in op.regions for x in o.walk() for v in x.operands}
            if any(v in out for v in op.operands) or inner & out:
                out.update(op.results)
        return out

    def _slice(self, load: Op, region) -> list | None:
        """The body's ops a load's operands are computed by, in order; None if any is not plain
        arithmetic (a region, a memory access)."""
        needed = set(load.operands)
        ops = []
        for op in reversed(region.ops[:region.ops.index(load)]):
            if any(r in needed for r in op.results):
                if op.regions or op.opdef.memory or not op.opdef.pure:
                    return None
                ops.append(op)
                needed.update(op.operands)
        return ops[::-1]

    def _prefetchable(self, load: Op, region, carried: set) -> bool:
        ops = self._slice(load, region)
        return ops is not None and not any(v in carried for o in ops + [load] for v in o.operands)

    def prefetch(self, region, plan, trip, stage) -> None:
        """Issue the copies of the Deferred operands of trip ``trip`` (its index) into stage ``stage``."""
        stages, el, size, offsets, operands = plan
        array = self.stage_array
        saved = dict(self.env)
        scopes = self.scopes
        self.scopes = scopes[:1] + [{}]  # nothing recorded inside the loop body is visible here
        try:
            self.env[region.args[0]] = trip
            loads = {x.op for _, _, x, _, _ in operands}
            for o in sorted({o for load in loads for o in self._slice(load, region)}, key=region.ops.index):
                self._op(o)
            for dot, role, x, base, row_pitch in operands:
                fresh = Deferred(x.op, tuple(self.env[v] for v in x.op.operands), x.steps, x.shape, x.transposed)
                at = self.add(self.mul(stage, size), base)
                if not self.copy(fresh, array, at, row_pitch):
                    self.fill(array, self.load_now(fresh), at, row_pitch, x.transposed, STAGED_KIND[el])
        finally:
            self.scopes = scopes
            self.env.clear()
            self.env.update(saved)

    def pipelined_fold(self, op: Op, start, stop, inits, layouts, plan) -> None:
        """The fold as a software pipeline: a prologue issues the copies of the first
        ``stages - 1`` trips; each trip waits for its own (at most ``stages - 2`` groups left in
        flight), meets its block at a barrier (every thread's copies landed, every thread done
        with the stage about to be refilled), issues the copies of the trip ``stages - 1`` ahead
        into that stage, then computes from its own stage."""
        stages, el, size, offsets, operands = plan
        region = op.regions[0]
        step = op.attrs.step
        array = self.stage_arrays.get(el)  # one array for every pipelined fold (they run one after another)
        if array is None:
            array = self.stage_arrays[el] = self.info.body._declare_shared(self.info, el, 1, None, first=True,
                                                                           stem="stage")
            self.stage_ops[el] = self.info.body.block.ops[0]
        array.count = max(array.count, stages * size)
        self.stage_array = array
        b = self.b
        for s in range(stages - 1):
            trip = self.add(start, s * step)
            b.if_(b.lt(trip, stop), lambda inner, s=s, trip=trip: self._in(
                inner, lambda: self.prefetch(region, plan, trip, s)) and None)
            b.async_commit()

        def body(inner, i, carries):
            with self.region(inner):
                *accs, stage = carries
                b = self.b
                b.async_wait(stages - 2)
                b.barrier()
                self.dirty = False
                ahead = self.add(i, (stages - 1) * step)
                refill = b.select(b.eq(stage, 0), stages - 1, b.sub(stage, 1))
                b.if_(b.lt(ahead, stop), lambda inner: self._in(
                    inner, lambda: self.prefetch(region, plan, ahead, refill)) and None)
                b.async_commit()
                for dot, (offset, dot_plan) in offsets.items():
                    base = self.add(self.mul(stage, size), offset)
                    self.pipelined[dot] = (self.stage_array, self.add(base, dot_plan.a_base),
                                           self.add(base, dot_plan.b_base))
                self.env[region.args[0]] = i
                self._unflatten(region.args[1:], accs, layouts)
                results = self._walk(region)
                following = b.select(b.eq(stage, stages - 1), 0, b.add(stage, 1))
                return tuple(self._flatten(results, layouts)) + (following,)

        flat = self.b._loop(start, stop, step, tuple(self._flatten(inits, layouts)) + (self.const(0),), _NO_CTX, body)
        for dot in offsets:
            self.pipelined.pop(dot, None)
        self.b.async_wait(0)
        self.dirty = True
        self._unflatten(op.results, flat[:-1], layouts)

    def a_fragment(self, array: SharedArray, base, row_pitch: int, q: int, k0: int) -> list:
        """This lane's elements of A's fragment for its warp's ``q``-th 16-row tile and the
        k-step at ``k0``: one ldmatrix.x4 (row halves, then column halves)."""
        b = self.b
        lane = b.bitwise_and(self.tid, WARP_SIZE - 1)
        matrix = b.shr(lane, 3)
        per_row = 16 // array.dtype.itemsize
        row = self.add(self.add(self.mul(self.add(b.bitwise_and(matrix, 1), 2 * q), 8 * (self.T // WARP_SIZE)),
                                self.mul(b.shr(self.tid, 5), 8)), b.bitwise_and(lane, 7))
        col = self.add(self.mul(b.shr(lane, 4), per_row), k0)
        return list(b.ldmatrix(array, self.add(self.add(self.mul(row, row_pitch), col), base), 4))

    def hoist_fragments(self, region) -> None:
        """For each tensor-core dot of a fold's body whose A comes from before the loop (attention's
        query tile), read A's fragments once, before the loop: the trips reuse them from registers."""
        inside = {v for o in region.walk() for v in o.results} | set(region.args)
        for dot in region.ops:
            kind = dot.opcode == "dot" and self.mma_kind(dot)
            if not kind or dot.operands[0] in inside or dot in self.a_fragments:
                continue
            a = self.env[dot.operands[0]]
            if isinstance(a, Deferred) or self.held_a(dot, kind, a):
                continue
            a = self.regs(a)
            (m, kk) = a.shape
            row_pitch = pitch(kk, STAGED[kind].itemsize)
            array = self.scratch(STAGED[kind], m * row_pitch, dot)
            self.before_write()
            self.fill(array, a, 0, row_pitch, False, kind)
            self.written()
            self.a_fragments[dot] = [[self.a_fragment(array, 0, row_pitch, q, k0)
                                      for q in range(m // (16 * (self.T // WARP_SIZE)))] for k0 in range(0, kk, kind.k)]
            self.dirty = True

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
