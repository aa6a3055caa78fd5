"""The SIMT interpreter's tensor memory accelerator (the reference for sm_90a's ``tma_load`` and
its mbarriers, :mod:`accy.dsl.ops`).

An mbarrier is kept as the hardware defines it (the PTX ISA, "Parallel synchronization and
communication instructions: mbarrier"): a phase, the arrivals still expected in it and the bytes
still expected, the phase completing when both reach zero, the next one then expecting the init
count again.  A copy lands at once and completes its bytes at once (a correct program reads the
box only after a wait for the phase saw it complete); a wait for a phase that has not completed
when the thread reaches it can never end in the reference's lockstep order, which is the hang
it would be on a GPU, and is an error naming the thread."""

from __future__ import annotations

import numpy as np

from ...dsl.ir import Op
from ...dsl.warpgroups import swizzled
from ...diagnostics import at
from ...errors import BarrierError
from ..tensor_maps import describe, tensor_layout


class BulkCopies:
    """mbarrier_init/arrive/wait, tma_load and tma_ready of ``interpreter``'s block launch."""

    def __init__(self, interpreter):
        self.interpreter = interpreter
        self.barriers: dict[str, np.ndarray] = {}  # array -> (blocks, count, 4): phase, arrivals, bytes, init

    def _lanes(self, op: Op, *values):
        """Per active lane: its block, then each value."""
        run = self.interpreter
        flat, lanes, _ = run.active_lanes(*(np.asarray(v, np.int64) for v in values))
        return lanes // max(run.block_threads, 1), lanes, flat

    def _state(self, name: str) -> np.ndarray:
        run = self.interpreter
        if name not in self.barriers:
            count = run.memory.shared[name].size // run.blocks
            state = np.zeros((run.blocks, count, 4), np.int64)
            state[..., 3] = -1  # not initialised
            self.barriers[name] = state
        return self.barriers[name]

    def _barrier(self, op: Op, name: str, block: int, slot: int, lane: int) -> np.ndarray:
        state = self._state(name)
        if not 0 <= slot < state.shape[1] or state[block, slot, 3] < 0:
            raise BarrierError(f"{op.opcode}{at(op)}: thread {self.interpreter.lane_name(lane)} uses mbarrier "
                               f"%{name}[{slot}], which no mbarrier_init set up")
        return state[block, slot]

    @staticmethod
    def _settle(s: np.ndarray) -> None:
        if s[1] == 0 and s[2] == 0:  # the phase completes: the next one expects the init count
            s[0] += 1
            s[1] = s[3]

    def op_mbarrier_init(self, op: Op) -> None:
        state = self._state(op.attrs.shared)
        blocks, _, (slots,) = self._lanes(op, self.interpreter.env[op.operands[0]])
        for block, slot in zip(blocks, slots):
            state[block, slot] = (0, op.attrs.count, 0, op.attrs.count)

    def op_mbarrier_arrive(self, op: Op) -> None:
        env = self.interpreter.env
        blocks, lanes, (slots, tx) = self._lanes(op, env[op.operands[0]], env[op.operands[1]])
        for block, lane, slot, n in zip(blocks, lanes, slots, tx):
            s = self._barrier(op, op.attrs.shared, block, slot, lane)
            s[1] -= 1
            s[2] += n
            self._settle(s)

    def op_mbarrier_wait(self, op: Op) -> None:
        run = self.interpreter
        env = run.env
        blocks, lanes, (slots, parity) = self._lanes(op, env[op.operands[0]], env[op.operands[1]])
        states = [self._barrier(op, op.attrs.shared, block, slot, lane) for block, lane, slot in
                  zip(blocks, lanes, slots)]
        if run.roles is not None:  # another role may complete the phase: it runs meanwhile
            who = run.lane_name(int(lanes[0])) if len(lanes) else "?"
            run.roles.wait_until(lambda: all(s[0] % 2 != p % 2 for s, p in zip(states, parity)),
                                 f"thread {who} waits on %{op.attrs.shared}[{int(slots[0])}]{at(op)}")
            return
        for lane, slot, p, s in zip(lanes, slots, parity, states):
            if s[0] % 2 == p % 2:  # the phase of this parity is the one still in progress
                raise BarrierError(
                    f"mbarrier_wait{at(op)}: thread {self.interpreter.lane_name(lane)} waits for the phase of "
                    f"parity {p % 2} of %{op.attrs.shared}[{slot}], which is in progress with {s[1]} arrivals and "
                    f"{s[2]} bytes still to come when it waits: on a GPU this hangs")

    def op_tma_load(self, op: Op) -> None:
        """The box at the coordinates, zeros past the tensor's edges, in the map's swizzle from
        element ``$0`` of the shared array (aligned to the swizzle's span); its bytes complete."""
        run, a = self.interpreter, op.attrs
        env = run.env
        blocks, lanes, flat = self._lanes(op, *(env[v] for v in op.operands))
        buffer = run.buffers[a.tensor]
        shape, strides, offset = tensor_layout(a.tensor, self._scalars(), len(a.box))
        memory = run.memory.shared[a.shared].reshape(run.blocks, -1)
        grid = np.meshgrid(*(np.arange(n) for n in a.box), indexing="ij")
        linear = sum(g * int(np.prod(a.box[d + 1:])) for d, g in enumerate(grid)).reshape(-1)
        for k, (block, lane) in enumerate(zip(blocks, lanes)):
            dst, slot, coords = flat[0][k], flat[1][k], [c[k] for c in flat[2:]]
            where = [c + g.reshape(-1) for c, g in zip(coords, grid)]
            inside = np.ones(linear.size, bool)
            element = np.full(linear.size, offset, np.int64)
            for w, n, s in zip(where, shape, strides):
                inside &= (w >= 0) & (w < n)
                element += w * s
            values = np.zeros(linear.size, memory.dtype)
            values[inside] = buffer[element[inside]]
            place = dst + linear  # the swizzle is on the address itself (the array is aligned)
            place = swizzled(place, a.swizzle, memory.dtype.itemsize) if a.swizzle else place
            memory[block, place] = values
            if run.sanitizer is not None:
                run.sanitizer.copied(op, block * memory.shape[1] + place, np.full(place.size, lane))
            s = self._barrier(op, a.barrier, block, slot, lane)
            s[2] -= a.bytes
            self._settle(s)

    def op_tma_ready(self, op: Op) -> None:
        """Whether the launch can describe the tensor to the hardware, as a GPU launch decides."""
        run, m = self.interpreter, op.attrs
        span = run.buffers[m.tensor]
        shape, strides, offset = tensor_layout(m.tensor, self._scalars(), len(m.box))
        fields = describe(m, span.ctypes.data, shape, strides, offset)
        run.env[op.result] = np.bool_(not isinstance(fields, str))

    def _scalars(self) -> dict:
        run = self.interpreter
        return {p.name: run.env[v] for p, v in zip(run.graph.scalars, run.graph.body.args)}

    def op_setmaxnreg(self, op: Op) -> None:
        """Registers are the hardware's: the reference has none to move; the index passes."""
        self.interpreter.env[op.result] = self.interpreter.env[op.operands[0]]
