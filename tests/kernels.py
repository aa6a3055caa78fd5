"""A suite of DSL kernels with NumPy references, shared by the backend-comparison
and PTX tests.  Each case builds a program for a shape, seeded inputs, and the
expected output computed independently with NumPy."""

from __future__ import annotations

from typing import Callable

import attrs
import numpy as np

from accy import Program, axis, dynamic_buffer, f32, index, schedule


@attrs.frozen
class Case:
    name: str
    shapes: tuple[tuple[int, ...], ...]
    program: Callable[[tuple[int, ...]], Program]
    inputs: Callable[[np.random.Generator, tuple[int, ...]], dict[str, np.ndarray]]
    reference: Callable[..., np.ndarray]  # (shape, **inputs) -> expected dst
    rtol: float = 1e-5
    atol: float = 1e-6


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# -- elementwise: exp, sqrt, select, casts ----------------------------------------------------


def _elementwise(shape):
    (n,) = shape

    def body(k, a):
        def each(inner, idx):
            i = idx["i"]
            x, y = a.x[i], a.y[i]
            magnitude = inner.select(y < 0.0, -y, y)
            odd = inner.cast(i - (i // 2) * 2, f32)  # 1.0 on odd threads
            a.dst[i] = inner.exp(x * 0.5) + inner.sqrt(magnitude) * odd - inner.max(x, y) / 3.0

        k.for_each_1d(axis("i", n), each)

    return Program("elementwise", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32), "y": dynamic_buffer(f32)},
                   body).with_schedule(schedule.thread_blocks(64))


def _elementwise_ref(shape, x, y):
    odd = (np.arange(x.size) % 2).astype(np.float32)
    return np.exp(x * np.float32(0.5)) + np.sqrt(np.abs(y)) * odd - np.maximum(x, y) / np.float32(3)


# -- row softmax: a max and a sum reduction per row ----------------------------------------------


def _softmax(shape):
    rows, cols = shape

    def body(k, a):
        def each(inner, idx):
            r, c = idx["row"], idx["col"]
            base = r * cols
            row_max = inner.fold_range(1, cols, 1, a.x[base], lambda inner, j, m: inner.max(m, a.x[base + j]))
            total = inner.fold_range(0, cols, 1, 0.0, lambda inner, j, s: s + inner.exp(a.x[base + j] - row_max))
            a.dst[base + c] = inner.exp(a.x[base + c] - row_max) / total

        k.for_each_2d(x=axis("col", cols), y=axis("row", rows), body=each)

    return Program("softmax", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}, body).with_schedule(
        schedule.thread_blocks(16, 4))


def _softmax_ref(shape, x):
    x = x.reshape(shape).astype(np.float64)
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


# -- nested folds: a blocked matmul whose inner fold has a ragged last block -----------------------


BLOCK = 4


def _matmul(shape):
    m, n, kk = shape

    def body(k, a):
        def each(inner, idx):
            i, j = idx["i"], idx["j"]

            def block(inner, k0, acc):
                stop = inner.min(k0 + BLOCK, kk)
                return inner.fold_range(k0, stop, 1, acc,
                                        lambda inner, t, acc2: acc2 + a.lhs[i * kk + t] * a.rhs[t * n + j])

            a.dst[i * n + j] = inner.fold_range(0, kk, BLOCK, 0.0, block)

        k.for_each_2d(x=axis("j", n), y=axis("i", m), body=each)

    return Program("matmul", {"dst": dynamic_buffer(f32), "lhs": dynamic_buffer(f32), "rhs": dynamic_buffer(f32)},
                   body).with_schedule(schedule.thread_blocks(8, 8))


def _matmul_ref(shape, lhs, rhs):
    m, n, kk = shape
    return lhs.reshape(m, kk).astype(np.float64) @ rhs.reshape(kk, n).astype(np.float64)


# -- masks via select: causal masked row sums, with a clamp -----------------------------------------


def _causal(shape):
    q, kk = shape

    def body(k, a):
        def each(inner, idx):
            qi = idx["q"]

            def step(inner, ki, acc):
                visible = (ki <= qi) & (a.x[qi * kk + ki] > -1.0)
                return acc + inner.select(visible, inner.min(a.x[qi * kk + ki], 1.5), 0.0)

            a.dst[qi] = inner.fold_range(0, kk, 1, 0.0, step)

        k.for_each_1d(axis("q", q), each)

    return Program("causal", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}, body).with_schedule(
        schedule.thread_blocks(32))


def _causal_ref(shape, x):
    q, kk = shape
    x = x.reshape(shape)
    visible = (np.arange(kk)[None, :] <= np.arange(q)[:, None]) & (x > -1)
    return np.where(visible, np.minimum(x, np.float32(1.5)), 0).sum(1, dtype=np.float64)


# -- 3-D ragged launch with a gather through an index buffer -------------------------------------


def _gather3d(shape):
    nz, ny, nx = shape

    def body(k, a):
        def each(inner, idx):
            x, y, z = idx
            flat = (z * ny + y) * nx + x
            source = a.perm[flat]
            a.dst[flat] = a.src[source] * 2.0 + inner.cast(x * 100 + y * 10 + z, f32)

        k.for_each_3d(x=axis("x", nx), y=axis("y", ny), z=axis("z", nz), body=each)

    return Program("gather3d", {"dst": dynamic_buffer(f32), "src": dynamic_buffer(f32), "perm": dynamic_buffer(index)},
                   body).with_schedule(schedule.thread_blocks(4, 4, 2))


def _gather3d_ref(shape, src, perm):
    nz, ny, nx = shape
    z, y, x = np.meshgrid(np.arange(nz), np.arange(ny), np.arange(nx), indexing="ij")
    return (src[perm] * 2 + (x * 100 + y * 10 + z).reshape(-1)).astype(np.float32)


# -- tuple accumulators: layer norm ---------------------------------------------------------------


def _layernorm(shape):
    rows, cols = shape

    def body(k, a):
        def each(inner, idx):
            r, c = idx["r"], idx["c"]
            base = r * cols

            def moments(inner, j, acc):
                s, ss = acc
                v = a.x[base + j]
                return s + v, ss + v * v

            s, ss = inner.fold_range(0, cols, 1, (0.0, 0.0), moments)
            mean = s / float(cols)
            var = ss / float(cols) - mean * mean
            a.dst[base + c] = (a.x[base + c] - mean) / inner.sqrt(var + 1e-5)

        k.for_each_2d(x=axis("c", cols), y=axis("r", rows), body=each)

    return Program("layernorm", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}, body).with_schedule(
        schedule.thread_blocks(32, 2))


def _layernorm_ref(shape, x):
    x = x.reshape(shape).astype(np.float64)
    return (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)


# -- thread-dependent bounds and negative steps ----------------------------------------------------


def _strided(shape):
    (n,) = shape

    def body(k, a):
        def each(inner, idx):
            i = idx["i"]
            down = inner.fold_range(i, -1, -3, 0.0, lambda inner, j, acc: acc + a.x[j])
            up = inner.fold_range(i, n, 2, 0.0, lambda inner, j, acc: acc + a.x[j] * 0.5)
            a.dst[i] = down - up

        k.for_each_1d(axis("i", n), each)

    return Program("strided", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}, body).with_schedule(
        schedule.thread_blocks(16))


def _strided_ref(shape, x):
    n = x.size
    return np.array([x[i::-3].sum(dtype=np.float64) - 0.5 * x[i::2].sum(dtype=np.float64) for i in range(n)])


CASES = [
    Case("elementwise", ((1,), (37,), (1000,)), _elementwise,
         lambda rng, s: {"x": _f32(rng, *s), "y": _f32(rng, *s)}, _elementwise_ref, rtol=2e-6),
    Case("softmax", ((1, 1), (3, 5), (17, 64)), _softmax,
         lambda rng, s: {"x": _f32(rng, s[0] * s[1]) * 3}, _softmax_ref),
    Case("matmul", ((1, 1, 1), (5, 7, 9), (16, 8, 33)), _matmul,
         lambda rng, s: {"lhs": _f32(rng, s[0] * s[2]), "rhs": _f32(rng, s[2] * s[1])}, _matmul_ref,
         rtol=1e-4, atol=1e-5),
    Case("causal", ((1, 1), (6, 6), (40, 23)), _causal, lambda rng, s: {"x": _f32(rng, s[0] * s[1])}, _causal_ref),
    Case("gather3d", ((1, 1, 1), (3, 5, 7), (2, 9, 6)), _gather3d,
         lambda rng, s: {"src": _f32(rng, int(np.prod(s))), "perm": rng.permutation(int(np.prod(s))).astype(np.int64)},
         _gather3d_ref),
    Case("layernorm", ((1, 2), (4, 33), (3, 128)), _layernorm, lambda rng, s: {"x": _f32(rng, s[0] * s[1]) + 2},
         _layernorm_ref, rtol=1e-4, atol=1e-4),
    Case("strided", ((1,), (10,), (57,)), _strided, lambda rng, s: {"x": _f32(rng, *s)}, _strided_ref, atol=1e-5),
]


def run_case(case: Case, shape, backend: str, seed: int = 0):
    """Run ``case`` at ``shape`` on ``backend``; returns (output, expected)."""
    inputs = case.inputs(np.random.default_rng(seed), shape)
    expected = np.asarray(case.reference(shape, **inputs)).reshape(-1)
    dst = np.full(expected.size, np.nan, np.float32)
    case.program(shape).run({"dst": dst, **inputs}, backend=backend)
    return dst, expected
