"""The block level: blocks of cooperating threads, shared memory, barriers, atomics and warp
operations, on every backend, against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import accy
from accy import axis, dynamic_buffer, f16, f32, f64, i32, i64, index, kernel, scalar, u32
from accy.errors import OutOfBoundsError


# -- kernels people write (what the block level refuses is in test_bad_inputs.py's tables) ------------------------------------------------------------------------


def row_softmax(threads=128):
    @kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32), cols=scalar(index))
    def softmax(k, a):
        @k.for_each_block(grid=axis("row", a.x.size // a.cols), threads=axis("t", threads))
        def body(inner, block, thread):
            base, t = block["row"] * a.cols, thread["t"]
            m = inner.fold_range(t, a.cols, threads, float("-inf"),
                                 lambda inner, j, acc: inner.max(acc, a.x[base + j]))
            m = inner.block_reduce(m, "max")
            s = inner.fold_range(t, a.cols, threads, 0.0, lambda inner, j, acc: acc + (a.x[base + j] - m).exp())
            s = inner.block_reduce(s, "sum")
            inner.for_range(t, a.cols, threads, lambda inner, j: a.dst.__setitem__(base + j, (a.x[base + j] - m).exp() / s))

    return softmax


@pytest.mark.parametrize("rows, cols", [(1, 1), (3, 31), (5, 300)])
def test_row_softmax_with_block_reduce(rows, cols, backend, rng):
    x = rng.standard_normal((rows, cols), dtype=np.float32) * 3
    dst = np.zeros_like(x)
    row_softmax().run([dst, x, cols], backend=backend)
    wide = x.astype(np.float64)
    expected = np.exp(wide - wide.max(axis=1, keepdims=True))
    expected /= expected.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(dst, expected, rtol=2e-6, atol=1e-7)


TILE = 8


def tiled_matmul():
    @kernel(c=dynamic_buffer(f32), a=dynamic_buffer(f32), b=dynamic_buffer(f32),
            m=scalar(index), n=scalar(index), k=scalar(index))
    def matmul(kk, p):
        @kk.for_each_block(grid=(axis("bx", (p.n + TILE - 1) // TILE), axis("by", (p.m + TILE - 1) // TILE)),
                           threads=(axis("tx", TILE), axis("ty", TILE)))
        def body(inner, block, thread):
            ta = inner.shared(f32, TILE * TILE, "ta")
            tb = inner.shared(f32, TILE * TILE, "tb")
            tx, ty = thread["tx"], thread["ty"]
            row, col = block["by"] * TILE + ty, block["bx"] * TILE + tx

            def tile(inner, k0, acc):
                ar, ac, br = row, k0 + tx, k0 + ty
                ta[ty * TILE + tx] = inner.if_((ar < p.m) & (ac < p.k), lambda inner: p.a[ar * p.k + ac],
                                              lambda inner: 0.0)
                tb[ty * TILE + tx] = inner.if_((br < p.k) & (col < p.n), lambda inner: p.b[br * p.n + col],
                                              lambda inner: 0.0)
                inner.barrier()
                acc = inner.fold_range(0, TILE, 1, acc, lambda inner, j, s: s + ta[ty * TILE + j] * tb[j * TILE + tx])
                inner.barrier()
                return acc

            total = inner.fold_range(0, p.k, TILE, 0.0, tile)
            inner.if_((row < p.m) & (col < p.n), lambda inner: p.c.__setitem__(row * p.n + col, total))

    return matmul


@pytest.mark.parametrize("m, n, k", [(1, 1, 1), (9, 7, 13), (16, 24, 8)])
def test_tiled_matmul_with_shared_tiles_and_barriers(m, n, k, backend, rng):
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = np.zeros((m, n), np.float32)
    tiled_matmul().run([c, a, b, m, n, k], backend=backend)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def histogram(bins=64, threads=128):
    @kernel(hist=dynamic_buffer(i32), x=dynamic_buffer(i32))
    def histogram(k, a):
        @k.for_each_block(grid=axis("b", (a.x.size + threads - 1) // threads), threads=axis("t", threads))
        def body(inner, block, thread):
            local = inner.shared(i32, bins, "local")
            t = thread["t"]
            inner.if_(t < bins, lambda inner: local.__setitem__(t, 0))
            inner.barrier()
            i = block["b"] * threads + t
            inner.if_(i < a.x.size, lambda inner: inner.atomic_add(local, inner.cast(a.x[i], index), 1))
            inner.barrier()
            inner.if_(t < bins, lambda inner: inner.atomic_add(a.hist, t, local[t]))

    return histogram


def test_histogram_with_private_shared_bins_and_global_atomics(backend, rng):
    x = rng.integers(0, 64, 5000).astype(np.int32)
    hist = np.zeros(64, np.int32)
    histogram().run([hist, x], backend=backend)
    np.testing.assert_array_equal(hist, np.bincount(x, minlength=64))


def test_sum_with_grid_stride_loop_block_reduce_and_one_atomic_per_block(backend, rng):
    blocks, threads = 4, 64

    @kernel(total=dynamic_buffer(i64), x=dynamic_buffer(i64))
    def vsum(k, a):
        @k.for_each_block(grid=axis("b", blocks), threads=axis("t", threads))
        def body(inner, block, thread):
            first = block["b"] * threads + thread["t"]
            part = inner.fold_range(first, a.x.size, blocks * threads, inner.constant(0, i64),
                                    lambda inner, i, acc: acc + a.x[i])
            whole = inner.block_reduce(part, "sum")
            inner.if_(thread["t"] == 0, lambda inner: inner.atomic_add(a.total, 0, whole))

    x = rng.integers(-1000, 1000, 10_001)
    total = np.zeros(1, np.int64)
    vsum.run([total, x], backend=backend)
    assert total[0] == x.sum()


# -- warps --------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode, delta", [("shuffle", 5), ("shuffle", -3), ("shuffle_xor", 1), ("shuffle_xor", 17),
                                         ("shuffle_xor", 40), ("shuffle_down", 3), ("shuffle_down", 31),
                                         ("shuffle_up", 7), ("shuffle_up", -1)])
@pytest.mark.parametrize("t", [f32, i32, i64, f16, f64], ids=str)
def test_shuffles_move_values_between_lanes(mode, delta, t, backend):
    @kernel(dst=dynamic_buffer(t), x=dynamic_buffer(t))
    def shuffle(k, a):
        @k.for_each_block(grid=axis("b", 2), threads=(axis("tx", 16), axis("ty", 4)))
        def body(inner, block, thread):
            i = (block["b"] * 4 + thread["ty"]) * 16 + thread["tx"]
            a.dst[i] = getattr(inner, mode)(a.x[i], delta)

    x = (np.arange(128) * 3 + 1).astype(t.numpy)
    dst = np.zeros_like(x)
    shuffle.run([dst, x], backend=backend)
    lane, base = np.arange(128) % 32, np.arange(128) - np.arange(128) % 32
    if mode == "shuffle":
        source = base + (delta & 31)
    else:
        target = {"shuffle_xor": lane ^ delta, "shuffle_down": lane + delta, "shuffle_up": lane - delta}[mode]
        source = np.where((delta >= 0) & (0 <= target) & (target < 32), base + target, np.arange(128))
    np.testing.assert_array_equal(dst, x[source])


@pytest.mark.parametrize("op, reference", [("sum", np.sum), ("max", np.max), ("min", np.min)])
def test_warp_and_block_reduce_give_every_thread_the_result(op, reference, backend, rng):
    @kernel(warps=dynamic_buffer(i32), blocks=dynamic_buffer(i32), x=dynamic_buffer(i32))
    def reduce(k, a):
        @k.for_each_block(grid=axis("b", 3), threads=axis("t", 96))
        def body(inner, block, thread):
            i = block["b"] * 96 + thread["t"]
            a.warps[i] = inner.warp_reduce(a.x[i], op)
            a.blocks[i] = inner.block_reduce(a.x[i], op)

    x = rng.integers(-100, 100, 288).astype(np.int32)
    warps, blocks = np.zeros_like(x), np.zeros_like(x)
    reduce.run([warps, blocks, x], backend=backend)
    np.testing.assert_array_equal(warps, np.repeat(reference(x.reshape(9, 32), axis=1), 32))
    np.testing.assert_array_equal(blocks, np.repeat(reference(x.reshape(3, 96), axis=1), 96))


def test_lane_and_warp_linearise_threads_x_fastest(backend):
    @kernel(lanes=dynamic_buffer(index), warps=dynamic_buffer(index))
    def where(k, a):
        @k.for_each_block(grid=axis("b", 1), threads=(axis("x", 8), axis("y", 8)))
        def body(inner, block, thread):
            i = thread["y"] * 8 + thread["x"]
            a.lanes[i] = inner.lane
            a.warps[i] = inner.warp

    lanes, warps = np.zeros(64, np.int64), np.zeros(64, np.int64)
    where.run([lanes, warps], backend=backend)
    np.testing.assert_array_equal(lanes, np.arange(64) % 32)
    np.testing.assert_array_equal(warps, np.arange(64) // 32)


# -- atomics ------------------------------------------------------------------------------------


@pytest.mark.parametrize("t", [i32, i64, u32, index, f32, f64], ids=str)
@pytest.mark.parametrize("kind", ["add", "max", "min", "exchange"])
def test_atomics_on_global_memory_combine_every_thread(kind, t, backend, rng):
    @kernel(out=dynamic_buffer(t), x=dynamic_buffer(t))
    def update(k, a):
        @k.for_each_1d(axis("i", a.x.size))
        def each(inner, idx):
            i = idx["i"]
            getattr(inner, f"atomic_{kind}")(a.out, i % 4, a.x[i])

    x = rng.integers(0, 50, 40).astype(t.numpy)
    out = np.full(4, 10, t.numpy)
    update.run([out, x], backend=backend)
    groups = x.reshape(10, 4).astype(np.float64)
    if kind == "add":
        np.testing.assert_array_equal(out, (10 + groups.sum(axis=0)).astype(t.numpy))
    elif kind == "max":
        np.testing.assert_array_equal(out, np.maximum(10, groups.max(axis=0)).astype(t.numpy))
    elif kind == "min":
        np.testing.assert_array_equal(out, np.minimum(10, groups.min(axis=0)).astype(t.numpy))
    else:  # the last exchange wins; which thread is last is not defined on a GPU: any of the group
        assert all(out[j] in x.reshape(10, 4)[:, j] for j in range(4))


def test_atomic_add_returns_old_values_in_thread_order():
    """The interpreter applies atomics in thread order, so each thread's old value is the sum of
    the lower threads' contributions (a GPU may order them otherwise: only the total is defined)."""
    @kernel(counter=dynamic_buffer(i32), got=dynamic_buffer(i32))
    def ticket(k, a):
        @k.for_each_1d(axis("i", 10))
        def each(inner, idx):
            a.got[idx["i"]] = inner.atomic_add(a.counter, 0, 1)

    counter, got = np.zeros(1, np.int32), np.zeros(10, np.int32)
    ticket.run([counter, got], backend="numpy")
    assert counter[0] == 10 and got.tolist() == list(range(10))
    for backend in ("llvm",):  # any order, but every ticket handed out once
        counter[:] = 0
        ticket.run([counter, got], backend=backend)
        assert counter[0] == 10 and sorted(got.tolist()) == list(range(10))


def test_atomic_cas_claims_each_slot_once(backend):
    @kernel(slots=dynamic_buffer(i32), won=dynamic_buffer(i32))
    def claim(k, a):
        @k.for_each_1d(axis("i", 12))
        def each(inner, idx):
            i = idx["i"]
            old = inner.atomic_cas(a.slots, i % 3, -1, inner.cast(i, i32))
            a.won[i] = inner.cast(old == -1, i32)

    slots, won = np.full(3, -1, np.int32), np.zeros(12, np.int32)
    claim.run([slots, won], backend=backend)
    assert won.sum() == 3 and all(won[s] == 1 and s % 3 == j for j, s in enumerate(slots))


def test_f16_atomic_add_rounds_each_addition(backend):
    @kernel(out=dynamic_buffer(f16), x=dynamic_buffer(f16))
    def accumulate(k, a):
        @k.for_each_1d(axis("i", a.x.size))
        def each(inner, idx):
            inner.atomic_add(a.out, 0, a.x[idx["i"]])

    x = np.full(64, 0.5, np.float16)
    out = np.zeros(1, np.float16)
    accumulate.run([out, x], backend=backend)
    assert out[0] == 32.0


def test_a_barrier_in_a_uniform_loop_or_branch_is_fine(backend):
    @kernel(dst=dynamic_buffer(f32), flag=scalar("bool"))
    def uniform(k, a):
        @k.for_each_block(grid=axis("b", 2), threads=axis("t", 32))
        def body(inner, block, thread):
            s = inner.shared(f32, 32, "s")
            t = thread["t"]

            def step(inner, j, acc):
                s[t] = acc + 1.0
                inner.barrier()
                acc = s[(t + 1) % 32]  # read the neighbour's, after the barrier
                inner.barrier()
                return acc

            total = inner.fold_range(0, block["b"] + 3, 1, 0.0, step)  # the same for the block
            inner.if_(a.flag, lambda inner: inner.barrier())
            a.dst[block["b"] * 32 + t] = total

    dst = np.zeros(64, np.float32)
    uniform.run([dst, True], backend=backend)
    assert dst.tolist() == [3.0] * 32 + [4.0] * 32


def test_shared_out_of_bounds_names_the_array(backend):
    @kernel(dst=dynamic_buffer(f32))
    def overrun(k, a):
        @k.for_each_block(grid=axis("b", 2), threads=axis("t", 4))
        def body(inner, block, thread):
            s = inner.shared(f32, 4, "tile")
            s[thread["t"] + 1] = 1.0
            a.dst[block["b"] * 4 + thread["t"]] = 0.0

    with pytest.raises(OutOfBoundsError, match=r"store to shared array 'tile': index 4 is out of bounds for 4 elements "
                                               r"\(thread t=3 b=0\)"):
        overrun.run([np.zeros(8, np.float32)], backend=backend)


def test_text_form_of_block_ops_parses_back():
    graph = tiled_matmul().graph
    text = graph.text()
    assert "for_each_block (" in text and "threads (" in text and "shared %ta : f32[64]" in text
    assert "barrier" in text and "load shared %ta[" in text
    assert accy.parse(text).text() == text
    assert "atomic add shared %local[" in histogram().graph.text()
    assert "shuffle xor" in row_softmax().graph.text()


def test_a_pass_records_through_the_builders_pass_interface(backend):
    """What a lowering pass records with (accy.lowering.distribute uses nothing else of the
    builder's internals): record, loop (no carried values allowed), declare_scratch, varies."""
    from accy.dsl import Traced
    from accy.dsl.ops import LoadAttrs, Space, StoreAttrs

    @kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32))
    def rebuilt(k, a):
        @k.for_each_block(grid=axis("b", 2), threads=axis("t", 4))
        def body(inner, block, thread):
            array, declared = inner.declare_scratch(f32, 4, "tile")
            assert (declared.opcode, declared.attrs.name, array.name) == ("shared", "tile0", "tile0")
            assert inner.block.ops[0] is declared
            at = inner.record("add", [inner.mul(block["b"], 4), thread["t"]]).result
            assert inner.varies(at) and not inner.varies(block["b"])
            value = Traced(inner.record("load", [at], LoadAttrs(buffer="x", dtype=f32, space=Space.GLOBAL)).result)
            inner.store(array, value * 2.0, thread["t"])
            inner.barrier()
            assert inner.loop(0, 2, 1, (), lambda inner, i, accs: ()) == ()
            total, = inner.loop(0, 4, 1, (inner.constant(0.0, f32),),
                                lambda inner, i, accs: (accs[0] + inner.load(array, i),))
            inner.record("store", [at, total], StoreAttrs(buffer="dst", dtype=f32, space=Space.GLOBAL))

    x = np.arange(8, dtype=np.float32)
    dst = np.zeros(8, np.float32)
    rebuilt.run([dst, x], backend=backend)
    assert dst.tolist() == [12.0] * 4 + [44.0] * 4


def test_declare_scratch_outside_a_block_launch_is_a_clear_error():
    @kernel(dst=dynamic_buffer(f32))
    def elementwise(k, a):
        @k.for_each_1d(axis("i", a.dst.size))
        def body(inner, i):
            inner.declare_scratch(f32, 4, "tile")

    with pytest.raises(accy.errors.TraceError, match="declare_scratch: tile scratch is shared memory, which only a "
                                                     "for_each_block body has"):
        elementwise.graph
