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
