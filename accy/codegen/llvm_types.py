"""LLVM types and constants of accy's dtypes, shaped like a scalar or a vector of lanes:
what every lowering module builds its values from."""

from __future__ import annotations

import struct

from llvmlite import ir
from llvmlite.ir import types as _ir_types

from ..dsl.types import DType
from ..targets import WARP_SIZE

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
VOID = ir.VoidType()


class BFloatType(_ir_types._BaseFloatType):
    """LLVM's ``bfloat`` (llvmlite has no class for it); constants print as ``0xR....``."""

    null = "0.0"
    intrinsic_name = "bf16"

    def __str__(self):
        return "bfloat"

    def format_constant(self, value):
        bits = struct.unpack("<I", struct.pack("<f", value))[0]
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 if value == value else 0x7FC0
        return f"0xR{rounded & 0xFFFF:04X}"


BFloatType._create_instance()

_LLVM_TYPES = {"float": ir.FloatType(), "half": ir.HalfType(), "bfloat": BFloatType(), "double": ir.DoubleType(),
               "i1": I1, "i8": I8, "i16": ir.IntType(16), "i32": I32, "i64": I64}


def llvm_type(dtype: DType) -> ir.Type:
    return _LLVM_TYPES[dtype.llvm]


def memory_type(dtype: DType) -> ir.Type:
    """How an element sits in memory: a bool takes a byte."""
    return I8 if dtype.is_bool else llvm_type(dtype)


# Every op's lowering works on a scalar or on a vector of lanes (the host evaluates the
# threads along x as vector lanes): types and constants are shaped like the operands.
def element_type(ty: ir.Type) -> ir.Type:
    """A vector's element type; a scalar type itself."""
    return ty.element if isinstance(ty, ir.VectorType) else ty


def shaped(like, element: ir.Type) -> ir.Type:
    """``element``, or a vector of it as wide as ``like`` (a value or a type)."""
    ty = like if isinstance(like, ir.Type) else like.type
    return ir.VectorType(element, ty.count) if isinstance(ty, ir.VectorType) else element


def constant(like, value, element: ir.Type | None = None) -> ir.Constant:
    """``value`` as a constant of ``like``'s shape (of ``element``, else ``like``'s element type)."""
    ty = shaped(like, element or element_type(like if isinstance(like, ir.Type) else like.type))
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [ir.Constant(ty.element, value)] * ty.count)
    return ir.Constant(ty, value)


def intrinsic_suffix(ty: ir.Type) -> str:
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{intrinsic_suffix(ty.element)}"
    if isinstance(ty, ir.IntType):
        return f"i{ty.width}"
    return {"float": "f32", "half": "f16", "bfloat": "bf16", "double": "f64"}[str(ty)]


def float_bits(ty: ir.Type) -> int:
    return {"float": 32, "half": 16, "bfloat": 16, "double": 64}[str(element_type(ty))]
