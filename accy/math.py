"""Math on traced values as plain functions: ``accy.math.erf(x)`` records ``erf`` into the
kernel being traced, exactly as ``inner.erf(x)`` or ``x.erf()`` would.

One function per op of the table marked as math (see docs/ir.md for what each does).
"""

from __future__ import annotations

from .dsl import context
from .dsl.ops import OPS


def _function(method: str, doc: str):
    def call(*xs):
        return getattr(context.current(), method)(*xs)

    call.__name__ = call.__qualname__ = method
    call.__doc__ = doc
    return call


__all__ = []
for _opdef in OPS.values():
    if _opdef.math:
        _name = _opdef.methods[0]
        globals()[_name] = _function(_name, _opdef.doc or f"Record ``{_opdef.name}``.")
        __all__.append(_name)
