"""Every error accy raises, in one place.

All derive from :class:`AccyError`, so ``except accy.AccyError`` catches anything
the library reports on purpose.  Each also derives from the built-in exception a
Python user would expect (``TypeError`` for a badly typed program, ``IndexError``
for an out-of-bounds access, ...), so generic handlers keep working.
"""

from __future__ import annotations


class AccyError(Exception):
    """Base class of every error accy raises on purpose."""


class TraceError(AccyError, TypeError):
    """A kernel body recorded an ill-formed program (caught while tracing).

    ``location`` is the line of the user's kernel source that made the bad call.
    """

    def __init__(self, message: str, location=None):
        self.location = location
        if location is not None:
            message = f"{message}\n  at {location}"
        super().__init__(message)


class UnknownOpError(TraceError, AttributeError):
    """A kernel body asked for an op that does not exist (``inner.lgo(x)``)."""


class VerificationError(AccyError):
    """The graph verifier found a broken invariant (a bug in a pass or a backend)."""


class ArgumentError(AccyError, ValueError):
    """Arguments passed to a kernel do not match its parameters."""


class LaunchError(AccyError, ValueError):
    """A launch geometry does not fit the device limits."""


class OutOfBoundsError(AccyError, IndexError):
    """A kernel loaded or stored outside a buffer; nothing was written."""


class MemoryCheckError(AccyError, RuntimeError):
    """The interpreter's memory checks (``check_memory=True``) found a problem."""


class RaceError(MemoryCheckError):
    """Two logical threads wrote the same element in one launch (a race on a GPU)."""


class UninitializedError(MemoryCheckError):
    """Shared memory was read before its block wrote it (its contents would be garbage)."""


class BarrierError(AccyError, RuntimeError):
    """A barrier was reached by only part of a block (on a GPU: a hang or corrupted memory)."""


class UnwrittenOutputError(MemoryCheckError):
    """Elements of a write-only output that no thread wrote (they would hold garbage)."""


class ExecutionError(AccyError, ArithmeticError):
    """A kernel failed at run time for another reason (e.g. index division by zero)."""


class BackendUnavailableError(AccyError, RuntimeError):
    """The requested backend cannot run here (missing package, toolkit or device)."""


class CompileError(AccyError, RuntimeError):
    """Lowering or assembling a kernel failed."""


class AutotuneError(AccyError, ValueError):
    """An autotuned kernel's configs or key are malformed, or every config failed."""


class TimeLimitError(AccyError, TimeoutError):
    """A run went past the time limit it ran under (:mod:`accy.time_limit`: autotune's per-config
    limit) and was stopped between two steps, as Ctrl-C stops it."""


__all__ = [
    "AccyError",
    "TraceError",
    "UnknownOpError",
    "VerificationError",
    "ArgumentError",
    "LaunchError",
    "OutOfBoundsError",
    "ExecutionError",
    "MemoryCheckError",
    "RaceError",
    "UninitializedError",
    "BarrierError",
    "UnwrittenOutputError",
    "BackendUnavailableError",
    "CompileError",
    "AutotuneError",
    "TimeLimitError",
]


class CacheWarning(RuntimeWarning):
    """The on-disk compile cache skipped an entry or a directory (corrupt, not private to
    this user, or not writable): accy compiled instead, and the program still runs."""
