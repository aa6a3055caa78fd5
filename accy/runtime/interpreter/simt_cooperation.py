"""The SIMT interpreter's cooperation between the threads of a block: barriers (every thread
must arrive), warp shuffles, and the tensor cores' matrix loads and multiply-adds (see
:mod:`.warp_matrix`).  A :class:`BlockCooperation` sees the launch's values as its
:class:`~.simt.Interpreter` lays them out: one lane per thread, the grid's blocks in order."""

from __future__ import annotations

import numpy as np

from ...dsl.ir import Op
from ...dsl.ops import Major
from ...dsl.warpgroups import linear_offset, swizzled
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
            if op.attrs.threads:  # a barrier of the block's first threads alone
                reached = reached[:, :op.attrs.threads]
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

    # -- warpgroup tensor cores (sm_90a; the reference computes at once: a correct program
    # reads the accumulators only after the wait that retires the group) ------------------
    def op_wgmma(self, op: Op) -> None:
        run, attrs_ = self.interpreter, op.attrs
        kind, n, k = attrs_.kind, attrs_.n, attrs_.kind.k
        groups = run.block_threads // warp_matrix.WARPGROUP

        def per_group(value):
            return np.broadcast_to(value, run.grid).reshape(run.blocks, groups, warp_matrix.WARPGROUP)

        values = [run.env[v] for v in op.operands]

        def read(name, at, rows, cols, swizzle, chunk, k_major):
            """Each block's and group's operand (rows x cols) from ``at`` as the hardware reads
            it: along a K-major operand's rows within one swizzle span, along an MN-major one's
            by chunks; the swizzle on the element's own offset (the array is aligned)."""
            memory = run.memory.shared[name].reshape(run.blocks, -1)
            itemsize = memory.dtype.itemsize
            first = per_group(at)[..., 0].astype(np.int64)
            if run.active is not None:  # a warpgroup not here (another role's) reads nothing
                first = np.where(per_group(run.active)[..., 0], first, 0)
            first = first[..., None, None]
            r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
            step = c if k_major else linear_offset(0, c, swizzle, chunk, itemsize)
            where = swizzled(first + r * (swizzle // itemsize) + step, swizzle, itemsize)
            return np.take_along_axis(memory[:, None, :], where.reshape(run.blocks, groups, -1), axis=2).reshape(
                run.blocks, groups, rows, cols)

        if attrs_.a_swizzle:
            a, rest = read(attrs_.a_shared, values[0], 64, k, attrs_.a_swizzle, attrs_.a_chunk, True), values[1:]
        else:
            a, rest = [per_group(v) for v in values[:kind.a_count]], values[kind.a_count:]
        if attrs_.b_major is Major.K:
            b = np.swapaxes(read(attrs_.b_shared, rest[0], n, k, attrs_.b_swizzle, attrs_.b_chunk, True), -1, -2)
        else:
            b = read(attrs_.b_shared, rest[0], k, n, attrs_.b_swizzle, attrs_.b_chunk, False)
        out = warp_matrix.wgmma(kind, n, a, b, [per_group(v) for v in rest[1:]])
        for result, d in zip(op.results, out):
            run.env[result] = d.reshape(run.grid)

    def op_wgmma_wait(self, op: Op) -> None:
        run = self.interpreter
        for result, v in zip(op.results, op.operands):
            run.env[result] = run.env[v]

    def op_wgmma_fence(self, op: Op) -> None:
        pass  # ordering only: the reference runs each op when it is reached

    op_wgmma_commit = op_fence_proxy_async = op_wgmma_fence
