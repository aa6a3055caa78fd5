"""PyTorch tensors as arguments (zero-copy on the CPU backends) and accy.torch.custom_op
(issue 20 §1), checked against NumPy float64 references.  The CUDA paths run only on a
GPU (scripts/gpu_check.sh); here their dispatch and refusals are checked."""

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'accy[torch]')")
pytestmark = pytest.mark.torch  # in no extra but torch's: .ci/run installs it, then runs these

import accy  # noqa: E402
import accy.torch  # noqa: E402
from accy import axis, bf16, dynamic_buffer, f8e4m3, f8e4m3fnuz, f8e5m2, f32, kernel, scalar, tensor  # noqa: E402
from accy.runtime.arguments import as_host_array  # noqa: E402
from accy.errors import AccyError, ArgumentError  # noqa: E402

from conftest import CPU_BACKENDS  # noqa: E402


@kernel(dst=tensor(f32, 2), x=tensor(f32, 2), y=tensor(f32, 2), a=scalar(f32))
def axpy(k, args):
    @k.for_each_2d(x=axis("i", args.x.shape[0]), y=axis("j", args.x.shape[1]))
    def each(inner, idx):
        i, j = idx["i"], idx["j"]
        args.dst[i, j] = args.x[i, j] * args.a + args.y[i, j]


def axpy_reference(x, y, a):
    return x.double().numpy() * a + y.double().numpy()


@kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32))
def square(k, args):
    @k.for_each_1d(axis("i", args.x.size))
    def each(inner, idx):
        args.dst[idx["i"]] = args.x[idx["i"]] * args.x[idx["i"]]


@kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32), a=scalar(f32))
def scale(k, args):
    @k.for_each_1d(axis("i", args.x.size))
    def each(inner, idx):
        args.dst[idx["i"]] = args.x[idx["i"]] * args.a


def _address(t) -> int:
    return as_host_array("t", t).__array_interface__["data"][0]


# -- torch tensors as run() arguments ---------------------------------------------------------------


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_cpu_tensors_are_read_and_written_in_place_with_no_copy(backend):
    x, y = torch.linspace(-1, 1, 12).reshape(3, 4), torch.arange(12.0).reshape(3, 4)
    dst = torch.zeros(3, 4)
    alias = dst.view(-1)  # the same memory: it sees the kernel's stores only if they land in place
    assert _address(dst) == dst.data_ptr() and _address(x) == x.data_ptr()  # viewed, not copied
    axpy.run([dst, x, y, 0.5], backend=backend)
    np.testing.assert_allclose(alias.numpy().reshape(3, 4), axpy_reference(x, y, 0.5), rtol=1e-6)
    assert dst.data_ptr() == alias.data_ptr()


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_strided_views_are_taken_where_they_lie(backend):
    big = torch.arange(48.0).reshape(6, 8)
    x = big[::2, 1::2]  # 3x4, strides (16, 2)
    y = torch.arange(12.0).reshape(4, 3).t()  # transposed
    out = torch.full((4, 3), -1.0)
    dst = out.t()  # an output that is a transposed view of its storage
    axpy.run([dst, x, y, 2.0], backend=backend)
    np.testing.assert_allclose(out.t().numpy(), axpy_reference(x, y, 2.0), rtol=1e-6)


def test_a_non_contiguous_tensor_for_a_flat_buffer_is_refused():
    dst = torch.zeros(3)
    with pytest.raises(ArgumentError, match=r"argument 'x' is not C-contiguous \(shape .*strides \(2,\) in elements\); "
                                            r"pass a contiguous copy \(x.contiguous\(\)\)"):
        square.run([dst, torch.arange(6.0)[::2]], backend="llvm")
    assert dst.tolist() == [0.0, 0.0, 0.0]


def test_a_tensor_of_the_wrong_dtype_names_the_parameter_and_writes_nothing():
    dst = torch.full((3,), 9.0)
    with pytest.raises(ArgumentError, match=r"argument 'x': expected dtype float32 \(f32\), got float64 \(f64\)"):
        square.run([dst, torch.arange(3.0, dtype=torch.float64)], backend="llvm")
    assert dst.tolist() == [9.0, 9.0, 9.0]


@kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(bf16), e4=dynamic_buffer(f8e4m3), e5=dynamic_buffer(f8e5m2),
        e4nuz=dynamic_buffer(f8e4m3fnuz), out16=dynamic_buffer(bf16))
def narrow_sum(k, args):
    @k.for_each_1d(axis("i", args.x.size))
    def each(inner, idx):
        i = idx["i"]
        total = args.x[i].cast(f32) + args.e4[i].cast(f32) + args.e5[i].cast(f32) + args.e4nuz[i].cast(f32)
        args.dst[i] = total
        args.out16[i] = total.cast(bf16)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_bf16_and_fp8_tensors(backend):
    values = [0.5, -1.25, 3.0, 96.0]
    x, e4 = torch.tensor(values, dtype=torch.bfloat16), torch.tensor(values, dtype=torch.float8_e4m3fn)
    e5, e4nuz = torch.tensor(values, dtype=torch.float8_e5m2), torch.tensor(values, dtype=torch.float8_e4m3fnuz)
    dst, out16 = torch.zeros(4), torch.zeros(4, dtype=torch.bfloat16)
    narrow_sum.run([dst, x, e4, e5, e4nuz, out16], backend=backend)
    expected = sum(np.asarray(values, t).astype(np.float64) for t in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn,
                                                                      ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fnuz))
    np.testing.assert_array_equal(dst.numpy(), expected.astype(np.float32))
    np.testing.assert_array_equal(out16.float().numpy(), expected.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_tensors_that_require_grad():
    x = torch.arange(4.0, requires_grad=True)
    dst = torch.zeros(4, requires_grad=True)
    square.run([dst, x], backend="llvm")
    assert dst.detach().tolist() == [0.0, 1.0, 4.0, 9.0]


def _negated_views():
    """(name, tensor that reads as -1..-4 but whose memory holds 1..4)."""
    z = torch.tensor([5 + 1j, 6 + 2j, 7 + 3j, 8 + 4j], dtype=torch.complex64)
    return [("_neg_view", torch._neg_view(torch.arange(1.0, 5.0))), ("conj().imag", z.conj().imag)]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_inputs_with_the_negative_bit_are_read_as_their_values(backend):
    for how, x in _negated_views():
        assert x.is_neg(), how
        dst = torch.zeros(4)
        scale.run([dst, x, 2.0], backend=backend)  # a flat buffer
        assert dst.tolist() == [-2.0, -4.0, -6.0, -8.0], (how, backend)
        out = torch.zeros(2, 2)
        axpy.run([out, x.reshape(2, 2), torch.zeros(2, 2), 1.0], backend=backend)  # a tensor parameter
        assert out.flatten().tolist() == [-1.0, -2.0, -3.0, -4.0], (how, backend)
        view = torch._neg_view(torch.arange(1.0, 5.0).reshape(2, 2)).t()  # strided and negated
        axpy.run([out, view, torch.zeros(2, 2), 1.0], backend=backend)
        assert out.tolist() == [[-1.0, -3.0], [-2.0, -4.0]], (how, backend)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_outputs_with_the_negative_bit_are_refused_and_left_untouched(backend):
    for how, dst in _negated_views():
        with pytest.raises(ArgumentError, match=r"argument 'dst': the kernel stores to this tensor, but it has "
                                                r"the negative bit set .*t\.resolve_neg\(\)"):
            axpy.run([dst.reshape(2, 2), torch.ones(2, 2), torch.ones(2, 2), 1.0], backend=backend)
        assert dst.tolist() == [-1.0, -2.0, -3.0, -4.0], how
    dst = torch._neg_view(torch.zeros(4))
    with pytest.raises(ArgumentError, match=r"argument 'dst': .* negative bit set"):  # a flat buffer
        square.run([dst, torch.ones(4)], backend=backend)
    assert not dst.any()


def test_a_host_view_of_a_negated_tensor_is_a_copy_of_its_values():  # what compare copies
    for how, x in _negated_views():
        assert as_host_array("x", x).tolist() == [-1.0, -2.0, -3.0, -4.0], how


def test_compare_takes_torch_tensors_and_leaves_them_untouched():
    x, y, dst = torch.randn(3, 5, generator=torch.Generator().manual_seed(0)), torch.ones(3, 5), torch.zeros(3, 5)
    report = accy.compare(axpy, [dst, x, y, 1.5], backends=("numpy", "llvm"))
    assert report.agree and report.ran == ("numpy", "llvm")
    assert not dst.any()


# -- accy.torch.custom_op -----------------------------------------------------------------------------

AXPY = accy.torch.custom_op("accy_test::axpy", axpy, mutates_args=("dst",))


def eager_axpy(x, y):
    dst = torch.empty_like(x)
    AXPY(dst, torch.sin(x), y, 2.0)  # the op's input is a value the graph computes
    return dst + 1.0


def test_the_op_runs_eagerly_and_matches_a_float64_reference():
    x, y = torch.linspace(-2, 2, 20).reshape(4, 5), torch.arange(20.0).reshape(4, 5)
    dst = torch.zeros(4, 5)
    assert AXPY(dst, x, y, 3.0) is None
    np.testing.assert_allclose(dst.numpy(), axpy_reference(x, y, 3.0), rtol=1e-6)


def test_the_op_is_reachable_as_torch_ops_and_registering_again_returns_it():
    assert torch.ops.accy_test.axpy.default is not None
    dst, x = torch.zeros(2, 2), torch.ones(2, 2)
    torch.ops.accy_test.axpy(dst, x, x, 4.0)
    assert dst.tolist() == [[5.0, 5.0], [5.0, 5.0]]
    assert accy.torch.custom_op("accy_test::axpy", axpy, mutates_args=["dst"]) is AXPY
    with pytest.raises(AccyError, match=r"'accy_test::axpy' is already registered for program 'axpy'"):
        accy.torch.custom_op("accy_test::axpy", square, mutates_args=("dst",))


def test_torch_compile_fullgraph_matches_eager():
    x, y = torch.linspace(-1, 1, 12).reshape(3, 4), torch.arange(12.0).reshape(3, 4)
    compiled = torch.compile(eager_axpy, fullgraph=True, backend="aot_eager")  # a graph break would raise
    np.testing.assert_allclose(compiled(x, y).numpy(), eager_axpy(x, y).numpy(), rtol=0)
    np.testing.assert_allclose(eager_axpy(x, y).numpy(), np.sin(x.double().numpy()) * 2 + y.double().numpy() + 1,
                               rtol=1e-6)


def test_torch_compile_with_dynamic_shapes_and_strided_inputs_matches_eager():
    compiled = torch.compile(eager_axpy, fullgraph=True, backend="aot_eager", dynamic=True)
    g = torch.Generator().manual_seed(2)
    for x in (torch.randn(2, 3, generator=g), torch.randn(4, 5, generator=g), torch.randn(6, 3, generator=g).t(),
              torch.randn(8, 8, generator=g)[::2, 1::3]):
        y = torch.full(x.shape, 0.25)
        np.testing.assert_allclose(compiled(x, y).numpy(), eager_axpy(x, y).numpy(), rtol=0)
        # f32 sin and sums against float64: absolute error of a few f32 ulps of the operands
        np.testing.assert_allclose(eager_axpy(x, y).numpy(), np.sin(x.double().numpy()) * 2 + 1.25,
                                   rtol=1e-6, atol=1e-6)


def test_torch_compile_with_inductor_matches_eager():
    x, y = torch.randn(5, 3, generator=torch.Generator().manual_seed(1)), torch.ones(5, 3)
    torch._dynamo.reset()
    compiled = torch.compile(eager_axpy, fullgraph=True)
    np.testing.assert_allclose(compiled(x, y).numpy(), eager_axpy(x, y).numpy(), rtol=1e-6)


def test_the_fake_implementation_checks_the_signature_under_compile():
    compiled = torch.compile(lambda d, x: AXPY(d, x, x, 1.0), fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match=r"argument 'x': expected dtype torch.float32 \(f32\), got torch.float64"):
        compiled(torch.zeros(2, 2), torch.zeros(2, 2, dtype=torch.float64))


@pytest.mark.parametrize("args, message", [
    (lambda: [torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.float16), torch.ones(2, 3), 1.0],
     r"argument 'x': expected dtype torch.float32 \(f32\), got torch.float16"),
    (lambda: [torch.zeros(2, 3), torch.ones(6), torch.ones(2, 3), 1.0],
     r"argument 'x': expected a 2-d tensor \(tensor\(f32, 2\)\), got a 1-d tensor of shape \(6,\)"),
])
def test_bad_inputs_name_the_argument_and_leave_the_output_untouched(args, message):
    args = args()
    args[0].fill_(7.0)
    with pytest.raises(ArgumentError, match=message):
        AXPY(*args)
    assert (args[0] == 7.0).all()


class _OnCuda:
    """Stands in for a CUDA tensor in the dispatch (no GPU here)."""

    def __init__(self, index=0):
        self.device = torch.device("cuda", index)


def test_cpu_tensors_run_on_llvm_and_cuda_tensors_on_cuda():
    from accy.torch import backend_for

    assert backend_for({"dst": torch.zeros(1), "x": torch.zeros(1)}) == ("llvm", None)
    assert backend_for({"dst": _OnCuda(1), "x": _OnCuda(1)}) == ("cuda", 1)
    with pytest.raises(ArgumentError, match=r"2 devices \('dst' on cpu, 'x' on cuda:0\)"):
        backend_for({"dst": torch.zeros(1), "x": _OnCuda()})
    with pytest.raises(ArgumentError, match=r"argument 'x' is on meta; accy runs CPU tensors on llvm"):
        backend_for({"x": torch.zeros(1, device="meta")})


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where CUDA is not available")
def test_cuda_tensors_where_accy_has_no_cuda_backend_are_a_clear_error(monkeypatch):
    """No CUDA tensor can be made here: the dispatch is told the tensors are on cuda:0."""
    from accy.errors import BackendUnavailableError

    monkeypatch.setattr(accy.torch, "backend_for", lambda tensors: ("cuda", 0))
    dst = torch.full((2, 2), 7.0)
    with pytest.raises(BackendUnavailableError, match=r"backend 'cuda' needs"):
        AXPY(dst, torch.zeros(2, 2), torch.zeros(2, 2), 1.0)
    assert (dst == 7.0).all()


def test_mutates_args_must_name_every_stored_buffer_and_only_buffers():
    with pytest.raises(AccyError, match=r"'square' stores to 'dst', so mutates_args must name it"):
        accy.torch.custom_op("accy_test::square_none", square, mutates_args=())
    with pytest.raises(AccyError, match=r"mutates_args names 'a', which is not a buffer or tensor parameter"):
        accy.torch.custom_op("accy_test::axpy_a", axpy, mutates_args=("dst", "a"))


def test_scalar_parameters_take_python_numbers_by_type():
    schema = str(AXPY._opoverload._schema)
    assert schema.endswith("(Tensor(a0!) dst, Tensor x, Tensor y, float a) -> ()"), schema


def test_importing_accy_does_not_import_torch():
    done = subprocess.run([sys.executable, "-c", "import sys, accy, accy.torch; assert 'torch' not in sys.modules"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


# -- on a GPU (scripts/gpu_check.sh's step 7 runs the tests marked cuda) -------------------------------

from conftest import CUDA_UNAVAILABLE  # noqa: E402

on_a_gpu = [pytest.mark.cuda, pytest.mark.skipif(
    CUDA_UNAVAILABLE is not None or not torch.cuda.is_available(),
    reason=f"no GPU here: {CUDA_UNAVAILABLE or 'torch sees no CUDA device'}")]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("_", [pytest.param(None, marks=on_a_gpu, id="cuda")])
def test_the_op_runs_cuda_tensors_on_cuda_in_place(compiled, _):
    x, y = torch.linspace(-2, 2, 35, device="cuda").reshape(5, 7), torch.ones(5, 7, device="cuda")
    expected = eager_axpy(x.cpu(), y.cpu())
    torch._dynamo.reset()
    run = torch.compile(eager_axpy, fullgraph=True, backend="aot_eager") if compiled else eager_axpy
    got = run(x, y)
    assert got.is_cuda
    np.testing.assert_allclose(got.cpu().numpy(), expected.numpy(), rtol=1e-6)


@pytest.mark.parametrize("_", [pytest.param(None, marks=on_a_gpu, id="cuda")])
def test_bf16_cuda_tensors_come_through_dlpack_and_cpu_tensors_are_refused_on_cuda(_):
    x = torch.tensor([0.5, -1.25, 3.0, 96.0], dtype=torch.bfloat16, device="cuda")
    dst, e4 = torch.zeros(4, device="cuda"), torch.zeros(4, dtype=torch.float8_e4m3fn, device="cuda")
    e5, out16 = torch.zeros(4, dtype=torch.float8_e5m2, device="cuda"), torch.zeros(4, dtype=torch.bfloat16,
                                                                                    device="cuda")
    e4nuz = torch.zeros(4, dtype=torch.float8_e4m3fnuz, device="cuda")
    narrow_sum.run([dst, x, e4, e5, e4nuz, out16], backend="cuda")
    assert dst.tolist() == [0.5, -1.25, 3.0, 96.0] and out16.float().tolist() == dst.tolist()
    with pytest.raises(ArgumentError, match=r"argument 'x' is on cpu \(torch.Tensor\), but backend 'cuda'"):
        narrow_sum.run([dst, x.cpu(), e4, e5, e4nuz, out16], backend="cuda")
    with pytest.raises(ArgumentError, match=r"argument 'dst' is on cuda:0 \(torch.Tensor\), but the CPU backends"):
        narrow_sum.run([dst, x.cpu(), e4.cpu(), e5.cpu(), e4nuz.cpu(), out16.cpu()], backend="llvm")


# -- more of the signature and the checks --------------------------------------------------------------

from accy import boolean, i32, index  # noqa: E402


@kernel(dst=dynamic_buffer(i32), x=dynamic_buffer(i32), shift=scalar(index), negate=scalar(boolean))
def shifted(k, args):
    @k.for_each_1d(axis("i", args.x.size))
    def each(inner, idx):
        value = args.x[idx["i"]] + args.shift.cast(i32)
        args.dst[idx["i"]] = inner.select(args.negate, -value, value)


def test_integer_and_bool_scalars_are_ints_and_bools_in_the_schema():
    op = accy.torch.custom_op("accy_test::shifted", shifted, mutates_args=("dst",))
    assert str(op._opoverload._schema).endswith("(Tensor(a0!) dst, Tensor x, SymInt shift, bool negate) -> ()")
    dst = torch.zeros(3, dtype=torch.int32)
    torch.ops.accy_test.shifted(dst, torch.tensor([1, 2, 3], dtype=torch.int32), 10, True)
    assert dst.tolist() == [-11, -12, -13]


def test_an_output_sharing_memory_with_an_input_tensor_is_refused():
    t = torch.ones(6)
    with pytest.raises(ArgumentError, match="argument 'dst' shares memory with argument 'x'"):
        square.run([t[:3], t[2:5]], backend="llvm")  # overlapping views of one storage
    assert (t == 1).all()


def test_accy_torch_is_an_attribute_of_accy_without_an_import_of_its_own():
    done = subprocess.run([sys.executable, "-c", "import accy; print(accy.torch.custom_op.__name__)"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "custom_op", done.stderr[-2000:]


def test_an_autotuned_tile_kernel_is_an_op_too(tmp_path, monkeypatch):
    """The tuned kernel (a tile softmax with two tilings) registers as it is; the op tunes on
    its first call and torch.compile traces through it."""
    from accy import cdiv

    monkeypatch.setenv("ACCY_CACHE_DIR", str(tmp_path))

    @accy.autotune(configs=[dict(ROWS=4, COLS=64), dict(ROWS=2, COLS=128)], key=("x",))
    @kernel(dst=tensor(f32, 2), x=tensor(f32, 2))
    def softmax(k, p, *, ROWS, COLS):
        R, C = p.x.shape

        @k.for_each_tile(grid=axis("r", cdiv(R, ROWS)))
        def program(t, pid):
            r0 = pid["r"] * ROWS

            def stats(t, c0, carry):
                m, s = carry
                x = p.x.load_tile((r0, c0), (ROWS, COLS), other=float("-inf"))
                m_new = t.maximum(m, t.max(x, axis=1))
                return m_new, s * t.exp(m - m_new) + t.sum(t.exp(x - m_new[:, None]), axis=1)

            start = (t.full((ROWS,), float("-inf"), f32), t.zeros((ROWS,), f32))
            m, s = t.fold_range(0, C, COLS, start, stats)
            t.for_range(0, C, COLS, lambda t, c0: p.dst.store_tile(
                (r0, c0), t.exp(p.x.load_tile((r0, c0), (ROWS, COLS)) - m[:, None]) / s[:, None]))

    op = accy.torch.custom_op("accy_test::tuned_softmax", softmax, mutates_args=("dst",))

    def f(x):
        y = torch.empty_like(x)
        op(y, x * 2.0)
        return y

    x = torch.randn(13, 300, generator=torch.Generator().manual_seed(3))
    e = np.exp(2 * x.double().numpy() - 2 * x.double().numpy().max(axis=1, keepdims=True))
    expected = e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(f(x).numpy(), expected, rtol=1e-5, atol=1e-7)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    np.testing.assert_allclose(compiled(x).numpy(), expected, rtol=1e-5, atol=1e-7)
    assert softmax.tuning_log([torch.empty_like(x), x], backend="llvm").config in softmax.configs
    # NumPy arrays of the same shape and dtype are the same key: the tensors' record, not a new tuning
    tuned = softmax.tuning_log([torch.empty_like(x), x], backend="llvm")
    assert softmax.tuning_log([np.empty((13, 300), np.float32), x.numpy()], backend="llvm") == tuned
