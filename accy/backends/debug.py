"""Debugging one logical thread: every op's value, in execution order.

``run(args, backend="numpy", debug_thread={"b": 1, "q": 0, "v": 2})`` replays the
graph for that one thread on copies of the arguments (so the real, vectorised
launch of every thread is not slowed down), with plain loops so each fold
iteration shows, and records each op's text form, its value and the line of the
user's source that recorded it.  Past ``cap`` entries it only counts.
"""

from __future__ import annotations

import attrs
import numpy as np

from ..dsl.ir import Block, Graph, Op
from ..dsl.printer import op_lines
from ..errors import ArgumentError


@attrs.frozen
class TraceEntry:
    op: str  # the op's line in the text form
    value: object  # its result (a Python number or bool), None for stores and loops
    location: str  # the user's source line
    iterations: tuple[tuple[str, int], ...]  # enclosing folds: (the fold's result name, i)

    def __str__(self) -> str:
        loop = " ".join(f"fold {name} i={i}" for name, i in self.iterations)
        value = "" if self.value is None else f" -> {self.value!r}"
        where = f"    # {self.location}" if self.location else ""
        return f"{'[' + loop + '] ' if loop else ''}{self.op}{value}{where}"


@attrs.frozen
class ThreadTrace:
    thread: dict[str, int]
    entries: tuple[TraceEntry, ...]
    omitted: int  # entries past the cap, counted but not kept

    def __str__(self) -> str:
        head = "thread " + " ".join(f"{k}={v}" for k, v in self.thread.items())
        lines = [head] + [f"  {e}" for e in self.entries]
        if self.omitted:
            lines.append(f"  ... {self.omitted} more ops not shown (raise debug_cap to see them)")
        return "\n".join(lines)

    def values_of(self, fragment: str) -> list:
        """Values of the entries whose op text contains ``fragment`` (e.g. "exp")."""
        return [e.value for e in self.entries if fragment in e.op]


def check_thread(graph: Graph, thread) -> None:
    """``thread`` must name every logical axis with an index inside it."""
    names = [a.name for a in graph.axes]
    if not isinstance(thread, dict) or sorted(thread) != sorted(names):
        raise ArgumentError(f"debug_thread: give every logical axis by name ({', '.join(names)}), got {thread!r}")
    for a in graph.axes:
        value = thread[a.name]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < a.extent:
            raise ArgumentError(f"debug_thread: {a.name}={value!r} is outside the axis (0 <= {a.name} < {a.extent})")


def _plain(value):
    value = np.asarray(value)
    return value.item() if value.size == 1 else value.tolist()


def trace_thread(graph: Graph, buffers: dict[str, np.ndarray], thread: dict, *, cap: int = 2000) -> ThreadTrace:
    """Replay ``graph`` for one thread on ``buffers`` (flat copies, changed by its stores)."""
    from .interpreter import _FoldPlan, _Launch

    check_thread(graph, thread)

    lines = op_lines(graph)
    entries: list[TraceEntry] = []
    omitted = 0
    loops: list[tuple[str, int]] = []

    class _Recorder(_Launch):
        def run_block(self, block: Block, skip=frozenset()) -> None:
            nonlocal omitted
            for op in block.ops:
                if op.opcode == "yield":
                    continue
                if op.opcode == "for_each":
                    self.for_each(op)
                    continue
                if op.opcode == "fold":
                    self.fold(op)
                else:
                    super().run_block(_single(op))
                value = _plain(self.env[id(op.results[0])]) if op.results else None
                if len(entries) < cap:
                    entries.append(TraceEntry(lines.get(id(op), op.opcode), value,
                                              str(op.location) if op.location else "", tuple(loops)))
                else:
                    omitted += 1

        def for_each(self, op: Op) -> None:
            self.axes = op.attrs["axes"]
            (block,) = op.regions
            for arg, a in zip(block.args, self.axes):
                self.env[id(arg)] = np.int64(thread[a.name])
            self.run_block(block)

        def _iterate(self, region: Block, i, accs_values, skip=frozenset()):
            loops.append((lines.get(id(region.parent), "fold").split(" = ")[0], int(i)))
            try:
                return super()._iterate(region, i, accs_values)
            finally:
                loops.pop()

    recorder = _Recorder(graph, buffers, memory_cap=1 << 30)
    recorder.plans = {k: _FoldPlan(None, frozenset(), frozenset(), p.body_ops, p.captured)
                      for k, p in recorder.plans.items()}  # plain loops: every iteration shows
    recorder.frees = {}
    with np.errstate(all="ignore"):
        recorder.run_block(graph.body)
    return ThreadTrace(dict(thread), tuple(entries), omitted)


def _single(op: Op) -> Block:
    block = Block()
    block.ops.append(op)
    return block
