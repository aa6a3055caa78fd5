"""The seed's first two tests (attention.zig), ported with the same data and expectations."""

import math

import numpy as np

from accy.library.attention import (
    ScaledDotProduct,
    ScaledDotProductAttention2x2x3x2x2F32,
    Threads3D,
    scaled_dot_product_f32,
)
from accy.library.entry import ATTENTION_SCALED_DOT_PRODUCT, ReductionOperator


def expected_output(spec, query_values, key_values, value_values, batch, query, value):
    """The seed's scalar reference, line by line (f32 arithmetic)."""
    f = np.float32
    scores = []
    scale = f(1.0 / math.sqrt(float(spec.qk)))
    max_score = f(-np.inf)
    for key in range(spec.keys):
        dot = f(0.0)
        for feature in range(spec.qk):
            query_offset = batch * spec.queries * spec.qk + query * spec.qk + feature
            key_offset = batch * spec.keys * spec.qk + key * spec.qk + feature
            dot += query_values[query_offset] * key_values[key_offset]
        score = dot * scale
        scores.append(score)
        if score > max_score:
            max_score = score
    denominator = f(0.0)
    for score in scores:
        denominator += np.exp(score - max_score)
    total = f(0.0)
    for key in range(spec.keys):
        weight = np.exp(scores[key] - max_score) / denominator
        value_offset = batch * spec.keys * spec.value + key * spec.value + value
        total += weight * value_values[value_offset]
    return total


def test_attention_scaled_dot_product_entry_runs_on_cpu_and_records_schedule():
    entry = ScaledDotProductAttention2x2x3x2x2F32
    query_values = np.array([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, -1.0, 0.5], np.float32)
    key_values = np.array([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.5, -1.0, 1.0, 2.0, -1.0, 1.0], np.float32)
    value_values = np.array([1.0, 0.0, 0.0, 2.0, 3.0, 1.0, -1.0, 1.0, 2.0, 0.0, 0.0, 4.0], np.float32)
    dst = np.zeros(8, np.float32)

    entry.run_cpu([dst, query_values, key_values, value_values], limits=entry.Limits.testing)

    spec = ScaledDotProduct(batch=2, queries=2, keys=3, qk=2, value=2)
    for batch in range(2):
        for query in range(2):
            for value in range(2):
                output_offset = batch * 4 + query * 2 + value
                expected = expected_output(spec, query_values, key_values, value_values, batch, query, value)
                assert abs(expected - dst[output_offset]) <= 0.0001

    launch = entry.launch(entry.Limits.testing)
    assert launch.grid == (1, 1, 2)
    assert launch.block == (2, 2, 1)


def test_attention_scaled_dot_product_entry_carries_specialization_metadata():
    entry = scaled_dot_product_f32(
        ScaledDotProduct(batch=3, queries=2, keys=4, qk=5, value=3, threads=Threads3D(x=3, y=2, z=1))
    )
    s = entry.specialization
    assert s.operation_is(ATTENTION_SCALED_DOT_PRODUCT)
    assert s.operation_is("attention.scaled_dot_product")
    assert s.equation == "bqh,bkh,bkv->bqv"
    assert entry.target == "accy.kernel.attention.sdpa3x2x4x5x3_3x2x1_f32"
    assert len(s.inputs) == 3
    assert s.inputs[0].element_count() == 30
    assert s.inputs[1].element_count() == 60
    assert s.inputs[2].element_count() == 36
    assert s.outputs[0].element_count() == 18
    assert len(s.reductions) == 4
    assert s.reduction_matches(0, name="score_dot", operator=ReductionOperator.dot_product, extents=[5])
    assert s.reduction_matches(1, name="score_max", operator=ReductionOperator.maximum, extents=[4], dependencies=["score_dot"])
    assert s.reduction_matches(2, name="score_exp_sum", operator=ReductionOperator.sum_exp_shifted, extents=[4], dependencies=["score_max"])
    assert s.reduction_matches(3, name="value_weighted_sum", operator=ReductionOperator.weighted_sum, extents=[4], dependencies=["score_exp_sum"])
    assert s.reduction_reuse_scopes_are_valid()
    assert len(s.reduction_reuse) == 3
    assert s.reduction_reuse_matches(0, reduction="score_dot", extents=[3, 2, 4])
    assert s.reduction_reuse_matches(1, reduction="score_max", extents=[3, 2])
    assert s.reduction_reuse_matches(2, reduction="score_exp_sum", extents=[3, 2])
    assert s.estimated_element_ops() == 432
    assert s.launch.grid[0] == 1
    assert s.launch.grid[1] == 1
    assert s.launch.grid[2] == 3
    assert s.launch == s.schedule.launch()

    snapshot = entry.schedule_snapshot(entry.Limits.testing)
    assert s.schedule.matches_snapshot(snapshot)


def test_attention_scaled_dot_product_entry_creates_registry_ready_artifact():
    from accy import f32
    from accy import Launch
    from accy.runtime.artifacts import ArtifactFormat, BackendKind, DTypeSet, RecordingBackendState

    entry = ScaledDotProductAttention2x2x3x2x2F32
    state = RecordingBackendState(kind=BackendKind.cuda, format=ArtifactFormat.cuda_ptx)

    call_artifact = entry.create_kernel_call_artifact(state, limits=entry.Limits.testing)

    artifact = call_artifact.registry().find(entry.target, entry.version, ArtifactFormat.cuda_ptx)
    assert artifact is not None, "expected a kernel-call artifact"
    assert artifact.entry_name == entry.name
    assert artifact.argument_count == 4
    assert artifact.required_dtypes == DTypeSet.of([f32])
    assert artifact.fixed and isinstance(artifact.launch, Launch), "expected a fixed launch"
    geometry = artifact.launch
    assert geometry.grid[0] == entry.specialization.launch.grid[0]
    assert geometry.grid[2] == entry.specialization.launch.grid[2]
    assert geometry.threadgroup[0] == entry.specialization.launch.threadgroup[0]
    assert geometry.threadgroup[2] == entry.specialization.launch.threadgroup[2]
