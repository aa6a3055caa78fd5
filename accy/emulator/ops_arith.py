"""Handlers for arithmetic, logic, comparison and bit instructions.

Each handler parses an instruction form's modifiers (``parse``: unknown ones
make the form unsupported) and emits NumPy source for one instruction
(``emit``), reading and writing operands through the :class:`Emitter`.
"""

from __future__ import annotations

import numpy as np

from .compiler import UINT_OF, INT_OF, Mods, Unsupported, dtype_of, handler
from .numerics import BOOL, F16, F32, F64, I32, U16, U32, U64
from .parser import Imm, Pair

ROUND = ("rn", "rz", "rm", "rp")
INT_TYPES = ("u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64", "b8", "b16", "b32", "b64")
FLOAT_TYPES = ("f32", "f64", "f16", "f16x2", "bf16", "bf16x2")


def nops(E, ins, n):
    if len(ins.operands) != n:
        raise E.error(f"{ins.form} takes {n} operands, found {len(ins.operands)}")
    return ins.operands


def uint_of(t: str):
    return UINT_OF[np.dtype(dtype_of(t)).itemsize]


def int_of(t: str):
    return INT_OF[np.dtype(dtype_of(t)).itemsize]


def typed(t: str):
    """The NumPy type an integer PTX type is computed in (uint for .b and .u, int for .s)."""
    return int_of(t) if t[0] == "s" else uint_of(t)


class Spec(dict):
    __getattr__ = dict.get


# -- floating point helpers --------------------------------------------------------------------


def fdtype(t: str):
    return {"f32": F32, "f64": F64, "f16": F16, "bf16": U16, "f16x2": U32, "bf16x2": U32}[t]


def _ftz_fn(t: str):
    return {"f32": "ftz32", "f64": "ftz64", "f16": "ftz16", "bf16": "ftz_bf16"}[t]


def float_expr(t: str, scalar_fn: str, args: list[str], *, ftz=False, sat=False, mode=None, relu=False) -> str:
    """Source applying a float function to operands of PTX type ``t`` (packed types are split
    into halves; bf16 values are bit patterns)."""
    if t in ("f16x2", "bf16x2"):
        half = t[:-2]
        names = [f"x{i}" for i in range(len(args))]
        if half == "f16":
            inner = f"f16_bits({float_expr('f16', scalar_fn, [f'as_f16({n})' for n in names], ftz=ftz, sat=sat, mode=mode, relu=relu)})"
        else:
            inner = float_expr("bf16", scalar_fn, names, ftz=ftz, sat=sat, mode=mode, relu=relu)
        return f"packed2(lambda {', '.join(names)}: {inner}, {', '.join(args)})"
    if ftz:
        args = [f"{_ftz_fn(t)}({a})" for a in args]
    call = f"{scalar_fn}({', '.join(args)}{', ' + repr(mode) if mode is not None else ''})"
    if ftz:
        call = f"{_ftz_fn(t)}({call})"
    if sat:
        call = f"f32_to_bf16_bits(saturate(bf16_to_f32({call})))" if t == "bf16" else f"saturate({call})"
    if relu:
        call = f"f32_to_bf16_bits(relu(bf16_to_f32({call})))" if t == "bf16" else f"relu({call})"
    return call


def _fast_f32(op: str, a: str, b: str) -> str:
    return f"np.{op}({a}, {b}, dtype=F32)"


def canon(t: str, expr: str) -> str:
    """An arithmetic result of type ``t`` with its NaNs made canonical (f32, f16)."""
    if t == "f32":
        return f"canon_f32({expr})"
    if t == "f16":
        return f"canon_f16({expr})"
    return expr


# -- add / sub / mul / mad / fma ----------------------------------------------------------------


@handler("add", "sub")
class AddSub:
    @staticmethod
    def parse(m: Mods):
        s = Spec(cc=m.take(("cc",)) is not None, rnd=m.take(ROUND), ftz=m.take(("ftz",)) is not None,
                 sat=m.take(("sat",)) is not None, relu=None)
        s["t"] = m.type(INT_TYPES + FLOAT_TYPES + ("u16x2", "s16x2"))
        m.done()
        if s.t in FLOAT_TYPES and s.cc:
            raise Unsupported(".cc with a float type")
        if s.sat and s.t not in ("s32",) + FLOAT_TYPES:
            raise Unsupported(".sat with this type")
        return s

    @staticmethod
    def emit(E, ins, s):
        if s.cc:
            _carry_emit(E, ins, s, use_carry=False)
            return
        d, a, b = nops(E, ins, 3)
        op = ins.opcode
        t = s.t
        if t in FLOAT_TYPES:
            dt = fdtype(t)
            x, y = E.src(a, dt), E.src(b, dt)
            mode = s.rnd or "rn"
            if t == "f32" and mode == "rn" and not (s.ftz or s.sat):
                expr = _fast_f32("add" if op == "add" else "subtract", x, y)
            elif t == "f64" and mode == "rn":
                expr = f"np.{'add' if op == 'add' else 'subtract'}({x}, {y}, dtype=F64)"
            else:
                expr = float_expr(t, f"{op}_{t.rstrip('x2') if t.endswith('x2') else t}", [x, y],
                                  ftz=s.ftz, sat=s.sat, mode=mode)
            E.arith(d, dt, t, expr)
            return
        if t in ("u16x2", "s16x2"):
            dt = U16 if t == "u16x2" else np.dtype(np.int16)
            x, y = E.src(a, U32), E.src(b, U32)
            fn = "np.add" if op == "add" else "np.subtract"
            E.dst(d, U32, f"packed2(lambda p, q: {fn}(p, q, dtype=U16), {x}, {y})")
            return
        if s.sat:
            x, y = E.src(a, I32), E.src(b, I32)
            E.dst(d, I32, f"sat_{op}_s32({x}, {y})")
            return
        dt = uint_of(t)
        x, y = E.src(a, dt), E.src(b, dt)
        E.dst(d, dt, f"np.{'add' if op == 'add' else 'subtract'}({x}, {y}, dtype={_dt_name(dt)})")


def _dt_name(dt) -> str:
    from .compiler import _NAME

    return _NAME[np.dtype(dt)]


@handler("addc", "subc")
class AddC:
    @staticmethod
    def parse(m: Mods):
        s = Spec(cc=m.take(("cc",)) is not None)
        s["t"] = m.type(("u32", "s32", "u64", "s64", "b32", "b64"))
        m.done()
        return s

    @staticmethod
    def emit(E, ins, s):
        _carry_emit(E, ins, s, use_carry=True)


def _carry_emit(E, ins, s, use_carry: bool):
    d, a, b = nops(E, ins, 3)
    dt = uint_of(s.t)
    x, y = E.src(a, dt, array=True), E.src(b, dt, array=True)
    from .parser import Reg

    cc = Reg("%cc")
    cin = E.src(cc, U32) if use_carry else "np.uint32(0)"
    fn = "add_carry" if ins.opcode.startswith("add") else "sub_borrow"
    t = E.tmp()
    E.line(f"{t} = {fn}({x}, {y}, {cin})")
    E.dst(d, dt, f"{t}[0]", scalar=False)
    if s.cc:
        E.dst(cc, U32, f"{t}[1]", scalar=False)


@handler("mul")
class Mul:
    @staticmethod
    def parse(m: Mods):
        s = Spec(mode=m.take(("lo", "hi", "wide")), rnd=m.take(ROUND), ftz=m.take(("ftz",)) is not None,
                 sat=m.take(("sat",)) is not None)
        s["t"] = m.type(INT_TYPES + FLOAT_TYPES)
        m.done()
        if s.t in FLOAT_TYPES and s.mode:
            raise Unsupported(f".{s.mode} with a float type")
        if s.t in INT_TYPES and (s.rnd or s.ftz or s.sat):
            raise Unsupported("rounding/ftz/sat with an integer type")
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a, b = nops(E, ins, 3)
        t = s.t
        if t in FLOAT_TYPES:
            dt = fdtype(t)
            x, y = E.src(a, dt), E.src(b, dt)
            mode = s.rnd or "rn"
            if t == "f32" and mode == "rn" and not (s.ftz or s.sat):
                expr = _fast_f32("multiply", x, y)
            elif t == "f64" and mode == "rn":
                expr = f"np.multiply({x}, {y}, dtype=F64)"
            else:
                expr = float_expr(t, f"mul_{t[:-2] if t.endswith('x2') else t}", [x, y],
                                  ftz=s.ftz, sat=s.sat, mode=mode)
            E.arith(d, dt, t, expr)
            return
        E.dst(d, *_int_mul(E, a, b, t, s.mode or "lo"))


def _int_mul(E, a, b, t, mode):
    """(result dtype, source) of an integer multiply in ``mode`` (lo / hi / wide)."""
    w = np.dtype(dtype_of(t)).itemsize
    signed = t[0] == "s"
    if mode == "lo":
        dt = uint_of(t)
        return dt, f"np.multiply({E.src(a, dt)}, {E.src(b, dt)}, dtype={_dt_name(dt)})"
    dt = typed(t)
    x, y = E.src(a, dt), E.src(b, dt)
    if mode == "wide":
        if w == 8:
            raise E.error("mul.wide of 64-bit values")
        wide = INT_OF[2 * w] if signed else UINT_OF[2 * w]
        return wide, f"mulwide({x}, {y}, {_dt_name(wide)})"
    fn = {(4, False): "mulhi_u32", (4, True): "mulhi_s32", (8, False): "mulhi_u64", (8, True): "mulhi_s64",
          (2, False): "mulhi_u16", (2, True): "mulhi_s16"}.get((w, signed))
    if fn is None:
        raise E.error(f"mul.hi of .{t}")
    return dt, f"{fn}({x}, {y})"


@handler("mad", "fma")
class Mad:
    @staticmethod
    def parse(m: Mods):
        s = Spec(mode=m.take(("lo", "hi", "wide")), cc=m.take(("cc",)) is not None, rnd=m.take(ROUND),
                 ftz=m.take(("ftz",)) is not None, sat=m.take(("sat",)) is not None,
                 relu=m.take(("relu",)) is not None, oob=m.take(("oob",)) is not None)
        s["t"] = m.type(INT_TYPES + FLOAT_TYPES)
        m.done()
        if m.opcode == "fma" and s.t not in FLOAT_TYPES:
            raise Unsupported("fma of an integer type")
        if s.t in FLOAT_TYPES:
            if s.mode or s.cc:
                raise Unsupported(".lo/.hi/.wide/.cc with a float type")
            if s.t in ("f32", "f64") and not s.rnd and m.opcode == "fma":
                raise Unsupported("fma needs a rounding modifier")
            if s.oob:
                raise Unsupported(".oob")
        elif s.rnd or s.ftz or s.relu or (s.sat and not (s.mode == "hi" and s.t == "s32")):
            raise Unsupported("float modifiers with an integer type")
        return s

    @staticmethod
    def emit(E, ins, s):
        if s.cc:
            _mad_carry(E, ins, s, use_carry=False)
            return
        d, a, b, c = nops(E, ins, 4)
        t = s.t
        if t in FLOAT_TYPES:
            dt = fdtype(t)
            x, y, z = E.src(a, dt), E.src(b, dt), E.src(c, dt)
            base = t[:-2] if t.endswith("x2") else t
            expr = float_expr(t, f"fma_{base}", [x, y, z], ftz=s.ftz, sat=s.sat, mode=s.rnd or "rn", relu=s.relu)
            E.arith(d, dt, t, expr)
            return
        mode = s.mode or "lo"
        if s.sat:  # mad.hi.sat.s32
            dt, prod = _int_mul(E, a, b, t, "hi")
            z = E.src(c, I32)
            E.dst(d, I32, f"np.clip(({prod}).astype(I64) + np.asarray({z}).astype(I64), -2**31, 2**31 - 1).astype(I32)")
            return
        dt, prod = _int_mul(E, a, b, t, mode)
        udt = UINT_OF[np.dtype(dt).itemsize]
        z = E.src(c, udt)
        E.dst(d, udt, f"np.add(np.asarray({prod}).view({_dt_name(udt)}) if np.ndim({prod}) else "
                      f"np.asarray({prod}).view({_dt_name(udt)})[()], {z}, dtype={_dt_name(udt)})")


@handler("madc")
class MadC:
    @staticmethod
    def parse(m: Mods):
        s = Spec(mode=m.take(("lo", "hi")), cc=m.take(("cc",)) is not None)
        s["t"] = m.type(("u32", "s32", "u64", "s64"))
        m.done()
        return s

    @staticmethod
    def emit(E, ins, s):
        _mad_carry(E, ins, s, use_carry=True)


def _mad_carry(E, ins, s, use_carry: bool):
    d, a, b, c = nops(E, ins, 4)
    from .parser import Reg

    dt, prod = _int_mul(E, a, b, s.t, s.mode or "lo")
    udt = UINT_OF[np.dtype(dt).itemsize]
    p = E.tmp("p")
    E.line(f"{p} = np.asarray({prod}).view({_dt_name(udt)})")
    z = E.src(c, udt, array=True)
    cc = Reg("%cc")
    cin = E.src(cc, U32) if use_carry else "np.uint32(0)"
    t = E.tmp()
    E.line(f"{t} = add_carry({p}, {z}, {cin})")
    E.dst(d, udt, f"{t}[0]", scalar=False)
    if s.cc:
        E.dst(cc, U32, f"{t}[1]", scalar=False)


@handler("mul24", "mad24")
class Mul24:
    @staticmethod
    def parse(m: Mods):
        s = Spec(mode=m.take(("lo", "hi")), sat=m.take(("sat",)) is not None)
        s["t"] = m.type(("u32", "s32"))
        m.done()
        if s.mode is None:
            raise Unsupported("mul24 needs .lo or .hi")
        if s.sat:
            raise Unsupported("mad24.sat")
        return s

    @staticmethod
    def emit(E, ins, s):
        n = 3 if ins.opcode == "mul24" else 4
        ops = nops(E, ins, n)
        x, y = E.src(ops[1], U32), E.src(ops[2], U32)
        expr = f"mul24({x}, {y}, {s.t == 's32'}, {s.mode == 'hi'})"
        if n == 4:
            expr = f"np.add({expr}, {E.src(ops[3], U32)}, dtype=U32)"
        E.dst(ops[0], U32, expr)


@handler("sad")
class Sad:
    @staticmethod
    def parse(m: Mods):
        s = Spec(t=m.type(INT_TYPES))
        m.done()
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a, b, c = nops(E, ins, 4)
        dt = typed(s.t)
        x, y = E.src(a, dt), E.src(b, dt)
        z = E.src(c, uint_of(s.t))
        E.dst(d, uint_of(s.t), f"np.add(np.where({x} < {y}, {y} - {x}, {x} - {y}).astype({_dt_name(uint_of(s.t))}), "
                               f"{z}, dtype={_dt_name(uint_of(s.t))})")


# -- div / rem --------------------------------------------------------------------------------------


@handler("div")
class Div:
    @staticmethod
    def parse(m: Mods):
        s = Spec(approx=m.take(("approx",)) is not None, full=m.take(("full",)) is not None, rnd=m.take(ROUND),
                 ftz=m.take(("ftz",)) is not None)
        s["t"] = m.type(INT_TYPES + ("f32", "f64"))
        m.done()
        if s.t in INT_TYPES and (s.approx or s.full or s.rnd or s.ftz):
            raise Unsupported("float modifiers with an integer type")
        if s.t == "f64" and (s.approx or s.full or not s.rnd):
            raise Unsupported("div.f64 needs .rn/.rz/.rm/.rp")
        if s.t == "f32" and not (s.approx or s.full or s.rnd):
            raise Unsupported("div.f32 needs .approx, .full or a rounding modifier")
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a, b = nops(E, ins, 3)
        t = s.t
        if t in INT_TYPES:
            dt = typed(t)
            E.dst(d, dt, f"div_{'s' if t[0] == 's' else 'u'}({E.src(a, dt, array=True)}, {E.src(b, dt)})")
            return
        dt = fdtype(t)
        x, y = E.src(a, dt), E.src(b, dt)
        if s.ftz:
            x, y = f"ftz32({x})", f"ftz32({y})"
        if t == "f64":
            expr = f"np.divide({x}, {y}, dtype=F64)" if s.rnd == "rn" else f"div_f64({x}, {y}, {s.rnd!r})"
        elif s.approx:
            expr = f"div_approx_f32({x}, {y})"
        elif s.full:
            expr = f"div_f32({x}, {y}, 'rn')"
        else:
            expr = f"div_f32({x}, {y}, {s.rnd!r})"
        if s.ftz:
            expr = f"ftz32({expr})"
        E.arith(d, dt, t, expr)


@handler("rem")
class Rem:
    @staticmethod
    def parse(m: Mods):
        s = Spec(t=m.type(INT_TYPES))
        m.done()
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a, b = nops(E, ins, 3)
        dt = typed(s.t)
        E.dst(d, dt, f"rem_{'s' if s.t[0] == 's' else 'u'}({E.src(a, dt, array=True)}, {E.src(b, dt)})")


# -- neg / abs / min / max --------------------------------------------------------------------------


@handler("neg", "abs")
class NegAbs:
    @staticmethod
    def parse(m: Mods):
        s = Spec(ftz=m.take(("ftz",)) is not None)
        s["t"] = m.type(("s8", "s16", "s32", "s64") + FLOAT_TYPES)
        m.done()
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a = nops(E, ins, 2)
        t = s.t
        neg = ins.opcode == "neg"
        if t in ("s8", "s16", "s32", "s64"):
            dt = uint_of(t)
            x = E.src(a, dt)
            if neg:
                E.dst(d, dt, f"np.negative({x}, dtype={_dt_name(dt)})")
            else:
                sdt = typed(t)
                xs = E.src(a, sdt)
                E.dst(d, sdt, f"np.where({xs} < 0, np.negative({xs}), {xs})")
            return
        if t == "f64":
            x = E.src(a, U64)  # a sign-bit operation: NaNs pass through unchanged
            mask = "np.uint64(0x8000000000000000)"
            E.dst(d, U64, f"({x} ^ {mask})" if neg else f"({x} & ~{mask})")
            return
        if t in ("f16", "bf16", "f16x2", "bf16x2"):
            dt = U16 if t in ("f16", "bf16") else U32
            x = E.src(a, dt)
            bit = "np.uint16(0x8000)" if dt == U16 else "np.uint32(0x80008000)"
            expr = f"({x} ^ {bit})" if neg else f"({x} & ~{bit})"
            if s.ftz:
                expr = f"ftz16({expr}.view(F16)).view(U16)" if t == "f16" else expr
            E.dst(d, dt, expr)
            return
        x = E.src(a, F32)
        if s.ftz:
            x = f"ftz32({x})"
        E.arith(d, F32, "f32", f"np.negative({x})" if neg else f"np.abs({x})")


@handler("min", "max")
class MinMax:
    @staticmethod
    def parse(m: Mods):
        s = Spec(ftz=m.take(("ftz",)) is not None, nan=m.take(("NaN",)) is not None,
                 xorsign=m.take(("xorsign",)) is not None, absmod=m.take(("abs",)) is not None,
                 relu=m.take(("relu",)) is not None)
        s["t"] = m.type(INT_TYPES + FLOAT_TYPES + ("u16x2", "s16x2"))
        m.done()
        if s.xorsign != s.absmod:
            raise Unsupported(".xorsign needs .abs")
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a, b = nops(E, ins, 3)
        t = s.t
        fn = "np.minimum" if ins.opcode == "min" else "np.maximum"
        if t in INT_TYPES:
            dt = typed(t)
            expr = f"{fn}({E.src(a, dt)}, {E.src(b, dt)})"
            if s.relu:
                expr = f"np.maximum({expr}, {_dt_name(dt)}.type(0))"
            E.dst(d, dt, expr)
            return
        if t in ("u16x2", "s16x2"):
            cast = "" if t == "u16x2" else ".view(np.int16)"
            expr = f"packed2(lambda p, q: {fn}(p{cast}, q{cast}).view(U16), {E.src(a, U32)}, {E.src(b, U32)})"
            if s.relu:
                expr = f"packed2(lambda p: np.where(p.view(np.int16) < 0, np.uint16(0), p), {expr})"
            E.dst(d, U32, expr)
            return
        dt = fdtype(t)
        x, y = E.src(a, dt), E.src(b, dt)
        f = "fmin" if ins.opcode == "min" else "fmax"
        base = t[:-2] if t.endswith("x2") else t

        def one(p, q):
            if base == "bf16":
                p, q = f"bf16_to_f32({p})", f"bf16_to_f32({q})"
            elif s.ftz:
                p, q = f"{_ftz_fn(base)}({p})", f"{_ftz_fn(base)}({q})"
            if s.xorsign:
                r = f"xorsign_abs({f}, {p}, {q}, {s.nan})"
            else:
                r = f"{f}({p}, {q}, {s.nan})"
            if s.relu:
                r = f"relu({r})"
            if base == "bf16":
                r = f"f32_to_bf16_bits({r})"
            return r

        if t in ("f16x2", "bf16x2"):
            if base == "f16":
                expr = f"packed2(lambda p, q: f16_bits({one('as_f16(p)', 'as_f16(q)')}), {x}, {y})"
            else:
                expr = f"packed2(lambda p, q: {one('p', 'q')}, {x}, {y})"
        else:
            expr = one(x, y)
        E.arith(d, dt, t, expr)


# -- logic and bits -----------------------------------------------------------------------------------


@handler("and", "or", "xor")
class Logic:
    @staticmethod
    def parse(m: Mods):
        s = Spec(t=m.type(("pred", "b16", "b32", "b64", "b8")))
        m.done()
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a, b = nops(E, ins, 3)
        dt = BOOL if s.t == "pred" else uint_of(s.t)
        fn = {"and": "&", "or": "|", "xor": "^"}[ins.opcode]
        E.dst(d, dt, f"({E.src(a, dt)} {fn} {E.src(b, dt)})")


@handler("not", "cnot")
class Not_:
    @staticmethod
    def parse(m: Mods):
        s = Spec(t=m.type(("pred", "b16", "b32", "b64")))
        m.done()
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a = nops(E, ins, 2)
        dt = BOOL if s.t == "pred" else uint_of(s.t)
        x = E.src(a, dt)
        if ins.opcode == "not":
            E.dst(d, dt, f"(~{x})")
        else:
            if s.t == "pred":
                raise E.error("cnot.pred")
            E.dst(d, dt, f"({x} == 0).astype({_dt_name(dt)})")


@handler("lop3")
class Lop3:
    @staticmethod
    def parse(m: Mods):
        s = Spec(boolop=m.take(("or", "and")), t=m.type(("b32",)))
        m.done()
        return s

    @staticmethod
    def emit(E, ins, s):
        if s.boolop:
            raise E.error("lop3 with a predicate output")
        d, a, b, c, lut = nops(E, ins, 5)
        if not isinstance(lut, Imm):
            raise E.error("lop3's lookup table must be an immediate")
        E.dst(d, U32, f"lop3({E.src(a, U32)}, {E.src(b, U32)}, {E.src(c, U32)}, {lut.value & 0xFF})")


@handler("shl", "shr")
class Shift:
    @staticmethod
    def parse(m: Mods):
        s = Spec(t=m.type(INT_TYPES))
        m.done()
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a, b = nops(E, ins, 3)
        t = s.t
        dt = typed(t) if ins.opcode == "shr" else uint_of(t)
        x = E.src(a, dt)
        bits = np.dtype(dt).itemsize * 8
        if isinstance(b, Imm) and b.kind == "int":
            amount = b.value & 0xFFFFFFFF
            if np.dtype(dt).kind == "i":
                amount = min(amount, bits - 1)  # arithmetic shifts fill with the sign
            if amount >= bits:
                E.dst(d, dt, f"np.zeros_like({x})")
            else:
                op = "<<" if ins.opcode == "shl" else ">>"
                E.dst(d, dt, f"({x} {op} {_dt_name(dt)}.type({amount}))")
            return
        n = E.src(b, U32)
        E.dst(d, dt, f"{ins.opcode}({x}, {n})")


@handler("shf")
class Shf:
    @staticmethod
    def parse(m: Mods):
        s = Spec(dir=m.take(("l", "r")), mode=m.take(("wrap", "clamp")), t=m.type(("b32",)))
        m.done()
        if not s.dir or not s.mode:
            raise Unsupported("shf needs .l/.r and .wrap/.clamp")
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a, b, c = nops(E, ins, 4)
        E.dst(d, U32, f"shf({E.src(a, U32)}, {E.src(b, U32)}, {E.src(c, U32)}, {s.dir == 'l'}, {s.mode == 'clamp'})")


@handler("popc", "clz", "brev")
class BitCount:
    @staticmethod
    def parse(m: Mods):
        s = Spec(t=m.type(("b32", "b64")))
        m.done()
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a = nops(E, ins, 2)
        dt = uint_of(s.t)
        x = E.src(a, dt)
        if ins.opcode == "brev":
            E.dst(d, dt, f"brev({x})")
        else:
            E.dst(d, U32, f"{ins.opcode}({x})")


@handler("bfind")
class Bfind:
    @staticmethod
    def parse(m: Mods):
        s = Spec(shiftamt=m.take(("shiftamt",)) is not None, t=m.type(("u32", "u64", "s32", "s64")))
        m.done()
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a = nops(E, ins, 2)
        E.dst(d, U32, f"bfind({E.src(a, typed(s.t))}, {s.t[0] == 's'}, {s.shiftamt})")


@handler("bfe")
class Bfe:
    @staticmethod
    def parse(m: Mods):
        s = Spec(t=m.type(("u32", "u64", "s32", "s64")))
        m.done()
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a, b, c = nops(E, ins, 4)
        dt = typed(s.t)
        E.dst(d, dt, f"bfe({E.src(a, dt, array=True)}, {E.src(b, U32)}, {E.src(c, U32)}, {s.t[0] == 's'})")


@handler("bfi")
class Bfi:
    @staticmethod
    def parse(m: Mods):
        s = Spec(t=m.type(("b32", "b64")))
        m.done()
        return s

    @staticmethod
    def emit(E, ins, s):
        f, a, b, c, d = nops(E, ins, 5)
        dt = uint_of(s.t)
        E.dst(f, dt, f"bfi({E.src(a, dt)}, {E.src(b, dt, array=True)}, {E.src(c, U32)}, {E.src(d, U32)})")


@handler("prmt")
class Prmt:
    @staticmethod
    def parse(m: Mods):
        s = Spec(mode=m.take(("f4e", "b4e", "rc8", "ecl", "ecr", "rc16")), t=m.type(("b32",)))
        m.done()
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a, b, c = nops(E, ins, 4)
        E.dst(d, U32, f"prmt({E.src(a, U32)}, {E.src(b, U32)}, {E.src(c, U32)}, {s.mode!r})")


@handler("fns")
class Fns:
    @staticmethod
    def parse(m: Mods):
        s = Spec(t=m.type(("b32",)))
        m.done()
        return s

    @staticmethod
    def emit(E, ins, s):
        d, mask, base, off = nops(E, ins, 4)
        E.dst(d, U32, f"fns({E.src(mask, U32, array=True)}, {E.src(base, U32)}, {E.src(off, U32)})")


@handler("bmsk")
class Bmsk:
    @staticmethod
    def parse(m: Mods):
        s = Spec(mode=m.take(("clamp", "wrap")), t=m.type(("b32",)))
        m.done()
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a, b = nops(E, ins, 3)
        E.dst(d, U32, f"bmsk({E.src(a, U32, array=True)}, {E.src(b, U32)}, {s.mode == 'clamp'})")


@handler("szext")
class Szext:
    @staticmethod
    def parse(m: Mods):
        s = Spec(mode=m.take(("clamp", "wrap")), t=m.type(("u32", "s32")))
        m.done()
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a, b = nops(E, ins, 3)
        E.dst(d, U32, f"szext({E.src(a, U32, array=True)}, {E.src(b, U32)}, {s.mode == 'clamp'}, {s.t == 's32'})")


@handler("dp4a")
class Dp4a:
    @staticmethod
    def parse(m: Mods):
        a = m.rest.pop(0) if m.rest else None
        b = m.rest.pop(0) if m.rest else None
        if a not in ("u32", "s32") or b not in ("u32", "s32"):
            raise Unsupported("dp4a needs two types")
        s = Spec(a=a, b=b)
        m.done()
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a, b, c = nops(E, ins, 4)
        signed = s.a == "s32" or s.b == "s32"
        dt = I32 if signed else U32
        E.dst(d, U32, f"dp4a({E.src(a, U32)}, {E.src(b, U32)}, {E.src(c, dt, array=True)}, "
                      f"{s.a == 's32'}, {s.b == 's32'})")


# -- comparisons and selection ---------------------------------------------------------------------------

INT_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
           "lo": "<", "ls": "<=", "hi": ">", "hs": ">="}
FLOAT_CMP = ("eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan")


def compare_expr(cmp: str, x: str, y: str, is_float: bool) -> str:
    if not is_float:
        return f"({x} {INT_CMP[cmp]} {y})"
    if cmp in ("eq", "lt", "le", "gt", "ge"):
        return f"({x} {INT_CMP[cmp]} {y})"
    if cmp == "ne":
        return f"(({x} < {y}) | ({x} > {y}))"
    if cmp == "neu":
        return f"(~({x} == {y}))"
    if cmp == "equ":
        return f"(~(({x} < {y}) | ({x} > {y})))"
    if cmp in ("ltu", "leu", "gtu", "geu"):
        inverse = {"ltu": ">=", "leu": ">", "gtu": "<=", "geu": "<"}[cmp]
        return f"(~({x} {inverse} {y}))"
    if cmp == "num":
        return f"(({x} == {x}) & ({y} == {y}))"
    if cmp == "nan":
        return f"(({x} != {x}) | ({y} != {y}))"
    raise ValueError(cmp)


def _cmp_operands(E, a, b, t, ftz):
    """Operands of a comparison as sources, converted so NumPy compares them as PTX does."""
    if t in INT_TYPES:
        dt = typed(t)
        return E.src(a, dt), E.src(b, dt), False
    if t == "bf16":
        return f"bf16_to_f32({E.src(a, U16)})", f"bf16_to_f32({E.src(b, U16)})", True
    dt = fdtype(t)
    x, y = E.src(a, dt), E.src(b, dt)
    if ftz:
        fn = _ftz_fn(t)
        x, y = f"{fn}({x})", f"{fn}({y})"
    return x, y, True


@handler("setp")
class Setp:
    @staticmethod
    def parse(m: Mods):
        cmp = m.rest.pop(0) if m.rest else None
        boolop = m.take(("and", "or", "xor"))
        s = Spec(cmp=cmp, boolop=boolop, ftz=m.take(("ftz",)) is not None)
        s["t"] = m.type(INT_TYPES + FLOAT_TYPES)
        m.done()
        if s.t in INT_TYPES and cmp not in INT_CMP:
            raise Unsupported(f"comparison .{cmp} for an integer type")
        if s.t in FLOAT_TYPES and cmp not in FLOAT_CMP:
            raise Unsupported(f"comparison .{cmp} for a float type")
        return s

    @staticmethod
    def emit(E, ins, s):
        ops = ins.operands
        if len(ops) not in (3, 4) or (len(ops) == 4) != bool(s.boolop):
            raise E.error(f"{ins.form} has the wrong number of operands")
        dest = ops[0]
        p, q = (dest.first, dest.second) if isinstance(dest, Pair) else (dest, None)
        t = s.t
        if t in ("f16x2", "bf16x2"):
            half = t[:-2]
            xa, yb = E.src(ops[1], U32), E.src(ops[2], U32)
            conv = "as_f16" if half == "f16" else "bf16_to_f32"
            lo = compare_expr(s.cmp, f"{conv}(lo16({xa}))", f"{conv}(lo16({yb}))", True)
            hi = compare_expr(s.cmp, f"{conv}(hi16({xa}))", f"{conv}(hi16({yb}))", True)
            if s.boolop:
                c = E.src(ops[3], BOOL)
                op = {"and": "&", "or": "|", "xor": "^"}[s.boolop]
                lo, hi = f"({lo} {op} {c})", f"({hi} {op} {c})"
            E.dst(p, BOOL, lo)
            if q is not None:
                E.dst(q, BOOL, hi)
            return
        x, y, is_float = _cmp_operands(E, ops[1], ops[2], t, s.ftz)
        cmp = compare_expr(s.cmp, x, y, is_float)
        if s.boolop:
            c = E.src(ops[3], BOOL)
            op = {"and": "&", "or": "|", "xor": "^"}[s.boolop]
            if q is not None:
                t_ = E.tmp("c")
                E.line(f"{t_} = {cmp}")
                E.dst(p, BOOL, f"({t_} {op} {c})")
                E.dst(q, BOOL, f"((~{t_}) {op} {c})")
                return
            E.dst(p, BOOL, f"({cmp} {op} {c})")
            return
        if q is not None:
            t_ = E.tmp("c")
            E.line(f"{t_} = {cmp}")
            E.dst(p, BOOL, t_)
            E.dst(q, BOOL, f"(~{t_})")
            return
        E.dst(p, BOOL, cmp)


@handler("set")
class Set:
    @staticmethod
    def parse(m: Mods):
        cmp = m.rest.pop(0) if m.rest else None
        boolop = m.take(("and", "or", "xor"))
        s = Spec(cmp=cmp, boolop=boolop, ftz=m.take(("ftz",)) is not None)
        s["st"] = m.type(INT_TYPES + FLOAT_TYPES)
        s["dt"] = m.type(("u32", "s32", "f32", "b32", "f16", "f16x2", "bf16", "bf16x2", "u16x2", "s16x2"))
        m.done()
        if s.dt not in ("u32", "s32", "f32", "b32"):
            raise Unsupported(f"set with destination .{s.dt}")
        return s

    @staticmethod
    def emit(E, ins, s):
        ops = ins.operands
        x, y, is_float = _cmp_operands(E, ops[1], ops[2], s.st, s.ftz)
        cmp = compare_expr(s.cmp, x, y, is_float)
        if s.boolop:
            c = E.src(ops[3], BOOL)
            op = {"and": "&", "or": "|", "xor": "^"}[s.boolop]
            cmp = f"({cmp} {op} {c})"
        if s.dt == "f32":
            E.dst(ops[0], F32, f"np.where({cmp}, np.float32(1), np.float32(0))")
        else:
            E.dst(ops[0], U32, f"np.where({cmp}, np.uint32(0xFFFFFFFF), np.uint32(0))")


@handler("selp")
class Selp:
    @staticmethod
    def parse(m: Mods):
        s = Spec(t=m.type(INT_TYPES + FLOAT_TYPES))
        m.done()
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a, b, c = nops(E, ins, 4)
        t = s.t
        dt = fdtype(t) if t in FLOAT_TYPES else uint_of(t)
        x, y, p = E.src_copy(a, dt, d), E.src_copy(b, dt, d), E.src(c, BOOL)
        E.dst(d, dt, f"np.where({p}, {x}, {y})", kind="C", sources=(a, b))


@handler("slct")
class Slct:
    @staticmethod
    def parse(m: Mods):
        s = Spec(ftz=m.take(("ftz",)) is not None)
        s["dt"] = m.rest.pop(0) if m.rest else None
        s["ct"] = m.type(("s32", "f32"))
        m.done()
        if s.dt not in INT_TYPES + ("f32", "f64"):
            raise Unsupported("slct type")
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a, b, c = nops(E, ins, 4)
        dt = fdtype(s.dt) if s.dt in FLOAT_TYPES else uint_of(s.dt)
        x, y = E.src(a, dt), E.src(b, dt)
        z = E.src(c, I32 if s.ct == "s32" else F32)
        if s.ftz and s.ct == "f32":
            z = f"ftz32({z})"
        E.dst(d, dt, f"np.where({z} >= 0, {x}, {y})")


@handler("testp")
class Testp:
    @staticmethod
    def parse(m: Mods):
        s = Spec(op=m.take(("finite", "infinite", "number", "notanumber", "normal", "subnormal")),
                 t=m.type(("f32", "f64")))
        m.done()
        if not s.op:
            raise Unsupported("testp needs a property")
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a = nops(E, ins, 2)
        dt = fdtype(s.t)
        x = E.src(a, dt)
        tiny = "np.float32(2.0**-126)" if s.t == "f32" else "2.0**-1022"
        expr = {
            "finite": f"np.isfinite({x})",
            "infinite": f"np.isinf({x})",
            "number": f"(~np.isnan({x}))",
            "notanumber": f"np.isnan({x})",
            # zero counts as normal
            "normal": f"(np.isfinite({x}) & ((np.abs({x}) >= {tiny}) | ({x} == 0)))",
            "subnormal": f"((np.abs({x}) < {tiny}) & ({x} != 0))",
        }[s.op]
        E.dst(d, BOOL, expr)


@handler("copysign")
class Copysign:
    @staticmethod
    def parse(m: Mods):
        s = Spec(t=m.type(("f32", "f64")))
        m.done()
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a, b = nops(E, ins, 3)
        # copy the sign of a into b, on the bits (NaNs keep their payload, as the ISA says)
        dt = U32 if s.t == "f32" else U64
        sign = "np.uint32(0x80000000)" if s.t == "f32" else "np.uint64(0x8000000000000000)"
        x, y = E.src(a, dt), E.src(b, dt)
        E.dst(d, dt, f"(({x} & {sign}) | ({y} & ~{sign}))")


# -- transcendental and approximate float ops ---------------------------------------------------------------


@handler("rcp", "sqrt")
class RcpSqrt:
    @staticmethod
    def parse(m: Mods):
        s = Spec(approx=m.take(("approx",)) is not None, rnd=m.take(ROUND), ftz=m.take(("ftz",)) is not None)
        s["t"] = m.type(("f32", "f64"))
        m.done()
        if not s.approx and not s.rnd:
            raise Unsupported("needs .approx or a rounding modifier")
        if s.approx and s.rnd:
            raise Unsupported(".approx with a rounding modifier")
        if s.t == "f64" and s.approx and (m.opcode == "sqrt" or not s.ftz):
            raise Unsupported(f"{m.opcode}.approx.f64")
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a = nops(E, ins, 2)
        dt = fdtype(s.t)
        x = E.src(a, dt)
        ftz = "ftz32" if s.t == "f32" else "ftz64"
        if s.ftz:
            x = f"{ftz}({x})"
        op = ins.opcode
        if s.t == "f64":
            if s.approx:  # rcp.approx.ftz.f64: correctly rounded here (the ISA bounds the error only)
                expr = f"np.divide(1.0, {x}, dtype=F64)"
            elif op == "sqrt":
                expr = f"np.sqrt({x})" if s.rnd == "rn" else f"sqrt_f64({x}, {s.rnd!r})"
            else:
                expr = f"np.divide(1.0, {x}, dtype=F64)" if s.rnd == "rn" else f"rcp_f64({x}, {s.rnd!r})"
        elif op == "sqrt":
            expr = f"np.sqrt({x})" if (s.approx or s.rnd == "rn") else f"sqrt_f32({x}, {s.rnd!r})"
        else:
            expr = f"rcp_f32({x}, {(s.rnd or 'rn')!r})"
        if s.ftz:
            expr = f"{ftz}({expr})"
        E.arith(d, dt, s.t, expr)


@handler("rsqrt")
class Rsqrt:
    @staticmethod
    def parse(m: Mods):
        s = Spec(approx=m.take(("approx",)) is not None, ftz=m.take(("ftz",)) is not None, t=m.type(("f32", "f64")))
        m.done()
        if not s.approx:
            raise Unsupported("rsqrt needs .approx")
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a = nops(E, ins, 2)
        dt = fdtype(s.t)
        x = E.src(a, dt)
        ftz = "ftz32" if s.t == "f32" else "ftz64"
        if s.ftz:
            x = f"{ftz}({x})"
        expr = f"rsqrt_{s.t}({x})"
        if s.ftz:
            expr = f"{ftz}({expr})"
        E.arith(d, dt, s.t, expr)


@handler("ex2", "lg2", "sin", "cos", "tanh")
class Transcendental:
    @staticmethod
    def parse(m: Mods):
        s = Spec(approx=m.take(("approx",)) is not None, ftz=m.take(("ftz",)) is not None)
        s["t"] = m.type(("f32", "f16", "f16x2", "bf16", "bf16x2"))
        m.done()
        if not s.approx:
            raise Unsupported(f"{m.opcode} needs .approx")
        if s.t != "f32" and m.opcode in ("lg2", "sin", "cos"):
            raise Unsupported(f"{m.opcode}.{s.t}")
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a = nops(E, ins, 2)
        fn = {"ex2": "np.exp2", "lg2": "np.log2", "sin": "np.sin", "cos": "np.cos", "tanh": "np.tanh"}[ins.opcode]
        t = s.t
        dt = fdtype(t)
        x = E.src(a, dt)
        if t == "f32":
            if s.ftz:
                x = f"ftz32({x})"
            expr = f"approx_f32({fn}, {x})"
            if s.ftz:
                expr = f"ftz32({expr})"
            E.arith(d, F32, "f32", expr)
            return
        if t == "f16":
            E.arith(d, F16, "f16", f"approx_f16({fn}, {x})")
            return
        if t == "f16x2":
            E.dst(d, U32, f"packed2(lambda p: f16_bits(approx_f16({fn}, as_f16(p))), {x})")
            return
        one = f"f64_to_bf16_bits({fn}(bf16_to_f32(p).astype(F64)))"
        if s.ftz:
            one = f"ftz_bf16({one})"
        if t == "bf16x2":
            E.dst(d, U32, f"packed2(lambda p: {one}, {x})")
        else:
            E.dst(d, U16, f"(lambda p: {one})({x})")
