"""The GPU code accy emits for the instructions issue 32 names, checked in the PTX (and run on
the emulator, which executes PTX as the ISA defines it): each faster form still gives the
bits the IR reference promises."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from accy import axis, bf16, f32, kernel, tensor


@kernel(dst=tensor(bf16, 1), src=tensor(f32, 1))
def narrow(k, p):
    (n,) = p.src.shape

    @k.for_each_tile(grid=axis("i", (n + 127) // 128), warps=1)
    def body(t, pid):
        x = p.src.load_tile((pid["i"] * 128,), (128,))
        p.dst.store_tile((pid["i"] * 128,), x.cast(bf16))


def test_an_f32_to_bf16_cast_is_one_cvt_from_sm_80_and_none_before():
    assert "cvt.rn.bf16.f32" in narrow.ptx("sm_80") and "cvt.rn.bf16.f32" in narrow.ptx("sm_90")
    assert "cvt.rn.bf16" not in narrow.ptx("sm_75")  # no such instruction there: integer rounding


@pytest.mark.parametrize("backend, arch", [("ptx", "sm_75"), ("ptx", "sm_80"), ("llvm", None), ("numpy", None)])
def test_an_f32_to_bf16_cast_rounds_as_ml_dtypes(backend, arch):
    rng = np.random.default_rng(0)
    bits = np.concatenate([
        rng.integers(0, 2**32, 2000, dtype=np.uint64).astype(np.uint32),  # NaNs with payloads among them
        np.array([0x7FC00001, 0xFFC12345, 0x7F800001, 0xFF800000, 0x00000001, 0x807FFFFF, 0x3F808000,
                  0x3F818000, 0x7F7FFFFF], np.uint32)])
    src = bits.view(np.float32)
    dst = np.zeros(src.size, bf16.numpy)
    narrow.run([dst, src], backend=backend, **({"arch": arch} if arch else {}))
    # nearest even, subnormals kept; a NaN the quiet NaN of its sign, or from sm_80 the canonical one
    want = src.astype(ml_dtypes.bfloat16).view(np.uint16)
    if arch == "sm_80":
        want = np.where(np.isnan(src), 0x7FFF, want).astype(np.uint16)
    np.testing.assert_array_equal(dst.view(np.uint16), want)


def test_stages_past_48_kib_take_dynamic_shared_memory_and_agree():
    """num_stages=3 at 128x128x64 bf16 needs 105 KiB: one dynamic array (the driver opts the
    kernel in), each shared array at its offset; under 48 KiB the arrays stay static."""
    import sys

    from accy.codegen.abi import STATIC_SHARED_BYTES, dynamic_shared_bytes
    from accy.runtime.artifacts import RecordingBackendState
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent / "examples"))
    from tile_matmul import check, make_matmul

    deep, shallow = make_matmul(bf16, 128, 128, 64, warps=8, num_stages=3), make_matmul(bf16, 64, 64, 32)
    graph = deep.graph_for("cuda", "sm_80")
    assert dynamic_shared_bytes(graph) > STATIC_SHARED_BYTES and any(n.startswith("stage") for n in graph.shared_arrays())
    assert ".extern .shared" in deep.ptx("sm_80") and ".extern .shared" not in shallow.ptx("sm_80")
    assert dynamic_shared_bytes(shallow.graph_for("cuda", "sm_80")) == 0
    artifact = deep.create_kernel_call_artifact(RecordingBackendState(arch="sm_80")).artifacts[0]
    assert artifact.dynamic_shared == dynamic_shared_bytes(graph)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((130, 200)).astype(bf16.numpy)
    b = rng.standard_normal((200, 135)).astype(bf16.numpy)
    assert check(deep, a, b, "ptx") <= 1.0  # within the gamma_K bound, on the emulator (which checks the limit)


def test_a_lone_dot_spreads_its_warps_over_a_grid():
    from accy.lowering.layouts import Mma
    from accy.lowering.tensor_cores import warp_grid

    assert warp_grid(128, 128, 8) == 4 and warp_grid(64, 64, 4) == 2 and warp_grid(128, 64, 4) == 2
    assert warp_grid(64, 8, 4) == 1 and warp_grid(16, 64, 1) == 1 and warp_grid(32, 64, 8) == 4
    assert warp_grid(16, 8, 4) is None  # no grid gives each of 4 warps whole 16 x 8 tiles
    for shape, threads, wn in (((128, 128), 256, 4), ((64, 64), 128, 2), ((32, 16), 64, 2)):
        layout = Mma(shape, threads, wn)
        owned = [layout.element_of(t, r) for t in range(threads) for r in range(layout.registers)]
        coords = sorted(c for c, own in owned if own)
        assert coords == [(i, j) for i in range(shape[0]) for j in range(shape[1])]  # each element once
        # an mma's C fragment: lane l holds row l // 4 (+ 8) and columns 2 (l % 4), +1 of its 8-column tile
        (i, j), _ = layout.element_of(5, 1)
        assert (i % 8, j % 8) == (1, 3)


def dot_then_reduce(m, n, k, warps):
    @kernel(out=tensor(f32, 1), cols=tensor(f32, 1), a=tensor(bf16, 2), b=tensor(bf16, 2))
    def reduced(kk, p):
        @kk.for_each_tile(grid=axis("i", 1), warps=warps)
        def body(t, pid):
            c = t.dot(p.a.load_tile((0, 0), (m, k)), p.b.load_tile((0, 0), (k, n)), t.zeros((m, n), f32))
            p.out.store_tile((0,), c.sum(axis=1))  # across the warps along the columns
            p.cols.store_tile((0,), c.max(axis=0))  # across the warps along the rows
    return reduced


@pytest.mark.parametrize("m, n, k, warps", [(64, 64, 32, 4), (32, 64, 16, 8)])
def test_reductions_across_a_warp_grid_agree(m, n, k, warps):
    rng = np.random.default_rng(3)
    a = rng.integers(-3, 4, (m, k)).astype(bf16.numpy)  # small integers: every sum exact
    b = rng.integers(-3, 4, (k, n)).astype(bf16.numpy)
    c = a.astype(np.float64) @ b.astype(np.float64)
    out, cols = np.zeros(m, np.float32), np.zeros(n, np.float32)
    program = dot_then_reduce(m, n, k, warps)
    assert any(op.opcode == "mma" for op in program.graph_for("cuda", "sm_80").body.walk())  # on tensor cores
    program.run([out, cols, a, b], backend="ptx")
    np.testing.assert_array_equal(out, c.sum(axis=1))
    np.testing.assert_array_equal(cols, c.max(axis=0))


def test_comparisons_the_value_ranges_decide_are_folded():
    """A tile box's ``row >= 0`` for rows counted from a thread number (0 .. threads - 1) is
    always true: fold-ranges replaces it by a constant (fold-constants and dce then drop what
    it decided); what the ranges cannot decide stays; a loop with constant bounds reaches its
    last index, not stop - 1."""
    import sys
    from pathlib import Path

    from accy.dsl.analysis.intervals import index_ranges
    from accy.dsl.passes import DECIDED, fold_decided_comparisons
    from accy.lowering.distribute import distribute

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    from tile_matmul import make_matmul

    graph = distribute(make_matmul(bf16, 64, 64, 32).graph, tensor_cores=True)
    folded = fold_decided_comparisons(graph)

    def decidable(g):
        ranges, inf = index_ranges(g), float("inf")

        def interval(v):
            lo, hi = ranges.get(v, (None, None))
            return (-inf if lo is None else lo), (inf if hi is None else hi)
        return [op for op in g.body.walk() if op.opcode in DECIDED and op.operands[0].type.is_index
                and DECIDED[op.opcode](interval(op.operands[0]), interval(op.operands[1])) is not None]

    assert decidable(graph) and not decidable(folded)
    assert sum(op.opcode in DECIDED for op in folded.body.walk()) < sum(op.opcode in DECIDED for op in graph.body.walk())

    @kernel(out=tensor(f32, 1))
    def strided(k, p):
        @k.for_each_tile(grid=axis("i", 1), warps=1)
        def body(t, pid):
            total = t.fold_range(0, 4096, 64, t.zeros((64,), f32), lambda t, k0, acc: acc + t.cast(k0, f32))
            p.out.store_tile((0,), total)

    loop = next(op for op in strided.graph.body.walk() if op.opcode == "fold")
    assert index_ranges(strided.graph)[loop.regions[0].args[0]] == (0, 4032)



@kernel(dst=tensor(bf16, 2), src=tensor(f32, 2))
def scale_rows(k, p):
    R, C = p.src.shape

    @k.for_each_tile(grid=(axis("r", (R + 31) // 32), axis("c", (C + 31) // 32)), warps=2)
    def body(t, pid):
        r0, c0 = pid["r"] * 32, pid["c"] * 32
        p.dst.store_tile((r0, c0), (p.src.load_tile((r0, c0), (32, 32)) * 2.0).cast(bf16))


def test_a_tile_store_at_the_edges_is_predicated_stores_not_branches():
    """A tile store's vector groups, whole where the mask holds and element by element where
    not, are predicated stores (accy.codegen.nvptx.control_flow), no branch around each."""
    import re

    ptx = scale_rows.ptx("sm_80")
    assert re.search(r"@%p\d+ st\.global\.v\d\.b16", ptx) and re.search(r"@%p\d+ st\.global\.b16", ptx)


@pytest.mark.parametrize("shift", [0, 1], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("rows, cols", [(64, 64), (45, 37), (1, 3)])
def test_predicated_tile_stores_write_what_the_mask_lets_through_and_nothing_else(rows, cols, shift):
    """On the emulator: the tile's edges (partial groups), a misaligned output (no group whole)
    and the elements past the shape left as they were."""
    src = np.random.default_rng(rows * cols).standard_normal((rows, cols)).astype(np.float32)
    out = np.full((rows + 1, cols + 3), 7.0, ml_dtypes.bfloat16)
    view = out[:rows, shift:shift + cols]
    scale_rows.run([view, src], backend="ptx")
    assert view.astype(np.float32).tobytes() == (src * 2).astype(ml_dtypes.bfloat16).astype(np.float32).tobytes()
    untouched = np.ones(out.shape, bool)
    untouched[:rows, shift:shift + cols] = False
    assert (out[untouched].astype(np.float32) == 7.0).all()
