"""The host's block launches: a block's threads in chunks of lanes, in loops split at
barriers, with per-thread slots for what lives across them."""

from __future__ import annotations

import math

from llvmlite import ir

from ...dsl.analysis import uniformity
from ...dsl.analysis.phases import PhasePlan
from ...dsl.ir import Op, Value
from ...errors import CompileError
from .chunking import Linear, index_constant, is_vector, untyped
from ..llvm_types import I1, I8, I32, I64, intrinsic_suffix, memory_type
from ...targets import WARP_SIZE


class BlockThreads:
    """The ``for_each_block`` launch of a host lowering ``lw``: its blocks, their thread loops
    between barriers, the per-thread slots and the shuffles that read them."""

    def __init__(self, lw):
        self.lw = lw
        self.slots: dict[Value, ir.Value] = {}  # per-thread values kept across barriers

    @property
    def b(self) -> ir.IRBuilder:
        return self.lw.b

    # -- for_each_block: a block's threads in chunks, split at barriers ------------------
    def lower(self, begin, end) -> None:
        # a loop or branch holding a barrier runs once per block here, on thread 0's bounds or
        # condition: where they vary across the block, the kernel cannot run as written
        lw, b = self.lw, self.b
        uniformity.refuse_divergent_synchronisation(
            lw.graph, "on a GPU this hangs or corrupts shared memory; the llvm backend runs the block's threads "
                      "through it together, so it refuses the kernel")
        launch = lw.graph.launch_op
        region = launch.regions[0]
        shape = lw.graph.block_shape
        self.per_block = math.prod(shape)
        self.chunks_per_block = -(-self.per_block // lw.width)
        padded = self.chunks_per_block * lw.width
        for name, op in lw.graph.shared_arrays().items():  # a stack array, reused by each block
            lw.shared_ptrs[name] = untyped(b.alloca(ir.ArrayType(memory_type(op.attrs["dtype"]), op.attrs["count"]),
                                                  name=f"shared_{name}"))
        self.plan = PhasePlan(region, self.chunk_local, region.args[len(launch.operands):])
        for v in self.plan.slot_values:  # a warp's worth of padding on both sides: shuffles up and down
            array = b.alloca(ir.ArrayType(memory_type(v.type), WARP_SIZE + padded + WARP_SIZE))
            self.slots[v] = untyped(b.gep(array, [ir.Constant(I64, 0), ir.Constant(I64, WARP_SIZE)], inbounds=True))
        self.thread_args = region.args[len(launch.operands):]
        grid_args = region.args[:len(launch.operands)]
        one = ir.Constant(I64, 1)
        extents = [b.select(b.icmp_signed(">", e, one), e, one) for e in lw.extents]

        def body(unit, coords):
            for arg, value in zip(grid_args, coords):
                lw.values[arg] = value
            self.block_id = unit
            shuffled = [arg for arg in self.thread_args if arg in self.slots]
            if shuffled:  # a shuffle reads coordinates at other threads: every thread's, first
                self._thread_loop([], after=lambda start: [self.to_slot(arg, lw.value(arg), start)
                                                           for arg in shuffled])
            self._lower_phased(region.ops)

        lw.units_loop(begin, end, list(zip(lw.decode(begin, extents), extents)), body)

    def _slot(self, v: Value, thread: ir.Value) -> ir.Value:
        """The address of thread ``thread``'s element of ``v``'s slot array."""
        return self.b.gep(self.slots[v], [thread], source_etype=memory_type(v.type), inbounds=True)

    def from_slot(self, v: Value):
        """A value computed before a barrier: this chunk's lanes of its slot, or thread 0's
        for a value the whole block shares."""
        b = self.b
        ty = memory_type(v.type)
        if v not in self.lw.varying:
            loaded = b.load(self._slot(v, ir.Constant(I64, 0)), typ=ty)
            return b.trunc(loaded, I1) if v.type.is_bool else loaded
        return self.slot_vector(v, self.lw.chunk_start)

    def to_slot(self, v: Value, value: ir.Value, start: ir.Value) -> None:
        value = self.lw.lanes.splat(value)
        if v.type.is_bool:
            value = self.b.zext(value, self.lw.lanes.vector_type(I8))
        self.b.store(value, self._slot(v, start), align=max(1, v.type.itemsize))

    def _lower_phased(self, ops) -> None:
        """Ops between barriers run in one loop over the block's chunks; a loop or branch
        holding a barrier runs once per block around them."""
        segment: list[Op] = []
        for op in ops:
            if op.opcode == "yield":
                continue
            if op.opcode == "barrier" or op in self.plan.synchronising:
                self._thread_loop(segment)
                segment = []
                if op.opcode == "fold":
                    self._block_fold(op)
                elif op.opcode == "if":
                    self._block_if(op)
                continue
            if op.opcode == "shuffle" and not self.chunk_local(op):
                self._thread_loop(segment)  # every thread's operand must exist first: a new loop starts here
                segment = []
            segment.append(op)
        self._thread_loop(segment)

    def _thread_loop(self, ops, after=None) -> None:
        """``for each chunk of the block's threads: <ops>``, storing what later stretches read
        into their slots; ``after()`` runs at the end of each chunk."""
        if not ops and after is None:
            return
        self.lw.count_loop(ir.Constant(I64, 0), ir.Constant(I64, self.chunks_per_block),
                         lambda chunk: self._chunk_of_threads(chunk, ops, after))
        self.lw.mask = self.lw.chunk_lane = self.lw.chunk_start = self.lw.chunk_threads = None

    def _chunk_of_threads(self, chunk, ops, after) -> None:
        """One chunk of :meth:`_thread_loop`: the whole chunk, or a full and a tail version."""
        b = self.b
        start = b.mul(chunk, ir.Constant(I64, self.lw.width))
        threads = b.add(self.lw.lanes.splat(start), self.lw.lanes.iota())
        self.lw.chunk_start, self.lw.chunk_threads = start, threads
        self.lw.chunk_lane = b.add(b.mul(self.block_id, ir.Constant(I64, self.per_block)), start)

        def lower():
            inner = set(self.lw.values)
            for arg, coordinate in zip(self.thread_args, self._thread_coordinates(start, threads)):
                self.lw.values[arg] = coordinate
            for v in self.plan.recomputed:  # at the top, where they dominate every use; unused ones are dropped
                if v not in self.lw.values and all(x in self.lw.values or x in self.slots for x in v.op.operands):
                    self.lw.lower_op(v.op)
            for op in ops:
                self.lw.lower_op(op)
                for r in op.results:
                    if r in self.slots:
                        self.to_slot(r, self.lw.value(r), start)
            if after is not None:
                after(start)
            for v in set(self.lw.values) - inner:  # the full and the tail version each compute their own
                del self.lw.values[v]

        if self.per_block % self.lw.width == 0:  # every chunk is whole
            self.lw.mask = None
            lower()
        else:
            self.lw.full_or_tail(start, ir.Constant(I64, self.per_block), lower)

    def _thread_coordinates(self, start, threads):
        """The thread coordinates of a chunk: x consecutive (and y, z the same in every lane)
        where the block's x extent is a multiple of the width."""
        shape = self.lw.graph.block_shape
        if shape[0] % self.lw.width == 0:
            scalars = self.lw.decode(start, [ir.Constant(I64, e) for e in shape])
            return [Linear(scalars[0], 1), *(Linear(s, 0) for s in scalars[1:])]
        return self.lw.decode(threads, [self.lw.lanes.splat(ir.Constant(I64, e)) for e in shape])

    def chunk_local(self, op: Op) -> bool:
        """A shuffle each lane of a chunk sources within the chunk: an xor by a constant below
        the width (a permutation of the vector's lanes: no slot, no new thread loop)."""
        if op.opcode != "shuffle":  # another warp-level op: needs every thread of the warp
            return False
        delta = index_constant(op.operands[1])
        return op.attrs["mode"] == "xor" and delta is not None and 0 <= delta < min(self.lw.width, WARP_SIZE)

    def barrier(self, op: Op) -> None:
        # barriers split a block's thread loops (_lower_phased) and are never lowered one thread
        # loop at a time: reaching here is a bug of this lowering, not of the kernel
        raise CompileError(f"the host lowering met a barrier outside its block phases ({op.location})")

    def shuffle(self, op: Op) -> None:  # in a thread loop, or a loop or branch inside one
        self._host_shuffle(op, self.lw.chunk_threads)

    def _host_shuffle(self, op: Op, threads: ir.Value) -> None:
        """The source lane's value: a permutation of this chunk's vector, a vector load from the
        operand's slot array at a constant offset, or a gather from it."""
        b, splat = self.b, self.lw.lanes.splat
        value = op.operands[0]
        if value not in self.slots and not self.chunk_local(op):  # the same for every thread
            self.lw.values[op.result] = self.lw.value(value)
            return
        delta, mode = index_constant(op.operands[1]), op.attrs["mode"]
        if delta is not None and mode == "xor" and 0 <= delta < WARP_SIZE:
            # lane t reads t ^ delta: the chunk at start ^ (delta's high bits), permuted by its low bits
            low, high = delta % self.lw.width, delta - delta % self.lw.width
            source = self.lw.vector(value) if high == 0 else self.slot_vector(value, b.xor(self.lw.chunk_start,
                                                                                        ir.Constant(I64, high)))
            self.lw.values[op.result] = self._permute(source, [k ^ low for k in range(self.lw.width)])
            return
        if delta is not None and mode in ("down", "up") and 0 <= delta < WARP_SIZE:
            # lane t reads t +- delta where that stays in its warp (the slots are padded on both sides)
            offset = ir.Constant(I64, delta if mode == "down" else -delta)
            moved = self.slot_vector(value, b.add(self.lw.chunk_start, offset))
            lane = b.urem(threads, splat(ir.Constant(I64, WARP_SIZE)))
            if mode == "down":
                inside = b.icmp_unsigned("<", b.add(lane, splat(offset)), splat(ir.Constant(I64, WARP_SIZE)))
            else:
                inside = b.icmp_unsigned(">=", lane, splat(ir.Constant(I64, delta)))
            self.lw.values[op.result] = b.select(inside, moved, self.lw.vector(value))
            return
        delta = self.lw.vector(op.operands[1])
        warp = splat(ir.Constant(I64, WARP_SIZE))
        lane = b.urem(threads, warp)
        base = b.sub(threads, lane)
        if mode == "idx":
            source = b.add(base, b.and_(delta, splat(ir.Constant(I64, WARP_SIZE - 1))))
        else:
            target = {"xor": lambda: b.xor(lane, delta), "down": lambda: b.add(lane, delta),
                      "up": lambda: b.sub(lane, delta)}[mode]()
            inside = b.and_(b.icmp_unsigned("<", delta, warp), b.icmp_unsigned("<", target, warp))
            source = b.select(inside, b.add(base, target), threads)
        ty = self.lw.lanes.vector_type(memory_type(value.type))
        pointers = self._slot(value, source)
        pointers.type = self.lw.lanes.vector_type(pointers.type)
        align = ir.Constant(I32, max(1, value.type.itemsize))
        loaded = self.lw.call(f"llvm.masked.gather.{intrinsic_suffix(ty)}.v{self.lw.width}p0",
                              [pointers, align, self.lw.lanes.all_lanes(self.lw.mask), ir.Constant(ty, None)], ty=ty,
                              suffix=False)
        self.lw.values[op.result] = b.trunc(loaded, self.lw.lanes.vector_type(I1)) if value.type.is_bool else loaded

    def slot_vector(self, v: Value, start: ir.Value) -> ir.Value:
        """Threads ``start .. start + W - 1``'s values of ``v`` from its slot array."""
        ty = memory_type(v.type)
        loaded = self.b.load(self._slot(v, start), typ=self.lw.lanes.vector_type(ty), align=max(1, v.type.itemsize))
        return self.b.trunc(loaded, self.lw.lanes.vector_type(I1)) if v.type.is_bool else loaded

    def _permute(self, vector: ir.Value, lanes: list[int]) -> ir.Value:
        if lanes == list(range(self.lw.width)):
            return vector
        order = ir.Constant(self.lw.lanes.vector_type(I32), [ir.Constant(I32, k) for k in lanes])
        return self.b.shuffle_vector(vector, ir.Constant(vector.type, None), order)

    def _uniform(self, v: Value) -> ir.Value:
        """A value the whole block agrees on (a loop's bounds, a branch's condition): thread 0's."""
        entry = self.lw.values.get(v)
        if entry is None:
            return self._from_slot_scalar(v)
        if isinstance(entry, Linear):
            return entry.base  # lane 0's
        return self.b.extract_element(entry, ir.Constant(I32, 0)) if is_vector(entry) else entry

    def _from_slot_scalar(self, v: Value) -> ir.Value:
        loaded = self.b.load(self._slot(v, ir.Constant(I64, 0)), typ=memory_type(v.type))
        return self.b.trunc(loaded, I1) if v.type.is_bool else loaded

    def _store_per_thread(self, targets, sources) -> None:
        """For every thread, ``targets[k][t] = sources[k](t)`` (all read before any is written)."""
        def store(start):
            values = [self.lw.value(v) for v in sources]
            for target, value in zip(targets, values):
                self.to_slot(target, value, start)

        self._thread_loop([], after=store)

    def _block_fold(self, op: Op) -> None:
        """A loop holding a barrier: its bounds are the block's, its accumulators each thread's."""
        b = self.b
        (region,) = op.regions
        start, stop = (self._uniform(v) for v in op.operands[:2])
        step = op.attrs["step"]
        accs = region.args[1:]
        self._store_per_thread(accs, op.operands[2:])
        trips = self.lw.control.trip_count(start, stop, step)
        tag = self.lw.ordinals[op]
        preheader = b.block
        header, body, exit_ = (b.append_basic_block(f"block_fold_{tag}_{n}") for n in ("header", "body", "exit"))
        b.branch(header)
        b.position_at_end(header)
        counter = b.phi(I64)
        iv = b.phi(I64)
        counter.add_incoming(ir.Constant(I64, 0), preheader)
        iv.add_incoming(start, preheader)
        b.cbranch(b.icmp_unsigned("<", counter, trips), body, exit_)
        b.position_at_end(body)
        self.lw.values[region.args[0]] = iv
        self._lower_phased(region.ops)
        self._store_per_thread(accs, region.terminator.operands)
        counter.add_incoming(b.add(counter, ir.Constant(I64, 1)), b.block)
        iv.add_incoming(b.add(iv, ir.Constant(I64, step)), b.block)
        b.branch(header)
        b.position_at_end(exit_)
        del self.lw.values[region.args[0]]
        for result, acc in zip(op.results, accs):
            self.slots[result] = self.slots[acc]

    def _block_if(self, op: Op) -> None:
        """A branch holding a barrier: the block takes it or not, as one."""
        b = self.b
        tag = self.lw.ordinals[op]
        then, otherwise, join = (b.append_basic_block(f"block_if_{tag}_{n}") for n in ("then", "else", "end"))
        b.cbranch(self._uniform(op.operands[0]), then, otherwise)
        for block, region in ((then, op.regions[0]), (otherwise, op.regions[1] if len(op.regions) > 1 else None)):
            b.position_at_end(block)
            if region is not None:
                self._lower_phased(region.ops)
                self._store_per_thread(op.results, region.terminator.operands)
            b.branch(join)
        b.position_at_end(join)
