"""Shape operations of tile programs (issue 33 §3): static slices (``x[a:b:s]``, negative steps,
int indices), ``cat`` along each axis, ``join``/``split``/``interleave``, ``ravel``, ``permute``
and ``flip``, on every CPU backend against NumPy, bit for bit; the graph ops ``slice`` and
``cat`` in the text form; the mistakes refused at the user's line."""

from __future__ import annotations

import numpy as np
import pytest

import accy
from accy import axis, f32, i32, index
from accy.dsl import parse
from accy.errors import TraceError


def _run(backend, fn, x: np.ndarray, out_shape, out_dtype=None, y=None):
    """``fn(t, x_tile[, y_tile])`` in one program, stored whole; the result array."""
    dtype = accy.dsl.types.from_numpy(x.dtype)
    odtype = out_dtype or dtype
    params = dict(out=accy.tensor(odtype, len(out_shape)), x=accy.tensor(dtype, x.ndim))
    if y is not None:
        params["y"] = accy.tensor(accy.dsl.types.from_numpy(y.dtype), y.ndim)

    @accy.kernel(**params)
    def kern(k, p):
        @k.for_each_tile(grid=axis("g", 1))
        def body(t, pid):
            tiles = [p.x.load_tile((0,) * x.ndim, x.shape)]
            if y is not None:
                tiles.append(p.y.load_tile((0,) * y.ndim, y.shape))
            p.out.store_tile((0,) * len(out_shape), fn(t, *tiles))

    out = np.zeros(out_shape, odtype.numpy)
    args = dict(out=out, x=x) if y is None else dict(out=out, x=x, y=y)
    kern.run(args, backend=backend)
    return out, kern


def _data(shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-100, 100, shape).astype(dtype)
    x = rng.standard_normal(shape).astype(dtype)
    x.flat[:3] = [np.nan, -0.0, np.inf]  # moved as they are
    return x


def _same(got, want):
    """Bit for bit (-0.0 too); NaN matches NaN of any payload (arithmetic on a NaN
    leaves the payload to the hardware)."""
    want = np.ascontiguousarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    same = got.view(np.uint8).reshape(got.shape + (-1,)).__eq__(want.view(np.uint8).reshape(want.shape + (-1,))).all(-1)
    if got.dtype.kind == "f":
        same |= np.isnan(got) & np.isnan(want)
    assert same.all(), f"differs at {np.argwhere(~same)[:5].tolist()}: {got[~same][:5]} != {want[~same][:5]}"


SLICES = [
    ((slice(None), slice(0, 32)), (8, 32)),
    ((slice(2, 7), slice(None, None, 2)), (5, 32)),
    ((slice(None, None, -1), slice(60, 3, -3)), (8, 19)),
    ((slice(-3, None), Ellipsis, slice(None, None, -1)), (3, 64)),
    ((1, slice(5, 45, 8)), (5,)),
    ((slice(None), 7), (8,)),
    ((slice(None, None, 3), None, slice(1, 2)), (3, 1, 1)),
]


@pytest.mark.parametrize("key,shape", SLICES, ids=str)
def test_slices_match_numpy(backend, key, shape):
    x = _data((8, 64))
    got, _ = _run(backend, lambda t, x: x[key], x, shape)
    _same(got, x[key])


def test_an_int_index_of_every_axis_is_a_scalar(backend):
    x = _data((4, 8))
    got, _ = _run(backend, lambda t, x: t.full((2,), x[2, -3]), x, (2,))
    _same(got, np.full((2,), x[2, -3]))


def test_slices_of_index_tiles_gather_from_memory(backend):
    """A slice of index tiles (held unevaluated on numpy and ptx) used to gather."""
    x = _data((64,))

    @accy.kernel(out=accy.tensor(f32, 1), x=accy.tensor(f32, 1))
    def kern(k, p):
        @k.for_each_tile(grid=axis("g", 1))
        def body(t, pid):
            rows = t.arange(128)[126::-4]  # 126, 122, ..., 2
            p.out.store(t.arange(32), p.x.load(rows // 2) + t.cast(t.cat(rows[16:], rows[:16]), f32))

    out = np.zeros(32, np.float32)
    kern.run(dict(out=out, x=x), backend=backend)
    rows = np.arange(128)[126::-4]
    _same(out, x[rows // 2] + np.concatenate([rows[16:], rows[:16]]).astype(np.float32))


def test_sliced_aranges_are_affine_offsets(backend):
    """Offsets made by slicing aranges keep their affine form (the host and ptx access them row by
    row: vector loads where the step is 1), and read the right elements."""
    x = _data((64,))

    @accy.kernel(out=accy.tensor(f32, 2), x=accy.dynamic_buffer(f32))  # a buffer: no shape guard
    def kern(k, p):
        @k.for_each_tile(grid=axis("g", 1))
        def body(t, pid):
            down = p.x.load(t.arange(64)[62::-2])  # 62, 60, ..., 0
            middle = p.x.load(t.arange(64)[16:48])
            p.out.store((t.arange(2)[:, None], t.arange(32)[None, :]), t.join(down, middle).T)

    out = np.zeros((2, 32), np.float32)
    kern.run(dict(out=out, x=x), backend=backend)
    _same(out, np.stack([x[62::-2], x[16:48]]))
    from accy.lowering.tile_access import describe_plans
    plans = describe_plans(kern.graph).splitlines()[1:]
    assert "62 + [-2] . i" in plans[0] and "16 + [1] . i (contiguous)" in plans[1], plans


@pytest.mark.parametrize("axis_", [0, 1, 2, -1])
def test_cat_along_each_axis(backend, axis_):
    x = _data((4, 8, 16), seed=1)
    parts = {0: ((slice(0, 1),), (slice(1, 4),)), 1: ((slice(None), slice(0, 3)), (slice(None), slice(3, 8))),
             2: ((Ellipsis, slice(0, 12)), (Ellipsis, slice(12, 16)))}[axis_ % 3]

    def fn(t, x):
        return t.cat(x[parts[1]], x[parts[0]] * 2.0, axis=axis_)

    got, _ = _run(backend, fn, x, x.shape)
    _same(got, np.concatenate([x[parts[1]], x[parts[0]] * np.float32(2)], axis=axis_))


@pytest.mark.parametrize("dtype", [np.int32, np.bool_])
def test_cat_of_integer_and_bool_tiles(backend, dtype):
    x = _data((16, 8), dtype, seed=2)
    got, _ = _run(backend, lambda t, x: t.cat(x[8:], x[:8], axis=0), x, (16, 8))
    _same(got, np.concatenate([x[8:], x[:8]]))


def test_join_split_interleave_round_trip(backend):
    x, y = _data((8, 16), seed=3), _data((8, 16), seed=4)

    def fn(t, x, y):
        joined = t.join(x, y)  # (8, 16, 2)
        a, b = t.split(joined)
        woven = t.interleave(a, b * 3.0)  # (8, 32)
        return t.cat(woven, t.ravel(joined).reshape(8, 32), axis=1)

    got, _ = _run(backend, fn, x, (8, 64), y=y)
    woven = np.stack([x, y * np.float32(3)], axis=-1).reshape(8, 32)
    _same(got, np.concatenate([woven, np.stack([x, y], -1).reshape(8, 32)], axis=1))


def test_join_broadcasts_and_split_of_a_pair_gives_scalars(backend):
    x = _data((16,), seed=5)

    def fn(t, x):
        pair = t.join(x[0], x[5])  # two scalars: a (2,) tile
        lo, hi = t.split(pair)
        return t.join(x, hi)[:, 1] + lo  # a scalar broadcast into the join

    got, _ = _run(backend, fn, x, (16,))
    _same(got, np.full(16, x[5], np.float32) + x[0])


@pytest.mark.parametrize("perm", [(2, 0, 1), (1, 2, 0), (0, 2, 1), (2, 1, 0)])
def test_permute_of_rank_3(backend, perm):
    x = _data((4, 8, 16), seed=6)
    got, _ = _run(backend, lambda t, x: t.permute(x, *perm), x, tuple(x.shape[p] for p in perm))
    _same(got, np.transpose(x, perm))
    got, _ = _run(backend, lambda t, x: t.permute(x, perm), x, tuple(x.shape[p] for p in perm))
    _same(got, np.transpose(x, perm))


@pytest.mark.parametrize("axis_", [None, 0, 1])
def test_flip(backend, axis_):
    x = _data((8, 32), np.int32, seed=7)
    got, _ = _run(backend, lambda t, x: t.flip(x, axis_), x, x.shape)
    _same(got, np.flip(x, -1 if axis_ is None else axis_))  # None: the last axis, as tl.flip


def test_slices_after_arithmetic_in_a_fold(backend):
    """A slice and a cat of values computed in registers (ptx: through shared memory), carried
    through a fold."""
    x = _data((16, 16), seed=8)

    def fn(t, x):
        def step(t, i, acc):
            rolled = t.cat(acc[:, 1:], acc[:, :1], axis=1)  # a roll by one column
            return rolled + x

        return t.fold_range(0, 3, 1, x * 0.5, step)

    got, _ = _run(backend, fn, x, x.shape)
    want = x * np.float32(0.5)
    for _ in range(3):
        want = np.roll(want, -1, axis=1) + x
    _same(got, want)


def test_the_new_ops_round_trip_through_the_text_form():
    x = _data((8, 16))
    _, kern = _run("numpy", lambda t, x: t.cat(x[::2, 3:], t.flip(x, 0)[::2, :13], axis=0), x, (8, 13))
    for graph in (kern.traced_graph, kern.graph):
        text = graph.text()
        assert " = slice " in text and " step -1,1 " in text and " = cat " in text
        assert parse(text).text() == text


# -- refused ---------------------------------------------------------------------------------


def _refused(fn, match, shape=(8, 16)):
    @accy.kernel(x=accy.tensor(f32, len(shape)), n=accy.scalar(index))
    def kern(k, p):
        @k.for_each_tile(grid=axis("g", 1))
        def body(t, pid):
            fn(t, p.x.load_tile((0,) * len(shape), shape), p.n)

    with pytest.raises(TraceError, match=match) as info:
        kern.traced_graph
    assert "test_shape_ops.py" in str(info.value)


def test_mistakes_are_refused_at_the_users_line():
    _refused(lambda t, x, n: x[:, n:], "static")
    _refused(lambda t, x, n: x[:, 20:30], "keeps no element")
    _refused(lambda t, x, n: x[8], "out of range for axis 0")
    _refused(lambda t, x, n: x[:, ::0], "step of 0")
    _refused(lambda t, x, n: x[1, 2, 3], "too many indices")
    _refused(lambda t, x, n: x[..., ...], "at most once")
    _refused(lambda t, x, n: t.cat(x, x[:4, :8], axis=1), r"other axes must match.*\(8, 16\) and \(4, 8\)")
    _refused(lambda t, x, n: t.cat(x, x.to(i32)), "f32 and i32")
    _refused(lambda t, x, n: t.split(x), "last axis must have 2 elements")
    _refused(lambda t, x, n: t.permute(x, 0), "give each of its 2 axes once")
    _refused(lambda t, x, n: t.permute(x, 0, 0), "not a permutation")
    _refused(lambda t, x, n: t.cat(x, x, axis=2), "out of range")
    _refused(lambda t, x, n: x[:, 1.5], "Python ints")
    _refused(lambda t, x, n: t.join(x, x > 0.0)[0, 0, True], "Python ints")
