"""``cvt``: conversions between every integer and float type, with the rounding
(``.rn .rz .rm .rp .rna``, ``.rni .rzi .rmi .rpi``), ``.ftz``, ``.sat``, ``.relu``
and ``.satfinite`` modifiers, and the packing forms (``.f16x2.f32``,
``.bf16x2.f32``)."""

from __future__ import annotations

import numpy as np

from .compiler import Mods, Unsupported, _NAME, dtype_of, handler
from .numerics import F32, U16, U32
from .ops_arith import Spec, nops, typed

IRND = ("rni", "rzi", "rmi", "rpi")
FRND = ("rn", "rz", "rm", "rp", "rna")
INTS = ("u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64")
FLOATS = ("f16", "bf16", "f32", "f64")
WIDTH = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8}


@handler("cvt")
class Cvt:
    @staticmethod
    def parse(m: Mods):
        s = Spec(irnd=m.take(IRND), frnd=m.take(FRND), ftz=m.take(("ftz",)) is not None,
                 sat=m.take(("sat",)) is not None, relu=m.take(("relu",)) is not None,
                 satfinite=m.take(("satfinite",)) is not None)
        if len(m.rest) != 2:
            raise Unsupported("cvt needs a destination and a source type")
        s["dt"], s["st"] = m.rest
        m.rest = []
        ok = INTS + FLOATS + ("b8", "b16", "b32", "b64")
        if s.dt in ("f16x2", "bf16x2"):
            if s.st != "f32":
                raise Unsupported(f"cvt.{s.dt}.{s.st}")
        elif s.dt == "tf32":
            if s.st != "f32" or s.frnd not in ("rna", "rn", "rz"):
                raise Unsupported(f"cvt.{s.frnd}.tf32")
        elif s.dt not in ok or s.st not in ok:
            raise Unsupported(f"conversion from .{s.st} to .{s.dt}")
        if s.frnd == "rna" and s.dt != "tf32":
            raise Unsupported(".rna outside tf32")
        if s.irnd and s.frnd:
            raise Unsupported("two rounding modifiers")
        return s

    @staticmethod
    def emit(E, ins, s):
        d_t, s_t = s.dt, s.st
        if d_t in ("f16x2", "bf16x2"):
            d, a, b = nops(E, ins, 3)
            half = d_t[:-2]
            hi = _float_to_float(E, E.src_observed(a, F32), "f32", half, s)
            lo = _float_to_float(E, E.src_observed(b, F32), "f32", half, s)
            if half == "f16":
                hi, lo = f"f16_bits({hi})", f"f16_bits({lo})"
            E.dst(d, U32, f"pack16({lo}, {hi})")
            return
        d, a = nops(E, ins, 2)
        if d_t == "tf32":
            E.dst(d, U32, f"to_tf32({E.src(a, F32)}, {s.frnd!r}, {s.satfinite})")
            return
        d_t = {"b8": "u8", "b16": "u16", "b32": "u32", "b64": "u64"}.get(d_t, d_t)
        s_t = {"b8": "u8", "b16": "u16", "b32": "u32", "b64": "u64"}.get(s_t, s_t)
        if s_t in INTS and d_t in INTS:
            x = E.src(a, typed(s_t))
            out = np.dtype(typed(d_t))
            if s.sat:
                E.dst(d, out, f"int_saturate({x}, {_NAME[out]})")
            else:
                E.dst(d, out, f"np.asarray({x}).astype({_NAME[out]})")
            return
        if s_t in INTS:  # integer -> float
            x = E.src(a, typed(s_t))
            mode = s.frnd or "rn"
            if d_t == "bf16":
                expr = f"int_to_float({x}, 'bf16', {mode!r})"
                E.dst(d, U16, _post_bits(expr, s))
                return
            fdt = np.dtype(dtype_of(d_t))
            expr = f"int_to_float({x}, {_NAME[fdt]}, {mode!r})"
            if s.irnd:
                expr = f"round_int_float({expr}, {s.irnd!r})"
            E.arith(d, fdt, d_t, _post_float(expr, d_t, s))
            return
        # float source
        x = _read_float(E, a, s_t, s)
        if d_t in INTS:
            out = np.dtype(typed(d_t))
            E.dst(d, out, f"float_to_int({x}, {_NAME[out]}, {(s.irnd or 'rzi')!r})")
            return
        expr = _float_to_float(E, x, s_t, d_t, s, already_read=True)
        E.arith(d, U16 if d_t == "bf16" else np.dtype(dtype_of(d_t)), d_t, expr)


def _read_float(E, a, t, s):
    """A float operand as f16/f32/f64 values (bf16 becomes f32), flushed with .ftz (f32 only)."""
    if t == "bf16":
        return f"bf16_to_f32({E.src(a, U16)})"
    x = E.src_observed(a, np.dtype(dtype_of(t)))  # a NaN's payload reaches the result
    if s.ftz and t == "f32":
        x = f"ftz32({x})"
    return x


def _float_to_float(E, x, s_t, d_t, s, already_read=True):
    """Source converting float values ``x`` (f16/f32/f64; bf16 sources already as f32) to
    ``d_t`` (bf16 as bits)."""
    src_w = 4 if s_t == "bf16" else WIDTH[s_t]
    if s.irnd:
        x = f"round_int_float({x}, {s.irnd!r})"
    if d_t == "bf16":
        mode = s.frnd or "rn"
        expr = f"f64_to_bf16_bits(np.asarray({x}, F64), {mode!r})"
        return _post_bits(expr, s)
    fdt = np.dtype(dtype_of(d_t))
    if WIDTH[d_t] >= src_w and not (s_t == "bf16" and d_t == "f16"):
        expr = f"np.asarray({x}).astype({_NAME[fdt]})"  # exact widening (or the same type)
    else:
        mode = s.frnd or "rn"
        expr = f"round_f64(np.asarray({x}, F64), {_NAME[fdt]}, {mode!r})"
    return _post_float(expr, d_t, s)


def _post_float(expr, d_t, s):
    if s.satfinite:
        expr = f"satfinite({expr})"
    if s.relu:
        expr = f"relu({expr})"
    if s.sat:
        expr = f"saturate({expr})"
    if s.ftz and d_t == "f32":
        expr = f"ftz32({expr})"
    return expr


def _post_bits(expr, s):
    """Saturation modifiers on bf16 bit patterns (through f32, exactly)."""
    if s.satfinite or s.relu or s.sat:
        inner = f"bf16_to_f32({expr})"
        if s.satfinite:
            inner = f"satfinite_bf16({inner})"
        if s.relu:
            inner = f"relu({inner})"
        if s.sat:
            inner = f"saturate({inner})"
        expr = f"f32_to_bf16_bits({inner})"
    return expr
