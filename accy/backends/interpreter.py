"""The NumPy interpreter: the reference semantics of every accy op.

The graph is executed once for all logical threads at the same time: each SSA
value is a NumPy array with one lane per thread (or a scalar, when it is the
same for all threads), so a launch costs a number of NumPy calls proportional to
the ops executed, never to the number of threads.

A fold whose bounds differ between threads runs until its longest thread is
done, with an *active mask* saying which lanes are still inside the loop; loads
and stores only touch active lanes, so a thread never reads or writes memory
its own loop would not have.

Outputs are written to scratch copies and copied back only when the whole
launch succeeded, so a failing launch leaves every argument untouched.
"""

from __future__ import annotations

import math

import numpy as np

from ..dsl.ir import Block, Graph, Op
from ..dsl.types import INDEX_MAX, INDEX_MIN
from .arguments import Binding
from .diagnostics import division_by_zero, out_of_bounds, thread_text


def _saturating_to_index(x):
    x = np.nan_to_num(np.asarray(x, dtype=np.float64), nan=0.0)
    # float64(INDEX_MAX) rounds up to 2**63: clip below it, then fix the top end
    high = x >= 2.0**63
    out = np.clip(x, -(2.0**63), np.nextafter(2.0**63, 0)).astype(np.int64)
    return np.where(high, np.int64(INDEX_MAX), out)


def _cast(x, dtype):
    if dtype.is_int and np.asarray(x).dtype.kind == "f":
        return _saturating_to_index(np.trunc(x))
    return np.asarray(x).astype(dtype.numpy)


# One entry per op: NumPy arrays in, NumPy array out (float32 stays float32).
EVAL = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "max": np.maximum,  # NaN propagates
    "min": np.minimum,
    "neg": np.negative,
    "exp": np.exp,
    "sqrt": np.sqrt,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "eq": np.equal,
    "ne": np.not_equal,
    "and": np.logical_and,
    "or": np.logical_or,
    "not": np.logical_not,
    "select": np.where,
}


def _scalar(value, dtype):
    return dtype.numpy.type(value)


class _Launch:
    """State of one launch: buffers, the logical grid, and the active-lane mask."""

    def __init__(self, graph: Graph, buffers: dict[str, np.ndarray]):
        self.graph = graph
        self.buffers = buffers
        self.env: dict[int, object] = {}
        self.active = None  # None: every lane is active; else a bool array
        self.axes = ()
        self.lanes = np.zeros(1, np.int64)  # replaced by the launch's lanes in for_each

    # -- errors name one logical thread --------------------------------------------
    def thread_of(self, lane: int) -> str:
        return thread_text(self.axes, lane)

    def _first_bad_lane(self, bad) -> int:
        if self.active is not None:
            bad = bad & self.active
        if bad.ndim == 0:
            return 0 if bad else -1
        lanes = np.flatnonzero(bad)
        return int(lanes[0]) if lanes.size else -1

    # -- evaluation ------------------------------------------------------------
    def run_block(self, block: Block) -> None:
        env = self.env
        for op in block.ops:
            handler = _SPECIAL.get(op.opcode)
            if handler is not None:
                handler(self, op)
                continue
            args = [env[id(v)] for v in op.operands]
            env[id(op.results[0])] = EVAL[op.opcode](*args)

    def const(self, op: Op) -> None:
        self.env[id(op.result)] = _scalar(op.attrs["value"], op.attrs["dtype"])

    def div(self, op: Op) -> None:
        a, b = (self.env[id(v)] for v in op.operands)
        if op.result.type.is_int:
            lane = self._first_bad_lane(np.asarray(b) == 0)
            if lane >= 0:
                raise division_by_zero(op, self.thread_of(lane))
            b = np.where(np.asarray(b) == 0, 1, b)  # inactive lanes only
            self.env[id(op.result)] = np.floor_divide(a, b)
        else:
            self.env[id(op.result)] = np.divide(a, b)

    def cast(self, op: Op) -> None:
        self.env[id(op.result)] = _cast(self.env[id(op.operands[0])], op.attrs["dtype"])

    def _checked_index(self, op: Op, idx):
        name = op.attrs["buffer"]
        size = self.buffers[name].size
        idx = np.asarray(idx)
        bad = (idx < 0) | (idx >= size)
        lane = self._first_bad_lane(bad)
        if lane >= 0:
            offending = int(idx if idx.ndim == 0 else idx[lane])
            raise out_of_bounds(op, offending, size, self.thread_of(lane))
        if self.active is not None and idx.ndim:
            idx = np.where(self.active, idx, 0)
        return idx

    def load(self, op: Op) -> None:
        buffer = self.buffers[op.attrs["buffer"]]
        idx = self._checked_index(op, self.env[id(op.operands[0])])
        if buffer.size == 0:  # only inactive lanes reach here: give them zeros
            value = np.zeros(np.shape(idx), buffer.dtype)
        else:
            value = buffer[idx]
        self.env[id(op.result)] = value

    def store(self, op: Op) -> None:
        buffer = self.buffers[op.attrs["buffer"]]
        idx, value = (self.env[id(v)] for v in op.operands)
        idx = self._checked_index(op, idx)
        idx, value = np.broadcast_arrays(idx, np.asarray(value, buffer.dtype), self.lanes)[:2]
        if self.active is not None:
            idx, value = idx[self.active], value[self.active]
        buffer[idx] = value

    def for_each(self, op: Op) -> None:
        self.axes = op.attrs["axes"]
        total = math.prod(a.extent for a in self.axes)
        if total == 0:
            return
        lane = np.arange(total, dtype=np.int64)
        self.lanes = lane
        (block,) = op.regions
        stride = 1
        for arg, axis in zip(block.args, self.axes):
            self.env[id(arg)] = (lane // stride) % axis.extent
            stride *= axis.extent
        self.run_block(block)

    def fold(self, op: Op) -> None:
        start, stop, *inits = (self.env[id(v)] for v in op.operands)
        step = op.attrs["step"]
        (block,) = op.regions
        iv, accs = block.args[0], block.args[1:]
        yields = block.terminator.operands
        for a, v in zip(accs, inits):
            self.env[id(a)] = v
        if np.ndim(start) == 0 and np.ndim(stop) == 0:
            self._uniform_fold(int(start), int(stop), step, block, iv, accs, yields)
        else:
            self._divergent_fold(start, stop, step, block, iv, accs, yields)
        for r, a in zip(op.results, accs):
            self.env[id(r)] = self.env[id(a)]

    def _uniform_fold(self, start, stop, step, block, iv, accs, yields):
        env = self.env
        for i in range(start, stop, step):
            env[id(iv)] = np.int64(i)
            self.run_block(block)
            new = [env[id(y)] for y in yields]
            for a, v in zip(accs, new):
                env[id(a)] = v

    def _divergent_fold(self, start, stop, step, block, iv, accs, yields):
        env = self.env
        outer = self.active
        i = np.broadcast_to(np.asarray(start, np.int64), self.lanes.shape).copy()
        try:
            while True:
                inside = (i < stop) if step > 0 else (i > stop)
                active = inside if outer is None else (inside & outer)
                if not active.any():
                    break
                self.active = active
                env[id(iv)] = i.copy()
                self.run_block(block)
                new = [env[id(y)] for y in yields]
                for a, v in zip(accs, new):
                    env[id(a)] = np.where(active, v, env[id(a)])
                i = np.where(active, _step_without_wrap(i, step), i)
        finally:
            self.active = outer


def _step_without_wrap(i, step: int):
    """``i + step``, saturating where it would wrap, so a loop ending near the
    edge of the index range stops instead of starting over."""
    nxt = i + np.int64(step)
    wrapped = (nxt < i) if step > 0 else (nxt > i)
    return np.where(wrapped, np.int64(INDEX_MAX if step > 0 else INDEX_MIN), nxt)


_SPECIAL = {
    "const": _Launch.const,
    "div": _Launch.div,
    "cast": _Launch.cast,
    "load": _Launch.load,
    "store": _Launch.store,
    "fold": _Launch.fold,
    "for_each": _Launch.for_each,
    "yield": lambda launch, op: None,
}


def run_graph(graph: Graph, binding: Binding) -> None:
    """Execute ``graph`` on checked arguments; outputs are written only on success."""
    scratch = {name: (a.copy() if name in binding.outputs else a) for name, a in binding.flat.items()}
    launch = _Launch(graph, scratch)
    with np.errstate(all="ignore"):  # IEEE results (inf, NaN) are the semantics, not warnings
        launch.run_block(graph.body)
    for name in binding.outputs:
        np.copyto(binding.flat[name], scratch[name])
