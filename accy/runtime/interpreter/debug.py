"""Debugging one logical thread: every op's value, in execution order.

``run(args, backend="numpy", debug_thread={"b": 1, "q": 0, "v": 2})`` replays the
graph for that one thread on copies of the arguments (so the real, vectorised
launch of every thread is not slowed down), with plain loops so each fold
iteration shows.  A :class:`Recorder` listens to the interpreter and keeps each
op's text form, its values (every result of a tuple fold) and the line of the
user's source that recorded it, the thread's own coordinates as the launch's
values, and each loop iteration's variable and accumulators; past ``cap``
entries it only counts.
"""

from __future__ import annotations

from typing import Protocol

import attrs
import numpy as np

from ...dsl.ir import Axis, Block, Graph, Op, Value, op_lines, value_names
from ...errors import ArgumentError


class Observer(Protocol):
    """What the interpreter reports to an observer."""

    env: dict[Value, object] | None  # the values of the interpreter it listens to (run_graph hands them over)

    def op(self, op: Op, value) -> None:
        """``op`` ran; ``value`` is its first result, or None (the others are in ``env``)."""

    def enter(self, fold: Op, i: int) -> None:
        """An iteration of ``fold`` starts (plain loops only); its region's arguments are in ``env``."""

    def leave(self) -> None:
        """That iteration ended."""


@attrs.frozen
class TraceEntry:
    op: str  # the op's line in the text form
    value: object  # its result (a Python number or bool), a tuple of them for several, None for none
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


def check_thread(axes: tuple[Axis, ...], thread) -> None:
    """``thread`` must name every logical axis with an index inside it."""
    names = [a.name for a in axes]
    if not isinstance(thread, dict) or sorted(thread) != sorted(names):
        raise ArgumentError(f"debug_thread: give every logical axis by name ({', '.join(names)}), got {thread!r}")
    for a in axes:
        value = thread[a.name]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < a.extent:
            raise ArgumentError(f"debug_thread: {a.name}={value!r} is outside the axis (0 <= {a.name} < {a.extent})")


def _plain(value):
    value = np.asarray(value)
    return value.item() if value.size == 1 else value.tolist()


class Recorder:
    """An interpreter observer that keeps what one thread computed."""

    def __init__(self, graph: Graph, thread: dict, *, cap: int = 2000):
        self.thread = dict(thread)
        self.lines = op_lines(graph)
        self.cap = cap
        self.entries: list[TraceEntry] = []
        self.omitted = 0
        self.loops: list[tuple[str, int]] = []
        self.names = value_names(graph)
        self.launch = graph.launch_op
        self.env: dict[Value, object] | None = None
        self.shown_thread = False

    def _keep(self, text: str, value, op: Op) -> None:
        if len(self.entries) < self.cap:
            self.entries.append(TraceEntry(text, value, str(op.location) if op.location else "", tuple(self.loops)))
        else:
            self.omitted += 1

    def _values(self, values: tuple[Value, ...], first=None):
        """Plain values of ``values``: one, a tuple of several, or None for none."""
        if self.env is None:  # an interpreter that does not share its values: the first result only
            return None if first is None else _plain(first)
        plain = tuple(_plain(self.env[v]) for v in values if v in self.env)
        return plain[0] if len(plain) == 1 else plain or None

    def _thread_coordinates(self, block: Block) -> None:
        """Before the first op inside the launch: its region arguments, the thread's coordinates."""
        if self.shown_thread or self.launch is None or block is self.launch.block:
            return
        self.shown_thread = True
        region = self.launch.regions[0]
        for arg, axis_name in zip(region.args, self.launch.attrs["axes"]):
            self._keep(f"{self.names.get(arg, '%?')} = thread's {axis_name}", self.thread.get(axis_name), self.launch)

    def op(self, op: Op, value) -> None:
        if op.opcode in ("for_each", "yield"):
            return
        self._thread_coordinates(op.block)
        text = self.lines.get(op, op.opcode).removesuffix(" {")  # a loop's header line
        self._keep(text, self._values(op.results, value), op)

    def enter(self, fold: Op, i: int) -> None:
        self._thread_coordinates(fold.block)
        self.loops.append((", ".join(self.names.get(r, "%?") for r in fold.results) or "loop", i))
        (region,) = fold.regions
        args = ", ".join(f"{self.names.get(v, '%?')}: {v.type}" for v in region.args)
        self._keep(f"^({args})", self._values(region.args, i), fold)

    def leave(self) -> None:
        self.loops.pop()

    def trace(self) -> ThreadTrace:
        return ThreadTrace(self.thread, tuple(self.entries), self.omitted)
