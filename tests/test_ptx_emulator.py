"""The PTX emulator (accy.emulator): PTX executed on the CPU must compute what the
GPU computes.

PTX comes three ways: (1) accy's own emission (``emit_ptx``) of the suite kernels
and the attention entries, launched exactly as ``accy/backends/cuda.py`` launches
them (device buffers, counts, the status word) and compared with the NumPy
interpreter; (2) LLVM IR written here and compiled with llvmlite's NVPTX target
(libdevice linked where used) for what accy will emit next: f16/bf16/f64,
8..64-bit integers, libdevice math, shared memory and barriers, atomics, warp
shuffles and votes, divergent control flow, calls; (3) hand-written PTX for
edge cases and exact numerics.  Every PTX run here is also assembled by ptxas.
"""

from __future__ import annotations

import functools
import math
import re
import time
from fractions import Fraction

import numpy as np
import pytest

from accy.backends import toolchain
from accy.backends.codegen import emit_ptx
from accy.backends import run
from accy.backends.targets import Target
from accy.emulator import (Device, PtxBarrierError, PtxError, PtxMemoryError, instruction_forms,
                               unsupported)
from accy.emulator import numerics as N
from accy.errors import AccyError, OutOfBoundsError
from accy.library.attention import (ScaledDotProduct, ThreadBlocks, reference, scaled_dot_product_f32,
                                    scaled_dot_product_fused_f32)

from kernels import CASES

pytestmark = pytest.mark.skipif(toolchain.find_ptxas() is None, reason="no ptxas: pip install nvidia-cuda-nvcc")

ARCH = "sm_80"


@functools.cache
def assembled(ptx: str, arch: str = ARCH) -> str:
    """``ptx``, after checking that ptxas accepts it (every PTX a test runs must)."""
    toolchain.assemble(ptx, arch)
    return ptx


# -- (1) accy's own PTX, launched as the cuda backend launches it ------------------------------------


def run_like_cuda(program, args, *, fast_exp=False, arch=ARCH, counts=None):
    """Run ``program`` on the ``ptx`` backend: the cuda backend's own host half (one device
    buffer per parameter, 8 readable bytes when empty, its element count, the zeroed status
    word; a non-zero status raises the interpreter's error; outputs copied back), with the
    emulator as the device."""
    run(program, args, backend="ptx", counts=counts, arch=arch, fast_math=fast_exp)


def case_inputs(case, shape, seed=0):
    inputs = case.inputs(np.random.default_rng(seed), shape)
    expected = np.asarray(case.reference(shape, **inputs)).reshape(-1)
    return inputs, expected


@pytest.mark.parametrize("case, shape", [pytest.param(c, s, id=f"{c.name}-{'x'.join(map(str, s))}")
                                         for c in CASES for s in c.shapes])
def test_suite_kernel_matches_interpreter(case, shape):
    inputs, expected = case_inputs(case, shape)
    emu = np.full(expected.size, np.nan, np.float32)
    cpu = np.full(expected.size, np.nan, np.float32)
    run_like_cuda(case.program(shape), {"dst": emu, **inputs})
    case.program(shape).run({"dst": cpu, **inputs}, backend="numpy")
    np.testing.assert_allclose(emu, expected, rtol=case.rtol, atol=case.atol, err_msg="emulator vs NumPy")
    np.testing.assert_allclose(emu, cpu, rtol=case.rtol, atol=case.atol, err_msg="emulator vs interpreter")


ATTENTION = [
    pytest.param(kind, causal, fast, id=f"{kind}-{'causal' if causal else 'full'}-{'fastexp' if fast else 'libdevice'}")
    for kind in ("naive", "fused") for causal in (False, True) for fast in (False, True)]


def _attention_entry(kind, spec):
    return (scaled_dot_product_f32 if kind == "naive" else scaled_dot_product_fused_f32)(spec)


@pytest.mark.parametrize("kind, causal, fast", ATTENTION)
def test_attention_matches_interpreter(kind, causal, fast):
    spec = ScaledDotProduct(2, 5, 7, 3, 4, threads=ThreadBlocks(4, 2, 1), causal=causal)
    entry = _attention_entry(kind, spec)
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal(s, dtype=np.float32) for s in ((2, 5, 3), (2, 7, 3), (2, 7, 4)))
    emu, cpu = np.zeros((2, 5, 4), np.float32), np.zeros((2, 5, 4), np.float32)
    shapes = entry.argument_shapes
    run_like_cuda(entry.program, [emu, q, k, v], fast_exp=fast,
                  counts={n: s.element_count() for n, s in shapes.items()})
    entry.run([cpu, q, k, v], backend="numpy")
    np.testing.assert_allclose(emu, reference(q, k, v, causal=causal), rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(emu, cpu, rtol=2e-5, atol=2e-6)


def test_out_of_bounds_reported_through_the_status_word():
    from accy import Program, axis, dynamic_buffer, f32, index

    def body(k, a):
        k.for_each_1d(axis("i", 8), lambda inner, idx: a.dst.store(inner, a.src[idx["i"]] * 2.0,
                                                                  idx["i"] + a.off[0]))

    prog = Program("emu_shifted_copy", {"dst": dynamic_buffer(f32), "src": dynamic_buffer(f32),
                                        "off": dynamic_buffer(index)}, body)
    src = np.arange(8, dtype=np.float32)
    dst = np.full(8, -1.0, np.float32)
    run_like_cuda(prog, [dst, src, np.zeros(1, np.int64)])
    assert dst.tolist() == [2.0 * i for i in range(8)]
    dst[:] = -1
    with pytest.raises(OutOfBoundsError) as emu_err:
        run_like_cuda(prog, [dst, src, np.ones(1, np.int64)])
    assert (dst == -1).all()
    with pytest.raises(OutOfBoundsError) as cpu_err:
        prog.run([dst, src, np.ones(1, np.int64)], backend="numpy")
    assert str(emu_err.value).split(" at ")[0] == str(cpu_err.value).split(" at ")[0]


def test_naive_attention_speed(capsys):
    """The brief's figure: naive attention 2x16x16x16x16 well under 70 ms here."""
    spec = ScaledDotProduct(2, 16, 16, 16, 16)
    entry = scaled_dot_product_f32(spec)
    launch = entry.launch()
    ptx = emit_ptx(entry.program.graph, Target.nvptx(ARCH), launch.block)
    dev = Device()
    fn = dev.load_module(ptx).function(entry.program.graph.name)
    rng = np.random.default_rng(3)
    arrays = [np.zeros((2, 16, 16), np.float32)] + [rng.standard_normal((2, 16, 16), dtype=np.float32)
                                                    for _ in range(3)]
    ptrs = []
    for a in arrays:
        ptrs.append(dev.alloc(a.nbytes))
        dev.copy_to_device(ptrs[-1], a)
    status = dev.alloc(32)
    args = ptrs + [a.size for a in arrays] + [status]
    best = math.inf
    for _ in range(3):
        t = time.perf_counter()
        fn.launch(launch.grid, launch.block, args)
        best = min(best, time.perf_counter() - t)
    out = np.empty_like(arrays[0])
    dev.copy_from_device(out, ptrs[0])
    np.testing.assert_allclose(out, reference(*arrays[1:]), rtol=2e-5, atol=2e-6)
    with capsys.disabled():
        print(f"\n[ptx emulator] naive attention 2x16x16x16x16: {best * 1e3:.1f} ms per launch")
    assert best < 0.35, f"{best * 1e3:.0f} ms (the target on an idle core is well under 70 ms)"


# -- (2) LLVM IR compiled with llvmlite's NVPTX target ----------------------------------------------------

NVPTX = "nvptx64-nvidia-cuda"


@functools.cache
def _machine(arch):
    import llvmlite.binding as llvm

    for name in ("initialize_all_targets", "initialize_all_asmprinters"):
        try:
            getattr(llvm, name)()
        except (AttributeError, RuntimeError):
            pass
    return llvm.Target.from_triple(NVPTX).create_target_machine(cpu=arch, opt=3)


@functools.cache
def _libdevice_bitcode() -> bytes:
    path = toolchain.find_libdevice()
    if path is None:
        pytest.skip("no libdevice (pip install nvidia-cuda-nvcc)")
    with open(path, "rb") as f:
        return f.read()


@functools.cache
def compile_ir(ir: str, arch: str = ARCH) -> str:
    """PTX for LLVM IR text (O3; libdevice linked when it calls __nv_ functions), checked by ptxas."""
    import llvmlite.binding as llvm

    from accy.backends import codegen

    with codegen._lock:  # LLVM's context is not thread-safe; share accy's lock
        tm = _machine(arch)
        mod = llvm.parse_assembly(ir)
        mod.verify()
        mod.triple, mod.data_layout = NVPTX, str(tm.target_data)
        kernels = set(re.findall(r"define\s+ptx_kernel\s+void\s+@(\w+)", ir))
        if any(f.is_declaration and f.name.startswith("__nv_") for f in mod.functions):
            mod.link_in(llvm.parse_bitcode(_libdevice_bitcode()))
            mod.triple, mod.data_layout = NVPTX, str(tm.target_data)
            for f in mod.functions:
                if not f.is_declaration and f.name not in kernels:
                    f.linkage = "internal"
        builder = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
        builder.getModulePassManager().run(mod, builder)
        ptx = tm.emit_assembly(mod)
    return assembled(ptx, arch)


def forms_of(ptx: str) -> set[str]:
    return instruction_forms(ptx)


def launch(ptx, name, arrays, grid, block, extra=(), shared_bytes=0, dev=None):
    """Copy ``arrays`` to device buffers, launch ``name`` with their addresses then ``extra``,
    and return the buffers' contents afterwards."""
    dev = dev or Device()
    fn = dev.load_module(ptx).function(name)
    ptrs = []
    for a in arrays:
        ptrs.append(dev.alloc(max(a.nbytes, 8)))
        dev.copy_to_device(ptrs[-1], a)
    fn.launch(grid, block, ptrs + list(extra), shared_bytes=shared_bytes)
    outs = []
    for a, p in zip(arrays, ptrs):
        o = np.empty_like(a)
        dev.copy_from_device(o, p)
        outs.append(o)
    return outs


SREGS = "".join(f"declare i32 @llvm.nvvm.read.ptx.sreg.{r}()\n" for r in (
    "tid.x", "tid.y", "tid.z", "ctaid.x", "ctaid.y", "ctaid.z", "ntid.x", "ntid.y", "ntid.z",
    "nctaid.x", "nctaid.y", "nctaid.z", "laneid", "warpid"))


def elementwise_ir(name, ins, outs, body, decls=""):
    """A kernel ``name(out0.., in0.., i32 n)``: thread i < n loads %a<k> = in<k>[i], runs ``body``
    (which defines %r<k>) and stores out<k>[i] = %r<k>."""
    params = ([f"ptr addrspace(1) %out{k}" for k in range(len(outs))]
              + [f"ptr addrspace(1) %in{k}" for k in range(len(ins))] + ["i32 %n"])
    loads = "".join(f"  %pa{k} = getelementptr {t}, ptr addrspace(1) %in{k}, i64 %gi\n"
                    f"  %a{k} = load {t}, ptr addrspace(1) %pa{k}\n" for k, t in enumerate(ins))
    stores = "".join(f"  %po{k} = getelementptr {t}, ptr addrspace(1) %out{k}, i64 %gi\n"
                     f"  store {t} %r{k}, ptr addrspace(1) %po{k}\n" for k, t in enumerate(outs))
    body = "\n".join("  " + line.strip() for line in body.strip().splitlines())
    return f"""{SREGS}{decls}
define ptx_kernel void @{name}({", ".join(params)}) {{
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %c = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %nt = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %bb = mul i32 %c, %nt
  %g = add i32 %bb, %t
  %ok = icmp ult i32 %g, %n
  br i1 %ok, label %body, label %done
body:
  %gi = zext i32 %g to i64
{loads}{body}
{stores}  br label %done
done:
  ret void
}}
"""


def run_elementwise(ptx, name, inputs, out_dtypes, block=64):
    n = len(inputs[0])
    outs = [np.zeros(n, d) for d in out_dtypes]
    result = launch(ptx, name, outs + list(inputs), (-(-n // block), 1, 1), (block, 1, 1), extra=[n])
    return result[:len(outs)]


def assert_bits_equal(got, expected, what, inputs=()):
    """Bit-exact equality (NaNs of a float type may differ in payload only where noted)."""
    got, expected = np.asarray(got), np.asarray(expected).astype(np.asarray(got).dtype)
    if got.dtype.kind == "f":
        u = f"u{got.dtype.itemsize}"
        bad = (got.view(u) != expected.view(u)) & ~(np.isnan(got) & np.isnan(expected))
    else:
        bad = got != expected
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        detail = ", ".join(f"{np.asarray(x)[i]!r}" for x in inputs)
        pytest.fail(f"{what}: {int(bad.sum())} of {bad.size} differ; first at {i} (inputs {detail}): "
                    f"got {got[i]!r}, expected {expected[i]!r}")


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


# floats: special values everywhere

def _f32_inputs(seed, n=400):
    r = np.random.default_rng(seed)
    x = (r.standard_normal(n) * 10.0 ** r.integers(-5, 6, n)).astype(np.float32)
    bits = r.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x[::5] = bits[::5]  # any bit pattern: subnormals, NaNs with payloads, infinities
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 1e-45, -1e-45, 1.17e-38, 3.4e38,
                        -3.4e38, 0.5, 1.5, 2.5, -2.5, 2 ** 31, -2 ** 31, 2 ** 32, 4e9, -1e10, 16777217.0,
                        1e-40, 7.0], np.float32)
    x[:len(special)] = np.roll(special, seed)
    return x


def _sat_int(x, lo, hi):
    return 0 if math.isnan(x) else hi if x >= hi else lo if x <= lo else int(x)


def _fmin(x, y, propagate):
    out = []
    for p, q in zip(x.tolist(), y.tolist()):
        if math.isnan(p) and math.isnan(q) or propagate and (math.isnan(p) or math.isnan(q)):
            out.append(math.nan)
        elif math.isnan(p) or math.isnan(q):
            out.append(q if math.isnan(p) else p)
        elif p == q == 0:
            out.append(p if math.copysign(1, p) < 0 else q)
        else:
            out.append(min(p, q))
    return np.array(out, x.dtype)


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
    ("call float @llvm.minnum.f32(float %a0, float %a1)", "float", lambda a, b, c: _fmin(a, b, False)),
    ("call float @llvm.maxnum.f32(float %a0, float %a1)", "float", lambda a, b, c: -_fmin(-a, -b, False)),
    ("call float @llvm.minimum.f32(float %a0, float %a1)", "float", lambda a, b, c: _fmin(a, b, True)),
    ("call float @llvm.maximum.f32(float %a0, float %a1)", "float", lambda a, b, c: -_fmin(-a, -b, True)),
    ("call float @llvm.copysign.f32(float %a0, float %a1)", "float", lambda a, b, c: np.copysign(a, b)),
    ("call float @llvm.floor.f32(float %a0)", "float", lambda a, b, c: np.floor(a)),
    ("call float @llvm.ceil.f32(float %a0)", "float", lambda a, b, c: np.ceil(a)),
    ("call float @llvm.trunc.f32(float %a0)", "float", lambda a, b, c: np.trunc(a)),
    ("call float @llvm.rint.f32(float %a0)", "float", lambda a, b, c: np.rint(a)),
    ("call float @llvm.round.f32(float %a0)", "float",
     lambda a, b, c: np.where(np.isfinite(a), np.copysign(np.floor(np.abs(a) + np.float32(0.5)), a), a)),
    ("call i32 @llvm.fptosi.sat.i32.f32(float %a0)", "i32",
     lambda a, b, c: [_sat_int(x, -2 ** 31, 2 ** 31 - 1) for x in a.tolist()]),
    ("call i32 @llvm.fptoui.sat.i32.f32(float %a0)", "i32",
     lambda a, b, c: np.array([_sat_int(x, 0, 2 ** 32 - 1) for x in a.tolist()], np.int64).astype(np.uint32).view(np.int32)),
    ("call i64 @llvm.fptosi.sat.i64.f32(float %a0)", "i64",
     lambda a, b, c: np.array([_sat_int(x, -2 ** 63, 2 ** 63 - 1) for x in a.tolist()], dtype=object)),
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
    a, b, c = _f32_inputs(1), _f32_inputs(2), _f32_inputs(3)
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
    ("call double @llvm.minnum.f64(double %a0, double %a1)", "double", lambda a, b, c: _fmin(a, b, False)),
    ("call double @llvm.maximum.f64(double %a0, double %a1)", "double", lambda a, b, c: -_fmin(-a, -b, True)),
    ("call double @llvm.floor.f64(double %a0)", "double", lambda a, b, c: np.floor(a)),
    ("call double @llvm.rint.f64(double %a0)", "double", lambda a, b, c: np.rint(a)),
    ("call double @llvm.copysign.f64(double %a0, double %a1)", "double", lambda a, b, c: np.copysign(a, b)),
    ("call i64 @llvm.fptosi.sat.i64.f64(double %a0)", "i64",
     lambda a, b, c: np.array([_sat_int(x, -2 ** 63, 2 ** 63 - 1) for x in a.tolist()], dtype=object)),
    ("call i64 @llvm.fptoui.sat.i64.f64(double %a0)", "i64",
     lambda a, b, c: np.array([_sat_int(x, 0, 2 ** 64 - 1) for x in a.tolist()], dtype=object).astype(np.uint64).view(np.int64)),
    ("sitofp i64 %ib to double", "double", lambda a, b, c: b.view(np.int64).astype(np.float64)),
    ("uitofp i64 %ib to double", "double", lambda a, b, c: b.view(np.uint64).astype(np.float64)),
    ("fptrunc double %a0 to float", "float", lambda a, b, c: a.astype(np.float32)),
    ("fptrunc double %a0 to half", "half", lambda a, b, c: a.astype(np.float16)),
    ("fcmp ult double %a0, %a1", "i1", lambda a, b, c: ~(a >= b)),
]
F64_DECLS = "".join(f"declare double @llvm.{f}.f64({', '.join(['double'] * k)})\n" for f, k in (
    ("fma", 3), ("sqrt", 1), ("fabs", 1), ("minnum", 2), ("maximum", 2), ("floor", 1), ("rint", 1),
    ("copysign", 2))) + "declare i64 @llvm.fptosi.sat.i64.f64(double)\ndeclare i64 @llvm.fptoui.sat.i64.f64(double)\n"


def _f64_inputs(seed, n=400):
    r = np.random.default_rng(seed)
    x = r.standard_normal(n) * 10.0 ** r.integers(-30, 30, n)
    bits = r.integers(0, 2 ** 63, n, dtype=np.int64).astype(np.uint64).view(np.float64)
    x[::7] = np.where(np.isfinite(bits[::7]), bits[::7], 1.0)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 5e-324, 2.2e-308, 1.7e308, -1.7e308, 2.5,
                        -2.5, 2.0 ** 63, -2.0 ** 63, 2.0 ** 64, 1e20, 9007199254740993.0])
    x[:len(special)] = np.roll(special, seed)
    return x


def test_f64_ops_bit_exact():
    ir, outs_t = _float_kernel(F64_OPS, "double", F64_DECLS, "%ib = bitcast double %a1 to i64")
    ptx = compile_ir(ir)
    a, b, c = _f64_inputs(1), _f64_inputs(2), _f64_inputs(3)
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
    ("call half @llvm.minnum.f16(half %a0, half %a1)", "half", lambda a, b, c: _fmin(a, b, False)),
    ("call half @llvm.maximum.f16(half %a0, half %a1)", "half", lambda a, b, c: -_fmin(-a, -b, True)),
    ("fpext half %a0 to float", "float", lambda a, b, c: a.astype(np.float32)),
    ("fcmp olt half %a0, %a1", "i1", lambda a, b, c: a < b),
]


def _bf(bits):
    return N.bf16_to_f32(bits).astype(np.float64)


BF16_OPS = [
    ("fadd bfloat %a0, %a1", "bfloat", lambda a, b, c: N.f64_to_bf16_bits(_round_exact(lambda x, y: x + y, "f64", _bf(a), _bf(b)))),
    ("fsub bfloat %a0, %a1", "bfloat", lambda a, b, c: N.f64_to_bf16_bits(_round_exact(lambda x, y: x - y, "f64", _bf(a), _bf(b)))),
    ("fmul bfloat %a0, %a1", "bfloat", lambda a, b, c: N.f64_to_bf16_bits(_bf(a) * _bf(b))),
    ("call bfloat @llvm.fma.bf16(bfloat %a0, bfloat %a1, bfloat %a2)", "bfloat",
     lambda a, b, c: N.f64_to_bf16_bits(_round_exact(lambda x, y, z: x * y + z, "bf16", _bf(a), _bf(b), _bf(c)))),
    ("call bfloat @llvm.maxnum.bf16(bfloat %a0, bfloat %a1)", "bfloat",
     lambda a, b, c: N.f32_to_bf16_bits(-_fmin(-N.bf16_to_f32(a), -N.bf16_to_f32(b), False))),
    ("fpext bfloat %a0 to float", "float", lambda a, b, c: N.bf16_to_f32(a)),
]


def _half_bits(seed, n=500):
    x = np.random.default_rng(seed).integers(0, 2 ** 16, n).astype(np.uint16)
    x[:12] = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 6e-8, 65504, -65504, 0.5, 2049],
                      np.float16).view(np.uint16)
    return x


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_f16_and_bf16_ops_bit_exact(arch):
    decls = ("declare half @llvm.fma.f16(half, half, half)\ndeclare half @llvm.minnum.f16(half, half)\n"
             "declare half @llvm.fabs.f16(half)\ndeclare half @llvm.maximum.f16(half, half)\n"
             "declare bfloat @llvm.fma.bf16(bfloat, bfloat, bfloat)\ndeclare bfloat @llvm.maxnum.bf16(bfloat, bfloat)\n")
    for ops, ty, make in ((HALF_OPS, "half", lambda s: _half_bits(s).view(np.float16)),
                          (BF16_OPS, "bfloat", _half_bits)):
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


# libdevice: every function listed in the brief (and a few more), f32 and f64

LIBDEVICE_F32 = {  # name: (arguments, NumPy reference in float64, libdevice's documented max ulp error)
    "expf": (1, np.exp, 2), "logf": (1, np.log, 1), "log1pf": (1, np.log1p, 1), "expm1f": (1, np.expm1, 1),
    "erff": (1, np.vectorize(math.erf), 2), "powf": (2, np.power, 4), "tanhf": (1, np.tanh, 2),
    "sinf": (1, np.sin, 2), "cosf": (1, np.cos, 2), "rsqrtf": (1, lambda x: 1 / np.sqrt(x), 2),
    "exp2f": (1, np.exp2, 2), "log2f": (1, np.log2, 1), "tanf": (1, np.tan, 4), "atan2f": (2, np.arctan2, 3),
    "erfcf": (1, np.vectorize(math.erfc), 4), "sinhf": (1, np.sinh, 3), "coshf": (1, np.cosh, 2),
    "cbrtf": (1, np.cbrt, 1),
}
LIBDEVICE_F64 = {
    "exp": (1, np.exp, 1), "log": (1, np.log, 1), "log1p": (1, np.log1p, 1), "expm1": (1, np.expm1, 1),
    "erf": (1, np.vectorize(math.erf), 2), "pow": (2, np.power, 2), "tanh": (1, np.tanh, 2),
    "sin": (1, np.sin, 2), "cos": (1, np.cos, 2), "rsqrt": (1, lambda x: 1 / np.sqrt(x), 1),
    "atan2": (2, np.arctan2, 2), "cbrt": (1, np.cbrt, 1),
}


def _libdevice_kernel(fns, ty):
    body, decls = [], []
    for k, (name, (nargs, _, _)) in enumerate(fns.items()):
        decls.append(f"declare {ty} @__nv_{name}({', '.join([ty] * nargs)})")
        body.append(f"%r{k} = call {ty} @__nv_{name}({', '.join(f'{ty} %a{j}' for j in range(nargs))})")
    return elementwise_ir("lib", [ty, ty], [ty] * len(fns), "\n".join(body), "\n".join(decls))


@pytest.mark.parametrize("ty", ["float", "double"])
def test_libdevice_functions_within_documented_ulps(ty):
    fns, dt = (LIBDEVICE_F32, np.float32) if ty == "float" else (LIBDEVICE_F64, np.float64)
    ptx = compile_ir(_libdevice_kernel(fns, ty))
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


# threads, blocks, shared memory, barriers, atomics, warps, divergence, calls

def test_thread_index_mapping_3d():
    """Each thread writes its special registers at its linear position: a wrong mapping of
    (block, thread) to tid/ctaid/laneid/warpid, or x/y/z swapped, breaks the comparison."""
    names = ["tid.x", "tid.y", "tid.z", "ctaid.x", "ctaid.y", "ctaid.z", "ntid.x", "ntid.y", "ntid.z",
             "nctaid.x", "nctaid.y", "nctaid.z", "laneid", "warpid"]
    body = [f"%v{k} = call i32 @llvm.nvvm.read.ptx.sreg.{n}()" for k, n in enumerate(names)]
    body += ["%l0 = mul i32 %v2, %v7", "%l1 = add i32 %l0, %v1", "%l2 = mul i32 %l1, %v6", "%lin = add i32 %l2, %v0",
             "%b0 = mul i32 %v5, %v10", "%b1 = add i32 %b0, %v4", "%b2 = mul i32 %b1, %v9", "%blk = add i32 %b2, %v3",
             "%tpb0 = mul i32 %v6, %v7", "%tpb = mul i32 %tpb0, %v8", "%s0 = mul i32 %blk, %tpb",
             "%slot = add i32 %s0, %lin", "%si = zext i32 %slot to i64"]
    params = ", ".join(f"ptr addrspace(1) %o{k}" for k in range(len(names)))
    for k in range(len(names)):
        body += [f"%q{k} = getelementptr i32, ptr addrspace(1) %o{k}, i64 %si", f"store i32 %v{k}, ptr addrspace(1) %q{k}"]
    ir = SREGS + f"define ptx_kernel void @ids({params}) {{\n" + "\n".join("  " + x for x in body) + "\n  ret void\n}\n"
    ptx = compile_ir(ir)
    grid, block = (3, 2, 2), (5, 3, 4)
    tpb, n = 60, 60 * 12
    outs = launch(ptx, "ids", [np.full(n, -1, np.int32) for _ in names], grid, block)
    slot = np.arange(n)
    lin, blk = slot % tpb, slot // tpb
    expected = [lin % 5, (lin // 5) % 3, lin // 15, blk % 3, (blk // 3) % 2, blk // 6,
                [5] * n, [3] * n, [4] * n, [3] * n, [2] * n, [2] * n, lin % 32, lin // 32]
    for name, got, exp in zip(names, outs, expected):
        assert_bits_equal(got, np.asarray(exp, np.int32), f"%{name}")


WARP_DECLS = """declare void @llvm.nvvm.barrier0()
declare i32 @llvm.nvvm.shfl.sync.bfly.i32(i32, i32, i32, i32)
declare float @llvm.nvvm.shfl.sync.down.f32(i32, float, i32, i32)
declare i32 @llvm.nvvm.shfl.sync.idx.i32(i32, i32, i32, i32)
declare {i32, i1} @llvm.nvvm.shfl.sync.up.i32p(i32, i32, i32, i32)
declare i32 @llvm.nvvm.vote.ballot.sync(i32, i1)
declare i1 @llvm.nvvm.vote.all.sync(i32, i1)
declare i1 @llvm.nvvm.vote.any.sync(i32, i1)
declare i1 @llvm.nvvm.vote.uni.sync(i32, i1)
declare i32 @llvm.nvvm.activemask()
declare i32 @llvm.nvvm.redux.sync.add(i32, i32)
declare i32 @llvm.nvvm.redux.sync.min(i32, i32)
declare i32 @llvm.nvvm.redux.sync.umax(i32, i32)
declare i32 @llvm.nvvm.match.any.sync.i32(i32, i32)
"""


def _ballots(mask_rows):
    return np.array([sum(1 << k for k in range(32) if row[k]) for row in mask_rows], np.int64).astype(
        np.uint32).view(np.int32)


def test_warp_shuffles_votes_reductions():
    body = """
    %s1 = call i32 @llvm.nvvm.shfl.sync.bfly.i32(i32 -1, i32 %a0, i32 16, i32 31)
    %x1 = add i32 %a0, %s1
    %s2 = call i32 @llvm.nvvm.shfl.sync.bfly.i32(i32 -1, i32 %x1, i32 8, i32 31)
    %x2 = add i32 %x1, %s2
    %s3 = call i32 @llvm.nvvm.shfl.sync.bfly.i32(i32 -1, i32 %x2, i32 4, i32 31)
    %x3 = add i32 %x2, %s3
    %s4 = call i32 @llvm.nvvm.shfl.sync.bfly.i32(i32 -1, i32 %x3, i32 2, i32 31)
    %x4 = add i32 %x3, %s4
    %s5 = call i32 @llvm.nvvm.shfl.sync.bfly.i32(i32 -1, i32 %x4, i32 1, i32 31)
    %r0 = add i32 %x4, %s5
    %fv = sitofp i32 %a0 to float
    %r1 = call float @llvm.nvvm.shfl.sync.down.f32(i32 -1, float %fv, i32 3, i32 31)
    %r2 = call i32 @llvm.nvvm.shfl.sync.idx.i32(i32 -1, i32 %a0, i32 5, i32 6175)
    %up = call {i32, i1} @llvm.nvvm.shfl.sync.up.i32p(i32 -1, i32 %a0, i32 2, i32 6144)
    %upv = extractvalue {i32, i1} %up, 0
    %upp = extractvalue {i32, i1} %up, 1
    %r3 = select i1 %upp, i32 %upv, i32 -7
    %pos = icmp sgt i32 %a0, 50
    %r4 = call i32 @llvm.nvvm.vote.ballot.sync(i32 -1, i1 %pos)
    %al = call i1 @llvm.nvvm.vote.all.sync(i32 -1, i1 %pos)
    %an = call i1 @llvm.nvvm.vote.any.sync(i32 -1, i1 %pos)
    %un = call i1 @llvm.nvvm.vote.uni.sync(i32 -1, i1 %pos)
    %al32 = zext i1 %al to i32
    %an32 = zext i1 %an to i32
    %un32 = zext i1 %un to i32
    %an2 = shl i32 %an32, 1
    %un2 = shl i32 %un32, 2
    %fl = or i32 %al32, %an2
    %r5 = or i32 %fl, %un2
    %r6 = call i32 @llvm.nvvm.redux.sync.add(i32 %a0, i32 -1)
    %r7 = call i32 @llvm.nvvm.redux.sync.min(i32 %a0, i32 -1)
    %m3 = and i32 %a0, 3
    %r8 = call i32 @llvm.nvvm.match.any.sync.i32(i32 -1, i32 %m3)
    """
    ptx = compile_ir(elementwise_ir("warp", ["i32"], ["i32", "float"] + ["i32"] * 7, body, WARP_DECLS))
    assert {"shfl.sync.bfly.b32", "shfl.sync.up.b32", "vote.sync.ballot.b32", "redux.sync.add.s32",
            "match.any.sync.b32"} <= forms_of(ptx)
    n = 128
    v = np.random.default_rng(0).integers(0, 100, n).astype(np.int32)
    outs = run_elementwise(ptx, "warp", [v], [np.int32, np.float32] + [np.int32] * 7)
    lane, warp = np.arange(n) % 32, np.arange(n) // 32
    w = v.reshape(-1, 32)
    assert_bits_equal(outs[0], np.repeat(w.sum(1), 32), "butterfly sum")
    assert_bits_equal(outs[1], np.where(lane + 3 <= 31, np.roll(v, -3), v).astype(np.float32), "shfl.down")
    assert_bits_equal(outs[2], v[warp * 32 + ((lane & 0x18) | 5)], "shfl.idx in 8-lane segments")
    j = lane - 2
    assert_bits_equal(outs[3], np.where(j >= (lane & 0x18), v[np.clip(warp * 32 + j, 0, n - 1)], -7),
                      "shfl.up in segments, with the predicate")
    pos = (v > 50).reshape(-1, 32)
    assert_bits_equal(outs[4], np.repeat(_ballots(pos), 32), "vote.ballot")
    al, an = pos.all(1), pos.any(1)
    assert_bits_equal(outs[5], np.repeat(al * 1 + an * 2 + (al | ~an) * 4, 32), "vote.all/any/uni")
    assert_bits_equal(outs[6], np.repeat(w.sum(1), 32), "redux.add")
    assert_bits_equal(outs[7], np.repeat(w.min(1), 32), "redux.min")
    m = (v & 3).reshape(-1, 32)
    assert_bits_equal(outs[8], np.concatenate([_ballots([row == row[k] for k in range(32)]) for row in m]),
                      "match.any")


BLOCKSUM = SREGS + WARP_DECLS + r'''
@buf = internal addrspace(3) global [256 x float] undef, align 4
define ptx_kernel void @blocksum(ptr addrspace(1) %out, ptr addrspace(1) %in) {
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %c = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %nt = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %base = mul i32 %c, %nt
  %g = add i32 %base, %t
  %gi = zext i32 %g to i64
  %p = getelementptr float, ptr addrspace(1) %in, i64 %gi
  %v = load float, ptr addrspace(1) %p
  %ti = zext i32 %t to i64
  %sp = getelementptr [256 x float], ptr addrspace(3) @buf, i64 0, i64 %ti
  store float %v, ptr addrspace(3) %sp
  call void @llvm.nvvm.barrier0()
  %s0 = lshr i32 %nt, 1
  br label %loop
loop:
  %s = phi i32 [%s0, %entry], [%sn, %sync]
  %more = icmp ugt i32 %s, 0
  br i1 %more, label %step, label %done
step:
  %act = icmp ult i32 %t, %s
  br i1 %act, label %add, label %sync
add:
  %o = add i32 %t, %s
  %oi = zext i32 %o to i64
  %po = getelementptr [256 x float], ptr addrspace(3) @buf, i64 0, i64 %oi
  %x = load float, ptr addrspace(3) %po
  %y = load float, ptr addrspace(3) %sp
  %z = fadd float %x, %y
  store float %z, ptr addrspace(3) %sp
  br label %sync
sync:
  call void @llvm.nvvm.barrier0()
  %sn = lshr i32 %s, 1
  br label %loop
done:
  %first = icmp eq i32 %t, 0
  br i1 %first, label %w, label %end
w:
  %r = load float, ptr addrspace(3) @buf
  %ci = zext i32 %c to i64
  %q = getelementptr float, ptr addrspace(1) %out, i64 %ci
  store float %r, ptr addrspace(1) %q
  br label %end
end:
  ret void
}
'''


def test_shared_memory_tree_reduction_with_barriers_in_a_loop():
    ptx = compile_ir(BLOCKSUM)
    assert {"bar.sync", "ld.shared.b32", "st.shared.b32"} <= forms_of(ptx)
    x = (np.arange(4 * 128) % 17).astype(np.float32)  # small integers: every order sums exactly
    (out, _) = launch(ptx, "blocksum", [np.zeros(4, np.float32), x], (4, 1, 1), (128, 1, 1))
    assert_bits_equal(out, x.reshape(4, 128).sum(1), "block sums")


ATOMICS = SREGS + WARP_DECLS + r'''
@hist_s = internal addrspace(3) global [16 x i32] undef, align 4
declare void @llvm.memset.p3.i64(ptr addrspace(3), i8, i64, i1)
define ptx_kernel void @atoms(ptr addrspace(1) %hist, ptr addrspace(1) %fsum, ptr addrspace(1) %mx,
                              ptr addrspace(1) %tickets, ptr addrspace(1) %cnt, ptr addrspace(1) %win,
                              ptr addrspace(1) %hist2, ptr addrspace(1) %xch, ptr addrspace(1) %dsum,
                              ptr addrspace(1) %in) {
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %c = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %nt = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %base = mul i32 %c, %nt
  %g = add i32 %base, %t
  %gi = zext i32 %g to i64
  %p = getelementptr i32, ptr addrspace(1) %in, i64 %gi
  %v = load i32, ptr addrspace(1) %p
  %bin = and i32 %v, 15
  %bi = zext i32 %bin to i64
  %hp = getelementptr i32, ptr addrspace(1) %hist, i64 %bi
  %o1 = atomicrmw add ptr addrspace(1) %hp, i32 1 monotonic
  %fv = sitofp i32 %v to float
  %o2 = atomicrmw fadd ptr addrspace(1) %fsum, float %fv monotonic
  %dv = sitofp i32 %v to double
  %o6 = atomicrmw fadd ptr addrspace(1) %dsum, double %dv monotonic
  %o3 = atomicrmw max ptr addrspace(1) %mx, i32 %v monotonic
  %tk = atomicrmw add ptr addrspace(1) %cnt, i32 1 monotonic
  %tp = getelementptr i32, ptr addrspace(1) %tickets, i64 %gi
  store i32 %tk, ptr addrspace(1) %tp
  %cx = cmpxchg ptr addrspace(1) %win, i32 -1, i32 %g monotonic monotonic
  %xo = atomicrmw xchg ptr addrspace(1) %xch, i32 %g monotonic
  %xp = getelementptr i32, ptr addrspace(1) %xch, i64 1
  %xs = add i32 %xo, 1
  %o7 = atomicrmw add ptr addrspace(1) %xp, i32 %xs monotonic
  %first = icmp eq i32 %t, 0
  br i1 %first, label %init, label %after
init:
  call void @llvm.memset.p3.i64(ptr addrspace(3) @hist_s, i8 0, i64 64, i1 false)
  br label %after
after:
  call void @llvm.nvvm.barrier0()
  %sp = getelementptr [16 x i32], ptr addrspace(3) @hist_s, i64 0, i64 %bi
  %o4 = atomicrmw add ptr addrspace(3) %sp, i32 1 monotonic
  call void @llvm.nvvm.barrier0()
  %small = icmp ult i32 %t, 16
  br i1 %small, label %flush, label %end
flush:
  %ti = zext i32 %t to i64
  %sq = getelementptr [16 x i32], ptr addrspace(3) @hist_s, i64 0, i64 %ti
  %hv = load i32, ptr addrspace(3) %sq
  %gq = getelementptr i32, ptr addrspace(1) %hist2, i64 %ti
  %o5 = atomicrmw add ptr addrspace(1) %gq, i32 %hv monotonic
  br label %end
end:
  ret void
}
'''


def test_atomics_on_global_and_shared_memory():
    ptx = compile_ir(ATOMICS)
    assert {"atom.global.add.u32", "atom.global.add.f32", "atom.global.add.f64", "atom.global.max.s32",
            "atom.shared.add.u32", "atom.global.exch.b32"} <= forms_of(ptx)
    assert any(f.startswith("atom.") and ".cas." in f for f in forms_of(ptx))
    n = 256
    v = np.random.default_rng(3).integers(-1000, 1000, n).astype(np.int32)
    outs = launch(ptx, "atoms", [np.zeros(16, np.int32), np.zeros(1, np.float32), np.full(1, -10 ** 6, np.int32),
                                 np.zeros(n, np.int32), np.zeros(1, np.int32), np.full(1, -1, np.int32),
                                 np.zeros(16, np.int32), np.zeros(2, np.int32), np.zeros(1, np.float64), v],
                  (2, 1, 1), (128, 1, 1))
    hist, fsum, mx, tickets, cnt, win, hist2, xch, dsum = outs[:9]
    assert_bits_equal(hist, np.bincount(v & 15, minlength=16), "global histogram")
    assert fsum[0] == v.sum() and dsum[0] == v.sum()  # small integers: exact in any order
    assert mx[0] == v.max()
    assert sorted(tickets.tolist()) == list(range(n)) and cnt[0] == n, "atomic add must hand out unique tickets"
    assert 0 <= win[0] < n, "exactly one compare-and-swap wins"
    # exchanges form a chain: the old values are 0 and every id but the last one, each once
    assert xch[1] == (n * (n - 1) // 2 - xch[0]) + n
    assert_bits_equal(hist2, np.bincount(v & 15, minlength=16), "shared histogram flushed to global")


DIVERGENT = SREGS + WARP_DECLS + r'''
define internal i32 @poly(i32 %x, i32 %k) noinline {
  %a = mul i32 %x, %x
  %b = add i32 %a, %k
  ret i32 %b
}
define internal i32 @fib(i32 %n) noinline {
entry:
  %small = icmp slt i32 %n, 2
  br i1 %small, label %base, label %rec
base:
  ret i32 %n
rec:
  %n1 = sub i32 %n, 1
  %n2 = sub i32 %n, 2
  %f1 = call i32 @fib(i32 %n1)
  %f2 = call i32 @fib(i32 %n2)
  %s = add i32 %f1, %f2
  ret i32 %s
}
define ptx_kernel void @div(ptr addrspace(1) %o0, ptr addrspace(1) %o1, ptr addrspace(1) %o2,
                            ptr addrspace(1) %o3, ptr addrspace(1) %o4, ptr addrspace(1) %in) {
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %c = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %nt = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %base = mul i32 %c, %nt
  %g = add i32 %base, %t
  %gi = zext i32 %g to i64
  %p = getelementptr i32, ptr addrspace(1) %in, i64 %gi
  %v = load volatile i32, ptr addrspace(1) %p
  %trip = urem i32 %v, 13
  %arr = alloca [16 x i32], align 4
  br label %loop
loop:
  %i = phi i32 [0, %entry], [%in1, %body]
  %acc = phi i32 [0, %entry], [%acc2, %body]
  %go = icmp ult i32 %i, %trip
  br i1 %go, label %body, label %exit
body:
  %sq = mul i32 %i, %i
  %acc2 = add i32 %acc, %sq
  %ii = zext i32 %i to i64
  %slot = getelementptr [16 x i32], ptr %arr, i64 0, i64 %ii
  store volatile i32 %acc2, ptr %slot
  %in1 = add i32 %i, 1
  br label %loop
exit:
  %all = call i32 @llvm.nvvm.vote.ballot.sync(i32 -1, i1 true)
  %q0 = getelementptr i32, ptr addrspace(1) %o0, i64 %gi
  store i32 %acc, ptr addrspace(1) %q0
  %q1 = getelementptr i32, ptr addrspace(1) %o1, i64 %gi
  store i32 %all, ptr addrspace(1) %q1
  %pk = call i32 @poly(i32 %v, i32 %t)
  %q2 = getelementptr i32, ptr addrspace(1) %o2, i64 %gi
  store i32 %pk, ptr addrspace(1) %q2
  %fn = and i32 %v, 15
  %fb = call i32 @fib(i32 %fn)
  %q3 = getelementptr i32, ptr addrspace(1) %o3, i64 %gi
  store i32 %fb, ptr addrspace(1) %q3
  %last = add i32 %trip, 15
  %idx = urem i32 %last, 16
  %ix = zext i32 %idx to i64
  %lp = getelementptr [16 x i32], ptr %arr, i64 0, i64 %ix
  %lv = load volatile i32, ptr %lp
  %hasone = icmp ugt i32 %trip, 0
  %lz = select i1 %hasone, i32 %lv, i32 0
  %q4 = getelementptr i32, ptr addrspace(1) %o4, i64 %gi
  store i32 %lz, ptr addrspace(1) %q4
  ret void
}
'''


def test_divergent_loops_reconverge_and_calls_recurse():
    """Per-thread trip counts diverge the warp; the ballot after the loop must see all 32
    lanes (it would not if the threads had not reconverged).  Then a non-inlined call, a
    recursive one (its own stack frames) and a local array indexed at run time."""
    ptx = compile_ir(DIVERGENT)
    assert {"call.uni", "st.local.b32", "ld.local.b32", "vote.sync.ballot.b32"} <= forms_of(ptx)
    n = 96
    v = np.random.default_rng(4).integers(0, 1000, n).astype(np.int32)
    outs = launch(ptx, "div", [np.zeros(n, np.int32) for _ in range(5)] + [v], (3, 1, 1), (32, 1, 1))
    trip = v % 13
    acc = np.array([sum(i * i for i in range(t)) for t in trip])
    assert_bits_equal(outs[0], acc, "per-thread loop sums")
    assert (outs[1].view(np.uint32) == 0xFFFFFFFF).all(), "the warp did not reconverge after the loop"
    assert_bits_equal(outs[2], v * v + np.arange(n) % 32, "noinline call")
    fib = [0, 1]
    for _ in range(16):
        fib.append(fib[-1] + fib[-2])
    assert_bits_equal(outs[3], np.array([fib[x & 15] for x in v]), "recursive calls")
    assert_bits_equal(outs[4], acc, "local array written in the loop, read at run-time index")


# -- (3) hand-written PTX ------------------------------------------------------------------------------------

HEADER = ".version 8.3\n.target {arch}\n.address_size 64\n"


def ptx_kernel(name, params, body, regs="", arch=ARCH, extra=""):
    decl = ",\n".join(f"  .param .{t} {p}" for p, t in params)
    return (HEADER.format(arch=arch) + extra + f"\n.visible .entry {name}(\n{decl}\n)\n{{\n"
            + "  .reg .pred %p<16>;\n  .reg .b16 %h<64>;\n  .reg .b32 %r<128>;\n  .reg .b64 %rd<64>;\n" + regs
            + "\n".join("  " + line.strip() if not line.strip().endswith(":") else line.strip()
                        for line in body.strip().splitlines()) + "\n}\n")


# exact numerics: one kernel, each op reads a/b/c of its width and writes its own output

WIDTH_OF = {"f32": 32, "u32": 32, "s32": 32, "b32": 32, "f64": 64, "u64": 64, "s64": 64, "b64": 64,
            "f16": 16, "bf16": 16, "b16": 16, "u16": 16, "s16": 16, "pred": 1}
REG_OF = {16: "%h", 32: "%r", 64: "%rd", 1: "%p"}


def _bits(x, w):
    return np.asarray(x).view(f"u{w // 8}")


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
             lambda a, b, c, fn=fn: np.array([_sat_int(x, -2 ** 31, 2 ** 31 - 1) for x in fn(a.astype(f64)).tolist()], np.int64)),
            (f"cvt.{irnd}.u64.f64 {{d}}, {{a}};", ["f64"], "u64",
             lambda a, b, c, fn=fn: np.array([_sat_int(x, 0, 2 ** 64 - 1) for x in fn(a).tolist()], dtype=object).astype(np.uint64)),
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
        ("min.ftz.NaN.f32 {d}, {a}, {b};", ["f32", "f32"], "f32", lambda a, b, c: _fmin(_ftz(a), _ftz(b), True)),
        ("max.f64 {d}, {a}, {b};", ["f64", "f64"], "f64", lambda a, b, c: -_fmin(-a, -b, False)),
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
        N.f64_to_bf16_bits(_frac_op(lambda x, y, z: x * y + z, "bf16", "rn", _bf(a.view(np.uint16)), _bf(b.view(np.uint16)),
                                    _bf(c.view(np.uint16)), zero_sign=_fma_zero("rn"))))),
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
    f32 = _f32_inputs(4, n)
    a32, b32, c32 = f32, _f32_inputs(5, n), _f32_inputs(6, n)
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
    f64 = [_f64_inputs(s, n) for s in (4, 5, 6)]
    with np.errstate(all="ignore"):
        f64[2][100:160] = -(f64[0][100:160] * f64[1][100:160])
    ints64 = rng.integers(0, 2 ** 63, (3, n), dtype=np.int64).astype(np.uint64) * np.uint64(2)
    ints64[:, :6] = [[0, 1, 2 ** 63, 2 ** 64 - 1, 2 ** 63 - 1, 12345],
                     [0, 2 ** 64 - 1, 2 ** 64 - 1, 2 ** 63, 3, 0],
                     [0, 1, 2, 3, 4, 5]]
    arr64 = [np.where(mix, f.view(np.uint64), i) for f, i in zip(f64, ints64)]
    arr16 = [_half_bits(s, n) for s in (7, 8, 9)]
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


# edge cases: errors name the line, the address, the allocation and the thread

def _simple(name, body, params=(("buf", "u64"),), extra=""):
    return assembled(ptx_kernel(name, list(params), body, extra=extra))


def test_divergent_barrier_raises_naming_both_lines():
    ptx = _simple("divbar", """
        mov.u32 %r1, %tid.x;
        setp.lt.u32 %p1, %r1, 16;
        @%p1 bra $LOW;
        bar.sync 0;
        bra.uni $END;
        $LOW:
        bar.sync 0;
        $END:
        ret;
    """)
    dev = Device()
    fn = dev.load_module(ptx).function("divbar")
    with pytest.raises(PtxBarrierError) as err:
        fn.launch((1, 1, 1), (32, 1, 1), [dev.alloc(8)])
    text = str(err.value)
    assert "different barriers" in text and text.count("bar.sync 0") >= 2
    assert re.search(r"line \d+", text) and "block (0, 0, 0)" in text
    assert isinstance(err.value, AccyError)


def test_barrier_waiting_for_a_warp_sync_deadlocks():
    ptx = _simple("dead", """
        mov.u32 %r1, %tid.x;
        setp.lt.u32 %p1, %r1, 16;
        @%p1 bra $LOW;
        shfl.sync.idx.b32 %r2, %r1, 0, 31, -1;
        bra.uni $END;
        $LOW:
        bar.sync 0;
        $END:
        ret;
    """)
    dev = Device()
    with pytest.raises(PtxBarrierError, match="never"):
        dev.load_module(ptx).function("dead").launch(1, 32, [dev.alloc(8)])


def test_barrier_waits_for_every_thread_even_when_some_exit_early():
    """Threads that exit do not count; the others meet at the barrier and see each other's
    shared-memory stores."""
    ptx = _simple("early", """
        mov.u32 %r1, %tid.x;
        setp.ge.u32 %p1, %r1, 48;
        @%p1 bra $OUT;
        shl.b32 %r2, %r1, 2;
        mov.u32 %r3, sm;
        add.s32 %r4, %r3, %r2;
        st.shared.u32 [%r4], %r1;
        bar.sync 0;
        xor.b32 %r5, %r1, 1;
        shl.b32 %r6, %r5, 2;
        add.s32 %r7, %r3, %r6;
        ld.shared.u32 %r8, [%r7];
        ld.param.u64 %rd1, [buf];
        mul.wide.u32 %rd2, %r1, 4;
        add.s64 %rd3, %rd1, %rd2;
        st.global.u32 [%rd3], %r8;
        $OUT:
        ret;
    """, extra=".shared .align 4 .b8 sm[256];\n")
    (out,) = launch(ptx, "early", [np.full(64, -1, np.int32)], 1, 64)
    assert_bits_equal(out, np.r_[np.arange(48) ^ 1, np.full(16, -1)], "neighbours' values through shared memory")


OOB = """
    mov.u32 %r1, %tid.x;
    ld.param.u64 %rd1, [buf];
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    ld.global.f32 %r2, [%rd3];
    add.rn.f32 %r3, %r2, %r2;
    st.global.f32 [%rd3], %r3;
    ret;
"""


def test_out_of_bounds_global_access_names_line_address_allocation_and_thread():
    ptx = _simple("oob", OOB)
    dev = Device()
    fn = dev.load_module(ptx).function("oob")
    buf = dev.alloc(32 * 4)
    dev.copy_to_device(buf, np.arange(32, dtype=np.float32))
    fn.launch(1, 32, [buf])
    out = np.empty(32, np.float32)
    dev.copy_from_device(out, buf)
    assert_bits_equal(out, 2 * np.arange(32, dtype=np.float32), "in bounds")
    with pytest.raises(PtxMemoryError) as err:
        fn.launch(1, 33, [buf])  # thread 32 reads one element past the end
    text = str(err.value)
    line = next(i for i, l in enumerate(ptx.splitlines(), 1) if "ld.global.f32" in l)
    assert f"line {line}" in text and "ld.global.f32" in text
    assert f"0x{buf + 128:x}" in text and "0 bytes past the end" in text and f"0x{buf:x}" in text
    assert "thread (32, 0, 0)" in text and "block (0, 0, 0)" in text
    assert isinstance(err.value, IndexError) and err.value.address == buf + 128


def test_misaligned_and_freed_memory_are_reported():
    ptx = _simple("oob", OOB)
    dev = Device()
    fn = dev.load_module(ptx).function("oob")
    buf = dev.alloc(256)
    with pytest.raises(PtxMemoryError, match="misaligned"):
        fn.launch(1, 4, [buf + 2])
    dev.free(buf)
    with pytest.raises(PtxMemoryError, match="freed allocation"):
        fn.launch(1, 4, [buf])


def test_shared_out_of_bounds_is_reported():
    ptx = _simple("soob", """
        mov.u32 %r1, %tid.x;
        shl.b32 %r2, %r1, 2;
        mov.u32 %r3, sm;
        add.s32 %r4, %r3, %r2;
        st.shared.u32 [%r4], %r1;
        ret;
    """, extra=".shared .align 4 .b8 sm[64];\n")
    dev = Device()
    fn = dev.load_module(ptx).function("soob")
    fn.launch(1, 16, [0])
    with pytest.raises(PtxMemoryError, match=r"out-of-bounds shared store .* 64 bytes of shared memory") as err:
        fn.launch(1, 17, [0])
    assert "thread (16, 0, 0)" in str(err.value)


def test_unknown_instruction_is_an_error_naming_its_form_and_line():
    ptx = _simple("unk", """
        mov.u32 %r1, sm;
        mbarrier.init.shared.b64 [%r1], 32;
        ret;
    """, extra=".shared .align 8 .b8 sm[8];\n")
    assert unsupported(instruction_forms(ptx)) == {"mbarrier.init.shared.b64"}
    with pytest.raises(PtxError, match=r"mbarrier\.init\.shared\.b64") as err:
        Device().load_module(ptx)
    line = next(i for i, l in enumerate(ptx.splitlines(), 1) if "mbarrier" in l)
    assert f"line {line}" in str(err.value)


def test_trap_names_the_thread():
    ptx = _simple("trapper", """
        mov.u32 %r1, %tid.x;
        setp.eq.u32 %p1, %r1, 5;
        @%p1 trap;
        ret;
    """)
    dev = Device()
    with pytest.raises(PtxError, match=r"trap executed[\s\S]*thread \(5, 0, 0\)"):
        dev.load_module(ptx).function("trapper").launch(1, 8, [dev.alloc(8)])


def test_launch_checks_arguments_and_geometry():
    ptx = _simple("oob", OOB)
    dev = Device()
    fn = dev.load_module(ptx).function("oob")
    assert fn.param_types == ("u64",)
    with pytest.raises(PtxError, match="takes 1 arguments"):
        fn.launch(1, 1, [])
    with pytest.raises(PtxError, match="2048 threads, over 1024"):
        fn.launch(1, (64, 32, 1), [dev.alloc(8)])
    with pytest.raises(PtxError, match="no kernel entry"):
        dev.load_module(ptx).function("nope")
    assert dev.load_module(ptx) is dev.load_module(ptx)  # prepared once per text


def test_device_memory_api():
    dev = Device()
    a, b, z = dev.alloc(100), dev.alloc(64), dev.alloc(0)
    assert a and b and z and a % 256 == 0 and b % 256 == 0 and len({a, b, z}) == 3
    dev.copy_to_device(a, np.arange(25, dtype=np.int32))
    dev.copy_device(b, a + 8, 64)
    dev.memset(a, 0xFF, 4)
    out, out2 = np.empty(25, np.int32), np.empty(16, np.int32)
    dev.copy_from_device(out, a)
    dev.copy_from_device(out2, b)
    assert out[0] == -1 and (out[1:] == np.arange(1, 25)).all() and (out2 == np.arange(2, 18)).all()
    with pytest.raises(PtxMemoryError):
        dev.copy_to_device(a, np.zeros(26, np.int32))
    with pytest.raises(ValueError):
        dev.copy_from_device(np.zeros((4, 4), np.int32)[:, ::2], a)


def test_every_form_accy_and_libdevice_emit_is_supported():
    """instruction_forms / unsupported over the PTX of every suite kernel, both attention
    entries and the libdevice kernels above: nothing is left unsupported."""
    forms = set()
    for case in CASES:
        program = case.program(case.shapes[-1])
        forms |= instruction_forms(emit_ptx(program.graph, Target.nvptx(ARCH), program.launch().block))
    for kind, causal, fast in [p.values for p in ATTENTION]:
        entry = _attention_entry(kind, ScaledDotProduct(2, 5, 7, 3, 4, causal=causal))
        forms |= instruction_forms(emit_ptx(entry.program.graph, Target.nvptx(ARCH, fast_math=fast),
                                            entry.launch().block))
    for fns, ty in ((LIBDEVICE_F32, "float"), (LIBDEVICE_F64, "double")):
        forms |= instruction_forms(compile_ir(_libdevice_kernel(fns, ty)))
    assert {"fma.rn.f32", "ld.global.nc.b32", "ex2.approx.ftz.f32", "fma.rn.f64", "call.uni"} <= forms
    assert unsupported(forms) == set()
    assert unsupported({"wmma.load.a.sync.aligned.row.m16n16k16.global.f16", "add.rn.f32"}) == {
        "wmma.load.a.sync.aligned.row.m16n16k16.global.f16"}


# state spaces, parameters, calls and control flow written by hand

def test_nan_payloads_survive_moves_and_arithmetic_makes_them_canonical():
    ptx = _simple("nans", """
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


def test_module_variables_constants_dynamic_shared_and_generic_addressing():
    """.global and .const variables with initialisers, extern (dynamic) shared memory, a local
    depot reached through cvta.local / generic loads, and generic pointers into shared."""
    extra = (".global .align 4 .u32 table[4] = {10, 20, 30, 40};\n"
             ".const .align 8 .f64 coef[2] = {0d3FF8000000000000, 0dC000000000000000};\n"
             ".extern .shared .align 16 .b8 dyn[];\n")
    ptx = _simple("spaces", """
        .local .align 8 .b8 __local_depot0[16];
        .reg .b64 %SP;
        .reg .b64 %SPL;
        mov.u64 %SPL, __local_depot0;
        cvta.local.u64 %SP, %SPL;
        mov.u32 %r1, %tid.x;
        and.b32 %r2, %r1, 3;
        mul.wide.u32 %rd1, %r2, 4;
        mov.u64 %rd2, table;
        add.s64 %rd3, %rd2, %rd1;
        ld.global.u32 %r3, [%rd3];
        ld.const.f64 %rd4, [coef+8];
        cvt.rzi.s32.f64 %r4, %rd4;
        add.s32 %r5, %r3, %r4;
        st.u32 [%SP+4], %r5;
        ld.local.u32 %r6, [%SPL+4];
        mov.u32 %r7, dyn;
        shl.b32 %r8, %r1, 2;
        add.s32 %r9, %r7, %r8;
        cvt.u64.u32 %rd5, %r9;
        cvta.shared.u64 %rd6, %rd5;
        st.u32 [%rd6], %r6;
        bar.sync 0;
        xor.b32 %r10, %r1, 31;
        shl.b32 %r11, %r10, 2;
        add.s32 %r12, %r7, %r11;
        ld.shared.u32 %r13, [%r12];
        ld.param.u64 %rd7, [buf];
        mul.wide.u32 %rd8, %r1, 4;
        add.s64 %rd9, %rd7, %rd8;
        isspacep.shared %p1, %rd6;
        selp.u32 %r14, 1000, 0, %p1;
        add.s32 %r15, %r13, %r14;
        st.global.u32 [%rd9], %r15;
        ret;
    """, extra=extra)
    dev = Device()
    fn = dev.load_module(ptx).function("spaces")
    out = dev.alloc(128)
    fn.launch(1, 32, [out], shared_bytes=128)
    got = np.empty(32, np.int32)
    dev.copy_from_device(got, out)
    partner = np.arange(32) ^ 31
    assert_bits_equal(got, np.array([10, 20, 30, 40])[partner & 3] - 2 + 1000, "through every state space")
    with pytest.raises(PtxMemoryError, match="shared"):
        fn.launch(1, 32, [out], shared_bytes=64)  # too little dynamic shared memory for 32 words


def test_scalar_kernel_parameters_by_value():
    ptx = assembled(ptx_kernel("scal", [("out", "u64"), ("x", "f32"), ("k", "u32"), ("d", "s64"), ("h", "b16")], """
        ld.param.u64 %rd1, [out];
        ld.param.f32 %r1, [x];
        ld.param.u32 %r2, [k];
        ld.param.s64 %rd2, [d];
        ld.param.b16 %h1, [h];
        cvt.rn.f32.u32 %r3, %r2;
        mul.rn.f32 %r4, %r1, %r3;
        st.global.f32 [%rd1], %r4;
        st.global.s64 [%rd1+8], %rd2;
        st.global.b16 [%rd1+16], %h1;
        ret;
    """))
    dev = Device()
    fn = dev.load_module(ptx).function("scal")
    assert fn.param_types == ("u64", "f32", "u32", "s64", "b16")
    out = dev.alloc(24)
    fn.launch(1, 1, [out, np.float32(1.5), 7, -3, 0xBEEF])
    raw = dev.read(out, 18)
    assert np.frombuffer(raw[:4], np.float32)[0] == 10.5
    assert np.frombuffer(raw[8:16], np.int64)[0] == -3 and np.frombuffer(raw[16:18], np.uint16)[0] == 0xBEEF
    with pytest.raises(PtxError, match="must be an integer"):
        fn.launch(1, 1, [out, 1.0, 2.5, 0, 0])


INDIRECT = """
.func (.param .b32 r) twice(.param .b32 x)
{
    .reg .b32 %a<3>;
    ld.param.b32 %a1, [x];
    shl.b32 %a2, %a1, 1;
    st.param.b32 [r], %a2;
    ret;
}
.func (.param .b32 r) negate(.param .b32 x)
{
    .reg .b32 %a<3>;
    .reg .pred %q;
    ld.param.b32 %a1, [x];
    setp.eq.s32 %q, %a1, 13;
    @%q exit;
    neg.s32 %a2, %a1;
    st.param.b32 [r], %a2;
    ret;
}
"""


def test_indirect_calls_jump_tables_exit_and_predicated_stores():
    body = """
        mov.u32 %r1, %tid.x;
        ld.param.u64 %rd1, [buf];
        mul.wide.u32 %rd2, %r1, 4;
        add.s64 %rd3, %rd1, %rd2;
        and.b32 %r2, %r1, 1;
        setp.eq.u32 %p1, %r2, 0;
        mov.u64 %rd4, twice;
        mov.u64 %rd5, negate;
        selp.b64 %rd6, %rd4, %rd5, %p1;
        {
        .param .b32 a0;
        .param .b32 r0;
        st.param.b32 [a0], %r1;
        prototype_0 : .callprototype (.param .b32 _) _ (.param .b32 _);
        call (r0), %rd6, (a0), prototype_0;
        ld.param.b32 %r3, [r0];
        }
        rem.u32 %r4, %r1, 3;
        $TARGETS: .branchtargets $T0, $T1, $T2;
        brx.idx %r4, $TARGETS;
        $T0:
        add.s32 %r3, %r3, 100;
        bra.uni $JOIN;
        $T1:
        add.s32 %r3, %r3, 200;
        bra.uni $JOIN;
        $T2:
        add.s32 %r3, %r3, 300;
        $JOIN:
        setp.lt.u32 %p2, %r1, 40;
        @%p2 st.global.u32 [%rd3], %r3;
        ret;
    """
    ptx = assembled(HEADER.format(arch=ARCH) + INDIRECT + ptx_kernel("calls", [("buf", "u64")], body).split("\n", 3)[3])
    (out,) = launch(ptx, "calls", [np.full(48, -1, np.int32)], 1, 48)
    t = np.arange(48)
    value = np.where(t % 2 == 0, 2 * t, -t) + np.array([100, 200, 300])[t % 3]
    expected = np.where(t < 40, value, -1)
    expected[13] = -1  # thread 13 exits inside negate: it stores nothing
    assert_bits_equal(out, expected, "indirect calls, brx.idx, exit in a callee, predicated stores")


def test_warp_ops_in_divergent_code_with_partial_member_masks():
    """Lanes 0..19 take one path and shuffle among themselves (membermask 0xfffff), the
    others another path; activemask and bar.red see exactly the threads executing them."""
    ptx = _simple("partial", """
        mov.u32 %r1, %tid.x;
        and.b32 %r2, %r1, 31;
        ld.param.u64 %rd1, [buf];
        mul.wide.u32 %rd2, %r1, 4;
        add.s64 %rd3, %rd1, %rd2;
        setp.lt.u32 %p1, %r2, 20;
        @!%p1 bra $HIGH;
        shfl.sync.bfly.b32 %r3, %r1, 1, 31, 0xfffff;
        activemask.b32 %r4;
        bra.uni $JOIN;
        $HIGH:
        mul.lo.u32 %r3, %r1, 10;
        activemask.b32 %r4;
        $JOIN:
        setp.ge.u32 %p2, %r1, 48;
        bar.red.popc.u32 %r5, 0, %p2;
        add.s32 %r6, %r3, %r5;
        xor.b32 %r7, %r6, %r4;
        st.global.u32 [%rd3], %r7;
        ret;
    """)
    (out,) = launch(ptx, "partial", [np.zeros(64, np.uint32)], 1, 64)
    t = np.arange(64)
    low = (t % 32) < 20
    r3 = np.where(low, t ^ 1, t * 10)
    r4 = np.where(low, 0xFFFFF, 0xFFFFFFFF ^ 0xFFFFF)
    assert_bits_equal(out, ((r3 + 16) ^ r4).astype(np.uint32), "partial-warp shuffles, activemask, bar.red.popc")


def test_more_atomics_and_reductions():
    ptx = assembled(ptx_kernel("atomics2", [("buf", "u64")], """
        mov.u32 %r1, %tid.x;
        ld.param.u64 %rd1, [buf];
        atom.global.inc.u32 %r2, [%rd1], 9;
        atom.global.dec.u32 %r3, [%rd1+4], 100;
        cvt.u64.u32 %rd2, %r1;
        atom.global.min.u64 %rd3, [%rd1+8], %rd2;
        atom.global.cas.b64 %rd4, [%rd1+16], 0, %rd2;
        red.global.add.f32 [%rd1+24], 0f3F000000;
        red.global.or.b32 [%rd1+28], %r1;
        cvt.rn.f16.f32 %h1, 0f3F800000;
        atom.global.add.noftz.f16 %h2, [%rd1+32], %h1;
        cvt.rn.bf16.f32 %h3, 0f40000000;
        atom.global.add.noftz.bf16 %h4, [%rd1+34], %h3;
        mov.u32 %r4, sm;
        atom.shared.max.s32 %r5, [%r4], %r1;
        bar.sync 0;
        ld.shared.u32 %r6, [%r4];
        setp.eq.u32 %p1, %r1, 0;
        @%p1 st.global.u32 [%rd1+36], %r6;
        ret;
    """, arch="sm_90", extra=".shared .align 4 .b8 sm[4];\n"), "sm_90")
    init = np.zeros(40, np.uint8)
    init[4:8] = np.frombuffer(np.uint32(5).tobytes(), np.uint8)
    init[8:16] = np.frombuffer(np.uint64(2 ** 64 - 1).tobytes(), np.uint8)
    (out,) = launch(ptx, "atomics2", [init], 1, 64)
    raw = out.tobytes()
    u32 = lambda o: np.frombuffer(raw[o:o + 4], np.uint32)[0]
    u64 = lambda o: np.frombuffer(raw[o:o + 8], np.uint64)[0]
    assert u32(0) == 64 % 10  # inc wraps to 0 after 9
    dec = 5
    for _ in range(64):
        dec = 100 if dec == 0 or dec > 100 else dec - 1
    assert u32(4) == dec
    assert u64(8) == 0  # the minimum thread id
    assert u64(16) == 1  # thread 0 swaps 0 for 0, thread 1 still finds 0 and stores 1, then nobody matches
    assert np.frombuffer(raw[24:28], np.float32)[0] == 32.0
    assert u32(28) == 63
    assert np.frombuffer(raw[32:34], np.float16)[0] == 64.0
    assert N.bf16_to_f32(np.frombuffer(raw[34:36], np.uint16))[0] == 128.0
    assert u32(36) == 63


def test_grids_larger_than_one_batch():
    """More threads than the emulator runs at once: blocks run batch after batch."""
    ptx = _simple("big", """
        mov.u32 %r1, %tid.x;
        mov.u32 %r2, %ctaid.x;
        mov.u32 %r3, %ntid.x;
        mad.lo.s32 %r4, %r2, %r3, %r1;
        ld.param.u64 %rd1, [buf];
        mul.wide.u32 %rd2, %r4, 4;
        add.s64 %rd3, %rd1, %rd2;
        mul.lo.u32 %r5, %r4, 3;
        st.global.u32 [%rd3], %r5;
        ret;
    """)
    n = 150 * 256
    (out,) = launch(ptx, "big", [np.zeros(n, np.uint32)], 150, 256)
    assert_bits_equal(out, (np.arange(n) * 3).astype(np.uint32), "40k threads")


def test_vectors_packing_warp_forms_and_debug_directives():
    """Vector loads and stores, register packing, bar.warp.sync, match.all, redux max/and,
    elect.sync, %lanemask_lt -- in a module with .file/.loc directives, block comments and
    performance directives."""
    body = """
        .loc 1 7 3
        mov.u32 %r1, %tid.x;
        ld.param.u64 %rd1, [buf];
        cvta.to.global.u64 %rd1, %rd1;
        mul.wide.u32 %rd2, %r1, 16;
        add.s64 %rd3, %rd1, %rd2;
        ld.global.nc.v4.f32 {%r2, %r3, %r4, %r5}, [%rd3];
        /* swap the halves of each pair */
        mov.b64 %rd4, {%r2, %r3};
        mov.b64 {%r6, %r7}, %rd4;
        cvt.rn.f16.f32 %h1, %r4;
        cvt.rn.f16.f32 %h2, %r5;
        mov.b32 %r8, {%h1, %h2};
        mov.b32 {%h3, %h4}, %r8;
        cvt.f32.f16 %r9, %h4;
        bar.warp.sync -1;
        and.b32 %r10, %r1, 3;
        match.all.sync.b32 %r11|%p1, %r10, -1;
        selp.u32 %r12, 1, 0, %p1;
        redux.sync.max.u32 %r13, %r1, -1;
        redux.sync.and.b32 %r14, %r1, -1;
        elect.sync %r15|%p2, -1;
        selp.u32 %r16, 1, 0, %p2;
        mov.u32 %r17, %lanemask_lt;
        popc.b32 %r18, %r17;
        add.s32 %r19, %r12, %r16;
        add.s32 %r20, %r19, %r18;
        cvt.rn.f32.u32 %r21, %r20;
        cvt.rn.f32.u32 %r22, %r13;
        cvt.rn.f32.u32 %r23, %r14;
        add.rn.f32 %r24, %r22, %r23;
        cvt.rn.f32.u32 %r25, %r15;
        add.rn.f32 %r26, %r24, %r25;
        st.global.v4.f32 [%rd3], {%r7, %r6, %r9, %r21};
        mul.wide.u32 %rd5, %r1, 8;
        add.s64 %rd6, %rd1, %rd5;
        st.global.v2.f32 [%rd6+1024], {%r26, 0f3F800000};
        ret;
    """
    text = ptx_kernel("misc", [("buf", "u64")], body, arch="sm_90")
    text = text.replace(".address_size 64\n", ".address_size 64\n.file 1 \"kernel.py\"\n// a comment\n", 1)
    text = text.replace("\n)\n{", "\n)\n.maxntid 64, 1, 1\n.minnctapersm 1\n{", 1)
    ptx = assembled(text, "sm_90")
    x = np.random.default_rng(5).standard_normal(64 * 4 + 64 * 4).astype(np.float32)
    (out,) = launch(ptx, "misc", [x.copy()], 1, 64)
    v = x[:256].reshape(64, 4)
    got = out[:256].reshape(64, 4)
    assert_bits_equal(got[:, 0], v[:, 1], "v4 load / b64 pack-unpack")
    assert_bits_equal(got[:, 1], v[:, 0], "v4 load / b64 pack-unpack")
    assert_bits_equal(got[:, 2], v[:, 3].astype(np.float16).astype(np.float32), "f16 pack-unpack")
    lane = np.arange(64) % 32
    assert_bits_equal(got[:, 3], (0 + (lane == 0) + lane).astype(np.float32), "match.all / elect / lanemask")
    side = out[256:384].reshape(64, 2)
    assert_bits_equal(side[:, 0], (np.repeat([31, 63], 32) + np.repeat([0, 32], 32)).astype(np.float32),
                      "redux.max + redux.and + elected lane 0")
    assert_bits_equal(side[:, 1], np.ones(64, np.float32), "v2 store of an immediate")


def test_vector_store_and_warp_reductions_values():
    body = """
        mov.u32 %r1, %tid.x;
        ld.param.u64 %rd1, [buf];
        mul.wide.u32 %rd2, %r1, 8;
        add.s64 %rd3, %rd1, %rd2;
        redux.sync.max.u32 %r13, %r1, -1;
        redux.sync.and.b32 %r14, %r1, -1;
        st.global.v2.u32 [%rd3], {%r13, %r14};
        ret;
    """
    ptx = assembled(ptx_kernel("red2", [("buf", "u64")], body), ARCH)
    (out,) = launch(ptx, "red2", [np.zeros(128, np.uint32)], 1, 64)
    pairs = out.reshape(64, 2)
    assert_bits_equal(pairs[:, 0], np.repeat([31, 63], 32), "redux.max")
    assert_bits_equal(pairs[:, 1], np.repeat([0, 32], 32), "redux.and")


def test_local_memory_is_checked():
    ptx = _simple("loc", """
        .local .align 4 .b8 __local_depot0[16];
        .reg .b64 %SPL;
        mov.u64 %SPL, __local_depot0;
        mov.u32 %r1, %tid.x;
        mul.wide.u32 %rd1, %r1, 4;
        add.s64 %rd2, %SPL, %rd1;
        st.local.u32 [%rd2], %r1;
        ret;
    """)
    dev = Device()
    fn = dev.load_module(ptx).function("loc")
    fn.launch(1, 4, [0])
    with pytest.raises(PtxMemoryError, match=r"out-of-bounds local store[\s\S]*thread \(4, 0, 0\)"):
        fn.launch(1, 5, [0])


def test_endless_loop_is_stopped():
    ptx = _simple("forever", """
        $LOOP:
        bra.uni $LOOP;
    """)
    dev = Device(step_limit=1000)
    with pytest.raises(PtxError, match="endless loop"):
        dev.load_module(ptx).function("forever").launch(1, 32, [0])


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


CAS_LOOPS = SREGS + r'''
define ptx_kernel void @casloops(ptr addrspace(1) %p, ptr addrspace(1) %in) {
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ti = zext i32 %t to i64
  %q = getelementptr float, ptr addrspace(1) %in, i64 %ti
  %f = load float, ptr addrspace(1) %q
  %o1 = atomicrmw fmax ptr addrspace(1) %p, float %f monotonic
  %p2 = getelementptr i8, ptr addrspace(1) %p, i64 4
  %o2 = atomicrmw fsub ptr addrspace(1) %p2, float 1.0 monotonic
  %p3 = getelementptr i8, ptr addrspace(1) %p, i64 8
  %h = trunc i32 %t to i16
  %o3 = atomicrmw add ptr addrspace(1) %p3, i16 %h monotonic
  %p4 = getelementptr i8, ptr addrspace(1) %p, i64 13
  %b = trunc i32 %t to i8
  %o4 = atomicrmw xchg ptr addrspace(1) %p4, i8 %b monotonic
  ret void
}
'''


def test_atomics_lowered_to_compare_and_swap_loops():
    """fmax/fsub on f32 and sub-word atomics become CAS loops in which the contending threads
    diverge and win one by one; the neighbouring bytes must be left alone."""
    ptx = compile_ir(CAS_LOOPS)
    assert any(".cas." in f for f in forms_of(ptx))
    x = np.random.default_rng(8).standard_normal(64).astype(np.float32)
    mem = np.zeros(16, np.uint8)
    mem[4:8] = np.frombuffer(np.float32(100).tobytes(), np.uint8)
    mem[10:12] = [0xAB, 0xCD]
    mem[12] = 0x11
    mem[14:16] = [0x22, 0x33]
    out, _ = launch(ptx, "casloops", [mem, x], 1, 64)
    raw = out.tobytes()
    assert np.frombuffer(raw[0:4], np.float32)[0] == max(0.0, x.max())
    assert np.frombuffer(raw[4:8], np.float32)[0] == 36.0
    assert np.frombuffer(raw[8:10], np.uint16)[0] == sum(range(64)) and raw[10:12] == b"\xab\xcd"
    assert raw[13] in range(64) and raw[12] == 0x11 and raw[14:16] == b"\x22\x33"


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
    ptx = _simple("approx", "\n".join(body))
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
