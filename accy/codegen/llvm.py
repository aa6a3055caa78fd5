"""Lowering the typed SSA graph to LLVM IR with ``llvmlite.ir``: the target-neutral part.

The op table (:data:`LOWER`) and the numerics serve every target; a target's
subclass of :class:`Lowering` adds its entry points and answers the hooks (math
functions, float remainder and division, 16-bit atomics, shared memory, barriers,
shuffles): :mod:`accy.codegen.nvptx.lowering` for NVPTX, :mod:`accy.codegen.host.spmd` for the
host, where the threads run as the lanes of vectors.  The kernel's top-level ops
(constants, sizes, scalars and what the launch extents are computed from) are
lowered once at the entry of a thin wrapper, then the launch region runs.

Both take the parameters of :mod:`accy.codegen.abi`.  Every op is lowered from
its operands' :class:`~accy.dsl.types.DType`: the LLVM type, the intrinsic suffix
and the libdevice name come from the type's entry.  With checks on (the
default), every load and store is bounds-checked and integer division checks for
zero; the first failure is recorded in the status word and the access skipped.
"""

from __future__ import annotations

import math

import attrs
from llvmlite import ir

from ..dsl.ir import Block, Graph, Op, Value
from ..dsl.ops import OPS, SIMT_OPS
from ..dsl.analysis.intervals import index_ranges
from ..dsl.types import Conversion, DType, f32, f64
from . import minifloat
from .abi import STATUS_DIV_ZERO, scalar_bits
from .llvm_types import I1, I32, I64, constant, element_type, float_bits, intrinsic_suffix, llvm_type, shaped
from .loops import Loops
from .memory_access import MemoryAccess
from ..targets import Target

F32_PRECISION = f32.format.mantissa + 1  # integers up to 2**24 are exact in f32


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
        n = lw.shift_count(op, n)
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
_COMPOSED = frozenset({"sqrt", "rsqrt", "sigmoid"})
MATH = {name: None if name in _COMPOSED else name for name, opdef in OPS.items() if opdef.inexact or name == "sqrt"}
LOWER.update({name: _math(name) for name in MATH})
# const, size, load, store, fold, if, for_each and yield need the lowering's state: Lowering.op_*
STRUCTURAL = frozenset({"const", "size", "aligned", "load", "store", "fold", "if", "for_each", "yield",
                        "for_each_block", "shared", "barrier", "atomic", "shuffle"})
IMPLEMENTED = frozenset(LOWER) | STRUCTURAL
assert IMPLEMENTED >= SIMT_OPS, sorted(SIMT_OPS - IMPLEMENTED)

class Lowering(MemoryAccess, Loops):
    """Lowers one graph into one LLVM module: the target-neutral part.  A target's
    subclass (:class:`accy.codegen.host.spmd.SpmdLowering` for the host,
    :class:`accy.codegen.nvptx.lowering.NvptxLowering`) adds its entry points and the hooks
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
        self.ranges = index_ranges(graph)
        self.debug_lines = None  # a target that wants source lines in its output sets a DebugLines

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
            name = f"{name}.{intrinsic_suffix(args[0].type)}"
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
        if self.debug_lines is not None:  # the op's instructions carry its source line
            b, saved = self.b, self.b.debug_metadata
            b.debug_metadata = self.debug_lines.location(op) or saved
            try:
                self._lower_op(op)
            finally:
                b.debug_metadata = saved
            return
        self._lower_op(op)

    def _lower_op(self, op: Op) -> None:
        if op.opcode in STRUCTURAL or op.opdef.nvptx_only:
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
        bits = self.b.bitcast(x, shaped(x, ir.IntType(float_bits(x.type))))
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
            return self.b.call(self.declare(f"{name}.{intrinsic_suffix(to)}.{intrinsic_suffix(a.type)}", to, [a.type]), [a])
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
        back = b.call(self.declare(f"{name}.{intrinsic_suffix(ty)}.{intrinsic_suffix(r.type)}", ty, [r.type]), [r])
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

    def shift_count(self, op: Op, n: ir.Value) -> ir.Value:
        """The count ``n`` of shl or shr ``op`` as the shift's range check should see it."""
        return n

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

    def broadcast(self, *values: ir.Value) -> tuple[ir.Value, ...]:
        """Operands of one shape (the host splats scalars where another operand is a vector)."""
        return values

    def every_lane(self, condition: ir.Value) -> ir.Value:
        """``condition`` as one i1: true where it holds for every lane that runs."""
        return condition

@attrs.frozen
class LoweredModule:
    """An LLVM module and what the backends need to know about it."""

    module: ir.Module
    entry_name: str
    needs_libdevice: bool
    ordinals: tuple[Op, ...]  # op ordinal (as in the status word) -> op
    host: object = None  # the host runtime's plan (accy.codegen.host.spmd.HostPlan)
