"""``t.dot`` on tensor cores in the tile distribution (:mod:`accy.lowering.distribute`), for
NVPTX at sm_80 and later.

- The accumulator lives in the :class:`~accy.lowering.layouts.Mma` layout (``mma.sync``
  m16n8's C fragments), and so does the result.
- The operands are staged in shared memory, each row padded to an odd number of 16-byte
  units so that the 8 rows an ``ldmatrix`` reads fall in distinct banks (rows of 2 or 4
  units unpadded and XOR-swizzled instead, :func:`staged_rows`), and read into
  fragments by ``ldmatrix``: A as m rows of k; B as k rows of n through ``.trans`` (16-bit
  types), or as n rows of k read straight (a transposed operand such as attention's
  ``key.T``, staged as its rows lie in memory); a tf32 or i8 B in k rows of n by plain loads
  (ldmatrix transposes only 16-bit elements).
- An A already in an Mma layout (FA2's P: the scores' registers, cast to 16 bits) is its own
  fragments: nothing is staged.
- An operand that a ``tile_load`` reads for this dot alone (a
  :class:`~accy.lowering.tile_memory.Deferred` one) is copied from global memory straight to
  its staging rows by ``cp.async``, 16 bytes a copy and the edges zero-filled by the copy's
  source size, where its rows are contiguous and 16-byte aligned (checked when it runs:
  element loads and shared stores otherwise).  In a ``fold_range`` with ``num_stages`` > 1
  the copies run ahead of the math (:mod:`accy.lowering.software_pipeline`).
"""

from __future__ import annotations

import math

import attrs

from ..dsl.ir import Graph, Op, constant_of
from ..dsl.ops import AsyncCopyAttrs, MatrixOrder, MmaKind, Precision, SharedAttrs
from ..dsl.traced import SharedArray
from ..dsl.types import bf16, f8e4m3, f8e5m2, f16, f32, i8
from ..targets import WARP_SIZE
from .fma_dot import round_to_tf32
from .layouts import Blocked, Mma, Permute, a_fragment_registers, unit_reshape
from .rebuild import Part, Rebuild
from .registers import Lazy, Registers, Regs
from .scratch import Scratch, pitch
from .tile_access import conjuncts
from .tile_memory import Deferred, MemoryAccesses
from .warpgroups import ALIGN, SwizzledRows, WarpgroupDot, aligned, warpgroup_fits

# the element type each kind's operands are staged in
STAGED = {MmaKind.F16: f16, MmaKind.BF16: bf16, MmaKind.TF32: f32, MmaKind.S8: i8, MmaKind.E4M3: f8e4m3,
          MmaKind.E5M2: f8e5m2}
STAGED_KIND = {el: kind for kind, el in STAGED.items()}
COPY_BYTES = 16


@attrs.frozen
class StagedRows:
    """How an operand's rows lie in its staging array: ``pitch`` elements apart and, where
    ``units`` is not 0, each row's ``units`` 16-byte units XOR-swizzled: unit ``u`` of row ``r``
    at ``u ^ (r // (8 // units) % units)`` (:func:`staged_rows`)."""

    pitch: int
    units: int = 0
    per_unit: int = 8  # elements in a 16-byte unit

    def at(self, b, core, row, col, row_low=None):
        """The offset of element (``row``, ``col``) from the rows' start (``row_low``: ``row``
        mod 8, where the caller has it apart: the swizzle depends on it alone, and the rows an
        ldmatrix lane gives differ by multiples of 8 from tile to tile, one swizzle for all)."""
        start = core.mul(row, self.pitch)
        if not self.units:
            return core.add(start, col)
        shift = (8 // self.units).bit_length() - 1
        low = row if row_low is None else row_low
        swizzle = low // (8 // self.units) % self.units if isinstance(low, int) else \
            b.bitwise_and(b.shr(low, shift), self.units - 1)
        if isinstance(col, int):
            unit, within = divmod(col, self.per_unit)
        else:
            unit = b.shr(col, self.per_unit.bit_length() - 1)
            within = b.bitwise_and(col, self.per_unit - 1)
        moved = unit ^ swizzle if isinstance(unit, int) and isinstance(swizzle, int) else b.bitwise_xor(unit, swizzle)
        return core.add(core.add(start, core.mul(moved, self.per_unit)), within)


@attrs.frozen
class Staging:
    """Where a dot's operands sit in shared memory: A's ``m`` rows (``a_rows``) from ``a_base``
    (none when A is held in registers), B's rows (``k`` rows of n, or ``n`` rows of k where
    ``b_rows_n``) from ``b_base``; ``size`` elements in all."""

    a_base: int
    a_rows: StagedRows
    b_base: int
    b_rows: StagedRows
    b_rows_n: bool
    size: int


def staged_rows(elements: int, itemsize: int) -> StagedRows:
    """Rows of ``elements``: of 2 or 4 16-byte units, unpadded and XOR-swizzled (padded, the 8
    lanes of a cp.async phase would write two or four rows, two of their units in one bank
    group; swizzled, they write 128 bytes in a row, and the 8 rows an ldmatrix reads at one
    unit still fall in distinct bank groups); else padded to an odd number of units
    (:func:`pitch`), which is conflict-free both ways."""
    units, rest = divmod(elements * itemsize, 16)
    if not rest and units in (2, 4):
        return StagedRows(elements, units, 16 // itemsize)
    return StagedRows(pitch(elements, itemsize))


def warp_grid(m: int, n: int, warps: int) -> int | None:
    """The warps along the columns of an m x n dot's result on ``warps`` warps: the grid where
    each warp's operand traffic per k-step (its rows of A plus its columns of B) is least and
    tiles stay whole (128 x 128 on 8 warps: 2 x 4), the wider split where two tie; None where
    no grid gives every warp whole tiles."""
    options = [wn for wn in (1, 2, 4, 8, 16, 32) if wn <= warps and Mma.fits((m, n), warps * WARP_SIZE, wn)]
    return min(options, key=lambda wn: (m // (warps // wn) + n // wn, -wn)) if options else None


def b_transposed(op: Op) -> bool:
    """Is the dot ``op``'s B a transpose (through unit reshapes): staged as n rows of k?"""
    v = op.operands[1]
    while v.op is not None and v.op.opcode == "reshape" and unit_reshape(v.op.operands[0].type.shape, v.type.shape):
        v = v.op.operands[0]
    return v.op is not None and v.op.opcode == "trans"


def lone_dot(graph: Graph) -> bool:
    """Has ``graph`` one dot?  Its warps may form a grid; where dots chain (attention) they split
    rows only, so one dot's result is the next one's A operand in registers."""
    return sum(op.opcode == "dot" for op in graph.body.walk()) == 1


# -- which dots, and which loads go straight to shared memory -------------------------
def mma_kind(op: Op, threads: int, grid: bool = False) -> MmaKind | None:
    """The mma the dot ``op`` of a program of ``threads`` threads can run on, or None (FMA):
    the inputs 16-bit floats, fp8 (widened to f16 exactly), f32 with tf32 precision or i8, and
    every warp whole 16-row tiles of the result, 8-column tiles and k-steps (its warps over a
    grid where ``grid``, else along the rows)."""
    a, b_ = (v.type for v in op.operands[:2])
    t = a.dtype
    name = t.name
    if t.is_float and f16.format.holds(t.format):  # f16, and fp8 types f16 holds exactly
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
    warps_n = warp_grid(m, n, threads // WARP_SIZE) if grid else 1
    return kind if warps_n is not None and Mma.fits((m, n), threads, warps_n) and k % kind.k == 0 else None


def direct_loads(graph: Graph, threads: int, grid: bool = False, warpgroups: bool = False) -> frozenset:
    """The tile_loads of ``graph`` whose one use (through unit reshapes, and for B a transpose)
    is an operand of a tensor-core dot in the same region, of its staged type with 0 past the
    edges: they can go from global to shared memory without registers (``grid``: as
    :func:`mma_kind`'s, whether the dots' warps may form a grid; ``warpgroups``: fp8 dots that
    fit a warpgroup stage fp8 as it is, B only as n rows of k)."""
    users: dict = {}
    for op in graph.body.walk():
        for v in op.operands:
            users.setdefault(v, []).append(op)
    out = set()
    for dot in graph.body.walk():
        kind = dot.opcode == "dot" and mma_kind(dot, threads, grid)
        if not kind or kind is MmaKind.TF32:  # tf32 rounds its inputs on the way in
            continue
        if warpgroups:
            kind = fp8_kind(dot, kind, threads)
        for position in (0, 1):
            v = dot.operands[position]
            transposed = False
            while v.op is not None and len(users.get(v, ())) == 1 and (
                    (v.op.opcode == "reshape" and unit_reshape(v.op.operands[0].type.shape, v.type.shape))
                    or (v.op.opcode == "trans" and position == 1)):
                transposed |= v.op.opcode == "trans"
                v = v.op.operands[0]
            if position == 1 and not kind.transposes and not transposed:
                continue  # a B of k rows that the ISA cannot transpose goes through registers
            load = v.op
            if (load is not None and load.opcode == "tile_load" and len(users.get(v, ())) == 1
                    and load.block is dot.block and load.attrs.dtype == STAGED[kind]
                    and constant_of(load.operands[1]) == 0):
                out.add(load)
    return frozenset(out)


def fp8_kind(op: Op, kind: MmaKind, threads: int) -> MmaKind:
    """At sm_90a, the wgmma an fp8 dot that ``mma.sync`` would run as f16 takes (e4m3 or e5m2,
    k32) where K allows and it fits a warpgroup; else ``kind``."""
    dtype = op.operands[0].type.dtype
    if kind is not MmaKind.F16 or dtype not in (f8e4m3, f8e5m2) or op.operands[0].type.shape[1] % 32:
        return kind
    fp8 = MmaKind.E4M3 if dtype == f8e4m3 else MmaKind.E5M2
    return fp8 if warpgroup_fits(op, fp8, b_transposed(op), threads) else kind


class OperandStaging(Part):
    """A dot's operand written to its staging rows in shared memory: by ``cp.async`` straight
    from global memory where it is a :class:`Deferred` load whose form allows it, else from
    registers (converted to the staged type)."""

    def __init__(self, core: Rebuild, registers: Registers, scratch: Scratch, memory: MemoryAccesses):
        super().__init__(core)
        self.registers = registers
        self.scratch = scratch
        self.memory = memory

    def fill(self, array: SharedArray, x, base, rows: StagedRows, rows_n: bool, kind: MmaKind) -> bool:
        """Stage the operand ``x`` at ``base`` (as ``rows``; a B with ``rows_n`` as n rows of k);
        True where it went by asynchronous copies (to be waited for)."""
        if isinstance(x, Deferred):
            if self.copy(x, array, base, rows):
                return True
            x = self.load_now(x)
        x = self.registers.regs(x)
        el = STAGED[kind]
        core = self.core

        def convert(v):
            v = self.b.cast(v, el) if v.type != el else v
            return round_to_tf32(self.b, v) if kind is MmaKind.TF32 else v

        def place(c):
            row, col = (c[1], c[0]) if rows_n else (c[0], c[1])
            return core.add(rows.at(self.b, core, row, col), base)

        self.registers.stage(array, x, place, convert)
        return False

    def load_now(self, x: Deferred) -> Regs:
        """The deferred load done the ordinary way (into registers), then its reshapes and
        transpose as the graph has them (they move no data)."""
        regs = self.memory.load_regs(x.op, *x.operands)
        for step in x.steps:
            if step[0] == "reshape":
                regs = self.registers.unit_reshape(regs, step[1])
            else:
                regs = self.registers.transpose(regs, step[1])
        return regs

    def copy(self, x: Deferred, array: SharedArray, base, rows: StagedRows) -> bool:
        """``cp.async`` of the loaded tile's rows into ``array`` (from ``base``, as ``rows``
        lie), 16 bytes a copy, where the rows are contiguous in memory and each copy's
        source is 16-byte aligned (checked when it runs, element loads otherwise); False
        where the load's form does not allow it at all."""
        core, registers, memory = self.core, self.registers, self.memory
        op = x.op
        offsets, other, mask = x.operands
        loaded = op.result.type.shape
        itemsize = op.attrs.dtype.itemsize
        vec = COPY_BYTES // itemsize
        box = memory.shapes.box(op.operands[-1])
        if loaded[-1] % vec or box is None:
            return False
        layout = Blocked(tuple(loaded), self.T, vec=vec)
        if layout.dims[-1].per_thread != vec:
            return False
        # a tensor's shape guard seen through (accy.lowering.shape_guards): copies on its flat
        # offsets where the check holds; where it fails, the launch stops
        guarded = memory.shapes.guard(op.operands[0])
        plan = memory.vector_plan(op, layout, guarded[0] if guarded is not None else None)
        if plan is None or plan.vec != vec:
            return False
        b = self.b  # the builder around the choice; each side builds in its own region (inner)
        # no bound along the contiguous axis may cut a group (they start at multiples of vec): a
        # lower bound is a multiple of vec, an upper one too or past the tile (a tail of K that
        # is no multiple of 8, in a view whose rows are still aligned, goes element by element)
        cuts = []
        for bound, upper in [(e, False) for e in box.lows[-1]] + [(e, True) for e in box.highs[-1]]:
            bound = memory.expr(bound)
            if isinstance(bound, int):
                if bound % vec and not (upper and bound >= loaded[-1]):
                    return False
                continue
            whole = b.eq(b.bitwise_and(bound, vec - 1), 0)
            cuts.append(b.logical_or(whole, b.ge(bound, loaded[-1])) if upper else whole)
        seen = memory.guards.seen_through(op) if guarded is not None else None
        if guarded is not None and seen is None:
            return False
        in_shape = seen.fast_attrs(op) if seen is not None else op.attrs  # an element's attributes here
        source = self.env[seen.flat] if seen is not None else offsets  # the offsets the copies run on
        offs = self.copy_offsets(op, seen, layout) or registers.regs(source, layout, op).values
        masks = registers.mask(mask, layout)
        owners = registers.owners(layout)
        coords = registers.coords(layout)
        copy_attrs = lambda bounds: AsyncCopyAttrs(  # noqa: E731
            shared=array.name, buffer=op.attrs.buffer, bytes=COPY_BYTES, dtype=op.attrs.dtype, bounds=bounds)

        def place(coords_):  # an element's position in the staging rows
            c = tuple(ci for n, ci in zip(loaded, coords_) if n != 1)
            row, col = (c if len(c) == 2 else (0,) + c)[-2:]
            return core.add(rows.at(self.b, core, row, col), base)

        shared_at = self.split_places(rows, layout, loaded, place, coords, base)

        def copies(inner):
            """16 bytes a copy, or none where its first element is masked off (the groups are
            whole: a lower or upper bound along the contiguous axis never cuts one, see below),
            as Triton's are: no length per copy (cp.async's source size 16 or 0)."""
            with core.region(inner):
                for group in plan.groups:
                    first = masks[group[0]]
                    valid = core.const(COPY_BYTES) if first is None else self.b.select(first, COPY_BYTES, 0)
                    issue = lambda g=group, v=valid: core.record(  # noqa: E731
                        "async_copy", [shared_at(g[0]), offs[g[0]], v], copy_attrs(in_shape.bounds)) and None
                    self.owned(owners[group[0]], issue)

        def elements(inner):
            with core.region(inner):
                if isinstance(source, Lazy) and isinstance(mask, Lazy):
                    return self.element_loop(op, source, other, mask, in_shape, array, place)
                for r in range(layout.registers):
                    value = (memory.load_element(op, offs[r], in_shape) if masks[r] is None else inner.if_(
                        masks[r], lambda inner, r=r: core.within(
                            inner, lambda: memory.load_element(op, offs[r], in_shape)),
                        lambda inner: other))  # noqa: B023
                    self.owned(owners[r], lambda r=r, value=value: self.scratch.store(array, value, shared_at(r)))

        fast = core.all_of([plan.fast] + cuts)

        def staged():  # by the copies where they can run, else element by element
            copies(self.b) if fast is None else self.b.if_(fast, copies, elements)

        if seen is None:
            staged()
        else:  # where the check fails, the first element outside, copied alone: its check stops the launch
            memory.guards.choose(seen, staged, lambda: memory.guards.on_failure(op, seen, lambda at: core.record(
                "async_copy", [shared_at(0), at, core.const(COPY_BYTES)], copy_attrs(op.attrs.bounds))))
        return True

    def split_places(self, rows, layout, loaded, place, coords, base):
        """Each register's staging offset (``place`` of its ``coords``), where ``rows`` are wgmma's
        swizzled rows and the register's own part moves whole 8-row spans and whole chunks, as
        one offset of the thread's plus a constant: the register's row bits lie apart from the
        thread's (a layout's rows one a thread), which a bit permutation of A's rows and the
        swizzle then keep apart, so the copies share one address and immediate offsets."""
        kept = [k for k, n in enumerate(loaded) if n != 1]  # (as place sees them: axes of 1 dropped)
        if not isinstance(rows, SwizzledRows) or len(kept) != 2 or layout.dims[kept[0]].per_thread != 1:
            return lambda r: place(coords[r])
        core = self.core
        dims = [layout.dims[k] for k in kept]
        key = ("staged", rows, layout.dims, id(base))

        def at(r):
            js = [layout.register_indices(r)[k] for k in kept]
            row, col = (d.static(j) for d, j in zip(dims, js))
            if row % 8 or col % rows.per_row or any(d.wraps(j) for d, j in zip(dims, js)):
                return place(coords[r])
            first = core.lookup(key)  # (in the region it is asked in: a fallback's is another)
            if first is None:
                parts = [self.registers.thread_part(d) for d in dims]
                parts = [0 if part is None else part for part in parts]
                first = core.remember(key, core.add(rows.at(self.b, core, *parts), base))
            return core.add(first, rows.at(self.b, core, row, col))

        return at

    def copy_offsets(self, op: Op, seen, layout) -> list | None:
        """Each register's offset from the access's affine form ``base + sum_d coef_d * i_d``,
        with ``i_d`` this thread's part plus the register's static part: the base and the
        thread's part once (per trip in a loop), then per copy its static part (a stride times
        an int, the same in every trip and thread), one add a copy instead of a row's
        multiplication.  None where there is no such form or a coordinate wraps."""
        memory, core = self.memory, self.core
        mask = op.operands[-1]
        form = memory.shapes.affine(seen.flat if seen is not None else op.operands[0], conjuncts(mask))
        if form is None or any(d.wraps(j) for r in range(layout.registers)
                               for d, j in zip(layout.dims, layout.register_indices(r))):
            return None
        coefs = [memory.expr(c) for c in form.coefs]
        common = memory.expr(form.base)
        for coef, d in zip(coefs, layout.dims):
            part = self.registers.thread_part(d)
            if part is not None:
                common = core.add(common, core.times(part, coef))
        out = []
        for r in range(layout.registers):
            static = 0
            for coef, d, j in zip(coefs, layout.dims, layout.register_indices(r)):
                static = core.add(static, core.times(d.static(j), coef))
            out.append(core.add(common, static))
        return out

    def element_loop(self, op: Op, offsets: Lazy, other, mask: Lazy, attrs_, array: SharedArray, place) -> None:
        """The tile ``op`` loads staged element by element, each by one thread, in a loop: where
        its copies cannot run (a misaligned tensor), in code that stays small and computes
        nothing ahead of the copies' path (an unrolled fallback's addresses would be hoisted
        and held in registers through the main loop)."""
        core, shape = self.core, op.result.type.shape

        def body(inner, e, carries):
            with core.region(inner):
                at = core.unflat(e, shape)
                load = lambda: self.memory.load_element(op, offsets.at(at), attrs_)  # noqa: E731
                if mask.constant is True:
                    value = load()
                else:
                    value = self.b.if_(mask.at(at), lambda inner: core.within(inner, load), lambda inner: other)
                self.scratch.store(array, value, place(at))
                return ()

        self.b.loop(self.tid, math.prod(shape), self.T, (), body)

    def owned(self, owner, fn) -> None:
        if owner is None:
            fn()
        else:
            self.b.if_(owner, lambda inner: self.core.within(inner, fn) and None)


class TensorCoreDot(Part):
    """The dots on ``mma.sync`` (see the module's doc), where ``enabled`` (the target has tensor
    cores): ``a_fragments`` holds the A fragments of dots whose A was read before their fold,
    ``pipelined`` the stage a pipelined fold's dot reads its operands from, ``collecting`` (where
    a list) the dots a fold's trial walk stages."""

    def __init__(self, core: Rebuild, registers: Registers, scratch: Scratch, staging: OperandStaging,
                 enabled: bool, grid: bool = False, warpgroups: bool = False):
        super().__init__(core)
        self.warpgroups = WarpgroupDot(core) if warpgroups else None  # wgmma where a dot fits it
        self.a_staged: dict = {}  # a wgmma dot -> the array its A was staged in before its fold
        self.held: dict = {}  # a wgmma dot -> the shared array its A is staged in before its fold (kept)
        self.grid = grid  # may a dot's warps form a grid (warp_grid)? not where one dot feeds another
        self.registers = registers
        self.scratch = scratch
        self.staging = staging
        self.enabled = enabled
        self.a_fragments: dict = {}  # dot -> its A's fragments, read before the fold it is in
        self.pipelined: dict = {}  # dot -> (its staging array, A's and B's base) in a pipelined fold
        self.collecting: list | None = None

    def on_warpgroups(self, op: Op) -> bool:
        """Does the dot ``op`` run on wgmma?"""
        return self.warpgroup_kind(op) is not None

    def warpgroup_kind(self, op: Op) -> MmaKind | None:
        """The wgmma the dot ``op`` runs on, or None: ``mma.sync``'s kind, but OCP fp8 inputs
        as they are (e4m3 or e5m2, k32) where K allows."""
        if self.warpgroups is None or not self.enabled:
            return None
        kind = mma_kind(op, self.T)
        if kind is not None:
            kind = fp8_kind(op, kind, self.T)
        return kind if kind is not None and self.warpgroups.fits(op, kind, b_transposed(op)) else None

    def checkpoint(self) -> tuple:
        """What the dots read or staged before their folds, to :meth:`roll_back` to."""
        return dict(self.a_fragments), dict(self.a_staged)

    def roll_back(self, saved: tuple) -> None:
        self.a_fragments, self.a_staged = (dict(x) for x in saved)

    def held_bytes(self) -> int:
        """The shared memory A's staged before their folds take (each aligned)."""
        return sum(aligned(a.count, a.dtype.itemsize) * a.dtype.itemsize for a in self.held.values())

    def warps_n(self, op: Op) -> int:
        """The warps along the columns of the dot ``op``'s result (its Mma layout's ``warps_n``)."""
        if not self.grid or self.on_warpgroups(op):
            return 1
        (m, _), n = op.operands[0].type.shape, op.operands[1].type.shape[1]
        return warp_grid(m, n, self.T // WARP_SIZE)

    def mma_kind(self, op: Op) -> MmaKind | None:
        """The mma the dot ``op`` runs on, or None (FMA, or no tensor cores)."""
        return self.warpgroup_kind(op) or (mma_kind(op, self.T, self.grid) if self.enabled else None)

    def plan(self, op: Op, kind: MmaKind, a, b_) -> Staging:
        (m, kk), n = op.operands[0].type.shape, op.operands[1].type.shape[1]
        el = STAGED[kind]
        a_held = self.held_a(op, kind, a) or op in self.a_fragments or op in self.a_staged
        b_rows_n = (isinstance(b_, Deferred) and b_.transposed) or (hasattr(b_, "layout")
                                                                     and isinstance(b_.layout, Permute))
        if self.on_warpgroups(op):
            b_rows_n = b_rows_n or not kind.transposes  # (staged from registers)
            a_rows, b_rows, b_base, size = self.warpgroups.plan(op, kind, a_held, b_rows_n, el.itemsize)
            return Staging(0, a_rows, b_base, b_rows, b_rows_n, size)
        a_rows = staged_rows(kk, el.itemsize)
        if b_rows_n:
            b_rows, b_count = staged_rows(kk, el.itemsize), n
        elif kind is MmaKind.TF32:  # B read a word a lane: rows 8 words apart mod 32 banks
            b_rows, b_count = StagedRows(n + (8 - n) % 32), kk
        else:
            b_rows, b_count = staged_rows(n, el.itemsize), kk
        b_base = 0 if a_held else m * a_rows.pitch
        return Staging(0, a_rows, b_base, b_rows, b_rows_n, b_base + b_count * b_rows.pitch)

    def held_a(self, op: Op, kind: MmaKind, a) -> bool:
        (m, kk) = op.operands[0].type.shape
        return (self.warps_n(op) == 1 and hasattr(a, "layout") and a.layout.same(Mma((m, kk), self.T))
                and a.dtype == STAGED[kind] and kind in (MmaKind.F16, MmaKind.BF16))

    # -- the dot ------------------------------------------------------------------------------
    def dot(self, op: Op, kind: MmaKind) -> None:
        scratch, staging = self.scratch, self.staging
        a, b_, acc = (self.env[v] for v in op.operands)
        (m, kk), n = op.operands[0].type.shape, op.operands[1].type.shape[1]
        layout = Mma((m, n), self.T, self.warps_n(op))
        acc = self.registers.regs(acc, layout, op)
        plan = self.plan(op, kind, a, b_)
        hoisted = self.a_fragments.get(op)
        staged_a = self.a_staged.get(op)
        a_held = self.held_a(op, kind, a) or hoisted is not None or staged_a is not None
        wide = self.on_warpgroups(op)
        if wide and plan.b_rows_n and isinstance(b_, Deferred) and not b_.transposed:
            b_ = staging.load_now(b_)  # (a B wgmma takes K-major only: staged from registers)
        if self.collecting is not None:
            self.collecting.append((op, kind, plan, a, b_))
        pipelined = self.pipelined.get(op)
        if pipelined is not None:  # the copies of this trip's Deferred operands have landed
            array, a_base, b_base = pipelined
            filled = [(x, base, rows, rows_n) for x, base, rows, rows_n in (
                (a, a_base, plan.a_rows, False), (b_, b_base, plan.b_rows, plan.b_rows_n))
                if not isinstance(x, Deferred) and not (x is a and a_held)]
            if filled:
                for x, base, rows, rows_n in filled:
                    staging.fill(array, x, base, rows, rows_n, kind)
                self.written(wide)
        else:
            array = scratch.scratch(STAGED[kind], plan.size, op, ALIGN if wide else 16)
            a_base, b_base = plan.a_base, plan.b_base
            scratch.before_write()
            copied = False
            if not a_held:
                copied |= staging.fill(array, a, a_base, plan.a_rows, False, kind)
            copied |= staging.fill(array, b_, b_base, plan.b_rows, plan.b_rows_n, kind)
            if copied:
                self.b.async_commit()
                self.b.async_wait(0)
            self.written(wide)
        values = list(acc.values)
        if wide:
            a_source = a if a_held and staged_a is None else staged_a or (array, a_base)
            values = self.warpgroups.products(op, kind, a_source, plan.a_rows, array, b_base, plan.b_rows,
                                              plan.b_rows_n, values, layout)
            scratch.dirty = True
            self.env[op.result] = Regs(layout, acc.dtype, tuple(values))
            return
        b = self.b
        lane = b.bitwise_and(self.tid, WARP_SIZE - 1)
        # unused, and dropped as dead code, but the ops it records shift the PTX's register numbers
        self.core.mul(b.shr(self.tid, 5), 8)
        row_in = b.bitwise_and(lane, 7)  # the row of its matrix whose address a lane gives
        matrix = b.shr(lane, 3)
        tiles_m, tiles_n = m // (16 * layout.warps_m), n // (8 * layout.warps_n)
        for k0 in range(0, kk, kind.k):
            frags_a = []
            for q in range(tiles_m):
                if hoisted is not None:
                    frags_a.append(hoisted[k0 // kind.k][q])
                    continue
                if a_held:
                    frags_a.append([a.values[r] for r in a_fragment_registers(a.layout, q, k0)])
                    continue
                frags_a.append(self.a_fragment(array, a_base, plan.a_rows, q, k0, layout.warps_m))
            frags_b = self.b_fragments(kind, plan, array, b_base, k0, tiles_n, lane, row_in, matrix, layout)
            for q in range(tiles_m):
                for p in range(tiles_n):
                    regs = [layout.register((2 * q + (i >> 1), 2 * p + (i & 1))) for i in range(4)]
                    out = b.mma(kind, frags_a[q], frags_b[p], [values[r] for r in regs])
                    for r, v in zip(regs, out):
                        values[r] = v
        scratch.dirty = True
        self.env[op.result] = Regs(layout, acc.dtype, tuple(values))

    def written(self, warpgroups: bool) -> None:
        """The staging written: every thread's writes seen by the block (and by the asynchronous
        proxy, which a wgmma reads shared memory through)."""
        if warpgroups:
            self.b.fence_proxy_async()
        self.scratch.written()

    def a_fragment(self, array: SharedArray, base, rows: StagedRows, q: int, k0: int, warps_m: int) -> list:
        """This lane's elements of A's fragment for its warp's ``q``-th 16-row tile and the
        k-step at ``k0`` (the warps split the rows ``warps_m`` ways): one ldmatrix.x4 (row
        halves, then column halves)."""
        b, core = self.b, self.core
        lane = b.bitwise_and(self.tid, WARP_SIZE - 1)
        matrix = b.shr(lane, 3)
        per_row = 16 // array.dtype.itemsize
        warp = b.shr(self.tid, 5)
        if warps_m < self.T // WARP_SIZE:
            warp = b.bitwise_and(warp, warps_m - 1)
        row_in = b.bitwise_and(lane, 7)
        row = core.add(core.add(core.mul(core.add(b.bitwise_and(matrix, 1), 2 * q), 8 * warps_m),
                                core.mul(warp, 8)), row_in)
        col = core.add(core.mul(b.shr(lane, 4), per_row), k0)
        return list(b.ldmatrix(array, core.add(rows.at(b, core, row, col, row_in), base), 4))

    def hoist_fragments(self, region) -> None:
        """For each tensor-core dot of a fold's body whose A comes from before the loop (attention's
        query tile), read A's fragments once, before the loop: the trips reuse them from registers."""
        scratch = self.scratch
        inside = {v for o in region.walk() for v in o.results} | set(region.args)
        for dot in region.ops:
            kind = dot.opcode == "dot" and self.mma_kind(dot)
            if not kind or dot.operands[0] in inside or dot in self.a_fragments or dot in self.a_staged:
                continue
            a = self.env[dot.operands[0]]
            if isinstance(a, Deferred) or self.held_a(dot, kind, a):
                continue
            a = self.registers.regs(a)
            (m, kk) = a.shape
            if self.on_warpgroups(dot):  # staged once where the wgmma of every trip reads it
                el = STAGED[kind]
                array = self.held.get(dot)
                if array is None:
                    array, shared = self.core.launch.declare_scratch(el, m * kk, "held")
                    shared.attrs = SharedAttrs(name=array.name, dtype=el, count=m * kk, align=ALIGN)
                    self.held[dot] = array
                self.b.barrier()  # (a loop around the fold: every warpgroup's last wgmma read it)
                self.staging.fill(array, a, 0, self.warpgroups.a_rows(dot, el.itemsize), False, kind)
                self.written(True)
                self.a_staged[dot] = (array, 0)
                continue
            rows = staged_rows(kk, STAGED[kind].itemsize)
            array = scratch.scratch(STAGED[kind], m * rows.pitch, dot)
            scratch.before_write()
            self.staging.fill(array, a, 0, rows, False, kind)
            scratch.written()
            warps_m = self.T // WARP_SIZE // self.warps_n(dot)
            self.a_fragments[dot] = [[self.a_fragment(array, 0, rows, q, k0, warps_m)
                                      for q in range(m // (16 * warps_m))] for k0 in range(0, kk, kind.k)]
            scratch.dirty = True

    def b_fragments(self, kind, plan: Staging, array, base, k0, tiles_n, lane, row_in, matrix, layout: Mma) -> list:
        """Each of this warp's 8-column tiles' B fragment for the k-step at ``k0``: its ``p``-th
        is the result's tile ``p * warps_n + wn`` (the warp's place along the columns)."""
        b, core = self.b, self.core
        per_row = 16 // array.dtype.itemsize
        wn = layout.warps_n
        first = 0 if wn == 1 else core.mul(b.bitwise_and(b.shr(self.tid, 5 + layout.warps_m.bit_length() - 1), wn - 1), 8)
        out = []
        if plan.b_rows_n or kind.transposes:
            for p in range(0, tiles_n, 2):
                count = 4 if p + 1 < tiles_n else 2
                tile = core.add(core.mul(b.shr(matrix, 1), 8 * wn), 8 * wn * p) if count == 4 else 8 * wn * p
                tile = core.add(tile, first)
                half = b.bitwise_and(matrix, 1)
                if plan.b_rows_n:  # n rows of k: the fragment's own rows, read straight
                    row, col, order = core.add(tile, row_in), core.add(core.mul(half, per_row), k0), MatrixOrder.ROW
                else:  # k rows of n: transposed on the way
                    row, col, order = core.add(core.add(core.mul(half, 8), row_in), k0), tile, MatrixOrder.TRANS
                got = b.ldmatrix(array, core.add(plan.b_rows.at(b, core, row, col, row_in), base), count, order)
                each = len(got) * 2 // count  # the elements of one 8-column tile
                out.extend(list(got[i:i + each]) for i in range(0, len(got), each))
            return out
        g, t = b.shr(lane, 2), b.bitwise_and(lane, 3)
        rows = [(t, 0), (t, 4)] if kind is MmaKind.TF32 else [(core.mul(t, 4), d) for d in (0, 1, 2, 3, 16, 17, 18, 19)]
        for p in range(tiles_n):
            col = core.add(core.add(g, 8 * wn * p), first)
            out.append([self.scratch.load(array, core.add(plan.b_rows.at(b, core, core.add(r, k0 + d), col), base),
                                          array.dtype) for r, d in rows])
        return out
