"""Scalar types of the accy IR.

A :class:`DType` is an immutable, hashable compile-time fact.  Adding a type
(f16, bf16, f64, i32) means adding one entry here plus one entry per backend
table; the type rules in :mod:`accy.dsl.ops` only look at ``kind``.
"""

from __future__ import annotations

import attrs
import numpy as np

INDEX_MIN = -(2**63)
INDEX_MAX = 2**63 - 1


@attrs.frozen
class DType:
    name: str
    kind: str  # "int", "float" or "bool"
    bits: int
    numpy_name: str

    @property
    def numpy(self) -> np.dtype:
        return np.dtype(self.numpy_name)

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind == "int"

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    def __str__(self) -> str:
        return self.name


index = DType("index", "int", 64, "int64")
f32 = DType("f32", "float", 32, "float32")
boolean = DType("bool", "bool", 1, "bool")

DTYPES = {t.name: t for t in (index, f32, boolean)}
# Element types a buffer may hold.
BUFFER_DTYPES = (f32, index)


def as_dtype(value) -> DType:
    """Accept a DType or its name ("f32", "index", "bool")."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str) and value in DTYPES:
        return DTYPES[value]
    raise TypeError(f"unknown dtype {value!r}; expected one of {', '.join(DTYPES)}")
