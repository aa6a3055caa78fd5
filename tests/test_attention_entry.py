"""The prebuilt attention entry against an independent NumPy reference, and its metadata."""

import numpy as np
import pytest

from accy.errors import LaunchError
from accy.library.attention import (
    ScaledDotProduct,
    ScaledDotProductAttention2x2x3x2x2F32,
    Threads3D,
    scaled_dot_product_f32,
)
from accy.library.entry import Category, Layer


def numpy_attention(q, k, v):
    """softmax(Q K^T / sqrt(h)) V, written independently of accy (float64)."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = np.einsum("bqh,bkh->bqk", q, k) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bqk,bkv->bqv", p / p.sum(-1, keepdims=True), v)


SHAPES = [(1, 1, 1, 1, 1), (2, 2, 3, 2, 2), (3, 5, 7, 4, 3), (2, 9, 16, 8, 5), (1, 33, 17, 3, 40)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_entry_matches_numpy_reference(shape, backend, rng):
    b, q, k, h, v = shape
    entry = scaled_dot_product_f32(ScaledDotProduct(*shape, threads=Threads3D(4, 2, 1)))
    query = rng.standard_normal((b, q, h), dtype=np.float32)
    key = rng.standard_normal((b, k, h), dtype=np.float32)
    value = rng.standard_normal((b, k, v), dtype=np.float32)
    dst = np.full((b, q, v), np.nan, np.float32)
    entry.run([dst, query, key, value], backend=backend)
    np.testing.assert_allclose(dst, numpy_attention(query, key, value), rtol=1e-5, atol=1e-5)


def test_large_scores_do_not_overflow(backend):
    """The max-shift keeps exp finite where a naive softmax would give inf/inf."""
    entry = scaled_dot_product_f32(ScaledDotProduct(1, 2, 4, 2, 2))
    query = np.full((1, 2, 2), 60.0, np.float32)
    key = np.array([[[1, 1], [2, 2], [3, 3], [-4, 4]]], np.float32)
    value = np.arange(8, dtype=np.float32).reshape(1, 4, 2)
    dst = np.zeros((1, 2, 2), np.float32)
    entry.run([dst, query, key, value], backend=backend)
    np.testing.assert_allclose(dst, numpy_attention(query, key, value), rtol=1e-5)


def test_entry_identity():
    e = ScaledDotProductAttention2x2x3x2x2F32
    assert e.target == "accy.kernel.attention.sdpa2x2x3x2x2_2x2x1_f32"
    assert e.name == "accy_kernel_attention_sdpa2x2x3x2x2_2x2x1_f32"
    assert e.version == 1 and e.layer is Layer.logical and e.category is Category.attention
    assert [p.name for p in e.program.parameters] == ["dst", "query", "key", "value"]


def test_entry_is_memoised_per_spec():
    spec = ScaledDotProduct(2, 2, 3, 2, 2, threads=Threads3D(2, 2, 1))
    assert scaled_dot_product_f32(spec) is ScaledDotProductAttention2x2x3x2x2F32
    assert scaled_dot_product_f32(ScaledDotProduct(2, 2, 3, 2, 3)) is not ScaledDotProductAttention2x2x3x2x2F32


def test_custom_axis_names_flow_into_metadata():
    e = scaled_dot_product_f32(ScaledDotProduct(2, 3, 4, 5, 6, batch_axis="n", value_axis="d"))
    assert e.specialization.outputs[0].names == ("n", "q", "d")
    assert [a.name for a in e.program.traced_graph.axes] == ["d", "q", "n"]
    assert e.specialization.reduction_reuse_scopes_are_valid()


def test_reuse_scope_validation_rejects_bad_scopes():
    import attrs

    from accy.library.entry import ReductionReuse, Shape

    s = scaled_dot_product_f32(ScaledDotProduct(3, 2, 4, 5, 3)).specialization
    reducing_its_own_axis = attrs.evolve(s, reduction_reuse=(ReductionReuse("score_dot", Shape.of(("b", 3), ("h", 5))),))
    unknown = attrs.evolve(s, reduction_reuse=(ReductionReuse("nope", Shape.of(("b", 3))),))
    wrong_extent = attrs.evolve(s, reduction_reuse=(ReductionReuse("score_max", Shape.of(("b", 4), ("q", 2))),))
    too_narrow = attrs.evolve(s, reduction_reuse=(ReductionReuse("score_dot", Shape.of(("b", 3), ("q", 2), ("k", 4))),
                                                  ReductionReuse("score_max", Shape.of(("b", 3),))))
    for bad in (reducing_its_own_axis, unknown, wrong_extent):
        assert not bad.reduction_reuse_scopes_are_valid()
    # score_max reused per b only cannot consume score_dot reused per (b, q, k)
    assert not too_narrow.reduction_reuse_scopes_are_valid()


def test_estimated_element_ops_formula():
    for b, q, k, h, v in [(3, 2, 4, 5, 3), (1, 1, 1, 1, 1), (2, 7, 5, 3, 4)]:
        s = scaled_dot_product_f32(ScaledDotProduct(b, q, k, h, v)).specialization
        assert s.estimated_element_ops() == 2 * b * q * k * h + 2 * b * q * k + 2 * b * q * v * k


def test_launch_limits_are_enforced():
    big_block = scaled_dot_product_f32(ScaledDotProduct(1, 64, 2, 2, 64, threads=Threads3D(32, 32, 1)))
    assert big_block.launch(big_block.Limits.default).block == (32, 32, 1)
    with pytest.raises(LaunchError, match=r"block \(32, 32, 1\) has 1024 threads, over the limit of 256"):
        big_block.launch(big_block.Limits.testing)
    with pytest.raises(LaunchError, match="over the limit of 256"):
        big_block.run_cpu([np.zeros(64 * 64, np.float32), np.zeros(128, np.float32),
                           np.zeros(4, np.float32), np.zeros(128, np.float32)], limits=big_block.Limits.testing)

    wide_grid = scaled_dot_product_f32(ScaledDotProduct(70000, 1, 1, 1, 1, threads=Threads3D(1, 1, 1)))
    with pytest.raises(LaunchError, match="grid z dimension 70000 exceeds the limit of 65535 blocks"):
        wide_grid.launch(wide_grid.Limits.default)


def test_snapshot_comes_from_the_program():
    e = scaled_dot_product_f32(ScaledDotProduct(3, 2, 4, 5, 3, threads=Threads3D(3, 2, 1)))
    snapshot = e.schedule_snapshot(e.Limits.testing)
    assert [(a.name, a.extent) for a in snapshot.axes] == [("v", 3), ("q", 2), ("b", 3)]
    assert snapshot.threads == (3, 2, 1) and snapshot.launch.grid == (1, 1, 3)
    other = scaled_dot_product_f32(ScaledDotProduct(3, 2, 4, 5, 3, threads=Threads3D(1, 2, 1)))
    assert not e.schedule.matches_snapshot(other.schedule_snapshot(e.Limits.testing))


@pytest.mark.parametrize("bad", [dict(batch=0), dict(keys=-1), dict(qk=2.5), dict(value=2**63)])
def test_bad_specs_rejected(bad):
    fields = dict(batch=1, queries=1, keys=1, qk=1, value=1) | bad
    with pytest.raises(ValueError):
        ScaledDotProduct(**fields)
    with pytest.raises(ValueError, match="distinct"):
        ScaledDotProduct(1, 1, 1, 1, 1, batch_axis="q")


# -- the fused entry and the causal flag ----------------------------------------------------------

from accy.library.attention import reference, scaled_dot_product_fused_f32  # noqa: E402
from accy.library.entry import ReductionOperator  # noqa: E402

VARIANTS = [pytest.param(make, causal, id=f"{make.__name__.split('_')[-2]}{'-causal' if causal else ''}")
            for make in (scaled_dot_product_f32, scaled_dot_product_fused_f32) for causal in (False, True)]


def causal_numpy_attention(q, k, v):
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = np.einsum("bqh,bkh->bqk", q, k) / np.sqrt(q.shape[-1])
    s[:, np.triu_indices(q.shape[1], 1, k.shape[1])[0], np.triu_indices(q.shape[1], 1, k.shape[1])[1]] = -np.inf
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bqk,bkv->bqv", p / p.sum(-1, keepdims=True), v)


@pytest.mark.parametrize("make, causal", VARIANTS)
@pytest.mark.parametrize("shape", [(1, 1, 1, 1, 1), (2, 5, 7, 4, 3), (3, 9, 4, 8, 6), (2, 33, 17, 3, 5)],
                         ids=lambda s: "x".join(map(str, s)))
def test_variants_match_numpy(make, causal, shape, backend, rng):
    b, q, k, h, v = shape
    entry = make(ScaledDotProduct(*shape, causal=causal, threads=Threads3D(4, 2, 1)))
    args = [rng.standard_normal(s, dtype=np.float32) for s in ((b, q, h), (b, k, h), (b, k, v))]
    dst = np.full((b, q, v), np.nan, np.float32)
    entry.run([dst, *args], backend=backend)
    expected = causal_numpy_attention(*args) if causal else numpy_attention(*args)
    np.testing.assert_allclose(dst, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(reference(*args, causal=causal), expected, rtol=1e-12, atol=1e-12)


def test_fused_metadata_is_honest():
    spec = ScaledDotProduct(3, 2, 4, 5, 3, threads=Threads3D(2, 3, 1))
    fused = scaled_dot_product_fused_f32(spec)
    s = fused.specialization
    assert fused.target == "accy.kernel.attention.sdpa_fused3x2x4x5x3_2x3x1_f32"
    assert s.fused_reductions == (("score_max", "score_exp_sum", "value_weighted_sum"),)
    assert s.reduction_matches(0, name="score_dot", operator=ReductionOperator.dot_product, extents=[5])
    assert s.reduction_matches(3, name="value_weighted_sum", operator=ReductionOperator.online_weighted_sum,
                               extents=[4], dependencies=["score_exp_sum"])
    assert s.reduction_reuse_matches(0, reduction="score_dot", extents=[3, 2, 4])  # each score once
    assert s.reduction_reuse_scopes_are_valid()
    # 2·BQK·H + BQ·K (max) + 2·BQ·K (online exp-sum) + 3·BQV·K (online weighted sum)
    assert s.estimated_element_ops() == 2 * 24 * 5 + 24 + 2 * 24 + 3 * 18 * 4
    # one logical thread per query row: axes q (x) and b (y)
    assert [a.name for a in fused.program.traced_graph.axes] == ["q", "b"]
    assert s.schedule.matches_snapshot(fused.schedule_snapshot(fused.Limits.testing))
    assert s.launch == fused.launch() and s.launch.grid == (1, 1, 1)


def test_causal_flag_is_part_of_the_target():
    plain = scaled_dot_product_f32(ScaledDotProduct(2, 2, 3, 2, 2))
    causal = scaled_dot_product_f32(ScaledDotProduct(2, 2, 3, 2, 2, causal=True))
    assert causal.target == plain.target.replace("_f32", "_causal_f32") and causal.specialization.causal
    assert causal.name != plain.name and not plain.specialization.causal


def test_fused_reads_each_score_input_once_per_key():
    """The fused graph has one dot-product fold per key step, the naive one three."""
    spec = ScaledDotProduct(1, 2, 3, 4, 2)
    folds = lambda e: sum(op.opcode == "fold" for op in e.program.graph.body.walk())  # noqa: E731
    assert folds(scaled_dot_product_fused_f32(spec)) == 2  # keys, and h inside
    assert folds(scaled_dot_product_f32(spec)) == 7


def test_fused_entry_stays_finite_when_a_rows_first_key_scores_minus_inf(backend):
    """exp(-inf - -inf) is NaN: the online softmax must not rescale by it (bug found in review)."""
    from accy.library.attention import ScaledDotProduct, reference, scaled_dot_product_f32, scaled_dot_product_fused_f32

    shape = (1, 2, 3, 2, 2)
    query = np.array([[[1.0, 0.0], [1.0, 0.5]]], np.float32)
    key = np.array([[[-np.inf, 0.0], [1.0, 2.0], [0.5, -1.0]]], np.float32)  # key 0 scores -inf for both rows
    value = np.arange(6, dtype=np.float32).reshape(1, 3, 2)
    expected = reference(query, key, value)
    assert np.isfinite(expected).all()
    for make in (scaled_dot_product_f32, scaled_dot_product_fused_f32):
        dst = np.zeros((1, 2, 2), np.float32)
        make(ScaledDotProduct(*shape)).run([dst, query, key, value], backend=backend)
        np.testing.assert_allclose(dst, expected, rtol=1e-5, err_msg=make.__name__)


# -- the flash entry (block layer) -----------------------------------------------------------------

from accy.library.attention import FlashTiling, scaled_dot_product_flash_f32  # noqa: E402
from accy.library.entry import BlockGrid  # noqa: E402

FLASH_SHAPES = [(1, 1, 1, 1, 1), (2, 5, 7, 3, 5), (2, 37, 50, 16, 20), (1, 16, 64, 64, 64)]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", FLASH_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_flash_entry_matches_the_reference(shape, causal, backend):
    from accy.library.attention import ScaledDotProduct

    b, q, k, h, v = shape
    rng = np.random.default_rng(sum(shape))
    query = rng.standard_normal((b, q, h), dtype=np.float32)
    key = rng.standard_normal((b, k, h), dtype=np.float32)
    value = rng.standard_normal((b, k, v), dtype=np.float32)
    dst = np.zeros((b, q, v), np.float32)
    scaled_dot_product_flash_f32(ScaledDotProduct(*shape, causal=causal)).run([dst, query, key, value], backend=backend)
    np.testing.assert_allclose(dst, reference(query, key, value, causal=causal), rtol=2e-5, atol=2e-6)


def test_flash_entry_metadata_is_the_block_layer():
    from accy.library.attention import ScaledDotProduct

    spec = ScaledDotProduct(2, 37, 50, 16, 20, causal=True)
    entry = scaled_dot_product_flash_f32(spec, FlashTiling(query_tile=16, key_tile=32, threads=128))
    s = entry.specialization
    assert entry.layer is Layer.block and entry.category is Category.attention
    assert s.equation == "bqh,bkh,bkv->bqv" and s.causal
    assert [r.name for r in s.reductions] == ["score_dot", "score_max", "score_exp_sum", "value_weighted_sum"]
    assert s.reductions[2].operator is ReductionOperator.online_sum_exp_shifted
    assert s.fused_reductions == (("score_max", "score_exp_sum", "value_weighted_sum"),)
    assert [(t.operand, t.tile.extents) for t in s.tiles] == [("query", (16, 16)), ("key", (32, 16)), ("value", (32, 20))]
    assert isinstance(s.schedule, BlockGrid) and s.schedule.threads == (128, 1, 1)
    assert s.launch == entry.launch() and s.launch.grid == (3, 2, 1) and s.launch.block == (128, 1, 1)
    assert s.schedule.matches_snapshot(entry.schedule_snapshot())
    assert s.reduction_reuse_scopes_are_valid()
    assert entry.target == "accy.kernel.attention.sdpa_flash2x37x50x16x20_q16k32t128_causal_f32"


@pytest.mark.parametrize("head", [64, 128])
def test_flash_entry_fits_registers_without_spills(head):
    """Under ptxas -v at sm_90, at head dims 64 and 128: no spills, at most 128 registers;
    the artifact records what ptxas reported."""
    from accy.codegen.nvptx import toolchain
    from accy.runtime.artifacts import RecordingBackendState
    from accy.library.attention import ScaledDotProduct

    if toolchain.find_ptxas() is None:
        pytest.skip("no ptxas: pip install nvidia-cuda-nvcc (the test extra does)")
    entry = scaled_dot_product_flash_f32(ScaledDotProduct(8, 256, 256, head, head))
    artifact = next(iter(entry.create_kernel_call_artifact(RecordingBackendState(arch="sm_90")).registry()))
    used = artifact.resources
    assert used is not None and used.arch == "sm_90"
    assert used.spill_stores == used.spill_loads == 0 and used.registers <= 128, used
    assert used.shared_bytes == FlashTiling().fitted(ScaledDotProduct(8, 256, 256, head, head)).shared_floats(
        ScaledDotProduct(8, 256, 256, head, head)) * 4


def test_flash_tiling_refuses_what_cannot_work():
    with pytest.raises(ValueError, match="a power of two up to 32"):
        FlashTiling(query_tile=16, threads=96)
    with pytest.raises(ValueError, match="key_tile .* multiple of the 8 threads"):
        FlashTiling(key_tile=12)
