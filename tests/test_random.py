"""Random numbers (accy.dsl.random): Philox-4x32-10 bit for bit against a NumPy Philox written
from the paper, on every backend; equal to Triton's stream (its interpreter, where installed);
``randn`` within its math functions' ulps; ``umulhi`` at every integer width."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import accy
from accy import axis, f32, i32, i64, kernel, scalar, tensor
from accy.dsl.types import DTYPES

M32 = np.uint64(0xFFFFFFFF)


def philox(seed: int, c0, c1, rounds: int = 10):
    """Philox-4x32 (Salmon et al. 2011) on NumPy uint64 arrays holding 32-bit words."""
    c0, c1 = (np.asarray(c, np.uint64) & M32 for c in (c0, c1))
    c2 = c3 = np.zeros_like(c0)
    seed %= 2**64
    k0, k1 = np.uint64(seed & 0xFFFFFFFF), np.uint64(seed >> 32)
    for _ in range(rounds):
        p0, p1 = np.uint64(0xD2511F53) * c0, np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & M32, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & M32)
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & M32, (k1 + np.uint64(0xBB67AE85)) & M32
    return tuple(c.astype(np.uint32) for c in (c0, c1, c2, c3))


def uniform(x):
    signed = x.view(np.int32)
    return np.where(signed < 0, ~signed, signed).astype(np.float32) * np.float32(4.6566127342e-10)


N = 300


@kernel(ints=tensor(accy.u32, 2), uni=tensor(f32, 1), normal=tensor(f32, 1), seed=scalar(i64), base=scalar(i64))
def draws(k, p):
    @k.for_each_tile(grid=axis("i", (N + 127) // 128), warps=4)
    def program(t, pid):
        at = pid["i"] * 128
        offsets = p.base + at + t.arange(128)
        inside = offsets < p.base + N
        for j, word in enumerate(t.randint4x(p.seed, offsets)):
            p.ints.store((j, offsets - p.base), word, mask=inside)
        p.uni.store(offsets - p.base, t.rand(p.seed, offsets), mask=inside)
        p.normal.store(offsets - p.base, t.randn(p.seed, offsets), mask=inside)


@pytest.mark.parametrize("seed, base", [(0, 0), (123456789, 5), (-7, 2**32 - 100), (2**62 + 12345, 2**40)])
def test_philox_draws_bit_for_bit_on_every_backend(backend, seed, base):
    ints, uni, normal = np.zeros((4, N), np.uint32), np.zeros(N, np.float32), np.zeros(N, np.float32)
    draws.run([ints, uni, normal, seed, base], backend=backend)
    offsets = np.arange(base, base + N, dtype=np.int64)
    want = philox(seed, offsets.astype(np.uint64) & M32, offsets.astype(np.uint64) >> np.uint64(32))
    for j in range(4):
        np.testing.assert_array_equal(ints[j], want[j], err_msg=f"word {j}")
    np.testing.assert_array_equal(uni, uniform(want[0]))
    assert uni.min() >= 0 and uni.max() < 1
    u1 = np.maximum(uniform(want[0]), np.float32(1e-7)).astype(np.float64)
    angle = (uniform(want[1]) * np.float32(6.283185307179586)).astype(np.float64)
    # log, sqrt and cos are within a few ulps of f32 on every backend (docs/ir.md's table)
    np.testing.assert_allclose(normal, np.sqrt(-2 * np.log(u1)) * np.cos(angle), rtol=2e-6, atol=2e-6)


def test_the_draws_look_uniform_and_normal():
    ints, uni, normal = np.zeros((4, N), np.uint32), np.zeros(N, np.float32), np.zeros(N, np.float32)
    draws.run([ints, uni, normal, 42, 0], backend="llvm")
    assert abs(uni.mean() - 0.5) < 0.05 and abs(normal.mean()) < 0.2 and abs(normal.std() - 1) < 0.15
    assert len(np.unique(ints)) == ints.size  # 1200 32-bit draws: a collision would be a bug here


@pytest.mark.parametrize("name", ["u8", "i16", "u32", "i32", "u64", "i64"])
def test_umulhi_is_the_high_half_of_the_unsigned_product(backend, name):
    t = DTYPES[name]

    @kernel(dst=tensor(t, 1), a=tensor(t, 1), b=tensor(t, 1))
    def high(k, p):
        @k.for_each_tile(grid=axis("i", 1), warps=1)
        def program(tb, pid):
            p.dst.store_tile((0,), tb.umulhi(p.a.load_tile((0,), (64,)), p.b.load_tile((0,), (64,))))

    rng = np.random.default_rng(1)
    info = np.iinfo(t.numpy)
    a, b = (rng.integers(info.min, info.max, 64, dtype=t.numpy, endpoint=True) for _ in range(2))
    a[:3], b[:3] = [info.max, info.min, -1 if info.min else 0], [info.max, info.max, info.max]
    dst = np.zeros(64, t.numpy)
    high.run([dst, a, b], backend=backend)
    bits = t.bits
    ua, ub = ([int(v) % 2**bits for v in x] for x in (a, b))
    want = np.array([((x * y) >> bits) for x, y in zip(ua, ub)], dtype=np.uint64 if bits == 64 else np.int64)
    np.testing.assert_array_equal(dst.view(f"u{t.itemsize}").astype(np.uint64), want.astype(np.uint64))


def test_bad_seeds_and_rounds_are_trace_errors():
    from accy.errors import TraceError

    def program_with(draw):
        @kernel(dst=tensor(f32, 1), x=tensor(f32, 1))
        def bad(k, p):
            @k.for_each_tile(grid=axis("i", 1), warps=1)
            def program(t, pid):
                p.dst.store_tile((0,), draw(t, p))

        return bad

    for draw, message in [
        (lambda t, p: t.rand(p.x.load_tile((0,), (8,)), t.arange(8)), r"the seed is an integer scalar"),
        (lambda t, p: t.rand(1.5, t.arange(8)), r"the seed is an integer scalar"),
        (lambda t, p: t.rand(2**64, t.arange(8)), r"does not fit in 64 bits"),
        (lambda t, p: t.rand(1, t.arange(8), n_rounds=0), r"n_rounds is a positive Python int"),
        (lambda t, p: t.rand(1, p.x.load_tile((0,), (8,))), r"offsets must be integers"),
    ]:
        with pytest.raises(TraceError, match=message):
            program_with(draw).graph


TRITON_STREAM = """
import os, sys
os.environ["TRITON_INTERPRET"] = "1"
import numpy as np, torch, triton, triton.language as tl

@triton.jit
def draws(ints, uni, normal, seed, N: tl.constexpr, OFFSET_TYPE: tl.constexpr):
    offsets = tl.arange(0, N).to(OFFSET_TYPE) + 1000
    a, b, c, d = tl.randint4x(seed, offsets)
    tl.store(ints + tl.arange(0, N), a)
    tl.store(ints + N + tl.arange(0, N), b)
    tl.store(ints + 2 * N + tl.arange(0, N), c)
    tl.store(ints + 3 * N + tl.arange(0, N), d)
    tl.store(uni + tl.arange(0, N), tl.rand(seed, offsets))
    tl.store(normal + tl.arange(0, N), tl.randn(seed, offsets))

out = {}
for name, kind in (("i32", tl.int32), ("i64", tl.int64)):
    ints = torch.zeros(4 * 64, dtype=torch.int32); uni = torch.zeros(64); normal = torch.zeros(64)
    draws[(1,)](ints, uni, normal, int(sys.argv[1]), N=64, OFFSET_TYPE=kind)
    out[name] = (ints.numpy().view(np.uint32).reshape(4, 64), uni.numpy(), normal.numpy())
np.savez(sys.argv[2], **{f"{k}_{j}": v[j] for k, v in out.items() for j in range(3)})
"""


@pytest.mark.parametrize("seed", [0, 987654321, 2**40 + 3])
def test_the_stream_is_tritons(tmp_path, seed):
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    saved = tmp_path / "triton.npz"
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(TRITON_STREAM), str(seed), str(saved)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    theirs = np.load(saved)
    for name, offset_type in (("i32", i32), ("i64", i64)):
        @kernel(ints=tensor(accy.u32, 2), uni=tensor(f32, 1), normal=tensor(f32, 1), seed=scalar(i64))
        def ours(k, p):
            @k.for_each_tile(grid=axis("i", 1), warps=2)
            def program(t, pid):
                offsets = (t.arange(64) + 1000).cast(offset_type)
                for j, word in enumerate(t.randint4x(p.seed, offsets)):
                    p.ints.store((j, t.arange(64)), word)
                p.uni.store_tile((0,), t.rand(p.seed, offsets))
                p.normal.store_tile((0,), t.randn(p.seed, offsets))

        ints, uni, normal = np.zeros((4, 64), np.uint32), np.zeros(64, np.float32), np.zeros(64, np.float32)
        ours.run([ints, uni, normal, seed], backend="llvm")
        np.testing.assert_array_equal(ints, theirs[f"{name}_0"])
        np.testing.assert_array_equal(uni, theirs[f"{name}_1"])
        np.testing.assert_allclose(normal, theirs[f"{name}_2"], rtol=2e-6, atol=2e-6)
