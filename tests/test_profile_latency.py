"""The profile's latency model (accy/emulator/latency.py): per-warp clocks by event, pinned on
hand-written PTX (a copy's latency, copies overlapping, a barrier joining the slowest warp,
wgmmas queueing on the tensor pipe), and the software pipeline it exists to see: a tile matmul
at one stage estimated well slower than at four, with wgmma (sm_90a) and with mma.sync (sm_80)."""

from __future__ import annotations

import numpy as np
import pytest

from accy import bf16, f32
from accy.emulator import Device
from accy.emulator.latency import HOPPER, LatencyClocks, Share, Stall
from accy.emulator.profile import GPUS, LaunchCounters, classify
from tile_kernels import matmul_program

H200 = GPUS["h200"]


def _clocks(body: str, *, block: int = 32, arch: str = "sm_80", params: str = "", args=(), decls: str = ""):
    """The latency clocks of a one-block launch of a hand-written kernel (``%r0`` = %tid.x, ``%r1``
    = the shared tile's address, ``%rd0`` = the global array ``src``)."""
    version = "8.0" if arch == "sm_80" else "8.3"
    ptx = f"""
.version {version}
.target {arch}
.address_size 64
.visible .entry k(.param .u64 src{params})
{{
    .reg .b32 %r<40>;
    .reg .b64 %rd<30>;
    .reg .f32 %f<8>;
    .reg .pred %p<4>;
{decls}
    .shared .align 128 .b8 smem[16384];
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, smem;
    ld.param.u64 %rd0, [src];
    cvta.to.global.u64 %rd0, %rd0;
    shl.b32 %r2, %r0, 4;
    cvt.u64.u32 %rd1, %r2;
    add.u64 %rd2, %rd0, %rd1;
    add.u32 %r3, %r1, %r2;
{body}
    ret;
}}
"""
    dev = Device()
    src = dev.alloc(1 << 16)
    clocks = LatencyClocks(Share.of(H200, arch, 1, block, 16384), classify)
    counters = LaunchCounters(clocks)
    dev.load_module(ptx).function("k").launch(1, block, [src, *args], profile=counters)
    bound = clocks.bound(1, H200.sms)
    return clocks, bound


def _copies(n: int, wait_each: bool) -> str:
    lines = []
    for i in range(n):
        lines.append(f"    cp.async.cg.shared.global [%r3+{512 * i}], [%rd2+{512 * i}], 16;")
        lines.append("    cp.async.commit_group;")
        if wait_each:
            lines.append("    cp.async.wait_group 0;")
    lines.append("    cp.async.wait_all;")
    return "\n".join(lines)


def test_a_lone_copy_and_its_wait_take_the_memory_latency():
    _, bound = _clocks(_copies(1, wait_each=True))
    assert HOPPER.global_memory < bound.mean_path < HOPPER.global_memory + 100
    assert bound.stalls[Stall.COPIES.value] > 0.8  # the warp waited for its copy, most of the time


def test_independent_copies_before_one_wait_overlap():
    _, one = _clocks(_copies(1, wait_each=False))
    _, overlapped = _clocks(_copies(8, wait_each=False))
    _, serial = _clocks(_copies(8, wait_each=True))
    assert overlapped.mean_path < one.mean_path + 200  # eight latencies at once: about one
    assert serial.mean_path > 7 * HOPPER.global_memory  # each waited for: eight latencies
    assert serial.mean_path > 4 * overlapped.mean_path


def test_a_barrier_joins_every_warp_to_the_slowest():
    body = """
    setp.lt.u32 %p1, %r0, 32;
    @%p1 bra DONE;
    cp.async.cg.shared.global [%r3], [%rd2], 16;
    cp.async.wait_all;
DONE:
    bar.sync 0;"""
    clocks, bound = _clocks(body, block=64)
    fast, slow = clocks.clock[:2]
    assert fast == pytest.approx(slow)  # the warp with nothing to wait for waits at the barrier
    assert fast > HOPPER.global_memory + HOPPER.barrier
    assert clocks.stall[Stall.BARRIER][0] > HOPPER.global_memory  # warp 0 waited there, for warp 1
    _, alone = _clocks(body.replace("bar.sync 0;", ""), block=64)
    assert bound.mean_path == pytest.approx(alone.mean_path + HOPPER.barrier, abs=5)


def _wgmma(count: int) -> str:
    d = ", ".join(f"%d{i}" for i in range(128))
    lines = ["    mov.b64 %rd20, 0;", "    wgmma.fence.sync.aligned;"]
    lines += [f"    wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {{{d}}}, %rd20, %rd20, 0, 1, 1, 0, 0;"] * count
    lines += ["    wgmma.commit_group.sync.aligned;", "    wgmma.wait_group.sync.aligned 0;"]
    return "\n".join(lines)


def test_wgmmas_queue_on_the_tensor_pipe():
    decls = "    .reg .f32 %d<128>;"
    _, one = _clocks(_wgmma(1), block=128, arch="sm_90a", decls=decls)
    _, four = _clocks(_wgmma(4), block=128, arch="sm_90a", decls=decls)
    pipe = 2 * 64 * 256 * 16 / (H200.peaks[next(p for p in H200.peaks if p.value == "wgmma f16/bf16")]
                                / H200.sms / H200.clock_hz)  # one m64n256k16 on the whole SM: ~138 cycles
    assert four.mean_path - one.mean_path == pytest.approx(3 * pipe, rel=0.1)  # one after another
    assert one.mean_path > pipe + HOPPER.wgmma
    assert four.stalls[Stall.TENSOR.value] > 0.5


def _matmul_estimate(arch: str, stages: int) -> float:
    M = N = 256  # 16 blocks of 64x64: one per SM, nothing else to hide the pipeline's latency
    K = 1024
    a, b = np.ones((M, K), bf16.numpy), np.ones((K, N), bf16.numpy)
    c = np.zeros((M, N), np.float32)
    program = matmul_program(bf16, f32, 64, 64, 32, 4, stages=stages)
    profile = program.profile(dict(c=c, a=a, b=b), arch=arch, gpu="h200")
    assert profile.latency is not None and profile.bound == "latency"
    return profile.estimated_seconds


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_a_matmul_at_one_stage_is_estimated_well_slower_than_at_four(arch):
    """The pipeline's point: at four stages the copies of later k-steps are in flight while the
    tensor cores work, at one each k-step waits for its own (wgmma at sm_90a, mma.sync at sm_80)."""
    one, four = _matmul_estimate(arch, 1), _matmul_estimate(arch, 4)
    assert one >= 1.5 * four
