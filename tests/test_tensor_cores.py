"""Tensor cores (issue 19 §1): ``t.dot`` on ``mma.sync`` in the tile distribution for NVPTX at
sm_80 and later, operands through ``ldmatrix``.

The fragment layouts are checked against the PTX ISA's formulas written out here; the
distributed graphs run on the numpy backend (accy/runtime/interpreter/warp_matrix.py, the ops' reference)
and on ptx (the emulator, which implements the instructions from the ISA on its own), each
against NumPy in float64 within the dot bound (exact for integers).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import accy
from accy import axis, bf16, f16, f32, f8e4m3, f8e4m3fnuz, i8, i32
from accy.runtime import bind_arguments
from accy.runtime import get_backend
from accy.runtime import resolve_launch
from accy.codegen.nvptx import toolchain
from accy.runtime.interpreter import warp_matrix
from accy.lowering.layouts import Mma
from accy.runtime.tensor_arguments import expand_tensor_arguments
from accy.dsl.ops import MMA_SYNC_KINDS, MmaKind
from accy.library import ScaledDotProduct, scaled_dot_product_tile
from accy.library.attention import reference
from tile_kernels import matmul_program

NEEDS_PTXAS = pytest.mark.skipif(toolchain.find_ptxas() is None, reason="no ptxas: pip install nvidia-cuda-nvcc")


# -- the fragment layouts, as the PTX ISA gives them ---------------------------------------------


def _isa_a(kind, lane, i):
    g, t = lane >> 2, lane % 4
    if kind is MmaKind.TF32:  # m16n8k8 .tf32
        return g + 8 * (i % 2), t + 4 * (i // 2)
    if kind is MmaKind.S8:  # m16n8k32 .s8: a0..a3 row g, a4..a7 row g+8, a8.. the next 16 columns
        return g + 8 * ((i // 4) % 2), 4 * t + i % 4 + 16 * (i // 8)
    return g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)  # m16n8k16, as issue 19 states it


def _isa_b(kind, lane, i):
    g, t = lane >> 2, lane % 4
    if kind is MmaKind.TF32:
        return t + 4 * i, g
    if kind is MmaKind.S8:
        return 4 * t + i % 4 + 16 * (i // 4), g
    return 2 * t + (i & 1) + 8 * (i >> 1), g


@pytest.mark.parametrize("kind", MMA_SYNC_KINDS)
def test_fragment_positions_are_the_isa_formulas(kind):
    k = kind.k
    for role, count, rows, cols, isa, ours in (("a", kind.a_count, 16, k, _isa_a, warp_matrix.a_position),
                                               ("b", kind.a_count // 2, k, 8, _isa_b, warp_matrix.b_position),
                                               ("c", 4, 16, 8, None, None)):
        seen = set()
        for i in range(count):
            r, c = ours(kind, i) if ours else warp_matrix.c_position(i)
            for lane in range(32):
                want = isa(kind, lane, i) if isa else ((lane >> 2) + 8 * (i >> 1), 2 * (lane % 4) + (i & 1))
                assert (int(r[lane]), int(c[lane])) == want, (role, lane, i)
                seen.add(want)
        assert seen == set(itertools.product(range(rows), range(cols))), role  # every element once


@pytest.mark.parametrize("kind", MMA_SYNC_KINDS)
def test_the_mma_reference_multiplies_the_matrices_its_fragments_hold(kind):
    rng = np.random.default_rng(3)
    k = kind.k
    if kind is MmaKind.S8:
        a, b = rng.integers(-128, 128, (16, k)), rng.integers(-128, 128, (k, 8))
        c = rng.integers(-2**31, 2**31, (16, 8))
    else:  # small integers: every sum exact, so the result is bit for bit
        a, b, c = rng.integers(-8, 8, (16, k)), rng.integers(-8, 8, (k, 8)), rng.integers(-99, 99, (16, 8))
    lanes = np.arange(32)
    fa = [a[_isa_a(kind, lanes, i)] for i in range(kind.a_count)]
    fb = [b[_isa_b(kind, lanes, i)] for i in range(kind.a_count // 2)]
    fc = [c[(lanes >> 2) + 8 * (i >> 1), 2 * (lanes % 4) + (i & 1)] for i in range(4)]
    d = warp_matrix.mma(kind, fa, fb, fc)
    want = a @ b + c
    want = want.astype(np.int64).astype(np.int32) if kind is MmaKind.S8 else want.astype(np.float32)
    for i in range(4):
        np.testing.assert_array_equal(d[i], want[(lanes >> 2) + 8 * (i >> 1), 2 * (lanes % 4) + (i & 1)])


def test_tf32_operands_use_their_top_ten_mantissa_bits():
    x = np.float32(1 + 2**-10 + 2**-11 + 2**-20)  # tf32 keeps 1 + 2**-10
    fa = [np.full(32, x, np.float32)] * 4
    fb = [np.full(32, 1.0, np.float32)] * 2
    d = warp_matrix.mma(MmaKind.TF32, fa, fb, [np.zeros(32, np.float32)] * 4)
    assert d[0][0] == np.float32(8 * (1 + 2**-10))


def test_the_mma_layout_holds_every_element_once():
    for shape, threads in (((64, 64), 128), ((16, 8), 32), ((128, 32), 256), ((32, 48), 64)):
        layout = Mma(shape, threads)
        held = {}
        for t, r in itertools.product(range(threads), range(layout.registers)):
            coords, owner = layout.element_of(t, r)
            assert owner
            held.setdefault(coords, []).append((t, r))
        assert sorted(held) == sorted(itertools.product(*map(range, shape)))
        assert all(len(v) == 1 for v in held.values())
        # lane l of warp w holds rows 8 w + l // 4 (+ 8 * warps) and columns 2 (l % 4), + 1 of every 8
        warps = threads // 32
        for t in range(threads):
            w, lane = divmod(t, 32)
            assert layout.element_of(t, 0)[0] == (8 * w + lane // 4, 2 * (lane % 4))
            assert layout.element_of(t, layout.dims[1].registers)[0] == (8 * warps + 8 * w + lane // 4, 2 * (lane % 4))
    assert not Mma.fits((32, 32), 128) and Mma.fits((64, 32), 128) and not Mma.fits((64, 36), 128)


# -- tile matmuls on tensor cores ------------------------------------------------------------------


def matmul(dtype, acc_type, bm, bn, bk, warps, precision=None):
    return matmul_program(dtype, acc_type, bm, bn, bk, warps, precision)


def run_tensor_core_graph(program, args, backend: str) -> None:
    """Run the graph ptx and cuda compile (dot on tensor cores) on ``backend``."""
    if backend == "ptx":
        program.run(args, backend="ptx")
        return
    graph = program.distributed(tensor_cores=True)
    impl = get_backend(backend)
    args = expand_tensor_arguments(graph, args)
    binding = bind_arguments(graph, args)
    impl.execute(graph, binding, resolve_launch(graph, program.threads, binding, None), **impl.checked_options({}))


def _inputs(dtype, shape, rng):
    if dtype == i8:
        return rng.integers(-128, 128, shape).astype(np.int8)
    return rng.standard_normal(shape).astype(dtype.numpy)


# (name, input dtype, accumulator, tiles bm x bn x bk on warps, precision, mma kind)
MATMULS = [
    ("bf16", bf16, f32, (16, 16, 16, 1), None, MmaKind.BF16),
    ("bf16-4warps", bf16, f32, (64, 32, 32, 4), None, MmaKind.BF16),
    ("f16", f16, f32, (32, 24, 32, 2), None, MmaKind.F16),
    ("tf32", f32, f32, (16, 16, 16, 1), "tf32", MmaKind.TF32),
    ("i8", i8, i32, (16, 16, 32, 1), None, MmaKind.S8),
    ("f8e4m3", f8e4m3, f32, (16, 8, 32, 1), None, MmaKind.F16),
    ("f8e4m3fnuz", f8e4m3fnuz, f32, (16, 8, 32, 1), None, MmaKind.F16),
]


@pytest.mark.parametrize("backend", ["numpy", "ptx"])
@pytest.mark.parametrize("case", MATMULS, ids=lambda c: c[0])
def test_tile_matmul_on_tensor_cores_agrees_with_numpy(case, backend):
    name, dtype, acc_type, (bm, bn, bk, warps), precision, kind = case
    program = matmul(dtype, acc_type, bm, bn, bk, warps, precision)
    graph = program.distributed(tensor_cores=True)
    mmas = [op for op in graph.body.walk() if op.opcode == "mma"]
    assert {op.attrs.kind for op in mmas} == {kind}
    assert len(mmas) == bm * bn * bk // (16 * 8 * kind.k) // warps  # one warp's share, per k-step
    rng = np.random.default_rng(5)
    M, N, K = 2 * bm + 3, 2 * bn - 5, 3 * bk - 7  # edges in every dimension
    a, b = _inputs(dtype, (M, K), rng), _inputs(dtype, (K, N), rng)
    c = np.full((M, N + 2), 7, acc_type.numpy)
    run_tensor_core_graph(program, dict(c=c[:, 1:N + 1], a=a, b=b[::1]), backend)
    assert (c[:, 0] == 7).all() and (c[:, N + 1] == 7).all()  # the edges stay untouched
    if dtype == i8:
        np.testing.assert_array_equal(c[:, 1:N + 1], a.astype(np.int64) @ b.astype(np.int64))
        return
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if precision == "tf32":  # the inputs are rounded to tf32 first, on every backend
        reference = np.zeros((M, N), np.float32)
        program.run(dict(c=reference, a=a, b=b), backend="numpy")
        exact = reference.astype(np.float64)
        bound = K * 2.0**-23 * (np.abs(a64) @ np.abs(b64))
    else:
        exact = a64 @ b64
        bound = K * 2.0**-24 / (1 - K * 2.0**-24) * (np.abs(a64) @ np.abs(b64))
    assert np.all(np.abs(c[:, 1:N + 1] - exact) <= bound), name


def test_a_transposed_view_and_the_fold_carry_stay_in_the_mma_layout():
    program = matmul(bf16, f32, 32, 16, 16, 2)
    graph = program.distributed(tensor_cores=True)
    shared = [op for op in graph.body.walk() if op.opcode == "shared"]
    # A and B staged in rows of 16 bf16, 32 bytes, unpadded and swizzled (a 32 x 16 A, a 16 x 16 B),
    # twice: the fold is pipelined over 2 stages (for_each_tile's default num_stages)
    assert [op.attrs.count for op in shared] == [2 * (32 * 16 + 16 * 16)]
    # A and B go from global to shared memory by cp.async, one 16-byte copy a thread each (8 bf16)
    # where the rows are aligned, else element by element in a loop (each element by one thread:
    # one store of A's and one of B's): in the prologue (trip 0) and in the loop (the trip ahead);
    # the accumulator is carried in the Mma layout, never through shared memory
    copies = [op for op in graph.body.walk() if op.opcode == "async_copy"]
    assert len(copies) == 2 * 2 and {op.attrs.bytes for op in copies} == {16}
    stores = [op for op in graph.body.walk() if op.opcode == "store" and op.attrs.space == "shared"]
    assert len(stores) == 2 * 2 and all(op.block.parent.opcode == "fold" for op in stores)
    fold = next(op for op in graph.body.walk() if op.opcode == "fold" and any(o.opcode == "mma" for o in op.walk()))
    first = [op.opcode for op in fold.regions[0].ops[:2]]
    assert first == ["async_wait", "barrier"] and fold.regions[0].ops[0].attrs.pending == 0
    rng = np.random.default_rng(2)
    a, bt = _inputs(bf16, (40, 35), rng), _inputs(bf16, (21, 35), rng)
    c = np.zeros((40, 21), np.float32)
    run_tensor_core_graph(program, dict(c=c, a=a, b=bt.T), "numpy")
    exact = a.astype(np.float64) @ bt.T.astype(np.float64)
    assert np.all(np.abs(c - exact) <= 35 * 2.0**-23 * (np.abs(a.astype(np.float64)) @ np.abs(bt.T.astype(np.float64))))


def test_below_sm_80_and_at_shapes_that_do_not_fit_dot_stays_on_fma():
    program = matmul(bf16, f32, 16, 16, 16, 1)
    assert not any(op.opcode == "mma" for op in program.graph_for("ptx", "sm_75").body.walk())
    assert any(op.opcode == "mma" for op in program.graph_for("ptx", "sm_90").body.walk())
    assert "mma.sync" not in program.ptx("sm_75") and "mma.sync" in program.ptx("sm_80")
    narrow = matmul(bf16, f32, 16, 16, 16, 4)  # no grid of 4 warps gives each whole 16 x 8 tiles
    assert not any(op.opcode == "mma" for op in narrow.distributed(tensor_cores=True).body.walk())
    grid = matmul(bf16, f32, 32, 32, 16, 4)  # 2 x 2 warps, each a 16 x 16 quarter (rows alone: 64 needed)
    assert any(op.opcode == "mma" for op in grid.distributed(tensor_cores=True).body.walk())
    f32_ieee = matmul(f32, f32, 16, 16, 16, 1)  # f32 without tf32 keeps its numerics: FMA
    assert not any(op.opcode == "mma" for op in f32_ieee.distributed(tensor_cores=True).body.walk())


@NEEDS_PTXAS
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_tensor_core_ptx_assembles_without_spills(arch):
    programs = [matmul(dtype, acc, *tiles, precision) for _, dtype, acc, tiles, precision, _ in MATMULS]
    programs += [matmul(bf16, f32, 64, 64, 32, 4), matmul(bf16, f32, 128, 128, 32, 8)]
    for program in programs:
        ptx = program.ptx(arch)
        assert "mma.sync.aligned" in ptx and "ldmatrix.sync.aligned" in ptx, program.name
        used = toolchain.resources(ptx, arch)
        assert used.spill_stores == used.spill_loads == 0, (program.name, used)


# -- flash attention on tensor cores --------------------------------------------------------------


@pytest.mark.parametrize("backend", ["numpy", "ptx"])
@pytest.mark.parametrize("dtype", [bf16, f16], ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_attention_tile_entry_on_tensor_cores(dtype, causal, backend):
    spec = ScaledDotProduct(1, 37, 53, 32, 16, causal=causal)
    entry = scaled_dot_product_tile(spec, dtype)
    graph = entry.program.distributed(tensor_cores=True)
    kinds = {op.attrs.kind for op in graph.body.walk() if op.opcode == "mma"}
    assert kinds == {MmaKind(dtype.name)}
    rng = np.random.default_rng(11)
    q, k, v = (rng.standard_normal(s).astype(dtype.numpy) for s in ((1, 37, 32), (1, 53, 32), (1, 53, 16)))
    dst = np.zeros((1, 37, 16), dtype.numpy)
    run_tensor_core_graph(entry.program, dict(dst=dst, query=q, key=k, value=v), backend)
    want = np.zeros_like(dst)
    entry.run(dict(dst=want, query=q, key=k, value=v), backend="numpy")  # the tile reference
    unit = 2.0**-8 if dtype == bf16 else 2.0**-11
    scale = np.abs(v.astype(np.float64)).max()
    assert np.max(np.abs(dst.astype(np.float64) - want.astype(np.float64))) <= 4 * unit * scale
    if not causal:
        exact = reference(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64))
        assert np.max(np.abs(dst.astype(np.float64) - exact)) <= 4 * unit * scale


def test_attention_reads_q_once_and_p_v_takes_p_from_its_registers():
    """FA2: Q's fragments are read once, before the key loop; the P @ V dot takes P's fragments
    from the scores' accumulator registers; per key tile only K^T's and V's B fragments are read
    through ldmatrix, from a stage that cp.async filled a trip ahead."""
    spec = ScaledDotProduct(1, 64, 64, 64, 64)
    graph = scaled_dot_product_tile(spec, bf16).program.distributed(tensor_cores=True)
    fold = next(op for op in graph.body.walk() if op.opcode == "fold" and any(
        o.opcode == "mma" for o in op.regions[0].walk()))
    inside = [o for o in fold.regions[0].walk() if o.opcode == "ldmatrix"]
    everywhere = [o for o in graph.body.walk() if o.opcode == "ldmatrix"]
    # Q: an x4 per k-step of 16 (one 16-row tile a warp); K^T's and V's B: an x4 per two 8-column
    # tiles per k-step
    q_a, kt_b, v_b = 64 // 16, (64 // 16) * (64 // 16), (64 // 16) * (64 // 16)
    assert len(inside) == kt_b + v_b and len(everywhere) == q_a + kt_b + v_b
    assert any(o.opcode == "async_copy" for o in fold.regions[0].walk())
    stages = [o for o in graph.body.walk() if o.opcode == "shared" and o.attrs.name.startswith("stage")]
    assert [o.attrs.count for o in stages] == [2 * 2 * 64 * 72]  # 2 stages of K's and V's 64 rows of 72


@pytest.mark.parametrize("backend", ["numpy", "ptx"])
def test_a_mask_that_starts_inside_a_16_byte_group_falls_back_to_element_loads(backend):
    """A mask ``cols >= shift`` cuts the first 16-byte group of each row where shift is no multiple
    of 8 bf16s, which a cp.async (it reads a prefix of its 16 bytes) cannot express: checked when
    it runs, element loads then."""

    @accy.kernel(c=accy.tensor(f32, 2), a=accy.dynamic_buffer(bf16), b=accy.tensor(bf16, 2),
                 shift=accy.scalar(accy.index))
    def shifted(k, p):
        @k.for_each_tile(grid=axis("m", 1), warps=1)
        def body(t, pid):
            rows, cols = t.arange(16)[:, None], t.arange(32)[None, :]
            a = p.a.load(rows * 32 + cols, mask=cols >= p.shift)
            b = p.b.load_tile((0, 0), (32, 8))
            p.c.store_tile((0, 0), t.dot(a, b))

    graph = shifted.distributed(tensor_cores=True)
    assert sum(op.opcode == "async_copy" for op in graph.body.walk()) == 3  # A's two a thread, B's one
    rng = np.random.default_rng(4)
    a, b = _inputs(bf16, (16, 32), rng), _inputs(bf16, (32, 8), rng)
    for shift in (0, 3, 8, 13):
        c = np.zeros((16, 8), np.float32)
        run_tensor_core_graph(shifted, dict(c=c, a=a.reshape(-1), b=b, shift=shift), backend)
        moved = np.zeros((16, 32), np.float64)
        moved[:, shift:] = a[:, shift:].astype(np.float64)
        exact = moved @ b.astype(np.float64)
        assert np.all(np.abs(c - exact) <= 32 * 2.0**-23 * (np.abs(moved) @ np.abs(b.astype(np.float64)))), shift


@pytest.mark.parametrize("bk, swizzled", [(16, True), (32, True), (64, False)])
def test_staged_rows_of_two_or_four_units_are_swizzled_and_copies_and_ldmatrix_meet_no_bank_conflict(bk, swizzled):
    """A's rows are bk bf16: 32 and 64 bytes unpadded and XOR-swizzled (padded, a cp.async
    phase's 8 lanes wrote two 16-byte units into one bank group), 128 bytes padded to 144."""
    from accy.lowering.tensor_cores import staged_rows

    rows = staged_rows(bk, 2)
    assert (rows.units != 0) == swizzled and rows.pitch == (bk if swizzled else bk + 8)
    program = matmul(bf16, f32, 64, 64, bk, 4)
    rng = np.random.default_rng(bk)
    a, b = _inputs(bf16, (64, 2 * bk), rng), _inputs(bf16, (2 * bk, 64), rng)
    c = np.zeros((64, 64), np.float32)
    profile = program.profile([c, a, b], arch="sm_80")
    for kind in ("async_copy", "ldmatrix"):
        traffic = profile.shared_traffic[kind]
        assert traffic.requests > 0 and traffic.bank_conflicts == 0 and traffic.wavefronts == traffic.ideal, kind
    program.run([c, a, b], backend="ptx")
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-5)
