"""accy's own tools: backend comparison, one-thread debugging, dot output, memory checks.
Each is shown catching a planted bug."""

import json
import re

import numpy as np
import pytest

import accy
from accy import Program, axis, dynamic_buffer, f32
from accy.cli import main
from accy.errors import ArgumentError, RaceError, UnwrittenOutputError
from accy.library.attention import ScaledDotProduct, scaled_dot_product_f32
from accy.testing import assert_backends_agree


def attention_args(shape, seed=0):
    b, q, k, h, v = shape
    rng = np.random.default_rng(seed)
    return [np.zeros((b, q, v), np.float32)] + [rng.standard_normal(s, dtype=np.float32)
                                                for s in ((b, q, h), (b, k, h), (b, k, v))]


def neighbour_reader():
    """Planted bug: each thread reads the output its neighbour writes in the same launch.
    The interpreter runs op by op over all threads, the host a vector of threads at a time:
    where a thread's neighbour is in the chunk before its own, they differ."""
    def body(k, a):
        def each(inner, idx):
            i = idx["i"]
            a.dst[i] = a.x[i]
            a.dst[i] = a.dst[i] + a.dst[inner.max(i - 1, 0)]

        k.for_each_1d(axis("i", 70), each)

    return Program("neighbour", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}, body)


def test_compare_reports_agreement_with_named_coordinates():
    entry = scaled_dot_product_f32(ScaledDotProduct(2, 3, 4, 2, 3))
    report = accy.compare(entry, attention_args((2, 3, 4, 2, 3)), backends=("numpy", "llvm", "cuda"))
    assert report.agree and report.ran[:2] == ("numpy", "llvm")
    (pair,) = [p for p in report.pairs if p.backends == ("numpy", "llvm")]
    assert pair.disagreeing == 0 and pair.elements == 18 and pair.max_abs < 1e-6
    if "cuda" not in report.ran:
        assert "cuda" in report.skipped and "pycuda" in report.skipped["cuda"] or "NVIDIA" in report.skipped["cuda"]
    data = json.loads(report.to_json())
    assert data["agree"] is True and data["pairs"][0]["output"] == "dst"


def test_compare_catches_the_planted_cross_thread_bug():
    args = [np.zeros(70, np.float32), np.ones(70, np.float32)]
    # the memory checker names the race outright: a thread reads what its neighbour writes
    with pytest.raises(RaceError, match=r"race on 'dst'\[\d+\]: .* by thread i=\d+ at .* by thread i=\d+ at "):
        neighbour_reader().run([a.copy() for a in args], check_memory=True)
    # without it, comparing the backends shows the symptom
    report = accy.compare(neighbour_reader(), args, backends=("numpy", "llvm"),
                          options={"numpy": {"check_memory": False}})
    assert not report.agree
    (pair,) = report.pairs
    # the first thread of each chunk but the first read its neighbour's finished sum
    assert pair.disagreeing >= 1 and pair.first[0].endswith("(2 vs 3)")
    assert "DISAGREE" in str(report)


def test_compare_skips_a_backend_that_lacks_libdevice_and_says_why(monkeypatch):
    """Without nvidia-cuda-nvcc (a plain `pip install .`) ptx cannot link exp: skipped, not failed."""
    from accy.codegen import machine as codegen
    from accy.codegen.nvptx import toolchain

    monkeypatch.setattr(toolchain, "find_libdevice", lambda: None)
    monkeypatch.setattr(codegen, "find_libdevice", lambda: None)
    monkeypatch.setenv("ACCY_CACHE", "0")

    def body(k, a):
        k.for_each_1d(axis("i", 5), lambda inner, idx: a.dst.store(inner, inner.exp(a.x[idx["i"]]) * 0.5, idx["i"]))

    program = Program("no_libdevice", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}, body)
    report = accy.compare(program, [np.zeros(5, np.float32), np.ones(5, np.float32)], backends=("numpy", "ptx"))
    assert report.ran == ("numpy",) and not report.failed and report.agree
    assert report.skipped == {"ptx": "its math functions need libdevice, which is not installed "
                                     "(pip install nvidia-cuda-nvcc)"}


def test_compare_names_entry_coordinates():
    """A perturbed copy of the entry's output shows up as b=.. q=.. v=.. coordinates."""
    from accy.compare import _compare_arrays
    from accy.library.entry import Shape

    a = np.zeros((2, 3, 2), np.float32)
    b = a.copy()
    b[1, 2, 0] = 1.0
    pair = _compare_arrays("dst", a, b, ("x", "y"), 1e-5, 1e-6, Shape.of(("b", 2), ("q", 3), ("v", 2)))
    assert pair.first == ("b=1 q=2 v=0 (0 vs 1)",) and pair.disagreeing == 1


def test_compare_records_a_failing_backend():
    def body(k, a):
        k.for_each_1d(axis("i", 2), lambda inner, idx: a.dst.store(inner, 1.0, idx["i"] + 5))

    report = accy.compare(Program("oob", {"dst": dynamic_buffer(f32)}, body), [np.zeros(2, np.float32)],
                          backends=("numpy", "llvm"))
    assert not report.agree and set(report.failed) == {"numpy", "llvm"}
    assert "OutOfBoundsError" in report.failed["llvm"]


def test_assert_backends_agree_helper():
    entry = scaled_dot_product_f32(ScaledDotProduct(1, 2, 3, 2, 2))
    assert assert_backends_agree(entry, attention_args((1, 2, 3, 2, 2))).agree
    with pytest.raises(AssertionError, match="DISAGREE"):
        assert_backends_agree(neighbour_reader(), [np.zeros(6, np.float32), np.ones(6, np.float32)])


NEIGHBOUR_MODULE = """
from accy import Program, axis, dynamic_buffer, f32, scalar, index

def body(k, a):
    def each(inner, idx):
        i = idx["i"]
        a.dst[i] = a.x[i]
        a.dst[i] = a.dst[i] + a.dst[inner.max(i - 1, 0)]

    k.for_each_1d(axis("i", a.n), each)

neighbour = Program("neighbour", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32), "n": scalar(index)}, body)
"""


def test_compare_cli_exit_status(capsys, tmp_path):
    assert main(["compare", "attention", "--backends", "numpy,llvm"]) == 0
    assert "agree" in capsys.readouterr().out
    assert main(["compare", "attention", "--backends", "numpy,llvm", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["agree"] is True
    # a kernel of the user's own, from a file: the planted neighbour bug disagrees, exit status 1
    module = tmp_path / "kernels.py"
    module.write_text(NEIGHBOUR_MODULE)
    assert main(["compare", f"{module}:neighbour", "--backends", "numpy,llvm", "--size", "6",
                 "--scalar", "n=6"]) == 1
    assert "DISAGREE" in capsys.readouterr().out


# -- debugging one logical thread ----------------------------------------------------------------


def test_debug_thread_records_every_op_with_source_lines():
    entry = scaled_dot_product_f32(ScaledDotProduct(2, 2, 3, 2, 2))
    args = attention_args((2, 2, 3, 2, 2))
    trace = entry.run(args, backend="numpy", debug_thread={"b": 1, "q": 0, "v": 1})
    # the last op is the thread's store, of the value the launch wrote
    assert trace.entries[-1].op.startswith("store %dst")
    assert trace.values_of("fold")[-1] == pytest.approx(float(args[0][1, 0, 1]))
    # every fold iteration is there: 3 keys in each of the max (2), sum and weighted passes
    assert len(trace.values_of("exp")) == 6
    assert any("attention.py" in e.location for e in trace.entries)
    assert "[fold %" in str(trace) and str(trace).startswith("thread b=1 q=0 v=1")


def test_debug_thread_values_match_a_hand_computation():
    def body(k, a):
        def each(inner, idx):
            i = idx["i"]
            square = a.x[i] * a.x[i]  # DEBUG-LINE
            a.dst[i] = inner.fold_range(0, 3, 1, square, lambda inner, j, acc: acc + 1.0)

        k.for_each_1d(axis("i", 4), each)

    program = Program("dbg", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}, body)
    x = np.arange(4, dtype=np.float32)
    trace = program.run([np.zeros(4, np.float32), x], debug_thread={"i": 3})
    assert trace.values_of("load %x") == [3.0]  # CSE made the two loads one
    assert trace.values_of("mul") == [9.0]
    assert [e.value for e in trace.entries if "add" in e.op] == [10.0, 11.0, 12.0]
    assert [e.iterations[0][1] for e in trace.entries if "add" in e.op] == [0, 1, 2]
    assert any("DEBUG-LINE" in e.location for e in trace.entries)


def test_debug_thread_shows_every_result_of_a_tuple_fold_the_loop_variables_and_the_threads_index():
    def body(k, a):
        def each(inner, idx):
            i = idx["i"]
            total, peak = inner.fold_range(0, 3, 1, (0.0, a.x[i]),
                                           lambda inner, j, acc: (acc[0] + a.x[j], inner.max(acc[1], a.x[j])))
            a.dst[i] = total + peak

        k.for_each_1d(axis("i", 4), each)

    program = Program("dbg_tuple", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}, body)
    x = np.array([5.0, 1.0, 2.0, 0.5], np.float32)
    trace = program.run([np.zeros(4, np.float32), x], debug_thread={"i": 3})
    (fold,) = [e for e in trace.entries if " = fold " in e.op]
    results = fold.op.split(" = ")[0]
    assert re.fullmatch(r"%\d+, %\d+", results) and fold.value == (8.0, 5.0)  # both results, not just the first
    # the thread's own index: the launch's value for this thread, before anything reads it
    (coordinate,) = [e for e in trace.entries if "thread's i" in e.op]
    index = coordinate.op.split(" = ")[0]
    assert coordinate.value == 3 and f"load %x[{index}]" in str(trace)
    assert trace.entries.index(coordinate) < trace.entries.index(next(e for e in trace.entries if "load" in e.op))
    # each iteration starts with the loop variable and the accumulators it gets
    starts = [e for e in trace.entries if e.op.startswith("^(")]
    assert len(starts) == 3 and all(re.fullmatch(r"\^\(%\d+: index, %\d+: f32, %\d+: f32\)", e.op) for e in starts)
    assert [e.value for e in starts] == [(0, 0.0, 0.5), (1, 5.0, 5.0), (2, 6.0, 5.0)]
    assert [e.iterations for e in starts] == [((results, j),) for j in range(3)]
    text = str(trace)
    assert f"{results} = fold " in text and "-> (f32, f32) -> (8.0, 5.0)" in text
    assert f"[fold {results} i=1] {starts[1].op} -> (1, 5.0, 5.0)" in text


def test_debug_thread_cap_and_bad_threads():
    entry = scaled_dot_product_f32(ScaledDotProduct(1, 1, 8, 8, 1))
    trace = entry.run(attention_args((1, 1, 8, 8, 1)), debug_thread={"b": 0, "q": 0, "v": 0}, debug_cap=10)
    assert len(trace.entries) == 10 and trace.omitted > 100 and "more ops not shown" in str(trace)
    with pytest.raises(ArgumentError, match="give every logical axis by name"):
        entry.run(attention_args((1, 1, 8, 8, 1)), debug_thread={"b": 0})
    with pytest.raises(ArgumentError, match="q=5 is outside the axis"):
        entry.run(attention_args((1, 1, 8, 8, 1)), debug_thread={"b": 0, "q": 5, "v": 0})


# -- dot ----------------------------------------------------------------------------------------


def test_ir_as_dot(tmp_path, capsys):
    assert main(["ir", "attention", "--format", "dot"]) == 0
    dot = capsys.readouterr().out
    assert dot.startswith('digraph "accy_kernel_attention_') and dot.rstrip().endswith("}")
    assert dot.count("subgraph cluster_") == 8  # the launch and its 7 folds
    assert dot.count("{") == dot.count("}")
    import shutil
    import subprocess

    if shutil.which("dot"):
        out = tmp_path / "g.svg"
        subprocess.run(["dot", "-Tsvg", "-o", str(out)], input=dot, text=True, check=True)
        assert out.stat().st_size > 0


def test_a_library_entry_has_its_programs_graphs():
    """``entry.graph`` as ``program.graph``: what the tools take (dot, text) works on an entry."""
    from accy.dsl.dot import graph_to_dot

    entry = scaled_dot_product_f32(ScaledDotProduct(2, 3, 4, 2, 3))
    assert entry.graph is entry.program.graph and entry.traced_graph is entry.program.traced_graph
    assert entry.graph.text().startswith(f"kernel @{entry.name}(")
    assert graph_to_dot(entry.graph).startswith(f'digraph "{entry.name}"')


# -- poisoned memory and races -----------------------------------------------------------------


def test_race_names_both_threads_and_the_element():
    def body(k, a):
        k.for_each_2d(x=axis("i", 4), y=axis("j", 2),
                      body=lambda inner, idx: a.dst.store(inner, 1.0, idx["i"] // 2 + idx["j"] * 2))

    program = Program("racy", {"dst": dynamic_buffer(f32)}, body)
    dst = np.full(4, 7.0, np.float32)
    with pytest.raises(RaceError, match=r"race on 'dst'\[0\]: written by thread i=0 j=0 at .* and written by thread i=1 j=0 at "):
        program.run([dst], check_memory=True)
    assert (dst == 7.0).all()


def test_race_across_two_stores():
    def body(k, a):
        def each(inner, idx):
            a.dst[idx["i"]] = 1.0
            a.dst[3 - idx["i"]] = 2.0  # thread 3 writes dst[0], which thread 0 wrote

        k.for_each_1d(axis("i", 4), each)

    with pytest.raises(RaceError, match=r"race on 'dst'\[[03]\]: written by thread i=[03] at .* and written by thread "
                                        r"i=[03] at .*thread 3 writes dst\[0\]"):
        Program("racy2", {"dst": dynamic_buffer(f32)}, body).run([np.zeros(4, np.float32)], check_memory=True)


def test_unwritten_outputs_are_reported_and_poisoned():
    def body(k, a):
        k.for_each_1d(axis("i", 3), lambda inner, idx: a.dst.store(inner, 1.0, idx["i"]))  # misses dst[3]

    program = Program("short", {"dst": dynamic_buffer(f32)}, body)
    with pytest.raises(UnwrittenOutputError, match=r"output 'dst': 1 of 4 elements were never written \(indices 3\)"):
        program.run([np.zeros(4, np.float32)], check_memory=True)
    dst = np.zeros(4, np.float32)
    program.run([dst], check_memory=False)  # without the checks the element keeps its value
    assert dst.tolist() == [1, 1, 1, 0]


def test_read_before_write_of_a_write_only_output_sees_poison():
    def body(k, a):
        def each(inner, idx):
            i = idx["i"]
            a.dst[i] = a.x[i]

        k.for_each_1d(axis("i", 2), each)

    dst = np.zeros(2, np.float32)
    Program("ok", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}, body).run([dst, np.ones(2, np.float32)],
                                                                                   check_memory=True)
    assert dst.tolist() == [1.0, 1.0]


def test_memory_checks_are_on_in_this_suite():
    from accy.runtime.interpreter.simt import check_memory_default

    assert check_memory_default()


def test_compare_takes_per_backend_options_and_rejects_unknown_ones():
    entry = scaled_dot_product_f32(ScaledDotProduct(1, 2, 3, 2, 2))
    report = accy.compare(entry, attention_args((1, 2, 3, 2, 2)), backends=("numpy", "llvm"),
                          options={"llvm": {"checks": False, "threads": 2}})
    assert report.agree and report.ran == ("numpy", "llvm")
    with pytest.raises(ArgumentError, match=r"backend 'numpy' takes no option 'checks'"):
        entry.run(attention_args((1, 2, 3, 2, 2)), backend="numpy", checks=False)
