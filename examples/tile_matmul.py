"""Matrix multiply as a tile program: each program computes one 64x64 tile of ``c``.

The program for output tile (m, n) walks along K in steps of 32: it loads a 64x32 tile
of ``a`` and a 32x64 tile of ``b`` (zeros past the edges, so odd sizes need no special
case), and accumulates their product with ``t.dot`` into a 64x64 f32 tile carried by
``fold_range``; then it stores the tile (elements past the edges are not written).
bf16 inputs accumulate in f32, as on tensor cores. ``a`` and ``b`` may have any layout:
a transposed view ``b.T`` runs through the same compiled kernel.
Run with ``python examples/tile_matmul.py``.
"""

import numpy as np

from accy import axis, bf16, cdiv, f32, kernel, tensor


def make_matmul(dtype=f32, bm: int = 64, bn: int = 64, bk: int = 32, warps: int = 4, num_stages: int = 2):
    """c (f32) = a @ b for ``dtype`` inputs (f32 or bf16), one bm x bn tile of c per program
    (``warps`` and ``num_stages``: the GPU's threads per program / 32 and its copies in flight)."""

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
