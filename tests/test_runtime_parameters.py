"""Scalars passed at run time, launch extents known only at run time, one compile for every
size, and the Program API around them (kernel decorator, ptx, llvm_ir, launch)."""

from __future__ import annotations

import numpy as np
import pytest

import accy
from accy import Program, axis, dynamic_buffer, f32, index, kernel, scalar
from accy.codegen import machine as codegen
from accy.dsl.types import DTYPES
from accy.errors import ArgumentError, LaunchError, TraceError


def _scale_program(t):
    @kernel(dst=dynamic_buffer(t), x=dynamic_buffer(t), a=scalar(t))
    def scale(k, args):
        @k.for_each_1d(axis("i", args.x.size))
        def each(inner, idx):
            i = idx["i"]
            args.dst[i] = args.x[i] ^ args.a if t.is_bool else args.x[i] * args.a

    return scale


def _sample(t, n=9):
    if t.is_bool:
        return np.arange(n) % 2 == 0
    return (np.arange(n) % 5 + 1).astype(t.numpy)


@pytest.mark.parametrize("t", list(DTYPES.values()), ids=str)
def test_a_scalar_of_every_dtype_as_number_numpy_scalar_and_0d_array(t, backend):
    program = _scale_program(t)
    x = _sample(t)
    value = True if t.is_bool else 3
    expected = x ^ True if t.is_bool else (x * t.numpy.type(3)).astype(t.numpy)
    for given in (value, t.numpy.type(value), np.array(value, t.numpy)):
        dst = np.zeros_like(x)
        program.run([dst, x, given], backend=backend)
        np.testing.assert_array_equal(dst, expected)
    assert program.name == "scale" and [p.name for p in program.graph.scalars] == ["a"]


@pytest.mark.parametrize("dtype, value, message", [
    ("u8", 300, r"argument 'a': 300 does not fit u8 \(0\.\.255\)"),
    ("i8", -129, r"argument 'a': -129 does not fit i8 \(-128\.\.127\)"),
    ("u32", -1, r"argument 'a': -1 does not fit u32"),
    ("i32", 2.5, r"argument 'a': expected an integer \(i32\), got float 2\.5"),
    ("i64", np.float32(2), r"argument 'a': expected an integer \(i64\), got a float32 scalar"),
    ("f16", 1e6, r"argument 'a': 1000000\.0 overflows f16"),
    ("f32", "3", r"argument 'a': expected a number \(f32\), got str"),
    ("bool", 1, r"argument 'a': expected True or False \(bool\), got int 1"),
    ("f32", np.zeros(3, np.float32), r"argument 'a': expected a scalar \(f32\), got an array of shape \(3,\)"),
])
def test_a_bad_scalar_names_the_parameter(dtype, value, message, backend):
    t = DTYPES[dtype]
    program = _scale_program(t)
    x = _sample(t)
    dst = np.zeros_like(x)
    before = dst.copy()
    with pytest.raises(ArgumentError, match=message):
        program.run([dst, x, value], backend=backend)
    np.testing.assert_array_equal(dst, before)


def _vector_add():
    @kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32), y=dynamic_buffer(f32), n=scalar(index))
    def vector_add(k, args):
        @k.for_each_1d(axis("i", args.n))
        def each(inner, idx):
            i = idx["i"]
            args.dst[i] = args.x[i] + args.y[i]

    return vector_add


def test_one_compile_serves_every_size(rng):
    program = _vector_add()
    before = dict(codegen.compilations)
    for n in (1, 7, 256, 1000, 4099):
        x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
        for backend in ("numpy", "llvm"):
            dst = np.zeros(n, np.float32)
            program.run([dst, x, y, n], backend=backend)
            np.testing.assert_array_equal(dst, x + y)
    assert codegen.compilations["host"] - before["host"] == 1
    # the graph and the PTX do not depend on the size either
    assert "4099" not in program.graph.text() and "4099" not in program.ptx()


def test_fewer_threads_than_elements_process_only_their_share():
    program = _vector_add()
    dst = np.full(10, -1.0, np.float32)
    program.run([dst, np.ones(10, np.float32), np.ones(10, np.float32), 4], backend="llvm")
    assert dst.tolist() == [2.0] * 4 + [-1.0] * 6


def test_extents_from_sizes_and_top_level_expressions(backend):
    @kernel(dst=dynamic_buffer(f32), grid=dynamic_buffer(f32), columns=scalar(index))
    def row_sums(k, args):
        rows = args.grid.size // args.columns

        @k.for_each_1d(axis("r", rows))
        def each(inner, idx):
            r = idx["r"]
            args.dst[r] = inner.fold_range(0, args.columns, 1, 0.0,
                                           lambda inner, c, acc: acc + args.grid[r * args.columns + c])

    grid = np.arange(12, dtype=np.float32)
    for columns in (3, 4, 6):
        dst = np.zeros(12 // columns, np.float32)
        row_sums.run([dst, grid, columns], backend=backend)
        np.testing.assert_array_equal(dst, grid.reshape(-1, columns).sum(axis=1))


def test_two_dimensional_runtime_launch(backend, rng):
    @kernel(dst=dynamic_buffer(f32), src=dynamic_buffer(f32), rows=scalar(index), cols=scalar(index))
    def transpose(k, args):
        def each(inner, idx):
            r, c = idx["r"], idx["c"]
            args.dst[c * args.rows + r] = args.src[r * args.cols + c]

        k.for_each_2d(x=axis("c", args.cols), y=axis("r", args.rows), body=each)

    for rows, cols in ((3, 5), (17, 2)):
        src = rng.standard_normal(rows * cols, dtype=np.float32)
        dst = np.zeros_like(src)
        transpose.run([dst, src, rows, cols], backend=backend)
        np.testing.assert_array_equal(dst, src.reshape(rows, cols).T.reshape(-1))


def test_launch_is_sized_and_checked_at_run_time():
    program = _vector_add()
    with pytest.raises(LaunchError, match="computed from run-time values; pass the arguments"):
        program.launch()
    args = [np.zeros(300, np.float32), np.ones(300, np.float32), np.ones(300, np.float32), 300]
    launch = program.launch(args=args)
    assert launch.grid == (2, 1, 1) and launch.block == (256, 1, 1) and launch.extents == (300,)
    tiny = accy.Limits(256, (256, 256, 64), (2, 1, 1))
    program.run(args, limits=tiny)  # 2 blocks fit
    big = [np.zeros(600, np.float32), np.ones(600, np.float32), np.ones(600, np.float32), 600]
    with pytest.raises(LaunchError, match="grid x dimension 3 exceeds the limit of 2 blocks"):
        program.run(big, limits=tiny)


def test_negative_runtime_extent_is_a_launch_error(backend):
    program = _vector_add()
    dst = np.zeros(3, np.float32)
    with pytest.raises(LaunchError, match=r"axis 'i' has extent -2 at run time"):
        program.run([dst, dst.copy(), dst.copy(), -2], backend=backend)


def test_program_ptx_and_llvm_ir_are_public():
    program = _vector_add()
    ptx = program.ptx("sm_90")
    assert ".target sm_90" in ptx and ".entry vector_add(" in ptx
    assert "vector_add_host" in program.llvm_ir() and "ptx_kernel" in program.llvm_ir("nvptx")
    with pytest.raises(TraceError, match="target must be 'host' or 'nvptx'"):
        program.llvm_ir("gpu")


@pytest.mark.parametrize("body, message", [
    (lambda k, a: k.for_each_1d(axis("i", len(a.x)), lambda inner, idx: None),
     r"len\(x\): Python's len\(\) must return an int.*use x\.size"),
    (lambda k, a: k.for_each_1d(axis("i", a.m), lambda inner, idx: None),
     r"axis 'i': extent is i32; launch extents are index"),
    (lambda k, a: k.for_each_1d(axis("i", k.cast(a.x[0], index)), lambda inner, idx: None),
     r"axis 'i': its extent depends on a load from 'x'"),
    (lambda k, a: k.for_each_1d(axis("i", a.x.size * 2.0), lambda inner, idx: None),
     r"axis 'i': extent is f32; launch extents are index"),
])
def test_bad_runtime_extents_are_trace_errors(body, message):
    program = Program("bad", {"x": dynamic_buffer(f32), "m": scalar(accy.i32)}, body)
    with pytest.raises(TraceError, match=message):
        program.graph


def test_kernel_decorator_checks_its_declarations():
    with pytest.raises(TraceError, match=r"parameter 'x': expected dynamic_buffer\(dtype\), buffer\(dtype, n\), "
                                         r"tensor\(dtype, ndim\), scalar\(dtype\) or constexpr\(type\), got 3"):
        kernel(x=3)
    with pytest.raises(TraceError, match="unknown dtype 'f128'"):
        scalar("f128")
