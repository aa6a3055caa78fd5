"""Scalar types of the accy IR, one table entry each.

A :class:`DType` is an immutable, hashable compile-time fact that carries
everything a backend needs to know about the type: its NumPy dtype, its LLVM
type and intrinsic suffix, the libdevice suffix of its math functions, its
size in memory and its range.  Lowerings read these fields instead of testing
for particular types, so adding a type is adding one entry here.

``index`` is the 64-bit signed type of buffer indices, loop bounds and launch
extents.  It is a type of its own: ``index`` and ``i64`` do not mix without a
``cast``, so a kernel says where it turns data into addresses.
"""

from __future__ import annotations

import enum

import attrs
import numpy as np

INDEX_MIN = -(2**63)
INDEX_MAX = 2**63 - 1


class Kind(enum.Enum):
    float = "float"
    signed = "signed"
    unsigned = "unsigned"
    bool = "bool"


@attrs.frozen
class DType:
    name: str
    kind: Kind
    bits: int
    numpy_name: str  # a NumPy dtype name; "bfloat16" comes from ml_dtypes
    llvm: str  # the LLVM IR type: "float", "half", "bfloat", "double", "i32", "i1"
    # transcendental functions of f16/bf16 compute in f32 and round once
    compute_name: str | None = None
    libdevice_suffix: str | None = None  # __nv_exp + suffix: "f" for f32, "" for f64

    @property
    def numpy(self) -> np.dtype:
        return numpy_dtype(self.numpy_name)

    @property
    def is_float(self) -> bool:
        return self.kind is Kind.float

    @property
    def is_int(self) -> bool:
        """Signed, unsigned or index."""
        return self.kind in (Kind.signed, Kind.unsigned)

    @property
    def is_signed(self) -> bool:
        return self.kind is Kind.signed

    @property
    def is_unsigned(self) -> bool:
        return self.kind is Kind.unsigned

    @property
    def is_bool(self) -> bool:
        return self.kind is Kind.bool

    @property
    def is_index(self) -> bool:
        return self.name == "index"

    @property
    def itemsize(self) -> int:
        """Bytes per element in memory (a bool takes a byte, as in NumPy)."""
        return max(self.bits // 8, 1)

    @property
    def suffix(self) -> str:
        """The LLVM intrinsic suffix: ``llvm.maximum.f32``, ``llvm.smax.i64``."""
        return {"float": "f32", "half": "f16", "bfloat": "bf16", "double": "f64"}.get(self.llvm, self.llvm)

    @property
    def compute(self) -> "DType":
        """The type math functions of this type compute in (f32 for f16 and bf16)."""
        return DTYPES[self.compute_name] if self.compute_name else self

    @property
    def min(self) -> int | float:
        if self.is_float:
            return float(-np.finfo(self.numpy).max)
        return -(2 ** (self.bits - 1)) if self.is_signed else 0

    @property
    def max(self) -> int | float:
        if self.is_float:
            return float(np.finfo(self.numpy).max)
        if self.is_bool:
            return 1
        return 2 ** (self.bits - 1) - 1 if self.is_signed else 2**self.bits - 1

    def wrap(self, value: int) -> int:
        """An integer reduced into this type's range, modulo 2**bits (how ints overflow)."""
        value %= 2**self.bits
        return value - 2**self.bits if self.is_signed and value >= 2 ** (self.bits - 1) else value

    def __str__(self) -> str:
        return self.name


def numpy_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


f16 = DType("f16", Kind.float, 16, "float16", "half", compute_name="f32")
bf16 = DType("bf16", Kind.float, 16, "bfloat16", "bfloat", compute_name="f32")
f32 = DType("f32", Kind.float, 32, "float32", "float", libdevice_suffix="f")
f64 = DType("f64", Kind.float, 64, "float64", "double", libdevice_suffix="")
i8 = DType("i8", Kind.signed, 8, "int8", "i8")
i16 = DType("i16", Kind.signed, 16, "int16", "i16")
i32 = DType("i32", Kind.signed, 32, "int32", "i32")
i64 = DType("i64", Kind.signed, 64, "int64", "i64")
u8 = DType("u8", Kind.unsigned, 8, "uint8", "i8")
u16 = DType("u16", Kind.unsigned, 16, "uint16", "i16")
u32 = DType("u32", Kind.unsigned, 32, "uint32", "i32")
u64 = DType("u64", Kind.unsigned, 64, "uint64", "i64")
index = DType("index", Kind.signed, 64, "int64", "i64")
boolean = DType("bool", Kind.bool, 1, "bool", "i1")

DTYPES: dict[str, DType] = {
    t.name: t for t in (f16, bf16, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64, index, boolean)
}


def as_dtype(value) -> DType:
    """Accept a DType or its name ("f32", "index", "bool")."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str) and value in DTYPES:
        return DTYPES[value]
    raise TypeError(f"unknown dtype {value!r}; expected one of {', '.join(DTYPES)}")


def from_numpy(dtype) -> DType | None:
    """The accy type holding elements of NumPy ``dtype`` (int64 arrays are ``i64``), or None."""
    dtype = np.dtype(dtype)
    for t in DTYPES.values():
        if not t.is_index and t.numpy == dtype:
            return t
    return None
