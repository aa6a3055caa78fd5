"""The cuda backend on a GPU (through cuda.core or PyCUDA: ACCY_CUDA_DRIVER). GPU tests are
marked `cuda` and skip, with the reason, where a driver library or a GPU is missing; the checks
that need neither run everywhere (tests/test_cuda_drivers.py drives both drivers with fakes)."""

import subprocess
import sys

import numpy as np
import pytest

from accy import Program, axis, dynamic_buffer, f32
from accy.errors import ArgumentError, BackendUnavailableError, OutOfBoundsError
from accy.library.attention import ScaledDotProduct, reference, scaled_dot_product_f32

from conftest import CUDA_UNAVAILABLE
from kernels import CASES, run_case

needs_gpu = [pytest.mark.cuda, pytest.mark.skipif(CUDA_UNAVAILABLE is not None,
                                                  reason=f"no GPU backend here: {CUDA_UNAVAILABLE}")]


def requires_gpu(test):
    for mark in needs_gpu:
        test = mark(test)
    return test


def test_importing_accy_never_imports_a_gpu_driver():
    code = ("import accy, numpy as np, sys; from accy.library.attention import ScaledDotProductAttention2x2x3x2x2F32 as e; "
            "e.run([np.zeros(8, np.float32), np.ones(8, np.float32), np.ones(12, np.float32), np.ones(12, np.float32)]); "
            "e.run([np.zeros(8, np.float32), np.ones(8, np.float32), np.ones(12, np.float32), np.ones(12, np.float32)], "
            "backend='ptx'); print(sorted(m for m in ('pycuda', 'cuda.core', 'cuda.bindings') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.skipif(CUDA_UNAVAILABLE is None, reason="a GPU is present")
def test_without_gpu_the_error_says_why_and_how_to_fix():
    entry = scaled_dot_product_f32(ScaledDotProduct(1, 1, 1, 1, 1))
    with pytest.raises(BackendUnavailableError, match=r"backend 'cuda' (needs cuda.core or pycuda|found no|with "
                                                      r"ACCY_CUDA_DRIVER=)") as err:
        entry.run([np.zeros(1, np.float32)] * 4, backend="cuda")
    assert "pip install" in str(err.value) or "NVIDIA" in str(err.value)


CASE_SHAPES = [pytest.param(case, shape, id=f"{case.name}-{'x'.join(map(str, shape))}", marks=needs_gpu)
               for case in CASES for shape in case.shapes]


@pytest.mark.parametrize("case, shape", CASE_SHAPES)
def test_suite_on_gpu_matches_interpreter_and_reference(case, shape):
    gpu, expected = run_case(case, shape, "cuda")
    cpu, _ = run_case(case, shape, "numpy")
    np.testing.assert_allclose(gpu, expected, rtol=case.rtol, atol=case.atol, err_msg="cuda vs NumPy")
    np.testing.assert_allclose(gpu, cpu, rtol=case.rtol, atol=case.atol, err_msg="cuda vs interpreter")


@pytest.mark.parametrize("shape", [(2, 2, 3, 2, 2), (4, 64, 64, 32, 32)], ids=str)
@requires_gpu
def test_attention_on_gpu(shape):
    b, q, k, h, v = shape
    entry = scaled_dot_product_f32(ScaledDotProduct(*shape))
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(s, dtype=np.float32) for s in ((b, q, h), (b, k, h), (b, k, v))]
    gpu, cpu = np.zeros((b, q, v), np.float32), np.zeros((b, q, v), np.float32)
    entry.run([gpu, *args], backend="cuda")
    entry.run([cpu, *args], backend="numpy")
    np.testing.assert_allclose(gpu, reference(*args), rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(gpu, cpu, rtol=1e-5, atol=2e-6)


def _copy_program(n):
    def body(k, args):
        k.for_each_1d(axis("i", n), lambda inner, idx: args.dst.store(inner, args.src[idx["i"]] * 2.0, idx["i"] + args.off[0]))

    from accy import index

    return Program("gpu_copy", {"dst": dynamic_buffer(f32), "src": dynamic_buffer(f32), "off": dynamic_buffer(index)}, body)


@requires_gpu
def test_device_arrays_are_used_in_place_and_untouched_on_failure():
    cupy = pytest.importorskip("cupy", reason="CuPy provides __cuda_array_interface__ arrays for this test")
    src = cupy.arange(8, dtype=cupy.float32)
    dst = cupy.full(8, -1.0, dtype=cupy.float32)
    _copy_program(8).run([dst, src, cupy.zeros(1, dtype=cupy.int64)], backend="cuda")
    assert cupy.asnumpy(dst).tolist() == [2.0 * i for i in range(8)]
    dst[:] = -1.0
    with pytest.raises(OutOfBoundsError, match="store to 'dst'"):
        _copy_program(8).run([dst, src, cupy.ones(1, dtype=cupy.int64)], backend="cuda")
    assert (cupy.asnumpy(dst) == -1.0).all()
    with pytest.raises(ArgumentError, match="argument 'src': expected dtype float32"):
        _copy_program(8).run([dst, src.astype(cupy.float64), cupy.zeros(1, dtype=cupy.int64)], backend="cuda")
    with pytest.raises(ArgumentError, match="not C-contiguous"):
        _copy_program(4).run([dst[::2], src[:4], cupy.zeros(1, dtype=cupy.int64)], backend="cuda")
    with pytest.raises(ArgumentError, match="shares memory"):
        _copy_program(8).run([dst, dst, cupy.zeros(1, dtype=cupy.int64)], backend="cuda")


@requires_gpu
@pytest.mark.torch
def test_torch_tensors_in_place_timing_and_a_torch_stream():
    torch = pytest.importorskip("torch", reason="torch provides the CUDA tensors and streams of this test")
    from accy.runtime.cuda import default_state

    if default_state().driver.name != "cuda-core":
        pytest.skip("torch streams need the cuda-core driver (ACCY_CUDA_DRIVER=cuda-core)")
    src = torch.arange(8, dtype=torch.float32, device="cuda")
    dst = torch.zeros(8, dtype=torch.float32, device="cuda")
    off = torch.zeros(1, dtype=torch.int64, device="cuda")
    ms = _copy_program(8).run([dst, src, off], backend="cuda", timing=True)
    assert isinstance(ms, float) and ms >= 0
    assert dst.cpu().tolist() == [2.0 * i for i in range(8)]
    # on a side stream: torch's work before the launch is seen by it, and torch's after sees its result
    stream = torch.cuda.Stream()
    big = 1 << 22
    src, dst = torch.empty(big, device="cuda"), torch.empty(big, device="cuda")
    with torch.cuda.stream(stream):
        src.fill_(3.0)
        _copy_program(big).run([dst, src, off], backend="cuda", stream=stream)
        total = dst.sum()
    stream.synchronize()
    assert total.item() == 6.0 * big


@requires_gpu
def test_gpuarray_arguments_with_the_pycuda_driver():
    from accy.runtime.cuda import default_state

    if default_state().driver.name != "pycuda":
        pytest.skip("pycuda GPUArrays: with ACCY_CUDA_DRIVER=pycuda")
    import pycuda.driver as drv
    import pycuda.gpuarray as gpuarray

    with default_state():
        src = gpuarray.to_gpu(np.arange(8, dtype=np.float32))
        dst = gpuarray.zeros(8, np.float32)
        off = gpuarray.zeros(1, np.int64)
        stream = drv.Stream()
    ms = _copy_program(8).run([dst, src, off], backend="cuda", timing=True, stream=stream)
    assert isinstance(ms, float) and ms >= 0
    with default_state():
        assert dst.get().tolist() == [2.0 * i for i in range(8)]


@requires_gpu
def test_modules_are_cached_per_context():
    from accy.runtime.cuda import default_state

    state = default_state()
    entry = scaled_dot_product_f32(ScaledDotProduct(1, 2, 3, 2, 2))
    artifact = next(iter(entry.create_kernel_call_artifact(state).registry()))
    assert artifact.arch == state.arch
    assert state.load(artifact) is state.load(artifact)
