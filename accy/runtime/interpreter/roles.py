"""Warp roles in the reference: the two sides of a *roles* ``if`` (a warp-specialised program's
producer and consumers, :mod:`accy.lowering.software_pipeline`) run as coroutines.

In lockstep, one side would run to its end before the other starts, and a consumer waiting for
a stage its producer has not filled yet (or a producer waiting for a stage its consumers have
not released) would wait forever.  So each side runs on a thread of its own, one at a time: a
side runs until it waits for something that has not happened (an mbarrier phase,
:meth:`Roles.wait_until`), then the other runs.  Where neither can go on, the program would hang
on a GPU: that is an error naming both waits.  The order is deterministic: the first side runs
first, and a side runs until it blocks or ends."""

from __future__ import annotations

import threading

from ... import time_limit
from ...errors import BarrierError


class Roles:
    """The coroutines of one roles ``if``: :meth:`run` them, :meth:`wait_until` inside them."""

    def __init__(self):
        self.cv = threading.Condition()
        self.turn = 0  # the side running
        self.sides = 0
        self.waiting: dict[int, tuple] = {}  # side -> (predicate, what it waits for)
        self.done: set[int] = set()
        self.error: BaseException | None = None
        self.local = threading.local()

    def run(self, sides: list) -> None:
        """Run each of ``sides`` (callables) to its end, as coroutines; the first error raised
        in any is raised here."""
        limit = getattr(time_limit._local, "limit", None)
        self.sides = len(sides)

        def main(k, fn):
            self.local.side = k
            time_limit._local.limit = limit
            with self.cv:
                self.cv.wait_for(lambda: self.turn == k or self.error is not None)
            try:
                if self.error is None:
                    fn()
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                with self.cv:
                    if self.error is None:
                        self.error = e
            finally:
                with self.cv:
                    self.done.add(k)
                    self._hand_on(k)

        threads = [threading.Thread(target=main, args=(k, fn), daemon=True) for k, fn in enumerate(sides)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self.error is not None:
            raise self.error

    def _hand_on(self, k: int) -> None:
        """Side ``k`` blocks or ends: the turn goes to the next side that can run (the lock is
        held); where none can and some have not ended, the program hangs."""
        for step in range(1, self.sides + 1):
            other = (k + step) % self.sides
            if other in self.done:
                continue
            pending = self.waiting.get(other)
            if pending is None or pending[0]():
                self.turn = other
                self.cv.notify_all()
                return
        if len(self.done) < self.sides and self.error is None:
            stuck = "; ".join(what for _, what in self.waiting.values())
            self.error = BarrierError(f"warp roles: no role can go on ({stuck}): on a GPU this hangs")
        self.cv.notify_all()

    def wait_until(self, predicate, what: str) -> None:
        """Inside a side: return once ``predicate()`` holds, letting the other sides run meanwhile;
        an error where no side can go on."""
        k = self.local.side
        with self.cv:
            if predicate():
                return
            self.waiting[k] = (predicate, what)
            self._hand_on(k)
            self.cv.wait_for(lambda: (self.turn == k and predicate()) or self.error is not None)
            del self.waiting[k]
            if self.error is not None:
                raise self.error
