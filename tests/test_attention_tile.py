"""The flash attention tile entry (accy.library.attention_tile) against the float64 NumPy
reference on every backend that runs tile programs, at odd shapes, f32/bf16/f16, causal or
not, with strided and transposed views; and its metadata."""

import numpy as np
import pytest

import accy
from accy.errors import ArgumentError
from accy.library.attention import ScaledDotProduct, reference, scaled_dot_product_fused_f32
from accy.library.attention_tile import DOT_STAGING_BYTES, AttentionTiles, scaled_dot_product_tile
from accy.library.entry import Category, Layer, ReductionOperator, TileGrid

# unit roundoff of the inputs' type: P is cast to it before P @ V, and so is the output
UNIT_ROUNDOFF = {"f32": 2.0 ** -24, "bf16": 2.0 ** -8, "f16": 2.0 ** -11}


TILE_BACKENDS = ["numpy", "llvm", "ptx"]  # numpy runs the tile graph, llvm natively, ptx distributed


def inputs(rng, shape, dtype=accy.f32):
    b, q, k, h, v = shape
    return tuple(rng.standard_normal(s).astype(dtype.numpy) for s in ((b, q, h), (b, k, h), (b, k, v)))


def tolerance(dtype, value):
    """The reference bound: P and the output each rounded once to ``dtype`` move an output by at
    most u * max|v| each (P's weights sum to l before the cast); f32 scores, exp2 and sums add
    little more than 1e-5 * max|v| at these sizes."""
    return (2 * UNIT_ROUNDOFF[dtype.name] + 1e-5) * float(np.abs(value.astype(np.float64)).max())


def check(entry, query, key, value, backend, *, causal, dst=None):
    b, q, v = query.shape[0], query.shape[1], value.shape[2]
    dst = np.full((b, q, v), np.nan, value.dtype) if dst is None else dst
    entry.run([dst, query, key, value], backend=backend)
    expected = reference(query, key, value, causal=causal)
    np.testing.assert_allclose(dst.astype(np.float64), expected, rtol=0,
                               atol=tolerance(entry.specialization.dtype, value))
    return dst


ODD = (2, 37, 53, 16, 8)  # q and k not multiples of any tile


@pytest.mark.parametrize("backend", TILE_BACKENDS)
@pytest.mark.parametrize("dtype", [accy.f32, accy.bf16, accy.f16], ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_matches_reference(backend, dtype, causal, rng):
    entry = scaled_dot_product_tile(ScaledDotProduct(*ODD, causal=causal), dtype, AttentionTiles(16, 32))
    check(entry, *inputs(rng, ODD, dtype), backend, causal=causal)


@pytest.mark.parametrize("backend", TILE_BACKENDS)
@pytest.mark.parametrize("shape, tiles", [
    ((1, 70, 40, 16, 8), AttentionTiles(16, 16)),   # more queries than keys: causal rows past k see every key
    ((1, 20, 90, 8, 4), AttentionTiles(32, 16)),    # a query tile spanning two key tiles of the diagonal
    ((2, 37, 53, 16, 8), AttentionTiles()),         # the default tiles, fitted to 64
    ((1, 1, 1, 1, 1), AttentionTiles()),
], ids=["q70k40", "q20k90", "default", "one"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_odd_shapes_and_tiles(backend, shape, tiles, causal, rng):
    entry = scaled_dot_product_tile(ScaledDotProduct(*shape, causal=causal), tiles=tiles)
    check(entry, *inputs(rng, shape), backend, causal=causal)


@pytest.mark.parametrize("backend", TILE_BACKENDS)
def test_views_of_any_layout(backend, rng):
    """A transposed query, a stepped key with negative strides, a Fortran-order value and an
    output that is a view into a larger array (its gaps untouched)."""
    b, q, k, h, v = ODD
    entry = scaled_dot_product_tile(ScaledDotProduct(*ODD, causal=True), tiles=AttentionTiles(16, 16))
    query = rng.standard_normal((b, h, q), dtype=np.float32).transpose(0, 2, 1)
    key = rng.standard_normal((b, 2 * k, h), dtype=np.float32)[:, ::-2, :]
    value = np.asfortranarray(rng.standard_normal((b, k, v), dtype=np.float32))
    big = np.full((b, q, 3 * v), -7.0, np.float32)
    dst = big[:, :, 1::3]
    check(entry, query, key, value, backend, causal=True, dst=dst)
    assert (big[:, :, 0::3] == -7.0).all() and (big[:, :, 2::3] == -7.0).all()


@pytest.mark.parametrize("backend", TILE_BACKENDS)
def test_causal_never_reads_key_tiles_past_the_programs_last_query(backend, rng):
    """With 16-query programs, the first program reads keys 0..15 only: NaN values at later keys
    (which a masked but visited tile would turn into 0 * NaN) leave its rows exact."""
    shape = (1, 64, 64, 8, 4)
    entry = scaled_dot_product_tile(ScaledDotProduct(*shape, causal=True), tiles=AttentionTiles(16, 16))
    query, key, value = inputs(rng, shape)
    poisoned = value.copy()
    poisoned[:, 16:] = np.nan
    dst = np.zeros((1, 64, 4), np.float32)
    entry.run([dst, query, key, poisoned], backend=backend)
    expected = reference(query, key, value, causal=True)
    np.testing.assert_allclose(dst[:, :16], expected[:, :16], rtol=0, atol=tolerance(accy.f32, value))
    assert np.isnan(dst[:, 16:]).all()  # the later programs did read them


@pytest.mark.parametrize("backend", TILE_BACKENDS)
def test_a_row_whose_every_score_is_minus_inf_gives_zero_not_nan(backend):
    """Row 0's scores overflow to -inf at every key: the online softmax shifts by 0 (not -inf,
    which would make exp2(-inf - -inf) NaN) and the final division by l = 0 gives 0."""
    shape = (1, 3, 20, 4, 2)
    entry = scaled_dot_product_tile(ScaledDotProduct(*shape), tiles=AttentionTiles(16, 16))
    query = np.zeros((1, 3, 4), np.float32)
    query[0, 0] = 1e30
    key = np.full((1, 20, 4), -1e30, np.float32)
    value = np.arange(40, dtype=np.float32).reshape(1, 20, 2)
    dst = np.full((1, 3, 2), np.nan, np.float32)
    entry.run([dst, query, key, value], backend=backend)
    np.testing.assert_array_equal(dst[0, 0], [0.0, 0.0])
    np.testing.assert_allclose(dst[0, 1:], np.broadcast_to(value[0].mean(0), (2, 2)), rtol=1e-6)


@pytest.mark.parametrize("backend", TILE_BACKENDS)
def test_large_scores_do_not_overflow(backend):
    entry = scaled_dot_product_tile(ScaledDotProduct(1, 2, 4, 2, 2))
    query = np.full((1, 2, 2), 60.0, np.float32)
    key = np.array([[[1, 1], [2, 2], [3, 3], [-4, 4]]], np.float32)
    value = np.arange(8, dtype=np.float32).reshape(1, 4, 2)
    check(entry, query, key, value, backend, causal=False)


@pytest.mark.parametrize("backend", ["llvm", "ptx"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_backends_agree_with_numpy(backend, causal, rng):
    """Tiny shapes (the ptx emulator is slow): each backend within the reference's bound of the
    numpy backend's result."""
    shape = (1, 8, 8, 4, 4)
    entry = scaled_dot_product_tile(ScaledDotProduct(*shape, causal=causal), tiles=AttentionTiles(8, 8))
    query, key, value = inputs(rng, shape)
    ours, theirs = (np.zeros((1, 8, 4), np.float32) for _ in range(2))
    entry.run([ours, query, key, value], backend="numpy")
    entry.run([theirs, query, key, value], backend=backend)
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=tolerance(accy.f32, value))


def test_an_argument_of_the_wrong_shape_is_refused_naming_it(rng):
    entry = scaled_dot_product_tile(ScaledDotProduct(*ODD))
    query, key, value = inputs(rng, ODD)
    dst = np.full((2, 37, 8), 5.0, np.float32)
    with pytest.raises(ArgumentError, match=r"argument 'key': expected shape \(2, 53, 16\) \(b=2 k=53 h=16\), "
                                            r"got \(2, 52, 16\)"):
        entry.run([dst, query, key[:, :52], value], backend="numpy")
    with pytest.raises(ArgumentError, match="'dst'"):
        entry.run({"dst": dst[:, :, :4], "query": query, "key": key, "value": value}, backend="numpy")
    assert (dst == 5.0).all()


def test_an_argument_of_the_wrong_dtype_is_refused(rng):
    entry = scaled_dot_product_tile(ScaledDotProduct(*ODD), accy.bf16)
    query, key, value = inputs(rng, ODD, accy.bf16)
    with pytest.raises(ArgumentError, match="'value'.*bfloat16"):
        entry.run([np.zeros((2, 37, 8), accy.bf16.numpy), query, key, value.astype(np.float32)], backend="numpy")


# -- metadata -----------------------------------------------------------------------------------


def test_identity_and_memoisation():
    spec = ScaledDotProduct(*ODD, causal=True)
    entry = scaled_dot_product_tile(spec, accy.bf16, AttentionTiles(16, 32, warps=8))
    assert entry.name == "accy_kernel_attention_sdpa_tile2x37x53x16x8_q16k32w8_causal_bf16"
    assert entry.target == "accy.kernel.attention.sdpa_tile2x37x53x16x8_q16k32w8_causal_bf16"
    assert entry.version == 1 and entry.layer is Layer.tile and entry.category is Category.attention
    assert scaled_dot_product_tile(spec, "bf16", AttentionTiles(16, 32, warps=8)) is entry
    # the default tiles fitted to 37 queries and 53 keys are 64 x 64: the same entry either way
    assert scaled_dot_product_tile(spec) is scaled_dot_product_tile(spec, accy.f32, AttentionTiles(64, 64))
    assert scaled_dot_product_tile(spec) is not scaled_dot_product_tile(spec, accy.f16)
    assert {n: str(s) for n, s in entry.argument_shapes.items()} == {
        "dst": "b=2 q=37 v=8", "query": "b=2 q=37 h=16", "key": "b=2 k=53 h=16", "value": "b=2 k=53 v=8"}
    assert [t.name for t in entry.program.tensors] == ["dst", "query", "key", "value"]
    assert all(t.dtype == accy.bf16 and t.ndim == 3 for t in entry.program.tensors)


def test_specialization_mirrors_the_fused_entry():
    spec = ScaledDotProduct(*ODD, causal=True)
    s = scaled_dot_product_tile(spec, accy.f16, AttentionTiles(16, 32)).specialization
    fused = scaled_dot_product_fused_f32(spec).specialization
    assert s.dtype == accy.f16 and s.operation_is("attention.scaled_dot_product")
    assert s.equation == "bqh,bkh,bkv->bqv" and s.causal
    assert [str(x) for x in s.inputs] == ["b=2 q=37 h=16", "b=2 k=53 h=16", "b=2 k=53 v=8"]
    assert [str(x) for x in s.outputs] == ["b=2 q=37 v=8"]
    assert s.reductions == fused.reductions and s.reduction_reuse == fused.reduction_reuse
    assert s.reduction_matches(2, name="score_exp_sum", operator=ReductionOperator.online_sum_exp_shifted,
                               extents=[53], dependencies=["score_max"])
    assert s.fused_reductions == (("score_max", "score_exp_sum", "value_weighted_sum"),)
    assert s.reduction_reuse_scopes_are_valid()
    assert s.estimated_element_ops() == fused.estimated_element_ops()
    assert [(t.operand, str(t.tile), str(t.scope)) for t in s.tiles] == [
        ("query", "q=16 h=16", "q=16 v=8"), ("key", "k=32 h=16", "q=16 v=8"), ("value", "k=32 v=8", "q=16 v=8")]


def test_schedule_is_the_tile_programs_grid():
    entry = scaled_dot_product_tile(ScaledDotProduct(*ODD), tiles=AttentionTiles(16, 32, warps=2))
    schedule = entry.schedule
    assert isinstance(schedule, TileGrid) and schedule.warps == 2 and schedule.threads == (64, 1, 1)
    assert [str(a) for a in schedule.grid] == ["q_tile=3", "b=2"]  # cdiv(37, 16) query tiles
    assert entry.specialization.launch == schedule.launch()
    assert schedule.launch().grid == (3, 2, 1) and schedule.launch().block == (64, 1, 1)
    graph = entry.graph
    assert graph.is_tile_launch and graph.launch_op.attrs.warps == 2
    assert [str(a) for a in graph.axes] == ["q_tile=3", "b=2"]


def test_schedule_matches_the_programs_launch():
    entry = scaled_dot_product_tile(ScaledDotProduct(*ODD), tiles=AttentionTiles(16, 32, warps=2))
    snapshot = entry.schedule_snapshot()
    assert entry.launch() == entry.specialization.launch
    assert entry.schedule.matches_snapshot(snapshot)


def test_the_traced_program_is_fa2():
    """Scores and the accumulator are f32 for f16 inputs, P is cast to f16 before P @ V, and under
    causal the key loops' bounds depend on the program (two folds: unmasked, then the diagonal)."""
    entry = scaled_dot_product_tile(ScaledDotProduct(*ODD, causal=True), accy.f16, AttentionTiles(16, 32))
    text = entry.graph.text()
    dots = [line for line in text.splitlines() if " = dot " in line]
    assert len(dots) == 4  # Q K^T and P V in each of the two key loops
    assert all("tile<f16, 16x16>" in d or "tile<f16, 16x32>" in d for d in dots)
    assert text.count(" = fold ") == 2
    assert "exp2" in text and " exp " not in text
    launch = entry.graph.launch_op
    folds = [op for op in launch.regions[0].ops if op.opcode == "fold"]
    assert len(folds) == 2 and all(op.operands[1].op is not None for op in folds)  # stops computed per program


def test_tiles_fit_the_spec_and_the_tile_limit():
    small = ScaledDotProduct(1, 8, 20, 4, 4)
    assert AttentionTiles().fitted(small) == AttentionTiles(16, 32, 8)  # covers 8 (at least 16) and 20
    assert AttentionTiles(8, 8).fitted(small) == AttentionTiles(8, 8, 8)  # never grows a tile
    # 16-bit inputs: a warp per 16 query rows, up to 4 (whole tensor-core tiles of rows)
    assert AttentionTiles().fitted(small, accy.bf16) == AttentionTiles(16, 32, 1)
    assert AttentionTiles().fitted(ScaledDotProduct(1, 256, 256, 64, 64), accy.f16) == AttentionTiles(64, 64, 4)
    assert AttentionTiles(warps=2).fitted(small, accy.bf16).warps == 2  # a given count stays
    # head dim 128: Q K^T's operands at 64 x 64 are 16384 elements, over what a GPU program stages
    # as f32 (32 KiB), but not as bf16
    assert AttentionTiles().fitted(ScaledDotProduct(8, 256, 256, 128, 128)) == AttentionTiles(32, 32, 8)
    assert AttentionTiles().fitted(ScaledDotProduct(8, 256, 256, 128, 128), accy.bf16) == AttentionTiles(64, 64, 4)
    wide = ScaledDotProduct(1, 512, 512, 512, 512)
    fitted = AttentionTiles().fitted(wide)
    assert fitted == AttentionTiles(8, 8, 8)
    assert all(r * c <= accy.library.attention_tile.TILE_ELEMENTS for r, c in fitted.tile_shapes(wide).values())
    assert all(4 * n <= DOT_STAGING_BYTES for n in fitted.dot_operands(wide).values())
    with pytest.raises(ValueError, match="do not fit"):
        AttentionTiles().fitted(ScaledDotProduct(1, 4, 4, 20000, 4))


def test_bad_options_raise():
    spec = ScaledDotProduct(*ODD)
    with pytest.raises(ValueError, match="f32, bf16 or f16, got f64"):
        scaled_dot_product_tile(spec, accy.f64)
    with pytest.raises(ValueError, match="dtype"):
        scaled_dot_product_tile(spec, "float128")
    with pytest.raises(ValueError, match="warps must be"):
        AttentionTiles(warps=3)
    with pytest.raises(ValueError):
        AttentionTiles(block_q=0)
    with pytest.raises(ValueError, match="ScaledDotProduct"):
        scaled_dot_product_tile((2, 37, 53, 16, 8))


def test_kernel_call_artifact():
    from accy.codegen.nvptx import toolchain
    from accy.runtime.artifacts import ArtifactFormat, DTypeSet, RecordingBackendState

    entry = scaled_dot_product_tile(ScaledDotProduct(1, 8, 8, 4, 4, causal=True), accy.bf16, AttentionTiles(8, 8))
    state = RecordingBackendState(arch="sm_80", fast_math=toolchain.find_libdevice() is None)
    artifact = entry.create_kernel_call_artifact(state).registry().find(entry.target, entry.version,
                                                                         ArtifactFormat.cuda_ptx)
    assert artifact.entry_name == entry.name and artifact.fixed
    assert artifact.argument_count == 4 * 8  # each tensor: its span, 3 extents, 3 strides, an offset
    assert artifact.required_dtypes == DTypeSet.of([accy.bf16, accy.index])
    assert artifact.launch.grid == entry.specialization.launch.grid == (1, 1, 1)
    # 8-row tiles of bf16: below a tensor-core tile of rows, so one warp (the default for 16-bit inputs)
    assert artifact.launch.threadgroup == entry.specialization.launch.threadgroup == (32, 1, 1)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_default_tiles_assemble_without_spills_at_sm_90(causal):
    """At head dim 64 the default tiles (64 x 64, 8 warps) spill nothing at sm_90 (4 warps spill
    some 640 stores)."""
    from accy.codegen.nvptx import toolchain
    from accy.runtime.artifacts import RecordingBackendState

    if toolchain.find_ptxas() is None:
        pytest.skip("ptxas is not installed: no resources to read")
    entry = scaled_dot_product_tile(ScaledDotProduct(1, 64, 64, 64, 64, causal=causal))
    assert entry.name.endswith(f"q64k64w8{'_causal' if causal else ''}_f32")
    artifact = next(iter(entry.create_kernel_call_artifact(RecordingBackendState(arch="sm_90")).registry()))
    assert artifact.resources.spill_stores == 0 and artifact.resources.spill_loads == 0
