"""Speed of accy.codegen.host.vecmath against scalar libm calls and NumPy.

    python -m bench.vecmath [--n 10000000] [--f64] [names...]

For each function: ns per element to map 10^7 float32 values (a) through the
vecmath routine at the host's vector width (16 lanes with AVX-512, else 8),
(b) through the C library per element in a scalar JIT loop (``llvm.exp.f32``
and friends, which LLVM lowers to ``expf`` calls; ``expm1f``, ``log1pf``,
``erff`` and ``tanhf`` called directly), and (c) through NumPy; for the f32
routines computed in float (``vecmath.NATIVE_F32``) also (d) through their double
route ("via f64": each lane widened, as every f32 routine was before).  Each is timed
twice: streaming over the whole array (memory traffic included: 8 bytes per
element), and over a 64 Ki-element block that stays in L2, repeated to the
same element count (the routine's own cost).  Best of five runs.  It is a
script, not a test: nothing asserts a speed.
"""

from __future__ import annotations

import argparse
import ctypes
import time

import llvmlite.binding as llvm
import llvmlite.ir as ir
import numpy as np

from accy.codegen.host import vecmath
from accy.codegen.machine import jit_host_module

# the C function per element for the baseline: an LLVM intrinsic where one exists
LIBM = {"exp": "llvm.exp", "exp2": "llvm.exp2", "expm1": "expm1", "log": "llvm.log", "log2": "llvm.log2",
        "log1p": "log1p", "erf": "erf", "tanh": "tanh", "sin": "llvm.sin", "cos": "llvm.cos",
        "pow": "llvm.pow", "sigmoid": None, "rsqrt": None}


def _numpy(name):
    return {
        "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log2": np.log2, "log1p": np.log1p,
        "tanh": np.tanh, "sin": np.sin, "cos": np.cos, "pow": np.power,
        "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "rsqrt": lambda x: 1 / np.sqrt(x),
    }.get(name)



def host_lanes(dtype: str) -> int:
    wide = "+avx512f" in llvm.get_host_cpu_features().flatten().split(",")
    return (16 if wide else 8) if dtype == "f32" else (8 if wide else 4)


def _libm_call(b, name, el, args):
    """The scalar C-library evaluation of ``name`` on ``args``."""
    suffix = "f" if isinstance(el, ir.FloatType) else ""
    module = b.module

    def call(fname, *xs):
        full = fname + (f".{'f32' if suffix else 'f64'}" if fname.startswith("llvm.") else suffix)
        fn = module.globals.get(full) or ir.Function(module, ir.FunctionType(el, [el] * len(xs)), name=full)
        return b.call(fn, list(xs))

    if name == "sigmoid":
        e = call("llvm.exp", b.fneg(args[0]))
        return b.fdiv(ir.Constant(el, 1.0), b.fadd(ir.Constant(el, 1.0), e))
    if name == "rsqrt":
        return b.fdiv(ir.Constant(el, 1.0), call("llvm.sqrt", args[0]))
    return call(LIBM[name], *args)


def compile_map(name: str, dtype: str, width: int, libm: bool = False, via_f64: bool = False):
    """A JIT function ``run(out, *ins, n)`` over n elements (n a multiple of width);
    ``via_f64``: vecmath's double route for an f32 routine that is computed in float."""
    arity = vecmath.arity(name)
    el = ir.FloatType() if dtype == "f32" else ir.DoubleType()
    vty = ir.VectorType(el, width) if width > 1 else el
    module = ir.Module(name=f"bench_{name}")
    i64 = ir.IntType(64)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType()] * (arity + 1) + [i64]), "kernel")
    entry, loop, done = (fn.append_basic_block(s) for s in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed("<=", fn.args[-1], i64(0)), done, loop)
    b.position_at_end(loop)
    i = b.phi(i64)
    i.add_incoming(i64(0), entry)
    args = []
    for a in fn.args[1:arity + 1]:
        v = b.load(b.gep(a, [i], source_etype=el), typ=vty)
        v.align = 4 if dtype == "f32" else 8
        args.append(v)
    value = _libm_call(b, name, el, args) if libm else vecmath.emit(b, name, args, via_double=via_f64)
    st = b.store(value, b.gep(fn.args[0], [i], source_etype=el))
    st.align = 4 if dtype == "f32" else 8
    nxt = b.add(i, i64(width))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, fn.args[-1]), loop, done)
    b.position_at_end(done)
    b.ret_void()
    engine = jit_host_module(str(module))  # host CPU, O3: as the llvm backend compiles
    cfn = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * (arity + 1) + [ctypes.c_int64]))(
        engine.get_function_address("kernel"))
    cfn.engine = engine
    return cfn


def inputs(name: str, n: int, dtype, rng) -> list[np.ndarray]:
    if name in ("log", "log2", "rsqrt"):
        xs = [np.exp(rng.uniform(-20, 20, n))]
    elif name == "log1p":
        xs = [np.exp(rng.uniform(-20, 5, n)) - 0.5]
    elif name == "pow":
        xs = [np.exp(rng.uniform(-3, 3, n)), rng.uniform(-10, 10, n)]
    elif name in ("sin", "cos"):
        xs = [rng.uniform(-100, 100, n)]
    else:
        xs = [rng.uniform(-10, 10, n)]
    return [x.astype(dtype) for x in xs]


def _best(f, repeat=5) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)


def measure(name: str, dtype: str, n: int, rng) -> dict:
    npdt = np.float32 if dtype == "f32" else np.float64
    lanes = host_lanes(dtype)
    xs = inputs(name, n, npdt, rng)
    out = np.empty(n, npdt)
    block = 65536                    # 512 KiB in and out: stays in L2
    small = [x[:block].copy() for x in xs]
    small_out = np.empty(block, npdt)
    reps = n // block
    res = {}
    variants = [("vecmath", lanes, False, False), ("libm", 1, True, False)]
    if dtype == "f32" and name in vecmath.NATIVE_F32:
        variants.append(("via f64", lanes, False, True))
    for label, width, libm, via_f64 in variants:
        f = compile_map(name, dtype, width, libm, via_f64)
        ptrs = [x.ctypes.data for x in xs]
        sptrs = [x.ctypes.data for x in small]
        res[label] = _best(lambda: f(out.ctypes.data, *ptrs, n)) / n * 1e9

        def cached():
            for _ in range(reps):
                f(small_out.ctypes.data, *sptrs, block)
        res[label + " (cached)"] = _best(cached) / (reps * block) * 1e9
    npf = _numpy(name)
    if npf is not None:
        with np.errstate(all="ignore"):
            res["numpy"] = _best(lambda: npf(*xs)) / n * 1e9
            if isinstance(npf, np.ufunc):
                res["numpy (cached)"] = _best(lambda: [npf(*small, out=small_out) for _ in range(reps)]) / (reps * block) * 1e9
            else:
                res["numpy (cached)"] = _best(lambda: [npf(*small) for _ in range(reps)]) / (reps * block) * 1e9
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", default=list(vecmath.FUNCTIONS))
    p.add_argument("--n", type=int, default=10_000_000)
    p.add_argument("--f64", action="store_true", help="double instead of float")
    a = p.parse_args(argv)
    dtype = "f64" if a.f64 else "f32"
    rng = np.random.default_rng(0)
    cols = ["vecmath", "libm", "numpy", "vecmath (cached)", "libm (cached)", "numpy (cached)"]
    if not a.f64 and set(a.names) & set(vecmath.NATIVE_F32):
        cols += ["via f64", "via f64 (cached)"]
    print(f"{dtype}, {host_lanes(dtype)} lanes, {a.n} elements, ns/element "
          f"(host {llvm.get_host_cpu_name()})")
    print(f"{'':8s}" + "".join(f"{c:>18s}" for c in cols))
    for name in a.names:
        r = measure(name, dtype, a.n, rng)
        print(f"{name:8s}" + "".join(f"{r[c]:18.3f}" if c in r else f"{'-':>18s}" for c in cols), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
