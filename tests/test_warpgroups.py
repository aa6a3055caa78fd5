"""Hopper's warpgroup tensor cores (issue 34): ``t.dot`` on ``wgmma`` at sm_90a.

The staged layouts are checked against the hardware's swizzle written out here from the PTX
ISA (XOR of address bits); the distributed graphs run on the numpy backend (the ``wgmma`` op's
reference, accy/runtime/interpreter/warp_matrix.py) and their PTX on ``ptx`` (the emulator,
which implements wgmma and its descriptors from the ISA on its own), each against NumPy in
float64; every PTX assembles with ptxas at sm_90a.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import accy
from accy import axis, bf16, cdiv, f16, f32, i8, i32
from accy.codegen.nvptx import toolchain
from accy.dsl.warpgroups import staged_offset
from accy.library import AttentionTiles, ScaledDotProduct, scaled_dot_product_tile
from accy.lowering.layouts import Mma
from accy.lowering.warpgroups import SwizzledRows
from accy.runtime import bind_arguments, get_backend, resolve_launch
from accy.runtime.interpreter import warp_matrix
from accy.runtime.tensor_arguments import expand_tensor_arguments
from accy.targets import Target, device_arch
from accy.dsl.ops import MmaKind
from tile_kernels import matmul_program

NEEDS_PTXAS = pytest.mark.skipif(toolchain.find_ptxas() is None, reason="no ptxas: pip install nvidia-cuda-nvcc")
ARCH = "sm_90a"


# -- the staged layouts ---------------------------------------------------------------------------
def _hardware(byte: int, swizzle: int) -> int:
    """The ISA's swizzle on a byte address: bits 4.. XOR bits 7.. (3, 2 or 1 of them)."""
    bits = {128: 3, 64: 2, 32: 1}[swizzle]
    return byte ^ (((byte >> 7) & ((1 << bits) - 1)) << 4)


@pytest.mark.parametrize("swizzle, itemsize", list(itertools.product((32, 64, 128), (1, 2, 4))))
def test_a_staged_block_is_the_swizzled_rows_the_hardware_reads(swizzle, itemsize):
    per_row = swizzle // itemsize
    rows, chunks = 16, 3
    chunk = rows * per_row
    places = set()
    for r, c in itertools.product(range(rows), range(chunks * per_row)):
        linear = (c // per_row * chunk + r * per_row + c % per_row) * itemsize
        want = _hardware(linear, swizzle) // itemsize
        got = staged_offset(r, c, swizzle, chunk, itemsize)
        assert got == want and _hardware(linear, swizzle) % itemsize == linear % itemsize
        places.add(got)
    assert places == set(range(rows * chunks * per_row))  # every element a place of its own


@pytest.mark.parametrize("warps, m", [(4, 64), (4, 128), (8, 128), (8, 256), (4, 256)])
def test_a_rows_are_staged_where_the_wgmma_fragment_gives_the_mma_layout_its_rows(warps, m):
    """Staged row P of warpgroup g's block q holds logical row R where the warpgroup's D fragment
    row P (warp w: 16 w + l // 4, + 8) is the row the Mma layout gives that thread's register."""
    rows = SwizzledRows(128, m * 64, 2, warps, m)
    positions = [rows.position(None, None, r) for r in range(m)]
    assert sorted(positions) == list(range(m))
    layout = Mma((m, 8), warps * 32)
    per_group = m // (64 * (warps // 4))
    for t in range(warps * 32):
        group, within = divmod(t, 128)
        for q, i in itertools.product(range(per_group), range(4)):
            frag_row, frag_col = (int(x[within]) for x in warp_matrix.wgmma_position(MmaKind.BF16, i, "d"))
            register = layout.register((2 * q + (i >> 1) % 2, i % 2))
            (row, col), _ = layout.element_of(t, register)
            assert positions[row] == (group * per_group + q) * 64 + frag_row and col == frag_col


# -- the distributed graphs on the numpy backend ---------------------------------------------------
def run_lowered(program, args, arch=ARCH):
    """The graph ptx compiles for ``arch``, run on the numpy backend; returns it."""
    graph = program.lowered(Target.nvptx(arch))
    impl = get_backend("numpy")
    args = expand_tensor_arguments(graph, args)
    binding = bind_arguments(graph, args)
    impl.execute(graph, binding, resolve_launch(graph, program.threads, binding, None), **impl.checked_options({}))
    return graph


def products(graph) -> tuple[int, int]:
    ops = [op.opcode for op in graph.body.walk()]
    return ops.count("wgmma"), ops.count("mma")


def _inputs(dtype, shape, rng):
    if dtype == i8:
        return rng.integers(-128, 128, shape).astype(np.int8)
    return rng.standard_normal(shape).astype(dtype.numpy)


def _check(c, a, b, dtype, k):
    want = a.astype(np.float64) @ b.astype(np.float64)
    if dtype == i8:
        np.testing.assert_array_equal(c, want.astype(np.int64).astype(np.int32))
        return
    u = 2.0**-11 if dtype == f32 else 2.0**-24  # tf32 rounds its inputs to 10 fraction bits
    bound = (2 * k * 2.0**-24 + 2 * u) * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))) + 1e-30
    assert np.all(np.abs(c - want) <= bound)


# (name, input dtype, accumulator, bm x bn x bk on warps, stages, B transposed, precision, M, N, K)
MATMULS = [
    ("bf16 128x128x64 8 warps", bf16, f32, (128, 128, 64, 8), 3, False, None, (256, 256, 192)),
    ("bf16 64x64x32 4 warps", bf16, f32, (64, 64, 32, 4), 2, False, None, (128, 64, 96)),
    ("f16 64x32x16", f16, f32, (64, 32, 16, 4), 1, False, None, (64, 64, 48)),
    ("f16 128x64x64 4 warps, B transposed", f16, f32, (128, 64, 64, 4), 2, True, None, (128, 128, 128)),
    ("bf16 64x256x32 with tails", bf16, f32, (64, 256, 32, 4), 2, False, None, (100, 300, 70)),
    ("tf32 64x64x32, B transposed", f32, f32, (64, 64, 32, 4), 2, True, "tf32", (64, 128, 64)),
    ("i8 64x64x64, B transposed", i8, i32, (64, 64, 64, 4), 2, True, None, (128, 64, 128)),
]


def _program(case):
    name, dtype, acc, (bm, bn, bk, warps), stages, transposed, precision, _ = case
    return matmul_program(dtype, acc, bm, bn, bk, warps, precision, transposed=transposed, stages=stages)


def _args(case, rng):
    name, dtype, acc, _, _, transposed, _, (M, N, K) = case
    a = _inputs(dtype, (M, K), rng)
    b = _inputs(dtype, (N, K) if transposed else (K, N), rng)
    return a, b, np.zeros((M, N), acc.numpy)


@pytest.mark.parametrize("case", MATMULS, ids=[c[0] for c in MATMULS])
def test_tile_matmuls_on_warpgroups_agree_with_numpy(case):
    rng = np.random.default_rng(7)
    a, b, c = _args(case, rng)
    graph = run_lowered(_program(case), dict(c=c, a=a, b=b))
    assert products(graph)[0] > 0 and products(graph)[1] == 0  # every product on wgmma
    _check(c, a, b.T if case[5] else b, case[1], a.shape[1])


def test_a_dot_wgmma_cannot_take_stays_on_mma_sync():
    """One warp is no warpgroup, nor are 64 rows on 8 warps: both keep mma.sync at sm_90a, and
    still agree."""
    rng = np.random.default_rng(2)
    for program, (M, N, K) in ((matmul_program(bf16, f32, 16, 16, 16, 1), (32, 32, 32)),
                               (matmul_program(bf16, f32, 64, 64, 32, 8), (64, 64, 64))):
        a, b = _inputs(bf16, (M, K), rng), _inputs(bf16, (K, N), rng)
        c = np.zeros((M, N), np.float32)
        graph = run_lowered(program, dict(c=c, a=a, b=b))
        assert products(graph)[0] == 0 and products(graph)[1] > 0
        _check(c, a, b, bf16, K)


@NEEDS_PTXAS
@pytest.mark.parametrize("dtype, acc, precision", [(f32, f32, "tf32"), (i8, i32, None)], ids=["tf32", "i8"])
def test_a_tf32_or_i8_b_in_k_rows_is_staged_transposed_for_wgmma(dtype, acc, precision):
    """The ISA transposes 16-bit operands only: a tf32 or i8 B loaded as k rows of n is staged
    K-major through registers, on numpy and on the emulator."""
    rng = np.random.default_rng(12)
    program = matmul_program(dtype, acc, 64, 64, 32 if dtype == f32 else 64, 4, precision)
    a, b = _inputs(dtype, (128, 128), rng), _inputs(dtype, (128, 64), rng)
    graph = program.lowered(Target.nvptx(ARCH))
    assert products(graph) == (products(graph)[0], 0) and products(graph)[0] > 0
    assert {op.attrs.b_major.value for op in graph.body.walk() if op.opcode == "wgmma"} == {"k"}
    for run in (lambda args: run_lowered(program, args), lambda args: program.run(args, backend="ptx", arch=ARCH)):
        c = np.zeros((128, 64), acc.numpy)
        run(dict(c=c, a=a, b=b))
        _check(c, a, b, dtype, 128)


@pytest.mark.parametrize("head, block_q, block_k, warps", [(64, 64, 64, 4), (128, 64, 64, 4), (64, 128, 64, 8)])
def test_the_attention_entry_on_warpgroups_agrees_with_its_tile_reference(head, block_q, block_k, warps):
    rng = np.random.default_rng(head)
    spec = ScaledDotProduct(2, 128, 192, head, head)
    program = scaled_dot_product_tile(spec, bf16, AttentionTiles(block_q, block_k, warps)).program
    q = rng.standard_normal((2, 128, head)).astype(bf16.numpy)
    k, v = (rng.standard_normal((2, 192, head)).astype(bf16.numpy) for _ in range(2))
    out, want = np.zeros_like(q), np.zeros_like(q)
    graph = run_lowered(program, dict(dst=out, query=q, key=k, value=v))
    assert products(graph)[0] > 0 and products(graph)[1] == 0
    program.run(dict(dst=want, query=q, key=k, value=v), backend="numpy")
    np.testing.assert_allclose(out.astype(np.float32), want.astype(np.float32), atol=2e-2, rtol=2e-2)


# -- the PTX -----------------------------------------------------------------------------------------
@NEEDS_PTXAS
def test_the_wgmma_ptx_assembles_without_spills():
    for program in [_program(c) for c in MATMULS[:2]] + [scaled_dot_product_tile(
            ScaledDotProduct(2, 128, 128, 128, 128), bf16, AttentionTiles(64, 64, 4)).program]:
        ptx = program.ptx(ARCH)
        assert ".target sm_90a" in ptx and "wgmma.mma_async.sync.aligned.m64n" in ptx
        assert "wgmma.wait_group.sync.aligned 0;" in ptx and "fence.proxy.async.shared::cta;" in ptx
        used = toolchain.resources(ptx, ARCH)
        assert used.spill_stores == used.spill_loads == 0


def test_a_hopper_gpu_compiles_for_sm_90a_and_others_keep_their_arch():
    assert device_arch(9, 0) == "sm_90a" and device_arch(8, 0) == "sm_80" and device_arch(12, 0) == "sm_120"
    assert Target.nvptx("sm_90a").capabilities.wgmma and not Target.nvptx("sm_90").capabilities.wgmma


def test_the_sm_90_target_keeps_mma_sync():
    rng = np.random.default_rng(1)
    case = MATMULS[1]
    a, b, c = _args(case, rng)
    graph = run_lowered(_program(case), dict(c=c, a=a, b=b), arch="sm_90")
    assert products(graph)[0] == 0 and products(graph)[1] > 0


# -- the PTX on the emulator, which reads wgmma's descriptors as the ISA defines them -------------
@NEEDS_PTXAS
@pytest.mark.parametrize("case", MATMULS, ids=[c[0] for c in MATMULS])
def test_tile_matmuls_sm_90a_ptx_on_the_emulator_agree_with_numpy(case):
    rng = np.random.default_rng(7)
    a, b, c = _args(case, rng)
    _program(case).run(dict(c=c, a=a, b=b), backend="ptx", arch=ARCH)
    _check(c, a, b.T if case[5] else b, case[1], a.shape[1])


@NEEDS_PTXAS
@pytest.mark.parametrize("head, block_q, block_k, warps", [(64, 64, 64, 4), (128, 64, 64, 4), (64, 128, 64, 8)])
def test_the_attention_entry_sm_90a_ptx_on_the_emulator_agrees_with_float64(head, block_q, block_k, warps):
    """The library's tile attention, its two dots on wgmma (P@V's A held in registers), against
    the float64 reference within bf16's output rounding and the scores' f32 sums."""
    rng = np.random.default_rng(head + warps)
    spec = ScaledDotProduct(2, 96, 160, head, head)
    program = scaled_dot_product_tile(spec, bf16, AttentionTiles(block_q, block_k, warps)).program
    q = rng.standard_normal((2, 96, head)).astype(bf16.numpy)
    k, v = (rng.standard_normal((2, 160, head)).astype(bf16.numpy) for _ in range(2))
    out = np.zeros_like(q)
    program.run(dict(dst=out, query=q, key=k, value=v), backend="ptx", arch=ARCH)
    scores = q.astype(np.float64) @ np.swapaxes(k.astype(np.float64), 1, 2) / np.sqrt(head)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    want = (weights / weights.sum(-1, keepdims=True)) @ v.astype(np.float64)
    # P is rounded to bf16 before P@V (2**-8 relative), the output too
    np.testing.assert_allclose(out.astype(np.float64), want, atol=2**-6, rtol=2**-6)


@NEEDS_PTXAS
def test_the_examples_bf16_tile_matmul_at_sm_90a_on_the_emulator_is_within_its_bound():
    """examples/tile_matmul.py's bf16 program (128 x 128 x 64 tiles, 8 warps, 3 stages: two
    warpgroups, a pipelined fold) by the example's own check, with a K tail."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parent.parent / "examples" / "tile_matmul.py"
    spec = importlib.util.spec_from_file_location("example_tile_matmul", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rng = np.random.default_rng(5)
    a, b = (rng.standard_normal(s).astype(bf16.numpy) for s in ((130, 200), (200, 140)))
    graph = module.tile_matmul_bf16.graph_for("ptx", ARCH)
    assert products(graph)[0] > 0 and products(graph)[1] == 0
    c = np.zeros((130, 140), np.float32)
    module.tile_matmul_bf16.run([c, a, b], backend="ptx", arch=ARCH)
    _check(c, a, b, bf16, 200)


# -- fp8 on wgmma: e4m3 and e5m2 as they are, partial sums promoted to f32 -------------------------
FP8_FRACTION_BITS = 13  # the emulator's model of Hopper's fp8 accumulation (accy/emulator/wgmma.py)


def _fp8_bound(a, b, steps):
    """Each wgmma of a chunk of ``steps`` k32-steps may lose 2**-13 of its partial sum (the chunk
    starts from zero), then the chunks add in f32: within (steps 2**-13 + K 2**-24) |A| |B|."""
    k = a.shape[1]
    return (steps * 2.0**-FP8_FRACTION_BITS + 2 * k * 2.0**-24) * (np.abs(a.astype(np.float64))
                                                                   @ np.abs(b.astype(np.float64)))


@NEEDS_PTXAS
@pytest.mark.parametrize("dtype", [accy.f8e4m3, accy.f8e5m2], ids=str)
def test_fp8_matmuls_run_as_fp8_wgmma_within_the_promoted_bound(dtype):
    from accy.lowering.warpgroups import FP8_PROMOTION_STEPS

    rng = np.random.default_rng(11)
    program = matmul_program(dtype, f32, 64, 64, 128, 4)
    a, b = (rng.standard_normal(s).astype(dtype.numpy) for s in ((128, 512), (512, 64)))
    c, c_ptx = np.zeros((128, 64), np.float32), np.zeros((128, 64), np.float32)
    graph = run_lowered(program, dict(c=c, a=a, b=b))
    assert {op.attrs.kind.value for op in graph.body.walk() if op.opcode == "wgmma"} == {dtype.name[2:]}
    assert f"k32.f32.{dtype.name[2:]}.{dtype.name[2:]}" in program.ptx(ARCH)
    program.run(dict(c=c_ptx, a=a, b=b), backend="ptx", arch=ARCH)
    want = a.astype(np.float64) @ b.astype(np.float64)
    _check(c, a, b, accy.f16, 512)  # the reference sums exactly
    assert np.all(np.abs(c_ptx - want) <= _fp8_bound(a, b, FP8_PROMOTION_STEPS))


@pytest.mark.full
@NEEDS_PTXAS
def test_promoting_fp8_partial_sums_more_often_loses_less(monkeypatch):
    """On the emulator's model, chunks of 4 k-steps lose less than one chunk of the trip's 8."""
    import accy.lowering.warpgroups as warpgroups

    rng = np.random.default_rng(4)
    a, b = (rng.standard_normal(s).astype(accy.f8e4m3.numpy) for s in ((64, 2048), (2048, 64)))
    want = a.astype(np.float64) @ b.astype(np.float64)
    errors = []
    for steps in (4, 8):
        monkeypatch.setattr(warpgroups, "FP8_PROMOTION_STEPS", steps)
        c = np.zeros((64, 64), np.float32)
        matmul_program(accy.f8e4m3, f32, 64, 64, 256, 4).run(dict(c=c, a=a, b=b), backend="ptx", arch=ARCH)
        assert np.all(np.abs(c - want) <= _fp8_bound(a, b, steps))
        errors.append(np.abs(c - want).mean())
    assert errors[0] < 0.8 * errors[1]


# -- what the review found (a fold's stage shared with mma.sync, A staged before a nested fold,
# the shared budget, integer N) -------------------------------------------------------------------
def _both(program, args, outputs, want, atol):
    """``program`` on the sm_90a graph (numpy) and its PTX (the emulator): each output near ``want``."""
    for run in (lambda a: run_lowered(program, a), lambda a: program.run(a, backend="ptx", arch=ARCH)):
        fresh = {k: (np.zeros_like(v) if k in outputs else v) for k, v in args.items()}
        run(fresh)
        for name in outputs:
            np.testing.assert_allclose(fresh[name], want[name], atol=atol)


@NEEDS_PTXAS
@pytest.mark.parametrize("wgmma_first", [True, False])
def test_a_stage_shared_with_an_mma_sync_dot_keeps_the_wgmma_blocks_aligned(wgmma_first):
    """One fold, c = a @ b on wgmma and d = a @ b2 (8 columns: mma.sync) staged in one stage:
    every part of it starts on the swizzle's 1024-byte span, whichever comes first."""

    @accy.kernel(c=accy.tensor(f32, 2), d=accy.tensor(f32, 2), a=accy.tensor(bf16, 2), b=accy.tensor(bf16, 2),
                 b2=accy.tensor(bf16, 2))
    def mixed(k, p):
        @k.for_each_tile(grid=(axis("m", cdiv(p.a.shape[0], 64)),), warps=4, num_stages=3)
        def body(t, pid):
            def step(t, k0, accs):
                acc, acc2 = accs
                a = p.a.load_tile((pid["m"] * 64, k0), (64, 32))
                b, b2 = p.b.load_tile((k0, 0), (32, 64)), p.b2.load_tile((k0, 0), (32, 8))
                if wgmma_first:
                    return t.dot(a, b, acc), t.dot(a, b2, acc2)
                acc2 = t.dot(a, b2, acc2)
                return t.dot(a, b, acc), acc2

            acc, acc2 = t.fold_range(0, p.a.shape[1], 32, (t.zeros((64, 64), f32), t.zeros((64, 8), f32)), step)
            p.c.store_tile((pid["m"] * 64, 0), acc)
            p.d.store_tile((pid["m"] * 64, 0), acc2)

    assert products(mixed.lowered(Target.nvptx(ARCH))) == (2, 2)  # a trip's two k-steps each: one wgmma, one mma
    rng = np.random.default_rng(8)
    a, b, b2 = (rng.standard_normal(s).astype(bf16.numpy) for s in ((64, 128), (128, 64), (128, 8)))
    want = {"c": a.astype(np.float64) @ b.astype(np.float64), "d": a.astype(np.float64) @ b2.astype(np.float64)}
    _both(mixed, dict(c=np.zeros((64, 64), np.float32), d=np.zeros((64, 8), np.float32), a=a, b=b, b2=b2),
          ("c", "d"), want, 1e-4)


@NEEDS_PTXAS
def test_an_a_staged_before_a_fold_nested_in_a_fold_is_staged_each_outer_trip():
    """A loaded in an outer fold's trip, the inner fold's wgmma reading it from shared memory: the
    outer fold's trial walk (its natural layouts) must not leave the staging behind."""

    @accy.kernel(c=accy.tensor(f32, 2), a=accy.tensor(bf16, 2), b=accy.tensor(bf16, 2))
    def nested(k, p):
        @k.for_each_tile(grid=(axis("m", 1),), warps=8, num_stages=2)
        def body(t, pid):
            def outer(t, j, out):
                a = p.a.load_tile((j, 0), (128, 64))
                return t.fold_range(0, p.b.shape[1], 64, out, lambda t, n0, acc: t.dot(
                    a, p.b.load_tile((0, n0), (64, 64)), acc))

            p.c.store_tile((0, 0), t.fold_range(0, p.a.shape[0], 128, t.zeros((128, 64), f32), outer))

    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((384, 64)).astype(bf16.numpy), rng.standard_normal((64, 128)).astype(bf16.numpy)
    af, bf = a.astype(np.float64), b.astype(np.float64)
    want = sum(af[j:j + 128] @ bf[:, n:n + 64] for j in range(0, 384, 128) for n in range(0, 128, 64))
    _both(nested, dict(c=np.zeros((128, 64), np.float32), a=a, b=b), ("c",), {"c": want}, 1e-3)


def test_the_stages_leave_room_for_an_a_staged_before_the_fold():
    """A 128 x 256 A staged before an 8-stage fold: the stages give way to it, within sm_90's 227 KiB."""
    from accy.codegen.abi import shared_offsets

    @accy.kernel(c=accy.tensor(f32, 2), a=accy.tensor(bf16, 2), b=accy.tensor(bf16, 2))
    def hoisted(k, p):
        @k.for_each_tile(grid=(axis("m", cdiv(p.a.shape[0], 128)),), warps=8, num_stages=8)
        def body(t, pid):
            a = p.a.load_tile((pid["m"] * 128, 0), (128, 256))
            acc = t.fold_range(0, p.b.shape[1], 64, t.zeros((128, 64), f32),
                               lambda t, n0, acc: t.dot(a, p.b.load_tile((0, n0), (256, 64)), acc))
            p.c.store_tile((pid["m"] * 128, 0), acc)

    graph = hoisted.lowered(Target.nvptx(ARCH))
    assert products(graph)[0] > 0 and shared_offsets(graph)[1] <= Target.nvptx(ARCH).limits.dynamic_shared


def test_integer_wgmma_takes_only_the_isas_n():
    """Integer wgmma has N 8, 16, 24 and multiples of 16: an i8 dot 40 wide stays on mma.sync, and
    the op refuses the shape."""
    from accy.dsl.ops import Major, OpTypeError, WgmmaAttrs, wgmma_n

    assert wgmma_n(MmaKind.S8, 24) and wgmma_n(MmaKind.S8, 48) and not wgmma_n(MmaKind.S8, 40)
    assert wgmma_n(MmaKind.BF16, 40)
    graph = matmul_program(i8, i32, 64, 40, 64, 4, transposed=True).lowered(Target.nvptx(ARCH))
    assert products(graph)[0] == 0 and products(graph)[1] > 0
    from accy.dsl.ops import _wgmma
    attrs_ = WgmmaAttrs(kind=MmaKind.S8, n=40, a_shared="x", b_shared="x", a_swizzle=32, a_chunk=2048,
                        b_major=Major.K, b_swizzle=32, b_chunk=1280)
    with pytest.raises(OpTypeError, match="no N of 40"):
        _wgmma(None, [], attrs_)
