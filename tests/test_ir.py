"""The graph: its text form, both spellings, the passes and the verifier."""

import attrs
import numpy as np
import pytest

import accy
from accy import Program, axis, dynamic_buffer, f32, index
from accy.dsl import (
    eliminate_common_subexpressions,
    eliminate_dead_code,
    fold_constants,
    optimize,
    verify,
)
from accy.errors import VerificationError

PARAMS = {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32), "y": dynamic_buffer(f32)}


def seed_style(k, args):
    """dst[i] = sum_j x[i*4 + j] * y[j], written as the seed writes kernels."""
    def dot_step(fold_inner, j, acc, ctx):
        stride = fold_inner.constantIndex(4)
        row = fold_inner.mul(ctx.i, stride)
        at = fold_inner.add(row, j)
        xv = ctx.args.param("x").load(fold_inner, at)
        yv = ctx.args.param("y").load(fold_inner, j)
        product = xv.mul(fold_inner, yv)
        return fold_inner.add(acc, product.raw())

    def each(inner, index_, ctx):
        zero = inner.constantFloat(f32, 0.0)
        ctx.i = index_.x.index
        total = inner.foldRange(0, 4, 1, zero, ctx, dot_step)
        ctx.args.param("dst").store(inner, total, index_.x.index)

    class Ctx:
        pass

    ctx = Ctx()
    ctx.args = args
    k.forEach1D(accy.logical.axis("i", 3), ctx, each)


def pythonic_style(k, args):
    def each(inner, idx):
        i = idx["i"]
        args.dst[i] = inner.fold_range(0, 4, 1, 0.0, lambda inner, j, acc: acc + args.x[i * 4 + j] * args.y[j])

    k.for_each_1d(axis("i", 3), each)


def test_both_spellings_record_the_same_graph():
    seed = Program("dot", PARAMS, seed_style)
    pythonic = Program("dot", PARAMS, pythonic_style)
    assert seed.traced_graph.text() == pythonic.traced_graph.text()
    assert seed.graph.text() == pythonic.graph.text()


@pytest.mark.parametrize("body", [seed_style, pythonic_style])
def test_both_spellings_run(body, backend, rng):
    x = rng.standard_normal(12).astype(np.float32)
    y = rng.standard_normal(4).astype(np.float32)
    dst = np.zeros(3, np.float32)
    Program("dot", PARAMS, body).run([dst, x, y], backend=backend)
    np.testing.assert_allclose(dst, x.reshape(3, 4) @ y, rtol=1e-5)


EXPECTED_TEXT = """\
kernel @dot(%dst: buffer<f32, ?>, %x: buffer<f32, ?>, %y: buffer<f32, ?>) {
  %0 = const 3 : index
  for_each (%1 = i<%0>) {
    %2 = const 0.0 : f32
    %3 = const 0 : index
    %4 = const 4 : index
    %5 = fold %3 to %4 step 1 init(%2) -> (f32) {
    ^(%6: index, %7: f32):
      %8 = const 4 : index
      %9 = mul %1, %8 : index
      %10 = add %9, %6 : index
      %11 = load %x[%10] : f32
      %12 = load %y[%6] : f32
      %13 = mul %11, %12 : f32
      %14 = add %7, %13 : f32
      yield %14
    }
    store %dst[%1] = %5 : f32
  }
}
"""

EXPECTED_OPTIMISED = """\
kernel @dot(%dst: buffer<f32, ?>, %x: buffer<f32, ?>, %y: buffer<f32, ?>) {
  %0 = const 3 : index
  %1 = const 0.0 : f32
  %2 = const 0 : index
  %3 = const 4 : index
  for_each (%4 = i<%0>) {
    %5 = mul %4, %3 : index
    %6 = fold %2 to %3 step 1 init(%1) -> (f32) {
    ^(%7: index, %8: f32):
      %9 = add %5, %7 : index
      %10 = load %x[%9] : f32
      %11 = load %y[%7] : f32
      %12 = fma %10, %11, %8 : f32
      yield %12
    }
    store %dst[%4] = %6 : f32
  }
}
"""


def test_text_form_is_stable_and_readable():
    program = Program("dot", PARAMS, pythonic_style)
    assert program.traced_graph.text() == EXPECTED_TEXT
    assert program.graph.text() == EXPECTED_OPTIMISED
    # tracing again gives the same text: the text is a cache key
    assert Program("dot", PARAMS, pythonic_style).graph.text() == EXPECTED_OPTIMISED


def count(graph, opcode):
    return sum(op.opcode == opcode for op in graph.body.walk())


def test_constant_folding_of_index_arithmetic():
    def body(k, args):
        def each(inner, idx):
            i = idx["i"]
            offset = (inner.constant_index(3) * 4 - 2) // 5  # = 2, folded
            flag = inner.select(inner.constant_index(1) < 2, 1.0, 2.0)  # constant condition
            args.dst[i * 1 + 0 + offset] = flag
        k.for_each_1d(axis("i", 2), each)

    graph = fold_constants(Program("fold", {"dst": dynamic_buffer(f32)}, body).traced_graph)
    text = graph.text()
    assert "const 2 : index" in text and "select" not in text
    assert count(graph, "mul") == 0 and count(graph, "sub") == 0 and count(graph, "div") == 0
    dst = np.zeros(4, np.float32)
    # writes dst[2:] only, on purpose: the memory checks would (rightly) report dst[:2]
    Program("fold", {"dst": dynamic_buffer(f32)}, body).run([dst], check_memory=False)
    assert dst.tolist() == [0, 0, 1, 1]


def test_constant_folding_wraps_and_leaves_division_by_zero():
    def body(k, args):
        def each(inner, idx):
            big = inner.constant_index(2**62) * 4  # wraps to 0, like i64
            bad = inner.constant_index(1) // 0
            args.dst.store(inner, big + bad, idx["i"])
        k.for_each_1d(axis("i", 1), each)

    graph = fold_constants(Program("wrap", {"dst": dynamic_buffer(index)}, body).traced_graph)
    assert count(graph, "div") == 1
    assert "const 0 : index" in graph.text()


@pytest.mark.parametrize("backend", ["numpy", "llvm"])
def test_a_cast_to_the_type_a_value_has_is_folded_away(backend):
    """``x.cast(f32)`` of an f32 tile (a Triton kernel's ``.to(tl.float32)``) is ``x``: no pass over the tile."""
    @accy.kernel(dst=accy.tensor(f32, 1), x=accy.tensor(f32, 1))
    def same(k, p):
        @k.for_each_tile(grid=axis("i", 1))
        def program(t, pid):
            cols = t.arange(8)
            p.dst.store(cols, (p.x.load(cols, mask=cols < 5).cast(f32) + 1.0).cast(f32), mask=cols < 5)

    assert count(fold_constants(same.traced_graph), "cast") == 0
    x, dst = np.arange(5, dtype=np.float32), np.zeros(5, np.float32)
    same.run([dst, x], backend=backend)
    assert dst.tolist() == [1, 2, 3, 4, 5]


def test_cse_merges_identical_pure_ops_across_regions():
    def body(k, args):
        def each(inner, idx):
            i = idx["i"]
            a = args.x[i] * 2.0
            b = 2.0 * args.x[i]  # commutative: same value
            inside = inner.fold_range(0, 2, 1, 0.0, lambda inner, j, acc: acc + args.x[i] * 2.0)
            args.dst[i] = a + b + inside
        k.for_each_1d(axis("i", 3), each)

    program = Program("cse", PARAMS, body)
    graph = eliminate_common_subexpressions(program.traced_graph)
    assert count(program.traced_graph, "load") == 3
    assert count(graph, "load") == 1 and count(graph, "mul") == 1


def test_cse_keeps_loads_of_stored_buffers():
    def body(k, args):
        def each(inner, idx):
            i = idx["i"]
            before = args.dst[i]
            args.dst[i] = before + 1.0
            args.dst[i] = args.dst[i] + 1.0  # must see the first store
        k.for_each_1d(axis("i", 2), each)

    program = Program("rw", {"dst": dynamic_buffer(f32)}, body)
    assert count(program.graph, "load") == 2  # same index, but a store lies between
    dst = np.zeros(2, np.float32)
    program.run([dst])
    assert dst.tolist() == [2.0, 2.0]


def test_cse_keeps_negative_zero_apart():
    def body(k, args):
        k.for_each_1d(axis("i", 1), lambda inner, idx: args.dst.store(
            inner, inner.constant_float(0.0) / inner.constant_float(-0.0), idx["i"]))

    dst = np.zeros(1, np.float32)
    Program("nz", {"dst": dynamic_buffer(f32)}, body).run([dst])
    assert np.isnan(dst[0])


def test_dead_code_elimination():
    def body(k, args):
        def each(inner, idx):
            i = idx["i"]
            unused = args.x[i] * 3.0
            inner.fold_range(0, 4, 1, 0.0, lambda inner, j, acc: acc + unused)
            args.dst[i] = args.y[i]
        k.for_each_1d(axis("i", 2), each)

    graph = eliminate_dead_code(Program("dce", PARAMS, body).traced_graph)
    assert count(graph, "fold") == 0 and count(graph, "mul") == 0
    assert count(graph, "store") == 1 and graph.loaded_buffers() == {"y"}


def test_dead_code_keeps_folds_that_store():
    def body(k, args):
        def each(inner, idx):
            def step(inner, j, acc):
                args.dst[j] = acc
                return acc
            inner.fold_range(0, 2, 1, 1.0, step)
        k.for_each_1d(axis("i", 1), each)

    graph = optimize(Program("side", {"dst": dynamic_buffer(f32)}, body).traced_graph)
    assert count(graph, "fold") == 1


def test_passes_do_not_mutate_the_traced_graph():
    program = Program("dot", PARAMS, pythonic_style)
    before = program.traced_graph.text()
    optimize(program.traced_graph)
    assert program.traced_graph.text() == before


def test_verifier_catches_broken_graphs():
    graph = optimize(Program("dot", PARAMS, pythonic_style).traced_graph)
    launch = graph.launch_op
    ops = launch.regions[0].ops
    store = next(op for op in ops if op.opcode == "store")
    fold = next(op for op in ops if op.opcode == "fold")
    # a use before definition: move the store to the front of the block
    ops.insert(0, ops.pop(ops.index(store)))
    with pytest.raises(VerificationError, match="not defined before it"):
        verify(graph)
    ops.append(ops.pop(0))
    verify(graph)
    # a type rule broken after tracing (attributes are immutable: replace them)
    good = store.attrs
    store.attrs = attrs.evolve(good, dtype=index)
    with pytest.raises(VerificationError, match="store"):
        verify(graph)
    store.attrs = good
    # a fold region without its yield
    fold.regions[0].ops.pop()
    with pytest.raises(VerificationError, match="must end with a yield"):
        verify(graph)


def test_every_backend_table_covers_exactly_the_op_table():
    from accy.runtime.interpreter import simt as interpreter
    from accy.codegen import llvm
    from accy.dsl.ops import OPS

    from accy.codegen.nvptx.lowering import NvptxLowering
    from accy.targets import Target
    from accy.dsl.ops import SIMT_OPS, NVPTX_OPS, TILE_OPS
    from accy.codegen.nvptx.tensor_cores import TensorCoreEmitter
    from accy.codegen.nvptx.bulk_copies import BULK_COPY_OPS, BulkCopyEmitter

    # the SIMT lowerings cover the SIMT level; tile ops reach them only after accy.lowering.distribute;
    # tensor-core ops only the interpreter (their reference) and the NVPTX lowering have
    assert SIMT_OPS | TILE_OPS | NVPTX_OPS == set(OPS)
    assert not SIMT_OPS & TILE_OPS and not (SIMT_OPS | TILE_OPS) & NVPTX_OPS
    assert interpreter.IMPLEMENTED == SIMT_OPS | NVPTX_OPS
    assert llvm.IMPLEMENTED == SIMT_OPS
    # NVPTX's table has an emitter of its own for each (the target-neutral table refuses them)
    nvptx = NvptxLowering(Program("dot", PARAMS, pythonic_style).graph, Target.nvptx())
    emitters = nvptx.op_emitters()
    for name in NVPTX_OPS:
        emitter = BulkCopyEmitter if name in BULK_COPY_OPS else TensorCoreEmitter
        assert emitters[name] != nvptx._nvptx_only and emitters[name].__func__ is getattr(emitter, name), name
    # the tables themselves: one entry per pointwise op, no entry for an op that does not exist
    pointwise = {name for name, d in OPS.items() if d.pointwise}
    assert set(interpreter.EVAL) == pointwise and not set(interpreter.EVAL) & interpreter.STRUCTURAL
    assert set(llvm.LOWER) == pointwise | {"cast", "bitcast"} and not set(llvm.LOWER) & llvm.STRUCTURAL


def test_loop_invariant_arithmetic_is_hoisted_but_loads_and_index_division_are_not():
    from accy.dsl.passes import hoist_loop_invariants

    def body(k, args):
        def each(inner, idx):
            i = idx["i"]

            def step(inner, j, acc):
                row = i * 4  # invariant: hoisted to the launch
                risky = args.x[i + 100]  # invariant, but would fail if hoisted out of an empty loop
                quotient = i // (i - i)  # invariant division by zero, same
                return acc + args.x[row + j] + risky + inner.cast(quotient, f32)

            args.dst[i] = inner.fold_range(0, 0, 1, 0.0, step)  # never runs
        k.for_each_1d(axis("i", 3), each)

    program = Program("licm", PARAMS, body)
    graph = hoist_loop_invariants(program.traced_graph)
    fold = next(op for op in graph.body.walk() if op.opcode == "fold")
    inside = [op.opcode for op in fold.regions[0].walk()]
    assert "mul" not in inside and inside.count("load") == 2 and "div" in inside
    dst = np.zeros(3, np.float32)
    program.run([dst, np.zeros(12, np.float32), np.zeros(1, np.float32)])  # no error: nothing ran
    assert dst.tolist() == [0.0, 0.0, 0.0]
