"""examples/tile_fp8_matmul.py: c = (a @ b.T) * scales for fp8 a (M, K) and b (N, K), against
float64 within the example's ``error_bound``: e4m3 and e5m2, per-tensor and per-row/column scales,
bf16 and f32 outputs, at sizes no tile divides, on numpy and llvm (f32 accumulation); on PTX at
sm_90a (the emulator) as fp8 wgmma, within the promoted bound; bad scales as an AccyError."""

from __future__ import annotations

import importlib.util
import itertools
import pathlib

import numpy as np
import pytest

import accy
from accy import bf16, f32, f8e4m3, f8e5m2
from accy.codegen.nvptx import toolchain

SCRIPT = pathlib.Path(__file__).resolve().parent.parent / "examples" / "tile_fp8_matmul.py"
_spec = importlib.util.spec_from_file_location("example_tile_fp8_matmul", SCRIPT)
fp8 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fp8)

NEEDS_PTXAS = pytest.mark.skipif(toolchain.find_ptxas() is None,
                                 reason="no ptxas, so no PTX to emulate: pip install nvidia-cuda-nvcc")
VARIANTS = list(itertools.product((f8e4m3, f8e5m2), fp8.SCALINGS, (bf16, f32)))


def _ids(v) -> str:
    return "-".join(map(str, v))


# each variant traced once (its compiled kernels are the program's own)
PROGRAMS = {v: fp8.make_fp8_matmul(*v, bm=64, bn=64, bk=128, warps=4) for v in VARIANTS}


@pytest.mark.parametrize("backend", ["numpy", "llvm"])
@pytest.mark.parametrize("variant", VARIANTS, ids=_ids)
def test_odd_sizes_match_float64_within_the_f32_accumulation_bound(variant, backend):
    program = PROGRAMS[variant]
    inputs = fp8.random_inputs(program, 200, 136, 300, np.random.default_rng(3))
    assert fp8.check(program, *inputs, backend) <= 1.0


def test_the_bound_is_the_final_rounding_when_the_output_is_bf16():
    """bf16's half ulp dominates: the error reaches most of it, so the bound is no looser than it
    must be; with f32 out, the error is far inside the gamma_K part."""
    for out, lo, hi in ((bf16, 0.5, 1.0), (f32, 0.0, 0.1)):
        program = PROGRAMS[(f8e4m3, "rowcol", out)]
        inputs = fp8.random_inputs(program, 200, 136, 300, np.random.default_rng(5))
        assert lo <= fp8.check(program, *inputs, "numpy") <= hi


def test_a_row_of_zeros_and_large_scales():
    """fp8's extremes: 448 (e4m3's largest) times large scales stays finite in f32 and bf16; rows of
    zeros give zeros."""
    program = PROGRAMS[(f8e4m3, "rowcol", bf16)]
    rng = np.random.default_rng(8)
    a, b, sa, sb = fp8.random_inputs(program, 70, 90, 160, rng)
    a[:, 3] = f8e4m3.max
    a[5] = 0
    sa[:] = 2.0 ** 20
    c = np.full((70, 90), np.nan, bf16.numpy)
    fp8.fp8_matmul(program, c, a, b, sa, sb, backend="llvm")
    assert np.all(c[5] == 0) and np.all(np.isfinite(c.astype(np.float32)))
    assert fp8.check(program, a, b, sa, sb, "llvm") <= 1.0


@NEEDS_PTXAS
@pytest.mark.parametrize("dtype, scaling, out", [(f8e4m3, "tensor", bf16), (f8e5m2, "rowcol", f32)], ids=str)
def test_runs_as_fp8_wgmma_on_ptx_at_sm_90a_within_the_promoted_bound(dtype, scaling, out):
    program = PROGRAMS[(dtype, scaling, out)]
    kind = dtype.name[2:]
    ptx = program.ptx("sm_90a")
    assert "wgmma.mma_async" in ptx and f".{kind}.{kind}" in ptx
    inputs = fp8.random_inputs(program, 128, 128, 256, np.random.default_rng(13))
    assert fp8.check(program, *inputs, "ptx", arch="sm_90a") <= 1.0


@pytest.mark.parametrize("scaling", fp8.SCALINGS)
def test_the_default_hopper_tiling_lowers_to_fp8_wgmma(scaling):
    """128x128x128 on 8 warps: the bf16 tile's store and the per-row and per-column scales fit
    beside the operands in the program's shared memory."""
    ptx = fp8.make_fp8_matmul(scaling=scaling).ptx("sm_90a")
    assert "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in ptx


def test_examples_programs_run_on_numpy():
    for program in fp8.PROGRAMS:
        inputs = fp8.random_inputs(program, 65, 33, 100, np.random.default_rng(1))
        assert fp8.check(program, *inputs, "numpy") <= 1.0


@pytest.mark.parametrize("scaling, a_scale, b_scale, message", [
    ("rowcol", np.ones(199, np.float32), np.ones(136, np.float32), r"'a_scale' must be an f32 array of shape \(200,\)"),
    ("rowcol", np.ones(200, np.float32), np.ones((1, 136), np.float32), r"'b_scale' must be an f32 array of shape \(136,\)"),
    ("rowcol", np.ones(200, np.float64), np.ones(136, np.float32), r"'a_scale' must be an f32 array"),
    ("rowcol", 2.0, np.ones(136, np.float32), r"'a_scale' must be an f32 array of shape \(200,\)"),
    ("tensor", np.ones(200, np.float32), 1.0, r"'a_scale' must be a Python or f32 scalar"),
    ("tensor", 1.0, np.ones(1, np.float32), r"'b_scale' must be a Python or f32 scalar"),
])
def test_a_scale_of_the_wrong_shape_is_an_argument_error(scaling, a_scale, b_scale, message):
    program = PROGRAMS[(f8e4m3, scaling, bf16)]
    a, b, _, _ = fp8.random_inputs(program, 200, 136, 300, np.random.default_rng(0))
    c = np.zeros((200, 136), bf16.numpy)
    with pytest.raises(accy.AccyError, match=message):
        fp8.fp8_matmul(program, c, a, b, a_scale, b_scale)
    assert not c.any()  # nothing ran


def test_operands_of_the_wrong_shape_or_type_are_argument_errors():
    program = PROGRAMS[(f8e4m3, "tensor", f32)]
    a, b, sa, sb = fp8.random_inputs(program, 20, 30, 40, np.random.default_rng(0))
    c = np.zeros((20, 30), np.float32)
    with pytest.raises(accy.AccyError, match=r"'b' must be \(N, K\) = \(N, 40\).*TN"):
        fp8.fp8_matmul(program, c, a, np.ascontiguousarray(b.T), sa, sb)
    with pytest.raises(accy.AccyError, match=r"'c' must be \(M, N\) = \(20, 30\)"):
        fp8.fp8_matmul(program, np.zeros((30, 20), np.float32), a, b, sa, sb)
    with pytest.raises(accy.AccyError, match=r"'a' must be a 2-D f8e4m3 array"):
        fp8.fp8_matmul(program, c, a.astype(np.float32), b, sa, sb)
    with pytest.raises(accy.AccyError, match="dtype must be f8e4m3 or f8e5m2"):
        fp8.make_fp8_matmul(bf16)
    with pytest.raises(accy.AccyError, match="scaling must be one of"):
        fp8.make_fp8_matmul(scaling="block")
