"""Atomic read-modify-writes of many lanes (threads, or tile programs) applied to a buffer in
lane order, each lane getting the old value that order gives it: both interpreters' atomics."""

from __future__ import annotations

import numpy as np

from .pointwise import EVAL


def _bits(x: np.ndarray) -> np.ndarray:
    """A float's bit pattern (atomic_cas compares bits)."""
    return x.view(f"u{x.dtype.itemsize}") if x.dtype.kind in "fV" else x


_ATOMIC_COMBINE = {"add": EVAL["add"], "max": EVAL["max"], "min": EVAL["min"],
                   "exchange": lambda old, new: new}


def apply_atomics(kind: str, memory: np.ndarray, elements: np.ndarray, values: list) -> np.ndarray:
    """Apply one atomic op of many lanes to ``memory`` in lane order; the old values."""
    old = np.empty(elements.size, memory.dtype)
    if elements.size == 0:
        return old
    order = np.argsort(elements, kind="stable")  # by element, then lane (lanes come in order)
    e = elements[order]
    vals = [v[order] for v in values]
    starts = np.ones(e.size, bool)
    starts[1:] = e[1:] != e[:-1]
    group = np.cumsum(starts) - 1
    rank = np.arange(e.size) - np.flatnonzero(starts)[group]  # position within its element's queue
    sorted_old = np.empty(e.size, memory.dtype)
    if kind == "add" and memory.dtype.kind in "iu":  # integers wrap: prefix sums are exact
        before = np.cumsum(vals[0], dtype=memory.dtype) - vals[0]
        sorted_old = memory[e] + (before - before[np.flatnonzero(starts)][group])
        np.add.at(memory, e[starts], np.add.reduceat(vals[0], np.flatnonzero(starts)).astype(memory.dtype))
    else:  # one round per queue position: each element changes once per round
        for r in range(int(rank.max()) + 1):
            turn = rank == r
            at = e[turn]
            current = memory[at]
            sorted_old[turn] = current
            if kind == "cas":
                compare, new = vals[0][turn], vals[1][turn]
                memory[at] = np.where(_bits(current) == _bits(compare), new, current)
            else:
                memory[at] = np.asarray(_ATOMIC_COMBINE[kind](current, vals[0][turn])).astype(memory.dtype)
    old[order] = sorted_old
    return old
