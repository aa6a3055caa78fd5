"""The language issue's kernels assemble with ptxas at sm_80 and sm_90 (the suite's own runs
assemble at sm_80): promotion, fmod and truncdiv, random numbers, bitcasts, strided boxes,
tiles of 5 dimensions, slices and cat, and the user's combines."""

import pytest

import accy
from accy import axis, cdiv, f16, f32, i32, i64, kernel, scalar, tensor
from accy.codegen.nvptx import toolchain


@kernel(dst=tensor(f32, 2), ints=tensor(i32, 2), x=tensor(f16, 2), y=tensor(accy.bf16, 2), n=tensor(i32, 2),
        seed=scalar(i64))
def language(k, p):
    H, W = p.dst.shape

    @k.for_each_tile(grid=(axis("r", cdiv(H, 16)), axis("c", cdiv(W, 32))), warps=4)
    def program(t, pid):
        r0, c0 = pid["r"] * 16, pid["c"] * 32
        x = p.x.load_tile((2 * r0, 2 * c0), (16, 32), steps=(2, 2))          # strided box
        y = p.y.load_tile((r0, c0), (16, 32))
        n = p.n.load_tile((r0, c0), (16, 32), other=1)
        offsets = (r0 + t.arange(16))[:, None] * W + (c0 + t.arange(32))[None, :]
        mixed = x * y + n / 3 + t.rand(p.seed, offsets)                       # promotion, f32 division
        rounded = t.fmod(n, 7) + t.truncdiv(n, 3) + t.randint(p.seed, offsets).cast(i32, bitcast=True)
        halves = t.cat(mixed[:, :16], mixed[:, 16:], axis=1)                 # slices and cat
        summed = t.reduce(halves, 1, lambda a, b: a + b)                     # the user's combine
        running = t.associative_scan(halves, 1, lambda a, b: t.maximum(a, b), reverse=True)
        p.dst.store_tile((r0, c0), running + summed[:, None] + t.bitcast(rounded, f32) * 0)
        p.ints.store_tile((r0, c0), rounded)


@kernel(dst=tensor(f32, 5), x=tensor(f32, 5))
def five(k, p):
    @k.for_each_tile(grid=axis("i", 1), warps=2)
    def program(t, pid):
        x = p.x.load_tile((0,) * 5, (2, 2, 3, 4, 8))
        p.dst.store_tile((0,) * 5, x - t.max(x, axis=2, keepdims=True) + t.permute(x, (4, 3, 2, 1, 0)).sum())


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("program", [language, five], ids=["language", "five"])
def test_the_language_kernels_assemble(program, arch):
    if toolchain.find_ptxas() is None:
        pytest.skip("no ptxas on this machine: pip install nvidia-cuda-nvcc (the test extra does)")
    ptx = program.ptx(arch=arch)
    assert toolchain.assemble(ptx, arch)
