"""The interpreter's hot path keeps the reference semantics: the plain NumPy functions it calls
for operands wider than f16/bf16 compute what the op table's rounding wrappers compute, and a
vectorised fold that combines in place gives the bits of a plain loop (every dtype a fold
reduces, narrow floats through their f32 detour, integers wrapping, chunked or not)."""

from __future__ import annotations

import numpy as np
import pytest

from accy import axis, dynamic_buffer, index, kernel, scalar
from accy.runtime.interpreter import simt as interpreter
from accy.runtime.interpreter import numerics
from accy.runtime.arguments import bind_arguments
from accy.dsl.ops import OPS
from accy.dsl.types import DTYPES


def _bits(x):
    x = np.asarray(x)
    return x.view(f"u{x.dtype.itemsize}") if x.dtype.kind in "fV" else x


def _samples(t, rng, n=257):
    if t.is_float:
        values = np.concatenate([rng.standard_normal(n - 9) * 100,
                                 [0.0, -0.0, 0.5, -1.5, 2.5, np.inf, -np.inf, np.nan, 1e30]])
        with np.errstate(over="ignore"):
            return values.astype(t.numpy)
    info = np.iinfo(t.numpy)
    return rng.integers(info.min, info.max, n, dtype=t.numpy, endpoint=True)


WIDE_ENTRIES = [(name, fn) for name, fn in interpreter.EVAL.items() if fn in interpreter.WIDE]


def test_the_fast_path_covers_the_rounding_wrappers():
    assert {name for name, _ in WIDE_ENTRIES} >= {"add", "sub", "mul", "div", "floor", "round"}


@pytest.mark.parametrize("name, entry", WIDE_ENTRIES, ids=[name for name, _ in WIDE_ENTRIES])
def test_the_plain_function_computes_what_the_op_table_does_for_every_wide_dtype(name, entry):
    rng = np.random.default_rng(7)
    plain = interpreter.WIDE[entry]
    checked = 0
    for t in DTYPES.values():
        if t.is_bool or numerics._narrow(t.numpy) or (not t.is_float and name not in ("add", "sub", "mul")):
            continue
        operands = [_samples(t, rng) for _ in range(OPS[name].arity)]
        with np.errstate(all="ignore"):
            for args in (operands, [a[3] for a in operands]):  # arrays, and NumPy scalars as the env holds
                expected, got = entry(*args), plain(*args)
                assert np.asarray(got).dtype == np.asarray(expected).dtype, (name, t)
                np.testing.assert_array_equal(_bits(got), _bits(expected), err_msg=f"{name} on {t}")
        checked += 1
    assert checked


REDUCTIONS = {
    "add": lambda inner, acc, v: acc + v,
    "mul": lambda inner, acc, v: acc * v,
    "max": lambda inner, acc, v: inner.max(acc, v),
    "min": lambda inner, acc, v: inner.min(acc, v),
    "and": lambda inner, acc, v: acc & v,
    "or": lambda inner, acc, v: acc | v,
    "xor": lambda inner, acc, v: acc ^ v,
}
CASES = [(op, t) for op in REDUCTIONS for t in ("f16", "bf16", "f32", "f64", "i8", "u16", "i64")
         if op in ("add", "mul", "max", "min") or not DTYPES[t].is_float]


def _fold_program(t, combine):
    @kernel(dst=dynamic_buffer(t), x=dynamic_buffer(t), n=scalar(index))
    def fold(k, a):
        @k.for_each_1d(axis("i", a.dst.size))
        def each(inner, idx):
            i = idx["i"]
            a.dst[i] = inner.fold_range(1, a.n, 1, a.x[i * a.n],
                                        lambda inner, j, acc: combine(inner, acc, a.x[i * a.n + j]))

    return fold


@pytest.mark.parametrize("op, dtype", CASES, ids=[f"{op}-{t}" for op, t in CASES])
def test_a_vectorised_fold_gives_the_bits_of_a_plain_loop(op, dtype):
    t = DTYPES[dtype]
    program = _fold_program(t, REDUCTIONS[op])
    rows, n = 37, 300
    rng = np.random.default_rng(3)
    x = _samples(t, rng, rows * n)
    if t.is_float:  # products of values near 1, so that they stay finite and keep rounding
        x = (1 + x.astype(np.float64) / 1e4).astype(t.numpy) if op == "mul" else x
    graph = program.graph
    (fold_op,) = [op_ for op_ in graph.body.walk() if op_.opcode == "fold"]
    assert interpreter.schedule_of(graph).plans[fold_op].combines is not None, "the fold must be vectorised"
    args = [np.zeros(rows, t.numpy), x, n]
    binding = bind_arguments(graph, args)
    extents = program.launch(args=args).extents
    results = {}
    for label, options in (("plain", dict(plain=True)), ("vectorised", {}),
                           ("chunked", dict(memory_cap=4096))):  # a few iterations per chunk
        scratch = binding.scratch()
        interpreter.Interpreter(graph, scratch, binding.scalars, extents, **options).run()
        results[label] = scratch["dst"]
    for label in ("vectorised", "chunked"):
        np.testing.assert_array_equal(_bits(results[label]), _bits(results["plain"]), err_msg=f"{op} {t} {label}")
