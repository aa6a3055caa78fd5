"""The PTX emulator's numerics on hand-written PTX: every rounding mode, saturation, flush to
zero and integer instruction bit for bit against exact (Fraction) references; NaN payloads;
i128 and packed half arithmetic; approximate instructions within the ISA's bounds."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from accy.emulator import numerics as N


from emulator_support import (ARCH, assembled, assert_bits_equal, bf16_value, compile_ir, elementwise_ir, f32_inputs, f64_inputs, float_min, forms_of, half_bits, launch, ptx_kernel, run_elementwise, sat_int, simple_kernel, NEEDS_PTXAS)

pytestmark = NEEDS_PTXAS


# exact numerics: one kernel, each op reads a/b/c of its width and writes its own output

WIDTH_OF = {"f32": 32, "u32": 32, "s32": 32, "b32": 32, "f64": 64, "u64": 64, "s64": 64, "b64": 64,
            "f16": 16, "bf16": 16, "b16": 16, "u16": 16, "s16": 16, "pred": 1}
REG_OF = {16: "%h", 32: "%r", 64: "%rd", 1: "%p"}


def _frac_op(fn, fmt, mode, *cols, zero_sign=None, divisor=None):
    """Exact rational ``fn`` rounded with ``mode`` (special values, and a zero ``divisor``
    column, through NumPy)."""
    out = []
    for vals in zip(*(np.asarray(c, np.float64).tolist() for c in cols)):
        if not all(math.isfinite(v) for v in vals) or (divisor is not None and vals[divisor] == 0):
            with np.errstate(all="ignore"):
                out.append(float(fn(*(np.float64(v) for v in vals))))
            continue
        q = fn(*(Fraction(v) for v in vals))
        if q == 0:
            out.append(zero_sign(*vals) if zero_sign else float(fn(*(np.float64(v) for v in vals))))
        else:
            out.append(N.round_fraction(q, fmt, mode))
    return np.array(out)


def _sum_zero(mode):
    """The sign of an exact zero sum x + y: -0 only if both are -0, or (round down) either is."""
    def sign(*vals):
        neg = [math.copysign(1, v) < 0 for v in vals]
        return -0.0 if (all(neg) or (mode == "rm" and any(neg))) else 0.0
    return sign


def _fma_zero(mode):
    def sign(a, b, c):
        p_neg = (math.copysign(1, a) < 0) != (math.copysign(1, b) < 0)
        c_neg = math.copysign(1, c) < 0
        return -0.0 if ((p_neg and c_neg) or (mode == "rm" and (p_neg or c_neg))) else 0.0
    return sign


def _directed_ops():
    ops = []
    f32, f64 = np.float32, np.float64
    for mode in ("rn", "rz", "rm", "rp"):
        for t, dt, fmt in (("f32", f32, "f32"), ("f64", f64, "f64")):
            ops += [
                (f"add.{mode}.{t} {{d}}, {{a}}, {{b}};", [t, t], t,
                 lambda a, b, c, m=mode, dt=dt, fmt=fmt: _frac_op(lambda x, y: x + y, fmt, m, a, b, zero_sign=_sum_zero(m)).astype(dt)),
                (f"mul.{mode}.{t} {{d}}, {{a}}, {{b}};", [t, t], t,
                 lambda a, b, c, m=mode, dt=dt, fmt=fmt: _frac_op(lambda x, y: x * y, fmt, m, a, b).astype(dt)),
                (f"fma.{mode}.{t} {{d}}, {{a}}, {{b}}, {{c}};", [t, t, t], t,
                 lambda a, b, c, m=mode, dt=dt, fmt=fmt: _frac_op(lambda x, y, z: x * y + z, fmt, m, a, b, c,
                                                                  zero_sign=_fma_zero(m)).astype(dt)),
                (f"div.{mode}.{t} {{d}}, {{a}}, {{b}};", [t, t], t,
                 lambda a, b, c, m=mode, dt=dt, fmt=fmt: _frac_op(lambda x, y: x / y, fmt, m, a, b, divisor=1).astype(dt)),
                (f"sqrt.{mode}.{t} {{d}}, {{a}};", [t], t,
                 lambda a, b, c, m=mode, dt=dt: _sqrt_ref(a, m, dt)),
            ]
        ops += [
            (f"cvt.{mode}.f32.f64 {{d}}, {{a}};", ["f64"], "f32",
             lambda a, b, c, m=mode: _frac_op(lambda x: x, "f32", m, a).astype(f32)),
            (f"cvt.{mode}.f16.f32 {{d}}, {{a}};", ["f32"], "f16",
             lambda a, b, c, m=mode: _frac_op(lambda x: x, "f16", m, a).astype(np.float16)),
            (f"cvt.{mode}.f32.s64 {{d}}, {{a}};", ["s64"], "f32",
             lambda a, b, c, m=mode: np.array([N.round_fraction(Fraction(int(v)), "f32", m) for v in a], f32)),
            (f"cvt.{mode}.f64.u64 {{d}}, {{a}};", ["u64"], "f64",
             lambda a, b, c, m=mode: np.array([N.round_fraction(Fraction(int(v)), "f64", m) for v in a], f64)),
        ]
    for irnd, fn in (("rni", np.rint), ("rzi", np.trunc), ("rmi", np.floor), ("rpi", np.ceil)):
        ops += [
            (f"cvt.{irnd}.s32.f32 {{d}}, {{a}};", ["f32"], "s32",
             lambda a, b, c, fn=fn: np.array([sat_int(x, -2 ** 31, 2 ** 31 - 1) for x in fn(a.astype(f64)).tolist()], np.int64)),
            (f"cvt.{irnd}.u64.f64 {{d}}, {{a}};", ["f64"], "u64",
             lambda a, b, c, fn=fn: np.array([sat_int(x, 0, 2 ** 64 - 1) for x in fn(a).tolist()], dtype=object).astype(np.uint64)),
            (f"cvt.{irnd}.f32.f32 {{d}}, {{a}};", ["f32"], "f32", lambda a, b, c, fn=fn: fn(a)),
        ]
    ops += [
        ("cvt.rn.bf16.f32 {d}, {a};", ["f32"], "bf16", lambda a, b, c: _bf16_bits(_frac_op(lambda x: x, "bf16", "rn", a))),
        ("cvt.rz.bf16.f32 {d}, {a};", ["f32"], "bf16", lambda a, b, c: _bf16_bits(_frac_op(lambda x: x, "bf16", "rz", a))),
        ("cvt.f32.bf16 {d}, {a};", ["bf16"], "f32", lambda a, b, c: N.bf16_to_f32(a.view(np.uint16))),
        ("cvt.f32.f16 {d}, {a};", ["f16"], "f32", lambda a, b, c: a.astype(f32)),
        ("cvt.sat.f32.f32 {d}, {a};", ["f32"], "f32",
         lambda a, b, c: np.where(np.isnan(a), f32(0), np.clip(a, f32(0), f32(1))) + f32(0)),
        ("cvt.ftz.f32.f32 {d}, {a};", ["f32"], "f32",
         lambda a, b, c: np.where(np.abs(a) < 2.0 ** -126, np.copysign(f32(0), a), a)),
        ("cvt.rn.relu.f16.f32 {d}, {a};", ["f32"], "f16",
         lambda a, b, c: np.where(np.isnan(a), np.float16(np.nan), np.where(np.signbit(a), np.float16(0), a.astype(np.float16)))),
        ("cvt.rn.satfinite.f16.f32 {d}, {a};", ["f32"], "f16",
         lambda a, b, c: np.where(np.isinf(a.astype(np.float16)) & np.isfinite(a) | np.isinf(a),
                                  np.copysign(np.float16(65504), a).astype(np.float16), a.astype(np.float16))),
        ("cvt.rn.f16x2.f32 {d}, {a}, {b};", ["f32", "f32"], "b32",
         lambda a, b, c: (_canon16(a.astype(np.float16)) << 16) | _canon16(b.astype(np.float16))),
        ("cvt.rn.bf16x2.f32 {d}, {a}, {b};", ["f32", "f32"], "b32",
         lambda a, b, c: (N.f32_to_bf16_bits(a).astype(np.uint32) << 16) | N.f32_to_bf16_bits(b)),
        ("cvt.rna.tf32.f32 {d}, {a};", ["f32"], "b32", lambda a, b, c: _tf32_rna(a)),
        ("cvt.sat.u8.s32 {d}, {a};", ["s32"], "u16", lambda a, b, c: np.clip(a.astype(np.int64), 0, 255)),
        ("cvt.sat.s16.s64 {d}, {a};", ["s64"], "u16",
         lambda a, b, c: np.clip(a, -32768, 32767).astype(np.int16).view(np.uint16)),
        ("cvt.s64.s16 {d}, {a};", ["s16"], "s64", lambda a, b, c: a.view(np.int16).astype(np.int64)),
        ("cvt.u32.u8 {d}, {a};", ["b16"], "u32", lambda a, b, c: a.view(np.uint16) & 0xFF),
        ("add.ftz.f32 {d}, {a}, {b};", ["f32", "f32"], "f32", lambda a, b, c: _ftz(_ftz(a) + _ftz(b))),
        ("mul.ftz.sat.f32 {d}, {a}, {b};", ["f32", "f32"], "f32", lambda a, b, c: _sat(_ftz(_ftz(a) * _ftz(b)))),
        ("fma.rn.ftz.f32 {d}, {a}, {b}, {c};", ["f32", "f32", "f32"], "f32", lambda a, b, c: _ftz(
            _frac_op(lambda x, y, z: x * y + z, "f32", "rn", _ftz(a), _ftz(b), _ftz(c), zero_sign=_fma_zero("rn")).astype(np.float32))),
        ("min.ftz.NaN.f32 {d}, {a}, {b};", ["f32", "f32"], "f32", lambda a, b, c: float_min(_ftz(a), _ftz(b), True)),
        ("max.f64 {d}, {a}, {b};", ["f64", "f64"], "f64", lambda a, b, c: -float_min(-a, -b, False)),
        ("rcp.rn.f32 {d}, {a};", ["f32"], "f32", lambda a, b, c: _frac_op(lambda x: 1 / x, "f32", "rn", a, divisor=0)),
        ("rcp.rn.f64 {d}, {a};", ["f64"], "f64", lambda a, b, c: 1.0 / a),
        ("copysign.f32 {d}, {a}, {b};", ["f32", "f32"], "f32", lambda a, b, c: np.copysign(b, a)),
        ("testp.subnormal.f32 {d}, {a};", ["f32"], "pred", lambda a, b, c: (np.abs(a) < 2.0 ** -126) & (a != 0)),
        ("testp.normal.f64 {d}, {a};", ["f64"], "pred", lambda a, b, c: np.isfinite(a) & ((np.abs(a) >= 2.0 ** -1022) | (a == 0))),
        ("testp.notanumber.f32 {d}, {a};", ["f32"], "pred", lambda a, b, c: np.isnan(a)),
        ("setp.neu.f32 {d}, {a}, {b};", ["f32", "f32"], "pred", lambda a, b, c: ~(a == b)),
        ("setp.num.f64 {d}, {a}, {b};", ["f64", "f64"], "pred", lambda a, b, c: ~np.isnan(a) & ~np.isnan(b)),
        ("set.gtu.u32.f32 {d}, {a}, {b};", ["f32", "f32"], "u32", lambda a, b, c: np.where(~(a <= b), 0xFFFFFFFF, 0)),
        ("slct.s32.f32 {d}, {a}, {b}, {c};", ["s32", "s32", "f32"], "s32", lambda a, b, c: np.where(c >= 0, a, b)),
    ]
    return ops


def _bf16_bits(values):
    """bf16 bit patterns of values that bf16 holds exactly (NaN -> 0x7fff)."""
    v = np.asarray(values, np.float32)
    return np.where(np.isnan(v), np.uint32(0x7FFF), v.view(np.uint32) >> 16).astype(np.uint16)


def _sqrt_ref(a, mode, dt):
    out = []
    for x in np.asarray(a, np.float64).tolist():
        if not math.isfinite(x) or x <= 0:
            out.append(float(np.sqrt(dt(x))))
            continue
        y = float(np.sqrt(dt(x)))  # round to nearest, then fix up exactly
        cands = [float(np.nextafter(dt(y), dt(0))), y, float(np.nextafter(dt(y), dt(np.inf)))]
        X = Fraction(x)
        below = [cc for cc in cands if Fraction(cc) ** 2 <= X]
        above = [cc for cc in cands if Fraction(cc) ** 2 >= X]
        if mode in ("rz", "rm"):
            out.append(max(below))
        elif mode == "rp":
            out.append(min(above))
        else:
            out.append(y)
    return np.array(out, dt)


def _ftz(x):
    return np.where(np.abs(x) < np.float32(2.0 ** -126), np.copysign(np.float32(0), x), x).astype(np.float32)


def _sat(x):
    return (np.where(np.isnan(x), np.float32(0), np.clip(x, np.float32(0), np.float32(1))) + np.float32(0)).astype(np.float32)


def _tf32_rna(a):
    bits = a.view(np.uint32).astype(np.uint64)
    r = ((bits + 0x1000) & 0xFFFFE000).astype(np.uint32)
    r = np.where(np.isinf(a), a.view(np.uint32), r)
    return np.where(np.isnan(a), np.uint32(0x7FFFFFFF), r)


INT_PTX_OPS = [
    ("mul.hi.u64 {d}, {a}, {b};", ["u64", "u64"], "u64", lambda a, b, c: [(int(x) * int(y)) >> 64 for x, y in zip(a, b)]),
    ("mul.hi.s64 {d}, {a}, {b};", ["s64", "s64"], "s64", lambda a, b, c: [(int(x) * int(y)) >> 64 for x, y in zip(a, b)]),
    ("mul.wide.s32 {d}, {a}, {b};", ["s32", "s32"], "s64", lambda a, b, c: a.astype(np.int64) * b),
    ("mad.hi.u32 {d}, {a}, {b}, {c};", ["u32", "u32", "u32"], "u32",
     lambda a, b, c: [((int(x) * int(y)) >> 32) + int(z) for x, y, z in zip(a, b, c)]),
    ("mad.wide.u32 {d}, {a}, {b}, {c};", ["u32", "u32", "u64"], "u64",
     lambda a, b, c: [int(x) * int(y) + int(z) for x, y, z in zip(a, b, c)]),
    ("div.u32 {d}, {a}, {b};", ["u32", "u32"], "u32", lambda a, b, c: [x // y if y else 0xFFFFFFFF for x, y in zip(a.tolist(), b.tolist())]),
    ("rem.u32 {d}, {a}, {b};", ["u32", "u32"], "u32", lambda a, b, c: [x % y if y else x for x, y in zip(a.tolist(), b.tolist())]),
    ("div.s32 {d}, {a}, {b};", ["s32", "s32"], "s32", lambda a, b, c: [_tdiv(x, y, 32) for x, y in zip(a.tolist(), b.tolist())]),
    ("rem.s64 {d}, {a}, {b};", ["s64", "s64"], "s64", lambda a, b, c: [_trem(x, y) for x, y in zip(a.tolist(), b.tolist())]),
    ("bfe.u32 {d}, {a}, {b}, {c};", ["u32", "u32", "u32"], "u32", lambda a, b, c: [_bfe(x, y, z, 32, False) for x, y, z in zip(a, b, c)]),
    ("bfe.s32 {d}, {a}, {b}, {c};", ["u32", "u32", "u32"], "u32", lambda a, b, c: [_bfe(x, y, z, 32, True) for x, y, z in zip(a, b, c)]),
    ("bfi.b32 {d}, {a}, {b}, {c}, 9;", ["u32", "u32", "u32"], "u32", lambda a, b, c: [_bfi(x, y, z, 9) for x, y, z in zip(a, b, c)]),
    ("prmt.b32 {d}, {a}, {b}, {c};", ["u32", "u32", "u32"], "u32", lambda a, b, c: [_prmt(x, y, z) for x, y, z in zip(a, b, c)]),
    ("prmt.b32.f4e {d}, {a}, {b}, {c};", ["u32", "u32", "u32"], "u32",
     lambda a, b, c: [_bytes_of(x, y, [((int(z) & 3) + i) & 7 for i in range(4)]) for x, y, z in zip(a, b, c)]),
    ("brev.b32 {d}, {a};", ["u32"], "u32", lambda a, b, c: [int(format(int(x), "032b")[::-1], 2) for x in a]),
    ("bfind.u32 {d}, {a};", ["u32"], "u32", lambda a, b, c: [int(x).bit_length() - 1 if x else 0xFFFFFFFF for x in a]),
    ("bfind.shiftamt.s32 {d}, {a};", ["s32"], "u32",
     lambda a, b, c: [31 - ((~x if x < 0 else x).bit_length() - 1) if (~x if x < 0 else x) else 0xFFFFFFFF for x in a.tolist()]),
    ("clz.b64 {d}, {a};", ["u64"], "u32", lambda a, b, c: [64 - int(x).bit_length() for x in a]),
    ("popc.b64 {d}, {a};", ["u64"], "u32", lambda a, b, c: [bin(int(x)).count("1") for x in a]),
    ("lop3.b32 {d}, {a}, {b}, {c}, 0x96;", ["u32", "u32", "u32"], "u32", lambda a, b, c: a ^ b ^ c),
    ("lop3.b32 {d}, {a}, {b}, {c}, 0xE8;", ["u32", "u32", "u32"], "u32", lambda a, b, c: (a & b) | (a & c) | (b & c)),
    ("shf.l.wrap.b32 {d}, {a}, {b}, {c};", ["u32", "u32", "u32"], "u32",
     lambda a, b, c: [(((int(y) << 32 | int(x)) << (int(z) & 31)) >> 32) & 0xFFFFFFFF for x, y, z in zip(a, b, c)]),
    ("shf.r.clamp.b32 {d}, {a}, {b}, {c};", ["u32", "u32", "u32"], "u32",
     lambda a, b, c: [((int(y) << 32 | int(x)) >> min(int(z), 32)) & 0xFFFFFFFF for x, y, z in zip(a, b, c)]),
    ("shr.s32 {d}, {a}, {b};", ["s32", "u32"], "s32", lambda a, b, c: [x >> min(int(y), 31) for x, y in zip(a.tolist(), b)]),
    ("shl.b64 {d}, {a}, {b};", ["u64", "u32"], "u64", lambda a, b, c: [(int(x) << int(y)) if y < 64 else 0 for x, y in zip(a, b)]),
    ("mul24.hi.s32 {d}, {a}, {b};", ["u32", "u32"], "u32",
     lambda a, b, c: [(_sx(int(x) & 0xFFFFFF, 24) * _sx(int(y) & 0xFFFFFF, 24)) >> 16 for x, y in zip(a, b)]),
    ("mad24.lo.u32 {d}, {a}, {b}, {c};", ["u32", "u32", "u32"], "u32",
     lambda a, b, c: [(int(x) & 0xFFFFFF) * (int(y) & 0xFFFFFF) + int(z) for x, y, z in zip(a, b, c)]),
    ("sad.s32 {d}, {a}, {b}, {c};", ["s32", "s32", "s32"], "s32", lambda a, b, c: [abs(x - y) + z for x, y, z in zip(a.tolist(), b.tolist(), c.tolist())]),
    ("add.sat.s32 {d}, {a}, {b};", ["s32", "s32"], "s32", lambda a, b, c: np.clip(a.astype(np.int64) + b, -2 ** 31, 2 ** 31 - 1)),
    ("min.s16x2 {d}, {a}, {b};", ["u32", "u32"], "u32", lambda a, b, c: _pair16(a, b, np.minimum, np.int16)),
    ("max.u16x2 {d}, {a}, {b};", ["u32", "u32"], "u32", lambda a, b, c: _pair16(a, b, np.maximum, np.uint16)),
    ("neg.s64 {d}, {a};", ["s64"], "s64", lambda a, b, c: [-x for x in a.tolist()]),
    ("abs.s32 {d}, {a};", ["s32"], "s32", lambda a, b, c: [abs(x) for x in a.tolist()]),
    ("cnot.b32 {d}, {a};", ["u32"], "u32", lambda a, b, c: (a == 0).astype(np.uint32)),
    ("setp.hi.u32 {d}, {a}, {b};", ["u32", "u32"], "pred", lambda a, b, c: a > b),
    ("add.f16x2 {d}, {a}, {b};", ["b32", "b32"], "b32", lambda a, b, c: _pk_f16(a, b, lambda x, y: x + y)),
    ("fma.rn.f16x2 {d}, {a}, {b}, {c};", ["b32", "b32", "b32"], "b32", lambda a, b, c: _pk_fma16(a, b, c)),
    ("neg.bf16x2 {d}, {a};", ["b32"], "b32", lambda a, b, c: a ^ 0x80008000),
    ("fma.rn.relu.bf16 {d}, {a}, {b}, {c};", ["bf16", "bf16", "bf16"], "bf16", lambda a, b, c: _relu_bf16(
        N.f64_to_bf16_bits(_frac_op(lambda x, y, z: x * y + z, "bf16", "rn", bf16_value(a.view(np.uint16)), bf16_value(b.view(np.uint16)),
                                    bf16_value(c.view(np.uint16)), zero_sign=_fma_zero("rn"))))),
]


def _sx(v, bits):
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


def _tdiv(x, y, w):
    if y == 0:
        return -1 if x >= 0 else 1
    if x == -(1 << (w - 1)) and y == -1:
        return x
    q = abs(x) // abs(y)
    return q if (x >= 0) == (y >= 0) else -q


def _trem(x, y):
    if y == 0:
        return x
    r = abs(x) % abs(y)
    return r if x >= 0 else -r


def _bfe(a, b, c, w, signed):
    a, pos, ln = int(a), int(b) & 0xFF, int(c) & 0xFF
    sbit = 0 if (not signed or ln == 0) else (a >> min(pos + ln - 1, w - 1)) & 1
    d = 0
    for i in range(w):
        bit = (a >> (pos + i)) & 1 if (i < ln and pos + i <= w - 1) else sbit
        d |= bit << i
    return d


def _bfi(a, b, c, ln):
    a, f, pos = int(a), int(b), int(c) & 0xFF
    for i in range(ln):
        if pos + i > 31:
            break
        f = (f & ~(1 << (pos + i))) | (((a >> i) & 1) << (pos + i))
    return f & 0xFFFFFFFF


def _bytes_of(a, b, selectors, sign=None):
    src = (int(b) << 32) | int(a)
    out = 0
    for i, s in enumerate(selectors):
        byte = (src >> (8 * (s & 7))) & 0xFF
        if sign and sign[i]:
            byte = 0xFF if byte & 0x80 else 0
        out |= byte << (8 * i)
    return out


def _prmt(a, b, c):
    c = int(c)
    sel = [(c >> (4 * i)) & 0xF for i in range(4)]
    return _bytes_of(a, b, sel, [s & 8 for s in sel])


def _pair16(a, b, fn, dt):
    lo = fn((a & 0xFFFF).astype(np.uint16).view(dt), (b & 0xFFFF).astype(np.uint16).view(dt)).view(np.uint16)
    hi = fn((a >> 16).astype(np.uint16).view(dt), (b >> 16).astype(np.uint16).view(dt)).view(np.uint16)
    return (hi.astype(np.uint32) << 16) | lo


def _canon16(x):
    x = np.asarray(x, np.float16).copy()
    x.view(np.uint16)[np.isnan(x)] = 0x7FFF
    return x.view(np.uint16).astype(np.uint32)


def _pk_f16(a, b, fn):
    def half(v, s):
        return ((v >> s) & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float64)
    with np.errstate(all="ignore"):
        return (_canon16(fn(half(a, 16), half(b, 16)).astype(np.float16)) << 16) | _canon16(fn(half(a, 0), half(b, 0)).astype(np.float16))


def _pk_fma16(a, b, c):
    def half(v, s):
        return ((v >> s) & 0xFFFF).astype(np.uint16).view(np.float16)
    parts = [_canon16(_frac_op(lambda x, y, z: x * y + z, "f16", "rn", half(a, s), half(b, s), half(c, s),
                               zero_sign=_fma_zero("rn")).astype(np.float16)) for s in (16, 0)]
    return (parts[0] << 16) | parts[1]


def _relu_bf16(bits):
    x = N.bf16_to_f32(bits)
    return np.where(np.isnan(x), np.uint16(0x7FFF), np.where(x < 0, np.uint16(0), bits))


def _exact_ops_kernel(ops, name="exact", arch=ARCH):
    """A kernel running every op of ``ops`` on thread i's inputs a/b/c (per width), each
    writing its own output array."""
    widths = (16, 32, 64)
    params = [(f"out{k}", "u64") for k in range(len(ops))]
    params += [(f"in{w}_{x}", "u64") for w in widths for x in "abc"] + [("n", "u32")]
    body = ["ld.param.u32 %ti0, [n];", "mov.u32 %ti1, %ctaid.x;", "mov.u32 %ti2, %ntid.x;",
            "mov.u32 %ti3, %tid.x;", "mad.lo.s32 %ti4, %ti1, %ti2, %ti3;", "setp.ge.u32 %tp, %ti4, %ti0;",
            "@%tp bra $END;"]
    body += [f"mul.wide.u32 %td{i}, %ti4, {w // 8};" for i, w in enumerate(widths)]
    inputs = {}
    reg = {16: 0, 32: 0, 64: 0}
    for i, w in enumerate(widths):
        for x in "abc":
            body += [f"ld.param.u64 %td8, [in{w}_{x}];", f"add.s64 %td9, %td8, %td{i};"]
            r = f"{REG_OF[w]}{reg[w]}"
            reg[w] += 1
            body.append(f"ld.global.b{w} {r}, [%td9];")
            inputs[(w, x)] = r
    for k, (template, in_types, out_type, _) in enumerate(ops):
        ow = WIDTH_OF[out_type]
        if ow == 1:
            d = "%p0"
        else:
            d = f"{REG_OF[ow]}{reg[ow]}"
            reg[ow] += 1
        srcs = {x: inputs[(WIDTH_OF[t], x)] for x, t in zip("abc", in_types)}
        body.append(template.format(d=d, **srcs))
        body.append(f"ld.param.u64 %td8, [out{k}];")
        if ow == 1:
            body += ["selp.u16 %th, 1, 0, %p0;", "add.s64 %td9, %td8, %td0;", "st.global.b16 [%td9], %th;"]
        else:
            body += [f"add.s64 %td9, %td8, %td{widths.index(ow)};", f"st.global.b{ow} [%td9], {d};"]
    body += ["$END:", "ret;"]
    temps = "  .reg .pred %tp;\n  .reg .b16 %th;\n  .reg .b32 %ti<5>;\n  .reg .b64 %td<10>;\n"
    text = ptx_kernel(name, params, "\n".join(body), regs=temps, arch=arch)
    for old, prefix, count in ((".reg .b16 %h<64>;", "%h", reg[16]), (".reg .b32 %r<128>;", "%r", reg[32]),
                               (".reg .b64 %rd<64>;", "%rd", reg[64])):
        text = text.replace(old, f".reg .b{ {'%h': 16, '%r': 32, '%rd': 64}[prefix] } {prefix}<{max(count, 1)}>;")
    return text


def _exact_inputs(n=384):
    rng = np.random.default_rng(11)
    f32 = f32_inputs(4, n)
    a32, b32, c32 = f32, f32_inputs(5, n), f32_inputs(6, n)
    # near-ties: a + b and a * b landing half-way between f32 neighbours
    a32[60:120] = np.float32(1.0) + np.arange(60, dtype=np.float32) * np.float32(2 ** -23)
    b32[60:120] = np.float32(2 ** -24) * (1 + (np.arange(60) % 3))
    c32[120:180] = (-(a32[120:180].astype(np.float64) * b32[120:180])).astype(np.float32)
    ints32 = rng.integers(0, 2 ** 32, (3, n), dtype=np.uint64).astype(np.uint32)
    ints32[:, :8] = [[0, 1, 0x80000000, 0xFFFFFFFF, 7, 0, 0x7FFFFFFF, 32],
                     [0, 0xFFFFFFFF, 0xFFFFFFFF, 0, 33, 0, 31, 40],
                     [0, 5, 8, 255, 4, 0, 1, 7]]
    mix = rng.random(n) < 0.5  # half the lanes hold float bits, half integers
    arr32 = [np.where(mix, f.view(np.uint32), i) for f, i in zip((a32, b32, c32), ints32)]
    f64 = [f64_inputs(s, n) for s in (4, 5, 6)]
    with np.errstate(all="ignore"):
        f64[2][100:160] = -(f64[0][100:160] * f64[1][100:160])
    ints64 = rng.integers(0, 2 ** 63, (3, n), dtype=np.int64).astype(np.uint64) * np.uint64(2)
    ints64[:, :6] = [[0, 1, 2 ** 63, 2 ** 64 - 1, 2 ** 63 - 1, 12345],
                     [0, 2 ** 64 - 1, 2 ** 64 - 1, 2 ** 63, 3, 0],
                     [0, 1, 2, 3, 4, 5]]
    arr64 = [np.where(mix, f.view(np.uint64), i) for f, i in zip(f64, ints64)]
    arr16 = [half_bits(s, n) for s in (7, 8, 9)]
    return {16: arr16, 32: arr32, 64: arr64}


def _typed(bits, t):
    if t in ("f32", "f64", "f16"):
        return bits.view({"f32": np.float32, "f64": np.float64, "f16": np.float16}[t])
    if t in ("s16", "s32", "s64"):
        return bits.view(f"i{WIDTH_OF[t] // 8}")
    return bits


@pytest.mark.parametrize("which", ["float", "integer"])
def test_exact_numerics_hand_written_ptx(which):
    ops = _directed_ops() if which == "float" else INT_PTX_OPS
    arch = "sm_80" if which == "float" else "sm_90"  # the packed 16-bit min/max are sm_90's
    ptx = assembled(_exact_ops_kernel(ops, arch=arch), arch)
    data = _exact_inputs()
    n = len(data[32][0])
    outs = [np.zeros(n, f"u{max(WIDTH_OF[o], 16) // 8}") for _, _, o, _ in ops]
    ins = [data[w][k] for w in (16, 32, 64) for k in range(3)]
    result = launch(ptx, "exact", outs + ins, (-(-n // 128), 1, 1), (128, 1, 1), extra=[n])
    for k, (template, in_types, out_type, ref) in enumerate(ops):
        args = [_typed(data[WIDTH_OF[t]][j], t) for j, t in enumerate(in_types)]
        args += [None] * (3 - len(args))
        with np.errstate(all="ignore"):
            expected = ref(*args)
        w = max(WIDTH_OF[out_type], 16)
        if out_type == "pred":
            expected = np.asarray(expected, bool).astype(np.uint16)
        elif out_type in ("f32", "f64", "f16"):
            expected = np.asarray(expected, {"f32": np.float32, "f64": np.float64, "f16": np.float16}[out_type])
            if out_type != "f64":  # arithmetic NaNs are canonical; copysign keeps bits
                expected = expected.copy()
                if not template.startswith("copysign"):
                    expected.view(f"u{w // 8}")[np.isnan(expected)] = 0x7FFFFFFF if w == 32 else 0x7FFF
            expected = expected.view(f"u{w // 8}")
        else:
            expected = np.array([int(x) % (1 << w) for x in np.asarray(expected, dtype=object).reshape(-1)],
                                dtype=object).astype(f"u{w // 8}")
        got = result[k]
        if out_type == "f64":  # f64 NaN payloads are not pinned down: any NaN matches any NaN
            nan = np.isnan(got.view(np.float64)) & np.isnan(expected.view(np.float64))
            got, expected = np.where(nan, 0, got), np.where(nan, 0, expected)
        if out_type == "bf16":
            nan = np.isnan(N.bf16_to_f32(got)) & np.isnan(N.bf16_to_f32(expected.astype(np.uint16)))
            got, expected = np.where(nan, 0, got), np.where(nan, 0, expected)
        assert_bits_equal(got, expected, template.split()[0], [a for a in args if a is not None])


# NaN payloads

def test_nan_payloads_survive_moves_and_arithmetic_makes_them_canonical():
    ptx = simple_kernel("nans", """
        mov.u32 %r1, %tid.x;
        ld.param.u64 %rd1, [buf];
        mul.wide.u32 %rd2, %r1, 4;
        add.s64 %rd3, %rd1, %rd2;
        ld.global.f32 %r2, [%rd3];
        add.rn.f32 %r3, %r2, 0f3F800000;
        mov.b32 %r4, %r2;
        setp.eq.u32 %p15, %r1, %r1;
        selp.f32 %r5, %r4, %r3, %p15;
        add.s64 %rd4, %rd3, 256;
        st.global.f32 [%rd4], %r3;
        add.s64 %rd5, %rd3, 512;
        st.global.b32 [%rd5], %r5;
        copysign.f32 %r6, 0f3F800000, %r2;
        add.s64 %rd6, %rd3, 768;
        st.global.f32 [%rd6], %r6;
        ret;
    """)
    x = np.zeros(256, np.float32)
    payloads = np.array([0x7FC00001, 0xFFC12345, 0x7F800001, 0xFFFFFFFF], np.uint32)
    x[:64] = np.resize(payloads, 64).view(np.float32)
    (out,) = launch(ptx, "nans", [x], 1, 64)
    bits = out.view(np.uint32).reshape(4, 64)
    assert (bits[1] == 0x7FFFFFFF).all(), "an f32 add of a NaN gives the canonical NaN"
    assert (bits[2] == bits[0]).all(), "moves and selp keep a loaded NaN's bits"
    assert (bits[3] == bits[0] & 0x7FFFFFFF).all(), "copysign works on the bits"


def test_i128_and_packed_half_arithmetic():
    body = """
    %r0 = add i128 %a0, %a1
    %r1 = mul i128 %a0, %a1
    %r2 = sub i128 %a0, %a1
    %r3 = shl i128 %a0, 17
    %r4 = lshr i128 %a0, 70
    """
    ptx = compile_ir(elementwise_ir("i128", ["i128", "i128"], ["i128"] * 5, body))
    assert {"add.cc.s64", "addc.cc.s64"} & forms_of(ptx) or any("mad" in f or "mul.hi" in f for f in forms_of(ptx))
    n = 64
    rng = np.random.default_rng(0)
    words = [rng.integers(0, 2 ** 63, (n, 2), dtype=np.int64).view(np.uint64) for _ in range(2)]
    words[0][::2, 1] |= np.uint64(1 << 63)
    pair = np.dtype([("lo", "<u8"), ("hi", "<u8")])
    A, B = (np.ascontiguousarray(w).view(pair).reshape(n) for w in words)
    outs = run_elementwise(ptx, "i128", [A, B], [pair] * 5)

    def val(x):
        return int(x["lo"]) | (int(x["hi"]) << 64)

    for k, fn in enumerate([lambda x, y: x + y, lambda x, y: x * y, lambda x, y: x - y, lambda x, y: x << 17,
                            lambda x, y: x >> 70]):
        assert [val(o) for o in outs[k]] == [fn(val(x), val(y)) % (1 << 128) for x, y in zip(A, B)], f"i128 op {k}"
    body = """
    %r0 = fadd <2 x half> %a0, %a1
    %r1 = fmul <2 x half> %a0, %a1
    %r2 = call <2 x half> @llvm.minnum.v2f16(<2 x half> %a0, <2 x half> %a1)
    %r3 = fneg <2 x half> %a0
    """
    ptx = compile_ir(elementwise_ir("vh", ["<2 x half>"] * 2, ["<2 x half>"] * 4, body,
                                    "declare <2 x half> @llvm.minnum.v2f16(<2 x half>, <2 x half>)\n"))
    assert {"add.rn.f16x2", "mul.rn.f16x2"} <= forms_of(ptx)
    h = rng.standard_normal((n, 2)).astype(np.float16)
    g = rng.standard_normal((n, 2)).astype(np.float16)
    outs = run_elementwise(ptx, "vh", [h.view(np.uint32).reshape(n), g.view(np.uint32).reshape(n)], [np.uint32] * 4)
    o = [x.view(np.float16).reshape(n, 2) for x in outs]
    assert_bits_equal(o[0], (h.astype(np.float64) + g).astype(np.float16), "add.f16x2")
    assert_bits_equal(o[1], (h.astype(np.float64) * g).astype(np.float16), "mul.f16x2")
    assert_bits_equal(o[2], np.fmin(h, g), "min.f16x2")
    assert_bits_equal(o[3], -h, "neg.f16x2")


APPROX = [  # (instruction, reference in float64, error bound: ("rel", e) / ("abs", e) / ("ulp", n))
    ("ex2.approx.f32", np.exp2, ("rel", 2.0 ** -22)),
    ("ex2.approx.ftz.f32", np.exp2, ("rel", 2.0 ** -22)),
    ("lg2.approx.f32", np.log2, ("absrel", 2.0 ** -22)),  # absolute near 1, relative elsewhere
    ("sin.approx.f32", np.sin, ("abs", 2.0 ** -20.9)),
    ("cos.approx.ftz.f32", np.cos, ("abs", 2.0 ** -20.9)),
    ("rsqrt.approx.f32", lambda x: 1 / np.sqrt(x), ("rel", 2.0 ** -22.9)),
    ("rcp.approx.f32", lambda x: 1 / x, ("ulp", 1)),
    ("sqrt.approx.f32", np.sqrt, ("rel", 2.0 ** -23)),
    ("tanh.approx.f32", np.tanh, ("rel", 2.0 ** -10.987)),
]


def test_approximate_instructions_within_isa_bounds_and_special_values():
    body = ["mov.u32 %r3, %tid.x;", "mov.u32 %r4, %ctaid.x;", "mov.u32 %r5, %ntid.x;", "mad.lo.s32 %r1, %r4, %r5, %r3;",
            "ld.param.u64 %rd1, [buf];", "mul.wide.u32 %rd2, %r1, 4;",
            "add.s64 %rd3, %rd1, %rd2;", "ld.global.f32 %r2, [%rd3];", ".pragma \"nounroll\";"]
    for k, (op, _, _) in enumerate(APPROX):
        body += [f"{op} %r{10 + k}, %r2;", f"st.global.f32 [%rd3+{(k + 1) * 4096}], %r{10 + k};"]
    body += ["div.approx.f32 %r40, %r2, 0f7F000000;", "st.global.f32 [%rd3+40960], %r40;",
             "div.full.f32 %r41, 0f3F800000, %r2;", "st.global.f32 [%rd3+45056], %r41;", "ret;"]
    ptx = simple_kernel("approx", "\n".join(body))
    rng = np.random.default_rng(9)
    x = rng.uniform(-3.1, 3.1, 1024).astype(np.float32)
    x[:16] = [0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 0.5, 2, 1e30, -1e30, 1, 3.14159, 100, 1e-3, 4]
    buf = np.zeros(12 * 1024, np.float32)
    buf[:1024] = x
    (out,) = launch(ptx, "approx", [buf], 8, 128)
    res = out.reshape(12, 1024)
    x64 = x.astype(np.float64)
    for k, (op, ref, (kind, bound)) in enumerate(APPROX):
        got = res[k + 1].astype(np.float64)
        with np.errstate(all="ignore"):
            r = ref(np.where(np.abs(x64) < 2 ** -126, 0 * x64, x64) if ".ftz" in op else x64)
        finite = np.isfinite(r) & np.isfinite(got) & (np.abs(x64) < 1e20)
        with np.errstate(all="ignore"):
            err = np.abs(got - r)
            if kind == "rel":
                err = err / np.maximum(np.abs(r), 1e-30)
            elif kind == "absrel":
                err = err / np.maximum(np.abs(r), 1.0)
            elif kind == "ulp":
                err = err / np.spacing(np.abs(r).astype(np.float32)).astype(np.float64)
        assert err[finite].max() <= bound, f"{op}: error {err[finite].max():.3g} over {bound:.3g}"
        special = ~np.isfinite(r)
        same = (np.isnan(got) & np.isnan(r)) | (got == r)
        assert same[special].all(), f"{op}: special value mismatch at {x[special & ~same][:3]}"
    assert res[1][2] == np.inf and res[1][3] == 0 and res[3][0] == -np.inf and np.isnan(res[3][3])
    assert res[6][1] == -np.inf and res[6][0] == np.inf and res[9][2] == 1 and res[9][3] == -1
    # div.approx: a divisor above 2**126 has a reciprocal that flushes to zero
    assert (res[10][np.isfinite(x)] == 0).all()
    with np.errstate(all="ignore"):
        assert_bits_equal(res[11][np.isfinite(x) & (x != 0)], (1 / x64).astype(np.float32)[np.isfinite(x) & (x != 0)],
                          "div.full.f32 (correctly rounded here, within its 2 ulp)")
