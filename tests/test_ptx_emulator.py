"""The PTX emulator (accy.backends.ptx): PTX executed on the CPU must compute what the
GPU computes.

PTX comes three ways: (1) accy's own emission (``emit_ptx``) of the suite kernels
and the attention entries, launched exactly as ``accy/backends/cuda.py`` launches
them (device buffers, counts, the status word) and compared with the NumPy
interpreter; (2) LLVM IR written here and compiled with llvmlite's NVPTX target
(libdevice linked where used) for what accy will emit next: f16/bf16/f64,
8..64-bit integers, libdevice math, shared memory and barriers, atomics, warp
shuffles and votes, divergent control flow, calls; (3) hand-written PTX for
edge cases and exact numerics.  Every PTX run here is also assembled by ptxas.
"""

from __future__ import annotations

import functools
import math
import re
import time
from fractions import Fraction

import numpy as np
import pytest

from accy.backends import toolchain
from accy.backends.arguments import bind_arguments
from accy.backends.codegen import emit_ptx
from accy.backends.llvm import STATUS_WORDS, Target, status_error, total_lanes
from accy.backends.ptx import (Device, PtxBarrierError, PtxError, PtxMemoryError, instruction_forms,
                               unsupported)
from accy.backends.ptx import numerics as N
from accy.errors import AccyError, OutOfBoundsError
from accy.library.attention import (ScaledDotProduct, Threads3D, reference, scaled_dot_product_f32,
                                    scaled_dot_product_fused_f32)

from kernels import CASES

pytestmark = pytest.mark.skipif(toolchain.find_ptxas() is None, reason="no ptxas: pip install nvidia-cuda-nvcc")

ARCH = "sm_80"


@functools.cache
def assembled(ptx: str, arch: str = ARCH) -> str:
    """``ptx``, after checking that ptxas accepts it (every PTX a test runs must)."""
    toolchain.assemble(ptx, arch)
    return ptx


# -- (1) accy's own PTX, launched as the cuda backend launches it ------------------------------------


def run_like_cuda(program, args, *, fast_exp=False, arch=ARCH, counts=None, dev=None):
    """Run ``program`` on the emulator with cuda.py's marshalling: one device buffer per
    parameter (8 readable bytes when empty), its element count, the 4 x i64 status word
    (zeroed); a non-zero status raises the interpreter's error; outputs are copied back."""
    graph = program.graph
    binding = bind_arguments(graph, args, counts=counts)
    if total_lanes(graph) == 0:
        return
    launch = program.launch()
    ptx = emit_ptx(graph, Target.nvptx(arch, fast_exp=fast_exp), launch.block)  # conftest assembles it
    dev = dev or Device()
    fn = dev.load_module(ptx).function(graph.name)
    names = [p.name for p in graph.params]
    pointers = {}
    for name in names:
        info, array = binding.infos[name], binding.arrays[name]
        pointers[name] = p = dev.alloc(max(info.nbytes, 8))
        if info.nbytes:
            dev.copy_to_device(p, np.ascontiguousarray(array))
    status = dev.alloc(STATUS_WORDS * 8)
    dev.memset(status, 0, STATUS_WORDS * 8)
    assert fn.param_types == ("u64",) * (2 * len(names) + 1)
    fn.launch(launch.grid, launch.block, [pointers[n] for n in names] + [binding.infos[n].size for n in names]
              + [status])
    words = np.zeros(STATUS_WORDS, np.int64)
    dev.copy_from_device(words, status)
    error = status_error(graph, tuple(graph.body.walk()), words, {n: binding.infos[n].size for n in names})
    if error is not None:
        raise error
    for name in sorted(binding.outputs):
        if binding.infos[name].nbytes:
            dev.copy_from_device(binding.arrays[name], pointers[name])


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
    spec = ScaledDotProduct(2, 5, 7, 3, 4, threads=Threads3D(4, 2, 1), causal=causal)
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
        fn.launch(launch.grid, launch.block, args)
        best = min(best, time.perf_counter() - t)
    out = np.empty_like(arrays[0])
    dev.copy_from_device(out, ptrs[0])
    np.testing.assert_allclose(out, reference(*arrays[1:]), rtol=2e-5, atol=2e-6)
    with capsys.disabled():
        print(f"\n[ptx emulator] naive attention 2x16x16x16x16: {best * 1e3:.1f} ms per launch")
    assert best < 0.35, f"{best * 1e3:.0f} ms (the target on an idle core is well under 70 ms)"
