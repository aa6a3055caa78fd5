"""The SIMT interpreter's memory: checked loads, stores and atomics of the launch's buffers
and of its blocks' shared arrays, and asynchronous copies (done at once).  A
:class:`SimtMemory` owns the shared arrays of one launch and reads the lanes, the active mask
and the values from its :class:`~.simt.Interpreter`."""

from __future__ import annotations

import numpy as np

from ...dsl.ir import Op
from ...diagnostics import out_of_bounds
from .atomics import apply_atomics

_LARGEST = np.maximum.reduce  # a bounds check's one NumPy call (ndarray.max goes through Python)


class SimtMemory:
    """Loads, stores, atomics and async copies of ``interpreter``'s launch, every index checked."""

    def __init__(self, interpreter):
        self.interpreter = interpreter
        self.shared: dict[str, np.ndarray] = {}  # per shared array: (blocks * count,) elements

    def element(self, op: Op, idx, shared_array: str | None = None):
        """A checked index and where it is in the flat memory (a shared array's block offset added):
        of the op's buffer, or of ``shared_array``."""
        run = self.interpreter
        shared = shared_array is not None or op.attrs.get("space", "global") == "shared"
        if shared:
            memory = self.shared[shared_array or op.attrs["buffer"]]
            size = memory.size // run.blocks
        else:
            memory = run.buffers[op.attrs["buffer"]]
            size = memory.size
        idx = np.asarray(idx, np.int64)
        unsigned = idx.view(np.uint64)  # one test for both ends: a negative index is huge unsigned
        if _LARGEST(unsigned, axis=None, initial=0) >= size:
            outside = unsigned >= size
            bad = run.first_bad(outside, idx)
            if bad is not None:
                raise out_of_bounds(op, bad[1], size, run.lane_name(bad[0]))
            idx = np.where(outside, 0, idx)  # only lanes that are inactive: point them somewhere harmless
        if shared:  # each block's own part
            idx = run.block_ids * size + idx
        return memory, idx

    def op_load(self, op: Op) -> None:
        run = self.interpreter
        first = run.env[op.operands[0]]
        for k, result in enumerate(op.results):  # vec > 1: consecutive elements, each checked
            memory, idx = self.element(op, first + k if k else first)
            if run.sanitizer is not None:
                elements, lanes, _ = run.active_lanes(idx)
                run.sanitizer.load(op, elements[0], lanes)
            if memory.size == 0:  # only inactive lanes reach here: give them zeros
                run.env[result] = np.zeros(np.shape(idx), memory.dtype)
            else:
                run.env[result] = memory[idx]

    def op_store(self, op: Op) -> None:
        run = self.interpreter
        first = run.env[op.operands[0]]
        checked = [self.element(op, first + k if k else first) for k in range(len(op.operands) - 1)]
        for (memory, idx), v in zip(checked, op.operands[1:]):  # every element checked before any is written
            (idx, value), lanes, _ = run.active_lanes(idx, np.asarray(run.env[v], memory.dtype),
                                                      lanes=run.sanitizer is not None)
            if run.sanitizer is not None:
                run.sanitizer.store(op, idx, lanes)
            memory[idx] = value  # a repeated index keeps the highest lane's value, as on the host

    def op_atomic(self, op: Op) -> None:
        """Atomics take effect in thread order within the launch; each returns the old value
        that order gives it."""
        run = self.interpreter
        kind = op.attrs["op"]
        memory, idx = self.element(op, run.env[op.operands[0]])
        values = [np.asarray(run.env[v], memory.dtype) for v in op.operands[1:]]
        (idx, *values), lanes, shape = run.active_lanes(idx, *values)
        if run.sanitizer is not None:
            run.sanitizer.atomic(op, idx, lanes)
        old = apply_atomics(kind, memory, idx, values)
        result = np.zeros(shape, memory.dtype).reshape(-1)
        where = np.arange(result.size) if run.active is None else np.flatnonzero(
            np.broadcast_to(run.active, shape).reshape(-1))
        result[where] = old
        run.env[op.result] = result.reshape(shape)

    def op_shared(self, op: Op) -> None:
        run = self.interpreter
        dtype, count, name = op.attrs["dtype"], op.attrs["count"], op.attrs["name"]
        self.shared[name] = np.zeros(run.blocks * count, dtype.numpy)
        if run.sanitizer is not None:
            run.sanitizer.track_shared(name, run.blocks, count)

    def op_async_copy(self, op: Op) -> None:
        """The copy at once (a correct program reads it only after its wait and a barrier): the
        first ``valid`` bytes from the buffer, zeros after them."""
        run = self.interpreter
        dst, src, valid = (np.asarray(run.env[v], np.int64) for v in op.operands)
        itemsize = op.attrs.dtype.itemsize
        for k in range(op.attrs.bytes // itemsize):
            read = k * itemsize < valid
            source, where = self.element(op, np.where(read, src + k, 0) if np.ndim(read) else (src + k if read else 0))
            value = np.where(read, source[where] if source.size else 0, 0)
            memory, at = self.element(op, dst + k, op.attrs.shared)
            (at, value), lanes, _ = run.active_lanes(at, np.asarray(value, memory.dtype),
                                                     lanes=run.sanitizer is not None)
            if run.sanitizer is not None:
                run.sanitizer.store(op, at, lanes)
            memory[at] = value

    def op_async_commit(self, op: Op) -> None:
        pass  # the reference copies at once

    def op_async_wait(self, op: Op) -> None:
        pass
