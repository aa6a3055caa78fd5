"""The tile distribution: a tile-level graph (``for_each_tile``) rewritten into an ordinary
SIMT block-launch graph (``for_each_block``, one CTA of ``warps`` * 32 threads per program)
that the cuda, ptx and llvm lowerings compile unchanged.

The new graph is traced by the ordinary builder (so it is verified, and then optimised,
like any kernel), driven by a walk over the tile graph's ops:

- each tile value gets a :mod:`layout <accy.lowering.layouts>` and, in every thread, one
  scalar value per register.  Values computed from ``arange``, ``splat`` and elementwise
  ops of them (index arithmetic, masks) stay *lazy*: a function of the element's
  coordinates, evaluated in whatever layout a user of the value wants, so broadcasts,
  reshapes and transposes of them move nothing;
- elementwise ops work register by register in one layout (the canonical
  :class:`~accy.lowering.layouts.Blocked` one, or an operand's); a reduction's result is
  left in the :class:`~accy.lowering.layouts.Slice` of its operand's layout, so
  ``x - x.max(axis=1)[:, None]`` broadcasts it back without moving data; every other
  change of layout goes through shared memory;
- reductions combine each thread's registers, then the lanes of a warp with shuffles,
  then the warps through shared memory; a rank-1 reduction's scalar is handed to every
  thread through shared memory, so later branches on it are uniform;
- scans run in the same three steps (each thread's registers, shuffles within the warp,
  shared memory across warps), or serially per line in shared memory where the layout
  holds replicas past the line's end; ``dot`` multiplies from shared-memory copies of its
  operands with FMAs (tensor cores are the next issue's);
- loads and stores are guarded by their masks (``if``) so masked-off memory is never
  touched, and a store or atomic is done only by the owner of each element (a replica
  never stores; a scalar store or atomic by thread 0 alone);
- a load or store whose offsets are affine with (or, for a tensor's strides, checked to have)
  unit stride along the last axis moves each thread's run of consecutive elements up to 16
  bytes at a time (one ``load``/``store`` of ``vec`` elements: ld.global.v4 and the like)
  where the buffer's address (``aligned``), the base and the other strides keep every group
  aligned, checked where the access is (LLVM hoists it out of loops), and the group is inside
  the mask; element by element otherwise.

Shared memory is one scratch array per element type, sized to the largest need and
reused behind barriers; a program needing more than 48 KiB is a TraceError naming the op.
"""

from __future__ import annotations

import contextlib
import math
from typing import Callable

import attrs

from ..dsl.combines import COMBINES, accumulator_type
from ..dsl.ir import Graph, Op, Value, constant_of
from ..dsl.ops import (AlignedAttrs, AtomicAttrs, BlockUnit, Combine, LoadAttrs, MatrixOrder, MmaKind, Precision,
                       SharedAttrs, Space, StoreAttrs)
from ..dsl.schedule import Limits
from ..dsl.trace import trace
from ..dsl.traced import _NO_CTX, SharedArray, Traced, axis
from ..dsl.types import DType, TileType, bf16, boolean, element_type, f16, f32, f64, i8, index, u8
from ..errors import TraceError
from .layouts import Blocked, Expand, Layout, Mma, Permute, Slice, unit_reshape
from .tensor_cores import Deferred, TensorCoreDot
from .tile_access import Shapes, conjuncts
from ..targets import WARP_SIZE

SHARED_LIMIT = Limits.default.max_shared_bytes
# the resident threads per SM a program's registers are budgeted for: its threads hold whole
# tiles (a 64x64 f32 tile is 32 registers a thread at 4 warps), so the SIMT level's 512 (128
# registers) spills them (layer norm, flash attention); 256 leave ptxas up to 255 a thread
RESIDENT_THREADS = 256


@attrs.frozen(eq=False)
class Regs:
    """A tile held in registers: ``values[r]`` is register ``r`` of this thread, in ``layout``."""

    layout: Layout
    dtype: DType
    values: tuple

    @property
    def shape(self) -> tuple[int, ...]:
        return self.layout.shape


@attrs.frozen(eq=False)
class VectorPlan:
    """A tile access done ``vec`` elements at a time where ``fast`` (its alignment and unit
    stride, checked at run time) holds: ``groups`` lists each group's registers; ``box``: its
    mask is a box (see :class:`~accy.lowering.tile_access.Box`)."""

    vec: int
    fast: object  # a Traced bool, or None where nothing needs checking at run time
    groups: tuple
    box: bool


@attrs.frozen(eq=False)
class Lazy:
    """A tile not yet computed: ``at(coords)`` records its element at ``coords`` (ints or
    traced index values); ``constant`` is its value when every element is one constant."""

    shape: tuple[int, ...]
    dtype: DType
    at: Callable
    constant: object = None




def _strides(shape) -> tuple[int, ...]:
    out, s = [], 1
    for n in reversed(shape):
        out.append(s)
        s *= n
    return tuple(reversed(out))


def distribute(graph: Graph, tensor_cores: bool = False) -> Graph:
    """The SIMT block-launch graph that computes what the tile graph ``graph`` does; with
    ``tensor_cores`` (NVPTX at sm_80 and later) a ``dot`` whose shapes and types allow it runs
    on ``mma.sync``."""
    if not graph.is_tile_launch:
        raise ValueError(f"distribute: kernel '{graph.name}' is not a tile launch")
    return _Distributor(graph, tensor_cores).run()


class _Distributor(TensorCoreDot):
    def __init__(self, graph: Graph, tensor_cores: bool = False):
        self.graph = graph
        self.tensor_cores = tensor_cores
        self.launch = graph.launch_op
        self.T = self.launch.attrs.warps * WARP_SIZE
        self.env: dict[Value, object] = {}
        self.scopes: list[dict] = [{}]
        self.tagged: set[Op] = set()  # the ops themselves: an id() is reused once its op is freed
        self.used = {v for op in graph.body.walk() for v in op.operands}
        self.pool: dict[DType, list] = {}  # element type -> [SharedArray, its shared op]
        self.dirty = False  # scratch read since the last barrier
        self.current_op: Op | None = None  # the tile op being rewritten (for errors)
        self.shapes = Shapes()  # the affine forms of offsets and the boxes of masks (vector accesses)
        self.direct = self.direct_loads()  # tile_loads that go straight to a dot's shared staging
        self.pipelined: dict = {}  # dot -> (its staging array, A's and B's base) in a pipelined fold
        self.collecting: list | None = None  # the dots a fold's trial walk stages, where wanted
        self.stage_arrays: dict = {}  # element type -> the shared array of pipelined folds' stages
        self.stage_ops: dict = {}  # element type -> its shared op
        self.a_fragments: dict = {}  # dot -> its A's fragments, read before the fold it is in

    def run(self) -> Graph:
        return trace(self.graph.name, self.graph.params, self._kernel)

    # -- scopes: caches of what was recorded in a region are not seen outside it --------
    def lookup(self, key):
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        return None

    def remember(self, key, value):
        self.scopes[-1][key] = value
        return value

    @contextlib.contextmanager
    def region(self, inner):
        saved = self.b
        self.b = inner
        self.scopes.append({})
        try:
            yield
        finally:
            self.scopes.pop()
            self.b = saved

    # -- the walk ---------------------------------------------------------------------
    def _kernel(self, k, args) -> None:
        self.b = k
        self.env.update((old, Traced(new)) for old, new in zip(self.graph.body.args, k.block.args))
        for op in self.graph.body.ops:
            if op is self.launch:
                self._open_launch(op)
            else:
                self._op(op)

    def _open_launch(self, op: Op) -> None:
        names = op.attrs.axes
        thread = next(n for n in ("thread", "lane_", "thread_") if n not in names)
        grid = tuple(axis(name, self.env[v]) for name, v in zip(names, op.operands))
        region = op.regions[0]

        def program(inner, block, threads):
            self.b = inner
            self.info = inner._launch_info()
            self.tid = threads[thread]
            for name, arg in zip(names, region.args):
                self.env[arg] = block[name]
            self._walk(region)
            for array, shared in self.pool.values():  # each scratch sized to its largest use
                shared.attrs = SharedAttrs(name=array.name, dtype=array.dtype, count=array.count)
            for dtype, array in self.stage_arrays.items():
                self.stage_ops[dtype].attrs = SharedAttrs(name=array.name, dtype=dtype, count=array.count)

        outer = self.b
        outer.for_each_block(grid=grid, threads=(axis(thread, self.T),), body=program)
        self.b = outer
        block = next(o for o in reversed(outer.block.ops) if o.opcode == "for_each_block")
        block.attrs = attrs.evolve(block.attrs, min_blocks=max(1, RESIDENT_THREADS // self.T), unit=BlockUnit.PROGRAM)

    def _walk(self, block) -> list:
        for op in block.ops:
            if op.opdef.terminator:
                return [self.env[v] for v in op.operands]
            self._op(op)
        return []

    def _op(self, op: Op) -> None:
        self.current_op = op
        ops = self.b.block.ops
        start = len(ops)
        handler = getattr(self, f"_op_{op.opcode}", None)
        if handler is not None:
            handler(op)
        elif any(isinstance(v.type, TileType) for v in op.results):
            self._pointwise(op)
        else:
            self._scalar(op)
        for new in ops[start:]:  # what it recorded reports the tile op's line
            for o in new.walk():
                if o not in self.tagged:
                    self.tagged.add(o)
                    o.location = op.location

    def _record(self, opcode: str, operands, attrs_=None) -> Op:
        return self.b._record(opcode, [v.value if isinstance(v, Traced) else v for v in operands], attrs_)

    def _scalar(self, op: Op) -> None:
        new = self._record(op.opcode, [self.env[v] for v in op.operands], op.attrs)
        for old, value in zip(op.results, new.results):
            self.env[old] = Traced(value)

    # -- small arithmetic on coordinates (Python ints fold here) ------------------------
    def const(self, value, dtype=index) -> Traced:
        return self.b.constant(value, dtype)

    def traced(self, x, dtype=index) -> Traced:
        return x if isinstance(x, Traced) else self.const(x, dtype)

    def add(self, a, b):
        if isinstance(a, int) and isinstance(b, int):
            return a + b
        if isinstance(b, int) and b == 0:
            return a
        if isinstance(a, int) and a == 0:
            return b
        return self.b.add(self.traced(a), self.traced(b))

    def mul(self, a, k: int):
        if isinstance(a, int):
            return a * k
        if k == 1:
            return a
        if k == 0:
            return 0
        return self.b.mul(a, k)

    def divmod_(self, a, k: int):
        if isinstance(a, int):
            return divmod(a, k)
        if k == 1:
            return a, 0
        return self.b.floor_div(a, k), self.b.mod(a, k)

    def flat(self, coords, shape, base=0):
        """The row-major position of ``coords`` in ``shape`` (plus ``base``)."""
        out = base
        for c, s in zip(coords, _strides(shape)):
            out = self.add(out, self.mul(c, s))
        return out

    def unflat(self, e, shape):
        out = []
        for n in reversed(shape):
            if n == 1:
                out.append(0)
                continue
            q, r = self.divmod_(e, n)
            out.append(r)
            e = q
        return tuple(reversed(out))

    def all_of(self, conds):
        conds = [c for c in conds if c is not None]
        out = None
        for c in conds:
            out = c if out is None else self.b.logical_and(out, c)
        return out

    # -- layouts: where each register's element is -----------------------------------
    def canonical(self, shape) -> Layout:
        return Blocked(tuple(shape), self.T)

    def thread_part(self, d):
        """This thread's part of a coordinate along ``d``: t_d * per_thread."""
        if d.threads == 1:
            return None
        key = ("thread", d.stride, d.threads, d.per_thread)
        found = self.lookup(key)
        if found is not None:
            return found
        t = self.tid
        shift = d.stride.bit_length() - 1
        if shift:
            t = self.b.shr(t, shift)
        if d.stride * d.threads < self.T:
            t = self.b.bitwise_and(t, d.threads - 1)
        t = self.mul(t, d.per_thread)
        return self.remember(key, t)

    def coords(self, layout: Layout) -> list[tuple]:
        """Each register's coordinates (ints where they do not depend on the thread)."""
        key = ("coords", layout.dims)
        found = self.lookup(key)
        if found is not None:
            return found
        parts = [self.thread_part(d) for d in layout.dims]
        out = []
        for r in range(layout.registers):
            cs = []
            for d, j, part in zip(layout.dims, layout.register_indices(r), parts):
                if part is None:
                    cs.append(d.static(j))
                    continue
                c = self.add(part, d.static(j))
                if d.wraps(j):
                    c = self.b.mod(c, d.size)
                cs.append(c)
            out.append(tuple(cs))
        return self.remember(key, out)

    def owners(self, layout: Layout) -> list:
        """Per register: a bool that holds where this thread owns its element, or None (always)."""
        key = ("owners", layout.dims)
        found = self.lookup(key)
        if found is not None:
            return found
        common = None
        if layout.replica_bits:
            common = self.b.eq(self.b.bitwise_and(self.tid, layout.replica_bits), 0)
        parts = [self.thread_part(d) for d in layout.dims]
        out = []
        for r in range(layout.registers):
            conds = [common]
            for d, j, part in zip(layout.dims, layout.register_indices(r), parts):
                if part is not None and d.wraps(j):
                    conds.append(self.b.lt(self.add(part, d.static(j)), d.size))
            out.append(self.all_of(conds))
        return self.remember(key, out)

    # -- tiles in registers --------------------------------------------------------------
    def regs(self, tile, layout: Layout | None = None, op: Op | None = None) -> Regs:
        """``tile`` in ``layout`` (its own, or the canonical one, when None)."""
        if isinstance(tile, Deferred):
            tile = self.load_now(tile)
        if isinstance(tile, Regs):
            if layout is None or tile.layout.same(layout):
                return tile
            return self.convert(tile, layout, op)
        layout = layout or self.canonical(tile.shape)
        key = ("lazy", tile, layout.dims)
        found = self.lookup(key)
        if found is not None:
            return found
        values = tuple(tile.at(c) for c in self.coords(layout))
        return self.remember(key, Regs(layout, tile.dtype, values))

    def mask(self, tile, layout: Layout) -> list:
        """A mask's registers in ``layout``; None for a register whose mask is always true."""
        if isinstance(tile, Lazy) and tile.constant is True:
            return [None] * layout.registers
        return list(self.regs(tile, layout).values)

    # -- shared memory --------------------------------------------------------------
    def scratch(self, dtype: DType, count: int, op: Op) -> SharedArray:
        dtype = u8 if dtype.is_bool else dtype
        entry = self.pool.get(dtype)
        total = sum(a.count * a.dtype.itemsize for a, _ in self.pool.values() if a.dtype != dtype)
        needed = total + max(count, entry[0].count if entry else 0) * dtype.itemsize
        if needed > SHARED_LIMIT:
            what = f"{op.opcode} of a {', '.join(str(v.type) for v in op.operands if isinstance(v.type, TileType))}"
            raise TraceError(f"{what}: its program needs {needed} bytes of shared memory on a GPU ({count} {dtype} "
                             f"here), over the limit of {SHARED_LIMIT} bytes (48 KiB) per program; use smaller tiles",
                             op.location)
        if entry is None:
            body = self.info.body
            array = body._declare_shared(self.info, dtype, count, None, first=True, stem="tile")
            entry = self.pool[dtype] = [array, body.block.ops[0]]
        entry[0].count = max(entry[0].count, count)
        return entry[0]

    def before_write(self) -> None:
        if self.dirty:  # every thread has read the scratch's last contents before it changes
            self.b.barrier()
            self.dirty = False

    def written(self) -> None:
        self.b.barrier()

    def store_shared(self, array: SharedArray, value, at) -> None:
        if value.type.is_bool:
            value = self.b.cast(value, u8)
        self.b.store(array, value, at)

    def store_owned(self, array: SharedArray, x: Regs, at_of, value_of=lambda v: v) -> None:
        """Each register of ``x`` written to shared memory at ``at_of(coordinates)`` by the owner
        of its element only: a replica (a thread with replica bits, or a register past the
        tile's end) holding the same element would store it again, a race (registers guarded
        alike share one branch, so their stores can still merge into vector stores)."""
        owners = self.owners(x.layout)
        groups: dict = {}
        for r, (c, v) in enumerate(zip(self.coords(x.layout), x.values)):
            cond = owners[r]
            groups.setdefault(None if cond is None else id(cond), (cond, []))[1].append((c, v))

        def put(items):
            for c, v in items:
                self.store_shared(array, value_of(v), at_of(c))

        for cond, items in groups.values():
            if cond is None:
                put(items)
            else:
                self.b.if_(cond, lambda inner, items=items: self._in(inner, lambda: put(items)))

    def load_shared(self, array: SharedArray, at, dtype: DType) -> Traced:
        value = self.b.load(array, at)
        self.dirty = True
        return self.b.cast(value, boolean) if dtype.is_bool else value

    def convert(self, x: Regs, layout: Layout, op: Op | None, source_of=None) -> Regs:
        """``x`` in ``layout`` through shared memory: each register is written at its element's
        row-major position, then read back where ``layout`` wants it (``source_of`` maps a
        coordinate of the new tile to one of ``x``, for broadcasts and reshapes)."""
        key = ("convert", x, layout.dims, source_of is None)
        found = self.lookup(key) if source_of is None else None
        if found is not None:
            return found
        array = self.scratch(x.dtype, math.prod(x.shape), op or self.current_op)
        self.before_write()
        self.store_owned(array, x, lambda c: self.flat(c, x.shape))
        self.written()
        values = []
        for c in self.coords(layout):
            src = c if source_of is None else source_of(c)
            values.append(self.load_shared(array, self.flat(src, x.shape), x.dtype))
        out = Regs(layout, x.dtype, tuple(values))
        return self.remember(key, out) if source_of is None else out

    def stage(self, array: SharedArray, x: Regs, place, convert=lambda v: v) -> None:
        """Each element of ``x`` this thread owns into ``array`` at ``place(coords)`` (a replica's
        thread stores nothing: two threads writing one element would race)."""
        for c, v, owner in zip(self.coords(x.layout), x.values, self.owners(x.layout)):
            at, value = place(c), convert(v)
            if owner is None:
                self.store_shared(array, value, at)
            else:
                self.b.if_(owner, lambda inner, at=at, value=value: self._in(
                    inner, lambda: self.store_shared(array, value, at)))

    def scalar_to_all(self, value: Traced, op: Op) -> Traced:
        """``value`` as thread 0 holds it, in every thread, read from shared memory at a fixed
        place (so the uniformity analysis sees a value every thread shares)."""
        array = self.scratch(value.type, 1, op)
        self.before_write()
        self.b.if_(self.b.eq(self.tid, 0), lambda inner: self._in(inner, lambda: self.store_shared(array, value, 0)))
        self.written()
        return self.load_shared(array, 0, value.type)

    def _in(self, inner, fn):
        with self.region(inner):
            result = fn()
        return result

    # -- tile creation and movement --------------------------------------------------
    def _op_splat(self, op: Op) -> None:
        x = self.env[op.operands[0]]
        t = op.result.type
        self.env[op.result] = Lazy(t.shape, t.dtype, lambda c: x, constant_of(x.value))

    def _op_arange(self, op: Op) -> None:
        self.env[op.result] = Lazy((op.attrs.n,), index, lambda c: self.traced(c[0]))

    def _op_broadcast(self, op: Op) -> None:
        x = self.env[op.operands[0]]
        shape = op.attrs.shape
        src_shape = x.shape
        source = lambda c: tuple(0 if n == 1 else ci for n, ci in zip(src_shape, c))  # noqa: E731
        if isinstance(x, Lazy):
            self.env[op.result] = Lazy(shape, x.dtype, lambda c: x.at(source(c)), x.constant)
            return
        target = self._unsliced(x.layout, shape)
        if all(n == 1 or a == b for n, a, b in zip(src_shape, x.layout.dims, target.dims)):
            values = []
            for r in range(target.registers):
                js = tuple(0 if n == 1 else j for n, j in zip(src_shape, target.register_indices(r)))
                values.append(x.values[x.layout.register(js)])
            self.env[op.result] = Regs(target, x.dtype, tuple(values))
            return
        self.env[op.result] = self.convert(x, target, op, source)

    def _unsliced(self, layout: Layout, shape) -> Layout:
        """Where to broadcast a tile in ``layout`` to ``shape``: a reduction's result back into
        the kind of layout it came from (``x.max(axis=1)[:, None]`` to an Mma layout like x's,
        which holds it in the same registers), else the canonical layout."""
        shape = tuple(shape)
        if isinstance(layout, Expand) and isinstance(layout.parent, Slice):
            parent = layout.parent.parent
            if parent.shape == shape:
                return parent
            if isinstance(parent, Mma) and Mma.fits(shape, self.T):
                return Mma(shape, self.T)
        return self.canonical(shape)

    def _op_reshape(self, op: Op) -> None:
        x = self.env[op.operands[0]]
        shape = op.attrs.shape
        if isinstance(x, Deferred):  # a unit reshape (see direct_loads)
            self.env[op.result] = x.then(("reshape", shape), shape)
            return
        old = x.shape
        if unit_reshape(old, shape):
            def source(c):
                kept = iter(ci for n, ci in zip(shape, c) if n != 1)
                return tuple(0 if n == 1 else next(kept) for n in old)
        else:
            def source(c):
                return self.unflat(self.flat(c, shape), old)
        if isinstance(x, Lazy):
            self.env[op.result] = Lazy(shape, x.dtype, lambda c: x.at(source(c)), x.constant)
        elif unit_reshape(old, shape):
            self.env[op.result] = self.unit_reshape_regs(x, shape)
        else:
            self.env[op.result] = self.convert(x, self.canonical(shape), op, source)

    def unit_reshape_regs(self, x: Regs, shape) -> Regs:
        return Regs(Expand(x.layout, tuple(shape)), x.dtype, x.values)

    def trans_regs(self, x: Regs, perm) -> Regs:
        layout = Permute(x.layout, perm)

        def source(c):
            out = [0] * len(perm)
            for k, p in enumerate(perm):
                out[p] = c[k]
            return tuple(out)

        values = tuple(x.values[x.layout.register(source(layout.register_indices(r)))]
                       for r in range(layout.registers))
        return Regs(layout, x.dtype, values)

    def _op_trans(self, op: Op) -> None:
        x = self.env[op.operands[0]]
        perm = op.attrs.perm
        shape = tuple(x.shape[p] for p in perm)
        if isinstance(x, Deferred):  # B's transpose (see direct_loads)
            self.env[op.result] = x.then(("trans", perm), shape)
            return

        def source(c):
            out = [0] * len(perm)
            for k, p in enumerate(perm):
                out[p] = c[k]
            return tuple(out)

        if isinstance(x, Lazy):
            self.env[op.result] = Lazy(shape, x.dtype, lambda c: x.at(source(c)), x.constant)
            return
        self.env[op.result] = self.trans_regs(x, perm)

    # -- elementwise -------------------------------------------------------------------
    def _pointwise(self, op: Op) -> None:
        xs = [self.env[v] for v in op.operands]
        t = op.result.type
        if all(isinstance(x, Lazy) for x in xs):
            def at(c):
                return Traced(self._record(op.opcode, [x.at(c) for x in xs], op.attrs).result)

            self.env[op.result] = Lazy(t.shape, t.dtype, at)
            return
        held = [x for x in xs if isinstance(x, Regs)]
        canonical = self.canonical(t.shape)
        layout = canonical if any(x.layout.same(canonical) for x in held) else held[0].layout
        regs = [self.regs(x, layout, op) for x in xs]
        values = tuple(Traced(self._record(op.opcode, vs, op.attrs).result) for vs in zip(*(r.values for r in regs)))
        self.env[op.result] = Regs(layout, t.dtype, values)

    # -- reductions ------------------------------------------------------------------------
    def identity(self, combine: Combine, dtype: DType) -> Traced:
        return self.const(COMBINES[combine].identity(dtype), dtype)

    def combine(self, combine: Combine, a, b):
        return Traced(self._record(COMBINES[combine].scalar_op, [a, b]).result)

    def _axis_bits(self, d) -> tuple[list[int], list[int]]:
        """The thread bits a dimension uses: (those within a warp, those across warps)."""
        if d.threads == 1:
            return [], []
        lo = d.stride.bit_length() - 1
        bits = list(range(lo, lo + d.threads.bit_length() - 1))
        return [k for k in bits if k < 5], [k for k in bits if k >= 5]

    def _reduce_lines(self, x: Regs, axis: int, partials: list, combine_fn, op: Op) -> list:
        """Combine ``partials`` (per group of registers: a tuple of values) across the threads
        along ``axis``: shuffles within the warp, then shared memory across warps."""
        d = x.layout.dims[axis]
        inwarp, cross = self._axis_bits(d)
        for k in reversed(inwarp):
            partials = [combine_fn(p, tuple(self.b.shuffle_xor(v, 1 << k) for v in p)) for p in partials]
        if not cross:
            return partials
        axis_mask = d.bits
        lo, width = cross[0], 1 << len(cross)
        base = self.b.bitwise_and(self.tid, (self.T - 1) & ~axis_mask) if (self.T - 1) & ~axis_mask else 0
        count = len(partials) * self.T
        places, used = [], {}  # each component's array and where its part starts (two of one type share one)
        for v in partials[0]:
            key = u8 if v.type.is_bool else v.type
            places.append(used.get(key, 0))
            used[key] = places[-1] + count
        arrays = [self.scratch(v.type, used[u8 if v.type.is_bool else v.type], op) for v in partials[0]]
        self.before_write()
        for g, p in enumerate(partials):
            for array, first, v in zip(arrays, places, p):
                self.store_shared(array, v, self.add(self.tid, first + g * self.T))
        self.written()
        out = []
        for g in range(len(partials)):
            acc = None
            for w in range(width):
                here = tuple(self.load_shared(array, self.add(base, first + g * self.T + (w << lo)), v.type)
                             for array, first, v in zip(arrays, places, partials[g]))
                acc = here if acc is None else combine_fn(acc, here)
            out.append(acc)
        return out

    def _groups(self, layout: Layout, axis: int) -> list[list[int]]:
        """The registers of each line along ``axis``, lines in the order of the Slice's registers."""
        groups: dict = {}
        for r in range(layout.registers):
            js = layout.register_indices(r)
            groups.setdefault(js[:axis] + js[axis + 1:], []).append(r)
        return list(groups.values())

    def _op_reduce(self, op: Op) -> None:
        x = self.regs(self.env[op.operands[0]])
        combine, axis = op.attrs.op, op.attrs.axis
        dtype = x.dtype
        acc_type = accumulator_type(combine, dtype)
        values = [self.b.cast(v, acc_type) if acc_type != dtype else v for v in x.values]
        layout = x.layout
        d = layout.dims[axis]
        if not COMBINES[combine].idempotent:  # a replica along the axis counts as the identity
            part = self.thread_part(d)
            for r in range(layout.registers):
                j = layout.register_indices(r)[axis]
                if part is not None and d.wraps(j):
                    inside = self.b.lt(self.add(part, d.static(j)), d.size)
                    values[r] = self.b.select(inside, values[r], self.identity(combine, acc_type))
        partials = []
        for group in self._groups(layout, axis):
            acc = values[group[0]]
            for r in group[1:]:
                acc = self.combine(combine, acc, values[r])
            partials.append((acc,))
        partials = self._reduce_lines(x, axis, partials, lambda p, q: (self.combine(combine, p[0], q[0]),), op)
        results = [self.b.cast(p[0], dtype) if acc_type != dtype else p[0] for p in partials]
        self._reduced(op, x, axis, results)

    def _reduced(self, op: Op, x: Regs, axis: int, results: list) -> None:
        if len(x.shape) == 1:
            (value,) = results
            varies = self.info.varies(value.value)
            self.env[op.result] = self.scalar_to_all(value, op) if varies else value
        else:
            self.env[op.result] = Regs(Slice(x.layout, axis), element_type(op.result.type), tuple(results))

    def _op_argreduce(self, op: Op) -> None:
        x = self.regs(self.env[op.operands[0]])
        largest, axis = op.attrs.op is Combine.MAX, op.attrs.axis
        floats = x.dtype.is_float
        b = self.b

        def better(p, q):  # symmetric: the better pair, of equals the lower position (NumPy's rule)
            (pv, pi), (qv, qi) = p, q
            wins = b.gt(qv, pv) if largest else b.lt(qv, pv)
            tie = b.eq(qv, pv)
            if floats:  # NaN beats numbers; two NaNs tie
                pn, qn = b.isnan(pv), b.isnan(qv)
                wins = b.logical_or(wins, b.logical_and(qn, b.logical_not(pn)))
                tie = b.logical_or(tie, b.logical_and(pn, qn))
            take = b.logical_or(wins, b.logical_and(tie, b.lt(qi, pi)))
            return b.select(take, qv, pv), b.select(take, qi, pi)

        coords = self.coords(x.layout)
        partials = []
        for group in self._groups(x.layout, axis):
            acc = None
            for r in group:
                here = (x.values[r], self.traced(coords[r][axis]))
                acc = here if acc is None else better(acc, here)
            partials.append(acc)
        partials = self._reduce_lines(x, axis, partials, better, op)
        self._reduced(op, x, axis, [p[1] for p in partials])

    # -- scans ---------------------------------------------------------------------------
    def _op_scan(self, op: Op) -> None:
        x = self.regs(self.env[op.operands[0]])
        combine, axis = op.attrs.op, op.attrs.axis
        dtype = x.dtype
        acc_type = accumulator_type(combine, dtype)
        d = x.layout.dims[axis]
        lines = len(self._groups(x.layout, axis))
        cross = self._axis_bits(d)[1]
        scratch = lines * d.reps * self.T * acc_type.itemsize if cross else 0
        if any(d.wraps(j) for j in range(d.registers)) or scratch > SHARED_LIMIT // 3:
            return self._serial_scan(op, x, acc_type)  # replicas past the end, or too many lines at once
        self._parallel_scan(op, x, acc_type)

    def _parallel_scan(self, op: Op, x: Regs, acc_type: DType) -> None:
        """Each thread scans its registers along the axis (runs of ``per_thread`` consecutive
        elements, ``reps`` of them); the runs' totals are scanned across the threads along the
        axis, with shuffles within the warp (Hillis-Steele) then through shared memory across
        warps; each run adds what the threads before it hold, and each repetition what the
        repetitions before it total.  Float sums are reordered (the gamma_n bound holds)."""
        combine, axis = op.attrs.op, op.attrs.axis
        dtype, layout = x.dtype, x.layout
        d = layout.dims[axis]
        b = self.b
        fn = lambda p, q: self.combine(combine, p, q)  # noqa: E731
        values = [b.cast(v, acc_type) if acc_type != dtype else v for v in x.values]
        inwarp, cross = self._axis_bits(d)
        lo = d.stride.bit_length() - 1
        part = None  # this thread's index along the axis, within its warp
        if inwarp:
            part = b.bitwise_and(b.shr(self.tid, lo) if lo else self.tid, (1 << len(inwarp)) - 1)
        groups = self._groups(layout, axis)
        runs = []  # per group and repetition: the registers of this thread's run, in order
        for group in groups:
            by_j = sorted(group, key=lambda r: layout.register_indices(r)[axis])
            runs.append([by_j[k * d.per_thread:(k + 1) * d.per_thread] for k in range(d.reps)])
        scanned = {}
        totals = []  # per group and repetition: this thread's run total
        for group_runs in runs:
            for run in group_runs:
                acc = None
                for r in run:
                    acc = values[r] if acc is None else fn(acc, values[r])
                    scanned[r] = acc
                totals.append(acc)
        # inclusive scans of the run totals over the lanes along the axis
        inclusive = list(totals)
        for i in range(len(inwarp)):
            delta = 1 << (lo + i)
            ups = [b.shuffle_up(v, delta) for v in inclusive]
            take = b.ge(part, 1 << i)
            inclusive = [b.select(take, fn(u, v), v) for u, v in zip(ups, inclusive)]
        identity = self.identity(combine, acc_type)
        if inwarp:
            first = b.eq(part, 0)
            before = [b.select(first, identity, b.shuffle_up(v, 1 << lo)) for v in inclusive]
            last = ((1 << len(inwarp)) - 1) << lo  # the lane bits of the last thread of a warp's part
            src = b.bitwise_or(b.bitwise_and(self.tid, WARP_SIZE - 1), last)
            segment = [b.shuffle(v, src) for v in inclusive]  # the warp's part's total
        else:
            before, segment = [identity] * len(totals), list(totals)
        if cross:  # the totals of the warps before this one along the axis, through shared memory
            array = self.scratch(acc_type, len(totals) * self.T, op)
            self.before_write()
            for g, v in enumerate(segment):
                self.store_shared(array, v, self.add(self.tid, g * self.T))
            self.written()
            clo, width = cross[0], 1 << len(cross)
            mine = b.bitwise_and(b.shr(self.tid, clo), width - 1)
            base = b.bitwise_and(self.tid, (self.T - 1) & ~(((width - 1) << clo)))
            earlier, whole = [], []
            for g in range(len(totals)):
                acc_before, acc_all = identity, None
                for w in range(width):
                    v = self.load_shared(array, self.add(base, g * self.T + (w << clo)), acc_type)
                    acc_before = b.select(b.gt(mine, w), fn(acc_before, v), acc_before)
                    acc_all = v if acc_all is None else fn(acc_all, v)
                earlier.append(acc_before)
                whole.append(acc_all)
            before = [fn(e, v) for e, v in zip(earlier, before)]
            segment = whole
        out = [None] * layout.registers
        g = 0
        for group_runs in runs:
            carry = None  # what the repetitions before this one total
            for run in group_runs:
                prefix = before[g] if carry is None else fn(carry, before[g])
                for r in run:
                    out[r] = fn(prefix, scanned[r])
                carry = segment[g] if carry is None else fn(carry, segment[g])
                g += 1
        out = tuple(b.cast(v, dtype) if acc_type != dtype else v for v in out)
        self.env[op.result] = Regs(layout, dtype, out)

    def _serial_scan(self, op: Op, x: Regs, acc_type: DType) -> None:
        """Each line scanned by one thread in shared memory (a layout with replicas past the end)."""
        combine, axis = op.attrs.op, op.attrs.axis
        dtype, shape = x.dtype, x.shape
        n, length = math.prod(shape), shape[axis]
        lines, step = n // length, _strides(shape)[axis]
        others = shape[:axis] + shape[axis + 1:]
        array = self.scratch(dtype, n, op)
        self.before_write()
        self.store_owned(array, x, lambda c: self.flat(c, shape))
        self.written()

        def line(l):  # the serial scan of line l (the row-major order of the other axes)
            cs = list(self.unflat(l, others)) if others else []
            base = self.flat(tuple(cs[:axis]) + (0,) + tuple(cs[axis:]), shape)

            def each(inner, i, acc):
                with self.region(inner):
                    at = self.add(base, self.mul(i, step))
                    v = self.b.load(array, at)
                    acc = self.combine(combine, acc, self.b.cast(v, acc_type) if acc_type != dtype else v)
                    self.b.store(array, self.b.cast(acc, dtype) if acc_type != dtype else acc, at)
                    return acc

            self.b.fold_range(0, length, 1, self.identity(combine, acc_type), each)

        for k in range(-(-lines // self.T)):
            l = self.add(self.tid, k * self.T)
            if (k + 1) * self.T > lines:
                self.b.if_(self.b.lt(l, lines), lambda inner, l=l: self._in(inner, lambda: line(l)))
            else:
                line(l)
        self.written()
        values = tuple(self.load_shared(array, self.flat(c, shape), dtype) for c in self.coords(x.layout))
        self.env[op.result] = Regs(x.layout, dtype, values)

    # -- dot -------------------------------------------------------------------------------
    def _op_dot(self, op: Op) -> None:
        kind = self.mma_kind(op)
        if kind is not None:
            return self.mma_dot(op, kind)
        a, b_, acc = (self.env[v] for v in op.operands)
        acc = self.regs(acc)
        a, b_ = self.regs(a), self.regs(b_)
        (m, kk), n = a.shape, b_.shape[1]
        c_type = acc.dtype
        tf32 = op.attrs.precision is Precision.TF32

        def widen(v):
            v = self.b.cast(v, c_type) if a.dtype != c_type else v
            return self.tf32(v) if tf32 else v

        array = self.scratch(c_type, m * kk + kk * n, op)
        self.before_write()
        self.store_owned(array, a, lambda c: self.flat(c, (m, kk)), widen)
        self.store_owned(array, b_, lambda c: self.flat(c, (kk, n), m * kk), widen)
        self.written()
        layout = acc.layout
        coords = self.coords(layout)
        rows, cols = {}, {}
        for r in range(layout.registers):
            j0, j1 = layout.register_indices(r)
            rows.setdefault(j0, self.mul(coords[r][0], kk))
            cols.setdefault(j1, self.add(coords[r][1], m * kk))
        floats = c_type.is_float

        def step(inner, k, accs):  # one k at a time: LLVM unrolls; unrolling here only lengthens live ranges
            with self.region(inner):
                accs = list(accs)
                av = {j: self.load_shared(array, self.add(at, k), c_type) for j, at in rows.items()}
                kn = self.mul(k, n)
                bv = {j: self.load_shared(array, self.add(at, kn), c_type) for j, at in cols.items()}
                for r in range(layout.registers):
                    j0, j1 = layout.register_indices(r)
                    if floats:
                        accs[r] = self.b.fma(av[j0], bv[j1], accs[r])
                    else:
                        accs[r] = self.b.add(accs[r], self.b.mul(av[j0], bv[j1]))
                return tuple(accs)

        result = self.b.fold_range(0, kk, 1, tuple(acc.values), step)
        self.dirty = True
        self.env[op.result] = Regs(layout, c_type, tuple(result))

    def tf32(self, x: Traced) -> Traced:
        """``x`` (f32) rounded to tf32's 10 mantissa bits, to nearest with ties away from zero, as
        ``cvt.rna.tf32.f32``: in f64, exactly (|x| / q + 0.5, floored, times q, with q the
        spacing of tf32 values at |x|, found by a binary search on the exponent)."""
        b = self.b
        a = b.cast(b.abs(x), f64)
        p = self.const(2.0 ** -126, f64)  # 2**e for the largest e <= log2 |x| (at least -126)
        for s in (128, 64, 32, 16, 8, 4, 2, 1):
            up = b.mul(p, self.const(2.0 ** s, f64))
            p = b.select(b.le(up, a), up, p)
        q = b.mul(p, self.const(2.0 ** -10, f64))
        rounded = b.mul(b.floor(b.add(b.div(a, q), self.const(0.5, f64))), q)
        rounded = b.cast(b.copysign(rounded, b.cast(x, f64)), f32)
        special = b.logical_or(b.isnan(x), b.isinf(x))
        return b.select(special, x, rounded)

    # -- memory -----------------------------------------------------------------------------
    def _access_layout(self, *tiles) -> Layout:
        held = next((t for t in tiles if isinstance(t, Regs)), None)
        return held.layout if held is not None else self.canonical(tiles[0].shape)

    def _expr(self, e):
        """A tile_access expression (an int, a tile-graph scalar, or (add|mul, a, b)) recorded here."""
        if isinstance(e, int):
            return e
        if isinstance(e, tuple):
            a, b = self._expr(e[1]), self._expr(e[2])
            if e[0] == "add":
                return self.add(a, b)
            if isinstance(a, int) or isinstance(b, int):
                return self.mul(b, a) if isinstance(a, int) else self.mul(a, b)
            return self.b.mul(a, b)
        return self.env[e]

    def vector_plan(self, op: Op, layout: Layout) -> VectorPlan | None:
        """How ``op`` (a tile_load or tile_store) may access memory ``vec`` elements at once, or None.

        Where its offsets are ``base + sum_d coef_d * i_d`` and each thread holds runs of
        consecutive elements along the last axis, a group of ``vec`` of them (up to 16 bytes)
        is one vector access when ``coef_last`` is 1, the buffer's address is a multiple of the
        group's bytes and ``base`` and every other ``coef_d`` are multiples of ``vec``: then
        every group starts at such an address.  That is checked once, where the access is (all
        of it is invariant in a loop around it); a group is taken whole only where its mask
        holds for every element (and, storing, this thread owns them), else element by element."""
        d = layout.dims[-1]
        itemsize = op.attrs.dtype.itemsize
        vec = 1
        while vec * 2 <= d.per_thread and vec * 2 * itemsize <= 16 and d.per_thread % (vec * 2) == 0:
            vec *= 2
        if vec == 1 or d.size % vec or op.attrs.space is not Space.GLOBAL:
            return None
        offsets, mask = op.operands[0], op.operands[-1]
        form = self.shapes.affine(offsets, conjuncts(mask))
        if form is None:
            return None
        shape = layout.shape
        conds = []
        for k, (coef, n) in enumerate(zip(form.coefs, shape)):
            want = 1 if k == len(shape) - 1 else 0  # the last axis's stride 1, the others' multiples of vec
            if n == 1 and k != len(shape) - 1:
                continue
            c = self._expr(coef)
            if isinstance(c, int):
                if (c != 1) if want else (c % vec):
                    return None
            elif want:
                conds.append(self.b.eq(c, 1))
            else:
                conds.append(self.b.eq(self.b.bitwise_and(c, vec - 1), 0))
        base = self._expr(form.base)
        if isinstance(base, int):
            if base % vec:
                return None
        else:
            conds.append(self.b.eq(self.b.bitwise_and(base, vec - 1), 0))
        aligned = Traced(self._record("aligned", [], AlignedAttrs(buffer=op.attrs.buffer,
                                                                  bytes=vec * itemsize)).result)
        groups = []  # each: the registers of vec consecutive elements along the last axis, in order
        for r in range(layout.registers):
            js = layout.register_indices(r)
            if js[-1] % vec == 0:
                groups.append([layout.register(js[:-1] + (js[-1] + k,)) for k in range(vec)])
        return VectorPlan(vec, self.all_of([aligned] + conds), tuple(groups), self.shapes.box(mask) is not None)

    def _group_guard(self, plan: VectorPlan, group, masks, owners=None):
        """Where ``group`` is taken whole: the plan's check, its mask over every element (the
        first and last for a box: the elements differ only along the last axis) and, storing,
        this thread owning them (its first and last: the same along the other axes)."""
        ends = [group[0], group[-1]]
        conds = [plan.fast] + [masks[r] for r in (ends if plan.box else group)]
        if owners is not None:
            conds += [owners[r] for r in ends]
        return self.all_of(conds)

    def _op_tile_load(self, op: Op) -> None:
        operands = tuple(self.env[v] for v in op.operands)
        if op in self.direct:
            self.env[op.result] = Deferred(op, operands, shape=op.result.type.shape)
            return
        self.env[op.result] = self.tile_load_regs(op, *operands)

    def load_element(self, op: Op, at) -> Traced:
        attrs_ = LoadAttrs(buffer=op.attrs.buffer, dtype=op.attrs.dtype, space=op.attrs.space)
        return Traced(self._record("load", [at], attrs_).result)

    def tile_load_regs(self, op: Op, offsets, other, mask) -> Regs:
        layout = self._access_layout(offsets, mask)
        offs = self.regs(offsets, layout, op).values
        masks = self.mask(mask, layout)
        attrs_ = LoadAttrs(buffer=op.attrs.buffer, dtype=op.attrs.dtype, space=op.attrs.space)
        load = lambda at: Traced(self._record("load", [at], attrs_).result)  # noqa: E731

        def each(r):
            at, m = offs[r], masks[r]
            if m is None:
                return load(at)
            return self.b.if_(m, lambda inner: self._in(inner, lambda: load(at)), lambda inner: other)

        plan = self.vector_plan(op, layout)
        if plan is None:
            return Regs(layout, op.attrs.dtype, tuple(each(r) for r in range(layout.registers)))
        wide = attrs.evolve(attrs_, vec=plan.vec)
        values = [None] * layout.registers

        def whole(group):
            return tuple(Traced(v) for v in self._record("load", [offs[group[0]]], wide).results)

        def gather(groups, fn):  # fn(inner) -> each group's values, flat; into their registers
            def run(inner):
                return self._in(inner, lambda: tuple(v for g in groups for v in fn(g)))
            return run

        guards = [self._group_guard(plan, g, masks) for g in plan.groups]
        if all(g is plan.fast for g in guards):  # no mask: one branch for the whole tile
            out = self.b.if_(plan.fast, gather(plan.groups, whole), gather(plan.groups, lambda g: [each(r) for r in g]))
            for r, v in zip((r for g in plan.groups for r in g), out):
                values[r] = v
        else:
            for g, guard in zip(plan.groups, guards):
                out = self.b.if_(guard, gather([g], whole), gather([g], lambda g: [each(r) for r in g]))
                for r, v in zip(g, out):
                    values[r] = v
        return Regs(layout, op.attrs.dtype, tuple(values))

    def _guarded_each(self, op: Op, access, plan_for=None) -> None:
        """``access(offset, value)`` for every register whose element this thread owns and whose
        mask holds (``plan_for(layout)``: a :class:`VectorPlan` for whole groups at once)."""
        offsets, value, mask = (self.env[v] for v in op.operands)
        layout = self._access_layout(value, offsets, mask)
        offs = self.regs(offsets, layout, op).values
        vals = self.regs(value, layout, op).values
        masks = self.mask(mask, layout)
        owners = self.owners(layout)

        def each(r):
            guard = self.all_of([owners[r], masks[r]])
            at, v = offs[r], vals[r]
            if guard is None:
                access(at, v)
            else:
                self.b.if_(guard, lambda inner: self._in(inner, lambda: access(at, v) and None))

        plan = plan_for(layout) if plan_for is not None else None
        if plan is None:
            for r in range(layout.registers):
                each(r)
            return
        wide = StoreAttrs(buffer=op.attrs.buffer, dtype=op.attrs.dtype, space=op.attrs.space, vec=plan.vec)

        def run(groups, fn):
            return lambda inner: self._in(inner, lambda: [fn(g) for g in groups] and None)

        whole = lambda g: self._record("store", [offs[g[0]]] + [vals[r] for r in g], wide)  # noqa: E731
        one_by_one = lambda g: [each(r) for r in g]  # noqa: E731
        guards = [self._group_guard(plan, g, masks, owners) for g in plan.groups]
        if all(g is plan.fast for g in guards):  # no mask, no replicas: one branch for the whole tile
            self.b.if_(plan.fast, run(plan.groups, whole), run(plan.groups, one_by_one))
            return
        for g, guard in zip(plan.groups, guards):
            self.b.if_(guard, run([g], whole), run([g], one_by_one))

    def _op_tile_store(self, op: Op) -> None:
        attrs_ = StoreAttrs(buffer=op.attrs.buffer, dtype=op.attrs.dtype, space=op.attrs.space)
        self._guarded_each(op, lambda at, v: self._record("store", [at, v], attrs_) and None,
                           lambda layout: self.vector_plan(op, layout))

    def _op_tile_atomic(self, op: Op) -> None:
        attrs_ = AtomicAttrs(op=op.attrs.op, buffer=op.attrs.buffer, dtype=op.attrs.dtype, space=op.attrs.space)
        self._guarded_each(op, lambda at, v: self._record("atomic", [at, v], attrs_) and None)

    def _op_store(self, op: Op) -> None:
        """A scalar store in a program happens once: thread 0 does it."""
        if op.attrs.space is not Space.GLOBAL:  # pragma: no cover - tile programs have no shared arrays
            return self._scalar(op)
        operands = [self.env[v] for v in op.operands]
        self.b.if_(self.b.eq(self.tid, 0),
                   lambda inner: self._in(inner, lambda: self._record("store", operands, op.attrs) and None))

    def _op_atomic(self, op: Op) -> None:
        """A scalar atomic in a program happens once (thread 0); what it returns reaches every thread."""
        operands = [self.env[v] for v in op.operands]
        if op.result not in self.used:
            self.b.if_(self.b.eq(self.tid, 0),
                       lambda inner: self._in(inner, lambda: self._record("atomic", operands, op.attrs) and None))
            return
        array = self.scratch(op.attrs.dtype, 1, op)
        self.before_write()

        def once():
            old = Traced(self._record("atomic", operands, op.attrs).result)
            self.store_shared(array, old, 0)

        self.b.if_(self.b.eq(self.tid, 0), lambda inner: self._in(inner, once))
        self.written()
        self.env[op.result] = self.load_shared(array, 0, op.attrs.dtype)

    # -- control ------------------------------------------------------------------------------
    def _flatten(self, values, layouts) -> list:
        out = []
        for v, layout in zip(values, layouts):
            if layout is None:
                out.append(v)
            else:
                out.extend(self.regs(v, layout).values)
        return out

    def _unflatten(self, olds, flat, layouts) -> None:
        flat = list(flat)
        for old, layout in zip(olds, layouts):
            if layout is None:
                self.env[old] = flat.pop(0)
            else:
                values = tuple(flat.pop(0) for _ in range(layout.registers))
                self.env[old] = Regs(layout, old.type.dtype, values)

    def _op_fold(self, op: Op) -> None:
        start, stop, *inits = (self.env[v] for v in op.operands)
        region = op.regions[0]
        # a fold whose dots may be pipelined is walked once first, to see how they stage
        candidate = self.tensor_cores and self.launch.attrs.num_stages > 1 and any(
            o.opcode == "dot" and self.mma_kind(o) for o in region.ops)
        if self.tensor_cores:
            self.hoist_fragments(region)
        outer, self.collecting = self.collecting, ([] if candidate else None)
        try:
            natural = (self._natural_layouts(op, start, inits)
                       if candidate or any(isinstance(x, Lazy) for x in inits) else {})
            dots = self.collecting
        finally:
            self.collecting = outer
        layouts = [None if isinstance(x, Traced) else natural.get(i) or self.regs(x).layout for i, x in enumerate(inits)]
        plan = self.pipeline(op, dots) if candidate else None
        if plan is not None:
            return self.pipelined_fold(op, start, stop, inits, layouts, plan)

        def body(inner, i, accs):
            with self.region(inner):
                self.dirty = True  # the iteration before may have read the scratch
                self.env[region.args[0]] = i
                self._unflatten(region.args[1:], accs, layouts)
                results = self._walk(region)
                return tuple(self._flatten(results, layouts))

        flat = self.b._loop(start, stop, op.attrs.step, tuple(self._flatten(inits, layouts)), _NO_CTX, body)
        self.dirty = True
        self._unflatten(op.results, flat, layouts)

    def _natural_layouts(self, op: Op, start, inits) -> dict:
        """The layouts a fold's body leaves its results in when its carries are its initial
        values (a lazy one, such as a dot's zero accumulator, takes whatever layout its first
        use gives it): carrying each result in that layout, no iteration converts it.  Found by
        walking the body once, then dropping what that recorded."""
        ops = self.b.block.ops
        before = {id(o) for o in ops}
        saved, dirty = dict(self.scopes[-1]), self.dirty
        pool = {dtype: entry[0].count for dtype, entry in self.pool.items()}
        region = op.regions[0]
        self.env[region.args[0]] = start
        for arg, x in zip(region.args[1:], inits):
            self.env[arg] = x
        self.scopes.append({})
        try:
            results = self._walk(region)
        finally:
            self.scopes.pop()
        ops[:] = [o for o in ops if id(o) in before or o.opdef.declares_shared]
        for dtype in list(self.pool):  # the scratch the trial needed is not the loop's
            if dtype in pool:
                self.pool[dtype][0].count = pool[dtype]
            else:
                declared = self.pool.pop(dtype)[1]
                self.info.body.block.ops.remove(declared)
        self.scopes[-1].clear()
        self.scopes[-1].update(saved)
        self.dirty = dirty
        return {i: r.layout for i, r in enumerate(results) if isinstance(r, Regs)}

    def _op_if(self, op: Op) -> None:
        cond = self.env[op.operands[0]]
        layouts = [self.canonical(v.type.shape) if isinstance(v.type, TileType) else None for v in op.results]
        dirty = self.dirty

        def branch(region):
            def run(inner):
                with self.region(inner):
                    self.dirty = dirty
                    results = self._walk(region)
                    flat = self._flatten(results, layouts)
                return tuple(flat) if op.results else None

            return run

        otherwise = branch(op.regions[1]) if len(op.regions) > 1 else None
        out = self.b.if_(cond, branch(op.regions[0]), otherwise)
        self.dirty = True
        if op.results:
            self._unflatten(op.results, out, layouts)

