"""The tile kernels of examples/tile_*.py (issue 18 §4) on every backend that runs tile
graphs, checked against an independent NumPy reference and against the numpy backend.

Tolerances are the tile level's accuracy rule (docs/ir.md): elementwise ops and integer
reductions, scans and atomics are exact; a float sum, cumsum or dot of n terms is within
gamma_n * sum |terms| of the exact value (u the unit roundoff of the f32 accumulator).
Softmax and the norms compose those sums with math functions (within 2 ulp on every
backend); their bounds are the rule carried through the kernel to first order
(:func:`softmax_bound`, :func:`layer_norm_bound`, :func:`rms_norm_bound`), doubled for the
second-order terms. Each non-numpy backend is also compared with the numpy backend (the
reference interpreter) on the same inputs, so a failure says whether the backend or the
reference disagrees.

Each kernel runs with its example's own tiles and, on llvm and ptx, also with small tiles
on one warp (tiles narrower than a vector, many tiles along each loop, a 32-thread block).
The ptx backend runs its PTX on accy's emulator, which runs every thread: it gets smaller
shapes (still several of the examples' tiles, and ragged edges everywhere).
"""

import importlib.util
import pathlib

import attrs
import numpy as np
import pytest

from accy import bf16, f32, i32

ROOT = pathlib.Path(__file__).resolve().parent.parent
U = 2.0 ** -24  # f32's unit roundoff: every kernel here accumulates in f32
MATH = 4 * U  # a math function (exp, rsqrt) within 2 ulp: a relative error of at most 2 * 2u


def example(name: str):
    """The module examples/<name>.py (its kernel factories)."""
    path = ROOT / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@attrs.frozen
class Target:
    """A backend, and whether the kernels run with their examples' tiles or with small tiles
    on one warp (tiles narrower than a vector, many tiles along a loop, a 32-thread block)."""

    backend: str
    small_tiles: bool = False

    def __str__(self) -> str:
        return self.backend + ("-small-tiles" if self.small_tiles else "")


TARGETS = [Target("numpy"), Target("llvm"), Target("llvm", True), Target("ptx"), Target("ptx", True)]
on_every_target = pytest.mark.parametrize("target", TARGETS, ids=str)


def small(backend: str) -> bool:
    """The emulator runs every thread of the PTX: smaller shapes there."""
    return backend == "ptx"


def gamma(n) -> np.ndarray:
    n = np.asarray(n, np.float64)
    return n * U / (1 - n * U)


def run(program, outputs, inputs, backend):
    """Run ``program`` on ``backend`` with fresh copies of ``outputs`` (returned) and ``inputs``."""
    outputs = [o.copy() for o in outputs]
    program.run([*outputs, *inputs], backend=backend)
    return outputs


def assert_within(got, exact, bound, what):
    """|got - exact| <= bound elementwise, in float64; names the worst element."""
    error = np.abs(np.asarray(got, np.float64) - exact)
    excess = error - bound
    worst = np.unravel_index(np.argmax(excess), excess.shape)
    assert np.all(np.isfinite(got)), f"{what}: non-finite results at {np.argwhere(~np.isfinite(got))[:5].tolist()}"
    assert excess[worst] <= 0, (f"{what}: element {tuple(map(int, worst))} is {got[worst]!r}, the exact value "
                                f"{exact[worst]!r}: off by {error[worst]:.3g}, over the bound {bound[worst]:.3g}")


@attrs.frozen
class Agreement:
    """How a backend's result must agree with the numpy backend's: exactly, or within twice
    the bound (each is within the bound of the exact value)."""

    exact: bool

    def check(self, got, numpy_got, bound, what):
        if self.exact:
            np.testing.assert_array_equal(got, numpy_got, err_msg=f"{what}: differs from the numpy backend")
        else:
            assert_within(got, np.asarray(numpy_got, np.float64), 2 * bound, f"{what}, against the numpy backend")


EXACT, BOUNDED = Agreement(True), Agreement(False)


def also_against_numpy(backend, program, outputs, inputs, got, bound, agreement, what):
    if backend != "numpy":
        numpy_got = run(program, outputs, inputs, "numpy")
        for g, n in zip(got, numpy_got):
            agreement.check(g, n, bound, what)


# -- vector add -------------------------------------------------------------------------------


@on_every_target
def test_vector_add(target):
    backend = target.backend
    module = example("tile_vector_add")
    program = module.make_vector_add(32) if target.small_tiles else module.tile_vector_add
    rng = np.random.default_rng(1)
    n = 2_500 if small(backend) else 50_001
    x = rng.standard_normal(3 * n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    for xs, ys in ((x[:n], y), (x[::3], y[::-1])):  # contiguous, then a step and a reversed view
        (got,) = run(program, [np.full(n, np.nan, np.float32)], [xs, ys], backend)
        np.testing.assert_array_equal(got, xs + ys, err_msg=backend)
        also_against_numpy(backend, program, [np.full(n, np.nan, np.float32)], [xs, ys], [got], None, EXACT,
                           f"vector add on {backend}")


# -- matmul -----------------------------------------------------------------------------------


def matmul_cases(backend):
    rng = np.random.default_rng(2)
    M, N, K = (70, 90, 50) if small(backend) else (333, 517, 129)
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    bt = np.ascontiguousarray(b.T)
    return [("f32", f32, a, b), ("f32 b.T view", f32, a, bt.T),
            ("bf16 in, f32 out", bf16, a.astype(bf16.numpy), b.astype(bf16.numpy))]


@on_every_target
def test_matmul_f32_bf16_and_a_transposed_view(target):
    backend = target.backend
    module = example("tile_matmul")
    for what, dtype, a, b in matmul_cases(backend):
        program = module.make_matmul(dtype, 8, 8, 8, warps=1) if target.small_tiles else module.make_matmul(dtype)
        c = np.full((a.shape[0], b.shape[1]), np.nan, np.float32)
        (got,) = run(program, [c], [a, b], backend)
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        bound = gamma(a.shape[1]) * (np.abs(a64) @ np.abs(b64))  # bf16 products are exact in f32
        assert_within(got, a64 @ b64, bound, f"matmul {what} on {backend}")
        also_against_numpy(backend, program, [c], [a, b], [got], bound, BOUNDED, f"matmul {what} on {backend}")


def test_matmul_b_transposed_view_is_not_copied_first():
    """The b.T case above really passes a transposed view: strides (1, K) of b's memory."""
    _, _, _, b = matmul_cases("numpy")[1]
    assert b.strides == (4, 4 * b.shape[0]) and not b.flags.c_contiguous


# -- row softmax ----------------------------------------------------------------------------------


def softmax_bound(x: np.ndarray, cols: int) -> np.ndarray:
    """The accuracy rule carried through the online softmax of each row: exp(z) with
    z = x - max rounded (|z| u) and within MATH; the sum of n positive terms within gamma_n
    plus its terms' own errors; each rescaling of the running sum by exp(m_old - m_new)
    (at most one per tile of ``cols`` columns) within (|m_old - m_new| u + MATH + 2u); the
    division u. Doubled for second order."""
    x = x.astype(np.float64)
    n = x.shape[1]
    z = x - x.max(axis=1, keepdims=True)
    y = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    term = np.abs(z) * U + MATH
    spread = x.max(axis=1, keepdims=True) - x.min(axis=1, keepdims=True)
    rescales = -(-n // cols) * (spread * U + MATH + 2 * U)
    rel_sum = gamma(n) + (y * term).sum(axis=1, keepdims=True) + rescales
    return 2 * y * (term + U + rel_sum + U)


def softmax_reference(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@on_every_target
def test_row_softmax(target):
    backend = target.backend
    module = example("tile_softmax")
    rows, cols = (2, 16) if target.small_tiles else (module.ROWS, module.COLS)
    program = module.make_softmax(rows, cols, warps=1) if target.small_tiles else module.tile_softmax
    rng = np.random.default_rng(3)
    R, C = (6, 300) if small(backend) else (37, 781)
    big = (rng.standard_normal((R, 2 * C)) * 10).astype(np.float32)
    for x in (np.ascontiguousarray(big[:, :C]), big[:, ::2]):  # C order, then a step along the rows
        dst = np.full((R, C), np.nan, np.float32)
        (got,) = run(program, [dst], [x], backend)
        bound = softmax_bound(x, cols)
        assert_within(got, softmax_reference(x), bound, f"softmax on {backend}")
        also_against_numpy(backend, program, [dst], [x], [got], bound, BOUNDED, f"softmax on {backend}")


# -- layer norm and RMSNorm ------------------------------------------------------------------------


def layer_norm_bound(x, w, b, eps) -> np.ndarray:
    """The rule carried through the two-pass layer norm: the mean's sum (gamma_n sum |x|) and
    division; the variance's sum of n rounded squares of rounded deviations
    (gamma_{n+2}, and the mean's error squared); rsqrt within MATH of a value off by
    half the variance's relative error; then (x - mean) * rstd * w + b, a rounding each.
    Doubled for second order."""
    x = x.astype(np.float64)
    n = x.shape[1]
    mean = x.mean(axis=1, keepdims=True)
    d = x - mean
    var = (d * d).mean(axis=1, keepdims=True)
    d_mean = gamma(n) * np.abs(x).mean(axis=1, keepdims=True) + U * np.abs(mean)
    rel_var = gamma(n + 2) + U + d_mean ** 2 / np.maximum(var, np.finfo(np.float64).tiny)
    rstd = 1 / np.sqrt(var + eps)
    rel_rstd = 0.5 * (rel_var * var / (var + eps) + U) + MATH
    y = d * rstd * w + b
    return 2 * (np.abs(w) * rstd * (d_mean + U * np.abs(d)) + np.abs(w * d) * rstd * (rel_rstd + 2 * U)
                + U * np.abs(y))


def rms_norm_bound(x, w, eps) -> np.ndarray:
    x = x.astype(np.float64)
    n = x.shape[1]
    ms = (x * x).mean(axis=1, keepdims=True)
    rel_rstd = 0.5 * ((gamma(n + 1) + U) * ms / (ms + eps) + U) + MATH
    y = x / np.sqrt(ms + eps) * w
    return 2 * np.abs(y) * (rel_rstd + 2 * U)


def norm_inputs(backend):
    rng = np.random.default_rng(4)
    R, C = (6, 300) if small(backend) else (29, 1000)
    big = (rng.standard_normal((C, 2 * R)) * 2 + 50).astype(np.float32)  # offset: cancellation in x - mean
    w, b = rng.standard_normal(C, dtype=np.float32), rng.standard_normal(C, dtype=np.float32)
    return [(np.ascontiguousarray(big[:, :R].T), w, b), (big[:, ::2].T, w[::-1], b)]  # then transposed views


@on_every_target
def test_layer_norm(target):
    backend = target.backend
    module = example("tile_norms")
    program = module.make_layer_norm(2, 16, warps=1) if target.small_tiles else module.tile_layer_norm
    eps = np.float32(1e-5)
    for x, w, b in norm_inputs(backend):
        y = np.full(x.shape, np.nan, np.float32)
        (got,) = run(program, [y], [x, w, b, eps], backend)
        x64 = x.astype(np.float64)
        mean = x64.mean(axis=1, keepdims=True)
        exact = (x64 - mean) / np.sqrt(((x64 - mean) ** 2).mean(axis=1, keepdims=True) + float(eps)) * w + b
        bound = layer_norm_bound(x, w, b, float(eps))
        assert_within(got, exact, bound, f"layer norm on {backend}")
        also_against_numpy(backend, program, [y], [x, w, b, eps], [got], bound, BOUNDED, f"layer norm on {backend}")


@on_every_target
def test_rms_norm(target):
    backend = target.backend
    module = example("tile_norms")
    program = module.make_rms_norm(2, 16, warps=1) if target.small_tiles else module.tile_rms_norm
    eps = np.float32(1e-5)
    for x, w, _ in norm_inputs(backend):
        y = np.full(x.shape, np.nan, np.float32)
        (got,) = run(program, [y], [x, w, eps], backend)
        x64 = x.astype(np.float64)
        exact = x64 / np.sqrt((x64 * x64).mean(axis=1, keepdims=True) + float(eps)) * w
        bound = rms_norm_bound(x, w, float(eps))
        assert_within(got, exact, bound, f"rms norm on {backend}")
        also_against_numpy(backend, program, [y], [x, w, eps], [got], bound, BOUNDED, f"rms norm on {backend}")


# -- row argmax -----------------------------------------------------------------------------------


@on_every_target
def test_row_argmax_ties_nan_and_infinities(target):
    backend = target.backend
    module = example("tile_argmax")
    program = module.make_argmax(2, 16, warps=1) if target.small_tiles else module.tile_argmax
    rng = np.random.default_rng(5)
    R, C = (7, 300) if small(backend) else (23, 1000)
    x = rng.integers(-9, 9, (R, C)).astype(np.float32)  # many ties, across tiles too
    x[1, C // 2] = x[1, C - 3] = np.nan  # the first NaN wins
    x[2, 3:] = np.inf
    x[3] = -np.inf  # all equal: column 0
    x[4, :] = 0.0
    x[4, C - 1] = 1.0  # in the last, ragged tile
    x[5, 0], x[5, 1] = -0.0, 0.0  # equal: the first
    x[6, :] = np.nan
    for xs in (x, np.asfortranarray(x)):
        out = np.full(R, -7, np.int64)
        (got,) = run(program, [out], [xs], backend)
        np.testing.assert_array_equal(got, np.argmax(x, axis=1), err_msg=backend)
        also_against_numpy(backend, program, [out], [xs], [got], None, EXACT, f"argmax on {backend}")


# -- row cumsum -----------------------------------------------------------------------------------


@on_every_target
def test_row_cumsum_f32_and_i32(target):
    backend = target.backend
    module = example("tile_cumsum")
    rng = np.random.default_rng(6)
    R, C = (5, 300) if small(backend) else (21, 1000)
    x = rng.standard_normal((R, C), dtype=np.float32)
    xi = rng.integers(-2 ** 31, 2 ** 31, (R, C), dtype=np.int64).astype(np.int32)  # the sums wrap
    for dtype, data in ((f32, x), (i32, xi)):
        program = module.make_cumsum(dtype, 2, 16, warps=1) if target.small_tiles else module.make_cumsum(dtype)
        for xs in (data, data[::-1]):  # and a view with a negative row stride
            dst = np.zeros((R, C), data.dtype)
            (got,) = run(program, [dst], [xs], backend)
            if dtype == f32:
                bound = gamma(np.arange(1, C + 1)) * np.cumsum(np.abs(xs.astype(np.float64)), axis=1)
                assert_within(got, np.cumsum(xs.astype(np.float64), axis=1), bound, f"f32 cumsum on {backend}")
                also_against_numpy(backend, program, [dst], [xs], [got], bound, BOUNDED, f"cumsum on {backend}")
            else:
                np.testing.assert_array_equal(got, np.cumsum(xs, axis=1, dtype=np.int32), err_msg=backend)
                also_against_numpy(backend, program, [dst], [xs], [got], None, EXACT, f"i32 cumsum on {backend}")


# -- 2-D stencil on strided views -------------------------------------------------------------------


def stencil_reference(x):
    """0.5 x + 0.125 (up + down + left + right), zero outside, in float32 with the kernel's
    order of operations: elementwise ops are exact, so bit for bit."""
    z = np.pad(x, 1)
    around = ((z[:-2, 1:-1] + z[2:, 1:-1]) + z[1:-1, :-2]) + z[1:-1, 2:]
    return x * np.float32(0.5) + around * np.float32(0.125)


@on_every_target
def test_stencil_on_strided_views(target):
    backend = target.backend
    module = example("tile_stencil")
    program = module.make_stencil(4, 8, warps=1) if target.small_tiles else module.tile_stencil
    rng = np.random.default_rng(7)
    big = rng.standard_normal((70, 70) if small(backend) else (203, 130), dtype=np.float32)
    x = big[::2, 1::2]
    M, N = x.shape
    out = np.full((3 * M + 2, 2 * N + 3), np.nan, np.float32)

    def dst(o):
        return o[1::3, ::-2][:M, :N]  # a view with steps, one of them negative

    got = out.copy()
    program.run([dst(got), x], backend=backend)
    np.testing.assert_array_equal(dst(got), stencil_reference(x), err_msg=backend)
    outside = np.ones(out.shape, bool)
    dst(outside)[...] = False
    assert np.isnan(got[outside]).all(), f"{backend} wrote outside the output view"
    if backend != "numpy":
        expected = out.copy()
        program.run([dst(expected), x], backend="numpy")
        np.testing.assert_array_equal(got, expected, err_msg=f"stencil on {backend}: differs from numpy's")


# -- histogram with atomic_add on tiles -------------------------------------------------------------


@on_every_target
def test_histogram_atomic_add_of_tiles(target):
    backend = target.backend
    module = example("tile_histogram")
    program = module.make_histogram(32, warps=1) if target.small_tiles else module.tile_histogram
    rng = np.random.default_rng(8)
    n, bins = (3_000, 16) if small(backend) else (100_003, 256)
    x = rng.integers(-3, bins + 3, n).astype(np.int32)
    x[:40] = 5  # one bin hit many times within one tile
    expected = np.bincount(x[(x >= 0) & (x < bins)], minlength=bins)
    hist = np.full(bins, 1, np.int32)  # atomics add to what is there
    (got,) = run(program, [hist], [x], backend)
    np.testing.assert_array_equal(got, expected + 1, err_msg=backend)
    also_against_numpy(backend, program, [hist], [x], [got], None, EXACT, f"histogram on {backend}")
