"""The PTX emulator (accy.backends.ptx): PTX executed on the CPU must compute what the
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
from accy.backends.arguments import bind_arguments
from accy.backends.codegen import emit_ptx
from accy.backends.llvm import STATUS_WORDS, Target, status_error, total_lanes
from accy.backends.ptx import (Device, PtxBarrierError, PtxError, PtxMemoryError, instruction_forms,
                               unsupported)
from accy.backends.ptx import numerics as N
from accy.errors import AccyError, OutOfBoundsError
from accy.library.attention import (ScaledDotProduct, Threads3D, reference, scaled_dot_product_f32,
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


def run_like_cuda(program, args, *, fast_exp=False, arch=ARCH, counts=None, dev=None):
    """Run ``program`` on the emulator with cuda.py's marshalling: one device buffer per
    parameter (8 readable bytes when empty), its element count, the 4 x i64 status word
    (zeroed); a non-zero status raises the interpreter's error; outputs are copied back."""
    graph = program.graph
    binding = bind_arguments(graph, args, counts=counts)
    if total_lanes(graph) == 0:
        return
    launch = program.launch()
    ptx = emit_ptx(graph, Target.nvptx(arch, fast_exp=fast_exp), launch.block)  # conftest assembles it
    dev = dev or Device()
    fn = dev.load_module(ptx).function(graph.name)
    names = [p.name for p in graph.params]
    pointers = {}
    for name in names:
        info, array = binding.infos[name], binding.arrays[name]
        pointers[name] = p = dev.alloc(max(info.nbytes, 8))
        if info.nbytes:
            dev.copy_to_device(p, np.ascontiguousarray(array))
    status = dev.alloc(STATUS_WORDS * 8)
    dev.memset(status, 0, STATUS_WORDS * 8)
    assert fn.param_types == ("u64",) * (2 * len(names) + 1)
    fn.launch(launch.grid, launch.block, [pointers[n] for n in names] + [binding.infos[n].size for n in names]
              + [status])
    words = np.zeros(STATUS_WORDS, np.int64)
    dev.copy_from_device(words, status)
    error = status_error(graph, tuple(graph.body.walk()), words, {n: binding.infos[n].size for n in names})
    if error is not None:
        raise error
    for name in sorted(binding.outputs):
        if binding.infos[name].nbytes:
            dev.copy_from_device(binding.arrays[name], pointers[name])


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
    spec = ScaledDotProduct(2, 5, 7, 3, 4, threads=Threads3D(4, 2, 1), causal=causal)
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
        assert err.max() <= ulps + 0.5, f"__nv_{name}: {err.max():.2f} ulp at x={x[err.argmax()]!r}"
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
