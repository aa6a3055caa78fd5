"""Bad input, tried on purpose: one table, each row with the exact error type and the
words its message must hold, run on every backend; plus concurrency and re-entrancy."""

import os
import sys
import threading

import numpy as np
import pytest

import accy
from accy import Program, axis, dynamic_buffer, f32, index
from accy.errors import (
    AccyError,
    ArgumentError,
    BackendUnavailableError,
    CompileError,
    ExecutionError,
    LaunchError,
    OutOfBoundsError,
    TraceError,
)
from accy.targets import Target
from accy.library.attention import ScaledDotProduct, Threads3D, scaled_dot_product_f32

SDPA = scaled_dot_product_f32(ScaledDotProduct(2, 2, 3, 2, 2, threads=Threads3D(2, 2, 1)))


def good():
    return [np.zeros((2, 2, 2), np.float32), np.ones((2, 2, 2), np.float32),
            np.ones((2, 3, 2), np.float32), np.ones((2, 3, 2), np.float32)]


def readonly_dst():
    args = good()
    args[0].flags.writeable = False
    return args


def aliased():
    shared = np.zeros(12, np.float32)
    return [shared[:8], np.ones(8, np.float32), shared, np.ones(12, np.float32)]


def _scatter(where):
    def body(k, args):
        k.for_each_1d(axis("i", 4), lambda inner, idx: args.dst.store(inner, 1.0, args.where[idx["i"]]))

    program = Program("scatter", {"dst": dynamic_buffer(f32), "where": dynamic_buffer(index)}, body)
    return program, [np.zeros(4, np.float32), np.array(where, np.int64)]


def _gather(where):
    def body(k, args):
        k.for_each_1d(axis("i", 4), lambda inner, idx: args.dst.store(inner, args.src[args.where[idx["i"]]], idx["i"]))

    program = Program("gather", {"dst": dynamic_buffer(f32), "src": dynamic_buffer(f32), "where": dynamic_buffer(index)}, body)
    return program, [np.zeros(4, np.float32), np.ones(3, np.float32), np.array(where, np.int64)]


def _cooperative(each, threads=64):
    """A block launch of 2 blocks of ``threads`` threads, ``each(inner, t, args)`` per thread."""
    params = {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32), "small": dynamic_buffer(accy.u8),
              "half": dynamic_buffer(accy.f16)}
    return Program("cooperative", params, lambda k, a: k.for_each_block(
        grid=axis("b", 2), threads=axis("t", threads), body=lambda inner, block, thread: each(inner, thread["t"], a)))


def _independent(each):
    """The same parameters in a for_each launch of 4 independent threads."""
    params = {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32), "small": dynamic_buffer(accy.u8),
              "half": dynamic_buffer(accy.f16)}
    return Program("independent", params, lambda k, a: k.for_each_1d(axis("i", 4), lambda inner, idx: each(inner, idx["i"], a)))


def _big_block(threads, shared_count):
    def each(inner, t, a):
        s = inner.shared(f32, shared_count, "big_tile")
        s[t % shared_count] = 1.0
        a.dst[t] = 1.0

    return _cooperative(each, threads), [np.zeros(2 * threads, np.float32), *(np.zeros(1, d) for d in (np.float32, np.uint8, np.float16))]


def _sized(t=accy.i32):
    """A kernel with a scalar of type ``t`` and a launch sized by a scalar(index)."""
    @accy.kernel(dst=dynamic_buffer(t), divisor=dynamic_buffer(t), a=accy.scalar(t), n=accy.scalar(index))
    def sized(k, args):
        @k.for_each_1d(axis("i", args.n))
        def each(inner, idx):
            i = idx["i"]
            args.dst[i] = args.a // args.divisor[i] + args.a % args.divisor[i]

    return sized


def _sized_args(a=1, n=4, divisor=(1, 2, 3, 4), t=np.int32):
    return [np.zeros(4, t), np.array(divisor, t), a, n]


# (id, callable(backend) that must raise, error type, regex the message must match)
RUN_TIME = [
    ("scalar-out-of-range", lambda be: _sized(accy.u8).run(_sized_args(300, t=np.uint8), backend=be), ArgumentError,
     r"argument 'a': 300 does not fit u8 \(0\.\.255\)"),
    ("scalar-wrong-dtype", lambda be: _sized().run(_sized_args(np.float32(1.5)), backend=be), ArgumentError,
     r"argument 'a': expected an integer \(i32\), got a float32 scalar"),
    ("scalar-an-array", lambda be: _sized().run(_sized_args(np.ones(2, np.int32)), backend=be), ArgumentError,
     r"argument 'a': expected a scalar \(i32\), got an array of shape \(2,\)"),
    ("buffer-a-scalar", lambda be: _sized().run([np.zeros(4, np.int32), 3, 1, 4], backend=be), ArgumentError,
     r"argument 'divisor': expected an array of i32, got the scalar 3"),
    ("runtime-extent-negative", lambda be: _sized().run(_sized_args(n=-1), backend=be), LaunchError,
     r"axis 'i' has extent -1 at run time"),
    ("runtime-extent-past-limits", lambda be: _sized().run(_sized_args(n=2**40), backend=be), LaunchError,
     r"grid x dimension 4294967296 exceeds the limit of 2147483647 blocks"),
    ("runtime-extent-past-buffer", lambda be: _sized().run(_sized_args(n=5), backend=be), OutOfBoundsError,
     r"load from 'divisor': index 4 is out of bounds for 4 elements \(thread i=4\)"),
    ("i32-division-by-zero", lambda be: _sized().run(_sized_args(divisor=(1, 0, 3, 4)), backend=be), ExecutionError,
     r"div: i32 division by zero in thread i=1"),
    ("u8-remainder-by-zero", lambda be: _sized(accy.u8).run(_sized_args(divisor=(1, 2, 3, 0), t=np.uint8), backend=be),
     ExecutionError, r"(div: u8 division|mod: u8 remainder) by zero in thread i=3"),
    ("argument-count", lambda be: SDPA.run(good()[:3], backend=be), ArgumentError,
     r"expected 4 arguments \(dst, query, key, value\), got 3"),
    ("dtype", lambda be: SDPA.run([good()[0].astype(np.float64), *good()[1:]], backend=be), ArgumentError,
     r"argument 'dst': expected dtype float32 \(f32\), got float64"),
    ("element-count", lambda be: SDPA.run([np.zeros(7, np.float32), *good()[1:]], backend=be), ArgumentError,
     r"argument 'dst': expected 8 elements \(b=2 q=2 v=2\), got 7"),
    ("non-contiguous", lambda be: SDPA.run([*good()[:3], np.ones((2, 3, 4), np.float32)[:, :, 1:3]], backend=be),
     ArgumentError, r"argument 'value' is not C-contiguous"),
    ("fortran-order", lambda be: SDPA.run([*good()[:3], np.asfortranarray(np.ones((2, 3, 2), np.float32))], backend=be),
     ArgumentError, r"argument 'value' is not C-contiguous"),
    ("read-only-output", lambda be: SDPA.run(readonly_dst(), backend=be), ArgumentError,
     r"argument 'dst' is read-only, but the kernel stores to it"),
    ("aliased-output", lambda be: SDPA.run(aliased(), backend=be), ArgumentError,
     r"argument 'dst' shares memory with argument 'key'"),
    ("not-an-array", lambda be: SDPA.run([*good()[:3], [1.0] * 12], backend=be), ArgumentError,
     r"argument 'value': expected an array \(.*\), got list"),
    ("store-out-of-bounds", lambda be: _scatter([0, 1, 2, 4])[0].run(_scatter([0, 1, 2, 4])[1], backend=be),
     OutOfBoundsError, r"store to 'dst': index 4 is out of bounds for 4 elements \(thread i=3\)"),
    ("load-negative-index", lambda be: _gather([0, -2, 1, 2])[0].run(_gather([0, -2, 1, 2])[1], backend=be),
     OutOfBoundsError, r"load from 'src': index -2 is out of bounds for 3 elements \(thread i=1\)"),
    ("block-over-limits", lambda be: scaled_dot_product_f32(ScaledDotProduct(1, 1, 1, 1, 1, threads=Threads3D(64, 32, 1)))
     .run([np.zeros(1, np.float32)] * 4, backend=be), LaunchError, r"2048 threads, over the limit of 1024"),
    ("grid-over-limits", lambda be: scaled_dot_product_f32(ScaledDotProduct(65536, 1, 1, 1, 1, threads=Threads3D(1, 1, 1)))
     .launch(), LaunchError, r"grid z dimension 65536 exceeds the limit of 65535 blocks"),
    ("unknown-backend", lambda be: SDPA.run(good(), backend="tpu"), BackendUnavailableError, r"unknown backend 'tpu'"),
    ("block-threads-over-limits", lambda be: _big_block(2048, 4)[0].run(_big_block(2048, 4)[1], backend=be),
     LaunchError, r"block \(2048, 1, 1\) has 2048 threads, over the limit of 1024"),
    ("shared-bytes-over-limits", lambda be: _big_block(32, 16384)[0].run(_big_block(32, 16384)[1], backend=be),
     LaunchError, r"shared arrays take 65536 bytes per block, over the limit of 49152 bytes \(big_tile\)"),
]


@pytest.mark.parametrize("make, error, message", [pytest.param(*row[1:], id=row[0]) for row in RUN_TIME])
def test_bad_run_time_input(make, error, message, backend):
    with pytest.raises(error, match=message):
        make(backend)


def test_nothing_is_written_when_a_launch_fails(backend):
    program, (dst, where) = _scatter([0, 1, 2, 9])
    dst[:] = 5.0
    with pytest.raises(OutOfBoundsError):
        program.run([dst, where], backend=backend)
    assert (dst == 5.0).all()


def test_nan_and_inf_inputs_propagate_and_never_crash(backend):
    args = good()
    args[1][0, 0, 0] = np.nan
    args[2][1, 2, 1] = np.inf
    args[3][1, 0, 0] = -np.inf
    SDPA.run(args, backend=backend)
    assert np.isnan(args[0][0, 0]).all() and np.isfinite(args[0][0, 1]).all()
    assert not np.isfinite(args[0][1]).all()


def test_zero_sized_extents(backend):
    def body(k, args):
        k.for_each_2d(x=axis("i", 0), y=axis("j", 5), body=lambda inner, idx: args.dst.store(inner, 1.0, idx["j"]))

    Program("empty2d", {"dst": dynamic_buffer(f32)}, body).run([np.zeros(0, np.float32)], backend=backend)


TRACE_TIME = [
    ("extent-overflows-i64", lambda: axis("i", 2**63), TraceError, r"outside the index range"),
    ("extents-product-overflows", lambda: Program("big", {}, lambda k, a: k.for_each_3d(
        x=axis("x", 2**21), y=axis("y", 2**21), z=axis("z", 2**21), body=lambda inner, idx: None)).traced_graph,
     TraceError, r"overflows the index range"),
    ("python-if-on-traced-value", lambda: Program("branchy", {"x": dynamic_buffer(f32)}, lambda k, a: k.for_each_1d(
        axis("i", 2), lambda inner, idx: 1 if a.x[idx["i"]] > 0.0 else 0)).traced_graph,
     TraceError, r"Use select\(cond, a, b\) .* fold_range"),
    ("python-loop-over-traced-value", lambda: Program("loopy", {}, lambda k, a: k.for_each_1d(
        axis("i", 2), lambda inner, idx: [j for j in range(idx["i"])])).traced_graph,
     TraceError, r"cannot be used as a Python int index"),
    ("bad-arch", lambda: Target.nvptx("compute_80"), CompileError, r"arch must be an NVPTX processor LLVM knows \(.*sm_80"),
    # the right form, but no processor LLVM knows (it would compile for its default without a word)
    ("unknown-arch", lambda: Target.nvptx("sm_7"), CompileError, r"arch must be an NVPTX processor .* got 'sm_7'"),
    # the block level: each names the user's line (checked below)
    ("shared-inside-a-loop", lambda: _cooperative(lambda inner, t, a: inner.fold_range(
        0, 3, 1, 0.0, lambda inner, j, acc: (inner.shared(f32, 4), acc)[1])).traced_graph,
     TraceError, r"shared: shared arrays are allocated at the top of the block body, not inside a loop or branch"),
    ("shared-inside-a-branch", lambda: _cooperative(lambda inner, t, a: inner.if_(
        a.x[0] > 0, lambda inner: inner.shared(f32, 4))).traced_graph,
     TraceError, r"shared: shared arrays are allocated at the top of the block body, not inside a loop or branch"),
    ("shared-outside-a-block", lambda: _independent(lambda inner, i, a: inner.shared(f32, 4)).traced_graph,
     TraceError, r"shared: only inside a for_each_block body"),
    ("barrier-under-a-thread-condition", lambda: _cooperative(lambda inner, t, a: inner.if_(
        t < 3, lambda inner: inner.barrier())).traced_graph,
     TraceError, r"barrier inside an if_ whose condition depends on the thread \(at test_bad_inputs\.py:\d+"),
    ("barrier-under-a-loaded-condition", lambda: _cooperative(lambda inner, t, a: inner.if_(
        a.x[t] > 0, lambda inner: inner.barrier())).traced_graph,
     TraceError, r"barrier inside an if_ whose condition depends on the thread"),
    ("barrier-in-a-thread-dependent-loop", lambda: _cooperative(lambda inner, t, a: inner.fold_range(
        0, t, 1, 0.0, lambda inner, j, acc: (inner.barrier(), acc)[1])).traced_graph,
     TraceError, r"barrier inside a fold_range whose bounds depend on the thread"),
    ("barrier-outside-a-block", lambda: _independent(lambda inner, i, a: inner.barrier()).traced_graph,
     TraceError, r"barrier: only inside a for_each_block body"),
    ("atomic-on-u8", lambda: _independent(lambda inner, i, a: inner.atomic_add(a.small, i, 1)).traced_graph,
     TraceError, r"atomic\(index, u8\): atomic_add on u8 is not supported; it takes i32, i64, u32, u64, index"),
    ("atomic-max-on-f16", lambda: _independent(lambda inner, i, a: inner.atomic_max(a.half, i, 1.0)).traced_graph,
     TraceError, r"atomic_max on f16 is not supported"),
    ("shuffle-in-a-partial-warp-block", lambda: _cooperative(lambda inner, t, a: inner.shuffle(a.x[t], 1), 48).traced_graph,
     TraceError, r"shuffle: warp operations need blocks of a multiple of 32 threads .* this block has 48"),
    ("block-reduce-unknown-op", lambda: _cooperative(lambda inner, t, a: inner.block_reduce(a.x[t], "mean")).traced_graph,
     TraceError, r"block_reduce: op must be 'sum', 'max' or 'min'"),
    ("thread-axis-run-time-extent", lambda: Program("runtime_block", {"x": dynamic_buffer(f32)}, lambda k, a: k.for_each_block(
        grid=axis("b", 2), threads=axis("t", a.x.size), body=lambda *args: None)).traced_graph,
     TraceError, r"thread axis 't' has a run-time extent; the block shape is fixed when the kernel is traced"),
]


@pytest.mark.parametrize("make, error, message", [pytest.param(*row[1:], id=row[0]) for row in TRACE_TIME])
def test_bad_program(make, error, message):
    with pytest.raises(error, match=message) as err:
        make()
    if error is TraceError and "(at " in str(err.value):
        assert "test_bad_inputs.py" in str(err.value)  # the user's line, not accy's


def test_kernel_body_that_raises_keeps_its_error_and_names_the_kernel():
    def body(k, args):
        raise ZeroDivisionError("the user's own bug")

    with pytest.raises(ZeroDivisionError, match="the user's own bug") as err:
        Program("raiser", {}, body).traced_graph
    assert "kernel 'raiser'" in " ".join(err.value.__notes__)


def test_index_division_by_zero(backend):
    def body(k, args):
        k.for_each_1d(axis("i", 3), lambda inner, idx: args.dst.store(inner, 10 // (idx["i"] - 1), idx["i"]))

    with pytest.raises(ExecutionError, match=r"division by zero in thread i=1"):
        Program("divz", {"dst": dynamic_buffer(index)}, body).run([np.zeros(3, np.int64)], backend=backend)


def test_every_error_derives_from_one_base():
    for error in (ArgumentError, BackendUnavailableError, CompileError, ExecutionError, LaunchError,
                  OutOfBoundsError, TraceError, accy.errors.VerificationError):
        assert issubclass(error, AccyError)
    assert set(accy.errors.__all__) >= {"AccyError", "TraceError", "ArgumentError", "OutOfBoundsError"}


@pytest.mark.parametrize("backend_name", ["numpy", "llvm"])
def test_one_entry_from_many_threads(backend_name):
    """Concurrent first use (trace + compile) and concurrent runs give correct results."""
    entry = scaled_dot_product_f32(ScaledDotProduct(3, 5, 7, 4, 6, threads=Threads3D(3, 3, 1)))
    rng = np.random.default_rng(11)
    jobs = []
    for _ in range(8):
        q, k, v = (rng.standard_normal(s, dtype=np.float32) for s in ((3, 5, 4), (3, 7, 4), (3, 7, 6)))
        jobs.append((q, k, v, np.zeros((3, 5, 6), np.float32)))
    errors = []
    barrier = threading.Barrier(len(jobs))

    def work(job):
        try:
            barrier.wait()
            for _ in range(3):
                entry.run([job[3], *job[:3]], backend=backend_name)
        except Exception as e:  # collected and re-raised below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    from accy.library.attention import reference

    for q, k, v, dst in jobs:
        np.testing.assert_allclose(dst, reference(q, k, v), rtol=1e-5, atol=1e-6)


def test_tracing_is_reentrant():
    """A kernel body may trace (or run) another kernel while it is being traced."""
    inner_program = Program("inner", {"dst": dynamic_buffer(f32)},
                            lambda k, a: k.for_each_1d(axis("i", 2), lambda inner, idx: a.dst.store(inner, 3.0, idx["i"])))

    def outer_body(k, args):
        def each(inner, idx):
            inner_dst = np.zeros(2, np.float32)
            inner_program.run([inner_dst])  # traces and runs while outer is tracing
            args.dst[idx["i"]] = float(inner_dst.sum())

        k.for_each_1d(axis("i", 3), each)

    dst = np.zeros(3, np.float32)
    Program("outer", {"dst": dynamic_buffer(f32)}, outer_body).run([dst])
    assert dst.tolist() == [6.0, 6.0, 6.0]


def test_corrupt_cache_entry_rebuilds_with_warning(tmp_path, monkeypatch):
    from accy.codegen.machine import emit_ptx
    from accy.targets import Target

    monkeypatch.setenv("ACCY_CACHE_DIR", str(tmp_path))
    ptx = emit_ptx(SDPA.program.graph, Target.nvptx(), SDPA.launch().block)
    for entry_file in tmp_path.rglob("*"):
        if entry_file.is_file():
            entry_file.write_bytes(b"\x00\xff broken")
    with pytest.warns(RuntimeWarning, match="corrupt; rebuilding"):
        assert emit_ptx(SDPA.program.graph, Target.nvptx(), SDPA.launch().block) == ptx


def test_unusable_cache_directory_runs_without_cache(tmp_path, monkeypatch):
    from accy.codegen.machine import emit_ptx
    from accy.targets import Target

    not_a_dir = tmp_path / "cache"
    not_a_dir.write_text("")
    monkeypatch.setenv("ACCY_CACHE_DIR", str(not_a_dir))
    with pytest.warns(RuntimeWarning, match="running without the cache"):
        assert ".entry" in emit_ptx(SDPA.program.graph, Target.nvptx("sm_90"), SDPA.launch().block)


# -- issue 17 §5: what an adversarial trial broke --------------------------------------------------

def _line_of(err) -> str:
    """The ``file:line`` an error names (the user's line of code)."""
    location = err.value.location
    assert location is not None, str(err.value)
    return f"{os.path.basename(location.filename)}:{location.lineno}"


def _here(offset: int = 0) -> str:
    frame = sys._getframe(1)
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno + offset}"


def test_a_misspelt_parameter_names_the_users_line():
    def body(k, args):
        k.for_each_1d(axis("i", 4), lambda inner, idx: args.dts.store(inner, 1.0, idx["i"]))
        # the line above is the user's

    where = _here(-3)
    with pytest.raises(TraceError, match=r"no parameter named 'dts'; parameters are dst") as err:
        Program("typo", {"dst": dynamic_buffer(f32)}, body).traced_graph
    assert _line_of(err) == where and f"at {where}" in str(err.value)


def test_a_bad_program_name_names_the_users_line():
    with pytest.raises(TraceError, match=r"program name must be an identifier .* got 'bad name'") as err:
        Program("bad name", {}, lambda k, a: None)
    assert _line_of(err) == _here(-1)
    with pytest.raises(TraceError, match=r"program name must be an identifier .* got 'bad-name'") as err:
        accy.kernel("bad-name")(lambda k, a: None)
    assert _line_of(err) == _here(-1)


@pytest.mark.parametrize("name", ["param", "__class__", "_handles"])
def test_a_parameter_named_like_the_arguments_own_attribute_is_refused_at_creation(name):
    with pytest.raises(TraceError, match=rf"parameter name '{name}' is taken: args\.{name} is the kernel "
                                         r"arguments' own (method|attribute); rename the parameter") as err:
        Program("taken", {name: dynamic_buffer(f32)}, lambda k, a: None)
    assert _line_of(err) == _here(-1)


def test_a_parameter_with_a_leading_underscore_is_found_by_attribute(backend):
    program = Program("private", {"_dst": dynamic_buffer(f32)}, lambda k, a: k.for_each_1d(
        axis("i", 4), lambda inner, idx: a._dst.store(inner, 2.0, idx["i"])))
    dst = np.zeros(4, np.float32)
    program.run([dst], backend=backend)
    assert (dst == 2.0).all()


def _forever(inner, x):
    return _forever(inner, x * 2.0)  # no Python-level end


def test_a_recursive_helper_is_a_trace_error_naming_its_line():
    program = Program("recursive", {"dst": dynamic_buffer(f32)}, lambda k, a: k.for_each_1d(
        axis("i", 4), lambda inner, idx: a.dst.store(inner, _forever(inner, a.dst[idx["i"]]), idx["i"])))
    with pytest.raises(TraceError, match=r"kernel 'recursive': the body recursed past Python's limit") as err:
        program.traced_graph
    assert _line_of(err).startswith("test_bad_inputs.py:")
    assert "return _forever(inner, x * 2.0)" in str(err.value)
    assert not isinstance(err.value, RecursionError)


def test_a_body_reading_its_own_graph_is_a_trace_error_naming_the_line():
    def body(k, args):
        program.graph  # the program being traced
        k.for_each_1d(axis("i", 4), lambda inner, idx: args.dst.store(inner, 1.0, idx["i"]))

    program = Program("selfish", {"dst": dynamic_buffer(f32)}, body)
    where = _here(-4)
    with pytest.raises(TraceError, match=r"kernel 'selfish': its body uses its own program's graph") as err:
        program.graph
    assert _line_of(err) == where
    with pytest.raises(TraceError, match=r"its body uses its own program's graph"):
        program.run([np.zeros(4, np.float32)], backend="llvm")  # tried again: the same error, no hang


def _fill():
    return Program("fill", {"dst": dynamic_buffer(f32)}, lambda k, a: k.for_each_1d(
        axis("i", a.dst.size), lambda inner, idx: a.dst.store(inner, 1.0, idx["i"])))


# (backend, options, the words of the error): each option checked against what it takes
BAD_OPTIONS = [
    ("llvm", {"threads": [2]}, r"option threads=\[2\]: threads takes None \(as many as pay, up to one per core\) "
                               r"or a whole number >= 1"),
    ("llvm", {"threads": "2"}, r"option threads='2': threads takes None"),
    ("llvm", {"threads": 2.5}, r"option threads=2\.5: threads takes"),
    ("llvm", {"threads": 2.0}, r"option threads=2\.0: threads takes"),
    ("llvm", {"threads": 0}, r"option threads=0: threads takes"),
    ("llvm", {"threads": True}, r"option threads=True: threads takes"),
    ("llvm", {"checks": "no"}, r"backend 'llvm': option checks='no': checks takes True or False"),
    ("llvm", {"checks": 1}, r"option checks=1: checks takes True or False"),
    ("llvm", {"vector_width": 3}, r"option vector_width=3: vector_width takes one of 0, 2, 4, 8, 16, 32, 64"),
    ("numpy", {"memory_cap": -1}, r"backend 'numpy': option memory_cap=-1: memory_cap takes a whole number of bytes"),
    ("numpy", {"check_memory": "yes"}, r"option check_memory='yes': check_memory takes True, False or None"),
    ("numpy", {"debug_cap": 0}, r"option debug_cap=0: debug_cap takes a whole number >= 1"),
    ("numpy", {"debug_thread": [1]}, r"option debug_thread=\[1\]: debug_thread takes None or a dict"),
    ("ptx", {"fast_math": "yes"}, r"backend 'ptx': option fast_math='yes': fast_math takes True or False"),
    ("ptx", {"arch": "sm_7"}, r"option arch='sm_7': arch takes an NVPTX processor LLVM knows: sm_\d+.*sm_80, .*sm_90a"),
    ("ptx", {"arch": 80}, r"option arch=80: arch takes an NVPTX processor LLVM knows"),
    ("ptx", {"arch": "compute_80"}, r"option arch='compute_80': arch takes"),
    ("llvm", {"limits": "big"}, r"limits='big': limits takes None \(CUDA's\) or an accy\.Limits .* got str"),
    ("numpy", {"limits": "big"}, r"limits='big': limits takes None"),
    ("ptx", {"limits": 1024}, r"limits=1024: limits takes None"),
    ("llvm", {"nope": 1}, r"backend 'llvm' takes no option 'nope'; its options are checks, threads, vector_width"),
]


@pytest.mark.parametrize("backend_name, options, message", [pytest.param(*row, id=f"{row[0]}-{row[1]}")
                                                          for row in BAD_OPTIONS])
def test_launch_options_are_checked(backend_name, options, message):
    program = _fill()
    dst = np.zeros(8, np.float32)
    with pytest.raises(ArgumentError, match=message):
        program.run([dst], backend=backend_name, **options)
    with pytest.raises(ArgumentError, match=message):  # the general path (counts given) checks them the same
        accy.runtime.run(program, [dst], backend=backend_name, counts={}, **options)
    assert (dst == 0).all()


def test_an_option_value_equal_to_a_taken_one_is_still_checked():
    """2.0 == 2 and 1 == True hash alike: a launcher made for threads=2 must not serve threads=2.0."""
    program, dst = _fill(), np.zeros(8, np.float32)
    program.run([dst], backend="llvm", threads=2, checks=True)
    with pytest.raises(ArgumentError, match=r"option threads=2\.0"):
        program.run([dst], backend="llvm", threads=2.0, checks=True)
    with pytest.raises(ArgumentError, match=r"option checks=1"):
        program.run([dst], backend="llvm", threads=2, checks=1)


def test_options_that_are_taken_run():
    program = _fill()
    for backend_name, options in [("llvm", {"threads": np.int64(2), "checks": np.bool_(False), "vector_width": 4}),
                                  ("llvm", {"threads": None}), ("numpy", {"memory_cap": 1 << 20, "check_memory": None}),
                                  ("ptx", {"arch": "sm_90a", "fast_math": True}), ("ptx", {"arch": "sm_75"})]:
        dst = np.zeros(8, np.float32)
        program.run([dst], backend=backend_name, limits=accy.Limits.default, **options)
        assert (dst == 1.0).all(), (backend_name, options)


def test_every_backend_option_has_a_check():
    from accy.runtime.contract import OPTIONS, Backend

    for name in accy.runtime.BACKENDS:
        backend = accy.runtime.get_backend(name)
        assert all(option is OPTIONS[option.name] for option in backend.options), name
    with pytest.raises(TypeError, match=r"no option colour in accy.runtime.contract.OPTIONS"):
        Backend("toy", frozenset({"colour"}), lambda *a: None)


# barriers only part of a block reaches, written as text (the builder refuses them): every backend
_PARTIAL = """
kernel @partial(%dst: buffer<f32, ?>) {
  %0 = const 2 : index
  %1 = const 16 : index
  %2 = const 1.0 : f32
  %3 = const 0 : index
  %4 = const 1 : index
  for_each_block (%5 = b<%0>) threads (%6 = t<32>) {
    %7 = lt %6, %1 : bool
    GUARDED
    %9 = const 32 : index
    %10 = mul %5, %9 : index
    %11 = add %10, %6 : index
    store %dst[%11] = %2 : f32
  }
}
"""
_UNDER_AN_IF = """if %7 {
      barrier
      yield
    }"""
_IN_A_LOOP = """%8 = fold %3 to %6 step 1 init(%2) -> (f32) {
    ^(%12: index, %13: f32):
      barrier
      yield %13
    }"""


@pytest.mark.parametrize("guarded", [_UNDER_AN_IF, _IN_A_LOOP], ids=["if", "fold"])
def test_a_barrier_only_part_of_a_block_reaches_is_refused_by_every_backend(guarded, backend):
    from accy.runtime import bind_arguments, get_backend, resolve_launch
    from accy.emulator import PtxBarrierError
    from accy.errors import BarrierError

    graph = accy.parse(_PARTIAL.replace("GUARDED", guarded))
    dst = np.zeros(64, np.float32)
    binding = bind_arguments(graph, [dst])
    launch = resolve_launch(graph, accy.ThreadBlocks(32), binding, None)
    expected = {"llvm": r"barrier inside (an if_ whose condition|a fold_range whose bounds) depends? on the thread: "
                        r"not every thread of the block would reach it",
                "numpy": r"barrier reached by thread t=\d+ b=0 but not by thread t=\d+ b=0 of the same block"}
    with pytest.raises((BarrierError, PtxBarrierError), match=expected.get(backend, "barrier")):
        get_backend(backend).execute(graph, binding, launch)
    assert (dst == 0).all()


@pytest.mark.parametrize("guarded", [_UNDER_AN_IF, _IN_A_LOOP], ids=["if", "fold"])
def test_the_nvptx_lowering_refuses_a_partial_barrier_before_any_gpu_sees_it(guarded):
    # the cuda backend compiles this PTX: on a GPU the kernel would hang, so it is never emitted
    from accy.codegen.machine import emit_ptx
    from accy.errors import BarrierError

    graph = accy.parse(_PARTIAL.replace("GUARDED", guarded))
    with pytest.raises(BarrierError, match=r"barrier inside .* on the thread: not every thread of the block would "
                                           r"reach it \(on a GPU this hangs"):
        emit_ptx(graph, Target.nvptx("sm_80"), (32, 1, 1), use_cache=False)
