"""Debugging one logical thread: every op's value, in execution order.

``run(args, backend="numpy", debug_thread={"b": 1, "q": 0, "v": 2})`` replays the
graph for that one thread on copies of the arguments (so the real, vectorised
launch of every thread is not slowed down), with plain loops so each fold
iteration shows.  A :class:`Recorder` listens to the interpreter and keeps each
op's text form, its value and the line of the user's source that recorded it;
past ``cap`` entries it only counts.
"""

from __future__ import annotations

from typing import Protocol

import attrs
import numpy as np

from ..dsl.ir import Axis, Graph, Op, op_lines
from ..errors import ArgumentError


class Observer(Protocol):
    """What the interpreter reports to an observer."""

    def op(self, op: Op, value) -> None:
        """``op`` ran; ``value`` is its first result, or None."""

    def enter(self, fold: Op, i: int) -> None:
        """An iteration of ``fold`` starts (plain loops only)."""

    def leave(self) -> None:
        """That iteration ended."""


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

    def op(self, op: Op, value) -> None:
        if op.opcode in ("for_each", "yield"):
            return
        if len(self.entries) < self.cap:
            self.entries.append(TraceEntry(self.lines.get(op, op.opcode), None if value is None else _plain(value),
                                           str(op.location) if op.location else "", tuple(self.loops)))
        else:
            self.omitted += 1

    def enter(self, fold: Op, i: int) -> None:
        self.loops.append((self.lines.get(fold, "fold").split(" = ")[0], i))

    def leave(self) -> None:
        self.loops.pop()

    def trace(self) -> ThreadTrace:
        return ThreadTrace(self.thread, tuple(self.entries), self.omitted)
