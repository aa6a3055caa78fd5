"""What the PTX emulator's tests share (tests/test_emulator_*.py): PTX from LLVM IR through
llvmlite's NVPTX target (libdevice linked where used) and hand-written PTX, both checked by
ptxas; launching on the emulator's Device; bit-exact comparison; the float inputs and
reference helpers of the numerics tests; the libdevice functions and their documented bounds."""

from __future__ import annotations

import functools
import math
import re

import numpy as np
import pytest

from accy.codegen.nvptx import toolchain
from accy.emulator import Device, instruction_forms
from accy.emulator import numerics as N


NEEDS_PTXAS = pytest.mark.skipif(toolchain.find_ptxas() is None,
                                 reason="no ptxas: pip install nvidia-cuda-nvcc")

ARCH = "sm_80"


@functools.cache
def assembled(ptx: str, arch: str = ARCH) -> str:
    """``ptx``, after checking that ptxas accepts it (every PTX a test runs must)."""
    toolchain.assemble(ptx, arch)
    return ptx


# -- LLVM IR compiled with llvmlite's NVPTX target --------------------------------------------------------

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

    from accy.codegen import machine as codegen

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


def launch(ptx, name, arrays, grid, block, extra=(), shared_bytes=0, dev=None, schedule=None):
    """Copy ``arrays`` to device buffers, launch ``name`` with their addresses then ``extra``
    (under the warp ``schedule``; None: the device's or ACCY_PTX_SCHEDULE's), and return the
    buffers' contents afterwards."""
    dev = dev or Device()
    fn = dev.load_module(ptx).function(name)
    ptrs = []
    for a in arrays:
        ptrs.append(dev.alloc(max(a.nbytes, 8)))
        dev.copy_to_device(ptrs[-1], a)
    fn.launch(grid, block, ptrs + list(extra), shared_bytes=shared_bytes, schedule=schedule)
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


# float inputs (special values everywhere) and references

def f32_inputs(seed, n=400):
    r = np.random.default_rng(seed)
    x = (r.standard_normal(n) * 10.0 ** r.integers(-5, 6, n)).astype(np.float32)
    bits = r.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x[::5] = bits[::5]  # any bit pattern: subnormals, NaNs with payloads, infinities
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 1e-45, -1e-45, 1.17e-38, 3.4e38,
                        -3.4e38, 0.5, 1.5, 2.5, -2.5, 2 ** 31, -2 ** 31, 2 ** 32, 4e9, -1e10, 16777217.0,
                        1e-40, 7.0], np.float32)
    x[:len(special)] = np.roll(special, seed)
    return x


def sat_int(x, lo, hi):
    return 0 if math.isnan(x) else hi if x >= hi else lo if x <= lo else int(x)


def float_min(x, y, propagate):
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


def f64_inputs(seed, n=400):
    r = np.random.default_rng(seed)
    x = r.standard_normal(n) * 10.0 ** r.integers(-30, 30, n)
    bits = r.integers(0, 2 ** 63, n, dtype=np.int64).astype(np.uint64).view(np.float64)
    x[::7] = np.where(np.isfinite(bits[::7]), bits[::7], 1.0)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 5e-324, 2.2e-308, 1.7e308, -1.7e308, 2.5,
                        -2.5, 2.0 ** 63, -2.0 ** 63, 2.0 ** 64, 1e20, 9007199254740993.0])
    x[:len(special)] = np.roll(special, seed)
    return x


def bf16_value(bits):
    return N.bf16_to_f32(bits).astype(np.float64)


def half_bits(seed, n=500):
    x = np.random.default_rng(seed).integers(0, 2 ** 16, n).astype(np.uint16)
    x[:12] = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 6e-8, 65504, -65504, 0.5, 2049],
                      np.float16).view(np.uint16)
    return x


# libdevice: every function listed in the brief (and a few more), f32 and f64, with its documented bound

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


def libdevice_kernel(fns, ty):
    body, decls = [], []
    for k, (name, (nargs, _, _)) in enumerate(fns.items()):
        decls.append(f"declare {ty} @__nv_{name}({', '.join([ty] * nargs)})")
        body.append(f"%r{k} = call {ty} @__nv_{name}({', '.join(f'{ty} %a{j}' for j in range(nargs))})")
    return elementwise_ir("lib", [ty, ty], [ty] * len(fns), "\n".join(body), "\n".join(decls))


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


# -- hand-written PTX ----------------------------------------------------------------------------------------

HEADER = ".version 8.3\n.target {arch}\n.address_size 64\n"


def ptx_kernel(name, params, body, regs="", arch=ARCH, extra=""):
    decl = ",\n".join(f"  .param .{t} {p}" for p, t in params)
    return (HEADER.format(arch=arch) + extra + f"\n.visible .entry {name}(\n{decl}\n)\n{{\n"
            + "  .reg .pred %p<16>;\n  .reg .b16 %h<64>;\n  .reg .b32 %r<128>;\n  .reg .b64 %rd<64>;\n" + regs
            + "\n".join("  " + line.strip() if not line.strip().endswith(":") else line.strip()
                        for line in body.strip().splitlines()) + "\n}\n")


def simple_kernel(name, body, params=(("buf", "u64"),), extra=""):
    return assembled(ptx_kernel(name, list(params), body, extra=extra))
