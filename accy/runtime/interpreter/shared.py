"""What the SIMT and the tile interpreters evaluate alike: scalar constants and buffer facts,
and the two places where their lanes (threads, or programs) may disagree: a branch whose
condition differs runs each side under the mask of the lanes that take it, and a fold whose
trip counts differ runs until the longest is done.  ``run`` is the interpreter: its ``env``,
``buffers`` and ``active`` (the mask of the lanes running, None for all)."""

from __future__ import annotations

import numpy as np

from ...dsl.ir import Op
from ...dsl.types import INDEX_MAX, INDEX_MIN


class ScalarOps:
    """The handlers of the ops with no operand to evaluate (a mixin: ``self`` is the interpreter)."""

    def op_yield(self, op: Op) -> None:
        pass

    def op_const(self, op: Op) -> None:
        self.env[op.result] = op.attrs["dtype"].numpy.type(op.attrs["value"])

    def op_size(self, op: Op) -> None:
        self.env[op.result] = np.int64(self.buffers[op.attrs["buffer"]].size)

    def op_aligned(self, op: Op) -> None:
        address = self.buffers[op.attrs["buffer"]].__array_interface__["data"][0]
        self.env[op.result] = np.bool_(address % op.attrs["bytes"] == 0)


def branch_values(run, cond, then, otherwise, region_values, merge) -> list:
    """The values an ``if`` yields: its ``then`` or ``otherwise`` region's (``region_values``)
    where ``cond`` is one value, else each side's under the mask of the lanes taking it,
    ``merge(cond, a, b)`` choosing between them where both sides ran."""
    if np.ndim(cond) == 0:
        region = then if cond else otherwise
        return region_values(region) if region is not None else []
    outer = run.active
    taken = cond if outer is None else cond & outer
    skipped = ~cond if outer is None else ~cond & outer
    branches = []
    try:
        for region, mask in ((then, taken), (otherwise, skipped)):
            if region is not None and np.any(mask):
                run.active = mask
                branches.append(region_values(region))
            else:
                branches.append(None)
    finally:
        run.active = outer
    if branches[0] is None or branches[1] is None:
        return branches[0] or branches[1] or []
    return [merge(cond, a, b) for a, b in zip(*branches)]


def step_without_wrap(i, step: int):
    """``i + step``, saturating where it would wrap, so a loop ending near the
    edge of the index range stops instead of starting over."""
    nxt = i + np.int64(step)
    wrapped = (nxt < i) if step > 0 else (nxt > i)
    return np.where(wrapped, np.int64(INDEX_MAX if step > 0 else INDEX_MIN), nxt)


def divergent_fold(run, start, stop, step: int, iterate, accs, merge) -> list:
    """A fold whose bounds differ between lanes, until the longest is done: a lane that is done
    keeps its carried values (``merge(active, new, old)``) and runs nothing; ``iterate(i, accs)``
    runs one trip of the lanes still in it."""
    outer = run.active
    i = np.asarray(start, np.int64) + np.zeros(np.shape(stop), np.int64)
    try:
        while True:
            inside = (i < stop) if step > 0 else (i > stop)
            active = inside if outer is None else inside & outer
            if not np.any(active):
                break
            run.active = active
            new = iterate(i, accs)
            accs = [merge(active, v, a) for v, a in zip(new, accs)]
            i = np.where(active, step_without_wrap(i, step), i)
    finally:
        run.active = outer
    return accs
