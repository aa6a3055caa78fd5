"""Matrix multiply as a tile program: each program computes one tile of ``c``.

The program for output tile (m, n) walks along K: in f32 it loads a 64x32 tile of ``a`` and
a 32x64 tile of ``b`` a trip (zeros past the edges, so odd sizes need no special case), and
accumulates their product with ``t.dot`` into a 64x64 f32 tile carried by ``fold_range``;
then it stores the tile (elements past the edges are not written).  In bf16 the tiles are
128x128 walking K 64 at a time, on 8 warps with 3 buffers per operand: the tiling a GPU's
tensor cores want (``TILES``).
bf16 inputs accumulate in f32, as on tensor cores. ``a`` and ``b`` may have any layout:
a transposed view ``b.T`` runs through the same compiled kernel.
Run with ``python examples/tile_matmul.py``.
"""

import numpy as np

from accy import axis, bf16, cdiv, f16, f32, kernel, tensor


# each input type's tiling by default: (bm, bn, bk, warps, num_stages).  bf16 runs on a GPU's
# tensor cores, where 128x128 tiles on 8 warps walking K 64 at a time with 3 buffers per operand
# (two trips' copies in flight) are Triton's choice for this kernel, and accy's code for them meets
# Triton's (python -m bench.sass); f32 runs on FMAs, whose operands are loaded into registers
# (f16 as bf16; any other type as f32)
TILES = {f32: (64, 64, 32, 4, 2), bf16: (128, 128, 64, 8, 3), f16: (128, 128, 64, 8, 3)}


def make_matmul(dtype=f32, bm: int | None = None, bn: int | None = None, bk: int | None = None,
                warps: int | None = None, num_stages: int | None = None):
    """c (f32) = a @ b for ``dtype`` inputs (f32, bf16 or f16), one bm x bn tile of c per program
    (``warps`` and ``num_stages``: the GPU's threads per program / 32 and the buffers of each
    operand, ``num_stages - 1`` trips' copies in flight); what is not given is ``TILES[dtype]``'s."""
    given = (bm, bn, bk, warps, num_stages)
    bm, bn, bk, warps, num_stages = (g if g is not None else d for g, d in zip(given, TILES.get(dtype, TILES[f32])))

    name = "tile_matmul" if dtype == f32 else f"tile_matmul_{dtype}"

    @kernel(name, c=tensor(f32, 2), a=tensor(dtype, 2), b=tensor(dtype, 2))
    def tile_matmul(k, p):
        M, K = p.a.shape
        N = p.b.shape[1]

        @k.for_each_tile(grid=(axis("m", cdiv(M, bm)), axis("n", cdiv(N, bn))), warps=warps,
                         num_stages=num_stages)
        def body(t, pid):
            def step(t, k0, acc):
                a = p.a.load_tile((pid["m"] * bm, k0), (bm, bk))  # zeros past the edges
                b = p.b.load_tile((k0, pid["n"] * bn), (bk, bn))
                return t.dot(a, b, acc)

            acc = t.fold_range(0, K, bk, t.zeros((bm, bn), f32), step)
            p.c.store_tile((pid["m"] * bm, pid["n"] * bn), acc)  # elements past the edges untouched

    return tile_matmul


tile_matmul = make_matmul(f32)
tile_matmul_bf16 = make_matmul(bf16)
PROGRAMS = [tile_matmul, tile_matmul_bf16]


def dot_bound(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How far an f32-accumulated a @ b may be from the exact product, elementwise:
    gamma_K * (|a| @ |b|), gamma_K = K u / (1 - K u), u = 2**-24."""
    k = a.shape[1]
    u = 2.0 ** -24
    return k * u / (1 - k * u) * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))


def check(program, a: np.ndarray, b: np.ndarray, backend: str) -> float:
    """Run ``program`` on ``backend``; its error relative to the bound (<= 1 passes)."""
    c = np.full((a.shape[0], b.shape[1]), np.nan, np.float32)
    program.run([c, a, b], backend=backend)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bound = dot_bound(a, b)
    worst = float(np.max(np.abs(c - exact) / np.maximum(bound, np.finfo(np.float64).tiny)))
    assert worst <= 1.0, f"{program.name} on {backend}: error {worst:.3g}x the gamma_K bound"
    return worst


def main() -> None:
    rng = np.random.default_rng(0)
    M, N, K = 333, 517, 129
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    bt = np.ascontiguousarray(b.T)  # (N, K) in memory; bt.T is a transposed view of it
    worst = 0.0
    for backend in ("numpy", "llvm"):
        worst = max(worst, check(tile_matmul, a, b, backend))
        worst = max(worst, check(tile_matmul, a, bt.T, backend))
        worst = max(worst, check(tile_matmul_bf16, a.astype(bf16.numpy), b.astype(bf16.numpy), backend))
    print(f"tile_matmul {M}x{K} @ {K}x{N}, f32, f32 with b a transposed view, and bf16 in / f32 out: "
          f"matches NumPy (numpy and llvm, within {worst:.2g}x the gamma_K bound)")


if __name__ == "__main__":
    main()
