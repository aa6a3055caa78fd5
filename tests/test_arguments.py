"""Argument checks and run-time bounds checks: clear errors, and nothing written on failure."""

import numpy as np
import pytest

from accy import Program, axis, buffer, dynamic_buffer, f32, index
from accy.errors import ArgumentError, ExecutionError, OutOfBoundsError
from accy.library.attention import ScaledDotProductAttention2x2x3x2x2F32 as SDPA

from conftest import elementwise


def attention_args():
    return [np.zeros((2, 2, 2), np.float32), np.ones((2, 2, 2), np.float32),
            np.ones((2, 3, 2), np.float32), np.ones((2, 3, 2), np.float32)]


def test_positional_and_named_arguments_agree(backend):
    by_position = attention_args()
    by_name = dict(zip(["dst", "query", "key", "value"], attention_args()))
    SDPA.run(by_position, backend=backend)
    SDPA.run(by_name, backend=backend)
    np.testing.assert_array_equal(by_position[0], by_name["dst"])
    np.testing.assert_allclose(by_position[0], 1.0, rtol=1e-6)


def test_flat_or_shaped_arrays(backend):
    shaped = attention_args()
    flat = [a.reshape(-1) for a in attention_args()]
    SDPA.run(shaped, backend=backend)
    SDPA.run(flat, backend=backend)
    np.testing.assert_array_equal(shaped[0].reshape(-1), flat[0])


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda a: a[:3], r"expected 4 arguments \(dst, query, key, value\), got 3"),
        (lambda a: {"dst": a[0], "query": a[1], "key": a[2]}, r"missing 'value'"),
        (lambda a: {**dict(zip(["dst", "query", "key", "value"], a)), "bias": a[1]}, r"unknown 'bias'"),
        (lambda a: [a[0], a[1].astype(np.float64), a[2], a[3]], r"argument 'query': expected dtype float32 \(f32\), got float64"),
        (lambda a: [a[0], a[1], a[2][:, :2], a[3]], r"argument 'key': expected 12 elements \(b=2 k=3 h=2\), got 8"),
        (lambda a: [a[0], a[1], a[2], np.ones((2, 2, 6), np.float32)[:, :, ::2]],
         r"argument 'value' is not C-contiguous \(shape \(2, 2, 3\), strides \(12, 6, 2\) in elements\); "
         r"pass a contiguous copy \(np.ascontiguousarray\(x\)\)"),
        (lambda a: [a[0], a[1].tolist(), a[2], a[3]], r"argument 'query': expected an array \(a NumPy array, or an object with .*\), got list"),
        (lambda a: np.zeros(4), r"arguments must be a sequence"),
    ],
)
def test_bad_arguments(mutate, message, backend):
    with pytest.raises(ArgumentError, match=message):
        SDPA.run(mutate(attention_args()), backend=backend)


def test_read_only_output(backend):
    args = attention_args()
    args[0].flags.writeable = False
    with pytest.raises(ArgumentError, match="argument 'dst' is read-only"):
        SDPA.run(args, backend=backend)


def test_output_aliasing_an_input(backend):
    shared = np.ones(8, np.float32)
    args = [shared, shared, np.ones(12, np.float32), np.ones(12, np.float32)]
    with pytest.raises(ArgumentError, match="argument 'dst' shares memory with argument 'query'"):
        SDPA.run(args, backend=backend)


def test_inputs_may_alias_each_other(backend):
    kv = np.ones(12, np.float32)
    SDPA.run([np.zeros(8, np.float32), np.ones(8, np.float32), kv, kv], backend=backend)


def test_declared_buffer_count_is_checked(backend):
    def body(k, args):
        k.for_each_1d(axis("i", 4), lambda inner, idx: args.dst.store(inner, 1.0, idx["i"]))

    program = Program("fixed", {"dst": buffer(f32, 4)}, body)
    with pytest.raises(ArgumentError, match="argument 'dst': expected 4 elements, got 5"):
        program.run([np.zeros(5, np.float32)], backend=backend)


def scatter_program(n):
    def body(k, args):
        def each(inner, idx):
            i = idx["i"]
            args.dst[args.where[i]] = args.src[i]
        k.for_each_1d(axis("i", n), each)

    return Program("scatter", {"dst": dynamic_buffer(f32), "src": dynamic_buffer(f32), "where": dynamic_buffer(index)}, body)


def test_out_of_bounds_store_names_buffer_index_and_thread(backend):
    dst = np.full(4, 7.0, np.float32)
    where = np.array([0, 1, 9, 2], np.int64)
    with pytest.raises(OutOfBoundsError, match=r"store to 'dst': index 9 is out of bounds for 4 elements \(thread i=2\)"):
        scatter_program(4).run([dst, np.arange(4, dtype=np.float32), where], backend=backend)
    assert (dst == 7.0).all(), "a failed launch must not write any output"


def test_out_of_bounds_load_negative_index(backend):
    def body(k, args):
        k.for_each_2d(x=axis("a", 2), y=axis("b", 3),
                      body=lambda inner, idx: args.dst.store(inner, args.x[idx["a"] - 1], idx["a"] + idx["b"] * 2))

    dst = np.zeros(6, np.float32)
    program = Program("neg", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}, body)
    # every thread with a=0 fails; the first to record it is reported (on ptx, as on a GPU, it
    # depends on which warp runs first: the suite's warp schedule changes every launch)
    with pytest.raises(OutOfBoundsError, match=r"load from 'x': index -1 is out of bounds for 2 elements \(thread a=0 b=[0-2]\)"):
        program.run([dst, np.ones(2, np.float32)], backend=backend)
    assert (dst == 0).all()


def test_loads_in_inactive_fold_lanes_are_not_checked(backend):
    """A thread whose loop has ended must not fault on indices it never reaches."""
    def body(k, args):
        def each(inner, idx):
            i = idx["i"]
            args.dst[i] = inner.fold_range(0, i, 1, 0.0, lambda inner, j, acc: acc + args.x[j])
        k.for_each_1d(axis("i", 4), each)

    x = np.array([1, 2, 3], np.float32)  # thread 3 reads x[0..2] only
    dst = np.zeros(4, np.float32)
    Program("prefix", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}, body).run([dst, x], backend=backend)
    assert dst.tolist() == [0, 1, 3, 6]


def test_index_division_by_zero_is_reported(backend):
    a = np.array([4, 5], np.int64)
    b = np.array([2, 0], np.int64)
    dst = np.full(2, -9, np.int64)
    with pytest.raises(ExecutionError, match=r"division by zero in thread i=1"):
        elementwise("divzero", lambda inner, x, y: x // y, 2, dtypes=(index, index), out=index).run([dst, a, b], backend=backend)
    assert dst.tolist() == [-9, -9]


def test_nan_and_inf_inputs_propagate(backend):
    args = attention_args()
    args[1][0, 0, 0] = np.nan
    args[2][1, 0, 0] = np.inf
    SDPA.run(args, backend=backend)
    dst = args[0]
    assert np.isnan(dst[0, 0]).all()  # a NaN query poisons its row
    assert np.isfinite(dst[0, 1]).all()


def test_unknown_backend():
    from accy.errors import BackendUnavailableError

    with pytest.raises(BackendUnavailableError, match="unknown backend 'tpu'"):
        SDPA.run(attention_args(), backend="tpu")


@pytest.mark.parametrize("start, stop, step, bad", [(0, 5, 1, 4), (4, -1, -1, 4), (-1, 3, 1, -1), (0, 9, 4, 4)])
def test_loop_range_checks_still_catch_the_one_bad_iteration(start, stop, step, bad, backend):
    """The LLVM backend checks a loop's whole index range once before it; where that
    fails, the per-iteration check must still find the exact bad index."""
    def body(k, args):
        def each(inner, idx):
            i = idx["i"]
            args.dst[i] = inner.fold_range(start, stop, step, 0.0, lambda inner, j, acc: acc + args.x[j + i * 0])
        k.for_each_1d(axis("i", 2), each)

    program = Program("ranged", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}, body)
    dst = np.zeros(2, np.float32)
    with pytest.raises(OutOfBoundsError, match=rf"load from 'x': index {bad} is out of bounds for 4 elements"):
        program.run([dst, np.ones(4, np.float32)], backend=backend)
    assert (dst == 0).all()


def test_loop_range_checks_pass_in_bounds_loops(backend):
    def body(k, args):
        def each(inner, idx):
            i = idx["i"]
            args.dst[i] = inner.fold_range(i, i + 3, 1, 0.0, lambda inner, j, acc: acc + args.x[j])
        k.for_each_1d(axis("i", 4), each)

    dst = np.zeros(4, np.float32)
    x = np.arange(6, dtype=np.float32)
    Program("window", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}, body).run([dst, x], backend=backend)
    assert dst.tolist() == [3.0, 6.0, 9.0, 12.0]


# -- array-likes: taken without a copy, outputs written in place ------------------------------------

import array  # noqa: E402

from accy import kernel, scalar  # noqa: E402


class InterfaceOnly:
    """Exposes only __array_interface__ (as many C extensions do)."""

    def __init__(self, a):
        self._a = a
        self.__array_interface__ = a.__array_interface__


class DLPackOnly:
    """Exposes only __dlpack__ (as a PyTorch CPU tensor does, among other protocols)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


@kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32), a=scalar(f32))
def _scale(k, args):
    @k.for_each_1d(axis("i", args.x.size))
    def each(inner, idx):
        args.dst[idx["i"]] = args.x[idx["i"]] * args.a


@pytest.mark.parametrize("wrap", [
    pytest.param(lambda a: memoryview(a), id="memoryview"),
    pytest.param(lambda a: InterfaceOnly(a), id="array-interface"),
    pytest.param(lambda a: DLPackOnly(a), id="dlpack"),
])
def test_array_likes_are_used_in_place_without_a_copy(wrap, backend):
    if backend == "cuda":
        pytest.skip("host array-likes are a CPU-backend feature")
    x_array = np.arange(6, dtype=np.float32)
    dst_array = np.zeros(6, np.float32)
    _scale.run([wrap(dst_array), wrap(x_array), 2.0], backend=backend)
    assert dst_array.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]  # written into the caller's memory


def test_a_python_array_module_buffer_works_too():
    out = array.array("f", [0.0] * 4)
    _scale.run([out, array.array("f", [1, 2, 3, 4]), 0.5], backend="llvm")
    assert out.tolist() == [0.5, 1.0, 1.5, 2.0]


def test_array_like_of_the_wrong_dtype_names_the_argument():
    with pytest.raises(ArgumentError, match=r"argument 'x': expected dtype float32 \(f32\), got int64 \(i64\)"):
        _scale.run([np.zeros(3, np.float32), memoryview(np.zeros(3, np.int64)), 1.0])


# -- issue 17 §5: arguments an adversarial trial passed ---------------------------------------------

import ctypes  # noqa: E402

import ml_dtypes  # noqa: E402

from accy import bf16  # noqa: E402
from accy.runtime.arguments import as_host_array  # noqa: E402


def test_a_python_int_past_any_float_is_an_argument_error(backend):
    with pytest.raises(ArgumentError, match=r"argument 'a': an integer of 1329 bits overflows f32 \(largest 3\.4"):
        _scale.run([np.zeros(3, np.float32), np.ones(3, np.float32), 10 ** 400], backend=backend)


def test_a_numpy_matrix_is_its_plain_array(backend):
    if backend == "cuda":
        pytest.skip("host array-likes are a CPU-backend feature")
    dst, x = np.matrix(np.zeros((2, 3), np.float32)), np.matrix(np.arange(6, dtype=np.float32).reshape(2, 3))
    _scale.run([dst, x, 2.0], backend=backend)
    assert dst.tolist() == [[0.0, 2.0, 4.0], [6.0, 8.0, 10.0]]  # written into the matrix's own memory


def test_a_masked_array_is_refused_with_the_way_out():
    x = np.ma.masked_array(np.ones(3, np.float32), mask=[0, 1, 0])
    with pytest.raises(ArgumentError, match=r"argument 'x': a masked array; .* pass a\.filled\(value\)"):
        _scale.run([np.zeros(3, np.float32), x, 1.0])


def _as_code(capsule, code: int):
    """Rewrite a legacy DLPack capsule's type code (NumPy exports no bf16 or fp8 of its own)."""
    api = ctypes.pythonapi
    api.PyCapsule_GetPointer.restype, api.PyCapsule_GetPointer.argtypes = ctypes.c_void_p, [ctypes.py_object,
                                                                                               ctypes.c_char_p]
    pointer = api.PyCapsule_GetPointer(capsule, b"dltensor")
    ctypes.c_uint8.from_address(pointer + 20).value = code  # DLTensor.dtype.code (after data, device, ndim)
    return capsule


class TorchLikeBF16:
    """What a torch bf16 CPU tensor offers NumPy: an __array__ that refuses the dtype, and a
    legacy DLPack capsule of code kDLBfloat (4).  ``bits`` is its memory, as uint16."""

    def __init__(self, values, code=4, bits=np.uint16):
        self.bits = np.asarray(values, dtype=ml_dtypes.bfloat16 if code == 4 else ml_dtypes.float8_e4m3fn).view(bits)
        self.code = code

    def __array__(self, *args, **kwargs):
        raise TypeError("Got unsupported ScalarType BFloat16")

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, *args, **kwargs):
        return _as_code(self.bits.__dlpack__(), self.code)


@kernel(dst=dynamic_buffer(bf16), x=dynamic_buffer(bf16))
def _double_bf16(k, args):
    @k.for_each_1d(axis("i", args.x.size))
    def each(inner, idx):
        args.dst[idx["i"]] = args.x[idx["i"]] * 2.0


def test_bf16_dlpack_tensors_are_read_and_written_in_place(backend):
    if backend == "cuda":
        pytest.skip("host array-likes are a CPU-backend feature")
    dst, x = TorchLikeBF16(np.zeros(5)), TorchLikeBF16([0.5, 1.0, -3.0, 1.5, 100.0])
    _double_bf16.run([dst, x], backend=backend)
    assert dst.bits.view(ml_dtypes.bfloat16).astype(np.float32).tolist() == [1.0, 2.0, -6.0, 3.0, 200.0]


def test_fp8_dlpack_tensors_are_viewed_as_the_ml_dtypes_type():
    view = as_host_array("x", TorchLikeBF16([0.5, 448.0], code=10, bits=np.uint8))
    assert view.dtype == ml_dtypes.float8_e4m3fn and view.astype(np.float32).tolist() == [0.5, 448.0]


def test_a_dlpack_type_with_no_numpy_or_ml_dtypes_type_says_why():
    with pytest.raises(ArgumentError, match=r"argument 'x': expected an array .* got TorchLikeBF16 "
                                            r"\(TypeError: Got unsupported ScalarType BFloat16\)"):
        as_host_array("x", TorchLikeBF16(np.zeros(2), code=5))  # kDLComplex, 16 bits


class RequiresGrad:
    """What a torch tensor with requires_grad=True offers: conversions that refuse until it is
    detached; ``detach()`` is the same memory."""

    requires_grad = True

    def __init__(self, a):
        self.memory = a

    def __array__(self, *args, **kwargs):
        raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")

    def __dlpack__(self, *args, **kwargs):
        raise RuntimeError("Can't export tensors that require gradient, use tensor.detach()")

    def detach(self):
        return DLPackOnly(self.memory)


def test_tensors_that_require_grad_are_read_and_written_through_detach(backend):
    if backend == "cuda":
        pytest.skip("host array-likes are a CPU-backend feature")
    dst, x = RequiresGrad(np.zeros(3, np.float32)), RequiresGrad(np.arange(3, dtype=np.float32))
    _scale.run([dst, x, 3.0], backend=backend)
    assert dst.memory.tolist() == [0.0, 3.0, 6.0]


@pytest.mark.torch
def test_torch_bf16_and_requires_grad_tensors():
    torch = pytest.importorskip("torch", reason="torch is not installed here (the classes above stand in for it)")
    dst, x = torch.zeros(5, dtype=torch.bfloat16), torch.tensor([0.5, 1.0, -3.0, 1.5, 100.0], dtype=torch.bfloat16)
    _double_bf16.run([dst, x], backend="llvm")
    assert dst.float().tolist() == [1.0, 2.0, -6.0, 3.0, 200.0]
    dst, x = torch.zeros(3, requires_grad=True), torch.arange(3.0, requires_grad=True)
    _scale.run([dst, x, 3.0], backend="llvm")
    assert dst.detach().tolist() == [0.0, 3.0, 6.0]


# -- issue 20 §1: DLPack capsules of both kinds, and tensors on another device ----------------------

from accy import tensor  # noqa: E402
from accy.runtime import arguments as arguments_module  # noqa: E402
from accy.runtime.arguments import dlpack_tensor, parse_dlpack_capsule  # noqa: E402
from accy.runtime.tensor_arguments import DeviceSpan, expand_tensor_arguments  # noqa: E402


def _dl_tensor(capsule):
    """The DLTensor inside a capsule of either kind, to rewrite (NumPy exports CPU memory only)."""
    for name, struct in ((b"dltensor_versioned", arguments_module._DLManagedTensorVersioned),
                         (b"dltensor", arguments_module._DLTensor)):
        pointer = arguments_module._capsule_pointer(capsule, name)
        if pointer:
            found = struct.from_address(pointer)
            return found.dl_tensor if name == b"dltensor_versioned" else found
    raise AssertionError("not a DLPack capsule")


class OnDevice:
    """A DLPack producer whose capsule says its memory is on ``device`` (kDLCUDA = 2): NumPy's
    memory, relabelled, so the capsule's fields can be checked (nothing reads the memory
    through a device)."""

    def __init__(self, a, device=(2, 0), code=None, versioned=True):
        self.a, self.device, self.code, self.versioned = a, device, code, versioned

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, max_version=None, **kwargs):
        capsule = self.a.__dlpack__(max_version=max_version if self.versioned else None)
        t = _dl_tensor(capsule)
        t.device_type, t.device_id = self.device
        if self.code is not None:
            t.code = self.code
        return capsule


def test_both_capsule_kinds_are_read_without_being_consumed():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    for capsule in (a.__dlpack__(max_version=(1, 0)), a.__dlpack__()):
        t = parse_dlpack_capsule(capsule)
        assert (t.device, t.shape, t.strides, t.dtype, t.read_only) == ((1, 0), (3, 2), (4, 2), np.float32, False)
        assert t.address == a.__array_interface__["data"][0]
    assert "used" not in repr(capsule)  # not consumed: its destructor still releases the array


def test_a_versioned_capsule_says_read_only_and_an_output_is_refused_for_it(backend):
    if backend == "cuda":
        pytest.skip("host array-likes are a CPU-backend feature")
    frozen = np.arange(3, dtype=np.float32)
    frozen.flags.writeable = False
    assert dlpack_tensor(DLPackOnly(frozen)).read_only  # a legacy capsule cannot say it (NumPy refuses one)
    dst = np.zeros(3, np.float32)
    _scale.run([DLPackOnly(dst), DLPackOnly(frozen), 2.0], backend=backend)  # read-only inputs are fine
    assert dst.tolist() == [0.0, 2.0, 4.0]
    with pytest.raises(ArgumentError, match="argument 'dst' is read-only, but the kernel stores to it"):
        _scale.run([DLPackOnly(frozen), DLPackOnly(dst), 2.0], backend=backend)
    assert frozen.tolist() == [0.0, 1.0, 2.0]


def test_a_read_only_bf16_capsule_is_viewed_read_only():
    frozen = np.asarray([1.0, 2.0], ml_dtypes.bfloat16).view(np.uint16)
    frozen.flags.writeable = False
    view = as_host_array("x", OnDevice(frozen, device=(1, 0), code=4))
    assert view.dtype == ml_dtypes.bfloat16 and not view.flags.writeable
    assert view.astype(np.float32).tolist() == [1.0, 2.0]


@pytest.mark.parametrize("device, named", [((2, 0), "cuda:0"), ((2, 3), "cuda:3"), ((10, 1), "rocm:1")])
def test_a_tensor_on_a_gpu_is_refused_on_a_cpu_backend_naming_both_devices(device, named, backend):
    if backend == "cuda":
        pytest.skip("the CPU backends' refusal")
    dst = np.full(3, 7.0, np.float32)
    with pytest.raises(ArgumentError, match=rf"argument 'x' is on {named} \(test_arguments.OnDevice\), but the CPU "
                                            r"backends \(numpy, llvm, ptx\) run on the cpu"):
        _scale.run([dst, OnDevice(np.ones(3, np.float32), device), 1.0], backend=backend)
    assert dst.tolist() == [7.0] * 3


@kernel(dst=tensor(f32, 2), x=tensor(bf16, 2))
def _widen(k, args):
    @k.for_each_2d(x=axis("i", args.x.shape[0]), y=axis("j", args.x.shape[1]))
    def each(inner, idx):
        args.dst[idx["i"], idx["j"]] = args.x[idx["i"], idx["j"]].cast(f32)


def test_a_gpu_tensor_parameter_is_refused_on_a_cpu_backend(backend):
    if backend == "cuda":
        pytest.skip("the CPU backends' refusal")
    with pytest.raises(ArgumentError, match=r"argument 'x' is on cuda:0 .* run on the cpu"):
        _widen.run([np.zeros((2, 3), np.float32), OnDevice(np.zeros((2, 3), np.uint16), code=4)], backend=backend)


@pytest.mark.parametrize("versioned", [True, False])
def test_a_cuda_dlpack_array_is_described_from_its_capsule_for_cuda(versioned):
    """JAX arrays and torch bf16 CUDA tensors offer no usable __cuda_array_interface__: the
    capsule gives the device pointer, shape, strides and type (the launch itself runs only on a
    GPU: scripts/gpu_check.sh)."""
    from accy.runtime.cuda import device_info

    memory = np.zeros((4, 6), np.uint16)
    info = device_info("x", OnDevice(memory, code=4, versioned=versioned))
    assert (info.space, info.dtype, info.shape, info.c_contiguous, info.writeable) == (
        "cuda", ml_dtypes.bfloat16, (4, 6), True, True)
    assert info.address == memory.__array_interface__["data"][0]
    transposed = OnDevice(memory.T, code=4, versioned=versioned)
    args = expand_tensor_arguments(_widen.graph, [OnDevice(np.zeros((6, 4), np.float32)), transposed], on_cuda=True)
    span = args[6]
    assert isinstance(span, DeviceSpan) and span.dtype == ml_dtypes.bfloat16 and args[7:12] == [6, 4, 1, 6, 0]
    assert device_info("x", span).dtype == ml_dtypes.bfloat16  # the span keeps the type a typestr cannot say


def test_a_cuda_dlpack_array_of_a_type_accy_lacks_says_so():
    from accy.runtime.cuda import device_info

    with pytest.raises(ArgumentError, match=r"argument 'x': its DLPack type \(code 5, 16 bits, 1 lanes\) has no "
                                            "accy type"):
        device_info("x", OnDevice(np.zeros(2, np.uint16), code=5))


def test_a_cpu_tensor_of_another_library_is_refused_on_cuda_naming_both_devices():
    """On cuda a NumPy array is copied to the device, but a tensor the caller put in host memory
    (a torch CPU tensor) is refused: both the buffer and the tensor parameter paths."""
    from accy.runtime.cuda import device_info

    host = OnDevice(np.zeros(3, np.float32), device=(1, 0))
    with pytest.raises(ArgumentError, match=r"argument 'dst' is on cpu \(test_arguments.OnDevice\), but backend "
                                            r"'cuda' runs on a CUDA device"):
        device_info("dst", host)
    assert device_info("dst", np.zeros(3, np.float32)).space == "host"  # copied to the device and back
    with pytest.raises(ArgumentError, match=r"argument 'x' is on cpu .* backend 'cuda' runs on a CUDA device"):
        expand_tensor_arguments(_widen.graph, [np.zeros((2, 3), np.float32),
                                               OnDevice(np.zeros((2, 3), np.uint16), device=(1, 0), code=4)],
                                on_cuda=True)


def test_compare_takes_dlpack_tensors_and_leaves_them_untouched():
    import accy

    dst, x = TorchLikeBF16(np.zeros(3)), TorchLikeBF16([0.5, -2.0, 3.0])
    report = accy.compare(_double_bf16, [dst, x], backends=("numpy", "llvm"))
    assert report.agree and report.ran == ("numpy", "llvm")
    assert dst.bits.tolist() == [0, 0, 0]  # compare runs on copies
    with pytest.raises(ArgumentError, match=r"argument 'x' is on cuda:0"):
        accy.compare(_double_bf16, [dst, OnDevice(x.bits, code=4)], backends=("numpy",))
