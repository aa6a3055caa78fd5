"""Tile-level test kernels with independent NumPy references, for every backend's tests.

``CASES`` lists :class:`TileCase` entries: a program, how to make its arguments, the outputs
NumPy expects (computed from the arguments before the run, in float64 where rounding
matters) and, for float sums, scans and dots, the bound the IR reference states
(gamma_n * sum |terms|, u the accumulation type's unit roundoff); every other output must
match bit for bit.  ``run_case(case, backend, rng)`` runs one and checks it, so a backend's
tests are ``@pytest.mark.parametrize("case", CASES)`` over ``run_case(case, "llvm", rng)``.

The kernels index flat ``dynamic_buffer`` memory by hand (``rows[:, None] * n + cols``) and
``tensor`` parameters through ``load_tile``/``store_tile``; sizes are odd so every tile
at an edge is partly masked.
"""

from __future__ import annotations

import copy
from typing import Callable

import attrs
import ml_dtypes
import numpy as np

import accy
from accy import axis, bf16, cdiv, f16, f32, f64, i8, i32, index, u8

UNIT_ROUNDOFF = {np.dtype(np.float32): 2.0**-24, np.dtype(np.float64): 2.0**-53}


def matmul_program(dtype=f32, acc_type=f32, bm: int = 64, bn: int = 64, bk: int = 32, warps: int = 4,
                   precision=None, *, transposed: bool = False, stages: int | None = None):
    """c (acc_type) = a @ b for ``dtype`` tensors, one bm x bn tile of c per program, K walked bk
    at a time in a fold (the issue's matmul, at any tiles); ``transposed``: c = a @ b.T, b given
    as (N, K) rows; ``stages``: the fold's pipeline stages (None: the default)."""
    pipeline = {} if stages is None else {"num_stages": stages}

    @accy.kernel(c=accy.tensor(acc_type, 2), a=accy.tensor(dtype, 2), b=accy.tensor(dtype, 2))
    def matmul(k, p):
        M, K = p.a.shape
        N = p.b.shape[0 if transposed else 1]

        @k.for_each_tile(grid=(axis("m", cdiv(M, bm)), axis("n", cdiv(N, bn))), warps=warps, **pipeline)
        def body(t, pid):
            def step(t, k0, acc):
                a = p.a.load_tile((pid["m"] * bm, k0), (bm, bk))
                if transposed:
                    b = t.trans(p.b.load_tile((pid["n"] * bn, k0), (bn, bk)))
                else:
                    b = p.b.load_tile((k0, pid["n"] * bn), (bk, bn))
                return t.dot(a, b, acc, precision=precision) if precision else t.dot(a, b, acc)

            acc = t.fold_range(0, K, bk, t.zeros((bm, bn), acc_type), step)
            p.c.store_tile((pid["m"] * bm, pid["n"] * bn), acc)

    return matmul


def gamma(n, u: float):
    """gamma_n = n*u / (1 - n*u): the relative error bound of an n-term float sum."""
    n = np.asarray(n, np.float64)
    return n * u / (1 - n * u)


LIBDEVICE_BACKENDS = ("ptx", "cuda")  # exp and friends from libdevice: within 2 ulp (docs/ir.md)


@attrs.frozen
class TileCase:
    """One kernel and its check.  ``reference(args)`` gives the expected value of each output it
    checks; ``tolerance(args)`` (None: none) the absolute error allowed per element for the outputs
    it names (every other checked output must match bit for bit, NaN where NaN, the sign of zero too)."""

    name: str
    program: accy.Program
    make_args: Callable[[np.random.Generator], dict]
    reference: Callable[[dict], dict]
    tolerance: Callable[[dict], dict] | None = None
    # the bounds on a backend whose math functions are within the IR reference's ulps rather
    # than correctly rounded (libdevice, on ptx and cuda); None: as everywhere else
    math_tolerance: Callable[[dict], dict] | None = None

    def bounds(self, args: dict, backend: str) -> dict:
        if self.math_tolerance is not None and backend in LIBDEVICE_BACKENDS:
            return self.math_tolerance(args)
        return self.tolerance(args) if self.tolerance is not None else {}

    def __str__(self) -> str:
        return self.name


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind in "fV" else a


def assert_output(name: str, got: np.ndarray, want: np.ndarray, bound=None) -> None:
    """``got`` matches ``want``: bit for bit, or within ``bound`` (finite elements; NaN and
    infinities where ``want`` has them)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (name, got.shape, want.shape)
    if bound is None:
        want = want.astype(got.dtype)
        nan = np.isnan(want.astype(np.float64)) if got.dtype.kind in "fV" else np.zeros(want.shape, bool)
        same = (_bits(got) == _bits(want)) | (nan & np.isnan(got.astype(np.float64)))
        bad = np.flatnonzero(~same)
        assert not bad.size, (f"{name}: {bad.size} of {got.size} elements differ, first at "
                              f"{np.unravel_index(bad[0], got.shape)}: got {got.reshape(-1)[bad[0]]!r}, "
                              f"want {want.reshape(-1)[bad[0]]!r}")
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(w)
    same_special = (np.isnan(w) & np.isnan(g)) | (np.isinf(w) & (g == w))
    error = np.where(finite, np.abs(g - w), 0.0)
    ok = np.where(finite, error <= np.broadcast_to(bound, w.shape), same_special)
    bad = np.flatnonzero(~ok)
    assert not bad.size, (f"{name}: {bad.size} of {got.size} elements outside the bound, first at "
                          f"{np.unravel_index(bad[0], got.shape)}: got {g.reshape(-1)[bad[0]]!r}, want "
                          f"{w.reshape(-1)[bad[0]]!r}, bound {np.broadcast_to(bound, w.shape).reshape(-1)[bad[0]]!r}")


def run_case(case: TileCase, backend: str, rng: np.random.Generator, **options) -> dict:
    """Run ``case`` on ``backend`` with fresh arguments and check every output; the arguments."""
    args = case.make_args(rng)
    before = copy.deepcopy(args)
    case.program.run(args, backend=backend, **options)
    expected = case.reference(before)
    bounds = case.bounds(before, backend)
    for name, want in expected.items():
        assert_output(f"{case.name}: {name}", args[name], want, bounds.get(name))
    return args


# ----------------------------------------------------------------------------- references' helpers


def _ordered_zeros(x: np.ndarray) -> np.ndarray:
    """float64 values where -0.0 sorts just below +0.0 (for max and min references): every
    nonzero f32 is farther from zero than 1e-300."""
    x = x.astype(np.float64)
    return np.where(x == 0, np.where(np.signbit(x), -1e-300, 1e-300), x)


def _unordered_zeros(x: np.ndarray) -> np.ndarray:
    return np.where(np.abs(x) == 1e-300, np.copysign(0.0, x), x)


def ieee_max(x, axis=None, keepdims=False):
    return _unordered_zeros(np.max(_ordered_zeros(x), axis=axis, keepdims=keepdims))


def ieee_min(x, axis=None, keepdims=False):
    return _unordered_zeros(np.min(_ordered_zeros(x), axis=axis, keepdims=keepdims))


def ieee_cummax(x, axis):
    return _unordered_zeros(np.maximum.accumulate(_ordered_zeros(x), axis=axis))


def tf32_reference(x: np.ndarray) -> np.ndarray:
    """f32 values rounded to 10 mantissa bits, to nearest with ties away from zero, in float64
    arithmetic (NaN and infinities unchanged)."""
    with np.errstate(invalid="ignore", over="ignore"):
        x = x.astype(np.float64)
        _, exponent = np.frexp(x)  # x = m * 2**exponent, |m| in [0.5, 1)
        # the quantum: 11 significant bits, fewer for f32's subnormals (their exponent is fixed at -125)
        quantum = np.ldexp(1.0, np.maximum(exponent, -125) - 11)
        rounded = np.copysign(np.floor(np.abs(x) / quantum + 0.5) * quantum, x)
        return np.where(np.isfinite(x), rounded, x).astype(np.float32)  # past f32's largest: inf


def narrow_sum_bound(magnitudes, exact, n, unit: float, smallest: float):
    """The bound of an f16/bf16 sum: accumulated in f32 (gamma_n of the terms' magnitudes), then
    rounded once to the type (``unit``: its unit roundoff; ``smallest``: half its least subnormal)."""
    f32_error = gamma(n, UNIT_ROUNDOFF[np.dtype(np.float32)]) * magnitudes
    return f32_error + unit * (exact + f32_error) + smallest


def _padded(x: np.ndarray, shape, value) -> np.ndarray:
    out = np.full(shape, value, x.dtype)
    out[tuple(slice(0, n) for n in x.shape)] = x
    return out


# ----------------------------------------------------------------------------- kernels


def _elementwise():
    @accy.kernel(out=accy.dynamic_buffer(f32), half=accy.dynamic_buffer(f16), x=accy.dynamic_buffer(f32),
                 r=accy.dynamic_buffer(f32), c=accy.dynamic_buffer(f32), M=accy.scalar(index), N=accy.scalar(index))
    def elementwise(k, p):
        @k.for_each_tile(grid=(axis("m", cdiv(p.M, 16)), axis("n", cdiv(p.N, 32))))
        def body(t, pid):
            rows = pid["m"] * 16 + t.arange(16)
            cols = pid["n"] * 32 + t.arange(32)
            inside = (rows[:, None] < p.M) & (cols[None, :] < p.N)
            x = p.x.load(rows[:, None] * p.N + cols[None, :], mask=inside)
            r = p.r.load(cols, mask=cols < p.N)  # broadcasts along rows
            c = p.c.load(rows, mask=rows < p.M)  # along columns
            y = t.where(x > 0, t.exp(x) * r[None, :], x - c[:, None]) + t.maximum(x, 0.5) * 2.0
            y = y + abs(c[:, None] - r[None, :]) / 3.0
            head = p.r.load(t.arange(32))  # the same in every program
            top = t.max(p.c.load(t.arange(64), mask=t.arange(64) < p.M, other=-5.0))  # past c's end: masked
            y = y + head[None, :] * top
            p.out.store(rows[:, None] * p.N + cols[None, :], y, mask=inside)
            h = (x.cast(f16) * 3.0 + 1.0).sqrt()
            p.half.store(rows[:, None] * p.N + cols[None, :], h, mask=inside)

    def make(rng):
        M, N = 37, 75
        return dict(out=np.full(M * N, np.nan, np.float32), half=np.full(M * N, np.nan, np.float16),
                    x=rng.standard_normal(M * N).astype(np.float32), r=rng.standard_normal(N).astype(np.float32),
                    c=rng.standard_normal(M).astype(np.float32), M=M, N=N)

    def reference(a):
        M, N = a["M"], a["N"]
        x, r, c = a["x"].reshape(M, N), a["r"][None, :], a["c"][:, None]
        exp = np.exp(x.astype(np.float64)).astype(np.float32)  # math functions: float64 rounded once
        y = np.where(x > 0, exp * r, x - c) + np.maximum(x, np.float32(0.5)) * np.float32(2.0)
        y = y + np.abs(c - r) / np.float32(3.0)
        y = y + a["r"][np.arange(N) % 32][None, :] * max(a["c"].max(), np.float32(-5.0))  # head: per column tile
        # f16 arithmetic: f32 rounded to f16 after each op
        h = (x.astype(np.float16).astype(np.float32) * 3).astype(np.float16)
        h = (h.astype(np.float32) + 1).astype(np.float16)
        with np.errstate(invalid="ignore"):  # sqrt of a negative: NaN
            h = np.sqrt(h.astype(np.float64)).astype(np.float32).astype(np.float16)
        return dict(out=y.reshape(-1), half=h.reshape(-1))

    def libdevice_bound(a):
        # expf within 2 ulp (libdevice): that error times |r|, then a rounding of each of the
        # four adds after it, at most half an ulp of their terms' magnitude each
        M, N = a["M"], a["N"]
        x, r, c = a["x"].reshape(M, N), a["r"][None, :], a["c"][:, None]
        exp = np.exp(x.astype(np.float64))
        terms = (np.where(x > 0, exp * np.abs(r), np.abs(x - c)) + np.abs(np.maximum(x, 0.5)) * 2
                 + np.abs(c - r) / 3 + np.abs(a["r"][np.arange(N) % 32][None, :]) * 5)
        ulp = lambda v: np.spacing(np.abs(v).astype(np.float32)).astype(np.float64)  # noqa: E731
        bound = np.where(x > 0, 2 * ulp(exp) * np.abs(r), 0.0) + 2 * ulp(terms)
        return dict(out=bound.reshape(-1))

    return TileCase("elementwise", elementwise, make, reference, math_tolerance=libdevice_bound)


def _integers():
    @accy.kernel(out=accy.dynamic_buffer(i32), a=accy.dynamic_buffer(i32), b=accy.dynamic_buffer(i32),
                 n=accy.scalar(index))
    def integers(k, p):
        @k.for_each_tile(grid=axis("i", cdiv(p.n, 64)))
        def body(t, pid):
            i = pid["i"] * 64 + t.arange(64)
            a = p.a.load(i, mask=i < p.n)
            b = p.b.load(i, mask=i < p.n, other=1)
            y = (a * 40503 + b) ^ (a >> 3)
            y = y + a // b - a % b + (b << 2)
            p.out.store(i, y, mask=i < p.n)

    def make(rng):
        n = 333
        b = rng.integers(-1000, 1000, n).astype(np.int32)
        b[b == 0] = 7
        return dict(out=np.zeros(n, np.int32), a=rng.integers(-2**31, 2**31, n).astype(np.int32), b=b, n=n)

    def reference(a):
        x, b = a["a"], a["b"]
        with np.errstate(over="ignore"):
            y = (x * np.int32(40503) + b) ^ (x >> 3)
            y = y + x // b - x % b + (b << 2)  # Python's floor division and remainder, wrapping
        return dict(out=y)

    return TileCase("integers", integers, make, reference)


def _shapes():
    @accy.kernel(xt=accy.dynamic_buffer(f32), flat=accy.dynamic_buffer(f32), cube=accy.dynamic_buffer(f32),
                 wide=accy.dynamic_buffer(f32), x=accy.dynamic_buffer(f32), M=accy.scalar(index), N=accy.scalar(index))
    def shapes(k, p):
        @k.for_each_tile(grid=axis("m", cdiv(p.M, 16)))
        def body(t, pid):
            rows = pid["m"] * 16 + t.arange(16)
            cols = t.arange(32)
            inside = (rows[:, None] < p.M) & (cols[None, :] < p.N)
            x = p.x.load(rows[:, None] * p.N + cols[None, :], mask=inside)  # 16x32, zeros outside
            p.xt.store(cols[:, None] * p.M + rows[None, :], x.T, mask=inside.T)  # the transpose: N x M
            here = pid["m"] * 512 + t.arange(512)
            p.flat.store(here, x.reshape((512,)))  # row-major order
            cube = t.trans(x.reshape((4, 4, 32)), (2, 0, 1))  # 32x4x4
            p.cube.store(here, cube.reshape((512,)))
            row = t.sum(x, axis=0, keepdims=True)  # 1x32
            wide = t.broadcast_to(row, (16, 32)) + t.full((16, 32), 1.5, f32)
            p.wide.store(here, wide.reshape((512,)))

    def make(rng):
        M, N = 37, 29
        programs = -(-M // 16)
        return dict(xt=np.full(N * M, np.nan, np.float32), flat=np.zeros(programs * 512, np.float32),
                    cube=np.zeros(programs * 512, np.float32), wide=np.zeros(programs * 512, np.float32),
                    x=rng.integers(-8, 8, M * N).astype(np.float32), M=M, N=N)  # small integers: sums exact

    def reference(a):
        M, N = a["M"], a["N"]
        x = a["x"].reshape(M, N)
        programs = -(-M // 16)
        tiles = _padded(x, (programs * 16, 32), 0).reshape(programs, 16, 32)
        cube = np.transpose(tiles.reshape(programs, 4, 4, 32), (0, 3, 1, 2))
        wide = np.broadcast_to(tiles.sum(axis=1, keepdims=True), tiles.shape) + np.float32(1.5)
        return dict(xt=x.T.reshape(-1), flat=tiles.reshape(-1), cube=cube.reshape(-1), wide=wide.reshape(-1))

    return TileCase("shapes", shapes, make, reference)


def _reductions():
    @accy.kernel(s0=accy.dynamic_buffer(f32), m1=accy.dynamic_buffer(f32), n2=accy.dynamic_buffer(f32),
                 total=accy.dynamic_buffer(f32), keep=accy.dynamic_buffer(f32), prod=accy.dynamic_buffer(f32),
                 hsum=accy.dynamic_buffer(f16), bits=accy.dynamic_buffer(i32), imax=accy.dynamic_buffer(i32),
                 x=accy.dynamic_buffer(f32), h=accy.dynamic_buffer(f16), w=accy.dynamic_buffer(i32))
    def reductions(k, p):
        @k.for_each_tile(grid=axis("p", cdiv(p.x.size, 512)))
        def body(t, pid):
            base = pid["p"] * 512
            e = (t.arange(4)[:, None, None] * 128 + t.arange(8)[None, :, None] * 16 + t.arange(16)[None, None, :])
            x = p.x.load(base + e)  # 4x8x16
            p.s0.store(pid["p"] * 128 + t.arange(128), t.sum(x, axis=0).reshape((128,)))
            p.m1.store(pid["p"] * 64 + t.arange(64), t.max(x, axis=1).reshape((64,)))
            p.n2.store(pid["p"] * 32 + t.arange(32), t.min(x, axis=2).reshape((32,)))
            p.total.store(pid["p"], t.sum(x))  # axis=None: a scalar, stored once per program
            kept = t.sum(x, axis=1, keepdims=True)  # 4x1x16
            p.keep.store(pid["p"] * 64 + t.arange(64), kept.reshape((64,)))
            near_one = 1.0 + x * 0.001
            p.prod.store(pid["p"] * 32 + t.arange(32), t.prod(near_one, axis=2).reshape((32,)))
            h = p.h.load(base + e)
            p.hsum.store(pid["p"] * 32 + t.arange(32), t.sum(h, axis=2).reshape((32,)))
            w = p.w.load(base + e)
            bits = (t.sum(w, axis=2) ^ t.max(w, axis=2)) & t.min(w, axis=2)  # the sum wraps
            p.bits.store(pid["p"] * 32 + t.arange(32), bits.reshape((32,)))
            p.imax.store(pid["p"], t.max(w))

    def make(rng):
        programs = 3
        x = rng.standard_normal(programs * 512).astype(np.float32)
        x[rng.choice(x.size, 20, replace=False)] = 0.0
        x[rng.choice(x.size, 20, replace=False)] = -0.0
        # max along axis 1 of program 0: the line at k=0 is zeros with one +0.0 (+0.0), at k=1 all -0.0
        x[0:128:16], x[1:128:16], x[48] = -0.0, -0.0, 0.0
        # min along axis 2 of program 0, i=1: a line of +0.0 with one -0.0 (-0.0), a line of +0.0
        x[128:160], x[130] = 0.0, -0.0
        x[700] = np.nan  # NaN propagates through sum, max and min
        h = (rng.standard_normal(programs * 512) * 100).astype(np.float16)
        h[:16] = [2048] + [1] * 15  # in f16 each +1 would round away; in f32 they sum to 2063 (then 2064)
        return dict(s0=np.zeros(programs * 128, np.float32), m1=np.zeros(programs * 64, np.float32),
                    n2=np.zeros(programs * 32, np.float32), total=np.zeros(programs, np.float32),
                    keep=np.zeros(programs * 64, np.float32), prod=np.zeros(programs * 32, np.float32),
                    hsum=np.zeros(programs * 32, np.float16), bits=np.zeros(programs * 32, np.int32),
                    imax=np.zeros(programs, np.int32), x=x, h=h,
                    w=rng.integers(-2**31, 2**31, programs * 512).astype(np.int32))

    def tiles(a, name):
        return a[name].reshape(-1, 4, 8, 16)

    def reference(a):
        x, h, w = tiles(a, "x").astype(np.float64), tiles(a, "h").astype(np.float64), tiles(a, "w")
        with np.errstate(over="ignore"):
            bits = (w.sum(axis=3, dtype=np.int32) ^ w.max(axis=3)) & w.min(axis=3)
        near_one = (1 + tiles(a, "x") * np.float32(0.001)).astype(np.float64)
        return dict(s0=x.sum(axis=1).reshape(-1), m1=ieee_max(tiles(a, "x"), axis=2).reshape(-1),
                    n2=ieee_min(tiles(a, "x"), axis=3).reshape(-1), total=x.sum(axis=(1, 2, 3)),
                    keep=x.sum(axis=2).reshape(-1), prod=near_one.prod(axis=3).reshape(-1),
                    hsum=h.sum(axis=3).reshape(-1), bits=bits.reshape(-1), imax=w.max(axis=(1, 2, 3)))

    def tolerance(a):
        ax, h = np.abs(tiles(a, "x").astype(np.float64)), tiles(a, "h").astype(np.float64)
        u = UNIT_ROUNDOFF[np.dtype(np.float32)]
        near_one = np.abs(1 + tiles(a, "x").astype(np.float64) * 0.001)
        return dict(s0=(gamma(4, u) * ax.sum(axis=1)).reshape(-1), total=gamma(512, u) * ax.sum(axis=(1, 2, 3)),
                    keep=(gamma(8, u) * ax.sum(axis=2)).reshape(-1),
                    prod=(gamma(16, u) * near_one.prod(axis=3)).reshape(-1),
                    hsum=narrow_sum_bound(np.abs(h).sum(axis=3), np.abs(h.sum(axis=3)), 16, 2.0**-11, 2.0**-25)
                    .reshape(-1))

    return TileCase("reductions", reductions, make, reference, tolerance)


def _argreductions():
    @accy.kernel(amax=accy.dynamic_buffer(index), amin=accy.dynamic_buffer(index), cmax=accy.dynamic_buffer(index),
                 whole=accy.dynamic_buffer(index), x=accy.dynamic_buffer(f32), M=accy.scalar(index),
                 N=accy.scalar(index))
    def argreductions(k, p):
        @k.for_each_tile(grid=axis("m", cdiv(p.M, 8)))
        def body(t, pid):
            rows = pid["m"] * 8 + t.arange(8)
            cols = t.arange(64)
            inside = (rows[:, None] < p.M) & (cols[None, :] < p.N)
            where = rows[:, None] * p.N + cols[None, :]
            high = p.x.load(where, mask=inside, other=float("-inf"))
            low = p.x.load(where, mask=inside, other=float("inf"))
            p.amax.store(rows, t.argmax(high, axis=1), mask=rows < p.M)
            p.amin.store(rows, t.argmin(low, axis=1), mask=rows < p.M)
            p.cmax.store(pid["m"] * 64 + cols, t.argmax(high, axis=0))
            p.whole.store(pid["m"], t.argmax(high))  # the row-major position in the tile

    def make(rng):
        M, N = 45, 50
        x = rng.integers(-3, 4, (M, N)).astype(np.float32)  # many ties
        x[3, [7, 20]] = np.nan  # the first NaN wins
        x[10, 0] = np.nan
        x[17, :] = 2.0  # all equal: position 0
        x[30, :] = np.nan
        x[4, [5, 9]] = [0.0, -0.0]  # zeros of both signs tie
        programs = -(-M // 8)
        return dict(amax=np.zeros(M, np.int64), amin=np.zeros(M, np.int64), cmax=np.zeros(programs * 64, np.int64),
                    whole=np.zeros(programs, np.int64), x=x.reshape(-1), M=M, N=N)

    def reference(a):
        M, N = a["M"], a["N"]
        x = a["x"].reshape(M, N)
        programs = -(-M // 8)
        high = _padded(x, (programs * 8, 64), -np.inf).reshape(programs, 8, 64)
        return dict(amax=np.argmax(x, axis=1), amin=np.argmin(x, axis=1),
                    cmax=np.argmax(high, axis=1).reshape(-1), whole=np.argmax(high.reshape(programs, -1), axis=1))

    return TileCase("argreductions", argreductions, make, reference)


def _scans():
    @accy.kernel(rows=accy.dynamic_buffer(f32), cols=accy.dynamic_buffer(f32), peak=accy.dynamic_buffer(f32),
                 isum=accy.dynamic_buffer(i32), hsum=accy.dynamic_buffer(bf16), x=accy.dynamic_buffer(f32),
                 w=accy.dynamic_buffer(i32), h=accy.dynamic_buffer(bf16))
    def scans(k, p):
        @k.for_each_tile(grid=axis("p", cdiv(p.x.size, 1024)))
        def body(t, pid):
            e = pid["p"] * 1024 + t.arange(16)[:, None] * 64 + t.arange(64)[None, :]
            x = p.x.load(e)
            p.rows.store(e, t.cumsum(x, axis=1))
            p.cols.store(e, t.cumsum(x, axis=0))
            p.peak.store(e, t.cummax(x, axis=1))
            p.isum.store(e, t.cumsum(p.w.load(e), axis=1))
            p.hsum.store(e, t.cumsum(p.h.load(e), axis=1))

    def make(rng):
        n = 2 * 1024
        x = rng.standard_normal(n).astype(np.float32)
        x[:64] = -np.abs(x[:64])
        x[5], x[6], x[9] = -0.0, 0.0, -0.0  # cummax: -0.0 then +0.0 wins from position 6
        x[64:128] = -np.abs(x[64:128])
        x[70] = -0.0
        x[300] = np.nan
        return dict(rows=np.zeros(n, np.float32), cols=np.zeros(n, np.float32), peak=np.zeros(n, np.float32),
                    isum=np.zeros(n, np.int32), hsum=np.zeros(n, ml_dtypes.bfloat16), x=x,
                    w=rng.integers(-2**31, 2**31, n).astype(np.int32),
                    h=rng.standard_normal(n).astype(ml_dtypes.bfloat16))

    def tiles(a, name):
        return a[name].reshape(-1, 16, 64)

    def reference(a):
        x, h = tiles(a, "x").astype(np.float64), tiles(a, "h").astype(np.float64)
        with np.errstate(over="ignore"):
            isum = np.cumsum(tiles(a, "w"), axis=2, dtype=np.int32)
        return dict(rows=np.cumsum(x, axis=2).reshape(-1), cols=np.cumsum(x, axis=1).reshape(-1),
                    peak=ieee_cummax(tiles(a, "x"), axis=2).reshape(-1), isum=isum.reshape(-1),
                    hsum=np.cumsum(h, axis=2).reshape(-1))

    def tolerance(a):
        ax, h = np.abs(tiles(a, "x").astype(np.float64)), tiles(a, "h").astype(np.float64)
        u = UNIT_ROUNDOFF[np.dtype(np.float32)]
        n = np.arange(1, 65)
        return dict(rows=(gamma(n, u) * np.cumsum(ax, axis=2)).reshape(-1),
                    cols=(gamma(np.arange(1, 17)[:, None], u) * np.cumsum(ax, axis=1)).reshape(-1),
                    hsum=narrow_sum_bound(np.cumsum(np.abs(h), axis=2), np.abs(np.cumsum(h, axis=2)), n, 2.0**-8,
                                          2.0**-134).reshape(-1))

    return TileCase("scans", scans, make, reference, tolerance)


# dot: (name, input type, its NumPy dtype, accumulator type, precision)
DOT_TYPES = (
    ("f32", f32, np.float32, f32, "ieee"),
    ("f16", f16, np.float16, f32, "ieee"),
    ("bf16", bf16, ml_dtypes.bfloat16, f32, "ieee"),
    ("f64", f64, np.float64, f64, "ieee"),
    ("i8", i8, np.int8, i32, "ieee"),
    ("u8", u8, np.uint8, i32, "ieee"),
    ("tf32", f32, np.float32, f32, "tf32"),
)


def make_matmul(dtype, acc_type, precision: str = "ieee", bm: int = 32, bn: int = 32, bk: int = 16):
    """c = c + a @ b for row-major (M, K) and (K, N) inputs, a (bm, bn) tile of c per program."""

    @accy.kernel(c=accy.dynamic_buffer(acc_type), a=accy.dynamic_buffer(dtype), b=accy.dynamic_buffer(dtype),
                 M=accy.scalar(index), N=accy.scalar(index), K=accy.scalar(index))
    def matmul(k, p):
        @k.for_each_tile(grid=(axis("m", cdiv(p.M, bm)), axis("n", cdiv(p.N, bn))))
        def body(t, pid):
            rm = pid["m"] * bm + t.arange(bm)
            rn = pid["n"] * bn + t.arange(bn)
            out = rm[:, None] * p.N + rn[None, :]
            inside = (rm[:, None] < p.M) & (rn[None, :] < p.N)

            def step(t, k0, acc):
                rk = k0 + t.arange(bk)
                a = p.a.load(rm[:, None] * p.K + rk[None, :], mask=(rm[:, None] < p.M) & (rk[None, :] < p.K))
                b = p.b.load(rk[:, None] * p.N + rn[None, :], mask=(rk[:, None] < p.K) & (rn[None, :] < p.N))
                return t.dot(a, b, acc, precision=precision)

            acc = t.fold_range(0, p.K, bk, p.c.load(out, mask=inside), step)
            p.c.store(out, acc, mask=inside)

    return matmul


def _dot(name, dtype, np_dtype, acc_type, precision):
    program = make_matmul(dtype, acc_type, precision)
    M, N, K = 67, 45, 39
    integer = np.dtype(np_dtype).kind in "iu"

    def make(rng):
        if integer:
            info = np.iinfo(np_dtype)
            a = rng.integers(info.min, info.max + 1, (M, K)).astype(np_dtype)
            b = rng.integers(info.min, info.max + 1, (K, N)).astype(np_dtype)
            c = rng.integers(2**31 - 2**20, 2**31, (M, N)).astype(np.int32)  # near the top: the sums wrap
        else:
            a = rng.standard_normal((M, K)).astype(np_dtype)
            b = rng.standard_normal((K, N)).astype(np_dtype)
            c = rng.standard_normal((M, N)).astype(np.float32 if acc_type == f32 else np.float64)
        return dict(c=c.reshape(-1), a=a.reshape(-1), b=b.reshape(-1), M=M, N=N, K=K)

    def inputs(a):
        x, y = a["a"].reshape(M, K), a["b"].reshape(K, N)
        if precision == "tf32":
            x, y = tf32_reference(x), tf32_reference(y)
        return x, y

    def reference(a):
        x, y = inputs(a)
        if integer:
            exact = a["c"].reshape(M, N).astype(np.int64) + x.astype(np.int64) @ y.astype(np.int64)
            return dict(c=exact.astype(np.int32).reshape(-1))  # wraps
        return dict(c=(a["c"].reshape(M, N).astype(np.float64) + x.astype(np.float64) @ y.astype(np.float64))
                    .reshape(-1))

    def tolerance(a):
        if integer:
            return {}
        x, y = inputs(a)
        u = UNIT_ROUNDOFF[np.dtype(np.float64 if acc_type == f64 else np.float32)]
        terms = np.abs(a["c"].reshape(M, N).astype(np.float64)) + np.abs(x.astype(np.float64)) @ np.abs(
            y.astype(np.float64))
        return dict(c=(gamma(K + 1, u) * terms).reshape(-1))

    return TileCase(f"dot_{name}", program, make, reference, tolerance)


def _tf32_exact():
    """dot by an identity in tf32: every sum is exact, so c is exactly a's tf32 rounding."""
    program = make_matmul(f32, f32, "tf32", 16, 16, 16)
    M = N = K = 16

    def make(rng):
        a = rng.standard_normal((M, K)).astype(np.float32)
        bits = a.view(np.uint32)
        bits[0, :8] = (bits[0, :8] & np.uint32(0xFFFFE000)) | np.uint32(0x1000)  # exact ties: away from zero
        bits[1, :8] = (bits[1, :8] & np.uint32(0xFFFFE000)) | np.uint32(0x0FFF)  # just below a tie: down
        bits[2, :8] = (bits[2, :8] & np.uint32(0xFFFFE000)) | np.uint32(0x1001)  # just above: up
        a[3, :3] = [-1e-40, 3e-39, 1.1754942e-38]  # subnormals: rounded at their fixed quantum
        return dict(c=np.zeros(M * N, np.float32), a=a.reshape(-1), b=np.eye(K, N, dtype=np.float32).reshape(-1),
                    M=M, N=N, K=K)

    def reference(a):
        return dict(c=tf32_reference(a["a"].reshape(M, K)).reshape(-1))

    return TileCase("dot_tf32_exact", program, make, reference)


def _masked_copy():
    @accy.kernel(out=accy.tensor(f32, 2), x=accy.tensor(f32, 2))
    def masked_copy(k, p):
        M, N = p.x.shape

        @k.for_each_tile(grid=(axis("m", cdiv(M, 32)), axis("n", cdiv(N, 64))))
        def body(t, pid):
            x = p.x.load_tile((pid["m"] * 32, pid["n"] * 64), (32, 64), other=-1.0)
            p.out.store_tile((pid["m"] * 32, pid["n"] * 64), x * 2.0 + 1.0)

    def make(rng):
        whole = np.full((340, 2 * 517), np.nan, np.float32)  # the output: every other column of a wider array
        return dict(out=whole[3:336, ::2], x=rng.standard_normal((517, 333)).astype(np.float32).T)  # x: F order

    def reference(a):
        return dict(out=a["x"] * np.float32(2.0) + np.float32(1.0))

    return TileCase("masked_copy", masked_copy, make, reference)


def _masked_edges():
    @accy.kernel(out=accy.dynamic_buffer(f32), x=accy.dynamic_buffer(f32), M=accy.scalar(index),
                 N=accy.scalar(index))
    def masked_edges(k, p):
        @k.for_each_tile(grid=(axis("m", cdiv(p.M, 32)), axis("n", cdiv(p.N, 64))))
        def body(t, pid):
            rows = pid["m"] * 32 + t.arange(32)
            cols = pid["n"] * 64 + t.arange(64)
            inside = (rows[:, None] < p.M) & (cols[None, :] < p.N)
            x = p.x.load(t.where(inside, rows[:, None] * p.N + cols[None, :], -1), mask=inside, other=7.0)
            # masked-off offsets are -1: never read, never written
            p.out.store(t.where(inside, rows[:, None] * p.N + cols[None, :], -1), x * 2.0 + 1.0, mask=inside)
            # a store whose mask is all off writes nothing, even at a valid index
            p.out.store(p.M * p.N + cols[None, :] * 0, x, mask=rows[:, None] < 0)

    def make(rng):
        M, N = 333, 517
        return dict(out=np.full(M * N + 1, np.nan, np.float32), x=rng.standard_normal(M * N).astype(np.float32),
                    M=M, N=N)

    def reference(a):
        out = a["out"].copy()
        out[:-1] = a["x"] * np.float32(2.0) + np.float32(1.0)
        return dict(out=out)  # the last element: never written (its store's mask is all off)

    return TileCase("masked_edges", masked_edges, make, reference)


def _gather_scatter():
    @accy.kernel(out=accy.dynamic_buffer(f32), x=accy.dynamic_buffer(f32), src=accy.dynamic_buffer(index),
                 dst=accy.dynamic_buffer(index), n=accy.scalar(index))
    def gather_scatter(k, p):
        @k.for_each_tile(grid=axis("i", cdiv(p.n, 128)))
        def body(t, pid):
            i = pid["i"] * 128 + t.arange(128)
            live = i < p.n
            src = p.src.load(i, mask=live, other=-5)
            dst = p.dst.load(i, mask=live, other=-5)
            p.out.store(dst, p.x.load(src, mask=live), mask=live)

    def make(rng):
        n = 1000
        return dict(out=np.full(n, np.nan, np.float32), x=rng.standard_normal(3000).astype(np.float32),
                    src=rng.integers(0, 3000, n).astype(np.int64), dst=rng.permutation(n).astype(np.int64), n=n)

    def reference(a):
        out = a["out"].copy()
        out[a["dst"]] = a["x"][a["src"]]
        return dict(out=out)

    return TileCase("gather_scatter", gather_scatter, make, reference)


def _histogram():
    @accy.kernel(counts=accy.dynamic_buffer(i32), weights=accy.dynamic_buffer(f32), peak=accy.dynamic_buffer(f32),
                 low=accy.dynamic_buffer(i32), keys=accy.dynamic_buffer(i32), w=accy.dynamic_buffer(f32),
                 n=accy.scalar(index), bins=accy.scalar(index))
    def histogram(k, p):
        @k.for_each_tile(grid=axis("i", cdiv(p.n, 256)))
        def body(t, pid):
            i = pid["i"] * 256 + t.arange(256)
            live = i < p.n
            key = p.keys.load(i, mask=live)
            b = (key % p.bins.cast(i32)).cast(index)
            w = p.w.load(i, mask=live)
            p.counts.atomic_add(b, 1, mask=live)  # duplicates within one tile all count
            p.weights.atomic_add(b, w, mask=live)
            p.peak.atomic_max(b, w, mask=live)
            p.low.atomic_min(b, key, mask=live)

    def make(rng):
        n, bins = 3001, 13
        return dict(counts=np.zeros(bins, np.int32), weights=np.zeros(bins, np.float32),
                    peak=np.full(bins, -np.inf, np.float32), low=np.full(bins, 2**31 - 1, np.int32),
                    keys=rng.integers(0, 1000, n).astype(np.int32),
                    w=rng.integers(-4, 5, n).astype(np.float32) * np.float32(0.25), n=n, bins=bins)  # exact sums

    def reference(a):
        b = a["keys"] % a["bins"]
        bins = a["bins"]
        peak, low = np.full(bins, -np.inf, np.float32), np.full(bins, 2**31 - 1, np.int32)
        np.maximum.at(peak, b, a["w"])
        np.minimum.at(low, b, a["keys"])
        return dict(counts=np.bincount(b, minlength=bins).astype(np.int32),
                    weights=np.bincount(b, a["w"].astype(np.float64), minlength=bins), peak=peak, low=low)

    return TileCase("histogram", histogram, make, reference)


def _causal_fold():
    """Program m sums row blocks 0..m (its trip count differs per program), storing each
    running sum as it goes (stores under the active mask), with a scalar carry, and ifs whose
    condition differs between programs (one storing in each branch, one giving a scalar)."""

    @accy.kernel(total=accy.dynamic_buffer(f32), partial=accy.dynamic_buffer(f32), again=accy.dynamic_buffer(f32),
                 trips=accy.dynamic_buffer(index),
                 parity=accy.dynamic_buffer(f32), top=accy.dynamic_buffer(f32), x=accy.dynamic_buffer(f32),
                 blocks=accy.scalar(index))
    def causal_fold(k, p):
        @k.for_each_tile(grid=axis("m", p.blocks))
        def body(t, pid):
            m = pid["m"]
            e = t.arange(8)[:, None] * 16 + t.arange(16)[None, :]

            def step(t, j, carry):
                acc, again, count = carry
                acc = acc + p.x.load(j * 128 + e)  # boxes of the buffer
                p.partial.store((m * p.blocks + j) * 128 + e, acc)  # only while j <= m
                picked = t.where(e >= 0, j * 128 + e, -1)  # offsets no longer affine: element by element
                again = again + p.x.load(picked)
                p.again.store(t.where(e >= 0, (m * p.blocks + j) * 128 + e, -1), again)
                return acc, again, count + 1

            zeros = t.zeros((8, 16), f32)
            acc, again, count = t.fold_range(0, m + 1, 1, (zeros, zeros, t.constant(0, index)), step)
            p.total.store(m * 128 + e, acc + again)
            p.trips[m] = count
            here = m * 16 + t.arange(16)
            t.if_(m % 2 == 1, lambda t: p.parity.store(here, t.full((16,), 1.0, f32)),
                  lambda t: p.parity.store(here, t.max(acc, axis=0)))  # each branch stores in its programs
            top = t.if_(m % 2 == 1, lambda t: t.constant(-1.0, f32), lambda t: t.max(acc))
            p.top[m] = top

    def make(rng):
        blocks = 5
        return dict(total=np.zeros(blocks * 128, np.float32), partial=np.full(blocks * blocks * 128, np.nan, np.float32),
                    again=np.full(blocks * blocks * 128, np.nan, np.float32),
                    trips=np.zeros(blocks, np.int64), parity=np.zeros(blocks * 16, np.float32),
                    top=np.zeros(blocks, np.float32),
                    x=rng.integers(-8, 8, blocks * 128).astype(np.float32), blocks=blocks)  # exact sums

    def reference(a):
        blocks = a["blocks"]
        x = a["x"].reshape(blocks, 8, 16)
        running = np.cumsum(x, axis=0)
        partial = a["partial"].reshape(blocks, blocks, 8, 16).copy()
        for m in range(blocks):
            partial[m, :m + 1] = running[:m + 1]
        parity = np.where((np.arange(blocks) % 2 == 1)[:, None], 1.0, ieee_max(running, axis=1))
        odd = np.arange(blocks) % 2 == 1
        top = np.where(odd, -1.0, ieee_max(running, axis=(1, 2)))
        return dict(total=2 * running.reshape(-1), partial=partial.reshape(-1), again=partial.reshape(-1),
                    trips=np.arange(1, blocks + 1),
                    parity=parity.reshape(-1), top=top)

    return TileCase("causal_fold", causal_fold, make, reference)


def _scalar_stores():
    @accy.kernel(sums=accy.dynamic_buffer(f32), count=accy.dynamic_buffer(i32), x=accy.dynamic_buffer(f32))
    def scalar_stores(k, p):
        @k.for_each_tile(grid=(axis("m", 3), axis("n", 4)))
        def body(t, pid):
            program = pid["n"] * 3 + pid["m"]
            x = p.x.load(program * 64 + t.arange(64))
            p.sums[program] = t.sum(x)  # one store per program
            t.atomic_add(p.count, 0, 1)  # once per program: the count is the number of programs

    def make(rng):
        return dict(sums=np.zeros(12, np.float32), count=np.zeros(1, np.int32),
                    x=rng.integers(-8, 8, 12 * 64).astype(np.float32))  # small integers: exact sums

    def reference(a):
        return dict(sums=a["x"].reshape(12, 64).astype(np.float64).sum(axis=1), count=np.array([12], np.int32))

    return TileCase("scalar_stores", scalar_stores, make, reference)


CASES: tuple[TileCase, ...] = (
    _elementwise(), _integers(), _shapes(), _reductions(), _argreductions(), _scans(),
    *(_dot(*row) for row in DOT_TYPES), _tf32_exact(), _masked_copy(), _masked_edges(), _gather_scatter(),
    _histogram(), _causal_fold(), _scalar_stores(),
)
CASES_BY_NAME = {case.name: case for case in CASES}
