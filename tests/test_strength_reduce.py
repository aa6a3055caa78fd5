"""The tile pipeline's strength reduction (accy.lowering.strength_reduce): a loop's index
products by a stride become values the loop carries, and every backend computes the same."""

import os
import sys

import numpy as np
import pytest

import accy
from accy import bf16
from accy.lowering.strength_reduce import strength_reduce
from accy.runtime import bind_arguments, get_backend, resolve_launch
from accy.targets import Target

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from tile_matmul import make_matmul  # noqa: E402

# a thread sums x[(i + 1) * s + t], x[(t + i + 1) * s], x[i * 3] and, in an inner loop over j,
# x[(j + i + 1) * s], over i = 0, 2, 4, ... < n: the first and the last are reduced (one value
# carried for both), the second keeps its multiply (its offset t is the thread's, from before
# the loop) and so does the third (a product by a constant)
STRIDED = """
kernel @strided(%dst: buffer<f32, ?>, %x: buffer<f32, ?>, %s: scalar<index>, %n: scalar<index>) {
  %0 = const 1 : index
  %1 = const 0 : index
  %2 = const 0.0 : f32
  %3 = const 3 : index
  for_each_block (%4 = b<%0>) threads (%5 = t<8>) {
    %6 = fold %1 to %n step 2 init(%2) -> (f32) {
    ^(%7: index, %8: f32):
      %9 = add %7, %0 : index
      %10 = mul %9, %s : index
      %11 = add %10, %5 : index
      %12 = load %x[%11] : f32
      %13 = add %5, %9 : index
      %14 = mul %13, %s : index
      %15 = load %x[%14] : f32
      %16 = mul %7, %3 : index
      %17 = load %x[%16] : f32
      %18 = add %8, %12 : f32
      %19 = add %18, %15 : f32
      %20 = add %19, %17 : f32
      %21 = fold %1 to %3 step 1 init(%20) -> (f32) {
      ^(%22: index, %23: f32):
        %24 = add %22, %9 : index
        %25 = mul %24, %s : index
        %26 = load %x[%25] : f32
        %27 = add %23, %26 : f32
        yield %27
      }
      yield %21
    }
    store %dst[%5] = %6 : f32
  }
}
"""


def _fold(graph):
    return next(op for op in graph.body.walk() if op.opcode == "fold")


def _products_of_the_index(fold):
    """The muls of the loop's body computed from its index (through adds)."""
    derived, found = {fold.regions[0].args[0]}, []
    for op in fold.regions[0].walk():
        if op.opcode in ("add", "mul") and derived & set(op.operands):
            derived.update(op.results)
            if op.opcode == "mul" and not any(v.op is not None and v.op.opcode == "const" for v in op.operands):
                found.append(op)
    return found


def test_a_product_by_a_stride_is_carried_and_the_others_stay():
    graph = accy.parse(STRIDED)
    reduced = strength_reduce(graph)
    before, after = _fold(graph), _fold(reduced)
    assert len(_products_of_the_index(before)) == 3
    (kept,) = _products_of_the_index(after)  # (t + i + 1) * s
    assert kept.operands[0].op.operands[0] is reduced.body.ops[-1].regions[0].args[1]  # t
    # (i + 1) * s, for the first product and the inner loop's: one value carried
    assert len(after.regions[0].args) == len(before.regions[0].args) + 1
    assert any(op.opcode == "mul" and op.operands[0] is after.regions[0].args[0] for op in after.regions[0].ops)
    assert accy.parse(reduced.text()).text() == reduced.text()


@pytest.mark.parametrize("n", [0, 1, 9, 10])
def test_the_reduced_loop_computes_what_the_loop_does_on_every_backend(n, backend):
    graph = accy.parse(STRIDED)
    x = np.random.default_rng(n).standard_normal(100).astype(np.float32)
    outputs = []
    for g in (graph, strength_reduce(graph)):
        dst = np.zeros(8, np.float32)
        binding = bind_arguments(g, [dst, x, 5, n])
        get_backend(backend).execute(g, binding, resolve_launch(g, accy.ThreadBlocks(8), binding, None))
        outputs.append(dst)
    t = np.arange(8)
    want = sum((x[(i + 1) * 5 + t] + x[(t + i + 1) * 5] + x[i * 3] + sum(x[(j + i + 1) * 5] for j in range(3))
                for i in range(0, n, 2)), np.zeros(8, np.float32))
    np.testing.assert_allclose(outputs[0], want, rtol=1e-6)
    assert outputs[0].tobytes() == outputs[1].tobytes()


def test_the_tile_pipeline_reduces_the_matmul_loops_operand_rows():
    """B's rows k0 + r of the main loop, times B's row stride: carried, no multiply a trip."""
    graph = make_matmul(bf16, 64, 64, 32, warps=4, num_stages=3).graph_for("cuda", "sm_80")
    main = next(op for op in graph.body.walk() if op.opcode == "fold" and any(o.opcode == "mma" for o in op.walk()))
    assert _products_of_the_index(main) == []
    assert "strength-reduce" in Target.nvptx("sm_80").passes
