"""Conditional regions: ``inner.if_(cond, then, otherwise)`` on every backend."""

from __future__ import annotations

import numpy as np
import pytest

from accy import Program, axis, dynamic_buffer, f32, i32, index, kernel, scalar
from accy.errors import OutOfBoundsError, TraceError


def test_masked_store_guards_the_tail(backend, rng):
    @kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32), n=scalar(index))
    def guarded(k, args):
        @k.for_each_1d(axis("i", (args.n + 31) // 32 * 32))  # whole warps: some threads fall past n
        def each(inner, idx):
            i = idx["i"]

            def then(inner):
                args.dst[i] = args.x[i] * 2.0  # would be out of bounds past n

            inner.if_(i < args.n, then)

    for n in (1, 31, 32, 45):
        x = rng.standard_normal(n, dtype=np.float32)
        dst = np.zeros(n, np.float32)
        guarded.run([dst, x, n], backend=backend)
        np.testing.assert_array_equal(dst, x * 2)


def test_both_branches_return_values(backend, rng):
    def body(k, a):
        def each(inner, idx):
            i = idx["i"]
            x = a.x[i]
            small, big = inner.if_(x < 0.5, lambda inner: (x * 10.0, 1), lambda inner: (-x, 2))
            a.dst[i] = small
            a.which[i] = big

        k.for_each_1d(axis("i", 40), each)

    program = Program("branches", {"dst": dynamic_buffer(f32), "which": dynamic_buffer(index),
                                   "x": dynamic_buffer(f32)}, body)
    x = rng.random(40, dtype=np.float32)
    dst, which = np.zeros(40, np.float32), np.zeros(40, np.int64)
    program.run([dst, which, x], backend=backend)
    np.testing.assert_array_equal(dst, np.where(x < 0.5, x * np.float32(10), -x))
    np.testing.assert_array_equal(which, np.where(x < 0.5, 1, 2))


def test_nested_branches_loops_in_branches_and_branches_in_loops(backend, rng):
    def body(k, a):
        def each(inner, idx):
            i = idx["i"]

            def odd(inner):
                # a loop whose trip count differs per thread, with a branch inside
                def step(inner, j, acc):
                    return inner.if_(j % 3 == 0, lambda inner: acc + a.x[j], lambda inner: acc - 1.0)
                return inner.fold_range(0, i, 1, 0.0, step)

            def even(inner):
                return inner.if_(i < 10, lambda inner: a.x[i], lambda inner: inner.cast(i, f32))

            a.dst[i] = inner.if_(i % 2 == 1, odd, even)

        k.for_each_1d(axis("i", 24), each)

    program = Program("nested", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}, body)
    x = rng.standard_normal(24, dtype=np.float32)
    dst = np.zeros(24, np.float32)
    program.run([dst, x], backend=backend)
    expected = []
    for i in range(24):
        if i % 2:
            acc = np.float32(0)
            for j in range(i):
                acc = np.float32(acc + x[j]) if j % 3 == 0 else np.float32(acc - 1)
            expected.append(acc)
        else:
            expected.append(x[i] if i < 10 else np.float32(i))
    np.testing.assert_array_equal(dst, np.array(expected, np.float32))


def test_uniform_condition_from_a_scalar(backend):
    @kernel(dst=dynamic_buffer(i32), flag=scalar("bool"))
    def pick(k, args):
        @k.for_each_1d(axis("i", 5))
        def each(inner, idx):
            args.dst[idx["i"]] = inner.if_(args.flag, lambda inner: 7, lambda inner: inner.cast(idx["i"], i32))

    for flag, expected in ((True, [7] * 5), (False, [0, 1, 2, 3, 4])):
        dst = np.zeros(5, np.int32)
        pick.run([dst, flag], backend=backend)
        assert dst.tolist() == expected


def test_a_branch_not_taken_does_not_fault_but_a_taken_one_does(backend):
    def body(k, a):
        def each(inner, idx):
            i = idx["i"]
            a.dst[i] = inner.if_(i == a.only[0], lambda inner: a.x[i + 100], lambda inner: 0.0)

        k.for_each_1d(axis("i", 4), each)

    program = Program("faulty", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32),
                                 "only": dynamic_buffer(index)}, body)
    dst = np.zeros(4, np.float32)
    program.run([dst, np.ones(4, np.float32), np.array([-1])], backend=backend)  # no thread takes it
    assert dst.tolist() == [0.0] * 4
    with pytest.raises(OutOfBoundsError, match=r"load from 'x': index 102 is out of bounds for 4 elements "
                                               r"\(thread i=2\)"):
        program.run([dst, np.ones(4, np.float32), np.array([2])], backend=backend)


@pytest.mark.parametrize("make, message", [
    (lambda inner, i: inner.if_(i < 2, lambda inner: 1.0), r"then returned a value but there is no otherwise"),
    (lambda inner, i: inner.if_(i < 2, lambda inner: inner.cast(i, f32), lambda inner: i),
     r"value 0 is f32 in then and index in otherwise"),
    (lambda inner, i: inner.if_(i < 2, lambda inner: (1.0, 2.0), lambda inner: 1.0),
     r"then returned 2 value\(s\) and otherwise 1"),
    (lambda inner, i: inner.if_(i, lambda inner: None), r"if_: condition is index; if_ needs a bool"),
    (lambda inner, i: inner.if_(i < 2, "then"), r"if_: then must be a function"),
])
def test_bad_branches_are_trace_errors(make, message):
    def body(k, a):
        k.for_each_1d(axis("i", 3), lambda inner, idx: make(inner, idx["i"]))

    with pytest.raises(TraceError, match=message) as err:
        Program("bad_if", {"dst": dynamic_buffer(f32)}, body).graph
    assert "test_if.py" in str(err.value)  # the user's line


def test_a_python_bool_condition_is_a_constant(backend):
    def body(k, a):
        k.for_each_1d(axis("i", 3), lambda inner, idx: inner.if_(True, lambda inner: a.dst.__setitem__(idx["i"], 1.0)))

    program = Program("constant_if", {"dst": dynamic_buffer(f32)}, body)
    dst = np.zeros(3, np.float32)
    program.run([dst], backend=backend)
    assert dst.tolist() == [1.0] * 3
