"""The kernels of the GPU check (issue 19 §5) and their launches, with nothing that needs a GPU.

* :func:`tile_matmul`: the tile matmul of ``examples/tile_matmul.py`` for every input type ``t.dot``
  puts on tensor cores (bf16, f16, f32 with ``precision="tf32"``, i8 into i32) and f32 on FMAs;
* :func:`shared_transpose`: a SIMT kernel that transposes 32x32 f32 tiles through shared memory,
  with its barrier or without it (the planted race: a thread reads an element that a thread of
  another warp writes, and nothing orders the two);
* :class:`Case`: one launch (a program and the shapes of its arguments), and the launches the
  benchmark times (:data:`BENCH`) and the profilers count (:data:`SMALL`: the same kernels on a
  few programs, and the transposes).
"""

from __future__ import annotations

import functools
import math

import attrs
import numpy as np

from accy import Program, axis, bf16, cdiv, dynamic_buffer, f8e4m3, f16, f32, i8, i32, kernel, tensor
from accy.dsl.types import DType
from accy.library import ScaledDotProduct, scaled_dot_product_tile

TF32_DROPPED_BITS = 13  # f32 keeps 23 mantissa bits, tf32 10


@functools.cache
def tile_matmul(dtype: DType = bf16, bm: int = 64, bn: int = 64, bk: int = 32, warps: int = 4,
                precision: str = "ieee", stages: int = 2, transposed: bool = False) -> Program:
    """c = a @ b, one bm x bn tile of c per program walking K bk at a time (zeros past the
    edges), accumulated by ``t.dot`` in f32 (i32 for i8 inputs), ``stages`` buffers per operand;
    ``transposed``: b given as (N, K) rows (the layout fp8 GEMMs take, "TN")."""
    acc_type = i32 if dtype == i8 else f32
    name = f"tile_matmul_{dtype.name}{'_tf32' if precision == 'tf32' else ''}_{bm}x{bn}x{bk}w{warps}" \
        + (f"s{stages}" if stages != 2 else "") + ("_tn" if transposed else "")

    @kernel(name, c=tensor(acc_type, 2), a=tensor(dtype, 2), b=tensor(dtype, 2))
    def matmul(k, p):
        M, K = p.a.shape
        N = p.b.shape[0 if transposed else 1]

        @k.for_each_tile(grid=(axis("m", cdiv(M, bm)), axis("n", cdiv(N, bn))), warps=warps, num_stages=stages)
        def body(t, pid):
            def step(t, k0, acc):
                a = p.a.load_tile((pid["m"] * bm, k0), (bm, bk))
                if transposed:
                    b = t.trans(p.b.load_tile((pid["n"] * bn, k0), (bn, bk)))
                else:
                    b = p.b.load_tile((k0, pid["n"] * bn), (bk, bn))
                return t.dot(a, b, acc, precision=precision)

            acc = t.fold_range(0, K, bk, t.zeros((bm, bn), acc_type), step)
            p.c.store_tile((pid["m"] * bm, pid["n"] * bn), acc)

    return matmul


@functools.cache
def shared_transpose(barrier: bool = True, width: int = 32) -> Program:
    """dst = the transpose of each 32x32 f32 tile of x (x.size / 1024 of them, a block each):
    thread (tx, ty) writes row ty of the shared tile (rows ``width`` apart: 32 puts a column in
    one bank, 33 spreads it over all 32), and after the barrier reads column ty.  Without the
    barrier the read of element (tx, ty) races the write of thread (ty, tx), in another warp."""
    name = f"shared_transpose_w{width}{'' if barrier else '_no_barrier'}"

    @kernel(name, dst=dynamic_buffer(f32), x=dynamic_buffer(f32))
    def transpose(k, a):
        @k.for_each_block(grid=axis("b", a.x.size // 1024), threads=(axis("tx", 32), axis("ty", 32)))
        def tile(inner, block, thread):
            t = inner.shared(f32, 32 * width, "tile")
            tx, ty, base = thread["tx"], thread["ty"], block["b"] * 1024
            t[ty * width + tx] = a.x[base + ty * 32 + tx]
            if barrier:
                inner.barrier()
            a.dst[base + ty * 32 + tx] = t[tx * width + ty]

    return transpose


def round_to_tf32(x: np.ndarray) -> np.ndarray:
    """f32 values rounded to tf32's 10 mantissa bits, to nearest with ties away from zero
    (``cvt.rna.tf32.f32``), as f32."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    half = np.uint32(1 << (TF32_DROPPED_BITS - 1))
    return ((bits + half) & ~np.uint32((1 << TF32_DROPPED_BITS) - 1)).view(np.float32)


def random_array(shape, dtype: DType, rng: np.random.Generator, *, tf32: bool = False) -> np.ndarray:
    """Random inputs of ``dtype``: integers over i8's whole range, else standard normal values
    rounded to the type (and to tf32 with ``tf32``: exact inputs, whatever rounding a backend
    applies to them)."""
    if dtype == i8:
        return rng.integers(-128, 128, shape).astype(np.int8)
    values = rng.standard_normal(shape).astype(np.float32)
    return (round_to_tf32(values) if tf32 else values).astype(dtype.numpy)


@attrs.frozen
class Case:
    """One launch: ``program`` on arguments of ``shapes`` (each (shape, accy dtype), the
    program's parameters in order, the outputs first), doing ``flops`` useful flops."""

    key: str
    kind: str  # "matmul", "attention" or "transpose"
    program: Program
    shapes: tuple
    flops: int
    what: str  # a line for the log
    counting: bool = False  # inputs 0, 1, 2, ... (every element distinct) rather than random

    def arguments(self, *, seed: int = 0, zeros: bool = False) -> list[np.ndarray]:
        """Host arrays: zeros for the output (the first argument) and, with ``zeros``, for the
        inputs too (the profile's counts do not depend on the data), else inputs of each type."""
        rng = np.random.default_rng(seed)
        arrays = [np.zeros(self.shapes[0][0], self.shapes[0][1].numpy)]
        for shape, dtype in self.shapes[1:]:
            if zeros:
                arrays.append(np.zeros(shape, dtype.numpy))
            elif self.counting:
                arrays.append(np.arange(math.prod(shape)).astype(dtype.numpy).reshape(shape))
            else:
                arrays.append(random_array(shape, dtype, rng))
        return arrays


def matmul_case(bm: int, bn: int, bk: int, warps: int, m: int, n: int, k: int, dtype: DType = bf16,
                stages: int = 2, transposed: bool = False, suffix: str = "") -> Case:
    program = tile_matmul(dtype, bm, bn, bk, warps, stages=stages, transposed=transposed)
    acc = i32 if dtype == i8 else f32
    staged = f"s{stages}" if stages != 2 else ""
    b_shape = (n, k) if transposed else (k, n)
    return Case(f"matmul-{dtype.name}-{bm}x{bn}x{bk}w{warps}{staged}{'-tn' if transposed else ''}{suffix}", "matmul",
                program, (((m, n), acc), ((m, k), dtype), (b_shape, dtype)),
                2 * m * n * k, f"tile matmul {dtype} {m}x{k} @ {k}x{n}{' (b as n x k)' if transposed else ''}, "
                               f"{bm}x{bn}x{bk} tiles on {warps} warps, {stages} stages")


def attention_case(spec: ScaledDotProduct, dtype: DType = bf16, suffix: str = "") -> Case:
    b, q, k, h, v = spec.batch, spec.queries, spec.keys, spec.qk, spec.value
    entry = scaled_dot_product_tile(spec, dtype)
    pairs = q * k if not spec.causal else sum(min(i + 1, k) for i in range(q))  # (query, key) pairs scored
    return Case(f"attention-{dtype.name}-h{h}{'-causal' if spec.causal else ''}{suffix}", "attention", entry.program,
                (((b, q, v), dtype), ((b, q, h), dtype), ((b, k, h), dtype), ((b, k, v), dtype)),
                2 * b * pairs * (h + v), f"tile attention {dtype} (b,q,k,h,v) = {spec.shape_text.replace('x', ',')}")


def transpose_case(barrier: bool, width: int, blocks: int = 2) -> Case:
    n = 1024 * blocks
    key = f"transpose-w{width}" + ("" if barrier else "-no-barrier")
    return Case(key, "transpose", shared_transpose(barrier, width), (((n,), f32), ((n,), f32)), 0,
                f"shared-memory transpose, tile rows {width} apart, {'with' if barrier else 'WITHOUT'} its barrier",
                counting=True)


def _by_key(cases) -> dict[str, Case]:
    return {c.key: c for c in cases}


GPU_BENCH_TOKENS = 4096
# the benchmark (issue 19 §4-5): the bf16 tile matmul at 4096^3 at its GPU tile sizes, and flash
# attention in bf16, B*H = 16, 4096 tokens, head dimension 64 and 128
BENCH = _by_key([
    # the examples' default on GPUs (issue 32): 105 KiB of dynamic shared memory, past the 48 KiB a
    # launch gets without the driver's opt-in, which the cuda backend makes
    matmul_case(128, 128, 64, 8, 4096, 4096, 4096, stages=3),
    matmul_case(128, 128, 32, 8, 4096, 4096, 4096),
    matmul_case(64, 64, 32, 4, 4096, 4096, 4096),
    attention_case(ScaledDotProduct(16, GPU_BENCH_TOKENS, GPU_BENCH_TOKENS, 64, 64)),
    attention_case(ScaledDotProduct(16, GPU_BENCH_TOKENS, GPU_BENCH_TOKENS, 128, 128)),
])
HOPPER_TOKENS = 8192
# issue 35's jobs on Hopper's asynchronous machinery (TMA, warp roles): bf16 and fp8 e4m3 matmuls
# at 8192^3 on two consumer warpgroups (bf16 on 128x256 tiles; fp8, its B as n x k rows, on
# 128x128: its promoted partial sums double the accumulators, which spill at 128x256), attention
# at head dimension 128, B*H = 16, 8192 tokens
HOPPER = _by_key([
    matmul_case(128, 256, 64, 8, 8192, 8192, 8192, stages=4, suffix="-8192"),
    matmul_case(128, 128, 128, 8, 8192, 8192, 8192, f8e4m3, stages=4, transposed=True, suffix="-8192"),
    attention_case(ScaledDotProduct(16, HOPPER_TOKENS, HOPPER_TOKENS, 128, 128), suffix="-8192"),
])
# the same kernels on a few programs (Nsight Compute and racecheck are slow; the emulator counts
# them whole), and the transposes: padded, unpadded (31 bank conflicts a column read) and racy
SMALL = _by_key([
    matmul_case(128, 128, 64, 8, 256, 256, 128, stages=3),
    matmul_case(128, 128, 32, 8, 256, 256, 128),
    matmul_case(64, 64, 32, 4, 128, 128, 128),
    attention_case(ScaledDotProduct(1, 128, 128, 64, 64)),
    attention_case(ScaledDotProduct(1, 128, 128, 128, 128)),
    transpose_case(True, 33),
    transpose_case(True, 32),
    transpose_case(False, 32),
])
RACY = frozenset({"transpose-w32-no-barrier"})  # the cases with a planted race
