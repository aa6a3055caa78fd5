"""Bad programs are rejected while tracing, naming the op, the types and the user's line."""

import math

import numpy as np
import pytest

from accy import Program, axis, dynamic_buffer, f32
from accy.dsl.types import DTYPES
from accy.errors import AccyError, TraceError


def trace(body, params=None):
    params = params or {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}
    return Program("bad", params, body).traced_graph


def in_launch(each, n=4):
    return lambda k, args: k.for_each_1d(axis("i", n), lambda inner, idx: each(inner, idx["i"], args))


def this_line_is(marker):
    with open(__file__) as f:
        return next(n for n, line in enumerate(f, start=1) if marker in line)


def test_bitwise_and_of_floats_names_op_types_and_line():
    def each(inner, i, args):
        args.dst[i] = i & args.x[i]  # MARK-index-plus-f32

    with pytest.raises(TraceError) as err:
        trace(in_launch(each))
    message = str(err.value)  # the index operand is promoted to f32 first (docs/ir.md, "Type promotion")
    assert "and(f32, f32)" in message and "needs an integer type or bool" in message
    assert err.value.location.lineno == this_line_is("MARK-index-plus-f32")
    assert "test_trace_errors.py" in message and "i & args.x[i]" in message


def test_a_float_index_is_refused():
    with pytest.raises(TraceError, match=r"store: indices are integers, got f32"):
        trace(in_launch(lambda inner, i, args: args.dst.store(inner, 1.0, i * 0.5)))


def test_fold_body_returning_wrong_type():
    def bad_body(inner, j, acc):
        return j  # index, but acc is f32

    with pytest.raises(TraceError, match=r"body bad_body .* returned index for accumulator 0, expected f32"):
        trace(in_launch(lambda inner, i, args: args.dst.store(inner, inner.fold_range(0, 3, 1, 0.0, bad_body), i)))


def test_fold_body_returning_nothing():
    with pytest.raises(TraceError, match="did the body forget to return"):
        trace(in_launch(lambda inner, i, args: inner.fold_range(0, 3, 1, 0.0, lambda inner, j, acc: None)))


def test_fold_tuple_arity():
    with pytest.raises(TraceError, match="returned 1 values, expected 2"):
        trace(in_launch(lambda inner, i, args: inner.fold_range(0, 3, 1, (0.0, 0.0), lambda inner, j, acc: (acc[0],))))


def test_fold_step_must_be_nonzero_int():
    with pytest.raises(TraceError, match="step must be non-zero"):
        trace(in_launch(lambda inner, i, args: inner.fold_range(0, 3, 0, 0.0, lambda inner, j, acc: acc)))
    with pytest.raises(TraceError, match="step must be a non-zero Python int"):
        trace(in_launch(lambda inner, i, args: inner.fold_range(0, 3, i, 0.0, lambda inner, j, acc: acc)))


def test_fold_bounds_must_be_index():
    with pytest.raises(TraceError, match=r"fold\(f32, index, f32\): start is f32"):
        trace(in_launch(lambda inner, i, args: inner.fold_range(args.x[i], 3, 1, 0.0, lambda inner, j, acc: acc)))


def test_float_index_into_buffer():
    with pytest.raises(TraceError, match=r"load: indices are integers, got f32"):
        trace(in_launch(lambda inner, i, args: args.dst.store(inner, args.x[args.x[i]], i)))


def test_extent_overflowing_index_range():
    with pytest.raises(TraceError, match="outside the index range"):
        trace(lambda k, args: k.for_each_1d(axis("i", 2**63), lambda inner, idx: None))
    with pytest.raises(TraceError, match="overflows the index range"):
        trace(lambda k, args: k.for_each_2d(x=axis("i", 2**40), y=axis("j", 2**40), body=lambda inner, idx: None))


def test_constant_outside_index_range():
    with pytest.raises(TraceError, match="outside the index range"):
        trace(in_launch(lambda inner, i, args: inner.constant_index(2**63)))


def test_value_used_outside_its_region():
    leaked = []

    def step(inner, j, acc):
        leaked.append(j)
        return acc

    def each(inner, i, args):
        inner.fold_range(0, 3, 1, 0.0, step)
        args.dst[leaked[0]] = 1.0  # the induction variable escaped its fold

    with pytest.raises(TraceError, match="defined inside another region"):
        trace(in_launch(each))


def test_builder_used_after_its_body_returned():
    kept = []

    def step(inner, j, acc):
        kept.append(inner)
        return acc

    def each(inner, i, args):
        inner.fold_range(0, 3, 1, 0.0, step)
        kept[0].constant_index(1)

    with pytest.raises(TraceError, match="already returned"):
        trace(in_launch(each))


def test_python_control_flow_on_traced_value():
    def each(inner, i, args):
        if args.x[i] > 0.0:  # Python `if` cannot branch on a run-time value
            args.dst[i] = 1.0

    with pytest.raises(TraceError, match="Use select"):
        trace(in_launch(each))
    with pytest.raises(TraceError, match="fold_range"):
        trace(in_launch(lambda inner, i, args: range(i)))


def test_select_needs_bool_condition():
    with pytest.raises(TraceError, match="select needs a bool condition"):
        trace(in_launch(lambda inner, i, args: inner.select(args.x[i], 1.0, 2.0)))


def test_exp_of_index():
    with pytest.raises(TraceError, match=r"exp\(index\): operand is index; needs a float type"):
        trace(in_launch(lambda inner, i, args: inner.exp(i)))


def test_floor_division_of_floats_and_mixed_signedness():
    with pytest.raises(TraceError, match=r"f32 // int: // is integer division"):
        trace(in_launch(lambda inner, i, args: args.x[i] // 2))
    params = {"dst": dynamic_buffer(accy.u32), "x": dynamic_buffer(accy.i32)}
    with pytest.raises(TraceError, match=r"u32 % i32: operands of different signedness"):
        trace(in_launch(lambda inner, i, args: args.dst.__setitem__(i, args.dst[i] % args.x[i])), params)


def test_store_outside_for_each():
    def body(k, args):
        args.dst.store(k, 1.0, 0)

    with pytest.raises(TraceError, match="outside for_each"):
        trace(body)


def test_missing_and_double_launch():
    with pytest.raises(TraceError, match="never opened a launch"):
        trace(lambda k, args: None)

    def twice(k, args):
        k.for_each_1d(axis("i", 2), lambda inner, idx: None)
        k.for_each_1d(axis("j", 2), lambda inner, idx: None)

    with pytest.raises(TraceError, match="exactly one launch"):
        trace(twice)


def test_nested_launch_rejected():
    with pytest.raises(TraceError, match="top level"):
        trace(in_launch(lambda inner, i, args: inner.for_each_1d(axis("j", 2), lambda inner2, idx: None)))


def test_unknown_parameter_and_bad_declarations():
    with pytest.raises(TraceError, match="no parameter named 'y'"):
        trace(in_launch(lambda inner, i, args: args.y[i]))
    with pytest.raises(TraceError, match="not an identifier"):
        Program("p", {"not ok": dynamic_buffer(f32)}, lambda k, a: None)
    with pytest.raises(TraceError, match="program name must be an identifier"):
        Program("bad name", {}, lambda k, a: None)
    with pytest.raises(TypeError, match="unknown dtype"):
        dynamic_buffer("f128")


def test_traced_value_outside_kernel():
    values = []

    def each(inner, i, args):
        values.append(args.x[i])

    trace(in_launch(each))
    with pytest.raises(TraceError, match="outside a kernel body"):
        values[0] + 1.0


def test_body_exception_propagates_with_kernel_name():
    def each(inner, i, args):
        raise RuntimeError("user bug")

    with pytest.raises(RuntimeError, match="user bug") as err:
        trace(in_launch(each))
    assert any("kernel 'bad'" in note for note in err.value.__notes__)


def test_all_errors_derive_from_accy_error():
    assert issubclass(TraceError, AccyError)


# -- the errors a new user meets (every one an AccyError with the user's line) ---------------------

import subprocess  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402

import accy  # noqa: E402
from accy import i32  # noqa: E402
from accy.errors import UnknownOpError  # noqa: E402


def test_python_operators_and_builtins_record_ops(backend):
    def each(inner, i, args):
        x = args.x[i]
        args.dst[i] = (abs(x) ** 2 + x * np.float32(0.5) + np.float32(2.0) * x + np.exp(x) + round(x)
                       + inner.cast(i % 3 + (i << 1) - (i & 1), accy.f32) + accy.math.erf(x) + x.log1p())

    program = Program("ops", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}, in_launch(each, 6))
    x = np.array([0.5, 1.5, 2.5, -0.25, 3.0, 0.1], np.float32)
    dst = np.zeros(6, np.float32)
    program.run([dst, x], backend=backend)
    i = np.arange(6)
    import math
    expected = (np.abs(x.astype(np.float64)) ** 2 + x * 0.5 + 2 * x + np.exp(x.astype(np.float64)) + np.rint(x)
                + (i % 3 + (i << 1) - (i & 1)) + np.array([math.erf(v) for v in x.tolist()]) + np.log1p(x.astype(np.float64)))
    np.testing.assert_allclose(dst, expected, rtol=1e-5)


@pytest.mark.parametrize("each, message", [
    (lambda inner, i, args: inner.lgo(args.x[i]), r"no op named 'lgo' on the builder; did you mean 'log'\?"),
    (lambda inner, i, args: args.x[i].expp(), r"no op named 'expp' on a traced value; did you mean 'exp'\?"),
    (lambda inner, i, args: args.x.lod(inner, i), r"no op named 'lod' on buffer 'x'; did you mean 'load'\?"),
])
def test_unknown_methods_suggest_the_op(each, message):
    with pytest.raises(UnknownOpError, match=message) as err:
        trace(in_launch(each))
    assert isinstance(err.value, AccyError) and isinstance(err.value, AttributeError)
    assert "test_trace_errors.py" in str(err.value)


@pytest.mark.parametrize("each, message", [
    (lambda inner, i, args: len(args.x), r"len\(x\): .*use x\.size"),
    (lambda inner, i, args: args.x[i] @ args.x[i], r"@ is not an accy op"),
    (lambda inner, i, args: int(args.x[i]), r"cannot be used as a Python int.*cast\(value, i32\)"),
    (lambda inner, i, args: max(args.x[i], 0.0), r"cannot be used as a Python bool.*inner\.max\(a, b\)"),
    (lambda inner, i, args: np.arcsin(args.x[i]), r"numpy\.arcsin is not an accy op on traced values"),
    (lambda inner, i, args: round(args.x[i], 2), r"round\(x, 2\): only round\(x\)"),
    (lambda inner, i, args: args.x[i, 0], r"buffers are 1-D; compute a flat index"),
    (lambda inner, i, args: i ** args.x[i], r"index \*\* f32: an integer power needs a constant exponent"),
    (lambda inner, i, args: inner.log(i), r"log\(index\): operand is index; needs a float type.*cast\(value, f32\)"),
])
def test_unsupported_python_on_traced_values(each, message):
    with pytest.raises(AccyError, match=message) as err:
        trace(in_launch(each))
    assert "test_trace_errors.py" in str(err.value)


def test_fold_init_zero_says_the_accumulator_is_an_index():
    with pytest.raises(TraceError, match=r"init=0 is a Python int, so the accumulator is index; write init=0\.0"):
        trace(in_launch(lambda inner, i, args: inner.fold_range(0, 3, 1, 0, lambda inner, j, acc: acc + args.x[j])))


def test_constants_must_fit_the_type():
    params = {"dst": dynamic_buffer(accy.u8), "x": dynamic_buffer(accy.u8)}
    with pytest.raises(TraceError, match=r"constant 300 is outside the u8 range \[0, 255\]"):
        trace(in_launch(lambda inner, i, args: args.dst.__setitem__(i, args.x[i] + 300)), params)


def test_a_float_constant_that_overflows_its_type_names_the_constant_type_and_line():
    params = {"dst": dynamic_buffer(accy.f16), "x": dynamic_buffer(accy.f16)}

    def each(inner, i, args):
        args.dst[i] = args.x[i] * 70000.0  # MARK-f16-overflow

    with pytest.raises(TraceError, match=r"constant 70000\.0 overflows f16: .* largest finite f16, 65504\.0") as err:
        trace(in_launch(each), params)
    assert err.value.location.lineno == this_line_is("MARK-f16-overflow")


FLOATS = [t for t in DTYPES.values() if t.is_float]  # every float type of the dtype table, new ones too


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_every_float_type_refuses_a_finite_constant_past_its_largest_finite_value(dtype):
    params = {"dst": dynamic_buffer(dtype), "x": dynamic_buffer(dtype)}
    too_big = int(dtype.max) * 2  # a Python int: finite even past f64's range
    for value in (too_big, -too_big, float(too_big) if too_big < 2**1000 else too_big):
        with pytest.raises(TraceError, match=rf"overflows {dtype}: .*largest finite {dtype}"):
            trace(in_launch(lambda inner, i, args: args.dst.__setitem__(i, args.x[i] + value)), params)
    with pytest.raises(TraceError, match=rf"overflows {dtype}"):
        trace(in_launch(lambda inner, i, args: args.dst.__setitem__(i, inner.constant(too_big, dtype))), params)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_infinite_nan_and_largest_finite_constants_stay_legal(dtype):
    params = {"dst": dynamic_buffer(dtype), "x": dynamic_buffer(dtype)}
    for value in (float("-inf"), math.inf, math.nan, dtype.max, -dtype.max):
        graph = trace(in_launch(lambda inner, i, args: args.dst.__setitem__(i, args.x[i] + value)), params)
        (const,) = [op for op in graph.body.walk() if op.opcode == "const" and op.result.type == dtype]
        # the value rounded to the type (an infinity is NaN in a type without one, as E4M3FN)
        with np.errstate(all="ignore"):
            assert str(const.attrs["value"]) == str(float(np.asarray(value).astype(dtype.numpy)))


def test_a_constant_that_rounds_down_to_the_largest_finite_value_is_that_value():
    params = {"dst": dynamic_buffer(accy.f16), "x": dynamic_buffer(accy.f16)}
    graph = trace(in_launch(lambda inner, i, args: args.dst.__setitem__(i, args.x[i] + 65519.0)), params)
    assert "const 65504.0 : f16" in graph.text()


KERNEL_SOURCE = """
import accy
from accy import Program, axis, dynamic_buffer, f32

def body(k, args):
    def each(inner, idx):
        args.dst[idx["i"]] = idx["i"] & args.x[idx["i"]]  # the bad line
    k.for_each_1d(axis("i", 4), each)

try:
    Program("bad", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}, body).graph
except accy.AccyError as e:
    print(e.location.filename, e.location.lineno)
"""


def test_source_lines_of_exec_and_stdin_kernels_are_the_users():
    scope: dict = {}
    with pytest.raises(TraceError) as err:
        exec(compile(KERNEL_SOURCE.replace("try:", "if True:").replace("except accy.AccyError as e:", "if False:"),
                     "<my-notebook-cell>", "exec"), scope)
    assert err.value.location.filename == "<my-notebook-cell>" and err.value.location.lineno == 7
    out = subprocess.run([sys.executable, "-"], input=KERNEL_SOURCE, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["<stdin>", "7"], out.stdout + out.stderr


def test_compare_reports_the_users_line_not_accys():
    def each(inner, i, args):
        args.dst[i] = i & args.x[i]  # MARK-compare-line

    program = Program("bad", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}, in_launch(each))
    with pytest.raises(TraceError) as err:
        accy.compare(program, [np.zeros(4, np.float32), np.zeros(4, np.float32)])
    assert err.value.location.lineno == this_line_is("MARK-compare-line")
    assert "test_trace_errors.py" in err.value.location.filename


def test_numpy_functions_and_chained_conditions_say_what_to_write():
    with pytest.raises(TraceError, match=r"numpy\.where does not work on traced values; use inner\.select"):
        trace(in_launch(lambda inner, i, args: args.dst.__setitem__(i, np.where(args.x[i] > 0, 1.0, 0.0))))
    with pytest.raises(TraceError, match=r"numpy\.clip does not work on traced values; use inner\.min\(inner\.max"):
        trace(in_launch(lambda inner, i, args: args.dst.__setitem__(i, np.clip(args.x[i], 0, 1))))
    with pytest.raises(TraceError, match=r"combine conditions with \(a\) & \(b\).*split chained comparisons"):
        trace(in_launch(lambda inner, i, args: args.dst.__setitem__(i, inner.select(0 < i < 3, 1.0, 0.0))))


def test_a_numpy_scalar_init_keeps_its_type(backend):
    def each(inner, i, args):
        args.dst[i] = inner.fold_range(0, 3, 1, np.int32(1), lambda inner, j, acc: acc * 2)

    program = Program("doubling", {"dst": dynamic_buffer(i32)}, in_launch(each))
    dst = np.zeros(4, np.int32)
    program.run([dst], backend=backend)
    assert dst.tolist() == [8] * 4
    with pytest.raises(TraceError, match=r"init=0 is a Python int, so the accumulator is index; write "
                                         r"init=inner\.constant\(0, i32\)"):
        trace(in_launch(lambda inner, i, args: args.dst.__setitem__(
            i, inner.fold_range(0, 3, 1, 0, lambda inner, j, acc: inner.cast(acc, i32)))),
            {"dst": dynamic_buffer(i32), "x": dynamic_buffer(f32)})
