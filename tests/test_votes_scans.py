"""Warp votes (ballot, vote_any, vote_all), block scans and block argmax/argmin, on every
backend, against NumPy: integers exactly, floats bit for bit against a NumPy model of the
documented combining order (and close to the float64 scan), for 1-D, 2-D and 3-D blocks,
whole warps and not, every number type; and what each refuses, naming the user's line."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from accy import axis, dynamic_buffer, kernel
from accy.dsl.types import DTYPES, f16, f32, f64, i32, i64, index, u32
from accy.errors import RaceError, TraceError

NUMBERS = [t for t in DTYPES.values() if not t.is_bool]  # what block_reduce takes
FLOATS = [t for t in NUMBERS if t.is_float]
BLOCKS = 3

# block shapes, as (name, extent) per axis, x first: whole warps and not, 1-D to 3-D
SHAPES = {
    "1": (("t", 1),), "5": (("t", 5),), "32": (("t", 32),), "16x4": (("x", 16), ("y", 4)),
    "8x5": (("x", 8), ("y", 5)), "96": (("t", 96),), "8x4x8": (("x", 8), ("y", 4), ("z", 8)),
    "100": (("t", 100),),
}
SCANS = [(op, inclusive) for op in ("sum", "max", "min") for inclusive in (True, False)]


def _threads(shape) -> int:
    return int(np.prod([extent for _, extent in shape]))


def _block_kernel(t_in, outs, shape, each):
    """``BLOCKS`` blocks of ``shape``; thread ``i`` (block-major, then x fastest) runs
    ``each(inner, x_i, store)`` where ``store(name, value)`` writes output ``name`` at ``i``."""
    n = _threads(shape)
    params = {name: dynamic_buffer(t) for name, t in outs.items()}

    @kernel(**params, x=dynamic_buffer(t_in))
    def block_kernel(k, a):
        @k.for_each_block(grid=axis("b", BLOCKS), threads=tuple(axis(*s) for s in shape))
        def body(inner, block, thread):
            linear, stride = 0, 1
            for (name, extent) in shape:
                linear = thread[name] * stride + linear
                stride *= extent
            i = block["b"] * n + linear
            each(inner, a.x[i], lambda name, v: a.param(name).__setitem__(i, v))

    return block_kernel


def _run(program, outs, x, backend, **options):
    buffers = {name: np.zeros(len(x), t.numpy) for name, t in outs.items()}
    program.run([*buffers.values(), x], backend=backend, **options)
    return {name: b.reshape(BLOCKS, -1) for name, b in buffers.items()}


def _bits(a) -> np.ndarray:
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}")


# -- the NumPy model of block_scan's order -------------------------------------------------------------


def _combine(op, t):
    narrow = t.is_float and t.bits <= 16  # f16, bf16 and fp8 arithmetic rounds once from f32

    def f(a, b):
        if op == "sum":
            if narrow:
                return (a.astype(np.float32) + b.astype(np.float32)).astype(t.numpy)
            with np.errstate(over="ignore"):
                return (a + b).astype(t.numpy)
        return (np.maximum if op == "max" else np.minimum)(a, b)

    return f


def _identity(op, t):
    if op == "sum":
        return 0
    if t.is_float and np.isinf(np.array(np.inf).astype(t.numpy)):
        return -np.inf if op == "max" else np.inf
    return t.min if op == "max" else t.max  # e4m3 has no infinities: its largest finite values


def model_scan(x, op, inclusive, t):
    """docs/ir.md's order: Hillis-Steele steps 1..16 within each 32-thread group, earlier
    operand first; then the groups' totals left to right, then the thread's group partial."""
    f = _combine(op, t)
    blocks, n = x.shape
    local, pos = x.copy(), np.arange(n)
    lane, group = pos % 32, pos // 32
    d = 1
    while d < min(32, n):
        before = local[:, np.where(lane >= d, pos - d, pos)]
        local = np.where(lane >= d, f(before, local), local)
        d *= 2
    groups = -(-n // 32)
    totals = local[:, [min(32 * g + 31, n - 1) for g in range(groups)]]
    prefix = [totals[:, 0]]
    for g in range(2, groups):
        prefix.append(f(prefix[-1], totals[:, g - 1]))
    inclusive_scan = local.copy()
    for g in range(1, groups):
        cols = group == g
        inclusive_scan[:, cols] = f(prefix[g - 1][:, None], local[:, cols])
    if inclusive:
        return inclusive_scan
    out = np.empty_like(x)
    out[:, 0] = _identity(op, t)
    out[:, 1:] = inclusive_scan[:, :-1]
    return out


def numpy_scan(x, op, inclusive, t):
    """NumPy's own scan (exact for integers, which wrap; float64 for floats)."""
    wide = x.astype(np.float64) if t.is_float else x
    if op == "sum":
        s = np.cumsum(wide, axis=1, dtype=wide.dtype)
    else:
        s = (np.maximum if op == "max" else np.minimum).accumulate(wide, axis=1)
    if inclusive:
        return s
    out = np.empty_like(s)
    out[:, 0] = _identity(op, t)
    out[:, 1:] = s[:, :-1]
    return out


def _scan_data(t, n, rng):
    size = BLOCKS * n
    if t.is_float:
        scale = 4.0 if t.bits <= 16 else 10.0 ** rng.uniform(-3, 3, size)
        return (rng.standard_normal(size) * scale).astype(t.numpy)
    return rng.integers(t.min, t.max, size, endpoint=True, dtype=np.int64 if t.is_signed else np.uint64).astype(t.numpy)


def _check_scans(t, shape, backend, rng, scans=SCANS, **options):
    n = _threads(shape)
    outs = {f"{op}_{'in' if inc else 'ex'}": t for op, inc in scans}

    def each(inner, v, store):
        for op, inc in scans:
            store(f"{op}_{'in' if inc else 'ex'}", inner.block_scan(v, op, inclusive=inc))

    x = _scan_data(t, n, rng)
    got = _run(_block_kernel(t, outs, shape, each), outs, x, backend, **options)
    xs = x.reshape(BLOCKS, n)
    for op, inc in scans:
        name = f"{op}_{'in' if inc else 'ex'}"
        want = model_scan(xs, op, inc, t)
        np.testing.assert_array_equal(_bits(got[name]), _bits(want), err_msg=f"{name} {t} {shape} on {backend}")
        exact = numpy_scan(xs, op, inc, t)
        if t.is_float and op == "sum":  # the model is a prefix sum, rounded at every step
            size = np.cumsum(np.abs(xs.astype(np.float64)), axis=1)
            eps = float(np.finfo(t.numpy).eps)
            assert np.all(np.abs(want.astype(np.float64) - exact) <= 2 * n * eps * size + 1e-300), name
        else:
            np.testing.assert_array_equal(want.astype(exact.dtype), exact, err_msg=name)


# every op and both kinds on each type, over the two shapes (whole warps: shuffles; not: shared memory)
HALVES = {"16x4": [("sum", True), ("max", False), ("min", True)],
          "8x5": [("sum", False), ("max", True), ("min", False)]}


@pytest.mark.parametrize("t", NUMBERS, ids=str)
@pytest.mark.parametrize("shape", sorted(HALVES))
def test_block_scan_every_type(t, shape, backend, rng):
    _check_scans(t, SHAPES[shape], backend, rng, HALVES[shape])


@pytest.mark.parametrize("t", [i32, f32], ids=str)
@pytest.mark.parametrize("shape", ["1", "5", "32", "96", "8x4x8", "100"])
def test_block_scan_every_shape(t, shape, backend, rng):
    _check_scans(t, SHAPES[shape], backend, rng)


def test_block_scan_of_nan_and_signed_zeros(backend):
    """A NaN makes every later sum and max/min NaN; a sum of -0.0s stays -0.0, and the
    exclusive scan's thread 0 gets +0.0 (the identity never enters the arithmetic)."""
    shape = SHAPES["96"]
    outs = {"s": f32, "m": f32, "e": f32}

    def each(inner, v, store):
        store("s", inner.block_scan(v, "sum"))
        store("m", inner.block_scan(v, "max"))
        store("e", inner.block_scan(v, "sum", inclusive=False))

    x = np.full((BLOCKS, 96), -0.0, np.float32)
    x[1] = np.arange(96)
    x[1, 40] = np.nan
    x[2, 70] = 1.0
    got = _run(_block_kernel(f32, outs, shape, each), outs, x.ravel(), backend)
    assert np.all(np.signbit(got["s"][0])) and np.all(got["s"][0] == 0)
    assert np.all(np.isnan(got["s"][1, 40:])) and np.all(np.isnan(got["m"][1, 40:]))
    assert not np.any(np.isnan(got["s"][1, :40])) and np.array_equal(got["m"][1, :40], np.arange(40))
    assert got["e"][0, 0] == 0 and not np.signbit(got["e"][0, 0]) and np.all(np.signbit(got["e"][0, 1:]))
    assert np.array_equal(got["s"][2], np.where(np.arange(96) >= 70, 1.0, 0.0))


# -- block_argmax / block_argmin --------------------------------------------------------------------


def _arg_data(t, n, rng):
    size = BLOCKS * n
    if not t.is_float:
        lo = max(t.min, -3)
        return rng.integers(lo, lo + 4, size).astype(t.numpy)  # many ties
    x = rng.choice(np.array([-1.5, -0.0, 0.0, 2.0, 2.0, -7.0]), size)
    x = x.reshape(BLOCKS, n)
    x[1, n // 3] = x[1, (2 * n) // 3] = np.nan  # two NaNs: the first wins, for argmin too
    x[2] = 0.0
    x[2, n // 2:] = -0.0  # +0.0 and -0.0 tie: the lowest index wins
    return x.ravel().astype(t.numpy)


def _check_args(t, shape, backend, rng, **options):
    n = _threads(shape)
    outs = {"vmax": t, "imax": index, "vmin": t, "imin": index}

    def each(inner, v, store):
        for which in ("max", "min"):
            value, where = getattr(inner, f"block_arg{which}")(v)
            store(f"v{which}", value)
            store(f"i{which}", where)

    x = _arg_data(t, n, rng)
    got = _run(_block_kernel(t, outs, shape, each), outs, x, backend, **options)
    xs = x.reshape(BLOCKS, n)
    wide = xs.astype(np.float64) if t.is_float else xs
    for which, fn in (("max", np.argmax), ("min", np.argmin)):
        where = fn(wide, axis=1)
        np.testing.assert_array_equal(got[f"i{which}"], np.repeat(where[:, None], n, axis=1),
                                      err_msg=f"arg{which} {t} {shape} on {backend}")
        value = xs[np.arange(BLOCKS), where]
        np.testing.assert_array_equal(_bits(got[f"v{which}"]), _bits(np.repeat(value[:, None], n, axis=1)))


@pytest.mark.parametrize("t", NUMBERS, ids=str)
@pytest.mark.parametrize("shape", ["16x4", "8x5"])
def test_block_argmax_argmin_every_type(t, shape, backend, rng):
    _check_args(t, SHAPES[shape], backend, rng)


@pytest.mark.parametrize("t", [i32, f32], ids=str)
@pytest.mark.parametrize("shape", ["1", "5", "32", "96", "8x4x8"])
def test_block_argmax_argmin_every_shape(t, shape, backend, rng):
    _check_args(t, SHAPES[shape], backend, rng)


@pytest.mark.parametrize("t", [f16, i64], ids=str)
@pytest.mark.parametrize("shape", ["16x4", "8x5"])
def test_on_ptx_for_sm_90(t, shape, rng):
    """The PTX for sm_90 too (the suite assembles every module the emulator runs with ptxas)."""
    _check_scans(t, SHAPES[shape], "ptx", rng, arch="sm_90")
    _check_args(t, SHAPES[shape], "ptx", rng, arch="sm_90")


# -- votes ----------------------------------------------------------------------------------------


def _vote_patterns(warps, rng):
    patterns = [np.ones(32, bool), np.zeros(32, bool), np.arange(32) == 31, np.arange(32) == 0,
                np.arange(32) % 2 == 1, np.arange(32) != 17]
    while len(patterns) < warps:
        patterns.append(rng.random(32) < 0.5)
    return np.concatenate(patterns[:warps])


@pytest.mark.parametrize("shape", ["32", "16x4", "8x4x8"])
def test_votes_and_ballot_per_warp(shape, backend, rng):
    shape = SHAPES[shape]
    n = _threads(shape)
    outs = {"ballot": u32, "any": i32, "all": i32}

    def each(inner, v, store):
        cond = v > 0
        store("ballot", inner.ballot(cond))
        store("any", inner.cast(inner.vote_any(cond), i32))
        store("all", inner.cast(inner.vote_all(cond), i32))

    cond = _vote_patterns(BLOCKS * n // 32, rng)
    x = np.where(cond, 1, -1).astype(np.int32)
    got = _run(_block_kernel(i32, outs, shape, each), outs, x, backend)
    per_warp = cond.reshape(-1, 32)
    ballot = (per_warp.astype(np.uint64) << np.arange(32, dtype=np.uint64)).sum(axis=1).astype(np.uint32)
    np.testing.assert_array_equal(got["ballot"].ravel(), np.repeat(ballot, 32))
    np.testing.assert_array_equal(got["any"].ravel(), np.repeat(per_warp.any(axis=1), 32))
    np.testing.assert_array_equal(got["all"].ravel(), np.repeat(per_warp.all(axis=1), 32))


# -- the race detector ---------------------------------------------------------------------------------


LOOPED = {
    "scan": lambda inner, acc: inner.block_scan(acc, "sum") % 1000,
    "exclusive": lambda inner, acc: inner.block_scan(acc, "max", inclusive=False) + 1,
    "argmax": lambda inner, acc: acc + inner.cast(inner.block_argmax(acc)[1], i32),
    "argmin": lambda inner, acc: acc - inner.block_argmin(acc)[0],
}


@pytest.mark.parametrize("what", sorted(LOOPED))
@pytest.mark.parametrize("shape", ["5", "96", "8x5"])
def test_in_a_uniform_loop_they_are_race_free(what, shape):
    """Each exchange round through shared memory is ordered by its barrier, and a last barrier
    lets every thread read the scratch before the loop's next iteration writes it again: the
    memory checker (on for the whole suite) finds nothing; without that last barrier it
    reports a race on the scratch.  The checked interpreter and the llvm host agree."""
    shape = SHAPES[shape]
    outs = {"s": i32}

    def each(inner, v, store):
        store("s", inner.fold_range(0, 3, 1, v, lambda inner, j, acc: LOOPED[what](inner, acc)))

    x = np.arange(BLOCKS * _threads(shape), dtype=np.int32) % 7 - 3
    program = _block_kernel(i32, outs, shape, each)
    np.testing.assert_array_equal(_run(program, outs, x, "numpy")["s"], _run(program, outs, x, "llvm")["s"])


def test_a_race_on_a_scans_result_names_the_users_store():
    @kernel(dst=dynamic_buffer(i32), x=dynamic_buffer(i32))
    def racy(k, a):
        @k.for_each_block(grid=axis("b", 1), threads=axis("t", 64))
        def body(inner, block, thread):
            out = inner.shared(i32, 1, "out")
            out[0] = inner.block_scan(a.x[thread["t"]], "sum")  # every thread writes out[0]
            inner.barrier()
            a.dst[thread["t"]] = out[0]

    with pytest.raises(RaceError, match=r"race on shared array 'out'\[0\] of block 0.*test_votes_scans.py"):
        racy.run([np.zeros(64, np.int32), np.ones(64, np.int32)], backend="numpy", check_memory=True)


# -- what they refuse ---------------------------------------------------------------------------------


def _line_of(marker: str) -> int:
    source, first = inspect.getsourcelines(_refusals)
    return first + next(n for n, line in enumerate(source) if marker in line)


def _refusals(case: str):
    threads = 40 if case == "partial-warp" else 64

    @kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32))
    def refused(k, a):
        @k.for_each_block(grid=axis("b", 2), threads=axis("t", threads))
        def body(inner, block, thread):
            t, v = thread["t"], a.x[thread["t"]]
            if case == "partial-warp":
                inner.vote_any(v > 0)  # @partial-warp
            elif case == "divergent-vote":
                inner.if_(t < 16, lambda inner: inner.ballot(v > 0))  # @divergent-vote
            elif case == "divergent-scan":
                inner.if_(v > 0, lambda inner: inner.block_scan(v))  # @divergent-scan
            elif case == "divergent-argmax":
                inner.fold_range(0, t, 1, 0.0, lambda inner, j, acc: inner.block_argmax(acc)[0])  # @divergent-argmax
            elif case == "op-name":
                inner.block_scan(v, "mean")  # @op-name
            elif case == "inclusive":
                inner.block_scan(v, "sum", inclusive="yes")  # @inclusive
            elif case == "bool-scan":
                inner.block_scan(v > 0)  # @bool-scan
            elif case == "bool-argmin":
                inner.block_argmin(v > 0)  # @bool-argmin
            elif case == "number-vote":
                inner.vote_all(v)  # @number-vote
            a.dst[block["b"] * threads + t] = v

    return refused


REFUSED = {
    "partial-warp": r"vote_any: warp operations need blocks of a multiple of 32 threads .* this block has 40",
    "divergent-vote": r"ballot inside an if_ whose condition depends on the thread .*not every thread of the block",
    "divergent-scan": r"block_scan inside an if_ whose condition depends on the thread",
    "divergent-argmax": r"block_argmax inside a fold_range whose bounds depend on the thread",
    "op-name": r"block_scan: op must be 'sum', 'max' or 'min', got 'mean'",
    "inclusive": r"block_scan: inclusive must be True or False, got 'yes'",
    "bool-scan": r"block_scan: the value is bool; it takes a number type",
    "bool-argmin": r"block_argmin: the value is bool; it takes a number type",
    "number-vote": r"vote_all: the condition is f32; it must be a bool",
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refusals_name_the_users_line(case):
    with pytest.raises(TraceError, match=REFUSED[case]) as caught:
        _refusals(case).traced_graph
    assert caught.value.location is not None
    assert f"test_votes_scans.py:{_line_of('# @' + case)}" in str(caught.value)


def test_outside_a_block_launch_is_refused():
    @kernel(dst=dynamic_buffer(f32))
    def plain(k, a):
        k.for_each_1d(axis("i", 4), lambda inner, idx: a.dst.__setitem__(idx["i"], inner.block_scan(1.0)))

    with pytest.raises(TraceError, match=r"block_scan: only inside a for_each_block body"):
        plain.traced_graph


def test_scratch_names_never_take_the_kernels_own():
    """The scratch arrays are named stem<k> with the first k that is free, so a kernel's own
    array named like one (declared first) keeps its name and the scratch gets another."""
    @kernel(dst=dynamic_buffer(i32), x=dynamic_buffer(i32))
    def named(k, a):
        @k.for_each_block(grid=axis("b", 1), threads=axis("t", 40))
        def body(inner, block, thread):
            mine = [inner.shared(i32, 1, name) for name in ("scan3", "arg4", "shared6")]
            t = thread["t"]
            s = inner.block_scan(a.x[t])
            value, where = inner.block_argmax(a.x[t])
            inner.if_(t == 0, lambda inner: mine[0].__setitem__(0, value))
            inner.barrier()
            a.dst[t] = s + mine[0][0] + inner.cast(where, i32) + inner.block_scan(a.x[t], "max")

    graph = named.traced_graph
    names = [op.attrs["name"] for op in graph.body.walk() if op.opcode == "shared"]
    assert len(names) == len(set(names)) and {"scan3", "arg4", "shared6"} <= set(names)
    x = np.arange(40, dtype=np.int32) % 9
    dst = np.zeros(40, np.int32)
    named.run([dst, x], backend="numpy")
    np.testing.assert_array_equal(dst, np.cumsum(x) + 8 + 8 + np.maximum.accumulate(x))


def test_a_kernels_array_named_like_a_scratch_traced_before_it_is_refused_clearly():
    @kernel(dst=dynamic_buffer(i32))
    def late(k, a):
        @k.for_each_block(grid=axis("b", 1), threads=axis("t", 40))
        def body(inner, block, thread):
            s = inner.block_scan(thread["t"])
            inner.shared(i32, 1, "scan0")
            a.dst[thread["t"]] = inner.cast(s, i32)

    with pytest.raises(TraceError, match=r"shared: name must be a new identifier, got 'scan0': this block already "
                                         r"has a shared array of that name .*block_scan"):
        late.traced_graph


def test_shared_scratch_counts_against_the_limit():
    """A scan of a block that is not whole warps exchanges through shared memory: two
    arrays of a value per thread, declared at the top of the block body."""
    @kernel(dst=dynamic_buffer(f64), x=dynamic_buffer(f64))
    def scan(k, a):
        @k.for_each_block(grid=axis("b", 1), threads=axis("t", 40))
        def body(inner, block, thread):
            a.dst[thread["t"]] = inner.block_scan(a.x[thread["t"]])

    shared = [op for op in scan.traced_graph.body.walk() if op.opcode == "shared"]
    assert sorted((op.attrs["dtype"].name, op.attrs["count"]) for op in shared) == [("f64", 2), ("f64", 40), ("f64", 40)]
