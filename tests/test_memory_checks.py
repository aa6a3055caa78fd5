"""The interpreter's race and sync detector (check_memory=True), with planted bugs: what
compute-sanitizer's racecheck, synccheck and initcheck report on a GPU, here on the CPU."""

from __future__ import annotations

import numpy as np
import pytest

import accy
from accy import axis, dynamic_buffer, f32, i32, index, kernel
from accy.runtime import bind_arguments
from accy.runtime.interpreter import simt as interpreter
from accy.runtime import resolve_launch
from accy.dsl.schedule import ThreadBlocks
from accy.errors import BarrierError, RaceError, UninitializedError


def test_a_missing_barrier_between_shared_write_and_read_is_a_race():
    @kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32))
    def rotate(k, a):
        @k.for_each_block(grid=axis("b", 2), threads=axis("t", 32))
        def body(inner, block, thread):
            s = inner.shared(f32, 32, "ring")
            t, i = thread["t"], block["b"] * 32 + thread["t"]
            s[t] = a.x[i]  # MARK-shared-write
            # inner.barrier() is missing here
            a.dst[i] = s[(t + 1) % 32]  # MARK-shared-read

    args = [np.zeros(64, np.float32), np.arange(64, dtype=np.float32)]
    with pytest.raises(RaceError) as err:
        rotate.run(args, check_memory=True)
    message = str(err.value)
    assert "race on shared array 'ring'[" in message and "of block 0" in message
    assert "written by thread t=" in message and "read by thread t=" in message
    assert "MARK-shared-write" in message and "MARK-shared-read" in message


def test_the_racy_histogram_is_caught():
    """hist[x[i]] = hist[x[i]] + 1 from many threads: the classic read-modify-write race
    (it gives 256 on the interpreter and other counts on the host); in-out buffers are checked."""
    @kernel(hist=dynamic_buffer(i32), x=dynamic_buffer(i32))
    def racy(k, a):
        @k.for_each_1d(axis("i", a.x.size))
        def each(inner, idx):
            b = inner.cast(a.x[idx["i"]], index)
            a.hist[b] = a.hist[b] + 1

    x = np.random.default_rng(0).integers(0, 16, 1000).astype(np.int32)
    with pytest.raises(RaceError, match=r"race on 'hist'\[\d+\]: (read|written) by thread i=\d+ at .* and written by "
                                        r"thread i=\d+ at "):
        racy.run([np.zeros(16, np.int32), x], check_memory=True)


def test_the_same_histogram_with_atomics_is_not_a_race():
    @kernel(hist=dynamic_buffer(i32), x=dynamic_buffer(i32))
    def fixed(k, a):
        @k.for_each_1d(axis("i", a.x.size))
        def each(inner, idx):
            inner.atomic_add(a.hist, inner.cast(a.x[idx["i"]], index), 1)

    x = np.random.default_rng(0).integers(0, 16, 1000).astype(np.int32)
    hist = np.zeros(16, np.int32)
    fixed.run([hist, x], check_memory=True)
    np.testing.assert_array_equal(hist, np.bincount(x, minlength=16))


def test_a_plain_read_of_an_atomically_updated_element_races():
    @kernel(count=dynamic_buffer(i32), seen=dynamic_buffer(i32))
    def peek(k, a):
        @k.for_each_1d(axis("i", 8))
        def each(inner, idx):
            inner.atomic_add(a.count, 0, 1)
            a.seen[idx["i"]] = a.count[0]

    with pytest.raises(RaceError, match=r"race on 'count'\[0\]: updated atomically by thread i=\d .* and read by "
                                        r"thread i=\d"):
        peek.run([np.zeros(1, np.int32), np.zeros(8, np.int32)], check_memory=True)


def test_a_barrier_orders_global_accesses_within_a_block_but_not_across_blocks():
    def program(across_blocks: bool):
        @kernel(buf=dynamic_buffer(f32), dst=dynamic_buffer(f32))
        def exchange(k, a):
            @k.for_each_block(grid=axis("b", 2), threads=axis("t", 32))
            def body(inner, block, thread):
                t, b = thread["t"], block["b"]
                a.buf[b * 32 + t] = inner.cast(t, f32)
                inner.barrier()
                partner = ((1 - b) if across_blocks else b) * 32 + (31 - t)
                a.dst[b * 32 + t] = a.buf[partner]

        return exchange

    args = [np.zeros(64, np.float32), np.zeros(64, np.float32)]
    program(False).run([a.copy() for a in args], check_memory=True)  # ordered by the barrier
    with pytest.raises(RaceError, match=r"race on 'buf'\[\d+\]: written by thread t=\d+ b=[01] .* and read by "
                                        r"thread t=\d+ b=[01]"):
        program(True).run([a.copy() for a in args], check_memory=True)


def test_shared_memory_read_before_it_is_written():
    @kernel(dst=dynamic_buffer(f32))
    def garbage(k, a):
        @k.for_each_block(grid=axis("b", 2), threads=axis("t", 32))
        def body(inner, block, thread):
            s = inner.shared(f32, 64, "scratch")
            s[thread["t"]] = 1.0
            inner.barrier()
            a.dst[block["b"] * 32 + thread["t"]] = s[thread["t"] + 32]  # MARK-uninitialised

    with pytest.raises(UninitializedError) as err:
        garbage.run([np.zeros(64, np.float32)], check_memory=True)
    message = str(err.value)
    assert "read of shared array 'scratch'[32] of block 0 by thread t=0 b=0" in message
    assert "MARK-uninitialised" in message and "before any thread of its block wrote it" in message


PARTIAL_BARRIER = """
kernel @partial(%dst: buffer<f32, ?>) {
  %0 = const 2 : index
  %1 = const 16 : index
  %2 = const 1.0 : f32
  for_each_block (%3 = b<%0>) threads (%4 = t<32>) {
    %5 = lt %4, %1 : bool
    if %5 {
      barrier
      yield
    }
    %6 = const 32 : index
    %7 = mul %3, %6 : index
    %8 = add %7, %4 : index
    store %dst[%8] = %2 : f32
  }
}
"""


def test_a_barrier_only_part_of_a_block_reaches():
    """The builder refuses a barrier under a thread-dependent condition, so this graph is
    written by hand: the interpreter still catches it when it runs (BarrierError)."""
    graph = accy.parse(PARTIAL_BARRIER)
    dst = np.zeros(64, np.float32)
    binding = bind_arguments(graph, [dst])
    launch = resolve_launch(graph, ThreadBlocks(32), binding, None)
    with pytest.raises(BarrierError, match=r"barrier reached by thread t=0 b=0 but not by thread t=16 b=0 of the same "
                                           r"block: every thread of a block must reach every barrier"):
        interpreter.run_graph(graph, binding, launch, check_memory=False)
    assert issubclass(BarrierError, accy.AccyError)
    assert (dst == 0).all()  # nothing written
