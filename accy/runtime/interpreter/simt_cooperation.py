"""The SIMT interpreter's cooperation between the threads of a block: barriers (every thread
must arrive), warp shuffles, and the tensor cores' matrix loads and multiply-adds (see
:mod:`.warp_matrix`).  A :class:`BlockCooperation` sees the launch's values as its
:class:`~.simt.Interpreter` lays them out: one lane per thread, the grid's blocks in order."""

from __future__ import annotations

import numpy as np

from ...dsl.ir import Op
from ...errors import BarrierError
from . import warp_matrix
from ...diagnostics import at
from ...targets import WARP_SIZE


class BlockCooperation:
    """barrier, shuffle, ldmatrix and mma of ``interpreter``'s block launch."""

    def __init__(self, interpreter):
        self.interpreter = interpreter

    def op_barrier(self, op: Op) -> None:
        run = self.interpreter
        if run.active is not None:  # inside a branch or loop: did every thread of each block arrive?
            reached = np.broadcast_to(run.active, run.grid).reshape(run.blocks, run.block_threads)
            partial = reached.any(axis=1) & ~reached.all(axis=1)
            if partial.any():
                block = int(np.argmax(partial))
                arrived, missing = int(np.argmax(reached[block])), int(np.argmin(reached[block]))
                base = block * run.block_threads
                raise BarrierError(
                    f"barrier{at(op)} reached by thread {run.lane_name(base + arrived)} but not by thread "
                    f"{run.lane_name(base + missing)} of the same block: every thread of a block must reach "
                    "every barrier (on a GPU this hangs or corrupts shared memory)"
                )
        if run.sanitizer is not None:
            run.sanitizer.barrier()

    def op_shuffle(self, op: Op) -> None:
        """Lanes of a warp (32 threads of a block, linearised x fastest) read each other's values."""
        run = self.interpreter
        value, delta = (run.env[v] for v in op.operands)
        t = run.block_threads
        full = np.broadcast_to(value, run.grid).reshape(run.blocks, t)
        b = np.clip(np.broadcast_to(delta, run.grid).reshape(run.blocks, t), -1, 2 * WARP_SIZE)
        lane = np.arange(t) % WARP_SIZE
        base = np.arange(t) - lane  # each thread's warp's first lane
        mode = op.attrs["mode"]
        if mode == "idx":
            source = base + (np.broadcast_to(delta, run.grid).reshape(run.blocks, t) & (WARP_SIZE - 1))
        else:
            target = {"xor": lane ^ b, "down": lane + b, "up": lane - b}[mode]
            inside = (b >= 0) & (target >= 0) & (target < WARP_SIZE)
            source = np.where(inside, base + target, np.arange(t))  # outside the warp: its own value
        run.env[op.result] = np.take_along_axis(full, source.astype(np.int64), axis=1).reshape(run.grid)

    # -- tensor cores (the tile distribution's dot for NVPTX; see warp_matrix) ---------------
    def _warps_of(self, value) -> np.ndarray:
        run = self.interpreter
        t = run.block_threads
        return np.broadcast_to(value, run.grid).reshape(run.blocks, t // WARP_SIZE, WARP_SIZE)

    def op_ldmatrix(self, op: Op) -> None:
        """Each lane reads its elements of the matrices from the rows its warp's lanes address."""
        run = self.interpreter
        dtype = op.attrs.dtype
        rows = self._warps_of(run.env[op.operands[0]])
        for result, (source, offset) in zip(op.results, warp_matrix.ldmatrix_sources(
                op.attrs.count, op.attrs.order, 4 // dtype.itemsize)):
            idx = (rows[..., source] + offset).reshape(run.grid)
            memory, where = run.memory.element(op, idx)
            if run.sanitizer is not None:
                elements, lanes, _ = run.active_lanes(where)
                run.sanitizer.load(op, elements[0], lanes)
            run.env[result] = memory[where]

    def op_mma(self, op: Op) -> None:
        run = self.interpreter
        kind = op.attrs.kind
        values = [self._warps_of(run.env[v]) for v in op.operands]
        n = kind.a_count
        out = warp_matrix.mma(kind, values[:n], values[n:n + n // 2], values[n + n // 2:])
        for result, d in zip(op.results, out):
            run.env[result] = d.reshape(run.grid)
