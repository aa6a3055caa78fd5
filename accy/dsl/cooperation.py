"""Threads that cooperate, in the tracing builder: barriers, warps and shuffles, and the
reductions, votes, scans and arg-reductions built from them (a mixin of
:class:`accy.dsl.builder.Builder`)."""

from __future__ import annotations

import math

import numpy as np

from .combines import COMBINES, Combine
from .ops import (OPS, REDUCTIONS, AsyncCopyAttrs, BarrierAttrs, AsyncWaitAttrs, LdmatrixAttrs, MatrixOrder, MbarrierAttrs,
                  MbarrierInitAttrs, MmaAttrs, MmaKind, NoAttrs, ShuffleAttrs, TensorMapAttrs, TmaLoadAttrs, WgmmaAttrs)
from .traced import BuilderBase, SharedArray, Traced, _LaunchInfo, _error
from .types import DType, boolean, index, u32
from ..targets import WARP_SIZE


class Cooperation:
    """The block level: barriers, warps, reductions, votes, scans."""

    def _block_launch(self, what: str) -> _LaunchInfo:
        info = self._launch_info()
        if info is None or not info.blocks:
            raise _error(f"{what}: only inside a for_each_block body (the threads of a block cooperate; "
                         "for_each's threads are independent)")
        return info

    def _check_uniform(self, what: str, info: _LaunchInfo) -> None:
        """``what`` must be reached by every thread of the block: each enclosing loop's bounds
        and branch's condition must be the same for the whole block."""
        for scope in self._scopes():
            if scope.launch_info is not None:
                return
            kind, values, where = scope.guard
            if any(info.varies(v) for v in values):
                at = f" (at {where.line})" if where is not None else ""
                raise _error(f"{what} inside {kind} on the thread{at}: not every thread of the block "
                             "would reach it; make the bounds or condition the same for the whole block")

    def barrier(self) -> None:
        """Every thread of the block waits here until all have arrived; memory written before it
        is visible to every thread of the block after it."""
        info = self._block_launch("barrier")
        self._check_uniform("barrier", info)
        self._record("barrier", (), BarrierAttrs())

    syncthreads = barrier

    # -- warps -----------------------------------------------------------------------
    def _linear_thread(self, info: _LaunchInfo) -> Traced:
        linear, stride = None, 1
        for value, extent in zip(info.thread_values, info.thread_extents):
            term = Traced(value) if stride == 1 else self.mul(Traced(value), stride)
            linear = term if linear is None else self.add(linear, term)
            stride *= extent
        return linear

    def _warps(self, what: str) -> _LaunchInfo:
        info = self._block_launch(what)
        if info.threads % WARP_SIZE:
            raise _error(f"{what}: warp operations need blocks of a multiple of {WARP_SIZE} threads (a block's threads "
                         f"linearised x fastest form its warps); this block has {info.threads}")
        return info

    @property
    def lane(self) -> Traced:
        """This thread's lane in its warp of 32 (threads linearised x fastest), an index."""
        info = self._block_launch("lane")
        return self.mod(self._linear_thread(info), WARP_SIZE)

    @property
    def warp(self) -> Traced:
        """The number of this thread's warp within its block, an index."""
        info = self._block_launch("warp")
        return self.floor_div(self._linear_thread(info), WARP_SIZE)

    def _shuffle(self, mode: str, value, lane) -> Traced:
        what = {"idx": "shuffle", "xor": "shuffle_xor", "down": "shuffle_down", "up": "shuffle_up"}[mode]
        info = self._warps(what)
        self._check_uniform(what, info)
        value = self._lift(value, None, what)
        return self._traced(self._record("shuffle", (value, self._lift(lane, index, what)), ShuffleAttrs(mode=mode)))

    def shuffle(self, value, src_lane) -> Traced:
        """``value`` as lane ``src_lane`` (taken modulo 32) of this warp holds it."""
        return self._shuffle("idx", value, src_lane)

    def shuffle_xor(self, value, mask) -> Traced:
        """``value`` from lane ``lane ^ mask``; a lane past the warp gives this thread's own value."""
        return self._shuffle("xor", value, mask)

    def shuffle_down(self, value, delta) -> Traced:
        """``value`` from lane ``lane + delta``; past the last lane, this thread's own value."""
        return self._shuffle("down", value, delta)

    def shuffle_up(self, value, delta) -> Traced:
        """``value`` from lane ``lane - delta``; before lane 0, this thread's own value."""
        return self._shuffle("up", value, delta)

    # -- tensor cores (NVPTX, sm_80 and later; the tile distribution's dot) -----------------
    def mma(self, kind, a, b, c) -> tuple[Traced, ...]:
        """One warp's ``mma.sync.aligned.m16n8kK.row.col`` (``kind``: an :class:`MmaKind`): each
        lane gives its elements of the A (16xK), B (Kx8) and C (16x8) fragments, in the PTX ISA's
        fragment order, and gets its 4 elements of D = A B + C.  Every lane of the warp must
        reach it together.  Only the NVPTX lowering has it."""
        kind = MmaKind(kind)
        info = self._warps("mma")
        self._check_uniform("mma", info)
        values = [self._lift(v, None, "mma") for v in (*a, *b, *c)]
        op = self._record("mma", values, MmaAttrs(kind=kind))
        return tuple(Traced(r) for r in op.results)

    def ldmatrix(self, array: SharedArray, offset, count: int, order=MatrixOrder.ROW) -> tuple[Traced, ...]:
        """``ldmatrix.sync.aligned.m8n8.x{count}``: lane ``8 i + r`` gives the element offset in
        ``array`` of row ``r`` of matrix ``i`` (16 bytes, 16-byte aligned); each lane gets its
        elements of the ``count`` 8x8 matrices of 16-bit values (or 16x8 of bytes, 4x8 of 32-bit
        values), matrix by matrix.  Every lane of the warp must reach it together.  Only the
        NVPTX lowering has it."""
        info = self._warps("ldmatrix")
        self._check_uniform("ldmatrix", info)
        attrs_ = LdmatrixAttrs(buffer=array.name, dtype=array.dtype, count=count, order=order)
        op = self._record("ldmatrix", (self._lift(offset, index, "ldmatrix"),), attrs_)
        return tuple(Traced(r) for r in op.results)

    # -- asynchronous copies (NVPTX, sm_80 and later: cp.async) --------------------------
    def async_copy(self, dst: SharedArray, dst_index, src, src_index, nbytes: int, valid_bytes) -> None:
        """This thread's ``cp.async`` of ``nbytes`` (4, 8 or 16) from element ``src_index`` of the
        buffer ``src`` to element ``dst_index`` of ``dst``: it reads ``valid_bytes`` of them and
        zeroes the rest.  The copy lands once this thread waits for its group
        (:meth:`async_commit`, :meth:`async_wait`); other threads see it after a barrier.  Both
        addresses must be multiples of ``nbytes``.  Only the NVPTX lowering has it."""
        self._block_launch("async_copy")
        attrs_ = AsyncCopyAttrs(shared=dst.name, buffer=src.name, bytes=nbytes, dtype=dst.dtype)
        self._record("async_copy", tuple(self._lift(v, index, "async_copy") for v in (dst_index, src_index, valid_bytes)),
                     attrs_)

    def async_commit(self) -> None:
        """Close this thread's group of asynchronous copies."""
        self._block_launch("async_commit")
        self._record("async_commit", ())

    def async_wait(self, pending: int = 0) -> None:
        """Wait until at most ``pending`` of this thread's committed groups are in flight."""
        self._block_launch("async_wait")
        self._record("async_wait", (), AsyncWaitAttrs(pending=pending))

    # -- warpgroup tensor cores (NVPTX at sm_90a: wgmma) --------------------------------
    def wgmma(self, attrs_: WgmmaAttrs, a, b_at, c) -> tuple[Traced, ...]:
        """A warpgroup's ``wgmma.mma_async`` m64nNk (``attrs_``: its kind, N and how its operands
        lie in shared memory): ``a`` the element offset of A's 64 staged rows, or this thread's
        A fragment elements; ``b_at`` B's offset; ``c`` this thread's n / 2 accumulators.  The
        results are final once a :meth:`wgmma_wait` has retired its group.  The four warps of a
        warpgroup must reach it together.  Only the NVPTX lowering has it."""
        info = self._warps("wgmma")
        self._check_uniform("wgmma", info)
        a = [self._lift(a, index, "wgmma")] if attrs_.a_swizzle else [self._lift(v, None, "wgmma") for v in a]
        values = a + [self._lift(b_at, index, "wgmma")] + [self._lift(v, None, "wgmma") for v in c]
        return tuple(Traced(r) for r in self._record("wgmma", values, attrs_).results)

    def wgmma_wait(self, pending: int, accumulators) -> tuple[Traced, ...]:
        """Wait until at most ``pending`` of this warpgroup's committed wgmma groups are in
        flight; the accumulators pass through (the wait is where they are final)."""
        self._warps("wgmma_wait")
        values = [self._lift(v, None, "wgmma_wait") for v in accumulators]
        return tuple(Traced(r) for r in self._record("wgmma_wait", values, AsyncWaitAttrs(pending=pending)).results)

    def wgmma_fence(self) -> None:
        """Order this thread's earlier register writes before the next wgmma reads them."""
        self._warps("wgmma_fence")
        self._record("wgmma_fence", (), NoAttrs())

    def wgmma_commit(self) -> None:
        """Close this warpgroup's group of wgmma in flight."""
        self._warps("wgmma_commit")
        self._record("wgmma_commit", (), NoAttrs())

    def fence_proxy_async(self) -> None:
        """Make this thread's shared-memory writes visible to the asynchronous proxy (wgmma's reads)."""
        self._block_launch("fence_proxy_async")
        self._record("fence_proxy_async", (), NoAttrs())

    # -- the tensor memory accelerator (NVPTX at sm_90a: mbarriers, cp.async.bulk.tensor) ----
    def mbarrier_init(self, barriers: SharedArray, slot, count: int = 1) -> None:
        """Set up mbarrier ``slot`` of the u64 shared array ``barriers``: each phase completes
        when ``count`` threads have arrived and every byte expected has come."""
        self._block_launch("mbarrier_init")
        self._record("mbarrier_init", (self._lift(slot, index, "mbarrier_init"),),
                     MbarrierInitAttrs(shared=barriers.name, count=count))

    def mbarrier_arrive(self, barriers: SharedArray, slot, expect_bytes=0) -> None:
        """This thread arrives on mbarrier ``slot``, its phase now also expecting ``expect_bytes``."""
        self._block_launch("mbarrier_arrive")
        self._record("mbarrier_arrive", tuple(self._lift(v, index, "mbarrier_arrive") for v in (slot, expect_bytes)),
                     MbarrierAttrs(shared=barriers.name))

    def mbarrier_wait(self, barriers: SharedArray, slot, parity) -> None:
        """Wait until the phase of ``parity`` (0 or 1: phases alternate) of mbarrier ``slot`` completed."""
        self._block_launch("mbarrier_wait")
        self._record("mbarrier_wait", tuple(self._lift(v, index, "mbarrier_wait") for v in (slot, parity)),
                     MbarrierAttrs(shared=barriers.name))

    def tma_load(self, dst: SharedArray, at, tensor, coords, box, barriers: SharedArray, slot,
                 swizzle: int = 0) -> None:
        """This thread's ``cp.async.bulk.tensor``: the ``box`` of tensor parameter ``tensor`` at
        ``coords`` (outermost axis first; zeros past its edges) into ``dst`` from element ``at``
        (aligned to 128 bytes, to the swizzle's 8-row span where swizzled), in the ``swizzle``
        (0, 32, 64 or 128 bytes) wgmma reads; its bytes complete on mbarrier ``slot``."""
        self._block_launch("tma_load")
        attrs_ = TmaLoadAttrs(shared=dst.name, barrier=barriers.name, tensor=tensor.name, dtype=tensor.dtype,
                              box=tuple(box), swizzle=swizzle)
        values = (at, slot, *coords)
        self._record("tma_load", tuple(self._lift(v, index, "tma_load") for v in values), attrs_)

    def tma_ready(self, tensor, box, swizzle: int = 0) -> Traced:
        """Whether the launch could describe ``tensor`` to the hardware for boxes of ``box`` (its
        address and strides; where not, copy it another way)."""
        attrs_ = TensorMapAttrs(tensor=tensor.name, dtype=tensor.dtype, box=tuple(box), swizzle=swizzle)
        return Traced(self._record("tma_ready", (), attrs_).result)

    def _combine(self, what: str, op: str) -> str:
        """The builder method a reduction named ``op`` combines with."""
        if op not in ("sum", "max", "min"):
            raise _error(f"{what}: op must be 'sum', 'max' or 'min', got {op!r}")
        return OPS[REDUCTIONS[op]].methods[0]

    def warp_reduce(self, value, op: str = "sum") -> Traced:
        """``op`` ("sum", "max" or "min") over the 32 lanes of the warp; every lane gets the result
        (a butterfly of shuffles, so every backend combines in the same order)."""
        combine = getattr(self, self._combine("warp_reduce", op))
        value = Traced(self._lift(value, None, "warp_reduce"))
        for offset in (16, 8, 4, 2, 1):
            value = combine(value, self.shuffle_xor(value, offset))
        return value

    def block_reduce(self, value, op: str = "sum") -> Traced:
        """``op`` ("sum", "max" or "min") over every thread of the block; every thread gets the
        result.  Each warp reduces with shuffles, then every thread combines the warps' results
        in order from a shared array (with barriers around it)."""
        info = self._warps("block_reduce")
        combine = self._combine("block_reduce", op)
        partial = self.warp_reduce(value, op)
        warps = info.threads // WARP_SIZE
        if warps == 1:
            return partial
        scratch = info.body._declare_shared(info, partial.type, warps, None, first=True, stem="reduce")
        warp = self.warp
        self.if_(self.eq(self.lane, 0), lambda inner: inner.store(scratch, partial, warp))
        self.barrier()
        total = self.fold_range(1, warps, 1, scratch[0],
                                lambda inner, w, acc: getattr(inner, combine)(acc, scratch[w]))
        self.barrier()  # every thread has read the partials before any reuses the scratch
        return total

    # -- warp votes ------------------------------------------------------------------
    def _ballot_bits(self, what: str, cond) -> Traced:
        """The warp's ballot in every lane: an or-butterfly of shuffles of each lane's bit, so
        every backend computes it from ops it already has (with the shuffles' rules)."""
        info = self._warps(what)
        self._check_uniform(what, info)
        cond = self._lift(cond, boolean, what)
        if not cond.type.is_bool:
            raise _error(f"{what}: the condition is {cond.type}; it must be a bool (use a comparison)")
        bit = self.shl(self.constant(1, u32), self.cast(self.lane, u32))
        bits = self.select(Traced(cond), bit, self.constant(0, u32))
        for offset in (16, 8, 4, 2, 1):
            bits = self.bitwise_or(bits, self.shuffle_xor(bits, offset))
        return bits

    def ballot(self, cond) -> Traced:
        """A u32 with bit ``lane`` set for each lane of this warp where ``cond`` holds; every lane
        gets it.  As shuffles: whole warps, reached by the whole block."""
        return self._ballot_bits("ballot", cond)

    def vote_any(self, cond) -> Traced:
        """True in every lane when ``cond`` holds in any lane of this warp."""
        return self.ne(self._ballot_bits("vote_any", cond), self.constant(0, u32))

    def vote_all(self, cond) -> Traced:
        """True in every lane when ``cond`` holds in every lane of this warp."""
        return self.eq(self._ballot_bits("vote_all", cond), self.constant(0xFFFFFFFF, u32))

    # -- block scans and arg-reductions ------------------------------------------------
    def _block_number(self, what: str, value) -> tuple[_LaunchInfo, Traced]:
        info = self._block_launch(what)
        self._check_uniform(what, info)
        value = self._lift(value, None, what)
        if value.type.is_bool:
            raise _error(f"{what}: the value is bool; it takes a number type (select(cond, 1, 0) counts)")
        return info, Traced(value)

    def _group_scan(self, lanes: "_Neighbours", values: tuple, combine) -> tuple:
        """The inclusive scan of ``values`` within each group of 32 consecutive threads
        (a warp): Hillis-Steele steps 1, 2, 4, 8, 16, each thread at ``lane >= d`` taking
        ``combine(values of the thread d before, its own)``."""
        d = 1
        while d < min(WARP_SIZE, lanes.info.threads):
            before = lanes.earlier(values, d)
            step = combine(self, before, values)
            far = self.ge(lanes.lane, d)
            values = tuple(self.select(far, s, v) for s, v in zip(step, values))
            d *= 2
        return values

    def _group_totals(self, lanes: "_Neighbours", values: tuple, stem: str) -> list:
        """Shared arrays holding, at ``g``, ``values`` of the last thread of group ``g``."""
        info = lanes.info
        groups = -(-info.threads // WARP_SIZE)
        totals = [info.body._declare_shared(info, v.type, groups, None, first=True, stem=stem) for v in values]
        last = self.logical_or(self.eq(lanes.lane, WARP_SIZE - 1), self.eq(lanes.linear, info.threads - 1))
        group = self.floor_div(lanes.linear, WARP_SIZE)

        def write(inner):
            for array, v in zip(totals, values):
                inner.store(array, v, group)

        self.if_(last, write)
        self.barrier()
        return totals

    def block_scan(self, value, op: str = "sum", inclusive: bool = True) -> Traced:
        """The scan of ``value`` over the block's threads in linear order (x fastest): thread
        ``t`` gets ``op`` ("sum", "max" or "min") over threads ``0..t`` (``inclusive=True``) or
        ``0..t-1`` (else; thread 0 gets the op's identity: 0, or the type's lowest or highest
        value, -inf or +inf for floats).

        Floats combine in one order on every backend (so results agree bit for bit): within
        each group of 32 threads, Hillis-Steele steps of 1, 2, 4, 8 and 16 (a thread at lane
        ``>= d`` combines the partial of the thread ``d`` before it with its own, earlier
        operand first); then a thread of group ``g`` combines the groups' totals in order,
        ``((T0 + T1) + ...) + T(g-1)``, and that with its group's partial.  An exclusive scan
        is the inclusive scan of the thread before (the same bits).  Blocks of any size; whole
        warps exchange with shuffles, other blocks through shared memory."""
        info, value = self._block_number("block_scan", value)
        method = self._combine("block_scan", op)
        if not isinstance(inclusive, (bool, np.bool_)):
            raise _error(f"block_scan: inclusive must be True or False, got {inclusive!r}")

        def combine(b, earlier, later):
            return (getattr(b, method)(earlier[0], later[0]),)

        lanes = _Neighbours(self, info, "scan")
        (local,) = self._group_scan(lanes, (value,), combine)
        shifted = None
        if not inclusive:  # each thread's local scan moves one thread on (thread 0's is replaced below)
            shifted = local if info.threads == 1 else lanes.earlier((local,), 1)[0]
        if info.threads <= WARP_SIZE:
            result = local if inclusive else shifted
            prefix = None
        else:
            (totals,) = self._group_totals(lanes, (local,), "scan")
            group = self.floor_div(lanes.linear, WARP_SIZE)
            prefix = self.fold_range(1, group, 1, totals[0],
                                     lambda inner, w, acc: getattr(inner, method)(acc, totals[w]))
            later = self.gt(group, 0)
            result = self.select(later, getattr(self, method)(prefix, local if inclusive else shifted),
                                 local if inclusive else shifted)
        if not inclusive:
            first = self._identity(op, value.type)
            at_lane0 = first if prefix is None else self.select(self.gt(self.floor_div(lanes.linear, WARP_SIZE), 0),
                                                                prefix, first)
            result = self.select(self.eq(lanes.lane, 0), at_lane0, result)
        if lanes.used_shared or prefix is not None:
            self.barrier()  # every thread has read the scratch before any reuses it (in a loop)
        return result

    def _identity(self, op: str, dtype: DType) -> Traced:
        """What an exclusive scan gives its first thread: the combine's identity, but +0 for a
        sum (NumPy's exclusive prefix starts at 0, not -0.0)."""
        combine = Combine(op)
        return self.constant(0 if combine is Combine.SUM else COMBINES[combine].identity(dtype), dtype)

    def block_argmax(self, value) -> tuple[Traced, Traced]:
        """``(value, thread)``: the block's largest ``value`` and the linear index (x fastest,
        an index) of the first thread holding it, as NumPy's argmax: ties go to the lowest
        index, and a NaN counts as largest (the first NaN wins)."""
        return self._block_arg("block_argmax", value, largest=True)

    def block_argmin(self, value) -> tuple[Traced, Traced]:
        """``(value, thread)``: the block's smallest ``value`` and the lowest linear index holding
        it, as NumPy's argmin (ties to the lowest index; the first NaN wins)."""
        return self._block_arg("block_argmin", value, largest=False)

    def _block_arg(self, what: str, value, largest: bool) -> tuple[Traced, Traced]:
        info, value = self._block_number(what, value)
        floats = value.type.is_float

        def combine(b, p, q):  # symmetric: the better pair, of equals the lower index
            (pv, pi), (qv, qi) = p, q
            better = b.gt(qv, pv) if largest else b.lt(qv, pv)
            tie = b.eq(qv, pv)
            if floats:  # NaN beats numbers; two NaNs tie
                pn, qn = b.isnan(pv), b.isnan(qv)
                better = b.logical_or(better, b.logical_and(qn, b.logical_not(pn)))
                tie = b.logical_or(tie, b.logical_and(pn, qn))
            take = b.logical_or(better, b.logical_and(tie, b.lt(qi, pi)))
            return b.select(take, qv, pv), b.select(take, qi, pi)

        lanes = _Neighbours(self, info, "arg")
        pair = (value, lanes.linear)
        if lanes.shuffles:  # every lane gets its warp's pair from a butterfly
            for offset in (16, 8, 4, 2, 1):
                pair = combine(self, pair, tuple(self.shuffle_xor(v, offset) for v in pair))
            if info.threads == WARP_SIZE:
                return pair
        else:
            pair = self._group_scan(lanes, pair, combine)
        totals = self._group_totals(lanes, pair, "arg")
        groups = -(-info.threads // WARP_SIZE)
        first = tuple(array[0] for array in totals)
        pair = self.fold_range(1, groups, 1, first,
                               lambda inner, w, acc: combine(inner, acc, tuple(array[w] for array in totals)))
        self.barrier()  # every thread has read the totals before any reuses them (in a loop)
        return tuple(pair)


class _Neighbours:
    """What a thread reads of the thread ``d`` before it in its group of 32 (a warp): a
    ``shuffle_up`` where the block is whole warps, else a round through shared memory.  The
    rounds alternate between two sets of arrays, so one barrier a round orders each round's
    writes after the reads of the round before it."""

    def __init__(self, builder: BuilderBase, info: _LaunchInfo, stem: str):
        self.builder, self.info, self.stem = builder, info, stem
        self.linear = builder._linear_thread(info)
        self.lane = builder.mod(self.linear, WARP_SIZE)
        self.shuffles = info.threads % WARP_SIZE == 0
        self.sets: list[list[SharedArray]] = []
        self.rounds = 0

    @property
    def used_shared(self) -> bool:
        return bool(self.sets)

    def earlier(self, values: tuple, d: int) -> tuple:
        """``values`` as the thread ``d`` before holds them, where ``lane >= d`` (elsewhere the
        thread's own)."""
        b = self.builder
        if self.shuffles:
            return tuple(b.shuffle_up(v, d) for v in values)
        if not self.sets:
            info = self.info
            self.sets = [[info.body._declare_shared(info, v.type, info.threads, None, first=True, stem=self.stem)
                          for v in values] for _ in range(2)]
        arrays = self.sets[self.rounds % 2]
        self.rounds += 1
        for array, v in zip(arrays, values):
            b.store(array, v, self.linear)
        b.barrier()
        source = b.select(b.ge(self.lane, d), b.sub(self.linear, d), self.linear)
        return tuple(b.load(array, source) for array in arrays)
