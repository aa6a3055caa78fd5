"""Tracing once per process: the same body with the same static values gives the same graph;
a body that reads something that could change is traced every time."""

import pytest

from accy import Program, axis, dynamic_buffer, f32
from accy.trace_cache import OPTIMISED, TRACED, body_key

SCALE = 2.0  # a module-level constant the body below reads
SETTINGS = {"scale": 2.0}  # a mutable one


def scaled(scale: float) -> Program:
    """A fresh Program each call, of one body closed over ``scale``."""
    def body(k, args):
        k.for_each_1d(axis("i", args.dst.size), lambda inner, idx: args.dst.__setitem__(
            idx["i"], args.x[idx["i"]] * scale * SCALE))

    return Program("scaled", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}, body)


def traces(make) -> tuple:
    before = TRACED.traces, OPTIMISED.traces
    program = make()
    program.graph
    return program, (TRACED.traces - before[0], OPTIMISED.traces - before[1])


def test_the_same_body_and_values_trace_once():
    first, _ = traces(lambda: scaled(3.0))
    again, counts = traces(lambda: scaled(3.0))
    assert counts == (0, 0)
    assert again.traced_graph is first.traced_graph and again.graph is first.graph


def test_other_closure_values_trace_again():
    first, _ = traces(lambda: scaled(3.0))
    other, counts = traces(lambda: scaled(5.0))
    assert counts == (1, 1) and other.graph.text() != first.graph.text()


def test_a_changed_module_constant_traces_again(monkeypatch):
    first, _ = traces(lambda: scaled(7.0))
    monkeypatch.setattr(__import__(__name__), "SCALE", 4.0)
    other, counts = traces(lambda: scaled(7.0))
    assert counts == (1, 1) and other.graph.text() != first.graph.text()


def reads_mutable_settings() -> Program:
    def body(k, args):
        k.for_each_1d(axis("i", args.dst.size), lambda inner, idx: args.dst.__setitem__(
            idx["i"], args.x[idx["i"]] * SETTINGS["scale"]))

    return Program("settings", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}, body)


def closes_over_a_list(factors: list) -> Program:
    def body(k, args):
        k.for_each_1d(axis("i", args.dst.size), lambda inner, idx: args.dst.__setitem__(
            idx["i"], args.x[idx["i"]] * factors[0]))

    return Program("listed", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32)}, body)


@pytest.mark.parametrize("make", [reads_mutable_settings, lambda: closes_over_a_list([2.0])],
                         ids=["mutable global", "closure over a list"])
def test_a_body_reading_mutable_state_is_traced_every_time(make):
    assert body_key(make().body) is None
    _, counts = traces(make)
    _, again = traces(make)
    assert counts == again == (1, 1)


def test_mutating_what_an_unkeyed_body_reads_shows_in_its_graph(monkeypatch):
    first = reads_mutable_settings().graph.text()
    monkeypatch.setitem(SETTINGS, "scale", 3.0)
    assert reads_mutable_settings().graph.text() != first


def test_the_cache_can_be_turned_off(monkeypatch):
    traces(lambda: scaled(11.0))
    monkeypatch.setenv("ACCY_TRACE_CACHE", "0")
    _, counts = traces(lambda: scaled(11.0))
    assert counts == (1, 1)


def test_a_recursive_helper_has_a_key():
    def depth(n):
        return 0 if n == 0 else 1 + depth(n - 1)

    def body(k, args):
        k.for_each_1d(axis("i", args.dst.size + depth(2)), lambda inner, idx: None)

    assert body_key(body) is not None


def test_numpy_scalars_and_frozen_values_are_keys_arrays_are_not():
    import numpy as np

    from accy import f16

    def body_over(value):
        return lambda k, args: (value, k, args)

    assert body_key(body_over(np.float32(2.0))) is not None
    assert body_key(body_over((f16, 3))) is not None
    assert body_key(body_over(np.ones(3))) is None
