"""Library entries' optimised graphs on disk (accy.graph_store): a later Program of the same
entry parses the stored graph, with its ops' source locations, instead of tracing; what cannot
be read back is traced again; user kernels, programs made from an entry's with another name or
body, and ACCY_CACHE=0 store nothing of theirs under the entry's graph."""

import subprocess
import sys
import textwrap

import attrs
import numpy as np
import pytest

from accy import graph_store
from accy import cache
from accy.errors import CacheWarning
from accy.library.attention import ScaledDotProduct, _fused_program, reference
from accy.library.attention_tile import scaled_dot_product_tile
from accy.trace_cache import TRACED

from spoiled_entries import SPOILS, not_blocked, spoil_entry

SPEC = ScaledDotProduct(2, 5, 7, 3, 4)


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A cache of the test's own, and no graph kept in this process (each Program traces or loads)."""
    monkeypatch.setenv("ACCY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ACCY_CACHE", raising=False)
    monkeypatch.setenv("ACCY_TRACE_CACHE", "0")
    return tmp_path / "cache"


def _locations(graph):
    return [op.location for op in graph.body.walk()]


def test_a_second_program_of_an_entry_parses_the_stored_graph_without_tracing(store):
    before = dict(graph_store.counts)
    first = _fused_program(SPEC).graph
    assert graph_store.counts["stored"] == before["stored"] + 1
    traced = TRACED.traces
    again = _fused_program(SPEC).graph
    assert TRACED.traces == traced, "the second program traced its body"
    assert graph_store.counts["loaded"] == before["loaded"] + 1
    assert again is not first and again.text() == first.text()
    assert _locations(again) == _locations(first)
    assert any(loc is not None and loc.filename.endswith("attention.py") for loc in _locations(again))


def test_the_loaded_graph_runs_as_the_traced_one(store, rng):
    entry = scaled_dot_product_tile(SPEC)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((2, 5, 3), (2, 7, 3), (2, 7, 4)))
    expected = reference(q, k, v)
    for _ in range(2):  # stores, then loads
        program = attrs.evolve(entry.program)
        dst = np.zeros((2, 5, 4), np.float32)
        program.run([dst, q, k, v], backend="llvm")
        np.testing.assert_allclose(dst, expected, rtol=1e-5, atol=1e-6)
    assert graph_store.counts["loaded"] >= 1


def test_the_key_covers_the_code_that_makes_graphs():
    sources = graph_store.graph_sources()
    for module in ("program.py", "graph_store.py", "dsl/passes.py", "dsl/builder.py", "dsl/analysis/intervals.py",
                   "library/attention.py", "library/attention_tile.py"):
        assert module in sources
    assert not [s for s in sources if s.startswith(("lowering/", "codegen/", "runtime/", "emulator/"))]


def test_another_argument_is_another_graph(store):
    name = graph_store.body_name
    assert name(_fused_program(SPEC).body) != name(_fused_program(ScaledDotProduct(2, 5, 7, 3, 4, causal=True)).body)
    assert name(_fused_program(SPEC).body) == name(_fused_program(ScaledDotProduct(2, 5, 7, 3, 4)).body)


def test_a_program_made_from_an_entrys_with_another_name_or_body_gets_its_own_graph(store):
    entry = _fused_program(SPEC)
    entry.graph  # stored
    renamed = attrs.evolve(entry, name="my_attention")
    assert renamed.graph.name == "my_attention" and "my_attention" in renamed.ptx()
    causal = _fused_program(ScaledDotProduct(2, 5, 7, 3, 4, causal=True))
    other = attrs.evolve(entry, body=lambda k, p: causal.body(k, p))  # the entry's name, another body
    assert graph_store.body_name(other.body) is None
    assert other.graph.text() == causal.graph.text().replace(causal.name, entry.name) != entry.graph.text()


def test_a_stored_graph_that_does_not_read_back_is_traced_again(store):
    graph = _fused_program(SPEC).graph
    (path,) = [p for p in store.rglob("*") if p.is_file()]
    cache.write(path.name, b'{"text": "not a graph", "locations": []}')  # a sound entry of a wrong content
    traced = TRACED.traces
    with pytest.warns(CacheWarning, match="does not read back"):
        again = _fused_program(SPEC).graph
    assert TRACED.traces == traced + 1 and again.text() == graph.text()


def test_nothing_is_stored_with_the_cache_off_or_for_a_user_kernel(store, monkeypatch):
    from accy import Program, axis, dynamic_buffer, f32

    def body(k, args):
        k.for_each_1d(axis("i", args.dst.size), lambda inner, idx: args.dst.__setitem__(idx["i"], 1.0))

    before = dict(graph_store.counts)
    Program("ones", {"dst": dynamic_buffer(f32)}, body).graph
    monkeypatch.setenv("ACCY_CACHE", "0")
    _fused_program(SPEC).graph
    assert graph_store.counts == before and not store.exists()


def test_a_later_process_loads_the_graph_and_the_launcher(store):
    code = textwrap.dedent("""
        import json, numpy as np
        from accy import graph_store
        from accy.codegen import machine as codegen
        from accy.library.attention import ScaledDotProduct, scaled_dot_product_fused_f32
        entry = scaled_dot_product_fused_f32(ScaledDotProduct(2, 5, 7, 3, 4))
        q, k, v = (np.ones(s, np.float32) for s in ((2, 5, 3), (2, 7, 3), (2, 7, 4)))
        dst = np.zeros((2, 5, 4), np.float32)
        entry.run([dst, q, k, v], backend="llvm")
        assert np.allclose(dst, 1.0)
        print(json.dumps({**graph_store.counts, **codegen.compilations}))
    """)
    env = {**__import__("os").environ, "ACCY_CACHE_DIR": str(store)}
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
            for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr
    import json

    first, second = (json.loads(r.stdout.strip().splitlines()[-1]) for r in runs)
    assert (first["stored"], first["host"]) == (1, 1)
    assert (second["loaded"], second["stored"], second["host"], second["host_loaded"]) == (1, 0, 0, 1)


@SPOILS
def test_a_header_that_is_no_object_or_a_fifo_entry_is_traced_again_without_blocking(store, spoil):
    graph = _fused_program(SPEC).graph
    (path,) = [p for p in store.rglob("*") if p.is_file()]
    spoil_entry(path, spoil)
    traced = TRACED.traces
    with not_blocked(path), pytest.warns(CacheWarning, match="corrupt; rebuilding|not a regular file"):
        again = _fused_program(SPEC).graph
    assert TRACED.traces == traced + 1 and again.text() == graph.text()
    loaded = graph_store.counts["loaded"]
    _fused_program(SPEC).graph
    assert graph_store.counts["loaded"] == loaded + 1  # stored again
