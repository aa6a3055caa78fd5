"""Backend comparison: every kernel of the suite and every library entry, on every CPU
backend, against the NumPy reference and against each other."""

import itertools

import numpy as np
import pytest

from accy.codegen.machine import emit_ptx
from accy.targets import Target
from accy.library.attention import (
    ScaledDotProduct,
    Threads3D,
    reference,
    scaled_dot_product_f32,
    scaled_dot_product_fused_f32,
)

from conftest import BACKENDS
from kernels import CASES, run_case

CASE_SHAPES = [pytest.param(case, shape, id=f"{case.name}-{'x'.join(map(str, shape))}")
               for case in CASES for shape in case.shapes]


@pytest.mark.parametrize("case, shape", CASE_SHAPES)
def test_suite_kernel_matches_reference_on_every_backend(case, shape):
    outputs = {}
    for backend in BACKENDS:
        out, expected = run_case(case, shape, backend)
        np.testing.assert_allclose(out, expected, rtol=case.rtol, atol=case.atol, err_msg=f"{backend} vs NumPy")
        outputs[backend] = out
    for a, b in itertools.combinations(BACKENDS, 2):
        # the backends evaluate the same ops in the same order: only exp/sqrt may differ by an ulp
        np.testing.assert_allclose(outputs[a], outputs[b], rtol=case.rtol, atol=case.atol, err_msg=f"{a} vs {b}")


ATTENTION_SHAPES = [(2, 2, 3, 2, 2), (1, 7, 5, 3, 9), (3, 16, 31, 8, 4), (4, 64, 64, 32, 32)]


ENTRIES = [pytest.param(make, causal, id=f"{make.__name__.split('_')[-2]}{'-causal' if causal else ''}")
           for make in (scaled_dot_product_f32, scaled_dot_product_fused_f32) for causal in (False, True)]


@pytest.mark.parametrize("make, causal", ENTRIES)
@pytest.mark.parametrize("shape", ATTENTION_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_attention_entry_agrees_across_backends(shape, make, causal):
    b, q, k, h, v = shape
    entry = make(ScaledDotProduct(*shape, threads=Threads3D(8, 4, 1), causal=causal))
    rng = np.random.default_rng(7)
    args = [rng.standard_normal(s, dtype=np.float32) for s in ((b, q, h), (b, k, h), (b, k, v))]
    expected = reference(*args, causal=causal)
    outputs = {}
    for backend in BACKENDS:
        dst = np.full((b, q, v), np.nan, np.float32)
        entry.run([dst, *args], backend=backend)
        np.testing.assert_allclose(dst, expected, rtol=1e-5, atol=2e-6, err_msg=backend)
        outputs[backend] = dst
    for x, y in itertools.combinations(BACKENDS, 2):
        np.testing.assert_allclose(outputs[x], outputs[y], rtol=1e-6, atol=1e-6, err_msg=f"{x} vs {y}")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("fast_math", [False, True], ids=["libdevice", "fast-math"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_suite_kernel_lowers_to_ptx_that_ptxas_accepts(case, arch, fast_math):
    program = case.program(case.shapes[-1])
    ptx = emit_ptx(program.graph, Target.nvptx(arch, fast_math=fast_math), program.launch().block)
    assert f".target {arch}" in ptx and f".entry {program.name}(" in ptx  # ptxas ran in the listener


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("checks", [True, False], ids=["checked", "unchecked"])
@pytest.mark.parametrize("make, causal", ENTRIES)
def test_attention_lowers_to_ptx(arch, checks, make, causal):
    entry = make(ScaledDotProduct(3, 16, 31, 8, 4, causal=causal))
    ptx = emit_ptx(entry.program.graph, Target.nvptx(arch, checks=checks), entry.launch().block)
    assert ".maxntid 32, 8, 1" in ptx
    assert ("atom" in ptx) == checks  # the status word is written with a compare-and-swap
