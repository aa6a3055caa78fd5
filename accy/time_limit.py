"""A time limit on the kernel runs of one thread: autotune stops a config that runs too long.

Inside ``with time_limit(seconds, what):`` a run that passes the limit raises
:class:`~accy.errors.TimeLimitError` at the next point where it can stop cleanly, as Ctrl-C does
(a launch on scratch copies leaves the outputs untouched; autotune's runs all are): between two ~10 ms slices of an llvm launch (a single unit of work, one
program or chunk of threads, runs to its end: native code cannot be interrupted), between two
blocks of ops of the numpy interpreters, and every few hundred basic blocks of the PTX emulator.
The ``cuda`` backend's launches are not stopped.
"""

from __future__ import annotations

import contextlib
import threading
import time

from .errors import TimeLimitError

_local = threading.local()


class Limit:
    """When the runs must end (``time.perf_counter()``), and what to say when they do not."""

    __slots__ = ("end", "seconds", "what")

    def __init__(self, seconds: float, what: str):
        self.end, self.seconds, self.what = time.perf_counter() + seconds, seconds, what

    def check(self) -> None:
        if time.perf_counter() > self.end:
            raise TimeLimitError(f"{self.what} ran past its time limit of {self.seconds:.3g} s and was stopped")


@contextlib.contextmanager
def time_limit(seconds: float, what: str = "the run"):
    """Stop the runs of this thread inside the block once ``seconds`` have passed (see the module)."""
    outer = getattr(_local, "limit", None)
    _local.limit = Limit(seconds, what)
    try:
        yield
    finally:
        _local.limit = outer


def current() -> Limit | None:
    """This thread's limit (for a launch to hand to its workers), or None."""
    return getattr(_local, "limit", None)


def check() -> None:
    """Raise :class:`~accy.errors.TimeLimitError` if this thread's runs are past their limit."""
    limit = getattr(_local, "limit", None)
    if limit is not None:
        limit.check()
