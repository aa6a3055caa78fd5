"""The llvm backend's own machinery (accy/codegen/host/spmd.py, host.py), at every vector width:
threads as vector lanes with masks, chunks that are full or partial, the checks proven
once for a whole launch, in-place runs, and the fast launcher.  Every result is compared
with the interpreter's, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import accy
from accy import axis, dynamic_buffer, f16, f32, i32, i64, index, kernel, scalar
from accy.codegen import machine as codegen
from accy.targets import Target
from accy.errors import ArgumentError, CompileError, LaunchError, OutOfBoundsError

WIDTHS = (2, 4, 8, 16)


@pytest.fixture(params=WIDTHS, ids=lambda w: f"w{w}")
def width(request):
    return request.param


def agree(program, args, width, **options):
    """Run on the interpreter and on llvm at ``width``; the outputs must be equal bit for bit.
    (Some of these kernels leave outputs unwritten or collide on purpose: no memory checker.)"""
    expected = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
    program.run(expected, backend="numpy", check_memory=False)
    got = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
    program.run(got, backend="llvm", vector_width=width, **options)
    for e, g in zip(expected, got):
        if isinstance(e, np.ndarray):
            np.testing.assert_array_equal(g.view(np.uint8), e.view(np.uint8))
    return got


# -- lanes, masks and chunks ---------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 3, 16, 17, 33, 100])
def test_partial_chunks_touch_nothing_past_the_extent(n, width):
    @kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32))
    def scale(k, a):
        k.for_each_1d(axis("i", a.x.size), lambda inner, idx: a.dst.__setitem__(idx["i"], a.x[idx["i"]] * 3.0))

    x = np.arange(n, dtype=np.float32)
    dst = np.full(n + 5, -1.0, np.float32)  # past the extent: must stay -1
    got = agree(scale, [dst, x], width)[0]
    assert (got[n:] == -1.0).all()


@pytest.mark.parametrize("shape", [(3, 5), (1, 40), (17, 2), (5, 3, 2)])
def test_grids_narrower_than_a_vector_and_wider(shape, width):
    """x shorter than the width takes several rows per chunk (flat chunks); longer, a row at a time."""
    names = "xyz"[:len(shape)]
    axes = {n: axis(f"a{n}", e) for n, e in zip(names, shape)}

    def body(k, a):
        def each(inner, idx):
            flat = 0
            for n, e in reversed(list(zip(names, shape))):
                flat = flat * e + idx[f"a{n}"]
            a.dst[flat] = inner.cast(flat, f32) * 2.0 + a.x[flat] + inner.cast(idx["ax"], f32)

        getattr(k, f"for_each_{len(shape)}d")(**axes, body=each)

    program = accy.Program("grid", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}, body)
    n = int(np.prod(shape))
    agree(program, [np.zeros(n, np.float32), np.linspace(-1, 1, n, dtype=np.float32)], width)


def test_divergent_if_loads_nothing_for_the_lanes_it_switches_off(width):
    """Past n the then-branch would load out of bounds: those lanes never run it."""
    @kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32), n=scalar(index))
    def guarded(k, a):
        @k.for_each_1d(axis("i", a.dst.size))
        def each(inner, idx):
            i = idx["i"]
            a.dst[i] = inner.if_(i < a.n, lambda inner: a.x[i] + 1.0, lambda inner: -2.0)

    for n in (0, 1, 7, 19):
        agree(guarded, [np.zeros(23, np.float32), np.arange(n, dtype=np.float32) if n else np.zeros(1, np.float32), n],
              width)


def test_folds_whose_trip_count_differs_per_lane(width):
    """A triangular loop: lane i runs i trips; with a step of 3 and from a thread-dependent start."""
    @kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32))
    def triangle(k, a):
        @k.for_each_1d(axis("i", a.dst.size))
        def each(inner, idx):
            i = idx["i"]
            total = inner.fold_range(0, i, 1, 0.0, lambda inner, j, acc: acc * 0.5 + a.x[j])
            strided = inner.fold_range(i, a.x.size, 3, 1.0, lambda inner, j, acc: acc + a.x[j] * acc)
            down = inner.fold_range(i, -1, -2, 0.0, lambda inner, j, acc: acc - a.x[j])
            a.dst[i] = total + strided * 0.001 + down

    agree(triangle, [np.zeros(37, np.float32), np.linspace(-1, 1, 40, dtype=np.float32)], width)


def test_lanes_storing_to_one_element_leave_the_last_threads_value(width):
    @kernel(dst=dynamic_buffer(f32), where=dynamic_buffer(index))
    def scatter(k, a):
        @k.for_each_1d(axis("i", a.where.size))
        def each(inner, idx):
            i = idx["i"]
            a.dst[0] = inner.cast(i, f32)  # every thread: the last one's stays
            a.dst[a.where[i]] = inner.cast(i, f32) + 100.0  # collisions within and across chunks

    where = np.array([1, 2, 1, 3, 2, 1, 5, 5, 4, 1, 2, 3, 3, 3, 1, 1, 2, 4, 5, 1, 1], np.int64)
    got = agree(scatter, [np.zeros(6, np.float32), where], width)[0]
    assert got[0] == len(where) - 1


@pytest.mark.parametrize("t, np_type", [(f16, np.float16), (i32, np.int32), (accy.boolean, np.bool_),
                                        (accy.bf16, None)])
def test_narrow_and_bool_elements_load_and_store_as_vectors(t, np_type, width):
    import ml_dtypes

    np_type = np_type or ml_dtypes.bfloat16

    @kernel(dst=dynamic_buffer(t), x=dynamic_buffer(t), perm=dynamic_buffer(index))
    def shuffle(k, a):
        @k.for_each_1d(axis("i", a.x.size))
        def each(inner, idx):
            i = idx["i"]
            a.dst[i] = a.x[a.perm[i]]  # a gather
            a.dst[a.perm[i] + a.x.size] = a.x[i]  # a scatter

    n = 29
    rng = np.random.default_rng(0)
    x = (rng.integers(0, 2, n) if t is accy.boolean else rng.standard_normal(n) * 10).astype(np_type)
    agree(shuffle, [np.zeros(2 * n, np_type), x, rng.permutation(n).astype(np.int64)], width)


@pytest.mark.parametrize("threads", [1, 16, 48, 96])
def test_blocks_whose_size_is_not_a_multiple_of_the_width(threads, width):
    @kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32))
    def neighbours(k, a):
        @k.for_each_block(grid=axis("b", 3), threads=axis("t", threads))
        def body(inner, block, thread):
            s = inner.shared(f32, threads, "s")
            t = thread["t"]
            g = block["b"] * threads + t
            s[t] = a.x[g] * 2.0
            inner.barrier()
            a.dst[g] = s[(t + 1) % threads] + s[threads - 1 - t] + inner.fold_range(0, t % 5, 1, 0.0,
                                                                                    lambda inner, j, acc: acc + s[j])

    agree(neighbours, [np.zeros(3 * threads, np.float32), np.arange(3 * threads, dtype=np.float32)], width)


@pytest.mark.parametrize("mode", ["xor", "down", "up", "idx"])
def test_shuffles_with_constant_and_varying_deltas(mode, width):
    @kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32))
    def shuffles(k, a):
        @k.for_each_block(grid=axis("b", 2), threads=(axis("tx", 32), axis("ty", 2)))
        def body(inner, block, thread):
            t = thread["ty"] * 32 + thread["tx"]
            g = block["b"] * 64 + t
            v = a.x[g]
            fn = {"xor": inner.shuffle_xor, "down": inner.shuffle_down, "up": inner.shuffle_up,
                  "idx": inner.shuffle}[mode]
            total = v
            for delta in (0, 1, 3, 8, 16, 31, 32):  # constants, some past the warp
                total = total + fn(v, delta) * float(delta + 1)
            total = total + fn(v, t % 7)  # a delta that differs per thread
            a.dst[g] = total

    agree(shuffles, [np.zeros(128, np.float32), np.linspace(-3, 3, 128, dtype=np.float32)], width)


@pytest.mark.parametrize("mode", ["xor", "down", "up", "idx"])
def test_shuffles_of_thread_coordinates_and_index_arithmetic(mode, width):
    """Values a thread loop could recompute (a coordinate, index arithmetic of it, a comparison)
    are read at other threads by a shuffle: they must be each thread's own, from a slot."""
    @kernel(dst=dynamic_buffer(i64))
    def shuffles(k, a):
        @k.for_each_block(grid=axis("b", 2), threads=axis("t", 64))
        def body(inner, block, thread):
            t = thread["t"]
            fn = {"xor": inner.shuffle_xor, "down": inner.shuffle_down, "up": inner.shuffle_up,
                  "idx": inner.shuffle}[mode]
            total = inner.cast(t, i64) * 0
            for delta in (3, 5, 17):
                total = total + inner.cast(fn(t, delta), i64) + inner.cast(fn(t * 2 + 1, delta), i64) * 100 \
                    + inner.cast(fn(t + 7 < 40, delta), i64) * 10000
            a.dst[block["b"] * 64 + t] = total

    agree(shuffles, [np.zeros(128, np.int64)], width)


def test_chunk_local_shuffles_inside_a_loop_and_a_branch(width):
    """An xor by a small constant needs only the chunk's lanes, so it may sit in a loop or a
    uniform branch that holds no barrier (found by the cooperative fuzzer)."""
    @kernel(out=dynamic_buffer(i32), x=dynamic_buffer(i32), trips=scalar(index))
    def nested(k, a):
        @k.for_each_block(grid=axis("b", 2), threads=axis("t", 32))
        def body(inner, block, thread):
            t = thread["t"]
            g = block["b"] * 32 + t
            v = inner.fold_range(0, a.trips, 1, a.x[g],
                                 lambda inner, i, acc: acc + inner.shuffle_xor(acc, 1) + inner.shuffle_xor(acc, 0))
            a.out[g] = inner.if_(a.trips > 1, lambda inner: v + inner.shuffle_xor(v, 1), lambda inner: v)

    agree(nested, [np.zeros(64, np.int32), np.arange(64, dtype=np.int32), 3], width)


def test_atomics_from_lanes_happen_in_thread_order(width):
    @kernel(order=dynamic_buffer(i32), counter=dynamic_buffer(i32))
    def claim(k, a):
        k.for_each_1d(axis("i", a.order.size),
                      lambda inner, idx: a.order.__setitem__(idx["i"], inner.atomic_add(a.counter, 0, 1)))

    got = agree(claim, [np.zeros(45, np.int32), np.zeros(1, np.int32)], width)
    assert got[0].tolist() == list(range(45))


# -- checks proven for the whole launch ----------------------------------------------------


def _affine(form):
    """dst[form(i, s)] = x[form(i, s)] for i < n: the proof must bound form's range exactly."""
    @kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32), n=scalar(index), s=scalar(index))
    def affine(k, a):
        @k.for_each_1d(axis("i", a.n))
        def each(inner, idx):
            j = form(inner, idx["i"], a.s)
            a.dst[j] = a.x[j] + 1.0

    return affine


FORMS = {
    "i*s+3": lambda inner, i, s: i * s + 3,
    "(n-1-i)*s": lambda inner, i, s: (9 - i) * s,
    "clamped": lambda inner, i, s: inner.min(inner.max(i - s, 0), 9),
    "i%s-div": lambda inner, i, s: i // 4 + (i % 4) * s,
    "select": lambda inner, i, s: inner.select(i < 5, i * s, 20 - i),
}


@pytest.mark.parametrize("name", FORMS)
def test_a_launch_that_fits_runs_and_one_that_does_not_names_its_thread(name, width):
    program = _affine(FORMS[name])
    for s in (0, 1, 2, 3):
        args = [np.zeros(21, np.float32), np.arange(21, dtype=np.float32), 10, s]
        try:
            expected = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
            program.run(expected, backend="numpy", check_memory=False)
        except OutOfBoundsError as e:
            before = args[0].copy()
            with pytest.raises(OutOfBoundsError) as got:
                program.run(args, backend="llvm", vector_width=width)
            assert str(got.value).split(" at ")[0] == str(e).split(" at ")[0]
            np.testing.assert_array_equal(args[0], before)  # nothing written
        else:
            agree(program, args, width)


def test_an_empty_loop_with_out_of_bounds_indices_is_never_run(width):
    @kernel(dst=dynamic_buffer(f32), n=scalar(index), far=scalar(index))
    def empty(k, a):
        @k.for_each_1d(axis("i", a.dst.size))
        def each(inner, idx):
            i = idx["i"]
            a.dst[i] = inner.fold_range(a.far, a.n, 1, 1.0, lambda inner, j, acc: acc + a.dst[j])

    agree(empty, [np.zeros(8, np.float32), 5, 10**12], width)


def test_an_index_that_overflows_is_not_taken_for_proven(width):
    """i * s wraps for a huge s: the proof must fail and the checked run report the thread."""
    program = _affine(FORMS["i*s+3"])
    args = [np.zeros(21, np.float32), np.arange(21, dtype=np.float32), 10, 2**62]
    with pytest.raises(OutOfBoundsError, match=r"thread i=1\b"):
        program.run(args, backend="llvm", vector_width=width)


def _stencil(lo, hi):
    """dst[at] = the mean of x's four neighbours where ``lo(row, n) < row < hi(row, n)`` and
    0 < col < n - 1, else x[at]: the guard is what keeps the neighbours' indices in bounds."""
    @kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32), n=scalar(index))
    def stencil(k, a):
        @k.for_each_2d(x=axis("col", a.n), y=axis("row", a.n))
        def each(inner, idx):
            row, col = idx["row"], idx["col"]
            at = row * a.n + col
            inside = (row > lo(a.n)) & (hi(a.n) > row) & (col > 0) & (col < a.n - 1)
            a.dst[at] = inner.if_(inside, lambda inner: 0.25 * (a.x[at - 1] + a.x[at + 1] + a.x[at - a.n] + a.x[at + a.n]),
                                  lambda inner: a.x[at])

    return stencil


@pytest.mark.parametrize("n", [1, 2, 3, 9, 40])
def test_a_guard_narrows_the_launch_proof(n, width):
    """Comparisons of a thread index in an if_'s condition narrow it inside the branch: the
    whole launch is proven in bounds and runs in place."""
    program = _stencil(lambda n: 0, lambda n: n - 1)
    kernel_ = codegen.host_kernel(program.graph, Target.host(vector_width=width))
    assert kernel_.plan.infallible
    x = np.arange(n * n, dtype=np.float32)
    status, extents = np.zeros(4, np.int64), np.zeros(3, np.int64)
    assert kernel_.prepare([x.ctypes.data, x.ctypes.data], [n * n, n * n], [n], status.ctypes.data,
                           extents.ctypes.data) is True
    agree(program, [np.zeros(n * n, np.float32), x, n], width)


def test_a_guard_too_weak_for_the_proof_still_fails_where_it_should(width):
    """row < n lets the last row read x[at + n], past the end: not proven, and the checked
    version names the thread, as the interpreter does."""
    program = _stencil(lambda n: 0, lambda n: n)
    kernel_ = codegen.host_kernel(program.graph, Target.host(vector_width=width))
    x = np.arange(36, dtype=np.float32)
    status, extents = np.zeros(4, np.int64), np.zeros(3, np.int64)
    assert kernel_.prepare([x.ctypes.data, x.ctypes.data], [36, 36], [6], status.ctypes.data,
                           extents.ctypes.data) is False
    for backend in ("numpy", "llvm"):
        dst = np.full(36, 7.0, np.float32)
        with pytest.raises(OutOfBoundsError, match=r"index 37 is out of bounds for 36 elements \(thread col=1 row=5\)"):
            program.run([dst, x, 6], backend=backend, **({"vector_width": width} if backend == "llvm" else {}))
        assert (dst == 7.0).all()  # nothing half-written


def test_a_guard_on_an_index_expression_narrows_it(width):
    """i + 5 < n narrows the value i + 5 itself: x[i + 5] is proven."""
    @kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32))
    def guarded(k, a):
        @k.for_each_1d(axis("i", a.dst.size))
        def each(inner, idx):
            i = idx["i"]
            inner.if_(i + 5 < a.x.size, lambda inner: a.dst.__setitem__(i, a.x[i + 5]))

    kernel_ = codegen.host_kernel(guarded.graph, Target.host(vector_width=width))
    assert kernel_.plan.infallible
    agree(guarded, [np.zeros(12, np.float32), np.arange(9, dtype=np.float32)], width)


def test_an_unprovable_guarded_kernel_still_runs(width):
    """A guard on a loaded value tells the proof nothing about x[i + 5]: the checked version runs
    (and the access stays in bounds because of what the data says)."""
    @kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32), ok=dynamic_buffer(i32))
    def guarded(k, a):
        @k.for_each_1d(axis("i", a.dst.size))
        def each(inner, idx):
            i = idx["i"]
            inner.if_(a.ok[i] > 0, lambda inner: a.dst.__setitem__(i, a.x[i + 5]))

    kernel_ = codegen.host_kernel(guarded.graph, Target.host(vector_width=width))
    dst, x, ok = np.zeros(12, np.float32), np.arange(9, dtype=np.float32), (np.arange(12) + 5 < 9).astype(np.int32)
    status, extents = np.zeros(4, np.int64), np.zeros(3, np.int64)
    assert kernel_.prepare([a.ctypes.data for a in (dst, x, ok)], [12, 9, 12], [], status.ctypes.data,
                           extents.ctypes.data) is False
    agree(guarded, [dst, x, ok], width)


def test_an_in_out_buffer_updated_in_place(width):
    @kernel(acc=dynamic_buffer(f32), x=dynamic_buffer(f32))
    def accumulate(k, a):
        k.for_each_1d(axis("i", a.x.size), lambda inner, idx: a.acc.__setitem__(
            idx["i"], a.acc[idx["i"]] * 0.5 + a.x[idx["i"]]))

    agree(accumulate, [np.ones(50, np.float32), np.arange(50, dtype=np.float32)], width)


def test_the_prepare_entry_reports_extents_and_whether_the_launch_fits():
    program = _affine(FORMS["i*s+3"])
    kernel_ = codegen.host_kernel(program.graph, Target.host())
    assert kernel_.plan.infallible
    x = np.zeros(21, np.float32)
    for s, fits in ((1, True), (2, False)):  # 9*2+3 = 21 is one past the end
        status, extents = np.zeros(4, np.int64), np.zeros(3, np.int64)
        ok = kernel_.prepare([x.ctypes.data, x.ctypes.data], [21, 21], [10, s], status.ctypes.data,
                             extents.ctypes.data)
        assert ok is fits and extents[0] == 10 and not status.any()


# -- the fast launcher ---------------------------------------------------------------------


def test_repeated_launches_with_changing_sizes_and_scalars():
    @kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32), a=scalar(f32), n=scalar(index))
    def axpb(k, p):
        k.for_each_1d(axis("i", p.n), lambda inner, idx: p.dst.__setitem__(idx["i"], p.x[idx["i"]] * p.a + 1.0))

    for n in (5, 64, 0, 200, 64):
        x = np.arange(max(n, 1), dtype=np.float32)
        dst = np.zeros_like(x)
        axpb.run([dst, x, 1.5, n], backend="llvm")
        np.testing.assert_array_equal(dst[:n], x[:n] * np.float32(1.5) + 1)
    with pytest.raises(ArgumentError, match="does not fit index"):
        axpb.run([dst, x, 1.5, -1 - 2**63], backend="llvm")
    with pytest.raises(LaunchError, match="extent -3"):
        axpb.run([dst, x, 1.5, -3], backend="llvm")
    with pytest.raises(OutOfBoundsError):
        axpb.run([dst, x, 1.5, 500], backend="llvm")


def test_vector_width_must_be_one_the_host_lowering_takes():
    with pytest.raises(ArgumentError, match="option vector_width=3: vector_width takes one of 0, 2, 4"):
        _affine(FORMS["i*s+3"]).run([np.zeros(3, np.float32)] * 2 + [1, 1], backend="llvm", vector_width=3)
    with pytest.raises(CompileError, match="vector_width must be one of 0, 2, 4"):
        Target.host(vector_width=3)


# -- interrupts and failures during a launch (issue 17 §5) --------------------------------------------

import _thread  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

from accy.runtime import host  # noqa: E402

N_SLOW = 1 << 16


def _slow(gather: bool):
    """dst[i] = a loop of ``trips`` steps from x[i] (x[where[i]] with ``gather``: the launch
    cannot be proven, so it runs on scratch copies); the second half of the threads loops 4
    times as long, so a split launch's last slices run long."""
    params = {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32), "where": dynamic_buffer(index),
              "trips": scalar(index)}

    def body(k, args):
        @k.for_each_1d(axis("i", args.dst.size))
        def each(inner, idx):
            i = idx["i"]
            start = args.x[args.where[i]] if gather else args.x[i]
            stop = args.trips + (i // (args.dst.size // 2)) * args.trips * 3
            args.dst[i] = inner.fold_range(0, stop, 1, start, lambda inner, j, acc: acc * 0.999 + 0.5)

    return accy.Program("slow_gather" if gather else "slow", params, body)


def _interrupted(run, ready):
    """Run ``run()`` with Ctrl-C pressed (``_thread.interrupt_main``) once ``ready()`` holds; the
    KeyboardInterrupt it raised.  The interrupt is sent at most once, while ``run`` runs."""
    lock, state = threading.Lock(), {"done": False}

    def press():
        while True:
            with lock:
                if state["done"]:
                    return
                if ready():
                    _thread.interrupt_main()
                    return
            time.sleep(0.001)

    presser = threading.Thread(target=press)
    with pytest.raises(KeyboardInterrupt) as err:
        presser.start()
        try:
            run()
        finally:
            with lock:
                state["done"] = True
    presser.join()
    return err.value


def _slow_args():
    # long enough (seconds, uninterrupted) that the interrupt lands mid-launch even on a loaded machine
    return [np.zeros(N_SLOW, np.float32), np.ones(N_SLOW, np.float32), np.arange(N_SLOW, dtype=np.int64), 400_000]


def test_a_long_launch_on_one_thread_is_interrupted_between_slices():
    program, args = _slow(gather=False), _slow_args()
    program.run([np.zeros(64, np.float32), *(a[:64] for a in args[1:3]), 10], backend="llvm", threads=1)  # compile
    dst = args[0]
    error = _interrupted(lambda: program.run(args, backend="llvm", threads=1), lambda: dst.any())
    written = int(np.count_nonzero(dst))
    assert 0 < written < N_SLOW  # it stopped part-way (before: only once the whole launch had run)
    assert any("kernel 'slow' ran in place" in note and "may be partly written" in note
               for note in getattr(error, "__notes__", ()))


def test_an_interrupted_split_launch_waits_for_its_workers():
    program, args = _slow(gather=False), _slow_args()
    dst = args[0]
    _interrupted(lambda: program.run(args, backend="llvm", threads=2), lambda: dst.any())
    at_the_raise = dst.copy()
    time.sleep(0.3)
    assert (dst == at_the_raise).all()  # no worker wrote after the exception
    assert np.count_nonzero(dst) < N_SLOW


def test_an_interrupted_launch_on_scratch_copies_leaves_the_outputs_untouched(monkeypatch):
    program, args = _slow(gather=True), _slow_args()
    dst = args[0]
    dst[:] = 7.0
    scratches = []
    original = accy.runtime.arguments.Binding.scratch

    def scratch(binding):  # keep the copies alive, to see whether anything writes them later
        scratches.append(original(binding))
        return scratches[-1]

    monkeypatch.setattr(accy.runtime.arguments.Binding, "scratch", scratch)
    run = lambda: accy.runtime.run(program, args, backend="llvm", threads=2, counts={})  # noqa: E731
    _interrupted(run, lambda: bool(scratches) and scratches[-1]["dst"].any())
    assert (dst == 7.0).all()  # untouched
    copy = scratches[-1]["dst"]
    at_the_raise = copy.copy()
    time.sleep(0.3)
    assert (copy == at_the_raise).all()  # no worker wrote the freed copy after the exception


def test_a_worker_error_stops_the_launch_and_is_raised_once_every_worker_has_stopped(monkeypatch):
    program, args = _slow(gather=False), _slow_args()
    dst = args[0]
    original = host._run_share

    def share(kernel, *rest):
        if threading.current_thread() is not threading.main_thread():
            while not dst[: N_SLOW // 2].any():  # once the caller's first slices have run
                time.sleep(0.001)
            raise MemoryError("a worker failed")
        return original(kernel, *rest)

    monkeypatch.setattr(host, "_run_share", share)
    with pytest.raises(MemoryError, match="a worker failed") as err:
        program.run(args, backend="llvm", threads=2)
    assert any("kernel 'slow' ran in place" in note for note in err.value.__notes__)
    assert np.count_nonzero(dst[: N_SLOW // 2]) < N_SLOW // 2  # the caller stopped too


def test_the_fast_launcher_keeps_a_bounded_number_of_launches():
    program = accy.Program("sized", {"dst": dynamic_buffer(f32)}, lambda k, a: k.for_each_1d(
        axis("i", a.dst.size), lambda inner, idx: a.dst.store(inner, 1.0, idx["i"])))
    for n in range(1, host.LAUNCHES_KEPT + 40):
        dst = np.zeros(n, np.float32)
        program.run([dst], backend="llvm")
        assert (dst == 1.0).all()
    (launcher,) = program.launchers.values()
    assert launcher.launch_for.cache_info().currsize == host.LAUNCHES_KEPT
    assert len(host._timings[launcher.kernel].at) <= host._Timing.KEPT
