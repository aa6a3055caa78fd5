"""The tracing context: which builder is recording now, and where the user is.

Pythonic kernels (``a + b``, ``x[i]``) record into the innermost active builder,
kept on a per-thread stack so several threads may trace at once.
"""

from __future__ import annotations

import functools
import linecache
import os
import sys
import threading

from ..errors import TraceError
from .ir import SourceLocation

# accy's own frames are machinery; a library kernel's source (accy/library) is kernel code
_ACCY_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_KERNEL_DIRS = (os.path.join(_ACCY_DIR, "library") + os.sep,)
_state = threading.local()


def stack() -> list:
    if not hasattr(_state, "stack"):
        _state.stack = []
    return _state.stack


def current():
    """The builder recording now; an error outside a kernel body."""
    builders = stack()
    if not builders:
        raise TraceError(
            "a traced value was used outside a kernel body; operators on traced values "
            "only work while accy traces the kernel",
            user_location(),
        )
    return builders[-1]


@functools.cache  # a handful of files, asked about once per recorded op
def _is_machinery(filename: str) -> bool:
    if filename.startswith("<"):  # exec, stdin, a notebook cell, a doctest: user code
        # ... but not Python's frozen modules, nor the methods attrs writes for accy's classes
        return filename.startswith("<frozen ") or (filename.startswith("<attrs generated ") and " accy." in filename)
    path = os.path.abspath(filename)
    if path.startswith(_KERNEL_DIRS):
        return False
    return path.startswith(_ACCY_DIR + os.sep)


def user_location() -> SourceLocation | None:
    """The innermost stack frame outside accy's machinery: the kernel's own line."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not _is_machinery(filename):
            code = linecache.getline(filename, frame.f_lineno, frame.f_globals).strip()
            return SourceLocation(filename, frame.f_lineno, frame.f_code.co_name, code)
        frame = frame.f_back
    return None
