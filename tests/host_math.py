"""vecmath's routines JIT-compiled on their own, as NumPy functions: what the llvm host
backend computes for each math function (test_vecmath measures them; the fuzzer makes the
interpreter compute them, so that the two backends must agree bit for bit)."""

from __future__ import annotations

import ctypes
import functools

import llvmlite.ir as ir
import numpy as np

from accy.codegen.host import vecmath
from accy.codegen.machine import jit_host_module

NP = {"f32": np.float32, "f64": np.float64}


def compile_routine(name: str, dtype: str, width: int):
    """A function mapping arrays through vecmath's ``name`` at ``width`` lanes."""
    arity = vecmath.arity(name)
    el = ir.FloatType() if dtype == "f32" else ir.DoubleType()
    vty = ir.VectorType(el, width) if width > 1 else el
    module = ir.Module(name=f"vm_{name}_{dtype}_{width}")
    i64 = ir.IntType(64)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType()] * (arity + 1) + [i64]),
                     name="kernel")
    entry, loop, done = (fn.append_basic_block(s) for s in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed("<=", fn.args[-1], i64(0)), done, loop)
    b.position_at_end(loop)
    i = b.phi(i64)
    i.add_incoming(i64(0), entry)
    align = 4 if dtype == "f32" else 8
    values = []
    for a in fn.args[:arity]:
        v = b.load(b.gep(a, [i], source_etype=el), typ=vty)
        v.align = align
        values.append(v)
    store = b.store(vecmath.emit(b, name, values), b.gep(fn.args[arity], [i], source_etype=el))
    store.align = align
    nxt = b.add(i, i64(width))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, fn.args[-1]), loop, done)
    b.position_at_end(done)
    b.ret_void()

    engine = jit_host_module(str(module))  # host CPU, O3: as the llvm backend compiles
    cfn = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * (arity + 1) + [ctypes.c_int64]))(
        engine.get_function_address("kernel"))
    npdt = NP[dtype]

    def run(*xs):
        xs = [np.asarray(x, npdt).ravel() for x in xs]
        n = len(xs[0])
        pad = (-n) % width
        xs = [np.ascontiguousarray(np.concatenate([x, np.ones(pad, npdt)])) for x in xs]
        out = np.empty(n + pad, npdt)
        cfn(*[x.ctypes.data for x in xs], out.ctypes.data, n + pad)
        return out[:n]

    run.engine = engine  # keeps the machine code alive
    return run


kernel = functools.cache(compile_routine)


def interpreter_op(name: str):
    """The interpreter's op ``name`` computed as the llvm host does: vecmath's routine for f32
    and f64; f16 and bf16 widened to f32 (exactly) and rounded back once."""

    def op(*xs):
        xs = [np.asarray(x) for x in xs]
        dtype = xs[0].dtype
        wide = "f64" if dtype == np.float64 else "f32"
        shape = np.broadcast_shapes(*(x.shape for x in xs))
        flat = [np.broadcast_to(x.astype(NP[wide]), shape).ravel() for x in xs]
        out = kernel(name, wide, 8)(*flat).reshape(shape).astype(dtype)
        return out[()] if out.ndim == 0 else out

    op.__name__ = f"host_{name}"
    return op
