"""The PTX emulator's race checker (accy/emulator/races.py) and warp schedules
(accy/emulator/schedule.py): races are found under every schedule, named with both
instructions, threads and source lines; race-free kernels (accy's own lowering included)
pass under every schedule; the schedule changes what a racy kernel computes, and the seed a
RaceError names replays it."""

from __future__ import annotations

import re

import numpy as np
import pytest
from emulator_support import NEEDS_PTXAS, assembled, ptx_kernel

import accy
from accy import axis, dynamic_buffer, f32, i32, index, kernel
from accy.emulator import Access, Device, PtxError, RaceError
from accy.emulator.schedule import Schedule

pytestmark = NEEDS_PTXAS

SCHEDULES = ["lockstep", "reverse", "random:1", "random:2", "random:7"]


def line_of(marker: str) -> str:
    """``test_emulator_races.py:N``, N the line of this file that carries ``marker``."""
    with open(__file__) as f:
        for n, text in enumerate(f, 1):
            if marker in text and "line_of(" not in text:
                return f"test_emulator_races.py:{n}"
    raise AssertionError(marker)


# -- accy kernels -----------------------------------------------------------------------------------

TILE, ROWS = 32, 8


def transpose(barrier: bool):
    """The shared-memory transpose: each block loads a 32x32 tile row by row (8 rows of threads,
    4 passes), then writes it out column by column; the barrier between makes the tile whole."""

    @kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32), n=accy.scalar(index))
    def transpose(k, a):
        @k.for_each_block(grid=(axis("bx", a.n // TILE), axis("by", a.n // TILE)),
                          threads=(axis("tx", TILE), axis("ty", ROWS)))
        def body(inner, block, thread):
            tile = inner.shared(f32, TILE * TILE, "tile")
            tx, ty = thread["tx"], thread["ty"]
            for j in range(0, TILE, ROWS):
                tile[(ty + j) * TILE + tx] = a.x[(block["by"] * TILE + ty + j) * a.n + block["bx"] * TILE + tx]  # MARK-tile-store
            if barrier:
                inner.barrier()
            for j in range(0, TILE, ROWS):
                a.dst[(block["bx"] * TILE + ty + j) * a.n + block["by"] * TILE + tx] = tile[tx * TILE + ty + j]  # MARK-tile-load

    return transpose


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_the_transpose_without_its_barrier_races_under_every_schedule(schedule):
    n = 64
    x = np.arange(n * n, dtype=np.float32)
    with pytest.raises(RaceError) as err:
        transpose(barrier=False).run([np.zeros_like(x), x, n], backend="ptx", schedule=schedule)
    e = err.value
    assert isinstance(e, accy.errors.RaceError) and isinstance(e, PtxError)
    message = str(e)
    assert message.startswith("data race on shared memory of block (")
    assert {e.first.kind.name, e.second.kind.name} == {"WRITE", "READ"}
    store, load = (e.first, e.second) if e.first.kind.name == "WRITE" else (e.second, e.first)
    assert store.text.startswith("st.shared") and load.text.startswith("ld.shared")
    assert store.source == line_of("MARK-tile-store") and load.source == line_of("MARK-tile-load")
    for side in (store, load):
        assert f"at PTX line {side.line} ({side.source}): {' '.join(side.text.split())}" in message
        assert f"block {side.block} thread {side.thread}" in message
    assert store.block == load.block and store.thread != load.thread
    assert e.schedule == schedule and f"schedule {schedule} (ACCY_PTX_SCHEDULE={schedule} replays" in message


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_the_transpose_with_its_barrier_is_right_under_every_schedule(schedule):
    n = 96
    x = np.random.default_rng(3).standard_normal((n, n)).astype(np.float32)
    dst = np.zeros_like(x)
    transpose(barrier=True).run([dst, x, n], backend="ptx", schedule=schedule)
    np.testing.assert_array_equal(dst, x.T)


def test_one_element_written_by_every_thread_of_a_block_is_a_write_write_race():
    @kernel(dst=dynamic_buffer(i32))
    def last(k, a):
        @k.for_each_block(grid=axis("b", 2), threads=axis("t", 64))
        def body(inner, block, thread):
            a.dst[block["b"]] = inner.cast(thread["t"], i32)  # MARK-each-writes

    with pytest.raises(RaceError, match=r"data race on global memory at address 0x[0-9a-f]+, between ") as err:
        last.run([np.zeros(2, np.int32)], backend="ptx")
    e = err.value
    assert e.first.kind.name == e.second.kind.name == "WRITE" and e.first.block == e.second.block
    assert e.first.source == e.second.source == line_of("MARK-each-writes")


def test_a_plain_read_of_what_other_threads_update_atomically_is_a_race():
    @kernel(count=dynamic_buffer(i32), seen=dynamic_buffer(i32))
    def racy(k, a):
        @k.for_each_block(grid=axis("b", 1), threads=axis("t", 64))
        def body(inner, block, thread):
            inner.atomic_add(a.count, 0, 1)  # MARK-atomic
            a.seen[thread["t"]] = a.count[0]  # MARK-plain-read

    with pytest.raises(RaceError) as err:
        racy.run([np.zeros(1, np.int32), np.zeros(64, np.int32)], backend="ptx")
    kinds = {err.value.first.kind.name: err.value.first, err.value.second.kind.name: err.value.second}
    assert set(kinds) == {"ATOMIC", "READ"}
    assert kinds["ATOMIC"].source == line_of("MARK-atomic") and kinds["READ"].source == line_of("MARK-plain-read")
    assert "updated atomically by block" in str(err.value)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_atomics_alone_never_race(schedule):
    """A histogram: atomics on shared bins, a barrier, then atomics into global memory."""
    bins, threads = 16, 64

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

    x = np.random.default_rng(5).integers(0, bins, 1000).astype(np.int32)
    hist = np.zeros(bins, np.int32)
    histogram.run([hist, x], backend="ptx", schedule=schedule)
    np.testing.assert_array_equal(hist, np.bincount(x, minlength=bins))


def test_a_neighbour_lane_read_without_synchronisation_is_a_race_within_one_warp():
    @kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32))
    def swap(k, a):
        @k.for_each_block(grid=axis("b", 1), threads=axis("t", 32))
        def body(inner, block, thread):
            s = inner.shared(f32, 32, "s")
            t = thread["t"]
            s[t] = a.x[t]
            a.dst[t] = s[t ^ 1]

    with pytest.raises(RaceError, match=r"between lanes of one warp, with no barrier or warp-synchronous "
                                        r"instruction between them") as err:
        swap.run([np.zeros(32, np.float32), np.arange(32, dtype=np.float32)], backend="ptx")
    assert err.value.first.block == err.value.second.block


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_race_free_reductions_pass_under_every_schedule(schedule):
    """A tree reduction in shared memory with a barrier per level, and block_reduce (shuffles,
    then the warps' sums through shared memory), over several blocks."""
    threads = 128

    @kernel(tree=dynamic_buffer(f32), shuffled=dynamic_buffer(f32), x=dynamic_buffer(f32))
    def sums(k, a):
        @k.for_each_block(grid=axis("b", 3), threads=axis("t", threads))
        def body(inner, block, thread):
            s = inner.shared(f32, threads, "s")
            t = thread["t"]
            v = a.x[block["b"] * threads + t]
            s[t] = v
            inner.barrier()
            step = threads // 2
            while step:
                inner.if_(t < step, lambda inner, step=step: s.__setitem__(t, s[t] + s[t + step]))
                inner.barrier()
                step //= 2
            inner.if_(t == 0, lambda inner: a.tree.__setitem__(block["b"], s[0]))
            total = inner.block_reduce(v, "sum")
            inner.if_(t == 0, lambda inner: a.shuffled.__setitem__(block["b"], total))

    x = np.random.default_rng(9).integers(-50, 50, 3 * threads).astype(np.float32)
    tree, shuffled = np.zeros(3, np.float32), np.zeros(3, np.float32)
    sums.run([tree, shuffled, x], backend="ptx", schedule=schedule)
    expected = x.reshape(3, threads).sum(axis=1)  # small integers: every order sums them exactly
    np.testing.assert_array_equal(tree, expected)
    np.testing.assert_array_equal(shuffled, expected)


def test_blocks_are_never_ordered_even_by_barriers():
    """Block b reads what block b - 1 wrote; the barrier orders only each block's own threads."""

    @kernel(buf=dynamic_buffer(f32))
    def shift(k, a):
        @k.for_each_block(grid=axis("b", 4), threads=axis("t", 32))
        def body(inner, block, thread):
            i = block["b"] * 32 + thread["t"]
            a.buf[i] = inner.cast(i, f32)  # MARK-own-write
            inner.barrier()
            inner.if_(block["b"] > 0, lambda inner: a.buf.__setitem__(i - 32, a.buf[i - 32] + 1.0))

    with pytest.raises(RaceError, match=r"data race on global memory at address 0x[0-9a-f]+, between threads of "
                                        r"different blocks:") as err:
        shift.run([np.zeros(128, np.float32)], backend="ptx")
    assert err.value.first.block != err.value.second.block


# -- hand-written PTX: what accy does not emit ---------------------------------------------------------


def _warp_kernel(sync: str) -> str:
    """One warp: each lane stores its lane number to s[lane], then (after ``sync``) reads its
    neighbour's, s[lane ^ 1]."""
    return assembled(ptx_kernel("neighbour", [("out", "u64")], f"""
        mov.u32 %r1, %tid.x;
        shl.b32 %r2, %r1, 2;
        mov.u32 %r3, sm;
        add.s32 %r4, %r3, %r2;
        st.shared.u32 [%r4], %r1;
        {sync}
        xor.b32 %r5, %r1, 1;
        shl.b32 %r6, %r5, 2;
        add.s32 %r7, %r3, %r6;
        ld.shared.u32 %r8, [%r7];
        ld.param.u64 %rd1, [out];
        mul.wide.u32 %rd2, %r1, 4;
        add.s64 %rd3, %rd1, %rd2;
        st.global.u32 [%rd3], %r8;
        ret;
    """, extra=".shared .align 4 .b8 sm[128];\n"))


def _run_neighbour(sync: str, schedule: str = "lockstep"):
    dev = Device()
    out = dev.alloc(128)
    dev.load_module(_warp_kernel(sync)).function("neighbour").launch(1, 32, [out], schedule=schedule)
    got = np.zeros(32, np.uint32)
    dev.copy_from_device(got, out)
    return got


@pytest.mark.parametrize("sync", ["bar.warp.sync -1;", "shfl.sync.idx.b32 %r9, %r1, 0, 31, -1;",
                                  "vote.sync.all.pred %p1, 1, -1;", "bar.sync 0;"])
def test_lanes_of_a_warp_are_ordered_by_warp_synchronous_instructions_and_barriers(sync):
    np.testing.assert_array_equal(_run_neighbour(sync), np.arange(32) ^ 1)


@pytest.mark.parametrize("sync", ["", "membar.cta;", "bar.warp.sync 0x0000ffff;"])
def test_nothing_else_orders_them(sync):
    """No instruction, a fence, or a warp sync whose mask leaves half the warp out."""
    with pytest.raises(RaceError, match="between lanes of one warp"):
        _run_neighbour(sync)


def _bytes_kernel(store_a: str, store_b: str) -> str:
    """Thread 0 does ``store_a`` and thread 1 ``store_b`` (each on %rd1, the buffer's address)."""
    return assembled(ptx_kernel("bytes", [("buf", "u64")], f"""
        ld.param.u64 %rd1, [buf];
        mov.u32 %r1, %tid.x;
        setp.eq.u32 %p1, %r1, 0;
        @%p1 bra $A;
        {store_b}
        ret;
        $A:
        {store_a}
        ret;
    """))


@pytest.mark.parametrize("a, b, races", [
    ("st.global.u8 [%rd1], 1;", "st.global.u8 [%rd1+1], 2;", False),
    ("st.global.u16 [%rd1], 1;", "st.global.u16 [%rd1+2], 2;", False),
    ("st.global.u32 [%rd1], 1;", "st.global.u8 [%rd1+3], 2;", True),
    ("st.global.u64 [%rd1], 1;", "st.global.u16 [%rd1+6], 2;", True),
    ("st.global.v2.u32 [%rd1], {1, 2};", "st.global.u32 [%rd1+8], 2;", False),
    ("st.global.v2.u32 [%rd1], {1, 2};", "ld.global.u32 %r2, [%rd1+4];", True),
])
def test_overlap_is_byte_accurate(a, b, races):
    dev = Device()
    buf = dev.alloc(16)
    fn = dev.load_module(_bytes_kernel(a, b)).function("bytes")
    if races:
        with pytest.raises(RaceError):
            fn.launch(1, 2, [buf])
    else:
        fn.launch(1, 2, [buf])


# -- schedules ----------------------------------------------------------------------------------------

WARPS = 8


def _relay_kernel() -> str:
    """Each warp's lane 0 reads s[0] (what the warp before it in the schedule left there) into
    out[warp], then writes its warp number + 1 there: no barrier, a race."""
    return assembled(ptx_kernel("relay", [("out", "u64")], """
        mov.u32 %r1, %tid.x;
        and.b32 %r2, %r1, 31;
        setp.ne.u32 %p1, %r2, 0;
        @%p1 bra $DONE;
        shr.u32 %r3, %r1, 5;
        mov.u32 %r4, sm;
        ld.shared.u32 %r5, [%r4];
        add.s32 %r6, %r3, 1;
        st.shared.u32 [%r4], %r6;
        ld.param.u64 %rd1, [out];
        mul.wide.u32 %rd2, %r3, 4;
        add.s64 %rd3, %rd1, %rd2;
        st.global.u32 [%rd3], %r5;
        $DONE:
        ret;
    """, extra=".shared .align 4 .b8 sm[4];\n"))


def _relay(schedule: str | None):
    dev = Device()
    out = dev.alloc(4 * WARPS)
    fn = dev.load_module(_relay_kernel()).function("relay")
    with pytest.raises(RaceError) as err:  # the checker reports the race after the batch ran
        fn.launch(1, 32 * WARPS, [out], schedule=schedule)
    got = np.zeros(WARPS, np.uint32)
    dev.copy_from_device(got, out)
    return got, err.value


def test_the_schedule_changes_what_a_racy_kernel_computes():
    lockstep, _ = _relay("lockstep")
    reverse, _ = _relay("reverse")
    np.testing.assert_array_equal(lockstep, np.zeros(WARPS))  # every warp reads before any writes
    np.testing.assert_array_equal(reverse, np.r_[np.arange(2, WARPS + 1), 0])  # the last warp first
    seen = {tuple(_relay(f"random:{seed}")[0]) for seed in range(6)}
    assert len(seen) > 1
    for order in seen:  # each warp read what the one before it wrote: a chain through all of them
        assert order.count(0) == 1 and len(set(order)) == WARPS and max(order) <= WARPS


def test_a_race_names_the_seed_that_replays_it():
    values, err = _relay("random")  # a new seed per launch
    seed = re.search(r"schedule random:(\d+) \(ACCY_PTX_SCHEDULE=random:\1 replays the launch\)", str(err)).group(1)
    assert err.schedule == f"random:{seed}"
    again, err2 = _relay(f"random:{seed}")
    np.testing.assert_array_equal(again, values)
    assert str(err2) == str(err)


def test_random_draws_a_new_order_per_launch_and_the_variable_chooses(monkeypatch):
    seeds = {str(_relay("random")[1].schedule) for _ in range(3)}
    assert len(seeds) == 3
    monkeypatch.setenv("ACCY_PTX_SCHEDULE", "reverse")
    assert _relay(None)[1].schedule == "reverse"
    monkeypatch.setenv("ACCY_PTX_SCHEDULE", "backwards")
    with pytest.raises(PtxError, match=r"lockstep, reverse, random or random:SEED .* got 'backwards'"):
        _relay(None)


def test_schedules_parse_and_refuse():
    assert str(Schedule.parse("random:12")) == "random:12" and str(Schedule.parse(" Reverse ")) == "reverse"
    for bad in ("random:x", "reverse:3", "sideways", ""):
        with pytest.raises(PtxError):
            Schedule.parse(bad)
    with pytest.raises(accy.errors.ArgumentError, match="option schedule='sideways'"):
        transpose(True).run([np.zeros(4096, np.float32), np.zeros(4096, np.float32), 64], backend="ptx",
                            schedule="sideways")


# -- the entry point other instructions report through ----------------------------------------------------


def test_record_is_how_any_instruction_reports_its_accesses():
    """What an instruction that moves memory its own way (ldmatrix, cp.async, ...) calls: here
    on a context of its own, two warps of one block touching shared and global memory."""
    from types import SimpleNamespace

    from accy.emulator.memory import Site
    from accy.emulator.races import LaunchRaces, record

    def context():
        races = LaunchRaces((2, 1, 1), (64, 1, 1), "lockstep")
        races.begin_batch(0, 128, 256)
        return SimpleNamespace(races=races, bt=np.arange(128), sbase=np.repeat([0, 256], 64)), races

    site = Site(7, "copy.shared [%r1], [%rd1];", "copy", 16, "shared")
    T, races = context()
    record(T, "shared", [0, 0], 16, [0, 64], "write", site)  # two blocks, each its own shared memory
    record(T, "global", np.array([2**36, 2**36 + 16], np.uint64), np.array([16, 16]), [5, 40], "read", site)
    record(T, "local", [0, 0], 4, [0, 1], "write", site)  # private: not checked
    assert races.check(end_of_batch=True, last=True) is None
    T, races = context()
    record(T, "shared", [16], 16, [0], "write", site)
    record(T, "shared", [28], 4, [40], "read", site)  # another warp, inside the 16 bytes written
    error = races.check(end_of_batch=True, last=True)
    assert isinstance(error, RaceError) and "between threads of different warps of one block" in str(error)
    assert "at PTX line 7: copy.shared [%r1], [%rd1];" in str(error)
    for synchronised in (True, False):
        T, races = context()
        record(T, "shared", [0], 4, [1], "write", site)
        if synchronised:
            races.warp_sync(np.arange(32))  # warp 0's lanes completed a warp-synchronous instruction
        record(T, "shared", [0], 4, [2], "read", site)
        assert (races.check(end_of_batch=True, last=True) is None) == synchronised
    T, races = context()
    record(T, "shared", [0], 4, [1], "atomic", site)
    record(T, "shared", [0], 4, [40], Access.ATOMIC, site)
    assert races.check(end_of_batch=True, last=True) is None
    with pytest.raises(PtxError, match="naturally aligned runs of a power of two"):
        record(T, "shared", [4], 12, [0], "write", site)


def test_races_across_batches_of_blocks_are_found():
    """200 blocks of 128 threads run in two batches: block 199 (the second batch) reads what
    block 0 (the first) wrote, and block 198 writes what block 1 read."""

    @kernel(buf=dynamic_buffer(f32), other=dynamic_buffer(f32), out=dynamic_buffer(f32))
    def far(k, a):
        @k.for_each_block(grid=axis("b", 200), threads=axis("t", 128))
        def body(inner, block, thread):
            b, first = block["b"], thread["t"] == 0
            inner.if_(first & (b == 0), lambda inner: a.buf.__setitem__(0, 1.0))  # MARK-first-batch-write
            inner.if_(first & (b == 199), lambda inner: a.out.__setitem__(0, a.buf[0]))  # MARK-second-batch-read
            inner.if_(first & (b == 1), lambda inner: a.out.__setitem__(1, a.other[0]))  # MARK-first-batch-read
            inner.if_(first & (b == 198), lambda inner: a.other.__setitem__(0, 2.0))  # MARK-second-batch-write

    args = [np.zeros(1, np.float32), np.zeros(1, np.float32), np.zeros(2, np.float32)]
    with pytest.raises(RaceError, match="between threads of different blocks") as err:
        far.run(args, backend="ptx")
    e = err.value
    pairs = {(e.first.source, e.second.source), (e.second.source, e.first.source)}
    assert pairs & {(line_of("MARK-first-batch-write"), line_of("MARK-second-batch-read")),
                    (line_of("MARK-first-batch-read"), line_of("MARK-second-batch-write"))}


@pytest.mark.parametrize("which", ["write then read", "read then write"])
def test_each_kind_of_race_across_batches(which):
    @kernel(buf=dynamic_buffer(f32), out=dynamic_buffer(f32))
    def far(k, a):
        @k.for_each_block(grid=axis("b", 200), threads=axis("t", 128))
        def body(inner, block, thread):
            b, first = block["b"], thread["t"] == 0
            writer, reader = (0, 199) if which == "write then read" else (199, 0)
            inner.if_(first & (b == writer), lambda inner: a.buf.__setitem__(0, 1.0))
            inner.if_(first & (b == reader), lambda inner: a.out.__setitem__(0, a.buf[0]))
            inner.if_(b == 100, lambda inner: a.out.__setitem__(1 + thread["t"], 3.0))  # race-free traffic

    with pytest.raises(RaceError, match="between threads of different blocks") as err:
        far.run([np.zeros(1, np.float32), np.zeros(129, np.float32)], backend="ptx")
    blocks = {err.value.first.block[0], err.value.second.block[0]}
    assert blocks == {0, 199}


def _one_place_kernel(value: str, threads_per_slot: int) -> str:
    """Each lane stores ``value`` (a register of its own) to s[lane // threads_per_slot] in one
    instruction, then after a barrier lane 0 copies s[0] out."""
    shift = threads_per_slot.bit_length() - 1
    return assembled(ptx_kernel("one_place", [("out", "u64")], f"""
        mov.u32 %r1, %tid.x;
        shr.u32 %r2, %r1, {shift};
        shl.b32 %r2, %r2, 2;
        mov.u32 %r3, sm;
        add.s32 %r4, %r3, %r2;
        and.b32 %r5, %r1, 0;
        add.s32 %r5, %r5, 7;
        st.shared.u32 [%r4], {value};
        bar.sync 0;
        ld.shared.u32 %r8, [%r3];
        setp.ne.u32 %p1, %r1, 0;
        @%p1 bra DONE;
        ld.param.u64 %rd1, [out];
        st.global.u32 [%rd1], %r8;
    DONE:
        ret;
    """, extra=".shared .align 4 .b8 sm[256];\n"))


@pytest.mark.parametrize("threads_per_slot", [2, 32])
def test_lanes_storing_one_value_to_one_place_in_one_instruction_do_not_race(threads_per_slot):
    """The hardware writes one of the identical values: Triton's attention at hd 128 on 4 warps
    does this (issue 32).  Lanes of different warps doing so still race (no instruction orders them)."""
    dev = Device()
    out = dev.alloc(4)
    dev.load_module(_one_place_kernel("%r5", threads_per_slot)).function("one_place").launch(1, 32, [out])
    got = np.zeros(1, np.uint32)
    dev.copy_from_device(got, out)
    assert got[0] == 7
    with pytest.raises(RaceError, match="written"):  # two warps, one place: no instruction orders them
        dev.load_module(_one_place_kernel("%r5", 64)).function("one_place").launch(1, 64, [out])


def test_lanes_storing_different_values_to_one_place_still_race():
    dev = Device()
    out = dev.alloc(4)
    with pytest.raises(RaceError, match="between lanes of one warp"):
        dev.load_module(_one_place_kernel("%r1", 2)).function("one_place").launch(1, 32, [out])
