"""Warp schedules: the order the emulator runs a block's warps in.

* ``lockstep``: every thread of a batch of blocks advances together, instruction by
  instruction (the fastest; the library's default);
* ``reverse``: each warp runs alone to its next barrier (or its end), the block's last warp
  first, then the one before it, ...;
* ``random:SEED``: each warp runs alone to its next barrier, in a permutation drawn per block
  and per round (a round: every runnable warp runs once, up to a barrier) from ``SEED``;
  ``random`` alone draws a new seed for every launch, from a counter of the process (so a
  test suite's launches each get another order, and the run is reproducible).

A schedule changes what a racy kernel computes, never what the race checker reports
(:mod:`.races` orders accesses by barriers and warp synchronisation, not by when they ran),
and never what a race-free kernel computes, except the order of its atomics.  Warps of the
blocks in one batch run together (warp slot k of every block at once), so a block's
warps take turns without losing the vectorisation across blocks.

It is chosen per launch (``Function.launch(schedule=...)``), per device
(``Device(schedule=...)``), or by the ``ACCY_PTX_SCHEDULE`` environment variable; a
:class:`~accy.emulator.RaceError` names the schedule it ran under, seed included.
"""

from __future__ import annotations

import enum
import itertools
import os

import attrs
import numpy as np

from .errors import PtxError

SCHEDULE_VARIABLE = "ACCY_PTX_SCHEDULE"


class Order(enum.Enum):
    LOCKSTEP = "lockstep"
    REVERSE = "reverse"
    RANDOM = "random"


_launches = itertools.count(1)  # the seeds of "random": one per launch


@attrs.frozen
class Schedule:
    """A warp order; ``seed`` for RANDOM (None: a new one each launch)."""

    order: Order
    seed: int | None = None

    @classmethod
    def parse(cls, text: str) -> "Schedule":
        """``lockstep``, ``reverse``, ``random`` or ``random:SEED`` (SEED a whole number)."""
        name, _, seed = str(text).strip().partition(":")
        try:
            order = Order(name.strip().lower())
        except ValueError:
            order = None
        if order is None or (seed and order is not Order.RANDOM) or (seed and not seed.strip().isdigit()):
            raise PtxError(f"a warp schedule is lockstep, reverse, random or random:SEED (SEED a whole number), "
                           f"got {text!r}")
        return cls(order, int(seed) if seed else None)

    def for_launch(self) -> "Schedule":
        """This schedule with its seed fixed (``random`` draws the next one)."""
        if self.order is Order.RANDOM and self.seed is None:
            return Schedule(Order.RANDOM, next(_launches))
        return self

    @property
    def lockstep(self) -> bool:
        return self.order is Order.LOCKSTEP

    def __str__(self) -> str:
        if self.order is Order.RANDOM:
            return "random" if self.seed is None else f"random:{self.seed}"
        return self.order.value

    def slots(self, first_block: int, blocks: int, warps: int, round_: int) -> np.ndarray:
        """(blocks, warps): the turn each warp of each block takes in round ``round_`` (0 runs
        first) of the batch whose first block is ``first_block``."""
        if self.order is Order.REVERSE:
            return np.broadcast_to(np.arange(warps)[::-1], (blocks, warps))
        if self.order is Order.RANDOM:
            rng = np.random.default_rng([self.seed or 0, first_block, round_])
            return np.argsort(rng.random((blocks, warps)), axis=1)
        return np.zeros((blocks, warps), np.int64)


def resolve(given=None) -> Schedule:
    """The schedule a launch runs under: ``given`` (a :class:`Schedule` or its text), else the
    ``ACCY_PTX_SCHEDULE`` environment variable, else lockstep; its seed fixed."""
    if given is None:
        given = os.environ.get(SCHEDULE_VARIABLE, "").strip() or "lockstep"
    schedule = given if isinstance(given, Schedule) else Schedule.parse(given)
    return schedule.for_launch()
