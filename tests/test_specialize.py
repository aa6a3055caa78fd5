"""Specialising on values from the call: ``constexpr(...)`` parameters and ``specialize=``.

A constexpr's value reaches the body as a Python value, so it may size tiles and unroll
loops; each distinct value is traced once, into a graph of its own, and every cache keyed by
the graph (compiled code, stored graphs, autotune records) keeps the values apart."""

import numpy as np
import pytest

import accy
from accy import axis, cdiv, constexpr, f32, i32, index, kernel, scalar, tensor
from accy import graph_store
from accy.codegen import machine as codegen
from accy.errors import ArgumentError, AutotuneError, TraceError
from accy.graph_store import name_body
from accy.trace_cache import TRACED


def max_pool_kernel():
    """dst[i] = max(x[i * stride : i * stride + window]), a program per BLOCK outputs: window,
    stride and BLOCK come from the call."""

    @kernel(dst=tensor(f32, 1), x=tensor(f32, 1), window=constexpr(int), stride=constexpr(int),
            BLOCK=constexpr(int))
    def max_pool(k, p):
        (n,) = p.dst.shape

        @k.for_each_tile(grid=axis("i", cdiv(n, p.BLOCK)))
        def program(t, pid):
            i = pid["i"] * p.BLOCK + t.arange(p.BLOCK)
            inside = i < n
            best = p.x.load(i * p.stride, mask=inside, other=float("-inf"))
            for w in range(1, p.window):  # unrolled: window is a Python int
                best = t.maximum(best, p.x.load(i * p.stride + w, mask=inside, other=float("-inf")))
            p.dst.store(i, best, mask=inside)

    return max_pool


MAX_POOL = max_pool_kernel()


def pooled(x: np.ndarray, window: int, stride: int) -> np.ndarray:
    return np.lib.stride_tricks.sliding_window_view(x, window)[::stride].max(axis=1)


@pytest.mark.parametrize("window, stride, block", [(3, 2, 16), (2, 2, 32), (5, 1, 16), (1, 3, 8)])
def test_max_pool_with_window_and_stride_from_the_call(backend, rng, window, stride, block):
    x = rng.standard_normal(77).astype(np.float32)
    expected = pooled(x, window, stride)
    dst = np.zeros_like(expected)
    MAX_POOL.run([dst, x, window, stride, block], backend=backend)
    np.testing.assert_array_equal(dst, expected)
    by_name = np.zeros_like(expected)
    MAX_POOL.run(dict(x=x, BLOCK=block, dst=by_name, stride=stride, window=window), backend=backend)
    np.testing.assert_array_equal(by_name, expected)


def test_each_value_is_traced_once(monkeypatch):
    monkeypatch.setenv("ACCY_TRACE_CACHE", "0")  # no process-wide cache: the program's own memory alone
    pool = max_pool_kernel()
    x = np.arange(40, dtype=np.float32)
    before = TRACED.traces
    for window in (2, 3, 2, 3, 2):
        dst = np.zeros(len(pooled(x, window, 2)), np.float32)
        pool.run([dst, x, window, 2, 16])
        np.testing.assert_array_equal(dst, pooled(x, window, 2))
    assert TRACED.traces - before == 2  # one per window
    assert pool.specialized(window=2, stride=2, BLOCK=16) is pool.specialized(BLOCK=16, stride=2, window=2)
    assert pool.specialized(window=2, stride=np.int64(2), BLOCK=16) is pool.specialized(window=2, stride=2, BLOCK=16)


def test_the_trace_cache_keys_the_values():
    def program(window):
        return max_pool_kernel().specialized(window=window, stride=1, BLOCK=8)  # a fresh Program each time

    assert program(2).traced_graph is program(2).traced_graph
    assert program(2).traced_graph is not program(4).traced_graph
    assert program(2).graph.text() != program(4).graph.text()


def test_specialized_binds_some_or_all_and_runs_without_them():
    window3 = MAX_POOL.specialized(window=3)
    assert [p.name for p in window3.call_order] == ["dst", "x", "stride", "BLOCK"]
    program = window3.specialized(stride=2, BLOCK=16)
    assert program.constexprs == () and dict(program.constants) == dict(window=3, stride=2, BLOCK=16)
    assert program.name == "max_pool"  # the GPU entry point keeps the kernel's name
    assert "kernel @max_pool(" in program.graph.text()
    x = np.linspace(-1, 1, 21, dtype=np.float32)
    dst = np.zeros(len(pooled(x, 3, 2)), np.float32)
    program.run([dst, x])
    np.testing.assert_array_equal(dst, pooled(x, 3, 2))
    assert program.ptx().count(".entry max_pool") == 1
    assert program.graph.text() != MAX_POOL.specialized(window=2, stride=2, BLOCK=16).graph.text()


def test_a_graph_needs_the_values():
    for what in ("graph", "traced_graph"):
        with pytest.raises(TraceError, match=r"its graph|its traced_graph") as e:
            getattr(MAX_POOL, what)
        assert "window, stride, BLOCK" in str(e.value) and "max_pool.specialized(window=..., stride=..., BLOCK=...)" \
            in str(e.value)
    with pytest.raises(TraceError, match="stride, BLOCK"):
        MAX_POOL.specialized(window=3).ptx()


@pytest.mark.parametrize("value, got", [
    (3.0, "float 3.0"), (True, "bool True"), ("3", "str '3'"), (np.array(3), "NumPy array of shape ()"),
    (np.arange(3), "NumPy array of shape (3,)"), (None, "a NoneType"), (np.float32(2.5), "float 2.5"),
])
def test_a_bad_value_names_the_parameter(value, got):
    x = np.zeros(20, np.float32)
    with pytest.raises(ArgumentError, match=r"argument 'window': expected an int \(constexpr\(int\)\), got ") as e:
        MAX_POOL.run([np.zeros(5, np.float32), x, value, 2, 16])
    assert got in str(e.value)
    with pytest.raises(ArgumentError, match="argument 'window'"):
        MAX_POOL.specialized(window=value)


def test_bool_and_float_constexprs():
    @kernel(dst=tensor(f32, 1), x=tensor(f32, 1), scale=constexpr(float), negate=constexpr(bool))
    def affine(k, p):
        (n,) = p.x.shape
        assert isinstance(p.scale, float) and isinstance(p.negate, bool)

        @k.for_each_tile(grid=axis("i", cdiv(n, 32)))
        def program(t, pid):
            y = p.x.load_tile((pid["i"] * 32,), (32,)) * p.scale
            p.dst.store_tile((pid["i"] * 32,), -y if p.negate else y)

    x = np.arange(40, dtype=np.float32)
    for scale, negate in ((2, False), (0.5, True)):  # an int is taken as the float it is
        dst = np.zeros_like(x)
        affine.run([dst, x, scale, negate])
        np.testing.assert_array_equal(dst, (-1 if negate else 1) * x * np.float32(scale))
    assert affine.specialized(scale=-0.0) is not affine.specialized(scale=0.0)  # values apart by repr
    assert affine.specialized(scale=float("nan")) is affine.specialized(scale=float("nan"))
    with pytest.raises(ArgumentError, match=r"argument 'negate': expected True or False \(constexpr\(bool\)\), got int 1"):
        affine.specialized(negate=1)
    with pytest.raises(ArgumentError, match=r"argument 'scale': expected a float \(constexpr\(float\)\), got bool"):
        affine.specialized(scale=False)


def test_a_traced_value_is_no_constexpr():
    @kernel(dst=tensor(f32, 1), n=scalar(index))
    def outer(k, p):
        MAX_POOL.specialized(window=p.n)

    with pytest.raises(ArgumentError, match=r"argument 'window': expected an int .*got a traced value \(Traced\)"):
        outer.graph


def test_arguments_missing_unknown_or_too_many():
    dst, x = np.zeros(5, np.float32), np.zeros(20, np.float32)
    with pytest.raises(ArgumentError, match=r"missing 'window'.*parameters are \(dst, x, window, stride, BLOCK\)"):
        MAX_POOL.run(dict(dst=dst, x=x, stride=2, BLOCK=16))
    with pytest.raises(ArgumentError, match=r"expected 5 arguments \(dst, x, window, stride, BLOCK\), got 4"):
        MAX_POOL.run([dst, x, 3, 2])
    with pytest.raises(ArgumentError, match=r"max_pool.specialized: no constexpr parameter 'size' \(its constexpr "
                                            r"parameters: stride, BLOCK; bound already: window=3\)"):
        MAX_POOL.specialized(window=3).specialized(size=2)
    with pytest.raises(ArgumentError, match=r"parameters are \(dst, x\)"):  # bound: a run of it takes the rest
        MAX_POOL.specialized(window=3, stride=2, BLOCK=16).run(dict(dst=dst, x=x, window=3))


def test_declaration_errors():
    with pytest.raises(TraceError, match="constexpr: expected int, bool or float"):
        constexpr(str)
    with pytest.raises(TraceError, match=r"specialize= names 'm', which is not a scalar parameter \(the scalars: n\)"):
        kernel(x=tensor(f32, 1), n=scalar(i32), specialize=("m",))
    with pytest.raises(TraceError, match="specialize= names 'x', which is not a scalar"):
        kernel(x=tensor(f32, 1), n=scalar(i32), specialize=("x",))
    with pytest.raises(TraceError, match=r"specialize= names 'a', a scalar\(f32\); only integer and boolean"):
        kernel(x=tensor(f32, 1), a=scalar(f32), specialize=("a",))
    with pytest.raises(TraceError, match="specialize= takes a tuple of scalar parameter names, got 'n'"):
        kernel(x=tensor(f32, 1), n=scalar(i32), specialize="n")
    with pytest.raises(TraceError, match="parameter name 'param' is taken"):
        kernel(x=tensor(f32, 1), param=constexpr(int))
    with pytest.raises(TraceError, match="parameter 'w': a constexpr parameter is declared with @accy.kernel"):
        accy.Program("p", {"x": tensor(f32, 1), "w": constexpr(int)}, lambda k, p: None)
    with pytest.raises(TraceError, match="program 'p': 'window' is declared twice"):
        accy.Program("p", MAX_POOL.parameters, MAX_POOL.body, constexprs=MAX_POOL.constexprs[:1] * 2)


def specialised_scalar_kernel():
    @kernel(dst=tensor(f32, 1), x=tensor(f32, 1), n=scalar(i32), specialize=("n",))
    def repeat_sum(k, p):
        """dst[i] = x[i] * n, as n additions unrolled."""
        (size,) = p.x.shape
        assert type(p.n) is int  # a Python int, checked against i32's range

        @k.for_each_tile(grid=axis("i", cdiv(size, 32)))
        def program(t, pid):
            x = p.x.load_tile((pid["i"] * 32,), (32,))
            total = t.zeros((32,), f32)
            for _ in range(p.n):
                total = total + x
            p.dst.store_tile((pid["i"] * 32,), total)

    return repeat_sum


def test_specialize_turns_an_integer_scalar_into_a_constexpr(backend):
    repeat_sum = specialised_scalar_kernel()
    assert [p.name for p in repeat_sum.call_order] == ["dst", "x", "n"]
    assert [p.name for p in repeat_sum.parameters if p.is_scalar and p.name == "n"] == []  # not a graph parameter
    x = np.arange(50, dtype=np.float32)
    for n in (0, 3):
        dst = np.full_like(x, np.nan)
        repeat_sum.run([dst, x, n], backend=backend)
        np.testing.assert_array_equal(dst, x * n)


def test_a_specialised_scalar_keeps_its_type_and_range_check():
    repeat_sum = specialised_scalar_kernel()
    args = [np.zeros(4, np.float32), np.zeros(4, np.float32)]
    with pytest.raises(ArgumentError, match=r"argument 'n': 2147483648 does not fit i32 \(-2147483648\.\.2147483647\)"):
        repeat_sum.run(args + [2**31])
    with pytest.raises(ArgumentError, match=r"argument 'n': expected an int \(specialised scalar\(i32\)\), got float 2.0"):
        repeat_sum.run(args + [2.0])
    with pytest.raises(ArgumentError, match="got bool True"):
        repeat_sum.run(args + [True])
    repeat_sum.run(args + [np.int32(2)])  # a NumPy integer is its value


def test_compiled_code_on_disk_is_keyed_per_value(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCY_CACHE_DIR", str(tmp_path))
    pool = max_pool_kernel()
    for window in (2, 3, 2):
        pool.specialized(window=window, stride=2, BLOCK=16).ptx()
    entries = sorted(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert len(entries) == 2  # the two graphs' PTX; the third emit was a hit
    assert sum(b"max_pool" in e for e in entries) == 2


def named_pool():
    """A Program whose body is named as accy's library names its own (its graph kept on disk)."""
    def body(k, p):
        MAX_POOL.body(k, p)

    name_body(body, named_pool)
    params, constexprs = MAX_POOL.parameters, MAX_POOL.constexprs
    return accy.Program("max_pool", params, body, constexprs=constexprs)


def test_a_stored_graph_is_keyed_per_value(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCY_CACHE_DIR", str(tmp_path))
    before = dict(graph_store.counts)
    texts = {w: named_pool().specialized(window=w, stride=1, BLOCK=8).graph.text() for w in (2, 3)}
    assert graph_store.counts["stored"] == before["stored"] + 2 and texts[2] != texts[3]
    monkeypatch.setenv("ACCY_TRACE_CACHE", "0")  # as a later process: read back from the disk
    for w in (3, 2):
        assert named_pool().specialized(window=w, stride=1, BLOCK=8).graph.text() == texts[w]
    assert graph_store.counts["loaded"] == before["loaded"] + 2


def tuned_pool():
    @accy.autotune(configs=[dict(BLOCK=16), dict(BLOCK=32)], key=())
    @kernel(dst=tensor(f32, 1), x=tensor(f32, 1), window=constexpr(int), stride=constexpr(int),
            BLOCK=constexpr(int))
    def max_pool(k, p):
        MAX_POOL.body(k, p)

    return max_pool


def test_autotune_binds_constexprs_from_configs_and_keys_on_the_others(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCY_CACHE_DIR", str(tmp_path))
    max_pool = tuned_pool()
    assert [p.name for p in max_pool.call_order] == ["dst", "x", "window", "stride"]
    assert max_pool.key == ("window", "stride")  # a constexpr no config sets always keys the choice
    x = np.random.default_rng(3).standard_normal(60).astype(np.float32)

    def args(window):
        return [np.zeros(len(pooled(x, window, 3)), np.float32), x, window, 3]

    for window in (2, 4):
        run = args(window)
        max_pool.run(run, backend="llvm")
        np.testing.assert_array_equal(run[0], pooled(x, window, 3))
        record = max_pool.tuning_log(run, backend="llvm")
        assert record.key == dict(window=str(window), stride="3") and not record.from_store
    again = tuned_pool()  # as a later process: the records on disk, one per window
    assert again.tuning_log(args(4), backend="llvm").from_store
    assert again.tuning_log(args(2), backend="llvm").from_store
    assert not again.tuning_log(args(5), backend="llvm").from_store
    with pytest.raises(AutotuneError, match=r"config 1 \{'BLOCK': 2.5\}: argument 'BLOCK': expected an int"):
        accy.autotune(configs=[dict(BLOCK=16), dict(BLOCK=2.5)])(MAX_POOL)
    with pytest.raises(AutotuneError, match="key 'BLOCK' is a constexpr parameter every config sets"):
        accy.autotune(configs=[dict(BLOCK=16)], key=("BLOCK",))(MAX_POOL)


def test_compare_runs_the_values_passed(rng):
    x = rng.standard_normal(30).astype(np.float32)
    report = accy.compare(MAX_POOL, [np.zeros(len(pooled(x, 3, 2)), np.float32), x, 3, 2, 8],
                          backends=("numpy", "llvm"))
    assert report.agree and report.ran == ("numpy", "llvm")


def test_the_command_line_takes_constexpr_values(tmp_path, capsys):
    from accy.cli import main

    source = tmp_path / "pool.py"
    source.write_text("import sys\nsys.path.insert(0, %r)\nfrom test_specialize import MAX_POOL\n"
                      % str(__import__("pathlib").Path(__file__).parent))
    assert main(["ir", f"{source}:MAX_POOL", "--constexpr", "window=3", "--constexpr", "stride=2",
                 "--constexpr", "BLOCK=8"]) == 0
    assert "kernel @max_pool(" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["ir", f"{source}:MAX_POOL", "--constexpr", "window=3"])
    assert "constexpr parameters without a value (stride, BLOCK)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["ir", f"{source}:MAX_POOL", "--constexpr", "window=x"])
    assert "--constexpr window=x: expected int" in capsys.readouterr().err
