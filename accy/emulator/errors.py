"""The emulator's errors.  Every one derives from :class:`accy.errors.AccyError`.

Messages name the PTX source line (number and text) and, where a thread caused
the error, the thread (block and thread index), so a failure can be found in
the PTX and reproduced.
"""

from __future__ import annotations

from .. import errors
from ..errors import AccyError


class PtxError(AccyError, RuntimeError):
    """The PTX could not be parsed, prepared or executed (an unknown instruction,
    a ``trap``, a malformed operand, ...).  ``loc``: the kernel source line the PTX's
    ``.loc`` gives the instruction (``file.py:12``), where it has one."""

    def __init__(self, message: str, *, line: int | None = None, source: str | None = None,
                 thread: str | None = None, loc: str | None = None):
        self.line, self.source, self.thread, self.loc = line, source, thread, loc
        parts = [message]
        if line is not None:
            where = f" ({loc})" if loc else ""
            parts.append(f"at PTX line {line}: {source.strip() if source else ''}".rstrip() + where)
        if thread:
            parts.append(f"in {thread}")
        super().__init__("\n  ".join(parts))


class PtxMemoryError(PtxError, IndexError):
    """A load, store or atomic touched memory outside every allocation (global),
    outside a block's shared memory or a thread's local memory, or was misaligned."""

    def __init__(self, message: str, *, address: int | None = None, **kw):
        self.address = address
        super().__init__(message, **kw)


class PtxAsyncCopyError(PtxMemoryError):
    """Shared memory touched while a ``cp.async`` still writes it: before the issuing
    thread's ``cp.async.wait_group``/``wait_all`` retired the copy's group, or (by another
    thread) before a barrier after that wait.  A GPU would read stale data; the message
    names both instructions and both threads."""


class PtxBarrierError(PtxError):
    """A barrier (``bar.sync``) or a warp-synchronous instruction can never complete:
    a block's live threads wait at different barriers, or some never arrive."""


class RaceError(PtxError, errors.RaceError):
    """Two threads touched the same bytes, at least one with a plain write (or one atomically
    and one with a plain read), with nothing ordering them (see :mod:`.races`).  ``first`` and
    ``second`` are the two accesses (:class:`~accy.emulator.races.Side`: kind, block, thread,
    PTX line and text, source line), in the order the schedule ran them; ``schedule`` the
    schedule's name, which replays the launch (``ACCY_PTX_SCHEDULE``)."""

    def __init__(self, message: str, *, first=None, second=None, schedule: str | None = None,
                 space: str | None = None, address: int | None = None):
        super().__init__(message)  # the message names both instructions: no one "at PTX line"
        self.first, self.second, self.schedule = first, second, schedule
        self.space, self.address = space, address
        if second is not None:
            self.line, self.source, self.loc = second.line, second.text, second.source


__all__ = ["PtxError", "PtxMemoryError", "PtxAsyncCopyError", "PtxBarrierError", "RaceError"]
