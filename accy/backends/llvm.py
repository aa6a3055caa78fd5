"""Lowering the typed SSA graph to LLVM IR with ``llvmlite.ir``: the target-neutral part.

The op table (:data:`LOWER`) and the numerics serve every target; a target's
subclass of :class:`Lowering` adds its entry points and answers the hooks (math
functions, float remainder and division, 16-bit atomics, shared memory, barriers,
shuffles): :mod:`accy.backends.nvptx` for NVPTX, :mod:`accy.backends.spmd` for the
host, where the threads run as the lanes of vectors.  The kernel's top-level ops
(constants, sizes, scalars and what the launch extents are computed from) are
lowered once at the entry of a thin wrapper, then the launch region runs.

Both take the parameters of :mod:`accy.backends.abi`.  Every op is lowered from
its operands' :class:`~accy.dsl.types.DType`: the LLVM type, the intrinsic suffix
and the libdevice name come from the type's entry.  With checks on (the
default), every load and store is bounds-checked and integer division checks for
zero; the first failure is recorded in the status word and the access skipped.
"""

from __future__ import annotations

import math
import struct

import attrs
from llvmlite import ir
from llvmlite.ir import types as _ir_types

from ..dsl.ir import Block, Graph, Op, Value
from ..dsl.ops import OPS
from ..dsl.analysis.intervals import index_ranges, within
from ..dsl.types import Conversion, DType, f32, f64
from . import minifloat
from .abi import STATUS_DIV_ZERO, STATUS_LOAD_OOB, STATUS_STORE_OOB, scalar_bits
from .targets import Target

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
F32_PRECISION = f32.format.mantissa + 1  # integers up to 2**24 are exact in f32
WARP = 32
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


def host_entry_name(graph: Graph) -> str:
    return f"{graph.name}_host"


# ----------------------------------------------------------------------------- the op table
# Each entry takes (lowering, op, operands) and returns the op's LLVM value.


def _by_kind(int_method: str, float_method: str):
    def lower(lw, op, args):
        t = op.operands[0].type
        if t.is_float:
            return lw.in_f32(t, getattr(lw.b, float_method), args)
        return getattr(lw.b, int_method)(*args)

    return lower


def _extremum(name: str):
    def lower(lw, op, args):
        t = op.operands[0].type
        if t.is_float:
            return lw.in_f32(t, lambda *xs: lw.call(f"llvm.{name}imum", xs), args)
        prefix = "u" if t.is_unsigned else "s"
        return lw.call(f"llvm.{prefix}{name}", args)

    return lower


_ICMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


def _compare(name: str):
    def lower(lw, op, args):
        t = op.operands[0].type
        if t.is_float:
            if name == "ne":  # the unordered one: true with a NaN
                return lw.in_f32(t, lambda a, b: lw.b.fcmp_unordered("!=", a, b), args)
            return lw.in_f32(t, lambda a, b: lw.b.fcmp_ordered(_ICMP[name], a, b), args)
        if t.is_unsigned or t.is_bool:
            return lw.b.icmp_unsigned(_ICMP[name], *args)
        return lw.b.icmp_signed(_ICMP[name], *args)

    return lower


def _neg(lw, op, args):
    t = op.result.type
    return lw.in_f32(t, lw.b.fneg, args) if t.is_float else lw.b.neg(args[0])


def _abs(lw, op, args):
    t = op.result.type
    if t.is_float:
        return lw.in_f32(t, lambda x: lw.call("llvm.fabs", [x]), args)
    if t.is_unsigned:
        return args[0]
    return lw.call("llvm.abs", [args[0], ir.Constant(I1, 0)])  # wraps: abs(min) == min


def _intrinsic(name: str):
    """An exact float intrinsic (floor, copysign, ...): f16 and bf16 go through f32."""
    return lambda lw, op, args: lw.in_f32(op.result.type, lambda *xs: lw.call(f"llvm.{name}", xs), args)


def _isnan(lw, op, args):
    return lw.in_f32(op.operands[0].type, lambda a: lw.b.fcmp_unordered("uno", a, a), args)


def _isinf(lw, op, args):
    def isinf(a):
        return lw.b.fcmp_ordered("==", lw.call("llvm.fabs", [a]), constant(a, math.inf))

    return lw.in_f32(op.operands[0].type, isinf, args)


def _shift(left: bool):
    def lower(lw, op, args):
        a, n = args
        t = op.result.type
        inside = lw.b.icmp_unsigned("<", n, constant(a, t.bits))  # a negative count is huge unsigned
        safe = lw.b.select(inside, n, constant(a, 0))
        if left:
            return lw.b.select(inside, lw.b.shl(a, safe), constant(a, 0))
        if t.is_unsigned:
            return lw.b.select(inside, lw.b.lshr(a, safe), constant(a, 0))
        return lw.b.select(inside, lw.b.ashr(a, safe), lw.b.ashr(a, constant(a, t.bits - 1)))

    return lower


def _fma(lw, op, args):
    t = op.result.type
    if t.is_narrow:
        return lw.narrow_fma(t, args)
    return lw.call("llvm.fma", args)


def _mod(lw, op, args):
    t = op.result.type
    if t.is_int:
        return lw.integer_division(op, args, remainder=True)

    def mod(a, b):
        bld = lw.b
        ty = a.type
        r = lw.float_remainder(a, b)
        zero = constant(ty, 0.0)
        # Python's %: a non-zero remainder takes the divisor's sign; a zero one too
        differs = bld.and_(bld.fcmp_ordered("!=", r, zero),
                           bld.icmp_unsigned("!=", lw.sign(r), lw.sign(b)))
        adjusted = bld.select(differs, bld.fadd(r, b), r)
        return bld.select(bld.fcmp_ordered("==", r, zero), lw.call("llvm.copysign", [zero, b]), adjusted)

    return lw.in_f32(t, mod, args)


def _div(lw, op, args):
    t = op.result.type
    if t.is_float:
        return lw.float_divide(t, args)
    return lw.integer_division(op, args, remainder=False)


def _math(name: str):
    def lower(lw, op, args):
        return lw.math(name, op.result.type, args)

    return lower


def _select(lw, op, args):
    return lw.b.select(*args)


def _cast(lw, op, args):
    return lw.convert(args[0], op.operands[0].type, op.result.type)


LOWER = {
    "add": _by_kind("add", "fadd"),
    "sub": _by_kind("sub", "fsub"),
    "mul": _by_kind("mul", "fmul"),
    "div": _div,
    "mod": _mod,
    "max": _extremum("max"),  # llvm.maximum: NaN propagates, -0 < +0
    "min": _extremum("min"),
    "neg": _neg,
    "abs": _abs,
    "fma": _fma,
    "copysign": _intrinsic("copysign"),
    "floor": _intrinsic("floor"),
    "ceil": _intrinsic("ceil"),
    "round": _intrinsic("roundeven"),
    "trunc": _intrinsic("trunc"),
    "isnan": _isnan,
    "isinf": _isinf,
    **{name: _compare(name) for name in _ICMP},
    "and": lambda lw, op, args: lw.b.and_(*args),
    "or": lambda lw, op, args: lw.b.or_(*args),
    "xor": lambda lw, op, args: lw.b.xor(*args),
    "not": lambda lw, op, args: lw.b.not_(*args),
    "shl": _shift(left=True),
    "shr": _shift(left=False),
    "select": _select,
    "cast": _cast,
}
# math functions: libdevice's name for each (__nv_<name>[f]; the host inlines vecmath's
# routine of the op's name); None where the target's lowering composes it (math_function)
MATH = {"exp": "exp", "exp2": "exp2", "expm1": "expm1", "log": "log", "log2": "log2", "log1p": "log1p",
        "erf": "erf", "tanh": "tanh", "sin": "sin", "cos": "cos", "pow": "pow", "atan": "atan", "atan2": "atan2",
        "sqrt": None, "rsqrt": None, "sigmoid": None}
LOWER.update({name: _math(name) for name in MATH})
# const, size, load, store, fold, if, for_each and yield need the lowering's state: Lowering.op_*
STRUCTURAL = frozenset({"const", "size", "load", "store", "fold", "if", "for_each", "yield",
                        "for_each_block", "shared", "barrier", "atomic", "shuffle"})
IMPLEMENTED = frozenset(LOWER) | STRUCTURAL
assert IMPLEMENTED >= set(OPS), sorted(set(OPS) - IMPLEMENTED)

class Lowering:
    """Lowers one graph into one LLVM module: the target-neutral part.  A target's
    subclass (:class:`accy.backends.spmd.SpmdLowering` for the host,
    :class:`accy.backends.nvptx.NvptxLowering`) adds its entry points and the hooks
    below that say ``NotImplementedError``."""

    def __init__(self, graph: Graph, target: Target):
        self.graph = graph
        self.target = target
        self.module = ir.Module(name=graph.name)
        self.values: dict[Value, ir.Value] = {}
        self.ordinals = {op: n for n, op in enumerate(graph.body.walk())}
        self.needs_libdevice = False
        # load -> an i1 that, where true, proves its check passes (its loop's whole range was
        # checked before the loop): LLVM unswitches loops on it
        self.proven: dict[Op, ir.Value] = {}
        self.unchecked: frozenset[Op] = frozenset()  # checks proven before the launch (the host's)
        self.buffers = graph.buffers
        self.b: ir.IRBuilder | None = None
        self.thread: list[ir.Value] | None = None  # the logical indices, inside the launch
        self.extents: list[ir.Value] = []
        self.lane_of = None  # () -> this thread's lane number, where the wrapper knows better
        self.shared_ptrs: dict[str, ir.Value] = {}
        self.slots: dict[Value, ir.Value] = {}  # host blocks: per-thread values kept across barriers (spmd)
        self.ranges = index_ranges(graph)

    # -- declarations ------------------------------------------------------------
    def declare(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        existing = self.module.globals.get(name)
        if existing is not None:
            return existing
        return ir.Function(self.module, ir.FunctionType(ret, args), name)

    def call(self, name: str, args, *, ty: ir.Type | None = None, suffix: bool = True) -> ir.Value:
        """Call intrinsic or function ``name`` (an intrinsic named ``llvm.x`` gets the type
        suffix of its first operand); returns a value of the first operand's type or ``ty``."""
        args = list(args)
        ret = ty or args[0].type
        if name.startswith("llvm.") and not name.startswith("llvm.nvvm.") and suffix:
            name = f"{name}.{_suffix(args[0].type)}"
        return self.b.call(self.declare(name, ret, [a.type for a in args]), args)

    def _signature(self) -> list[ir.Type]:
        n = len(self.buffers)
        scalars = [ir.IntType(scalar_bits(p.dtype)) for p in self.graph.scalars]
        return [self.target.pointer] * n + [I64] * n + scalars + [self.target.pointer]

    def _bind_params(self, fn: ir.Function) -> None:
        """Name the wrapper's parameters and map the kernel's buffers, counts, scalars and status."""
        n = len(self.buffers)
        self.pointers, self.counts = {}, {}
        for i, p in enumerate(self.buffers):
            arg = fn.args[i]
            arg.name = p.name
            # outputs alias nothing (checked at binding); inputs that alias are only read
            arg.add_attribute("noalias")
            self.pointers[p.name] = arg
            fn.args[n + i].name = f"{p.name}_count"
            self.counts[p.name] = fn.args[n + i]
        scalars = self.graph.scalars
        for j, (p, value) in enumerate(zip(scalars, self.graph.body.args)):
            arg = fn.args[2 * n + j]
            arg.name = p.name
            self.values[value] = self._unpack_scalar(arg, p.dtype)
        self.status = fn.args[2 * n + len(scalars)]
        self.status.name = "status"
        self.status.add_attribute("noalias")  # its own allocation: writing it never changes a buffer

    def _unpack_scalar(self, bits: ir.Value, dtype: DType) -> ir.Value:
        if dtype.is_bool:
            return self.b.trunc(bits, I1)
        if dtype.is_float and bits.type != llvm_type(dtype):
            return self.b.bitcast(bits, llvm_type(dtype))
        return bits

    # -- blocks and ops -------------------------------------------------------------
    def lower_top_level(self) -> None:
        """The kernel-scope ops before and around the launch (constants, sizes, extents)."""
        for op in self.graph.body.ops:
            if op is not self.graph.launch_op:
                self.lower_op(op)
        self.extents = [self.value(v) for v in self.graph.launch_op.operands]

    def lower_launch_body(self, indices: list[ir.Value]) -> None:
        region = self.graph.launch_op.regions[0]
        self.thread = indices
        for arg, value in zip(region.args, indices):
            self.values[arg] = value
        self.lower_block(region)

    def lower_block(self, block: Block) -> None:
        for op in block.ops:
            if op.opcode != "yield":
                self.lower_op(op)

    def value(self, v: Value) -> ir.Value:
        return self.values[v]

    def lower_op(self, op: Op) -> None:
        if op.opcode in STRUCTURAL:
            getattr(self, f"op_{op.opcode}")(op)
            return
        self.values[op.result] = LOWER[op.opcode](self, op, [self.value(v) for v in op.operands])

    def op_const(self, op: Op) -> None:
        t = op.result.type
        value = op.attrs["value"]
        if t.conversion is Conversion.software:  # held as its code
            value = t.code(value)
        else:
            value = float(value) if t.is_float else int(value)
        self.values[op.result] = ir.Constant(llvm_type(t), value)

    def op_size(self, op: Op) -> None:
        self.values[op.result] = self.counts[op.attrs["buffer"]]

    # -- numerics helpers --------------------------------------------------------------
    def sign(self, x: ir.Value) -> ir.Value:
        """The sign bit of a float, as an i1."""
        bits = self.b.bitcast(x, shaped(x, ir.IntType(_float_bits(x.type))))
        return self.b.icmp_signed("<", bits, constant(bits, 0))

    def in_f32(self, t: DType, fn, args):
        """``fn`` on ``args``, in f32 for a narrow type (f16, bf16, fp8), rounded once back to
        the type: every such op computes this way, on every target, so they all round alike."""
        if not t.is_narrow:
            return fn(*args)
        result = fn(*(self.widen(a, t) for a in args))
        return self.narrow(result, t) if element_type(result.type) == llvm_type(f32) else result

    def widen(self, a: ir.Value, t: DType) -> ir.Value:
        """A value of narrow type ``t`` as f32 (exact), by the type's conversion."""
        if t.conversion is Conversion.software:
            return minifloat.widen(self.b, a, t.format)
        if t.conversion is Conversion.bfloat_bits:  # the bits shifted into place: no flushing of subnormals
            bits = self.b.zext(self.b.bitcast(a, shaped(a, ir.IntType(16))), shaped(a, I32))
            return self.b.bitcast(self.b.shl(bits, constant(bits, 16)), shaped(a, llvm_type(f32)))
        return self.b.fpext(a, shaped(a, llvm_type(f32)))

    def narrow(self, x: ir.Value, t: DType) -> ir.Value:
        """An f32 rounded to nearest-even narrow type ``t``, by the type's conversion.  bf16 and
        fp8 round with integer arithmetic (x86's bf16 instruction flushes subnormals to zero)."""
        if t.conversion is Conversion.software:
            return minifloat.narrow(self.b, x, t.format)
        if t.conversion is not Conversion.bfloat_bits:
            return self.b.fptrunc(x, shaped(x, llvm_type(t)))
        b = self.b
        bits = b.bitcast(x, shaped(x, I32))
        lsb = b.and_(b.lshr(bits, constant(bits, 16)), constant(bits, 1))
        rounded = b.lshr(b.add(b.add(bits, constant(bits, 0x7FFF)), lsb), constant(bits, 16))
        quiet = b.or_(b.lshr(bits, constant(bits, 16)), constant(bits, 0x40))  # NaN stays NaN
        is_nan = b.fcmp_unordered("uno", x, x)
        return b.bitcast(b.trunc(b.select(is_nan, quiet, rounded), shaped(x, ir.IntType(16))), shaped(x, llvm_type(t)))

    def round_to_odd_f32(self, x: ir.Value) -> ir.Value:
        """A double rounded to odd at f32 precision, so that rounding it on to a narrow type
        rounds once (f32 has more than two bits beyond each)."""
        b = self.b
        r = b.fptrunc(x, shaped(x, llvm_type(f32)))
        exact = b.fcmp_unordered("ueq", b.fpext(r, x.type), x)  # NaN: leave it
        bits = b.bitcast(r, shaped(x, I32))
        even = b.icmp_unsigned("==", b.and_(bits, constant(bits, 1)), constant(bits, 0))
        # step toward x: down in magnitude if |r| > |x|
        beyond = b.fcmp_ordered(">", self.call("llvm.fabs", [b.fpext(r, x.type)]), self.call("llvm.fabs", [x]))
        step = b.select(beyond, constant(bits, -1), constant(bits, 1))
        fixed = b.add(bits, b.select(b.and_(b.not_(exact), even), step, constant(bits, 0)))
        return b.bitcast(fixed, r.type)

    def narrow_fma(self, t: DType, args) -> ir.Value:
        """fma rounded once to a narrow type: the product is exact in double, the sum is rounded
        to odd (its error from a two-sum), then to f32 and on to the type."""
        b = self.b
        d = shaped(args[0], llvm_type(f64))
        x, y, z = (b.fpext(self.widen(a, t), d) for a in args)
        p = b.fmul(x, y)
        s = b.fadd(p, z)
        bb = b.fsub(s, p)
        error = b.fadd(b.fsub(p, b.fsub(s, bb)), b.fsub(z, bb))
        bits = b.bitcast(s, shaped(d, I64))
        inexact = b.fcmp_ordered("!=", error, constant(d, 0.0))
        even = b.icmp_unsigned("==", b.and_(bits, constant(bits, 1)), constant(bits, 0))
        outward = b.icmp_unsigned("==", b.fcmp_ordered(">", error, constant(d, 0.0)),
                                  b.fcmp_ordered(">", s, constant(d, 0.0)))
        step = b.select(outward, constant(bits, 1), constant(bits, -1))
        odd = b.bitcast(b.add(bits, b.select(b.and_(inexact, even), step, constant(bits, 0))), d)
        return self.narrow(self.round_to_odd_f32(odd), t)

    def convert(self, a: ir.Value, src: DType, dst: DType) -> ir.Value:
        """``cast`` (docs/ir.md): every case rounds once, as the interpreter does."""
        b = self.b
        to = shaped(a, llvm_type(dst))
        wide_f32 = shaped(a, llvm_type(f32))
        if src == dst or (src.llvm == dst.llvm and src.is_int and dst.is_int):
            return a
        if dst.is_bool:
            if src.is_float:  # NaN is true
                return self.in_f32(src, lambda x: b.fcmp_unordered("!=", x, constant(x, 0.0)), [a])
            return b.icmp_unsigned("!=", a, constant(a, 0))
        if src.is_bool:
            if dst.is_float:
                return self.narrow(b.uitofp(a, wide_f32), dst) if dst.is_narrow else b.uitofp(a, to)
            return b.zext(a, to)
        if src.is_int and dst.is_int:
            if dst.bits < src.bits:
                return b.trunc(a, to)
            return b.zext(a, to) if src.is_unsigned else b.sext(a, to)
        if src.is_int:  # to a float
            to_float = b.uitofp if src.is_unsigned else b.sitofp
            if not dst.is_narrow:
                return to_float(a, to)
            wide = to_float(a, wide_f32)  # exact below 2**24; f16 and fp8 overflow long before that
            if src.bits > F32_PRECISION and dst.max >= 2.0**F32_PRECISION:
                wide = self._int_round_to_odd_f32(a, wide, src)
            return self.narrow(wide, dst)
        if dst.is_int:  # from a float: truncate, saturate, NaN -> 0
            if src.is_narrow:
                a, src = self.widen(a, src), f32
            name = "llvm.fptoui.sat" if dst.is_unsigned else "llvm.fptosi.sat"
            return self.b.call(self.declare(f"{name}.{_suffix(to)}.{_suffix(a.type)}", to, [a.type]), [a])
        # float to float
        if src.is_narrow:  # exact into f32, then on (or rounded once to a narrow type)
            wide = self.widen(a, src)
            if dst == f32:
                return wide
            out = b.fpext(wide, to) if dst == f64 else self.narrow(wide, dst)
            if src.conversion is Conversion.software and dst.conversion is Conversion.native:
                out = self._quiet_nan(out, wide, dst)
            elif dst.conversion is Conversion.software and src.conversion is not Conversion.software:
                out = self._signed_code(out, a, dst)
            return out
        if dst.is_narrow:  # from f32, or f64 directly (rounded to odd in f32 first: one rounding)
            out = self.narrow(self.round_to_odd_f32(a) if src == f64 else a, dst)
            return self._signed_code(out, a, dst) if dst.conversion is Conversion.software else out
        return b.fpext(a, to) if dst == f64 else b.fptrunc(a, to)

    # fp8 casts are bit-exact with ml_dtypes, whose NaNs keep their sign: an NVPTX conversion
    # instruction gives its own NaN (0x7fff for f16, with no sign), so the sign and the NaN are
    # set here, on every target alike
    def _quiet_nan(self, out: ir.Value, wide: ir.Value, dst: DType) -> ir.Value:
        """``out`` (``wide`` converted to native ``dst``), with the quiet NaN of ``wide``'s sign."""
        b = self.b
        bits = shaped(out, ir.IntType(dst.bits))
        quiet = dst.format.nan_code
        nan = b.select(self.sign(wide), constant(bits, quiet | 1 << (dst.bits - 1)), constant(bits, quiet))
        return b.select(b.fcmp_unordered("uno", wide, wide), b.bitcast(nan, out.type), out)

    def _signed_code(self, code: ir.Value, a: ir.Value, dst: DType) -> ir.Value:
        """``code`` (float ``a`` rounded to software ``dst``) with ``a``'s sign bit."""
        top = constant(code, 1 << (dst.bits - 1))
        return self.b.or_(code, self.b.select(self.sign(a), top, constant(code, 0)))

    def _int_round_to_odd_f32(self, a: ir.Value, r: ir.Value, src: DType) -> ir.Value:
        """``r`` (``a`` rounded to nearest f32) rounded to odd instead."""
        b = self.b
        ty = a.type
        name = "llvm.fptoui.sat" if src.is_unsigned else "llvm.fptosi.sat"
        back = b.call(self.declare(f"{name}.{_suffix(ty)}.{_suffix(r.type)}", ty, [r.type]), [r])
        limit = float(2 ** (src.bits if src.is_unsigned else src.bits - 1))
        compare = b.icmp_unsigned if src.is_unsigned else b.icmp_signed
        above = b.or_(b.fcmp_ordered(">=", r, constant(r, limit)), compare(">", back, a))
        below = compare("<", back, a)
        bits = b.bitcast(r, shaped(r, I32))
        positive = b.fcmp_ordered(">", r, constant(r, 0.0))
        toward_zero = b.select(positive, above, below)
        step = b.select(toward_zero, constant(bits, -1), constant(bits, 1))
        even = b.icmp_unsigned("==", b.and_(bits, constant(bits, 1)), constant(bits, 0))
        fix = b.and_(b.or_(above, below), even)
        return b.bitcast(b.add(bits, b.select(fix, step, constant(bits, 0))), r.type)

    def math(self, name: str, t: DType, args) -> ir.Value:
        """A math function of a float type; a narrow type computes in f32 and rounds once."""
        if t.is_narrow:
            return self.in_f32(t, lambda *xs: self.math(name, f32, xs), args)
        return self.math_function(name, t, args)

    # -- the target's hooks -------------------------------------------------------------
    def math_function(self, name: str, t: DType, args) -> ir.Value:
        """Math function ``name`` of f32 or f64 ``args``."""
        raise NotImplementedError

    def float_remainder(self, a: ir.Value, b: ir.Value) -> ir.Value:
        """C's ``fmod`` (exact): LLVM's ``frem``."""
        return self.b.frem(a, b)

    def float_divide(self, t: DType, args) -> ir.Value:
        return self.in_f32(t, self.b.fdiv, args)

    def native_atomic_add(self, dtype: DType) -> bool:
        """Whether ``atomicrmw fadd`` adds ``dtype`` as accy rounds (else a CAS loop does)."""
        return dtype.bits >= 32

    def compare_exchange(self, ptr: ir.Value, seen: ir.Value, new: ir.Value) -> tuple[ir.Value, ir.Value]:
        """One relaxed compare-and-swap: (the old value, whether it swapped)."""
        pair = self.b.cmpxchg(ptr, seen, new, "monotonic", "monotonic")
        return self.b.extract_value(pair, 0), self.b.extract_value(pair, 1)

    def integer_division(self, op: Op, args, *, remainder: bool) -> ir.Value:
        """Floor division and Python's remainder for integers, checked for a zero divisor;
        ``min // -1`` wraps to ``min`` and ``min % -1`` is 0."""
        a, b_ = args
        bld = self.b
        t = op.result.type
        ty = a.type
        zero, one = constant(ty, 0), constant(ty, 1)
        is_zero = bld.icmp_unsigned("==", b_, zero)
        if self.target.checks and op not in self.unchecked:
            wide = shaped(a, I64)
            self.check(op, bld.not_(is_zero), STATUS_DIV_ZERO, bld.sext(a, wide) if ty != wide else a)
        if t.is_unsigned:
            safe = bld.select(is_zero, one, b_)
            result = bld.urem(a, safe) if remainder else bld.udiv(a, safe)
            return bld.select(is_zero, zero, result)
        minus_one = constant(ty, -1)
        # sdiv traps on x / 0 and min / -1: divide by 1 there and fix up after
        is_minus_one = bld.icmp_signed("==", b_, minus_one)
        safe = bld.select(bld.or_(is_zero, is_minus_one), one, b_)
        quotient, rest = bld.sdiv(a, safe), bld.srem(a, safe)
        # floor: round toward -inf when the remainder's sign differs from the divisor's
        adjust = bld.and_(bld.icmp_signed("!=", rest, zero), bld.icmp_signed("<", bld.xor(rest, safe), zero))
        if remainder:
            result = bld.select(adjust, bld.add(rest, safe), rest)
            return bld.select(bld.or_(is_zero, is_minus_one), zero, result)
        floor = bld.sub(quotient, bld.zext(adjust, ty))
        return bld.select(is_zero, zero, bld.select(is_minus_one, bld.neg(a), floor))

    # -- run-time checks -------------------------------------------------------------
    def lane(self) -> ir.Value:
        """This thread's linear lane number (x fastest), for error reports; 0 at top level."""
        if self.lane_of is not None:
            return self.lane_of()
        lane = ir.Constant(I64, 0)
        if self.thread is None:
            return lane
        stride = ir.Constant(I64, 1)
        for value, extent in zip(self.thread, self.extents):
            lane = self.b.add(lane, self.b.mul(value, stride))
            stride = self.b.mul(stride, extent)
        return lane

    def check(self, op: Op, ok: ir.Value, kind: int, detail: ir.Value) -> None:
        """Where ``ok`` is false, record the first failure of the launch in the status."""
        self.fail_if(op, self.b.not_(ok), kind, lambda: (detail, self.lane()))

    def fail_if(self, op: Op, bad: ir.Value, kind: int, report) -> None:
        """Where ``bad`` (an i1) is true, record ``kind`` and ``report()`` (detail, lane; both
        computed on the cold path only) in the status word, unless a failure came first."""
        tag = self.ordinals[op]
        fail = self.b.append_basic_block(f"check_fail_{tag}")
        cont = self.b.append_basic_block(f"check_ok_{tag}")
        self.b.cbranch(bad, fail, cont).set_weights([1, 1 << 20])  # failures are cold
        self.b.position_at_end(fail)
        word = lambda i: self.b.gep(self.status, [ir.Constant(I64, i)], source_etype=I64, inbounds=True)  # noqa: E731
        result = self.b.cmpxchg(word(0), ir.Constant(I64, 0), ir.Constant(I64, kind), "monotonic", "monotonic")
        won = self.b.extract_value(result, 1)
        with self.b.if_then(won):
            detail, lane = report()
            self.b.store(ir.Constant(I64, tag), word(1))
            self.b.store(detail, word(2))
            self.b.store(lane, word(3))
        self.b.branch(cont)
        self.b.position_at_end(cont)

    def _element(self, op: Op, idx: ir.Value) -> ir.Value:
        """The address of element ``idx`` of the buffer or shared array ``op`` touches."""
        name, dtype = op.attrs["buffer"], op.attrs["dtype"]
        if op.attrs.get("space", "global") == "shared":
            # an alloca or global of the array type: its element pointer carries the element type
            return self.b.gep(self.shared_ptrs[name], [ir.Constant(I64, 0), idx], inbounds=True)
        return self.b.gep(self.pointers[name], [idx], source_etype=memory_type(dtype), inbounds=True)

    def _statically_inside(self, op: Op) -> bool:
        """A shared-array access whose index range fits the array: no run-time check needed."""
        if op.attrs.get("space", "global") != "shared":
            return False
        return within(self.ranges.get(op.operands[0], (None, None)),
                      self.graph.shared_arrays()[op.attrs["buffer"]].attrs["count"])

    def within(self, op: Op, idx: ir.Value) -> ir.Value:
        """``idx`` is inside ``op``'s buffer or shared array (unsigned: negatives fail too), or
        that was proven before."""
        ok = self.b.icmp_unsigned("<", *self.broadcast(idx, self._count(op)))
        proven = self.proven.get(op)
        return ok if proven is None else self.b.or_(*self.broadcast(proven, ok))

    def _count(self, op: Op) -> ir.Value:
        if op.attrs.get("space", "global") == "shared":
            return ir.Constant(I64, self.graph.shared_arrays()[op.attrs["buffer"]].attrs["count"])
        return self.counts[op.attrs["buffer"]]

    def _checked(self, op: Op) -> bool:
        return self.target.checks and op not in self.unchecked and not self._statically_inside(op)

    def op_load(self, op: Op) -> None:
        self.values[op.result] = self.load_at(op, self.value(op.operands[0]))

    def load_at(self, op: Op, idx: ir.Value) -> ir.Value:
        """One thread's load of element ``idx`` (a scalar), checked."""
        dtype = op.attrs["dtype"]
        ty = memory_type(dtype)
        if not self._checked(op):
            loaded = self.b.load(self._element(op, idx), typ=ty, align=dtype.itemsize)
        else:
            ok = self.within(op, idx)
            self.check(op, ok, STATUS_LOAD_OOB, idx)
            # a failed thread reads element 0 instead (every buffer has one: see the ABI)
            # and goes on with a zero; no branch, so the loop around stays simple
            safe = self.b.select(ok, idx, ir.Constant(I64, 0))
            loaded = self.b.load(self._element(op, safe), typ=ty, align=dtype.itemsize)
            loaded = self.b.select(ok, loaded, ir.Constant(ty, 0))
        return self.b.trunc(loaded, I1) if dtype.is_bool else loaded

    def op_store(self, op: Op) -> None:
        self.store_at(op, *(self.value(v) for v in op.operands))

    def store_at(self, op: Op, idx: ir.Value, value: ir.Value) -> None:
        """One thread's store of ``value`` to element ``idx`` (scalars), checked."""
        dtype = op.attrs["dtype"]
        if dtype.is_bool:
            value = self.b.zext(value, I8)
        if not self._checked(op):
            self.b.store(value, self._element(op, idx), align=dtype.itemsize)
            return
        ok = self.within(op, idx)
        self.check(op, ok, STATUS_STORE_OOB, idx)
        with self.b.if_then(ok):
            self.b.store(value, self._element(op, idx), align=dtype.itemsize)

    # -- the block level ------------------------------------------------------------------
    def op_shared(self, op: Op) -> None:
        pass  # allocated by the wrapper: a module-level array in shared memory, or a stack array per block

    def op_atomic(self, op: Op) -> None:
        idx, *values = (self.value(v) for v in op.operands)
        self.values[op.result] = self.atomic_at(op, idx, values)

    def atomic_at(self, op: Op, idx: ir.Value, values) -> ir.Value:
        """One thread's atomic on element ``idx`` (scalars), checked; returns the old value."""
        kind, dtype = op.attrs["op"], op.attrs["dtype"]
        ty = llvm_type(dtype)
        if not self._checked(op):
            return self._atomic(kind, dtype, self._element(op, idx), values)
        ok = self.within(op, idx)
        self.check(op, ok, STATUS_STORE_OOB, idx)
        entry = self.b.block
        with self.b.if_then(ok):
            old = self._atomic(kind, dtype, self._element(op, idx), values)
            done = self.b.block
        phi = self.b.phi(ty)
        phi.add_incoming(ir.Constant(ty, 0), entry)
        phi.add_incoming(old, done)
        return phi

    def _atomic(self, kind: str, dtype: DType, ptr: ir.Value, values) -> ir.Value:
        """One atomic read-modify-write (relaxed, as CUDA's); returns the old value."""
        b = self.b
        if kind == "cas":
            compare, new = values
            bits = ir.IntType(dtype.bits)
            if dtype.is_float:
                compare, new = b.bitcast(compare, bits), b.bitcast(new, bits)
            old = b.extract_value(b.cmpxchg(ptr, compare, new, "monotonic", "monotonic"), 0)
            return b.bitcast(old, llvm_type(dtype)) if dtype.is_float else old
        (value,) = values
        if dtype.is_int:
            op_name = {"add": "add", "exchange": "xchg", "max": "umax" if dtype.is_unsigned else "max",
                       "min": "umin" if dtype.is_unsigned else "min"}[kind]
            return b.atomic_rmw(op_name, ptr, value, "monotonic")
        if kind == "exchange":
            return b.atomic_rmw("xchg", ptr, value, "monotonic")
        if kind == "add" and self.native_atomic_add(dtype):
            return b.atomic_rmw("fadd", ptr, value, "monotonic")
        # f16/bf16 add, float max and min: a compare-and-swap loop with accy's own arithmetic
        combine = {"add": lambda a, v: self.in_f32(dtype, b.fadd, [a, v]),
                   "max": lambda a, v: self.in_f32(dtype, lambda x, y: self.call("llvm.maximum", [x, y]), [a, v]),
                   "min": lambda a, v: self.in_f32(dtype, lambda x, y: self.call("llvm.minimum", [x, y]), [a, v])}[kind]
        bits = ir.IntType(dtype.bits)
        start = b.block
        initial = b.load(ptr, typ=bits, align=dtype.itemsize)
        loop = b.append_basic_block("atomic_loop")
        after = b.append_basic_block("atomic_done")
        b.branch(loop)
        b.position_at_end(loop)
        seen = b.phi(bits)
        seen.add_incoming(initial, start)
        new = b.bitcast(combine(b.bitcast(seen, llvm_type(dtype)), value), bits)
        current, swapped = self.compare_exchange(ptr, seen, new)
        seen.add_incoming(current, loop)
        b.cbranch(swapped, after, loop)
        b.position_at_end(after)
        return b.bitcast(seen, llvm_type(dtype))

    # -- branches ---------------------------------------------------------------------
    def op_if(self, op: Op) -> None:
        b = self.b
        tag = self.ordinals[op]
        cond = self.value(op.operands[0])
        then = b.append_basic_block(f"if_{tag}_then")
        otherwise = b.append_basic_block(f"if_{tag}_else")
        join = b.append_basic_block(f"if_{tag}_end")
        b.cbranch(cond, then, otherwise)
        incoming = []
        for block, region in ((then, op.regions[0]), (otherwise, op.regions[1] if len(op.regions) > 1 else None)):
            b.position_at_end(block)
            values = []
            if region is not None:
                self.lower_block(region)
                values = [self.value(v) for v in region.terminator.operands]
            incoming.append((values, b.block))
            b.branch(join)
        b.position_at_end(join)
        for k, result in enumerate(op.results):
            phi = b.phi(llvm_type(result.type))
            for values, block in incoming:
                phi.add_incoming(values[k], block)
            self.values[result] = phi

    # -- loops ------------------------------------------------------------------------
    def _affine(self, v: Value, iv: Value, inside: set[Value]):
        """``v`` as ``coef * iv + sum(multiplier * outer value)``, or None."""
        if v is iv:
            return 1, []
        if v not in inside:
            return 0, [(1, v)]
        op = v.op
        if op is None or op.opcode not in ("add", "sub", "mul") or not op.result.type.is_index:
            return None  # a region argument (an accumulator) or another op: not affine in i
        parts = [self._affine(x, iv, inside) for x in op.operands]
        if None in parts:
            return None
        (ca, ta), (cb, tb) = parts
        if op.opcode == "add":
            return ca + cb, ta + tb
        if op.opcode == "sub":
            return ca - cb, ta + [(-m, t) for m, t in tb]
        for (c, terms), (other_coef, other) in ((parts[0], parts[1]), (parts[1], parts[0])):
            constant = _constant_term(other) if other_coef == 0 else None
            if constant is not None:  # scaled by a constant: stays affine
                return c * constant, [(m * constant, t) for m, t in terms]
        return None

    def _prove_loads(self, region: Block, start: ir.Value, trips: ir.Value, step: int) -> None:
        """For each load of the loop body whose index is ``base + c * i``, check the first
        and last index of the whole loop once, before it: where both are in bounds
        (and the index cannot wrap between them) every iteration's check is true."""
        b = self.b
        iv = region.args[0]
        inside = set(region.args) | {r for o in region.walk() for r in o.results}
        add, sub, mul = (lambda x, y, f=f: f(*self.broadcast(x, y)) for f in (b.add, b.sub, b.mul))
        below = lambda x, y: b.icmp_unsigned("<", *self.broadcast(x, y))  # noqa: E731
        last = add(start, mul(b.sub(trips, constant(trips, 1)), constant(trips, step)))
        for op in region.ops:
            if op.opcode != "load" or not self._checked(op):
                continue
            form = self._affine(op.operands[0], iv, inside)
            if form is None or abs(form[0]) * abs(step) >= 2**31:
                continue
            coef, terms = form
            base = ir.Constant(I64, 0)
            for m, t in terms:
                base = add(base, mul(self.value(t), ir.Constant(I64, m)))
            at = lambda i: add(base, mul(i, ir.Constant(I64, coef)))  # noqa: E731
            first, final = at(start), at(last)
            count = self._count(op)
            span = sub(final, first) if coef >= 0 else sub(first, final)
            # few enough trips that coef * (last - start) cannot wrap (|coef * step| < 2**31)
            short = b.icmp_unsigned("<", trips, constant(trips, 2**31))
            fits = b.and_(*self.broadcast(b.and_(below(first, count), below(final, count)),
                                          b.and_(*self.broadcast(below(span, count), short))))
            empty = b.icmp_signed("==", trips, constant(trips, 0))
            self.proven[op] = self.every_lane(b.or_(*self.broadcast(empty, fits)))

    def broadcast(self, *values: ir.Value) -> tuple[ir.Value, ...]:
        """Operands of one shape (the host splats scalars where another operand is a vector)."""
        return values

    def every_lane(self, condition: ir.Value) -> ir.Value:
        """``condition`` as one i1: true where it holds for every lane that runs."""
        return condition

    def _trip_count(self, start: ir.Value, stop: ir.Value, step: int) -> ir.Value:
        """Iterations of ``for (i = start; step > 0 ? i < stop : i > stop; i += step)``,
        computed without overflow (the difference is taken as unsigned)."""
        b = self.b
        lo, hi = (start, stop) if step > 0 else (stop, start)
        nonempty = b.icmp_signed("<", lo, hi)
        span = b.sub(hi, lo)  # fits in u64 whenever lo < hi
        count = b.add(b.udiv(b.sub(span, constant(span, 1)), constant(span, abs(step))), constant(span, 1))
        return b.select(nonempty, count, constant(span, 0))

    def op_fold(self, op: Op) -> None:
        b = self.b
        start, stop, *inits = (self.value(v) for v in op.operands)
        step = op.attrs["step"]
        (region,) = op.regions
        trips = self._trip_count(start, stop, step)
        tag = self.ordinals[op]
        if self.target.checks:
            self._prove_loads(region, start, trips, step)
        preheader = b.block
        header = b.append_basic_block(f"fold_{tag}_header")
        body = b.append_basic_block(f"fold_{tag}_body")
        exit_ = b.append_basic_block(f"fold_{tag}_exit")
        b.branch(header)
        b.position_at_end(header)
        counter = b.phi(I64, name=f"trip_{tag}")
        iv = b.phi(I64, name=f"i_{tag}")
        accs = [b.phi(llvm_type(a.type)) for a in region.args[1:]]
        counter.add_incoming(ir.Constant(I64, 0), preheader)
        iv.add_incoming(start, preheader)
        for phi, init in zip(accs, inits):
            phi.add_incoming(init, preheader)
        b.cbranch(b.icmp_unsigned("<", counter, trips), body, exit_)
        b.position_at_end(body)
        self.values[region.args[0]] = iv
        for arg, phi in zip(region.args[1:], accs):
            self.values[arg] = phi
        self.lower_block(region)
        latch = b.block
        counter.add_incoming(b.add(counter, ir.Constant(I64, 1)), latch)
        iv.add_incoming(b.add(iv, ir.Constant(I64, step)), latch)  # wraps harmlessly after the last trip
        for phi, v in zip(accs, region.terminator.operands):
            phi.add_incoming(self.value(v), latch)
        b.branch(header)
        b.position_at_end(exit_)
        for result, phi in zip(op.results, accs):
            self.values[result] = phi

def _suffix(ty: ir.Type) -> str:
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{_suffix(ty.element)}"
    if isinstance(ty, ir.IntType):
        return f"i{ty.width}"
    return {"float": "f32", "half": "f16", "bfloat": "bf16", "double": "f64"}[str(ty)]


def _float_bits(ty: ir.Type) -> int:
    return {"float": 32, "half": 16, "bfloat": 16, "double": 64}[str(element_type(ty))]


@attrs.frozen
class LoweredModule:
    """An LLVM module and what the backends need to know about it."""

    module: ir.Module
    entry_name: str
    needs_libdevice: bool
    ordinals: tuple[Op, ...]  # op ordinal (as in the status word) -> op
    host: object = None  # the host runtime's plan (accy.backends.spmd.HostPlan)


def _constant_term(form) -> int | None:
    """The constant an affine form stands for, if it is exactly one index constant."""
    if len(form) == 1 and form[0][0] == 1:
        op = form[0][1].op
        if op is not None and op.opcode == "const" and op.result.type.is_int:
            return op.attrs["value"]
    return None
