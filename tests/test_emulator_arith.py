"""The PTX emulator's arithmetic on PTX that LLVM emits (LLVM IR compiled with llvmlite's NVPTX
target): integer ops of every width, f32/f64/f16/bf16 ops bit for bit (special values
everywhere, canonical NaNs), libdevice's math functions within their documented ulps."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from accy.emulator import numerics as N


from emulator_support import (assert_bits_equal, bf16_value, compile_ir, elementwise_ir, f32_inputs, f64_inputs, float_min, half_bits, LIBDEVICE_F32, LIBDEVICE_F64, libdevice_kernel, run_elementwise, sat_int, NEEDS_PTXAS)

pytestmark = NEEDS_PTXAS


# integers: every width, the ops LLVM lowers to PTX integer instructions

def _int_ops(W):
    T, W2 = f"i{W}", f"i{2 * W}"
    ops = [
        f"%r0 = add {T} %a0, %a1", f"%r1 = sub {T} %a0, %a1", f"%r2 = mul {T} %a0, %a1",
        f"%dp = and {T} %a1, {2 ** (W - 1) - 1}", f"%d1 = or {T} %dp, 1",
        f"%r3 = sdiv {T} %a0, %d1", f"%r4 = srem {T} %a0, %d1",
        f"%e = or {T} %a1, 1", f"%r5 = udiv {T} %a0, %e", f"%r6 = urem {T} %a0, %e",
        f"%s = and {T} %a1, {W - 1}",
        f"%r7 = shl {T} %a0, %s", f"%r8 = lshr {T} %a0, %s", f"%r9 = ashr {T} %a0, %s",
        f"%r10 = and {T} %a0, %a1", f"%r11 = or {T} %a0, %a1", f"%r12 = xor {T} %a0, %a1",
        f"%r13 = call {T} @llvm.smin.{T}({T} %a0, {T} %a1)", f"%r14 = call {T} @llvm.smax.{T}({T} %a0, {T} %a1)",
        f"%r15 = call {T} @llvm.umin.{T}({T} %a0, {T} %a1)", f"%r16 = call {T} @llvm.umax.{T}({T} %a0, {T} %a1)",
        f"%r17 = call {T} @llvm.abs.{T}({T} %a0, i1 false)", f"%r18 = call {T} @llvm.ctpop.{T}({T} %a0)",
        f"%r19 = call {T} @llvm.ctlz.{T}({T} %a0, i1 false)", f"%r20 = call {T} @llvm.cttz.{T}({T} %a0, i1 false)",
        f"%r21 = call {T} @llvm.bitreverse.{T}({T} %a0)",
        f"%cmp = icmp slt {T} %a0, %a1", f"%inc = add {T} %a0, 7", f"%r22 = select i1 %cmp, {T} %inc, {T} %a1",
        f"%cmpu = icmp ult {T} %a0, %a1", f"%r23 = zext i1 %cmpu to {T}",
        f"%za = zext {T} %a0 to {W2}", f"%zb = zext {T} %a1 to {W2}", f"%zp = mul {W2} %za, %zb",
        f"%zh = lshr {W2} %zp, {W}", f"%r24 = trunc {W2} %zh to {T}",
        f"%sa = sext {T} %a0 to {W2}", f"%sb = sext {T} %a1 to {W2}", f"%sp = mul {W2} %sa, %sb",
        f"%sh = ashr {W2} %sp, {W}", f"%r25 = trunc {W2} %sh to {T}",
        f"%r26 = call {T} @llvm.sadd.sat.{T}({T} %a0, {T} %a1)", f"%r27 = call {T} @llvm.usub.sat.{T}({T} %a0, {T} %a1)",
        f"%r28 = call {T} @llvm.fshl.{T}({T} %a0, {T} %a1, {T} %s)",
    ]
    decls = "".join(f"declare {T} @llvm.{f}.{T}({T}, {T})\n"
                    for f in ("smin", "smax", "umin", "umax", "sadd.sat", "usub.sat"))
    decls += (f"declare {T} @llvm.abs.{T}({T}, i1)\ndeclare {T} @llvm.ctpop.{T}({T})\n"
              f"declare {T} @llvm.ctlz.{T}({T}, i1)\ndeclare {T} @llvm.cttz.{T}({T}, i1)\n"
              f"declare {T} @llvm.bitreverse.{T}({T})\ndeclare {T} @llvm.fshl.{T}({T}, {T}, {T})\n")
    if W >= 16:
        ops.append(f"%r29 = call {T} @llvm.bswap.{T}({T} %a0)")
        decls += f"declare {T} @llvm.bswap.{T}({T})\n"
    return ops, decls


def _int_reference(k, W, x, y):
    M = 1 << W
    xu, yu = int(x) % M, int(y) % M
    xs, ys = (xu - M if xu >= M // 2 else xu), (yu - M if yu >= M // 2 else yu)
    d1, e, sh = (yu & (M // 2 - 1)) | 1, yu | 1, yu & (W - 1)

    def tdiv(p, q):
        return abs(p) // abs(q) * (1 if (p >= 0) == (q >= 0) else -1)

    return [
        lambda: xu + yu, lambda: xu - yu, lambda: xu * yu, lambda: tdiv(xs, d1), lambda: xs - tdiv(xs, d1) * d1,
        lambda: xu // e, lambda: xu % e, lambda: xu << sh, lambda: xu >> sh, lambda: xs >> sh,
        lambda: xu & yu, lambda: xu | yu, lambda: xu ^ yu, lambda: min(xs, ys), lambda: max(xs, ys),
        lambda: min(xu, yu), lambda: max(xu, yu), lambda: abs(xs), lambda: bin(xu).count("1"),
        lambda: W - xu.bit_length(), lambda: ((xu & -xu).bit_length() - 1) if xu else W,
        lambda: int(format(xu, f"0{W}b")[::-1], 2), lambda: xs + 7 if xs < ys else yu, lambda: int(xu < yu),
        lambda: (xu * yu) >> W, lambda: (xs * ys) >> W, lambda: max(-(M // 2), min(M // 2 - 1, xs + ys)),
        lambda: max(0, xu - yu), lambda: ((xu << sh) | (yu >> (W - sh))) if sh else xu,
        lambda: int.from_bytes(xu.to_bytes(W // 8, "little"), "big"),
    ][k]() % M


@pytest.mark.parametrize("W", [8, 16, 32, 64])
def test_integer_ops_bit_exact(W):
    ops, decls = _int_ops(W)
    nout = 30 if W >= 16 else 29
    ptx = compile_ir(elementwise_ir("ints", [f"i{W}"] * 2, [f"i{W}"] * nout, "\n".join(ops), decls))
    ut = np.dtype(f"u{W // 8}")
    rng = np.random.default_rng(W)
    a = rng.integers(0, 2 ** W, 200, dtype=np.uint64).astype(ut)
    b = rng.integers(0, 2 ** W, 200, dtype=np.uint64).astype(ut)
    a[:8] = [0, 1, 2 ** (W - 1), 2 ** W - 1, 2 ** (W - 1) - 1, 5, 0, 3]
    b[:8] = [0, 2 ** W - 1, 1, 2 ** (W - 1), 7, 2 ** W - 1, 2 ** (W - 1), 0]
    outs = run_elementwise(ptx, "ints", [a, b], [ut] * nout)
    for k in range(nout):
        expected = np.array([_int_reference(k, W, x, y) for x, y in zip(a, b)], dtype=object).astype(ut)
        assert_bits_equal(outs[k], expected, f"i{W} op {k}", (a, b))


F32_OPS = [
    ("fadd float %a0, %a1", "float", lambda a, b, c: a + b),
    ("fsub float %a0, %a1", "float", lambda a, b, c: a - b),
    ("fmul float %a0, %a1", "float", lambda a, b, c: a * b),
    ("fdiv float %a0, %a1", "float", lambda a, b, c: a / b),
    ("call float @llvm.fma.f32(float %a0, float %a1, float %a2)", "float",
     lambda a, b, c: [N.fma_exact(float(x), float(y), float(z), "f32", "rn") for x, y, z in zip(a, b, c)]),
    ("call float @llvm.sqrt.f32(float %a0)", "float", lambda a, b, c: np.sqrt(a)),
    ("fneg float %a0", "float", lambda a, b, c: -a),
    ("call float @llvm.fabs.f32(float %a0)", "float", lambda a, b, c: np.abs(a)),
    ("call float @llvm.minnum.f32(float %a0, float %a1)", "float", lambda a, b, c: float_min(a, b, False)),
    ("call float @llvm.maxnum.f32(float %a0, float %a1)", "float", lambda a, b, c: -float_min(-a, -b, False)),
    ("call float @llvm.minimum.f32(float %a0, float %a1)", "float", lambda a, b, c: float_min(a, b, True)),
    ("call float @llvm.maximum.f32(float %a0, float %a1)", "float", lambda a, b, c: -float_min(-a, -b, True)),
    ("call float @llvm.copysign.f32(float %a0, float %a1)", "float", lambda a, b, c: np.copysign(a, b)),
    ("call float @llvm.floor.f32(float %a0)", "float", lambda a, b, c: np.floor(a)),
    ("call float @llvm.ceil.f32(float %a0)", "float", lambda a, b, c: np.ceil(a)),
    ("call float @llvm.trunc.f32(float %a0)", "float", lambda a, b, c: np.trunc(a)),
    ("call float @llvm.rint.f32(float %a0)", "float", lambda a, b, c: np.rint(a)),
    ("call float @llvm.round.f32(float %a0)", "float",
     lambda a, b, c: np.where(np.isfinite(a), np.copysign(np.floor(np.abs(a) + np.float32(0.5)), a), a)),
    ("call i32 @llvm.fptosi.sat.i32.f32(float %a0)", "i32",
     lambda a, b, c: [sat_int(x, -2 ** 31, 2 ** 31 - 1) for x in a.tolist()]),
    ("call i32 @llvm.fptoui.sat.i32.f32(float %a0)", "i32",
     lambda a, b, c: np.array([sat_int(x, 0, 2 ** 32 - 1) for x in a.tolist()], np.int64).astype(np.uint32).view(np.int32)),
    ("call i64 @llvm.fptosi.sat.i64.f32(float %a0)", "i64",
     lambda a, b, c: np.array([sat_int(x, -2 ** 63, 2 ** 63 - 1) for x in a.tolist()], dtype=object)),
    ("sitofp i32 %ib to float", "float", lambda a, b, c: b.view(np.int32).astype(np.float32)),
    ("uitofp i32 %ib to float", "float", lambda a, b, c: b.view(np.uint32).astype(np.float32)),
    ("sitofp i64 %iw to float", "float", lambda a, b, c: [
        N.round_fraction(Fraction(int(v)), "f32", "rn") for v in _wide(c).view(np.int64)]),
    ("fcmp olt float %a0, %a1", "i1", lambda a, b, c: a < b),
    ("fcmp une float %a0, %a1", "i1", lambda a, b, c: ~(a == b)),
    ("fcmp uge float %a0, %a1", "i1", lambda a, b, c: ~(a < b)),
    ("fcmp ord float %a0, %a1", "i1", lambda a, b, c: ~np.isnan(a) & ~np.isnan(b)),
    ("fpext float %a0 to double", "double", lambda a, b, c: a.astype(np.float64)),
    ("fptrunc double %xp to float", "float", lambda a, b, c: (a.astype(np.float64) * b).astype(np.float32)),
    ("fptrunc float %a0 to half", "half", lambda a, b, c: a.astype(np.float16)),
    ("fptrunc float %a0 to bfloat", "bfloat", lambda a, b, c: N.f32_to_bf16_bits(a)),
]


def _wide(c):
    bz = c.view(np.uint32).astype(np.uint64)
    return (bz << np.uint64(29)) ^ bz


IR_TYPES = {"float": np.float32, "double": np.float64, "half": np.float16, "bfloat": np.uint16,
            "i32": np.int32, "i64": np.int64, "i1": np.int8}


def _float_kernel(ops, in_type, decls, prelude=""):
    body = [prelude]
    outs = []
    for k, (expr, ty, _) in enumerate(ops):
        if ty == "i1":
            body.append(f"%c{k} = {expr}\n%r{k} = zext i1 %c{k} to i8")
            outs.append("i8")
        else:
            body.append(f"%r{k} = {expr}")
            outs.append(ty)
    return elementwise_ir("flt", [in_type] * 3, outs, "\n".join(body), decls), outs


F32_DECLS = "".join(f"declare float @llvm.{f}.f32({', '.join(['float'] * k)})\n" for f, k in (
    ("fma", 3), ("sqrt", 1), ("fabs", 1), ("minnum", 2), ("maxnum", 2), ("minimum", 2), ("maximum", 2),
    ("copysign", 2), ("floor", 1), ("ceil", 1), ("trunc", 1), ("rint", 1), ("round", 1))) + (
    "declare i32 @llvm.fptosi.sat.i32.f32(float)\ndeclare i32 @llvm.fptoui.sat.i32.f32(float)\n"
    "declare i64 @llvm.fptosi.sat.i64.f32(float)\n")
F32_PRELUDE = """%ib = bitcast float %a1 to i32
%bl = bitcast float %a2 to i32
%bz = zext i32 %bl to i64
%bw = shl i64 %bz, 29
%iw = xor i64 %bw, %bz
%x0 = fpext float %a0 to double
%x1 = fpext float %a1 to double
%xp = fmul double %x0, %x1"""


def test_f32_ops_bit_exact_with_canonical_nans():
    ir, outs_t = _float_kernel(F32_OPS, "float", F32_DECLS, F32_PRELUDE)
    ptx = compile_ir(ir)
    a, b, c = f32_inputs(1), f32_inputs(2), f32_inputs(3)
    c[100:200] = (-(a[100:200].astype(np.float64) * b[100:200])).astype(np.float32)  # cancellation for fma
    outs = run_elementwise(ptx, "flt", [a, b, c], [IR_TYPES.get(t, np.int8) for t in outs_t])
    with np.errstate(all="ignore"):
        for k, (expr, ty, ref) in enumerate(F32_OPS):
            expected = ref(a, b, c)
            assert_bits_equal(outs[k], np.asarray(expected).astype(outs[k].dtype) if ty != "i1" else
                              np.asarray(expected).astype(np.int8), expr, (a, b, c))
            if outs[k].dtype == np.float32 and not expr.startswith(("call float @llvm.copysign", "fneg")):
                nan = np.isnan(outs[k])
                assert (outs[k].view(np.uint32)[nan] == 0x7FFFFFFF).all(), f"{expr}: f32 NaN not canonical"


F64_OPS = [
    ("fadd double %a0, %a1", "double", lambda a, b, c: a + b),
    ("fsub double %a0, %a1", "double", lambda a, b, c: a - b),
    ("fmul double %a0, %a1", "double", lambda a, b, c: a * b),
    ("fdiv double %a0, %a1", "double", lambda a, b, c: a / b),
    ("call double @llvm.fma.f64(double %a0, double %a1, double %a2)", "double",
     lambda a, b, c: [N.fma_exact(x, y, z, "f64", "rn") for x, y, z in zip(a.tolist(), b.tolist(), c.tolist())]),
    ("call double @llvm.sqrt.f64(double %a0)", "double", lambda a, b, c: np.sqrt(a)),
    ("fneg double %a0", "double", lambda a, b, c: -a),
    ("call double @llvm.fabs.f64(double %a0)", "double", lambda a, b, c: np.abs(a)),
    ("call double @llvm.minnum.f64(double %a0, double %a1)", "double", lambda a, b, c: float_min(a, b, False)),
    ("call double @llvm.maximum.f64(double %a0, double %a1)", "double", lambda a, b, c: -float_min(-a, -b, True)),
    ("call double @llvm.floor.f64(double %a0)", "double", lambda a, b, c: np.floor(a)),
    ("call double @llvm.rint.f64(double %a0)", "double", lambda a, b, c: np.rint(a)),
    ("call double @llvm.copysign.f64(double %a0, double %a1)", "double", lambda a, b, c: np.copysign(a, b)),
    ("call i64 @llvm.fptosi.sat.i64.f64(double %a0)", "i64",
     lambda a, b, c: np.array([sat_int(x, -2 ** 63, 2 ** 63 - 1) for x in a.tolist()], dtype=object)),
    ("call i64 @llvm.fptoui.sat.i64.f64(double %a0)", "i64",
     lambda a, b, c: np.array([sat_int(x, 0, 2 ** 64 - 1) for x in a.tolist()], dtype=object).astype(np.uint64).view(np.int64)),
    ("sitofp i64 %ib to double", "double", lambda a, b, c: b.view(np.int64).astype(np.float64)),
    ("uitofp i64 %ib to double", "double", lambda a, b, c: b.view(np.uint64).astype(np.float64)),
    ("fptrunc double %a0 to float", "float", lambda a, b, c: a.astype(np.float32)),
    ("fptrunc double %a0 to half", "half", lambda a, b, c: a.astype(np.float16)),
    ("fcmp ult double %a0, %a1", "i1", lambda a, b, c: ~(a >= b)),
]
F64_DECLS = "".join(f"declare double @llvm.{f}.f64({', '.join(['double'] * k)})\n" for f, k in (
    ("fma", 3), ("sqrt", 1), ("fabs", 1), ("minnum", 2), ("maximum", 2), ("floor", 1), ("rint", 1),
    ("copysign", 2))) + "declare i64 @llvm.fptosi.sat.i64.f64(double)\ndeclare i64 @llvm.fptoui.sat.i64.f64(double)\n"


def test_f64_ops_bit_exact():
    ir, outs_t = _float_kernel(F64_OPS, "double", F64_DECLS, "%ib = bitcast double %a1 to i64")
    ptx = compile_ir(ir)
    a, b, c = f64_inputs(1), f64_inputs(2), f64_inputs(3)
    with np.errstate(all="ignore"):
        c[100:200] = -(a[100:200] * b[100:200])
        c[200:220] = a[200:220] * b[200:220] * (1 + 1e-16)
    outs = run_elementwise(ptx, "flt", [a, b, c], [IR_TYPES.get(t, np.int8) for t in outs_t])
    with np.errstate(all="ignore"):
        for k, (expr, ty, ref) in enumerate(F64_OPS):
            assert_bits_equal(outs[k], np.asarray(ref(a, b, c)).astype(outs[k].dtype), expr, (a, b, c))


def _round_exact(fn, fmt, *cols):
    """fn over exact rationals, rounded once to ``fmt`` (special values through float64)."""
    out = []
    for vals in zip(*(np.asarray(c, np.float64).tolist() for c in cols)):
        if not all(math.isfinite(v) for v in vals):
            out.append(fn(*(np.float64(v) for v in vals)))
            continue
        q = fn(*(Fraction(v) for v in vals))
        out.append(N.round_fraction(q, fmt, "rn") if q != 0 else float(fn(*(np.float64(v) for v in vals))))
    return np.array(out)


HALF_OPS = [
    ("fadd half %a0, %a1", "half", lambda a, b, c: (a.astype(np.float64) + b).astype(np.float16)),
    ("fsub half %a0, %a1", "half", lambda a, b, c: (a.astype(np.float64) - b).astype(np.float16)),
    ("fmul half %a0, %a1", "half", lambda a, b, c: (a.astype(np.float64) * b).astype(np.float16)),
    # LLVM divides in f32 and rounds to f16: the GPU does the same
    ("fdiv half %a0, %a1", "half", lambda a, b, c: (a.astype(np.float32) / b.astype(np.float32)).astype(np.float16)),
    ("call half @llvm.fma.f16(half %a0, half %a1, half %a2)", "half",
     lambda a, b, c: _round_exact(lambda x, y, z: x * y + z, "f16", a, b, c).astype(np.float16)),
    ("fneg half %a0", "half", lambda a, b, c: -a),
    ("call half @llvm.fabs.f16(half %a0)", "half", lambda a, b, c: np.abs(a)),
    ("call half @llvm.minnum.f16(half %a0, half %a1)", "half", lambda a, b, c: float_min(a, b, False)),
    ("call half @llvm.maximum.f16(half %a0, half %a1)", "half", lambda a, b, c: -float_min(-a, -b, True)),
    ("fpext half %a0 to float", "float", lambda a, b, c: a.astype(np.float32)),
    ("fcmp olt half %a0, %a1", "i1", lambda a, b, c: a < b),
]


BF16_OPS = [
    ("fadd bfloat %a0, %a1", "bfloat", lambda a, b, c: N.f64_to_bf16_bits(_round_exact(lambda x, y: x + y, "f64", bf16_value(a), bf16_value(b)))),
    ("fsub bfloat %a0, %a1", "bfloat", lambda a, b, c: N.f64_to_bf16_bits(_round_exact(lambda x, y: x - y, "f64", bf16_value(a), bf16_value(b)))),
    ("fmul bfloat %a0, %a1", "bfloat", lambda a, b, c: N.f64_to_bf16_bits(bf16_value(a) * bf16_value(b))),
    ("call bfloat @llvm.fma.bf16(bfloat %a0, bfloat %a1, bfloat %a2)", "bfloat",
     lambda a, b, c: N.f64_to_bf16_bits(_round_exact(lambda x, y, z: x * y + z, "bf16", bf16_value(a), bf16_value(b), bf16_value(c)))),
    ("call bfloat @llvm.maxnum.bf16(bfloat %a0, bfloat %a1)", "bfloat",
     lambda a, b, c: N.f32_to_bf16_bits(-float_min(-N.bf16_to_f32(a), -N.bf16_to_f32(b), False))),
    ("fpext bfloat %a0 to float", "float", lambda a, b, c: N.bf16_to_f32(a)),
]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_f16_and_bf16_ops_bit_exact(arch):
    decls = ("declare half @llvm.fma.f16(half, half, half)\ndeclare half @llvm.minnum.f16(half, half)\n"
             "declare half @llvm.fabs.f16(half)\ndeclare half @llvm.maximum.f16(half, half)\n"
             "declare bfloat @llvm.fma.bf16(bfloat, bfloat, bfloat)\ndeclare bfloat @llvm.maxnum.bf16(bfloat, bfloat)\n")
    for ops, ty, make in ((HALF_OPS, "half", lambda s: half_bits(s).view(np.float16)),
                          (BF16_OPS, "bfloat", half_bits)):
        ir, outs_t = _float_kernel(ops, ty, decls)
        ptx = compile_ir(ir, arch)
        a, b, c = make(1), make(2), make(3)
        if ty == "half":
            with np.errstate(all="ignore"):
                c[300:400] = (-(a[300:400].astype(np.float64) * b[300:400])).astype(np.float16)
        outs = run_elementwise(ptx, "flt", [a, b, c], [IR_TYPES.get(t, np.int8) for t in outs_t])
        with np.errstate(all="ignore"):
            for k, (expr, t, ref) in enumerate(ops):
                got, expected = outs[k], np.asarray(ref(a, b, c)).astype(outs[k].dtype)
                if t == "bfloat":  # NaNs as bf16 bit patterns: any NaN matches any NaN
                    both_nan = np.isnan(N.bf16_to_f32(got)) & np.isnan(N.bf16_to_f32(expected))
                    got, expected = np.where(both_nan, 0, got), np.where(both_nan, 0, expected)
                assert_bits_equal(got, expected, f"{arch} {expr}", (a, b, c))


@pytest.mark.parametrize("ty", ["float", "double"])
def test_libdevice_functions_within_documented_ulps(ty):
    fns, dt = (LIBDEVICE_F32, np.float32) if ty == "float" else (LIBDEVICE_F64, np.float64)
    ptx = compile_ir(libdevice_kernel(fns, ty))
    rng = np.random.default_rng(0)
    n = 1024
    x = rng.standard_normal(n) * 3
    x[:200] = rng.uniform(-100, 100, 200)
    x[200:260] = rng.uniform(-1e6, 1e6, 60)  # sin/cos range reduction
    x[260:300] = np.abs(x[260:300]) * 1e-3
    x[:12] = [0, -0.0, np.inf, -np.inf, np.nan, 1, -1, 1e-40, 88.7, -104, 1e30, 0.5]
    x[300:310] = [1e10, 1e100, 1e300, -1e22, 3e5, 7e7, 2.0 ** 60, 1e-300, 5e-324, 710]  # Payne-Hanek, calls
    y = rng.standard_normal(n) * 2
    y[:12] = [2, 0.5, -1, 3, 1, np.inf, 2.5, -0.0, 1, 2, 0.5, np.nan]
    with np.errstate(all="ignore"):
        x, y = x.astype(dt), y.astype(dt)
    outs = run_elementwise(ptx, "lib", [x, y], [dt] * len(fns), block=128)
    for k, (name, (nargs, ref, ulps)) in enumerate(fns.items()):
        with np.errstate(all="ignore"):
            r = np.asarray(ref(x.astype(np.float64), y.astype(np.float64)) if nargs == 2 else ref(x.astype(np.float64)),
                           np.float64)
            rd = r.astype(dt)
        got = outs[k].astype(np.float64)
        finite = np.isfinite(rd)
        ulp = np.maximum(np.spacing(np.abs(rd)).astype(np.float64), float(np.finfo(dt).smallest_subnormal))
        with np.errstate(all="ignore"):
            err = np.where(finite, np.abs(got - r) / ulp, 0)
        # the f32 references (float64) are exact to well under half an f32 ulp; the f64 ones are
        # themselves float64 results (NumPy's own functions, up to an ulp off)
        slack = 0.5 if ty == "float" else 1.0
        assert err.max() <= ulps + slack, f"__nv_{name}: {err.max():.2f} ulp at x={x[err.argmax()]!r}"
        special = ~finite
        same = (np.isnan(got) & np.isnan(rd)) | (got == rd)
        assert same[special].all(), f"__nv_{name}: special value mismatch at x={x[special & ~same][0]!r}"
