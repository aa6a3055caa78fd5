"""Tracing tile programs: the graph they record, its text form, and the mistakes refused at the
user's line (whatever backend runs them later)."""

from __future__ import annotations

import numpy as np
import pytest

import accy
from accy import axis, f16, f32, i8, i32, index
from accy.dsl import parse
from accy.dsl.types import TileType
from accy.errors import TraceError


def _trace(fn, **params):
    params = params or dict(x=accy.dynamic_buffer(f32), y=accy.dynamic_buffer(f32), n=accy.scalar(index))

    @accy.kernel(**params)
    def kern(k, p):
        @k.for_each_tile(grid=axis("m", 4))
        def body(t, pid):
            fn(t, pid, p)

    return kern.traced_graph


def _refused(fn, match):
    with pytest.raises(TraceError, match=match) as info:
        _trace(fn)
    assert "test_tile_trace.py" in str(info.value)  # the user's line
    return str(info.value)


def test_the_issue_matmul_traces_with_tile_types_and_the_text_form_parses_back():
    @accy.kernel(c=accy.dynamic_buffer(f32), a=accy.dynamic_buffer(f32), b=accy.dynamic_buffer(f32),
                 M=accy.scalar(index), N=accy.scalar(index), K=accy.scalar(index))
    def matmul(k, p):
        @k.for_each_tile(grid=(axis("m", accy.cdiv(p.M, 64)), axis("n", accy.cdiv(p.N, 64))), warps=4)
        def body(t, pid):
            rm = pid["m"] * 64 + t.arange(64)
            rn = pid["n"] * 64 + t.arange(64)

            def step(t, k0, acc):
                rk = k0 + t.arange(32)
                a = p.a.load(rm[:, None] * p.K + rk[None, :], mask=(rm[:, None] < p.M) & (rk[None, :] < p.K))
                b = p.b.load(rk[:, None] * p.N + rn[None, :], mask=(rk[:, None] < p.K) & (rn[None, :] < p.N))
                return t.dot(a, b, acc)

            acc = t.fold_range(0, p.K, 32, t.zeros((64, 64), f32), step)
            p.c.store(rm[:, None] * p.N + rn[None, :], acc, mask=(rm[:, None] < p.M) & (rn[None, :] < p.N))

    for graph in (matmul.traced_graph, matmul.graph):
        text = graph.text()
        assert "tile<f32, 64x64>" in text and "for_each_tile" in text and "warps 4" in text
        assert parse(text).text() == text
    assert matmul.graph.is_tile_launch
    fold = next(op for op in matmul.graph.body.walk() if op.opcode == "fold")
    assert fold.results[0].type == TileType(f32, (64, 64))
    # LICM never lifts a tile out of its program
    assert not any(isinstance(r.type, TileType) for op in matmul.graph.body.ops for r in op.results)


def test_broadcasting_is_recorded_as_explicit_splats_and_broadcasts():
    graph = _trace(lambda t, pid, p: p.y.store(t.arange(4)[:, None] * 4 + t.arange(4)[None, :],
                                               (t.arange(4)[:, None] + pid["m"]).cast(f32) * 2.0))
    opcodes = [op.opcode for op in graph.body.walk()]
    assert {"splat", "broadcast", "reshape", "tile_store"} <= set(opcodes)
    for op in graph.body.walk():
        if op.opdef.pointwise:  # operands of one shape (or all scalars): backends never broadcast
            assert len({getattr(v.type, "shape", ()) for v in op.operands}) == 1, op


def test_tile_values_read_like_arrays():
    seen = {}

    def body(t, pid, p):
        x = t.zeros((4, 8), f16)
        seen.update(shape=x.shape, ndim=x.ndim, dtype=x.dtype, size=x.size, T=x.T.shape, col=x[:, None].shape,
                    row=x[None].shape, ell=x[..., None].shape, re=x.reshape(8, 4).shape, rows=t.sum(x, 1).shape,
                    keep=t.max(x, axis=0, keepdims=True).shape, arg=x.argmax(1).dtype, all=type(t.sum(x)).__name__,
                    scan=t.cumsum(x, 1).shape, mm=(x.cast(f32) @ t.zeros((8, 2))).shape, abs=abs(x).dtype,
                    ufunc=np.exp(x).shape, math=accy.math.sqrt(x).dtype, where=t.where(x > 0, x, 1.0).dtype,
                    full=t.full((2, 3), 7, i32).dtype, int_dot=t.dot(t.zeros((2, 4), i8), t.zeros((4, 2), i8)).dtype)

    _trace(body)
    assert seen == dict(shape=(4, 8), ndim=2, dtype=f16, size=32, T=(8, 4), col=(4, 1, 8), row=(1, 4, 8),
                        ell=(4, 8, 1), re=(8, 4), rows=(4,), keep=(1, 8), arg=index, all="Traced", scan=(4, 8),
                        mm=(4, 2), abs=f16, ufunc=(4, 8), math=f16, where=f16, full=i32, int_dot=i32)


@pytest.mark.parametrize("fn, match", [
    (lambda t, pid, p: t.arange(4)[:, None] + t.arange(3)[None, :] + t.arange(5),
     r"shapes \(4, 3\) and \(5,\) do not broadcast"),
    (lambda t, pid, p: t.dot(t.zeros((4, 8)), t.zeros((4, 8))), r"inner dimensions differ: a is 4x8 and b is 4x8"),
    (lambda t, pid, p: t.dot(t.zeros((4, 8)), t.zeros((8, 4), f16)), "a holds f32 and b holds f16"),
    (lambda t, pid, p: t.dot(t.zeros((4, 8), i32), t.zeros((8, 4), i32)), "float or 8-bit integer"),
    (lambda t, pid, p: t.dot(t.zeros((4, 8), f16), t.zeros((8, 4), f16), precision="tf32"), "tf32"),
    (lambda t, pid, p: t.zeros((p.n, 4)), "tile sizes are static"),
    (lambda t, pid, p: t.zeros((1024, 2048)), r"2097152 elements, over the limit of 1048576 \(2\*\*20\)"),
    (lambda t, pid, p: t.zeros((1024, 1)) + t.zeros((2048,)),
     r"broadcast: its result, a tile of shape \(1024, 2048\) holds 2097152 elements"),
    (lambda t, pid, p: t.zeros((2, 2, 2, 2, 2, 2)), "1 to 5 dimensions"),
    (lambda t, pid, p: p.x.store(t.arange(4), t.zeros((4,), f16), mask=t.zeros((4,), f32)),
     "store: mask must be bool"),
    (lambda t, pid, p: t.sum(t.zeros((4, 4)), axis=2), "axis 2 is out of range"),
    (lambda t, pid, p: t.shared(f32, 4), "a tile program has no threads of its own"),
    (lambda t, pid, p: t.barrier(), "a tile program has no threads of its own"),
    (lambda t, pid, p: t.if_(t.arange(4) < 2, lambda t: None), "use t.where"),
    (lambda t, pid, p: t.fold_range(0, 4, 1, t.zeros((4,)), lambda t, i, acc: acc + t.zeros((8,))),
     r"shapes \(4,\) and \(8,\)"),
    (lambda t, pid, p: p.x.load_tile((0, 0), (4, 4)), "'x' has 1 dimension, the origin gives 2"),
    (lambda t, pid, p: t.zeros((4, 4)).reshape(3, 4), r"cannot reshape a tile of shape \(4, 4\)"),
    (lambda t, pid, p: t.zeros((4, 4))[pid["m"]], "tile slices are static"),
    (lambda t, pid, p: p.x.load(t.arange(4).cast(f32)), "indices are integers, got tile<f32, 4>"),
    (lambda t, pid, p: t.prod(t.arange(4) < 2), "bool elements"),
    (lambda t, pid, p: t.for_each_1d(axis("i", 4), lambda i, j: None), "top level"),
])
def test_mistakes_are_trace_errors_at_the_users_line(fn, match):
    _refused(fn, match)


def test_warps_and_grid_are_checked():
    for warps in (3, 0, 64, True):
        with pytest.raises(TraceError, match="warps must be 1, 2, 4, 8, 16 or 32"):
            @accy.kernel(x=accy.dynamic_buffer(f32))
            def kern(k, p):
                k.for_each_tile(grid=axis("m", 4), warps=warps, body=lambda t, pid: None)

            kern.traced_graph


def test_masked_scalar_accesses_in_a_program_are_guarded_scalar_ops():
    graph = _trace(lambda t, pid, p: p.y.store(pid["m"], p.x.load(pid["m"], mask=pid["m"] < p.n, other=1.0),
                                               mask=pid["m"] < 2))
    opcodes = [op.opcode for op in graph.body.walk()]
    assert "tile_load" not in opcodes and opcodes.count("if") == 2 and {"load", "store"} <= set(opcodes)


def test_a_simt_kernel_refuses_masks_and_tile_accesses():
    @accy.kernel(x=accy.dynamic_buffer(f32))
    def kern(k, p):
        @k.for_each_1d(axis("i", 4))
        def body(inner, i):
            p.x.store(i.x.index, p.x.load(i.x.index, mask=i.x.index < 2))

    with pytest.raises(TraceError, match="tile-level access"):
        kern.traced_graph


def test_an_if_may_return_tiles_and_its_text_parses_back():
    graph = _trace(lambda t, pid, p: p.y.store(t.arange(4), t.if_(pid["m"] < 2, lambda t: t.zeros((4,)),
                                                                   lambda t: t.full((4,), 1.0))))
    (op,) = [op for op in graph.body.walk() if op.opcode == "if"]
    assert op.attrs.results == (TileType(f32, (4,)),)
    assert parse(graph.text()).text() == graph.text()
