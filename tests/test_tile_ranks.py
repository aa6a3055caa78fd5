"""Tiles of 1 to 5 dimensions on every backend, and one element limit (Triton's 2**20) wherever a
tile is made; a GPU program holds at most 512 elements of a tile a thread; the llvm backend keeps
large tiles on the heap."""

import numpy as np
import pytest

from accy import axis, f32, kernel, tensor
from accy.errors import TraceError


def _every_axis(shape):
    rank = len(shape)

    @kernel(dst=tensor(f32, rank), moved=tensor(f32, rank), x=tensor(f32, rank), y=tensor(f32, rank))
    def every_axis(k, p):
        @k.for_each_tile(grid=axis("i", 1), warps=4)
        def program(t, pid):
            at = (0,) * rank
            x, y = p.x.load_tile(at, shape), p.y.load_tile(at, shape)
            z = t.exp(x) * y + 1
            total = 0
            for ax in range(rank):
                total = total + t.max(x, axis=ax, keepdims=True) + t.sum(z, axis=ax, keepdims=True)
            p.dst.store_tile(at, z + total)
            perm = tuple(reversed(range(rank)))
            p.moved.store_tile(at, t.trans(t.trans(x, perm) * 2, perm) + t.cumsum(x, axis=rank - 2))

    return every_axis


@pytest.mark.parametrize("shape", [(2, 3, 4, 8), (3, 1, 5, 4), (2, 2, 3, 4, 8), (1, 3, 1, 5, 7)],
                         ids=lambda s: "x".join(map(str, s)))
def test_four_and_five_dimensional_tiles(backend, shape):
    rng = np.random.default_rng(len(shape))
    x, y = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    dst, moved = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
    _every_axis(shape).run([dst, moved, x, y], backend=backend)
    x64 = x.astype(np.float64)
    z = np.exp(x64) * y + 1
    want = z + sum(x64.max(axis=a, keepdims=True) + z.sum(axis=a, keepdims=True) for a in range(len(shape)))
    np.testing.assert_allclose(dst, want, rtol=2e-6, atol=2e-5)
    np.testing.assert_allclose(moved, x64 * 2 + np.cumsum(x64, axis=len(shape) - 2), rtol=1e-6, atol=2e-6)


def test_rope_on_a_four_dimensional_box(backend):
    """Rotary embeddings on (B, S, H, D): a program per block of positions, a 4-D box of all
    heads, the two halves of D rotated by the position's angles."""
    B, S, H, D, BS = 2, 10, 3, 8, 4
    half = D // 2

    @kernel(dst=tensor(f32, 4), x=tensor(f32, 4), cos=tensor(f32, 2), sin=tensor(f32, 2))
    def rope(k, p):
        @k.for_each_tile(grid=(axis("b", B), axis("s", (S + BS - 1) // BS)), warps=2)
        def program(t, pid):
            b, s0 = pid["b"], pid["s"] * BS
            lo = p.x.load_tile((b, s0, 0, 0), (1, BS, H, half))
            hi = p.x.load_tile((b, s0, 0, half), (1, BS, H, half))
            c = p.cos.load_tile((s0, 0), (BS, half))[None, :, None, :]
            s = p.sin.load_tile((s0, 0), (BS, half))[None, :, None, :]
            p.dst.store_tile((b, s0, 0, 0), lo * c - hi * s)
            p.dst.store_tile((b, s0, 0, half), hi * c + lo * s)

    rng = np.random.default_rng(7)
    x = rng.standard_normal((B, S, H, D)).astype(np.float32)
    angles = np.arange(S)[:, None] / 10000 ** (np.arange(half) / half)
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    dst = np.zeros_like(x)
    rope.run([dst, x, cos, sin], backend=backend)
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    want = np.concatenate([x[..., :half] * c - x[..., half:] * s, x[..., half:] * c + x[..., :half] * s], axis=-1)
    np.testing.assert_allclose(dst, want, rtol=1e-6, atol=1e-6)


def _big(shape, warps=4):
    @kernel(dst=tensor(f32, 2), other=tensor(f32, 2), x=tensor(f32, 2), y=tensor(f32, 2))
    def big(k, p):
        @k.for_each_tile(grid=axis("i", 2), warps=warps)
        def program(t, pid):
            x, y = p.x.load_tile((0, 0), shape), p.y.load_tile((0, 0), shape)
            a = t.exp(x)
            b = a * y
            c = t.trans(b) + t.cumsum(x, axis=0)
            p.dst.store_tile((0, 0), c + t.sum(c, axis=0, keepdims=True) + a - b)
            p.other.store_tile((0, 0), a + x * y + c)

    return big


@pytest.mark.parametrize("backend_name", ["numpy", "llvm"])
def test_large_tiles_on_the_cpu_backends(backend_name):
    """Tiles of 2**18 elements, several alive at once (more than a thread's stack on llvm)."""
    shape = (512, 512)
    rng = np.random.default_rng(3)
    x, y = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    dst, other = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
    _big(shape).run([dst, other, x, y], backend=backend_name)
    x64 = x.astype(np.float64)
    a = np.exp(x64)
    b = a * y
    c = b.T + np.cumsum(x64, axis=0)
    np.testing.assert_allclose(dst, c + c.sum(axis=0, keepdims=True) + a - b, rtol=2e-4, atol=1e-2)  # f32 sums of 512
    np.testing.assert_allclose(other, a + x64 * y + c, rtol=1e-5, atol=1e-4)


def test_a_gpu_program_holds_at_most_512_elements_of_a_tile_a_thread():
    with pytest.raises(TraceError, match=r"384x384> is 1152 elements for each of the 128 threads "
                                         r"of a GPU program of 4 warps, over the 512 a thread holds"):
        _big((384, 384)).ptx()

    @kernel(dst=tensor(f32, 2), x=tensor(f32, 2))
    def exp(k, p):
        @k.for_each_tile(grid=axis("i", 1), warps=1)
        def program(t, pid):
            p.dst.store_tile((0, 0), p.x.load_tile((0, 0), (128, 128)) * 2)

    assert "ld.global" in exp.ptx()  # 512 elements a thread: the most
