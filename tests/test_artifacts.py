"""Artifacts, the registry and the recording backend state, beyond the seed's test."""

import numpy as np
import pytest

from accy import Program, axis, dynamic_buffer, f32, index
from accy.runtime.artifacts import ABI, ArtifactFormat, RecordingBackendState, Registry
from accy.runtime.arguments import bind_arguments
from accy.errors import LaunchError
from accy.library.attention import ScaledDotProduct, Threads3D, scaled_dot_product_f32


def test_artifact_payload_is_ptx_for_the_state_arch():
    entry = scaled_dot_product_f32(ScaledDotProduct(2, 3, 4, 5, 6))
    for arch in ("sm_80", "sm_90"):
        state = RecordingBackendState(arch=arch)
        artifact = next(iter(entry.create_kernel_call_artifact(state).registry()))
        assert artifact.format is ArtifactFormat.cuda_ptx and artifact.arch == arch
        assert f".target {arch}" in artifact.payload and f".entry {entry.name}(" in artifact.payload
        assert artifact.parameter_names == ("dst", "query", "key", "value") and artifact.abi == ABI
        assert state.compiled == [(entry.name, arch)]


def test_registry_finds_by_target_version_and_format():
    entry = scaled_dot_product_f32(ScaledDotProduct(2, 2, 3, 2, 2, threads=Threads3D(2, 2, 1)))
    registry = entry.create_kernel_call_artifact(RecordingBackendState()).registry()
    assert registry.find(entry.target, entry.version, "cuda_ptx") is not None
    assert registry.find(entry.target, entry.version + 1, ArtifactFormat.cuda_ptx) is None
    assert registry.find("accy.kernel.other", entry.version, ArtifactFormat.cuda_ptx) is None
    assert len(Registry()) == 0


def test_recording_state_records_loads_and_launches():
    def body(k, args):
        k.for_each_1d(axis("i", 10), lambda inner, idx: args.dst.store(inner, args.src[idx["i"]], idx["i"]))

    program = Program("copy", {"dst": dynamic_buffer(f32), "src": dynamic_buffer(f32)}, body)
    state = RecordingBackendState()
    artifact = next(iter(program.create_kernel_call_artifact(state).registry()))
    handle = state.load(artifact)
    binding = bind_arguments(program.graph, [np.zeros(10, np.float32), np.ones(10, np.float32)])
    state.launch(handle, binding)
    assert state.loaded == ["copy"]
    assert state.launched == [("copy", artifact.launch, (10, 10))]
    assert artifact.launch.grid == (1, 1, 1) and artifact.launch.threadgroup == (256, 1, 1)


def test_artifact_respects_limits():
    entry = scaled_dot_product_f32(ScaledDotProduct(1, 64, 2, 2, 64, threads=Threads3D(32, 32, 1)))
    with pytest.raises(LaunchError, match="threads per block"):
        entry.create_kernel_call_artifact(RecordingBackendState(), limits=entry.Limits.testing)


def test_index_buffers_are_required_dtypes():
    def body(k, args):
        k.for_each_1d(axis("i", 4), lambda inner, idx: args.dst.store(inner, args.src[args.at[idx["i"]]], idx["i"]))

    program = Program("gather", {"dst": dynamic_buffer(f32), "src": dynamic_buffer(f32), "at": dynamic_buffer(index)}, body)
    artifact = next(iter(program.create_kernel_call_artifact(RecordingBackendState()).registry()))
    assert f32 in artifact.required_dtypes and index in artifact.required_dtypes and len(artifact.required_dtypes) == 2
