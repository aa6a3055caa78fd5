"""N-d tensor parameters (issue 18 §1): ``accy.tensor(dtype, ndim)`` takes any layout
NumPy slicing, transposing and broadcasting make, one compile for every shape and
layout, with per-dimension bounds checks and the argument checks of outputs."""

from __future__ import annotations

import numpy as np
import pytest

import accy
from accy import axis, dynamic_buffer, f32, i32, index, kernel, scalar, tensor
from accy.runtime import bind_arguments
from accy.runtime.tensor_arguments import DeviceSpan, expand_tensor_arguments
from accy.dsl.tensors import TensorHandle, TensorParams, TensorSpec
from accy.errors import ArgumentError, OutOfBoundsError, TraceError, UnwrittenOutputError


@kernel(dst=tensor(f32, 2), src=tensor(f32, 2), a=scalar(f32))
def scale2d(k, p):
    m, n = p.dst.shape

    def each(inner, ij):
        i, j = ij["i"], ij["j"]
        p.dst[i, j] = p.src[i, j] * p.a

    k.for_each_2d(x=axis("j", n), y=axis("i", m), body=each)


@kernel(dst=tensor(f32, 2), src=tensor(f32, 2), m=scalar(index), n=scalar(index), di=scalar(index),
        dj=scalar(index), si=scalar(index), sj=scalar(index))
def shift2d(k, p):
    """dst[i + di, j + dj] = src[i + si, j + sj] over an m x n launch: offsets push an index
    out of one dimension."""
    def each(inner, ij):
        i, j = ij["i"], ij["j"]
        p.dst[i + p.di, j + p.dj] = p.src[i + p.si, j + p.sj]

    k.for_each_2d(x=axis("j", p.n), y=axis("i", p.m), body=each)


def _copy_nd(ndim: int):
    """dst = src + 1 for tensors of ``ndim`` dimensions: one thread per element, its index
    tuple unravelled from the thread's number by the shape."""
    @kernel(f"copy{ndim}d", dst=tensor(f32, ndim), src=tensor(f32, ndim))
    def copy(k, p):
        def each(inner, idx):
            rest, indices = idx["e"], []
            for extent in reversed(p.dst.shape):
                indices.insert(0, rest % extent)
                rest = rest // extent
            p.dst[tuple(indices)] = p.src[tuple(indices)] + 1.0

        k.for_each_1d(axis("e", p.dst.size), body=each)

    return copy


COPY = {n: _copy_nd(n) for n in (1, 3, 4)}

A = np.arange(24, dtype=np.float32).reshape(4, 6) - 7.5  # every element differs


SOURCES = {
    "C": lambda: A.copy(),
    "F": lambda: np.asfortranarray(A),
    "transposed": lambda: np.ascontiguousarray(A.T).T,
    "steps": lambda: np.arange(8 * 12, dtype=np.float32).reshape(8, 12)[::2, 1::3],
    "negative": lambda: A[::-1],
    "negative-both": lambda: A[::-2, ::-1],
    "broadcast": lambda: np.broadcast_to(A[1], (4, 6)),
    "broadcast-column": lambda: np.broadcast_to(A[:, :1], (4, 6)),
}


@pytest.mark.parametrize("layout", SOURCES)
def test_scale_reads_every_input_layout(layout, backend):
    src = SOURCES[layout]()
    dst = np.full(src.shape, np.nan, np.float32)
    scale2d.run([dst, src, 3.0], backend=backend)
    np.testing.assert_array_equal(dst, src * np.float32(3))


OUTPUTS = {  # the caller's memory and the view of it the kernel writes
    "F": (lambda: np.full((4, 6), np.nan, np.float32, order="F"), lambda m: m),
    "steps": (lambda: np.full((9, 18), -1.0, np.float32), lambda m: m[1::2, ::-3]),
    "transposed": (lambda: np.full((6, 4), -1.0, np.float32), lambda m: m.T),
}


@pytest.mark.parametrize("layout", OUTPUTS)
def test_scale_writes_every_output_layout_and_nothing_between(layout, backend):
    make, view = OUTPUTS[layout]
    memory = make()
    before, dst = memory.copy(), view(memory)
    src = A[: dst.shape[0], : dst.shape[1]]
    scale2d.run({"src": src, "dst": dst, "a": -2.0}, backend=backend)
    np.testing.assert_array_equal(dst, src * np.float32(-2))
    written = np.zeros(memory.shape, bool)
    view(written)[...] = True
    np.testing.assert_array_equal(memory[~written], before[~written])  # the gaps untouched


@pytest.mark.parametrize("ndim", sorted(COPY))
def test_copy_of_1_3_and_4_dimensions(ndim, backend):
    shape = {1: (7,), 3: (2, 3, 4), 4: (2, 1, 3, 2)}[ndim]
    base = np.arange(np.prod(shape) * 2, dtype=np.float32)
    src = base[::2].reshape(shape)
    if ndim > 1:
        src = src.transpose(tuple(reversed(range(ndim))))[::-1]  # transposed and reversed
    dst = np.zeros(src.shape, np.float32)
    COPY[ndim].run([dst, src], backend=backend)
    np.testing.assert_array_equal(dst, src + 1)


@pytest.mark.parametrize("shape", [(0, 6), (4, 0), (0, 0)])
def test_empty_tensors_run_and_write_nothing(shape, backend):
    src = np.zeros(shape, np.float32)
    dst = np.asfortranarray(np.zeros(shape, np.float32))
    scale2d.run([dst, src, 2.0], backend=backend)
    COPY[3].run([np.zeros((2, 0, 3), np.float32), np.ones((2, 0, 3), np.float32)], backend=backend)


def test_one_trace_and_one_compile_serve_every_layout(backend):
    graph = scale2d.graph
    for layout in ("C", "F", "steps", "negative"):
        src = SOURCES[layout]()
        dst = np.zeros(src.shape, np.float32)
        scale2d.run([dst, src, 1.0], backend=backend)
        np.testing.assert_array_equal(dst, src)
    assert scale2d.graph is graph and scale2d.traced_graph is scale2d.traced_graph


def test_the_hidden_scalars_follow_each_tensor_in_parameter_order():
    names = [p.name for p in scale2d.parameters]
    assert names == ["dst", "dst__shape0", "dst__shape1", "dst__stride0", "dst__stride1", "dst__offset",
                     "src", "src__shape0", "src__shape1", "src__stride0", "src__stride1", "src__offset", "a"]
    assert all(p.is_scalar and p.dtype == index for p in scale2d.parameters if "__" in p.name)
    assert scale2d.tensors == (TensorParams("dst", f32, 2), TensorParams("src", f32, 2))
    parsed = accy.parse(scale2d.graph.text())
    from accy.dsl.tensors import tensor_parameters
    assert tensor_parameters(parsed.params) == scale2d.tensors  # the text form keeps them


def test_the_expanded_arguments_are_the_span_and_its_layout():
    memory = np.arange(30, dtype=np.float32).reshape(5, 6)
    view = memory[::-2, 1::2]  # rows 4, 2, 0; columns 1, 3, 5
    span, *hidden, a = expand_tensor_arguments(scale2d.graph, [np.zeros((3, 3), np.float32), view, 1.0])[6:]
    assert hidden == [3, 3, -12, 2, 24] and a == 1.0
    np.testing.assert_array_equal(span, np.arange(1, 30, dtype=np.float32))  # lowest to highest element
    assert np.shares_memory(span, memory)


# -- bounds: per dimension, on every backend, nothing written -------------------------------


@pytest.mark.parametrize("case, message", [
    (dict(m=1, n=1, si=0, sj=4), r"load from tensor 'src': the index in dimension 1 is outside its shape"),
    (dict(m=1, n=1, si=4, sj=0), r"load from tensor 'src': the index in dimension 0 is outside its shape"),
    (dict(m=1, n=1, si=-1, sj=2), r"load from tensor 'src': the index in dimension 0 is outside its shape"),
    (dict(m=4, n=4, dj=1), r"store to tensor 'dst': the index in dimension 1 is outside its shape"),
    (dict(m=4, n=4, di=-1), r"store to tensor 'dst': the index in dimension 0 is outside its shape"),
])
def test_an_index_outside_one_dimension_raises_even_inside_the_span(case, message, backend):
    src = np.arange(16, dtype=np.float32).reshape(4, 4)  # src[0, 4] would be flat 4: inside the span
    memory = np.full((8, 4), 7.0, np.float32)
    dst = memory[::2]  # a strided output: neither its elements nor its gaps may change
    args = dict(m=0, n=0, di=0, dj=0, si=0, sj=0) | case
    with pytest.raises(OutOfBoundsError, match=message + r" \(thread j=\d+ i=\d+\) at .*test_tensors.py"):
        shift2d.run({"dst": dst, "src": src, **args}, backend=backend)
    assert (memory == 7.0).all()


def test_an_unwritten_tensor_output_is_named_by_its_indices():
    dst, src = np.zeros((2, 3), np.float32), np.ones((2, 3), np.float32)
    with pytest.raises(UnwrittenOutputError, match=r"output tensor 'dst': 2 of 6 elements were never written "
                                                   r"\(dst\[0, 2\], dst\[1, 2\]\)"):
        shift2d.run(dict(dst=dst, src=src, m=2, n=2, di=0, dj=0, si=0, sj=0), backend="numpy", check_memory=True)
    assert (dst == 0).all()


# -- argument checks ------------------------------------------------------------------------


def _writable_broadcast():
    base = np.zeros(6, np.float32)
    return np.lib.stride_tricks.as_strided(base, (4, 6), (0, 4))


def _self_overlapping():
    base = np.zeros(16, np.float32)
    return np.lib.stride_tricks.as_strided(base, (4, 6), (8, 4))  # row r starts 2 elements after r-1


@pytest.mark.parametrize("dst, src, message", [
    (lambda: np.zeros((4, 6, 1), np.float32), lambda: A,
     r"argument 'dst': expected a 2-d array \(tensor\(f32, 2\)\), got a 3-d array of shape \(4, 6, 1\)"),
    (lambda: np.zeros((4, 6), np.float32), lambda: A.ravel(),
     r"argument 'src': expected a 2-d array \(tensor\(f32, 2\)\), got a 1-d array of shape \(24,\)"),
    (lambda: np.zeros((4, 6), np.float32), lambda: A.astype(np.float64),
     r"argument 'src': expected dtype float32 \(f32\), got float64 \(f64\)"),
    (lambda: np.zeros((4, 6), np.float32), lambda: 3.0,
     r"argument 'src': expected a 2-d array of f32, got the scalar 3\.0"),
    (_writable_broadcast, lambda: A,
     r"argument 'dst': the kernel stores to this tensor, but dimension 0 has stride 0 .*strides \(0, 1\)"),
    (lambda: np.broadcast_to(np.zeros(6, np.float32), (4, 6)), lambda: A,
     r"argument 'dst': the kernel stores to this tensor, but dimension 0 has stride 0"),
    (_self_overlapping, lambda: A,
     r"argument 'dst': the kernel stores to this tensor, but dimension 0's stride 2 is within the 6 elements "
     r"the dimensions of smaller stride span, so two indices may name one element"),
    (lambda: np.zeros((4, 6), np.float32)[::-1].T.T, lambda: np.zeros((4, 6), np.float32)[::-1],
     None),  # negative strides are fine for an output
])
def test_bad_tensor_arguments_are_named(dst, src, message, backend):
    dst, src = dst(), src()
    before = np.array(dst, copy=True)
    if message is None:
        scale2d.run([dst, src, 1.0], backend=backend)
        return
    with pytest.raises(ArgumentError, match=message):
        scale2d.run([dst, src, 1.0], backend=backend)
    np.testing.assert_array_equal(dst, before)


def test_an_output_sharing_memory_with_an_input_is_refused():
    memory = np.zeros((4, 12), np.float32)
    with pytest.raises(ArgumentError, match=r"argument 'dst' shares memory with argument 'src'"):
        scale2d.run([memory[:, :6], memory[:, 6:], 1.0])
    assert (memory == 0).all()


def test_a_read_only_output_is_refused():
    dst = np.zeros((4, 6), np.float32)
    dst.flags.writeable = False
    with pytest.raises(ArgumentError, match=r"argument 'dst' is read-only, but the kernel stores to it"):
        scale2d.run([dst, A, 1.0])


def test_arguments_by_name_and_count_name_the_declared_parameters():
    with pytest.raises(ArgumentError, match=r"expected 3 arguments \(dst, src, a\), got 2"):
        scale2d.run([np.zeros((4, 6), np.float32), A])
    with pytest.raises(ArgumentError, match=r"missing 'a'; unknown 'src__offset'; parameters are \(dst, src, a\)"):
        scale2d.run({"dst": np.zeros((4, 6), np.float32), "src": A, "src__offset": 0})


def test_a_layout_past_its_span_is_refused_by_the_binding():
    args = expand_tensor_arguments(scale2d.graph, [np.zeros((4, 6), np.float32), A, 1.0])
    args[11] = 1  # src__offset: the last element would be past the span
    with pytest.raises(ArgumentError, match=r"tensor 'src': shape \(4, 6\), strides \(6, 1\) and offset 1 reach "
                                            r"past its span of 24 elements"):
        bind_arguments(scale2d.graph, args)


class FakeDeviceArray:
    """A device array as far as argument description goes: __cuda_array_interface__ only."""

    def __init__(self, shape, strides, address=1 << 20, typestr="<f4", read_only=False):
        self.__cuda_array_interface__ = {"shape": shape, "strides": strides, "typestr": typestr,
                                         "data": (address, read_only), "version": 3}


def test_a_device_tensor_becomes_a_1d_device_span():
    from accy.runtime.cuda import device_info

    src = FakeDeviceArray((4, 6), (-24, 4), address=10_000)  # rows reversed: row 3 lowest
    dst = FakeDeviceArray((4, 6), None, address=50_000)
    args = expand_tensor_arguments(scale2d.graph, [dst, src, 1.0])
    span = args[6]
    assert isinstance(span, DeviceSpan) and span.base is src
    assert span.__cuda_array_interface__ == {"shape": (24,), "typestr": "<f4", "data": (10_000 - 72, False),
                                             "strides": None, "version": 3}
    assert args[7:12] == [4, 6, -6, 1, 18] and args[1:6] == [4, 6, 6, 1, 0]
    binding = bind_arguments(scale2d.graph, args, describe=device_info)
    assert binding.infos["src"].size == 24 and binding.infos["src"].c_contiguous
    assert binding.layouts["src"].offset == 18
    with pytest.raises(ArgumentError, match=r"argument 'dst': the kernel stores to this tensor, but dimension 1 "
                                            r"has stride 0"):
        expand_tensor_arguments(scale2d.graph, [FakeDeviceArray((4, 6), (24, 0)), src, 1.0])
    with pytest.raises(ArgumentError, match=r"argument 'src' is on cuda:0 \(test_tensors.FakeDeviceArray\), but the "
                                            r"CPU backends \(numpy, llvm, ptx\) run on the cpu"):
        scale2d.run([np.zeros((4, 6), np.float32), src, 1.0])


# -- tracing: the handle, mistakes, names ---------------------------------------------------


def test_the_handle_shows_shape_strides_offset_size_and_the_plain_buffer_alike():
    seen = {}

    @kernel(x=tensor(f32, 3), b=dynamic_buffer(f32))
    def probe(k, p):
        seen["x"], seen["b"] = p.x, p.b
        seen["x.size"], seen["b.shape"] = p.x.size, p.b.shape
        k.for_each_1d(axis("i", p.x.size), body=lambda inner, i: p.b.__setitem__(i["i"], p.x[0, 0, i["i"]]))

    probe.traced_graph
    x = seen["x"]
    assert isinstance(x, TensorHandle) and (x.name, x.dtype, x.ndim) == ("x", f32, 3)
    assert len(x.shape) == len(x.strides) == 3 and x.offset.type == index and seen["x.size"].type == index
    assert x.buffer.name == "x" and x.buffer.dtype == f32
    assert seen["b"].ndim == 1 and seen["b"].strides == (1,) and len(seen["b.shape"]) == 1
    assert seen["b.shape"][0].type == index


def _trace(body, **params):
    program = kernel("probe", **(params or dict(x=tensor(f32, 2), y=tensor(f32, 1))))(body)
    return program.traced_graph


@pytest.mark.parametrize("index_expr, message", [
    (lambda p, i: p.x[i], r"tensor 'x' has 2 dimensions, indexed with 1 index; write x\[i, j\]"),
    (lambda p, i: p.x[i, i, i], r"tensor 'x' has 2 dimensions, indexed with 3 indices"),
    (lambda p, i: p.x[i, i.cast(i32)], r"tensor 'x': the index in dimension 1 is i32; indices are index"),
    (lambda p, i: p.x[i, 1:2], r"tensor 'x': the index in dimension 1 must be an index value or a Python int, "
                               r"got a slice"),
])
def test_a_bad_tensor_index_is_a_trace_error_at_the_users_line(index_expr, message):
    def body(k, p):
        k.for_each_1d(axis("i", 4), body=lambda inner, i: p.y.__setitem__(i["i"], index_expr(p, i["i"])))

    with pytest.raises(TraceError, match=message) as info:
        _trace(body)
    assert "test_tensors.py" in str(info.value)


def test_x_i_of_a_1d_tensor_loads_and_stores():
    def body(k, p):
        k.for_each_1d(axis("i", p.y.shape[0]), body=lambda inner, i: p.y.__setitem__(i["i"], p.y[i["i"]] * 2.0))

    program = kernel("double", y=tensor(f32, 1))(body)
    y = np.arange(10, dtype=np.float32)[::-3]
    expected = y * 2
    program.run([y])
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("declared, message", [
    (dict(x=tensor(f32, 2), x__shape0=scalar(index)), r"parameter name 'x__shape0' is reserved"),
    (dict(x__offset=scalar(index), x=tensor(f32, 2)), r"parameter name 'x__offset' is reserved"),
    (dict(x=dynamic_buffer(f32), x__stride1=scalar(index)), r"parameter name 'x__stride1' is reserved"),
    (dict(x=tensor(f32, 1), x__shape0=tensor(f32, 1)), r"parameter name 'x__shape0' is reserved"),
])
def test_names_that_collide_with_hidden_scalars_are_refused(declared, message):
    with pytest.raises(TraceError, match=message + r".*'x' is a parameter; rename the parameter"):
        kernel(**declared)


def test_a_name_like_a_hidden_scalar_of_no_parameter_is_fine():
    @kernel(dst=tensor(f32, 1), y__offset=scalar(index))
    def fine(k, p):
        k.for_each_1d(axis("i", p.dst.shape[0]), body=lambda inner, i: p.dst.__setitem__(i["i"], 1.0))

    assert [p.name for p in fine.parameters][-1] == "y__offset" and len(fine.tensors) == 1


@pytest.mark.parametrize("args, message", [
    ((f32, 0), r"tensor: ndim must be an int from 1 to 5, got 0"),
    ((f32, 6), r"tensor: ndim must be an int from 1 to 5, got 6"),
    ((f32, 2.0), r"tensor: ndim must be an int from 1 to 5, got 2\.0"),
    ((f32, True), r"tensor: ndim must be an int from 1 to 5, got True"),
    (("f99", 2), r"tensor: .*f99"),
])
def test_a_bad_tensor_declaration_is_a_trace_error(args, message):
    with pytest.raises(TraceError, match=message):
        tensor(*args)


def test_tensor_specs_are_frozen_values():
    assert tensor("f32", 2) == TensorSpec(f32, 2) and hash(tensor(f32, np.int64(2))) == hash(TensorSpec(f32, 2))
    with pytest.raises(AttributeError):
        tensor(f32, 2).ndim = 3


# -- the other entry points -----------------------------------------------------------------


def test_compare_and_launch_take_tensor_arguments():
    src = SOURCES["steps"]()
    report = accy.compare(scale2d, [np.zeros(src.shape, np.float32), src, 2.0], backends=["numpy", "llvm"])
    assert report.agree and report.ran == ("numpy", "llvm")
    launch = scale2d.launch(args=[np.zeros((3, 5), np.float32), np.zeros((3, 5), np.float32), 1.0])
    assert launch.extents == (5, 3)


def test_the_cli_makes_one_array_per_tensor():
    from accy.cli import example_arguments

    dst, src, a = example_arguments(scale2d, 3, {}, sizes={"src": 3})
    assert dst.shape == src.shape == (3, 3) and a == 1
    with pytest.raises(accy.AccyError, match=r"--scalar src__offset: no such scalar parameter"):
        example_arguments(scale2d, 3, {"src__offset": "1"})


def test_a_race_on_a_tensor_output_names_the_element_by_its_indices():
    @kernel(dst=tensor(f32, 2))
    def racy(k, p):
        k.for_each_1d(axis("i", 2), body=lambda inner, i: p.dst.__setitem__((1, 2), 1.0))

    memory = np.zeros((3, 8), np.float32)
    with pytest.raises(accy.errors.RaceError, match=r"race on tensor 'dst'\[1, 2\]: "):
        racy.run([memory[:, ::2]], check_memory=True)
    assert (memory == 0).all()


def test_two_dimensions_outside_are_both_named(backend):
    src, dst = np.zeros((4, 4), np.float32), np.zeros((4, 4), np.float32)
    with pytest.raises(OutOfBoundsError, match=r"load from tensor 'src': the indices in dimensions 0 and 1 are "
                                               r"outside its shape"):
        shift2d.run(dict(dst=dst, src=src, m=1, n=1, di=0, dj=0, si=-3, sj=9), backend=backend)


@pytest.mark.parametrize("layout", ["C", "negative-both", "steps"])
def test_the_host_proves_a_launch_over_the_tensors_own_shape_in_bounds(layout):
    """The per-dimension test is arithmetic the launch proof bounds: a launch whose indices stay
    inside the shapes needs no per-access checks and runs in place; one that leaves them does not."""
    from accy.codegen.machine import host_kernel
    from accy.targets import Target

    kernel_ = host_kernel(shift2d.graph, Target.host())
    src = SOURCES[layout]()
    m, n = src.shape

    def proven(**offsets):
        args = expand_tensor_arguments(shift2d.graph, dict(dst=np.zeros((m, n), np.float32), src=src, m=m, n=n,
                                                          di=0, dj=0, si=0, sj=0) | offsets)
        buffers = [a for p, a in zip(shift2d.graph.params, args) if not p.is_scalar]
        scalars = [v & (2**64 - 1) for p, v in zip(shift2d.graph.params, args) if p.is_scalar]
        status, extents = np.zeros(4, np.int64), np.zeros(3, np.int64)
        return kernel_.prepare([b.ctypes.data for b in buffers], [b.size for b in buffers], scalars,
                               status.ctypes.data, extents.ctypes.data)

    assert kernel_.plan.infallible
    assert proven() is True
    assert proven(sj=1) is False and proven(di=-1) is False


@pytest.mark.parametrize("dtype", [accy.f8e5m2, accy.f8e4m3, accy.f8e4m3fnuz, accy.bf16])
def test_strided_views_of_narrow_floats_bind_and_tile_loads_read_them(dtype):
    # NumPy cannot rebuild float8_e5m2 from an array interface ("<f1"): every strided view
    # accy makes goes through same-width unsigned integers
    @accy.kernel(dst=accy.tensor(dtype, 2), x=accy.tensor(dtype, 2))
    def double(k, p):
        @k.for_each_tile(grid=accy.axis("r", accy.cdiv(p.x.shape[0], 4)))
        def body(t, pid):
            v = p.x.load_tile((pid["r"] * 4, 0), (4, 8))
            p.dst.store_tile((pid["r"] * 4, 0), (v.cast(accy.f32) * 2.0).cast(dtype))

    big = np.arange(96, dtype=np.float32).reshape(12, 8).astype(dtype.numpy)
    x = big[::2]  # a stepped view: the span path, not a plain reshape
    want = (x.astype(np.float32) * 2).astype(dtype.numpy)
    for backend in ("numpy", "llvm", "ptx"):
        dst = np.zeros((6, 8), dtype.numpy)[:, ::-1]  # a reversed output view
        double.run([dst, x], backend=backend)
        assert np.array_equal(dst.astype(np.float32), want.astype(np.float32)), backend
