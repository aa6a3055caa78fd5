"""accy profile: GPU cost counted on the emulator (accy/emulator/profile.py), pinned on kernels
whose cost is known by hand, and its roofline model."""

from __future__ import annotations

import json
import math
import pathlib
import re

import numpy as np
import pytest

import accy
from accy import axis, bf16, dynamic_buffer, f32
from accy.cli import load_kernel, main
from accy.emulator import Device
from accy.emulator import profile as model
from accy.emulator.profile import GPUS, LaunchCounters, Pipe
from accy.errors import ArgumentError
from accy.library import ScaledDotProduct, scaled_dot_product_tile
from test_tensor_cores import matmul

ROOT = pathlib.Path(__file__).resolve().parent.parent
BF16 = bf16.numpy


@accy.kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32), y=dynamic_buffer(f32))
def vector_add(k, a):
    k.for_each_1d(axis("i", a.dst.size), lambda inner, idx: a.dst.__setitem__(idx["i"], a.x[idx["i"]] + a.y[idx["i"]]))


@accy.kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32))
def column_read(k, a):  # thread i reads x[32 i]: a column of a 32-wide f32 matrix
    k.for_each_1d(axis("i", a.dst.size), lambda inner, idx: a.dst.__setitem__(idx["i"], a.x[idx["i"] * 32]))


def transpose(width: int):
    """A 32x32 f32 transpose through a shared tile of rows ``width`` wide: each warp writes a row
    and reads a column (32 apart for an unpadded tile: one bank; 33: every bank)."""

    @accy.kernel(f"transpose_{width}", dst=dynamic_buffer(f32), x=dynamic_buffer(f32))
    def body(k, a):
        @k.for_each_block(grid=axis("b", 1), threads=(axis("tx", 32), axis("ty", 32)))
        def tile(inner, block, thread):
            t = inner.shared(f32, 32 * width, "tile")
            tx, ty = thread["tx"], thread["ty"]
            t[ty * width + tx] = a.x[ty * 32 + tx]
            inner.barrier()
            a.dst[ty * 32 + tx] = t[tx * width + ty]

    return body


# -- global memory ------------------------------------------------------------------------------------


def test_coalesced_vector_add_uses_4_sectors_per_request():
    n = 1 << 14
    x, y = np.arange(n, dtype=np.float32), np.ones(n, np.float32)
    dst = np.full(n, np.nan, np.float32)
    p = vector_add.profile([dst, x, y])
    assert np.isnan(dst).all()  # the profile ran on scratch buffers
    warps = n // 32
    load, store = p.global_traffic["load"], p.global_traffic["store"]
    assert (load.requests, load.sectors, load.bytes) == (2 * warps, 8 * warps, 8 * n)
    assert (store.requests, store.sectors) == (warps, 4 * warps)
    assert load.sectors_per_request == store.sectors_per_request == 4
    assert p.sector_efficiency == 1.0
    assert p.dram_bytes == 3 * 4 * n  # a perfect L2: every byte of x, y and dst once
    assert p.flops == n and p.flops_by_pipe["fp32"] == n
    assert p.instruction_classes["fp32"] == warps  # one add.f32 per warp
    assert p.instructions == sum(p.instruction_classes.values())
    assert p.mma_instructions == 0 and p.shared_wavefronts == 0
    assert p.sampled == 1.0 and p.blocks_run == p.blocks


def test_column_read_uses_32_sectors_per_request():
    n = 1024
    p = column_read.profile([np.zeros(n, np.float32), np.ones(32 * n, np.float32)])
    load = p.global_traffic["load"]
    assert (load.requests, load.sectors) == (n // 32, n)
    assert load.sectors_per_request == 32
    assert load.sector_efficiency == pytest.approx(4 / 32)  # 4 useful bytes of each 32-byte sector


# -- shared memory --------------------------------------------------------------------------------------


@pytest.mark.parametrize("width, conflicts", [(33, 0), (32, 31)])
def test_shared_column_read_bank_conflicts(width, conflicts):
    x = np.arange(1024, dtype=np.float32)
    dst = np.zeros(1024, np.float32)
    p = transpose(width).profile([dst, x])
    load, store = p.shared_traffic["load"], p.shared_traffic["store"]
    assert (store.requests, store.wavefronts, store.bank_conflicts) == (32, 32, 0)  # rows: one wavefront
    assert load.requests == 32
    assert load.wavefronts == 32 * (conflicts + 1)
    assert load.conflicts_per_request == conflicts
    assert p.bank_conflicts == 32 * conflicts
    assert p.barriers == 32  # one bar.sync per warp


def _run_ptx(body: str, params: str = "", args=(), block=32, shared=4096) -> LaunchCounters:
    """Counters of a one-block launch of a hand-written kernel (``%r0`` = %tid.x)."""
    ptx = f"""
.version 8.0
.target sm_80
.address_size 64
.visible .entry k({params})
{{
    .reg .b32 %r<40>;
    .reg .b64 %rd<8>;
    .reg .f32 %f<8>;
    .shared .align 16 .b8 smem[{shared}];
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, smem;
{body}
    ret;
}}
"""
    counters = LaunchCounters()
    Device().load_module(ptx).function("k").launch(1, block, list(args), profile=counters)
    return counters


def _shared_load(stride: int, vector: str, **kw) -> list:
    """[requests, wavefronts, ideal, conflicts, bytes] of one warp's ld.shared at lane * stride."""
    regs = {"": "%f1", ".v2": "{%f1, %f2}", ".v4": "{%f1, %f2, %f3, %f4}"}[vector]
    body = f"""
    mul.lo.u32 %r2, %r0, {stride};
    add.u32 %r3, %r1, %r2;
    ld.shared{vector}.f32 {regs}, [%r3];"""
    return _run_ptx(body, **kw).shared["load"]


@pytest.mark.parametrize("stride, vector, wavefronts", [
    (4, "", 1),  # 32 consecutive words
    (0, "", 1),  # one word for every lane: a broadcast
    (8, "", 2),  # every other word: two words in each bank
    (128, "", 32),  # one bank
    (8, ".v2", 2),  # 8 bytes a lane, a half-warp a pass: 2 passes of 128 bytes
    (16, ".v2", 4),  # a half-warp spans 256 bytes: 2 wavefronts a pass
    (16, ".v4", 4),  # 16 bytes a lane, a quarter-warp a pass: 4 passes of 128 bytes
    (32, ".v4", 8),  # a quarter-warp spans 256 bytes
])
def test_shared_wavefronts_by_width(stride, vector, wavefronts):
    requests, waves, ideal, conflicts, nbytes = _shared_load(stride, vector)
    width = 4 * {"": 1, ".v2": 2, ".v4": 4}[vector]
    assert (requests, waves, nbytes) == (1, wavefronts, 32 * width)
    assert ideal == 32 * width // 128
    assert conflicts == wavefronts - ideal


def test_counts_the_same_lanes_in_any_order():
    """The per-warp fast paths (whole warps, lanes in order) and the general ones agree."""
    rng = np.random.default_rng(3)
    for width in (4, 8, 16):
        lanes = np.tile(np.arange(32), 3)
        wk = np.repeat(np.arange(3), 32)
        addr = (rng.integers(0, 64, 96) * width).astype(np.uint64)
        perm = rng.permutation(96)
        fast, general = LaunchCounters(), LaunchCounters()
        fast._shared("load", width, wk, lanes, addr)
        general._shared("load", width, wk[perm], lanes[perm], addr[perm])
        fast._global("load", width, wk, addr)
        general._global("load", width, wk[perm], addr[perm])
        assert fast.shared["load"] == general.shared["load"]
        assert fast.global_["load"] == general.global_["load"]
        assert fast.shared["load"][0] == fast.global_["load"][0] == 3
        assert np.array_equal(fast.sectors(), general.sectors())


@pytest.mark.parametrize("row_bytes, wavefronts", [(80, 4), (64, 16)])
def test_ldmatrix_wavefronts(row_bytes, wavefronts):
    """ldmatrix.x4: lane l gives row l % 8 of matrix l / 8; rows padded to 5 16-byte units
    (80 bytes) fall in distinct banks, one wavefront a matrix; 64-byte rows put 4 of each
    matrix's 8 rows on the same banks."""
    body = f"""
    and.b32 %r2, %r0, 7;
    shr.u32 %r3, %r0, 3;
    mul.lo.u32 %r4, %r2, {row_bytes};
    shl.b32 %r5, %r3, 4;
    add.u32 %r6, %r4, %r5;
    add.u32 %r7, %r1, %r6;
    ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%r10, %r11, %r12, %r13}}, [%r7];"""
    requests, waves, ideal, conflicts, nbytes = _run_ptx(body).shared["ldmatrix"]
    assert (requests, waves, ideal, nbytes) == (1, wavefronts, 4, 512)
    assert conflicts == wavefronts - 4


def test_async_copy_counts_both_sides():
    body = """
    shl.b32 %r2, %r0, 4;
    add.u32 %r3, %r1, %r2;
    ld.param.u64 %rd1, [src];
    cvt.u64.u32 %rd2, %r2;
    add.u64 %rd3, %rd1, %rd2;
    cp.async.cg.shared.global [%r3], [%rd3], 16;
    cp.async.commit_group;
    cp.async.wait_group 0;"""
    dev = Device()
    src = dev.alloc(512)
    ptx_counters = LaunchCounters()
    ptx = f"""
.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 src)
{{
    .reg .b32 %r<40>;
    .reg .b64 %rd<8>;
    .shared .align 16 .b8 smem[1024];
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, smem;
{body}
    ret;
}}
"""
    dev.load_module(ptx).function("k").launch(1, 32, [src], profile=ptx_counters)
    assert ptx_counters.async_bytes == 512
    assert ptx_counters.global_["async_copy"] == [1, 16, 512]  # 512 contiguous bytes: 16 sectors
    assert ptx_counters.shared["async_copy"][:4] == [1, 4, 4, 0]  # a quarter-warp a pass


# -- tensor cores -----------------------------------------------------------------------------------------


def _bf16(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(BF16)


def test_tile_matmul_mma_count_and_flops():
    M, N, K = 128, 64, 64
    program = matmul(bf16, f32, 64, 32, 32, 4)
    p = program.profile([np.zeros((M, N), np.float32), _bf16((M, K)), _bf16((K, N), 1)])
    assert p.mma_instructions == M * N * K // (16 * 8 * 16)
    assert p.instruction_classes["mma"] == p.mma_instructions
    assert p.flops == p.flops_by_pipe["tensor f16/bf16"] == 2 * M * N * K


@pytest.fixture(scope="module")
def tile_matmul_profile():
    program = load_kernel(str(ROOT / "examples" / "tile_matmul.py") + ":tile_matmul_bf16")
    M = N = K = 128
    return program.profile([np.zeros((M, N), np.float32), _bf16((M, K)), _bf16((K, N), 1)])


@pytest.fixture(scope="module")
def tile_attention_profile():
    spec = ScaledDotProduct(1, 128, 128, 64, 64)
    entry = scaled_dot_product_tile(spec, dtype=bf16)
    q, k, v = (_bf16((1, 128, 64), s) for s in range(3))
    return entry.profile([np.zeros((1, 128, 64), BF16), q, k, v])


@pytest.mark.parametrize("which", ["tile_matmul_profile", "tile_attention_profile"])
def test_tensor_core_kernels_ldmatrix_and_global_loads(which, request):
    p = request.getfixturevalue(which)
    ldm = p.shared_traffic["ldmatrix"]
    assert ldm.requests > 0 and ldm.bank_conflicts == 0 and ldm.wavefronts == ldm.ideal
    assert p.global_traffic["async_copy"].requests > 0
    assert p.global_loads.sector_efficiency >= 0.95
    assert p.mma_instructions > 0


def test_the_attention_output_goes_through_shared_memory_to_whole_sectors(tile_attention_profile):
    """The bf16 output, held in the mma layout (4 bytes a run), is restaged through shared memory
    (padded rows: no bank conflict) so that each thread stores 16 bytes and a warp 512: every
    32-byte sector written whole, a quarter of the store requests of storing the fragments."""
    p = tile_attention_profile
    store = p.global_traffic["store"]
    assert store.bytes == 128 * 64 * 2 and store.sectors * 32 == store.bytes and store.requests * 512 == store.bytes
    assert all(t.bank_conflicts == 0 for t in p.shared_traffic.values())


def test_tile_matmul_profile_numbers(tile_matmul_profile):
    p = tile_matmul_profile
    assert p.mma_instructions == 128 ** 3 // 2048
    assert p.global_traffic["load"].requests == 0  # both operands by cp.async (no element loads)
    assert p.async_copy_bytes == 2 * 128 * 128 * 2  # its one 128x128 program copies all of a and b
    assert p.dram_bytes == 2 * 128 * 128 * 2 + 4 * 128 * 128
    # one 128x128 program on one SM: its critical path (the latency model) outlasts its throughput
    r = p.roofline
    assert p.latency is not None and p.latency_seconds > max(r.compute_seconds, r.memory_seconds)
    assert p.estimated_seconds == pytest.approx(p.latency_seconds + r.launch_seconds)
    assert p.limiter == "critical path" and p.to_dict()["latency"]["waves"] == 1


# -- sampling ---------------------------------------------------------------------------------------------


def test_sampling_matches_the_full_run_on_a_uniform_grid():
    program = load_kernel(str(ROOT / "examples" / "tile_matmul.py") + ":tile_matmul_bf16")
    M = N = 512  # 16 programs of 128x128
    K = 64
    args = [np.zeros((M, N), np.float32), _bf16((M, K)), _bf16((K, N), 1)]
    full = program.profile(args)
    part = program.profile(args, sample=4)
    assert full.blocks == 16 and full.sampled == 1.0
    assert part.blocks_run == 4 and part.sampled == 0.25
    for name in ("instructions", "global_requests", "global_sectors", "shared_wavefronts", "bank_conflicts",
                 "mma_instructions", "flops", "dram_bytes", "barriers", "async_copy_bytes"):
        a, b = getattr(full, name), getattr(part, name)
        assert b == pytest.approx(a, rel=0.03), name
    assert "a sample of 4 of 16 blocks" in str(part)


def test_big_launches_are_sampled_automatically(monkeypatch):
    monkeypatch.setattr(model, "SAMPLE_WORK", 1000)
    n = 1 << 16
    args = [np.zeros(n, np.float32) for _ in range(3)]
    p = vector_add.profile(args)
    assert p.blocks == n // 256 and p.blocks_run == model.PROBE_BLOCKS and p.sampled < 1
    assert p.global_traffic["load"].requests == pytest.approx(2 * n // 32, rel=0.01)
    assert p.dram_bytes == pytest.approx(3 * 4 * n, rel=0.01)
    monkeypatch.setattr(model, "SAMPLE_WORK", 10 ** 9)
    assert vector_add.profile(args).sampled == 1.0


def test_evenly_spaced_blocks():
    assert list(model.evenly_spaced(10, 3)) == [0, 4, 9]  # first and last included
    assert list(model.evenly_spaced(4, 8)) == [0, 1, 2, 3]


# -- the model --------------------------------------------------------------------------------------------


def test_roofline_bounds():
    h200 = GPUS["h200"]
    assert h200.peak(Pipe.TENSOR_F16) == pytest.approx(989.4e12 * 2 / 3)  # mma.sync on sm_90
    assert h200.peak(Pipe.FP32) == 66.9e12 and h200.dram_bandwidth == 4.8e12
    assert GPUS["a100"].peak(Pipe.TENSOR_F16) == 312e12 and GPUS["a100"].dram_bandwidth == 2.039e12
    compute = model.roofline(h200, {Pipe.TENSOR_F16: 659.6e12 * 1e-3}, 0, 0, 4.8e12 * 1e-4)
    assert compute.bound == "compute" and compute.limiter == "tensor f16/bf16"
    assert compute.estimated_seconds == pytest.approx(1e-3 + h200.launch_latency, rel=1e-3)
    memory = model.roofline(h200, {Pipe.FP32: 1e6}, 0, 0, 4.8e12 * 1e-3)
    assert memory.bound == "memory" and memory.limiter == "dram"
    assert memory.estimated_seconds == pytest.approx(1e-3 + h200.launch_latency)
    latency = model.roofline(h200, {Pipe.FP32: 1e6}, 100, 0, 1e3)
    assert latency.bound == "latency"
    issue = model.roofline(h200, {Pipe.FP32: 1e6}, h200.issue_rate * 1e-3, 0, 0)
    assert issue.bound == "compute" and issue.limiter == "issue"


def test_the_compute_ceilings_are_the_busiest_sms():
    h200 = GPUS["h200"]
    work = dict(flops={Pipe.FP32: 66.9e12 * 1e-3}, instructions=h200.issue_rate * 1e-3,
                wavefronts=h200.shared_rate * 1e-3, dram_bytes=0)
    even = model.roofline(h200, **work)
    full = model.roofline(h200, **work, blocks=132 * 3, warps_per_block=4)  # three whole waves
    tail = model.roofline(h200, **work, blocks=133, warps_per_block=4)  # one SM runs two blocks
    lone = model.roofline(h200, **work, blocks=1, warps_per_block=2)  # one SM, two warps: 2 a clock
    for ceiling in ("issue_seconds", "shared_seconds"):
        assert getattr(full, ceiling) == pytest.approx(getattr(even, ceiling))
        assert getattr(tail, ceiling) == pytest.approx(getattr(even, ceiling) * 2 * 132 / 133)
    assert tail.pipes[Pipe.FP32] == pytest.approx(even.pipes[Pipe.FP32] * 2 * 132 / 133)
    assert lone.issue_seconds == pytest.approx(even.issue_seconds * 132 * 2)
    assert lone.shared_seconds == pytest.approx(even.shared_seconds * 132)
    assert lone.waves.resident_warps == 2 and lone.waves.issue_fraction == 0.5 and full.waves.busiest == 3


def test_gpu_and_arch_choice():
    x = np.ones(64, np.float32)
    assert vector_add.profile([x.copy(), x, x], arch="sm_80").gpu.key == "a100"
    assert vector_add.profile([x.copy(), x, x]).gpu.key == "h200"
    p = vector_add.profile([x.copy(), x, x], gpu="h100")
    assert p.gpu.key == "h100" and "NVIDIA H100" in str(p)
    with pytest.raises(ArgumentError, match="the profile knows the GPUs"):
        vector_add.profile([x.copy(), x, x], gpu="b200")
    with pytest.raises(ArgumentError, match="sample takes a positive number"):
        vector_add.profile([x.copy(), x, x], sample=0)
    assert accy.Profile is model.Profile


def test_profile_report_and_dict(tile_matmul_profile):
    p = tile_matmul_profile
    text = str(p)
    assert "roofline" in text and p.gpu.name in text and f"{p.bound}-bound" in text
    data = json.loads(json.dumps(p.to_dict()))
    assert data["mma_instructions"] == p.mma_instructions and data["bound"] == p.bound
    assert data["global_traffic"]["async_copy"]["requests"] == p.global_traffic["async_copy"].requests
    assert math.isclose(data["tflops"], p.tflops)


# -- the command line -------------------------------------------------------------------------------------


def test_cli_profile_prints_and_exits_0(capsys):
    kernel = str(ROOT / "examples" / "tile_matmul.py") + ":tile_matmul_bf16"
    assert main(["profile", kernel, "--size", "128", "--gpu", "h100"]) == 0  # one 128x128 program
    out = capsys.readouterr().out
    assert "profile tile_matmul_bf16: sm_90 PTX" in out and "NVIDIA H100 SXM5" in out
    assert re.search(r"(compute|memory|latency)-bound", out)
    assert main(["profile", kernel, "--size", "128", "--json", "--arch", "sm_80"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpu"] == "a100" and data["mma_instructions"] == 128 ** 3 // 2048

