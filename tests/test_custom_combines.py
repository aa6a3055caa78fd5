"""Reductions and scans with the user's combine functions (issue 33 §4): ``t.reduce`` and
``t.associative_scan`` over a tile or a tuple of tiles, ``reverse=`` scans (custom and built-in),
``t.sum(dtype=)``, sums of bool tiles and ``t.max``/``t.min`` with ``return_indices``, on every
CPU backend against NumPy.

A float reduction's order is its definition: a pairwise tree over adjacent positions, an odd
last one carried to the next level (:func:`tree`); a float scan's is Hillis and Steele's
(:func:`hillis_steele`).  NumPy computes each in the same order here, so results match bit for
bit; exact combines (integers, max, a choice) match the sequential NumPy ones."""

from __future__ import annotations

import numpy as np
import pytest

import accy
from accy import axis, f32, i8, i32, index
from accy.errors import TraceError

from test_shape_ops import _data, _same


def tree(xs, ax, fn):
    """The reduction's order in NumPy: adjacent pairs, the odd last carried, level by level."""
    n = xs[0].shape[ax]
    while n > 1:
        half = n // 2
        ys = list(fn(*[np.take(x, np.arange(0, 2 * half, 2), ax) for x in xs],
                     *[np.take(x, np.arange(1, 2 * half, 2), ax) for x in xs]))
        if n % 2:
            ys = [np.concatenate([y, np.take(x, [n - 1], ax)], ax) for y, x in zip(ys, xs)]
        xs, n = ys, half + n % 2
    return [np.take(x, 0, ax) for x in xs]


def hillis_steele(x, ax, fn):
    n, d = x.shape[ax], 1
    pos = np.arange(n).reshape([n if k == ax % x.ndim else 1 for k in range(x.ndim)])
    while d < n:
        shifted = np.concatenate([np.take(x, np.arange(d), ax), np.take(x, np.arange(n - d), ax)], ax)
        x = np.where(pos >= d, fn(shifted, x), x)
        d *= 2
    return x


def _run(backend, fn, inputs: dict, outputs: dict):
    """``fn(t, **input tiles)`` returning a dict of tiles (or scalars) stored whole."""
    params = {name: accy.tensor(accy.dsl.types.from_numpy(a.dtype), a.ndim) for name, a in inputs.items()}
    params.update({f"out_{name}": accy.tensor(dtype, len(shape)) for name, (shape, dtype) in outputs.items()})

    @accy.kernel(**params)
    def kern(k, p):
        @k.for_each_tile(grid=axis("g", 1))
        def body(t, pid):
            tiles = {name: getattr(p, name).load_tile((0,) * a.ndim, a.shape) for name, a in inputs.items()}
            for name, value in fn(t, **tiles).items():
                shape, dtype = outputs[name]
                getattr(p, f"out_{name}").store_tile((0,) * len(shape), t.broadcast_to(t.cast(value, dtype), shape))

    outs = {f"out_{name}": np.zeros(shape, dtype.numpy) for name, (shape, dtype) in outputs.items()}
    kern.run({**inputs, **outs}, backend=backend)
    return {name[4:]: a for name, a in outs.items()}


@pytest.mark.parametrize("shape,ax", [((8, 33), 1), ((8, 33), 0), ((5, 3), -1), ((64,), 0), ((3, 1, 7), 1),
                                      ((6, 10), None)], ids=str)
def test_a_custom_float_sum_is_the_pairwise_tree_bit_for_bit(backend, shape, ax):
    x = _data(shape, seed=11)
    x.flat[:3] = [0.5, -0.0, 1e-30]

    got = _run(backend, lambda t, x: {"s": t.reduce(x, ax, lambda a, b: a + b)}, {"x": x},
               {"s": (tuple(d for k, d in enumerate(shape) if ax is not None and k != ax % len(shape)) or (1,), f32)})
    (want,) = tree([x.ravel() if ax is None else x], 0 if ax is None else ax, lambda a, b: (a + b,))
    _same(got["s"], np.asarray(want).reshape(got["s"].shape))


def test_a_scalar_result_keeps_signed_zero_and_nan(backend):
    x = np.array([-0.0, -0.0, -0.0], np.float32)
    y = np.array([1.0, np.nan, 2.0], np.float32)
    got = _run(backend, lambda t, x, y: {"s": t.full((2,), t.reduce(x, 0, lambda a, b: a + b)),
                                         "m": t.full((2,), t.reduce(y, None, t.maximum))},
               {"x": x, "y": y}, {"s": ((2,), f32), "m": ((2,), f32)})
    assert np.signbit(got["s"]).all() and (got["s"] == 0).all()
    assert np.isnan(got["m"]).all()


def test_scalar_results_of_every_kind_of_element(backend):
    """A reduction to a scalar (axis None) of bool, index, f16 and i8 tiles."""
    x = np.random.default_rng(12).integers(-50, 50, (4, 6)).astype(np.int8)

    def fn(t, x):
        return {"all": t.full((1,), t.reduce(x > -40, None, lambda a, b: a & b)),
                "last": t.full((1,), t.reduce(t.arange(24).reshape(4, 6), None, lambda a, b: b)),
                "half": t.full((1,), t.reduce(t.cast(x, accy.f16), None, t.minimum)),
                "xor": t.full((1,), t.reduce(x, None, lambda a, b: a ^ b))}

    got = _run(backend, fn, {"x": x}, {"all": ((1,), accy.boolean), "last": ((1,), index),
                                       "half": ((1,), accy.f16), "xor": ((1,), i8)})
    _same(got["all"], np.array([(x > -40).all()]))
    _same(got["last"], np.array([23], np.int64))
    _same(got["half"], np.array([x.min()], np.float16))
    _same(got["xor"], np.array([np.bitwise_xor.reduce(x.ravel())], np.int8))


def _argmax_combine(t):
    def combine(a, b):
        (va, ia), (vb, ib) = a, b
        first = (va > vb) | ((va == vb) & (ia < ib))
        return t.where(first, va, vb), t.where(first, ia, ib)

    return combine


@pytest.mark.parametrize("ax", [0, 1, None])
def test_argmax_by_a_value_index_tuple_combine(backend, ax):
    x = np.random.default_rng(3).integers(-5, 5, (12, 10)).astype(np.float32)  # many ties: first index wins

    def fn(t, x):
        rows, cols = t.arange(12)[:, None], t.arange(10)[None, :]
        idx = t.broadcast_to(cols if ax == 1 else rows if ax == 0 else rows * 10 + cols, (12, 10))
        v, i = t.reduce((x, idx), ax, _argmax_combine(t), keepdims=True)
        return {"v": v, "i": i}

    shape = (1, 1) if ax is None else (1, 10) if ax == 0 else (12, 1)
    got = _run(backend, fn, {"x": x}, {"v": (shape, f32), "i": (shape, index)})
    _same(got["v"], np.max(x, axis=ax, keepdims=True))
    _same(got["i"], np.argmax(x.ravel() if ax is None else x, axis=0 if ax is None else ax).reshape(shape).astype(np.int64))


@pytest.mark.parametrize("reverse", [False, True])
def test_a_custom_running_max_scan(backend, reverse):
    x = _data((6, 37), np.int32, seed=4)
    got = _run(backend, lambda t, x: {"m": t.associative_scan(x, 1, t.maximum, reverse=reverse)}, {"x": x},
               {"m": ((6, 37), i32)})
    want = np.flip(np.maximum.accumulate(np.flip(x, 1), 1), 1) if reverse else np.maximum.accumulate(x, 1)
    _same(got["m"], want)


@pytest.mark.parametrize("reverse", [False, True])
def test_a_custom_float_cumsum_is_hillis_steele_bit_for_bit(backend, reverse):
    x = _data((4, 50), seed=5)
    x.flat[:3] = 1.5
    got = _run(backend, lambda t, x: {"c": x.associative_scan(0, lambda a, b: a + b, reverse=reverse)}, {"x": x},
               {"c": ((4, 50), f32)})
    flip = (lambda a: np.flip(a, 0)) if reverse else (lambda a: a)
    _same(got["c"], flip(hillis_steele(flip(x), 0, np.add)))


def test_a_tuple_scan_carries_the_running_argmax(backend):
    x = np.random.default_rng(6).integers(-9, 9, (40,)).astype(np.float32)

    def fn(t, x):
        v, i = t.associative_scan((x, t.arange(40)), 0, _argmax_combine(t))
        return {"v": v, "i": i}

    got = _run(backend, fn, {"x": x}, {"v": ((40,), f32), "i": ((40,), index)})
    _same(got["v"], np.maximum.accumulate(x))
    _same(got["i"], np.array([np.argmax(x[:k + 1]) for k in range(40)], np.int64))


@pytest.mark.parametrize("name", ["cumsum", "cummax", "cumprod"])
def test_built_in_scans_reverse(backend, name):
    x = _data((8, 12), np.int32, seed=7) % 5
    got = _run(backend, lambda t, x: {"c": getattr(t, name)(x, 1, reverse=True), "d": getattr(x, name)(0, reverse=True)},
               {"x": x}, {"c": ((8, 12), i32), "d": ((8, 12), i32)})
    ufunc = {"cumsum": np.add, "cummax": np.maximum, "cumprod": np.multiply}[name]
    for key, ax in (("c", 1), ("d", 0)):
        _same(got[key], np.flip(ufunc.accumulate(np.flip(x, ax), ax), ax).astype(np.int32))


def test_sum_with_dtype_and_sums_of_bools(backend):
    x = np.random.default_rng(8).integers(-128, 128, (16, 32)).astype(np.int8)

    def fn(t, x):
        return {"wide": t.sum(x, 1, dtype=i32), "narrow": t.sum(x, 1), "count": t.sum(x > 0, 0),
                "total": t.full((1,), (x < 0).sum()), "as_f": x.sum(1, dtype=f32)}

    got = _run(backend, fn, {"x": x}, {"wide": ((16,), i32), "narrow": ((16,), i8), "count": ((32,), i32),
                                       "total": ((1,), i32), "as_f": ((16,), f32)})
    _same(got["wide"], x.astype(np.int32).sum(1, dtype=np.int32))
    _same(got["narrow"], x.sum(1, dtype=np.int8))  # the tile's own type wraps, as np.add.reduce's
    _same(got["count"], (x > 0).sum(0).astype(np.int32))
    _same(got["total"], np.array([(x < 0).sum()], np.int32))
    _same(got["as_f"], x.astype(np.float32).sum(1))  # small integers: exact in any order


@pytest.mark.parametrize("name", ["max", "min"])
def test_max_and_min_return_indices(backend, name):
    x = np.random.default_rng(9).integers(-3, 3, (9, 20)).astype(np.float32)
    x[2, 5], x[2, 9], x[7, 0] = np.nan, np.nan, np.nan  # NaN wins, the first one

    def fn(t, x):
        v, i = getattr(t, name)(x, axis=1, return_indices=True)
        w, j = getattr(x, name)(0, return_indices=True, keepdims=True)
        return {"v": v, "i": i, "w": w, "j": j}

    got = _run(backend, fn, {"x": x}, {"v": ((9,), f32), "i": ((9,), index), "w": ((1, 20), f32),
                                       "j": ((1, 20), index)})
    reduce_, arg = (np.max, np.argmax) if name == "max" else (np.min, np.argmin)
    _same(got["v"], reduce_(x, 1))
    _same(got["i"], arg(x, 1).astype(np.int64))
    _same(got["w"], reduce_(x, 0, keepdims=True))
    _same(got["j"], arg(x, 0).reshape(1, 20).astype(np.int64))


# -- refused ---------------------------------------------------------------------------------


def _refused(fn, match):
    @accy.kernel(x=accy.tensor(f32, 2))
    def kern(k, p):
        @k.for_each_tile(grid=axis("g", 1))
        def body(t, pid):
            fn(t, p.x.load_tile((0, 0), (8, 16)))

    with pytest.raises(TraceError, match=match) as info:
        kern.traced_graph
    assert "test_custom_combines.py" in str(info.value)


def test_mistakes_are_refused_at_the_users_line():
    _refused(lambda t, x: t.reduce(x, 1, lambda a, b: t.cast(a + b, i32)), "returned i32 for f32 operands")
    _refused(lambda t, x: t.reduce((x, x), 1, lambda a, b: a[0]), "takes and returns tuples of 2")
    _refused(lambda t, x: t.associative_scan(x, 2, t.maximum), "out of range")
    _refused(lambda t, x: t.reduce(x, 0, lambda a, b: t.zeros((3,))), "returned a tile<f32, 3>")
    _refused(lambda t, x: t.max(x, x, return_indices=True), "return_indices is for a reduction")


def test_a_tritons_flat_combine_and_max_with_a_positional_axis(backend):
    """Triton's combine of a tuple takes its values flat (``combine(v0, i0, v1, i1)``); and
    ``t.max(x, 1)``, Triton's reduction along axis 1, is refused rather than read as the
    elementwise maximum with 1."""
    @accy.kernel(best=accy.tensor(index, 1), x=accy.tensor(f32, 2))
    def argmax(k, p):
        @k.for_each_tile(grid=axis("r", 1))
        def program(t, pid):
            def first_largest(va, ia, vb, ib):
                keep = (va > vb) | ((va == vb) & (ia < ib))
                return t.where(keep, va, vb), t.where(keep, ia, ib)

            x = p.x.load_tile((0, 0), (4, 8))
            _, at = t.reduce((x, t.broadcast_to(t.arange(8)[None, :], (4, 8))), 1, first_largest)
            p.best.store_tile((0,), at)

    x = np.random.default_rng(9).integers(0, 4, (4, 8)).astype(np.float32)
    best = np.zeros(4, np.int64)
    argmax.run([best, x], backend=backend)
    np.testing.assert_array_equal(best, x.argmax(axis=1))

    @accy.kernel(dst=accy.tensor(f32, 1), x=accy.tensor(f32, 2))
    def ambiguous(k, p):
        @k.for_each_tile(grid=axis("r", 1))
        def program(t, pid):
            p.dst.store_tile((0,), t.max(p.x.load_tile((0, 0), (4, 8)), 1))

    with pytest.raises(TraceError, match=r"max\(tile, 1\): write t\.max\(x, axis=1\) for the reduction"):
        ambiguous.graph
