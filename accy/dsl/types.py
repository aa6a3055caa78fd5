"""Scalar types of the accy IR, one table entry each.

A :class:`DType` is an immutable, hashable compile-time fact that carries
everything a backend needs to know about the type: its NumPy dtype, its LLVM
type and intrinsic suffix, the libdevice suffix of its math functions, its
size in memory and its range, and for a float type its encoding
(:class:`FloatFormat`) and how its values reach the type they compute in
(:class:`Conversion`).  Lowerings read these fields instead of testing for
particular types or widths, so adding a type is adding one entry here: ``accy``
exports every entry, and DLPack arrays of it are read by its ``dlpack_code``.

The fp8 types ``f8e4m3`` (OCP E4M3FN: no infinities, one NaN per sign),
``f8e4m3fnuz`` (no infinities, no -0: -0's code 0x80 is the one NaN; bias 8) and
``f8e5m2`` are ml_dtypes' ``float8_e4m3fn``, ``float8_e4m3fnuz`` and ``float8_e5m2``: LLVM has no
type for them, so a value is held as its 8-bit code and every op computes in f32
and rounds once back, as f16 and bf16 do.

``index`` is the 64-bit signed type of buffer indices, loop bounds and launch
extents.  It is a type of its own: ``index`` and ``i64`` do not mix without a
``cast``, so a kernel says where it turns data into addresses.
"""

from __future__ import annotations

import enum
import math

import attrs
import numpy as np

INDEX_MIN = -(2**63)
INDEX_MAX = 2**63 - 1


class Conversion(enum.Enum):
    """How a float type's values are held in LLVM IR and reach their compute type."""

    native = "native"  # an LLVM float type: fpext and fptrunc (f16, f32, f64)
    bfloat_bits = "bfloat_bits"  # LLVM bfloat: bits shifted into an f32 and rounded back in integers
    software = "software"  # the code as an integer of the type's width: accy.codegen.minifloat's routines


@attrs.frozen
class FloatFormat:
    """A binary float encoding: a sign bit, ``exponent`` bits and ``mantissa`` bits, IEEE-like
    (subnormals; infinities and NaNs in the top binade) unless ``finite``: then there are no
    infinities and only the all-ones code (of either sign) is NaN, as OCP's E4M3FN.  A
    ``negative_zero_nan`` format (finite too: the "fnuz" types) has no -0 either: its one NaN is
    the code -0 would have, the sign bit alone, and its exponent bias is one more than IEEE's."""

    exponent: int
    mantissa: int
    finite: bool = False
    negative_zero_nan: bool = attrs.field(default=False)

    @negative_zero_nan.validator
    def _finite_too(self, attribute, value):
        if value and not self.finite:
            raise ValueError("a negative_zero_nan format has no infinities: it is finite")

    @property
    def bits(self) -> int:
        return 1 + self.exponent + self.mantissa

    @property
    def bias(self) -> int:
        return 2 ** (self.exponent - 1) - (0 if self.negative_zero_nan else 1)

    @property
    def signed_zero(self) -> bool:
        """Whether -0 is a value (else a negative result that rounds to zero is +0)."""
        return not self.negative_zero_nan

    @property
    def signed_nan(self) -> bool:
        """Whether NaNs come in both signs (else the one NaN code is all there is)."""
        return not self.negative_zero_nan

    @property
    def nan_code(self) -> int:
        """The NaN conversions produce: the positive quiet one, or a finite format's only one
        (of its sign, for E4M3FN; the sign bit alone, for a negative_zero_nan format)."""
        if self.negative_zero_nan:
            return 1 << (self.bits - 1)
        if self.finite:
            return 2 ** (self.bits - 1) - 1
        return ((2**self.exponent - 1) << self.mantissa) | (1 << (self.mantissa - 1))

    @property
    def inf_code(self) -> int | None:
        return None if self.finite else (2**self.exponent - 1) << self.mantissa

    @property
    def max_code(self) -> int:
        """The code of the largest finite value."""
        if self.negative_zero_nan:
            return 2 ** (self.bits - 1) - 1
        return self.nan_code - 1 if self.finite else self.inf_code - 1

    @property
    def max_value(self) -> float:
        exponent, mantissa = divmod(self.max_code, 2**self.mantissa)
        return math.ldexp(1 + mantissa / 2**self.mantissa, exponent - self.bias)

    @property
    def min_subnormal_exponent(self) -> int:
        """e of the smallest positive value, 2**e."""
        return 1 - self.bias - self.mantissa

    def holds(self, other: "FloatFormat") -> bool:
        """Whether every value of ``other`` (its infinities included) is a value of this format."""
        return (other.mantissa <= self.mantissa and other.max_value <= self.max_value
                and other.min_subnormal_exponent >= self.min_subnormal_exponent
                and (other.finite or not self.finite) and (self.signed_zero or not other.signed_zero))


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
    numpy_name: str  # a NumPy dtype name, or else one of ml_dtypes' ("bfloat16", "float8_e4m3fn")
    llvm: str  # the LLVM IR type a value is held in: "float", "half", "bfloat", "double", "i32", "i1"
    # every op of f16, bf16 and fp8 values computes in f32 and rounds once back
    compute_name: str | None = None
    libdevice_suffix: str | None = None  # __nv_exp + suffix: "f" for f32, "" for f64
    format: FloatFormat | None = None  # a float type's encoding
    conversion: Conversion | None = None  # a float type's way to and from its compute type
    # DLPack's type code, for a type NumPy's DLPack import refuses (kDLBfloat, kDLFloat8_*): the
    # others are DLPack's kDLInt, kDLUInt, kDLFloat and kDLBool of their width
    dlpack_code: int | None = None

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
    def export_name(self) -> str:
        """Its name in ``accy``: the name, but ``boolean`` for ``bool`` (a Python builtin)."""
        return "boolean" if self.is_bool else self.name

    @property
    def is_narrow(self) -> bool:
        """A float type whose ops compute in a wider one (``compute``) and round once back."""
        return self.compute_name is not None

    @property
    def compute(self) -> "DType":
        """The type this type's ops compute in (f32 for f16, bf16 and fp8), rounding once back."""
        return DTYPES[self.compute_name] if self.compute_name else self

    @property
    def min(self) -> int | float:
        if self.is_float:
            return -self.format.max_value
        return -(2 ** (self.bits - 1)) if self.is_signed else 0

    @property
    def max(self) -> int | float:
        if self.is_float:
            return self.format.max_value
        if self.is_bool:
            return 1
        return 2 ** (self.bits - 1) - 1 if self.is_signed else 2**self.bits - 1

    def wrap(self, value: int) -> int:
        """An integer reduced into this type's range, modulo 2**bits (how ints overflow)."""
        value %= 2**self.bits
        return value - 2**self.bits if self.is_signed and value >= 2 ** (self.bits - 1) else value

    def code(self, value) -> int:
        """The bits of ``value`` rounded to this float type, as an unsigned int."""
        with np.errstate(all="ignore"):
            return int(np.asarray(value, np.float64).astype(self.numpy).view(_UNSIGNED[self.itemsize]))

    def value_of(self, code: int) -> float:
        """The float whose bits in this type are ``code``."""
        return float(np.asarray(code, _UNSIGNED[self.itemsize]).view(self.numpy))

    def __str__(self) -> str:
        return self.name


def numpy_dtype(name: str) -> np.dtype:
    """NumPy's dtype ``name``, or else ml_dtypes' (imported only then: it takes half a second)."""
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))


_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}

f16 = DType("f16", Kind.float, 16, "float16", "half", compute_name="f32", format=FloatFormat(5, 10),
            conversion=Conversion.native)
bf16 = DType("bf16", Kind.float, 16, "bfloat16", "bfloat", compute_name="f32", format=FloatFormat(8, 7),
             conversion=Conversion.bfloat_bits, dlpack_code=4)
f32 = DType("f32", Kind.float, 32, "float32", "float", libdevice_suffix="f", format=FloatFormat(8, 23),
            conversion=Conversion.native)
f64 = DType("f64", Kind.float, 64, "float64", "double", libdevice_suffix="", format=FloatFormat(11, 52),
            conversion=Conversion.native)
f8e4m3 = DType("f8e4m3", Kind.float, 8, "float8_e4m3fn", "i8", compute_name="f32",
               format=FloatFormat(4, 3, finite=True), conversion=Conversion.software, dlpack_code=10)
f8e4m3fnuz = DType("f8e4m3fnuz", Kind.float, 8, "float8_e4m3fnuz", "i8", compute_name="f32",
                   format=FloatFormat(4, 3, finite=True, negative_zero_nan=True), conversion=Conversion.software,
                   dlpack_code=11)
f8e5m2 = DType("f8e5m2", Kind.float, 8, "float8_e5m2", "i8", compute_name="f32", format=FloatFormat(5, 2),
               conversion=Conversion.software, dlpack_code=12)
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
    t.name: t
    for t in (f16, bf16, f32, f64, f8e4m3, f8e4m3fnuz, f8e5m2, i8, i16, i32, i64, u8, u16, u32, u64, index, boolean)
}


@attrs.frozen
class TileType:
    """The type of a tile-level value: a static ``shape`` (1 to 3 Python ints) of ``dtype``
    elements, written ``tile<f32, 64x32>``.  One value of it exists per program of a
    ``for_each_tile`` launch."""

    dtype: DType
    shape: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def with_dtype(self, dtype: DType) -> "TileType":
        return TileType(dtype, self.shape)

    # the element type's classes, so the rules written for scalars read a tile's elements
    is_float = property(lambda self: self.dtype.is_float)
    is_int = property(lambda self: self.dtype.is_int)
    is_bool = property(lambda self: self.dtype.is_bool)
    is_index = property(lambda self: self.dtype.is_index)
    is_unsigned = property(lambda self: self.dtype.is_unsigned)

    def __str__(self) -> str:
        return f"tile<{self.dtype}, {'x'.join(map(str, self.shape))}>"


MAX_TILE_RANK = 5
# the most elements one tile may hold (Triton's limit), wherever the tile is made; a GPU program
# holds at most accy.lowering.distribute.MAX_ELEMENTS_PER_THREAD of them per thread
MAX_TILE_ELEMENTS = 1 << 20


def element_type(t) -> DType:
    """A tile type's element type; a scalar type itself."""
    return t.dtype if isinstance(t, TileType) else t


def shape_of(t) -> tuple[int, ...]:
    """A tile type's shape; () for a scalar type."""
    return t.shape if isinstance(t, TileType) else ()


def type_named(text: str):
    """The type a text form names: ``f32`` or ``tile<f32, 64x32>``; KeyError when none."""
    if text.startswith("tile<") and text.endswith(">"):
        name, _, dims = text[5:-1].partition(", ")
        try:
            shape = tuple(int(d) for d in dims.split("x"))
        except ValueError:
            raise KeyError(text) from None
        return TileType(DTYPES[name], shape)
    return DTYPES[text]


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
    for t in DTYPES.values():  # by name first: a type's .numpy imports ml_dtypes (half a second) for bf16 and fp8
        if not t.is_index and t.numpy_name == dtype.name and t.numpy == dtype:
            return t
    return None
