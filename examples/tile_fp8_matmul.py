"""An fp8 matrix multiply with scales as a tile program: ``c = (a @ b.T) * scales``.

``a`` is (M, K) and ``b`` is given as (N, K), both fp8 (``f8e4m3`` or ``f8e5m2``): the "TN"
layout of cuBLAS's fp8 GEMM and of DeepSeek-V3's, in which both operands lie along K.  It is
the only layout Hopper's fp8 ``wgmma`` (at ``sm_90a``) reads from shared memory: accy stages an
fp8 ``b`` that lies in k rows, (K, N), through registers instead.  The program for output tile
(m, n) walks along K a 128x128 tile of each operand a trip (zeros past the edges, so odd sizes
need no special case), feeds ``b``'s tile to ``t.dot`` transposed, and accumulates in f32.  The
scales multiply the f32 accumulator in the epilogue, before the one rounding to ``out_dtype``
(bf16 or f32):

- ``scaling="tensor"``: ``a_scale`` and ``b_scale`` are f32 scalars (one scale per tensor);
- ``scaling="rowcol"``: ``a_scale`` is an f32 tensor of shape (M,) (a scale per row of ``a``)
  and ``b_scale`` one of shape (N,) (a scale per row of ``b``, a column of ``c``).

``fp8_matmul`` checks the shapes before it runs (a scale of the wrong length would otherwise read
zeros past its end); ``check`` compares with float64 within ``error_bound``.
Run with ``python examples/tile_fp8_matmul.py``; on the PTX emulator at Hopper's arch (fp8
wgmma, slow: keep the sizes small) pass ``backend="ptx", arch="sm_90a"`` to ``check``.
"""

import numpy as np

from accy import axis, bf16, cdiv, f8e4m3, f8e5m2, f32, kernel, scalar, tensor
from accy.errors import ArgumentError

SCALINGS = ("tensor", "rowcol")
U_F32 = 2.0 ** -24  # f32's unit roundoff
# half an ulp, relative: the rounding of the scaled f32 result to the output type
ROUNDING = {f32: 0.0, bf16: 2.0 ** -8}


def make_fp8_matmul(dtype=f8e4m3, scaling: str = "tensor", out_dtype=bf16, bm: int = 128, bn: int = 128,
                    bk: int = 128, warps: int = 8, num_stages: int = 3):
    """c (``out_dtype``) = (a @ b.T) * scales for ``dtype`` (fp8) ``a`` (M, K) and ``b`` (N, K),
    one bm x bn tile of c per program, K walked bk at a time, f32 accumulation; ``scaling``:
    "tensor" (``a_scale``, ``b_scale`` f32 scalars) or "rowcol" (f32 tensors of shapes (M,), (N,))."""
    if dtype not in (f8e4m3, f8e5m2):
        raise ArgumentError(f"make_fp8_matmul: dtype must be f8e4m3 or f8e5m2, got {dtype}")
    if scaling not in SCALINGS:
        raise ArgumentError(f"make_fp8_matmul: scaling must be one of {SCALINGS}, got {scaling!r}")
    if out_dtype not in ROUNDING:
        raise ArgumentError(f"make_fp8_matmul: out_dtype must be bf16 or f32, got {out_dtype}")
    scale = scalar(f32) if scaling == "tensor" else tensor(f32, 1)

    @kernel(f"tile_fp8_matmul_{dtype.name[2:]}_{scaling}_{out_dtype}", c=tensor(out_dtype, 2),
            a=tensor(dtype, 2), b=tensor(dtype, 2), a_scale=scale, b_scale=scale)
    def tile_fp8_matmul(k, p):
        M, K = p.a.shape
        N = p.b.shape[0]

        @k.for_each_tile(grid=(axis("m", cdiv(M, bm)), axis("n", cdiv(N, bn))), warps=warps,
                         num_stages=num_stages)
        def body(t, pid):
            m0, n0 = pid["m"] * bm, pid["n"] * bn

            def step(t, k0, acc):
                a = p.a.load_tile((m0, k0), (bm, bk))  # zeros past the edges
                b = p.b.load_tile((n0, k0), (bn, bk))  # b's rows along K: fed to dot as (bk, bn)
                return t.dot(a, t.trans(b), acc)

            acc = t.fold_range(0, K, bk, t.zeros((bm, bn), f32), step)
            if scaling == "tensor":
                acc = acc * (p.a_scale * p.b_scale)
            else:
                a_scale = p.a_scale.load_tile((m0,), (bm,))
                b_scale = p.b_scale.load_tile((n0,), (bn,))
                acc = acc * a_scale[:, None] * b_scale[None, :]
            out = acc if out_dtype == f32 else acc.cast(out_dtype)  # the one rounding to out_dtype
            p.c.store_tile((m0, n0), out)  # elements past the edges untouched

    return tile_fp8_matmul


def kind(program) -> tuple:
    """(dtype, scaling, out_dtype) of a program from :func:`make_fp8_matmul`, read off its parameters."""
    params = {p.name: p for p in program.parameters}
    return params["a"].dtype, "tensor" if params["a_scale"].is_scalar else "rowcol", params["c"].dtype


# The default tiling is Hopper's (sm_90a): a trip of bk=128 is four k32 fp8 wgmmas, one chunk of
# accy.lowering.warpgroups.FP8_PROMOTION_STEPS.  Below sm_90a fp8 is widened to f16 (exactly) for
# mma.sync through registers: two 128x128 operand tiles in f16 pass a program's 48 KiB of scratch,
# and at 64 a trip the widening spills (255 registers); there, and in PROGRAMS (which lower for
# every arch), K is walked 32 at a time.
BK_BEFORE_HOPPER = 32
tile_fp8_matmul = make_fp8_matmul(f8e4m3, "tensor", bf16, bk=BK_BEFORE_HOPPER)
tile_fp8_matmul_rowcol = make_fp8_matmul(f8e4m3, "rowcol", bf16, bk=BK_BEFORE_HOPPER)
PROGRAMS = [tile_fp8_matmul, tile_fp8_matmul_rowcol]


def fp8_matmul(program, c, a, b, a_scale, b_scale, backend: str = "numpy", **options) -> None:
    """Run ``program`` (from :func:`make_fp8_matmul`) after checking the shapes: a (M, K), b (N, K),
    c (M, N); the scales f32 scalars ("tensor") or f32 arrays of shapes (M,) and (N,) ("rowcol").
    A mismatch is an ``ArgumentError`` naming the argument; nothing runs."""
    dtype, scaling, out_dtype = kind(program)
    for name, x, want in (("a", a, dtype), ("b", b, dtype), ("c", c, out_dtype)):
        if np.ndim(x) != 2 or np.asarray(x).dtype != want.numpy:
            raise ArgumentError(f"{program.name}: argument '{name}' must be a 2-D {want} array, "
                                f"got {np.asarray(x).dtype} of shape {np.shape(x)}")
    (M, K), (N, K_b) = np.shape(a), np.shape(b)
    if K_b != K:
        raise ArgumentError(f"{program.name}: argument 'b' must be (N, K) = (N, {K}) for a of shape "
                            f"{(M, K)}, got {np.shape(b)} (give b as (N, K): K-major, 'TN')")
    if np.shape(c) != (M, N):
        raise ArgumentError(f"{program.name}: argument 'c' must be (M, N) = {(M, N)}, got {np.shape(c)}")
    for name, s, n in (("a_scale", a_scale, M), ("b_scale", b_scale, N)):
        want = () if scaling == "tensor" else (n,)
        if np.shape(s) != want or (want and np.asarray(s).dtype != np.float32):
            what = "a Python or f32 scalar" if scaling == "tensor" else f"an f32 array of shape {want}"
            raise ArgumentError(f"{program.name} ({scaling} scaling): argument '{name}' must be {what}, "
                                f"got {type(s).__name__} of shape {np.shape(s)}")
    program.run(dict(c=c, a=a, b=b, a_scale=a_scale, b_scale=b_scale), backend=backend, **options)


def promoted(backend: str, arch: str | None = None) -> bool:
    """Does the dot sum fp8 products with fewer bits than f32 (Hopper's fp8 wgmma: PTX at sm_90a,
    and a GPU, where the bound covers mma.sync's accumulation too)?"""
    return backend == "cuda" or (backend == "ptx" and arch == "sm_90a")


def error_bound(a, b, a_scale, b_scale, out_dtype, promoted: bool = False) -> np.ndarray:
    """How far c may be from the exact (a @ b.T) * scales, elementwise.  The dot is within
    e = beta |a| @ |b.T| of the exact E: beta = gamma_K (f32 accumulation, u = 2**-24), or, with
    ``promoted``, (steps 2**-13 + 2 K 2**-24) (Hopper's fp8 wgmma sums ``steps`` k32-steps keeping
    13 fraction bits, then adds the chunk to f32: accy.lowering.warpgroups.FP8_PROMOTION_STEPS,
    accy.emulator.wgmma.FP8_FRACTION_BITS).  The scales s = sa sb multiply in two f32 roundings,
    then one rounding to ``out_dtype`` (r: half an ulp relative, 2**-8 for bf16, 0 for f32):
    |c - s E| <= |s| ((1 + r) ((1 + u)**2 e + ((1 + u)**2 - 1) |E|) + r |E|)."""
    from accy.emulator.wgmma import FP8_FRACTION_BITS
    from accy.lowering.warpgroups import FP8_PROMOTION_STEPS

    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    k = a.shape[1]
    if promoted:
        beta = FP8_PROMOTION_STEPS * 2.0 ** -FP8_FRACTION_BITS + 2 * k * U_F32
    else:
        beta = k * U_F32 / (1 - k * U_F32)
    e = beta * (np.abs(a64) @ np.abs(b64).T)
    exact = np.abs(a64 @ b64.T)
    s = np.abs(_scales(a_scale, b_scale))
    r, grow = ROUNDING[out_dtype], (1 + U_F32) ** 2
    return s * ((1 + r) * (grow * e + (grow - 1) * exact) + r * exact)


def _scales(a_scale, b_scale) -> np.ndarray:
    """The scales of c's elements in float64: a scalar, or an (M, N) outer product."""
    sa, sb = np.asarray(a_scale, np.float64), np.asarray(b_scale, np.float64)
    return sa * sb if sa.ndim == 0 else sa[:, None] * sb[None, :]


def random_inputs(program, M: int, N: int, K: int, rng: np.random.Generator):
    """fp8 a (M, K) and b (N, K) of standard normals, and scales of ``program``'s kind."""
    dtype, scaling, _ = kind(program)
    a = rng.standard_normal((M, K)).astype(dtype.numpy)
    b = rng.standard_normal((N, K)).astype(dtype.numpy)
    if scaling == "tensor":
        return a, b, 0.75, 1.5
    return a, b, rng.uniform(0.1, 4, M).astype(np.float32), rng.uniform(0.1, 4, N).astype(np.float32)


def check(program, a, b, a_scale, b_scale, backend: str, **options) -> float:
    """Run ``program`` on ``backend``; its error relative to ``error_bound`` (<= 1 passes).  The
    fp8 inputs and f32 scales are exact in float64 (so is the reference's sum, to 2**-53)."""
    _, _, out_dtype = kind(program)
    c = np.full((a.shape[0], b.shape[0]), np.nan, out_dtype.numpy)
    fp8_matmul(program, c, a, b, a_scale, b_scale, backend=backend, **options)
    exact = (a.astype(np.float64) @ b.astype(np.float64).T) * _scales(a_scale, b_scale)
    bound = error_bound(a, b, a_scale, b_scale, out_dtype, promoted(backend, options.get("arch")))
    worst = float(np.max(np.abs(c.astype(np.float64) - exact) / np.maximum(bound, np.finfo(np.float64).tiny)))
    assert worst <= 1.0, f"{program.name} on {backend}: error {worst:.3g}x the bound"
    return worst


def main() -> None:
    rng = np.random.default_rng(0)
    M, N, K = 200, 136, 300
    worst = 0.0
    for program in PROGRAMS:
        inputs = random_inputs(program, M, N, K, rng)
        for backend in ("numpy", "llvm"):
            worst = max(worst, check(program, *inputs, backend))
    print(f"tile_fp8_matmul {M}x{K} @ ({N}x{K}).T, e4m3 in / bf16 out, per-tensor and per-row/column "
          f"scales: matches NumPy (numpy and llvm, within {worst:.2g}x the bound)")


if __name__ == "__main__":
    main()
