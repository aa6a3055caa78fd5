"""The PTX emulator (accy.emulator) on accy's own PTX (``emit_ptx``): the suite kernels and the
attention entries, launched exactly as ``accy/runtime/cuda.py`` launches them (device buffers,
counts, the status word) and compared with the NumPy interpreter; every instruction form accy
and libdevice emit is one the emulator executes."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from accy.codegen.machine import emit_ptx
from accy.runtime import run
from accy.targets import Target
from accy.emulator import Device, instruction_forms, unsupported
from accy.errors import OutOfBoundsError
from accy.library.attention import (ScaledDotProduct, ThreadBlocks, reference, scaled_dot_product_f32,
                                    scaled_dot_product_fused_f32)

from kernels import CASES

from emulator_support import ARCH, compile_ir, LIBDEVICE_F32, LIBDEVICE_F64, libdevice_kernel, NEEDS_PTXAS

pytestmark = NEEDS_PTXAS


# -- accy's own PTX, launched as the cuda backend launches it ----------------------------------------


def run_like_cuda(program, args, *, fast_exp=False, arch=ARCH, counts=None):
    """Run ``program`` on the ``ptx`` backend: the cuda backend's own host half (one device
    buffer per parameter, 8 readable bytes when empty, its element count, the zeroed status
    word; a non-zero status raises the interpreter's error; outputs copied back), with the
    emulator as the device."""
    run(program, args, backend="ptx", counts=counts, arch=arch, fast_math=fast_exp)


def case_inputs(case, shape, seed=0):
    inputs = case.inputs(np.random.default_rng(seed), shape)
    expected = np.asarray(case.reference(shape, **inputs)).reshape(-1)
    return inputs, expected


@pytest.mark.parametrize("case, shape", [pytest.param(c, s, id=f"{c.name}-{'x'.join(map(str, s))}")
                                         for c in CASES for s in c.shapes])
def test_suite_kernel_matches_interpreter(case, shape):
    inputs, expected = case_inputs(case, shape)
    emu = np.full(expected.size, np.nan, np.float32)
    cpu = np.full(expected.size, np.nan, np.float32)
    run_like_cuda(case.program(shape), {"dst": emu, **inputs})
    case.program(shape).run({"dst": cpu, **inputs}, backend="numpy")
    np.testing.assert_allclose(emu, expected, rtol=case.rtol, atol=case.atol, err_msg="emulator vs NumPy")
    np.testing.assert_allclose(emu, cpu, rtol=case.rtol, atol=case.atol, err_msg="emulator vs interpreter")


ATTENTION = [
    pytest.param(kind, causal, fast, id=f"{kind}-{'causal' if causal else 'full'}-{'fastexp' if fast else 'libdevice'}")
    for kind in ("naive", "fused") for causal in (False, True) for fast in (False, True)]


def _attention_entry(kind, spec):
    return (scaled_dot_product_f32 if kind == "naive" else scaled_dot_product_fused_f32)(spec)


@pytest.mark.parametrize("kind, causal, fast", ATTENTION)
def test_attention_matches_interpreter(kind, causal, fast):
    spec = ScaledDotProduct(2, 5, 7, 3, 4, threads=ThreadBlocks(4, 2, 1), causal=causal)
    entry = _attention_entry(kind, spec)
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal(s, dtype=np.float32) for s in ((2, 5, 3), (2, 7, 3), (2, 7, 4)))
    emu, cpu = np.zeros((2, 5, 4), np.float32), np.zeros((2, 5, 4), np.float32)
    shapes = entry.argument_shapes
    run_like_cuda(entry.program, [emu, q, k, v], fast_exp=fast,
                  counts={n: s.element_count() for n, s in shapes.items()})
    entry.run([cpu, q, k, v], backend="numpy")
    np.testing.assert_allclose(emu, reference(q, k, v, causal=causal), rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(emu, cpu, rtol=2e-5, atol=2e-6)


def test_out_of_bounds_reported_through_the_status_word():
    from accy import Program, axis, dynamic_buffer, f32, index

    def body(k, a):
        k.for_each_1d(axis("i", 8), lambda inner, idx: a.dst.store(inner, a.src[idx["i"]] * 2.0,
                                                                  idx["i"] + a.off[0]))

    prog = Program("emu_shifted_copy", {"dst": dynamic_buffer(f32), "src": dynamic_buffer(f32),
                                        "off": dynamic_buffer(index)}, body)
    src = np.arange(8, dtype=np.float32)
    dst = np.full(8, -1.0, np.float32)
    run_like_cuda(prog, [dst, src, np.zeros(1, np.int64)])
    assert dst.tolist() == [2.0 * i for i in range(8)]
    dst[:] = -1
    with pytest.raises(OutOfBoundsError) as emu_err:
        run_like_cuda(prog, [dst, src, np.ones(1, np.int64)])
    assert (dst == -1).all()
    with pytest.raises(OutOfBoundsError) as cpu_err:
        prog.run([dst, src, np.ones(1, np.int64)], backend="numpy")
    assert str(emu_err.value).split(" at ")[0] == str(cpu_err.value).split(" at ")[0]


def test_naive_attention_speed(capsys):
    """The brief's figure: naive attention 2x16x16x16x16 well under 70 ms here."""
    spec = ScaledDotProduct(2, 16, 16, 16, 16)
    entry = scaled_dot_product_f32(spec)
    launch = entry.launch()
    ptx = emit_ptx(entry.program.graph, Target.nvptx(ARCH), launch.block)
    dev = Device()
    fn = dev.load_module(ptx).function(entry.program.graph.name)
    rng = np.random.default_rng(3)
    arrays = [np.zeros((2, 16, 16), np.float32)] + [rng.standard_normal((2, 16, 16), dtype=np.float32)
                                                    for _ in range(3)]
    ptrs = []
    for a in arrays:
        ptrs.append(dev.alloc(a.nbytes))
        dev.copy_to_device(ptrs[-1], a)
    status = dev.alloc(32)
    args = ptrs + [a.size for a in arrays] + [status]
    best = math.inf
    for _ in range(3):
        t = time.perf_counter()
        fn.launch(launch.grid, launch.block, args, schedule="lockstep")  # the speed the docs quote
        best = min(best, time.perf_counter() - t)
    out = np.empty_like(arrays[0])
    dev.copy_from_device(out, ptrs[0])
    np.testing.assert_allclose(out, reference(*arrays[1:]), rtol=2e-5, atol=2e-6)
    with capsys.disabled():
        print(f"\n[ptx emulator] naive attention 2x16x16x16x16: {best * 1e3:.1f} ms per launch")
    assert best < 0.35, f"{best * 1e3:.0f} ms (the target on an idle core is well under 70 ms)"


def test_every_form_accy_and_libdevice_emit_is_supported():
    """instruction_forms / unsupported over the PTX of every suite kernel, both attention
    entries and the libdevice kernels above: nothing is left unsupported."""
    forms = set()
    for case in CASES:
        program = case.program(case.shapes[-1])
        forms |= instruction_forms(emit_ptx(program.graph, Target.nvptx(ARCH), program.launch().block))
    for kind, causal, fast in [p.values for p in ATTENTION]:
        entry = _attention_entry(kind, ScaledDotProduct(2, 5, 7, 3, 4, causal=causal))
        forms |= instruction_forms(emit_ptx(entry.program.graph, Target.nvptx(ARCH, fast_math=fast),
                                            entry.launch().block))
    for fns, ty in ((LIBDEVICE_F32, "float"), (LIBDEVICE_F64, "double")):
        forms |= instruction_forms(compile_ir(libdevice_kernel(fns, ty)))
    assert {"fma.rn.f32", "ld.global.nc.b32", "ex2.approx.ftz.f32", "fma.rn.f64", "call.uni"} <= forms
    assert unsupported(forms) == set()
    assert unsupported({"wmma.load.a.sync.aligned.row.m16n16k16.global.f16", "add.rn.f32"}) == {
        "wmma.load.a.sync.aligned.row.m16n16k16.global.f16"}
