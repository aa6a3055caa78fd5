"""The interpreters' op table of pointwise ops (:data:`EVAL`), shared by the SIMT and the tile
interpreter so that elementwise results are bit for bit the same in both, and the plain
functions (:data:`WIDE`) the hot paths call where the operands are wider than f16/bf16."""

from __future__ import annotations

import numpy as np

from . import numerics

# An EVAL entry that rounds through f32 for narrow operands -> what it computes for every other
# type: the plain function, called directly on the hot path (the wrapper's checks cost more
# than the arithmetic on the small arrays most ops see).
WIDE: dict[object, object] = {}


def _rounded(fn):
    op = numerics.rounded(fn)
    WIDE[op] = fn
    return op


# One entry per pointwise op: NumPy arrays (or scalars) in, the result out.
EVAL = {
    "add": _rounded(np.add),
    "sub": _rounded(np.subtract),
    "mul": _rounded(np.multiply),
    "div": _rounded(np.true_divide),  # floats; integers: see Interpreter.div
    "mod": _rounded(numerics.python_mod),
    "pow": numerics.math_function(np.power),
    "max": numerics.maximum,
    "min": numerics.minimum,
    "neg": np.negative,
    "abs": np.abs,
    "fma": numerics.fma,
    "copysign": _rounded(np.copysign),
    "flush_subnormal": numerics.flush_subnormal,
    **{name: numerics.math_function(fn) for name, fn in numerics.MATH64.items()},
    "floor": _rounded(np.floor),
    "ceil": _rounded(np.ceil),
    "round": _rounded(np.rint),
    "trunc": _rounded(np.trunc),
    "isnan": np.isnan,
    "isinf": np.isinf,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "eq": np.equal,
    "ne": np.not_equal,
    "and": np.bitwise_and,  # logical on bool
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
    "not": np.invert,
    "shl": numerics.shift_left,
    "shr": numerics.shift_right,
    "select": np.where,
}
