"""The tracing context: which builder is recording now, and where the user is.

Pythonic kernels (``a + b``, ``x[i]``) record into the innermost active builder,
kept on a per-thread stack so several threads may trace at once.
"""

from __future__ import annotations

import linecache
import os
import sys
import threading

from ..errors import TraceError
from .ir import SourceLocation

# frames of the tracing machinery itself; a library kernel's own source (accy/library) counts as user code
_DSL_DIR = os.path.dirname(os.path.abspath(__file__))
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


def user_location() -> SourceLocation | None:
    """The innermost stack frame outside the DSL's machinery: the kernel's own line."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        generated = filename.startswith("<") and filename != "<stdin>" and not filename.startswith("<doc")
        if not generated and not os.path.abspath(filename).startswith(_DSL_DIR + os.sep):
            code = linecache.getline(filename, frame.f_lineno).strip()
            return SourceLocation(filename, frame.f_lineno, frame.f_code.co_name, code)
        frame = frame.f_back
    return None
