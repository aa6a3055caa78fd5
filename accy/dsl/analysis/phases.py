"""The phase plan of a block body: where its threads synchronise, and what lives across.

A block's threads run one phase at a time between barriers (on the host, a loop over
the threads per phase).  :class:`PhasePlan` says which ops synchronise the block
(barriers, shuffles that read other threads, and loops and branches holding them) and
which per-thread values outlive the phase that computed them.
"""

from __future__ import annotations

from ..ir import Block, Op, Value
from ..ops import OPS, RegionKind, Sync


class PhasePlan:
    """Which ops of a host block body synchronise the block (barriers, shuffles, and loops and
    branches holding them) and which per-thread values must outlive the thread loop that
    computed them (kept in a per-thread array: a slot)."""

    def __init__(self, region: Block, chunk_local=lambda op: False, thread_args=()):
        self.chunk_local = chunk_local  # shuffles that need only the chunk's own lanes
        self.thread_args = frozenset(thread_args)
        self._shuffled: set[Value] = set()  # read at other threads' indices: always in a slot
        self.synchronising: set[Op] = set()
        self._mark(region)
        # in the order the walk finds them (a dict as an ordered set): the host allocates their
        # slots in this order, and a set's order (by identity hash) would vary from run to run
        self.slot_values: dict[Value, None] = {}
        self._defined: dict[Value, int] = {}
        self._block_level: set[Value] = set()  # read outside any thread loop
        self._next = 0
        self._walk(region.ops)
        # integer index arithmetic of the thread coordinates is computed again in each thread
        # loop that reads it, not kept in a slot: it keeps its form (a scalar per chunk, or
        # consecutive lanes), so the accesses it indexes stay vector loads and stores
        self._results = {v for op in region.walk() for v in op.results}
        roots = {v for v in self.slot_values if v not in self._block_level and v not in self._shuffled and self._recomputable(v)}
        for v in roots:
            del self.slot_values[v]
        closure: set[Value] = set()  # with the values they are computed from
        stack = list(roots)
        while stack:
            v = stack.pop()
            if v.op is not None and v in self._results and v not in closure:
                closure.add(v)
                stack.extend(v.op.operands)
        self.recomputed = [v for op in region.walk() for v in op.results if v in closure]  # in order

    def _mark(self, block: Block) -> bool:
        found = False
        for op in block.ops:
            inner = any([self._mark(r) for r in op.regions])
            if self._synchronises(op):
                found = True
            elif inner and op.opdef.regions in (RegionKind.LOOP, RegionKind.BRANCH):
                self.synchronising.add(op)
                found = True
        return found

    def _synchronises(self, op: Op) -> bool:
        """A barrier, or a shuffle that reads lanes outside the chunk."""
        sync = op.opdef.synchronises
        return sync is Sync.BLOCK or (sync is Sync.WARP and not self.chunk_local(op))

    def _recomputable(self, v: Value, depth: int = 8) -> bool:
        """``v`` is integer or bool arithmetic that cannot fail, down to values every thread
        loop has at hand (region arguments, values from outside the launch) in ``depth`` ops."""
        op = v.op
        if op is None:  # the launch's and a block loop's indices, not the accumulators in slots
            return v not in self.slot_values
        if v not in self._results:  # computed before the launch
            return True
        if v.type.is_float or depth == 0:
            return False
        if op.opdef.constant:
            return True
        opdef = OPS.get(op.opcode)
        if opdef is None or not opdef.pointwise or not opdef.pure or opdef.math or \
                any(opdef.can_fail(x.type) for x in op.operands):
            return False
        return all(self._recomputable(x, depth - 1) for x in op.operands)

    def _slot(self, v: Value) -> None:
        self.slot_values[v] = None

    def _new_stretch(self) -> int:
        self._next += 1
        return self._next

    def _use(self, v: Value, stretch: int) -> None:
        if self._defined.get(v, stretch) != stretch:
            self._slot(v)

    def _define(self, op: Op, stretch: int) -> None:
        for nested in op.walk():
            for v in nested.results:
                self._defined[v] = stretch
            for r in nested.regions:
                for a in r.args:
                    self._defined[a] = stretch

    def _walk(self, ops) -> None:
        stretch = self._new_stretch()
        for op in ops:
            if op.opdef.terminator:
                continue
            if op.opdef.synchronises is Sync.BLOCK or op in self.synchronising:
                block_level = self._new_stretch()  # the loop's bounds, the branch's condition, the inits
                for v in op.operands:
                    self._use(v, block_level)
                    self._block_level.add(v)
                for region in op.regions:
                    for arg in region.args[1:] if op.opdef.regions is RegionKind.LOOP else ():  # accumulators
                        self._slot(arg)
                    self._walk(region.ops)
                    if region.terminator is not None:
                        for v in region.terminator.operands:
                            self._use(v, self._new_stretch())
                            self._block_level.add(v)
                for v in op.results:
                    self._slot(v)
                stretch = self._new_stretch()
                continue
            if op.opdef.synchronises is Sync.WARP and not self.chunk_local(op):
                stretch = self._new_stretch()
                value = op.operands[0]
                if value in self._defined or value in self.slot_values or value in self.thread_args:
                    self._slot(value)  # a thread's own: read at another's index
                    self._shuffled.add(value)
            for nested in op.walk():
                for v in nested.operands:
                    self._use(v, stretch)
            self._define(op, stretch)
