"""Regressions found by the differential fuzzer (tests/test_fuzz.py), minimised by hand.

Each test is deterministic and small; each names the bug it pins down.
"""

import numpy as np
import pytest

from accy import Program, axis, dynamic_buffer, f32, f64, index, scalar
from accy.runtime import bind_arguments
from accy.runtime.interpreter import simt as interpreter
from accy.codegen.machine import emit_ptx
from accy.targets import Target
from accy.errors import AccyError, OutOfBoundsError


def _run(program, args, backend):
    args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    program.run(args, backend=backend)
    return args


# -- bug 1: a load indexed by a loop-carried value crashes the LLVM lowering ------------------------
# llvm.py Lowering._affine (the loop range check of _prove_loads) takes every value in
# `inside` (the fold's region arguments included) to be an op result and reads
# v.owner.opcode; for an accumulator v.owner is the region's Block: AttributeError.


def _pointer_chase():
    def body(k, a):
        def each(inner, idx):
            i = idx["i"]
            # j = nxt[j], three times: the load's index is the accumulator itself
            a.dst[i] = inner.fold_range(0, 3, 1, i, lambda inner, t, j: a.nxt[j])

        k.for_each_1d(axis("i", 3), each)

    return Program("chase", {"dst": dynamic_buffer(index), "nxt": dynamic_buffer(index)}, body)


def test_bug1_load_indexed_by_an_accumulator_runs_on_llvm():
    args = [np.zeros(3, np.int64), np.array([1, 2, 0], np.int64)]
    expected = _run(_pointer_chase(), args, "numpy")[0]
    np.testing.assert_array_equal(expected, [0, 1, 2])
    np.testing.assert_array_equal(_run(_pointer_chase(), args, "llvm")[0], expected)


def test_bug1_load_indexed_by_an_accumulator_expression_emits_ptx():
    # the fuzzer's form: a floor-mod of an accumulator, e - (e // 2) * 2
    def body(k, a):
        def each(inner, idx):
            i = idx["i"]
            a.dst[i] = inner.fold_range(0, 2, 1, i, lambda inner, t, e: a.nxt[e - (e // 2) * 2] + e)

        k.for_each_1d(axis("i", 2), each)

    program = Program("chase_mod", {"dst": dynamic_buffer(index), "nxt": dynamic_buffer(index)}, body)
    emit_ptx(program.graph, Target.nvptx("sm_80"), program.launch().block)


# -- bug 2: the loop range check treats i * (i + c) as affine, and skips the per-load check ----------
# llvm.py Lowering._affine, the `mul` case: it scales by `_constant_term(other)` but
# discards the other operand's coefficient of i (`(_, other)`), so for i * (i + 3) the
# other side (1*i + 3) counts as the constant 3 and the index as 3*i.  _prove_loads then
# proves 3*i in bounds for i in [0, 4) and the real indices 0, 4, 10, 18 are read with no
# check: an out-of-bounds read of host memory instead of an OutOfBoundsError.


def _quadratic(order):
    def body(k, a):
        def each(inner, idx):
            def step(inner, t, acc):
                i = t * (t + 3) if order == "iv first" else (t + 3) * t
                return acc + a.src[i]

            a.dst[idx["i"]] = inner.fold_range(0, 4, 1, 0.0, step)

        k.for_each_1d(axis("i", 1), each)

    return Program("quadratic", {"dst": dynamic_buffer(f32), "src": dynamic_buffer(f32)}, body)


@pytest.mark.parametrize("order", ["iv first", "iv second"])
def test_bug2_nonaffine_load_index_in_a_loop_is_still_checked(order):
    program = _quadratic(order)
    args = [np.zeros(1, np.float32), np.arange(10, dtype=np.float32)]
    with pytest.raises(OutOfBoundsError, match="index 10 is out of bounds for 10 elements"):
        _run(program, args, "numpy")
    with pytest.raises(OutOfBoundsError, match="index 10 is out of bounds for 10 elements"):
        _run(program, args, "llvm")


# -- bug 3: f32 max/min of +0.0 and -0.0 ------------------------------------------------------------
# The interpreter (the reference semantics) uses np.maximum/np.minimum, which return the
# *second* operand when the operands compare equal: max(-0.0, +0.0) = +0.0 but
# max(+0.0, -0.0) = -0.0.  The LLVM lowering uses llvm.maximum/llvm.minimum (IEEE
# 754-2019: -0.0 < +0.0), so max is +0.0 and min is -0.0 either way.  1/x shows the
# difference (inf vs -inf).  Worse, the interpreter's max is then not commutative, but
# ops.py marks max/min `commutative=True`, so CSE merges max(x, y) with max(y, x) and
# the optimised graph disagrees with the traced one on the interpreter itself.


def _reciprocal_of(opname, swap):
    def body(k, a):
        def each(inner, idx):
            i = idx["i"]
            x, y = a.x[i], a.y[i]
            a.dst[i] = 1.0 / getattr(inner, opname)(y, x) if swap else 1.0 / getattr(inner, opname)(x, y)

        k.for_each_1d(axis("i", 2), each)

    return Program(f"recip_{opname}", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32),
                                       "y": dynamic_buffer(f32)}, body)


ZEROS = [np.array([-0.0, 0.0], np.float32), np.array([0.0, -0.0], np.float32)]


@pytest.mark.parametrize("opname", ["max", "min"])
@pytest.mark.parametrize("swap", [False, True])
def test_bug3_max_min_of_signed_zeros_agree_between_backends(opname, swap):
    program = _reciprocal_of(opname, swap)
    args = [np.zeros(2, np.float32), *ZEROS]
    np.testing.assert_array_equal(_run(program, args, "llvm")[0], _run(program, args, "numpy")[0])


def test_bug3_cse_of_commutative_max_keeps_the_interpreters_results():
    def body(k, a):
        def each(inner, idx):
            i = idx["i"]
            x, y = a.x[i], a.y[i]
            a.dst[i] = 1.0 / inner.max(x, y)
            a.dst2[i] = 1.0 / inner.max(y, x)  # CSE merges this with max(x, y)

        k.for_each_1d(axis("i", 2), each)

    program = Program("max_both_ways", {"dst": dynamic_buffer(f32), "dst2": dynamic_buffer(f32),
                                        "x": dynamic_buffer(f32), "y": dynamic_buffer(f32)}, body)
    args = [np.zeros(2, np.float32), np.zeros(2, np.float32), *ZEROS]
    optimised = _run(program, args, "numpy")
    traced = [a.copy() for a in args]
    interpreter.run_graph(program.traced_graph, bind_arguments(program.traced_graph, traced), program.launch())
    for got, want in zip(optimised[:2], traced[:2]):
        np.testing.assert_array_equal(got, want)


# -- bug 4: a store outside the launch is accepted when it sits in a kernel-scope fold ---------------
# builder.py Builder.store rejects a store only when `self.is_kernel_scope` (the builder
# *is* the top level); a fold_range body at kernel scope has a child builder, so the
# store is recorded, and passes.py _verify_block checks "store outside for_each" only for
# the ops of the top-level block itself (top_level=False for every nested region).  On a
# GPU every thread would run that store (docs/ir.md: store is "only inside for_each").
# (Found reading the verifier while writing the fuzzer, not by the fuzzer.)


def test_bug4_store_in_a_fold_outside_the_launch_is_rejected():
    def body(k, a):
        def write_once(inner, t, acc):
            a.dst[0] = 5.0
            return acc

        k.fold_range(0, 1, 1, 0.0, write_once)
        k.for_each_1d(axis("i", 3), lambda inner, idx: a.dst.store(inner, 1.0, idx["i"] + 1))

    program = Program("store_outside", {"dst": dynamic_buffer(f32)}, body)
    with pytest.raises(AccyError, match="outside for_each"):
        program.graph


# -- bug 5: f64 fma of uniform values crashes the interpreter ----------------------------------------
# numerics.py _fma64 finds the lanes it must compute exactly with
# `zip(*np.nonzero(finite & ~safe))`; NumPy >= 2.1 refuses np.nonzero on a 0-d array
# ("Calling nonzero on 0d arrays is not allowed"), and the interpreter evaluates a value
# that is the same for every thread (scalars, constants, anything computed from them at
# the kernel's top level or in a uniform loop) as a 0-d array.  LLVM runs it.
# Fixed: the exact lanes are found in flat views.


def _uniform_fma():
    def body(k, a):
        v = k.fma(a.x, a.x, a.x)  # kernel scope: one value for every thread
        k.for_each_1d(axis("i", 2), lambda inner, idx: a.dst.__setitem__(idx["i"], v))

    return Program("fma_uniform", {"dst": dynamic_buffer(f64), "x": scalar(f64)}, body)


def test_bug5_fma_of_uniform_f64_values_runs_on_the_interpreter():
    for x in (1.5, 1e300, 1e-310):  # 1e300 and 1e-310 take the exact (Fraction) path
        expected = _run(_uniform_fma(), [np.zeros(2), x], "llvm")[0]
        np.testing.assert_array_equal(_run(_uniform_fma(), [np.zeros(2), x], "numpy")[0], expected)


# -- bug 6: a failing kernel-scope op in an empty launch crashes the interpreter ---------------------
# llvm and cuda run nothing when the launch has no threads (host.run_graph and cuda.execute
# return at once for `launch.lanes == 0`), so a kernel-scope load out of bounds (or a
# division by zero) there is never executed.  The interpreter runs the kernel's top-level
# ops anyway; the failing check then calls Interpreter.first_bad, which broadcasts the
# condition to the empty grid and takes np.argmax of it: "ValueError: attempt to get argmax
# of an empty sequence" escapes (not even an AccyError).
# Fixed: an empty launch runs nothing on the interpreter either.


def _top_level_load():
    def body(k, a):
        v = a.src[5]  # out of bounds for a 2-element src, at the kernel's top level
        k.for_each_1d(axis("i", a.n), lambda inner, idx: a.dst.__setitem__(idx["i"], v))

    return Program("top_oob", {"dst": dynamic_buffer(f32), "src": dynamic_buffer(f32), "n": scalar(index)}, body)


def test_bug6_an_empty_launch_runs_nothing_on_the_interpreter_either():
    args = [np.zeros(0, np.float32), np.ones(2, np.float32), 0]
    for backend in ("llvm", "numpy", "ptx"):
        _run(_top_level_load(), args, backend)  # runs nothing


def test_bug6_a_launch_with_threads_reports_the_kernel_scope_failure_on_both():
    for backend in ("numpy", "llvm"):
        with pytest.raises(OutOfBoundsError, match="index 5 is out of bounds for 2 elements"):
            _run(_top_level_load(), [np.zeros(2, np.float32), np.ones(2, np.float32), 2], backend)
