"""32-bit index arithmetic on NVPTX (accy.lowering.narrow_indices): the interval proof over a
launch's run-time values, the narrowed graph, and the launch's choice between it and the
64-bit graph, which the ``ptx`` backend makes exactly as ``cuda`` does."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from test_tile_bounds import masked_copy  # Triton's form: its mask lets one column past the shape

from accy import axis, bf16, f32, index, kernel, scalar, tensor, u8
from accy.dsl.analysis.intervals import index_ranges
from accy.dsl.parse import parse
from accy.dsl.passes import verify
from accy.errors import OutOfBoundsError
from accy.library.attention import ScaledDotProduct
from accy.library.attention_tile import AttentionTiles, scaled_dot_product_tile
from accy.lowering import narrow_indices as narrowing
from accy.lowering.narrow_indices import fits_in_32_bits, known_values, narrow_indices

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from tile_matmul import make_matmul  # noqa: E402
from tile_softmax import make_softmax  # noqa: E402

ARCH = "sm_80"


def graph_of(program):
    return program.graph_for("ptx", ARCH)


def index_values(graph):
    for op in graph.body.walk():
        for region in op.regions:
            yield from (a for a in region.args if a.type == index)
        yield from (r for r in op.results if r.type == index)


def matmul_scalars(graph, m, n, k):
    shapes = {"c": (m, n), "a": (m, k), "b": (k, n)}
    out = {}
    for p in graph.scalars:
        name, _, field = p.name.partition("__")
        if field.startswith("shape"):
            out[p.name] = shapes[name][int(field[-1])]
        elif field == "stride0":
            out[p.name] = shapes[name][1]
        elif field == "stride1":
            out[p.name] = 1
        else:
            out[p.name] = 0
    return out


# -- the intervals ------------------------------------------------------------------------------


def test_known_run_time_values_bound_every_index_and_the_pipeline_stage_carry_converges():
    graph = graph_of(make_matmul(bf16, 64, 64, 32, warps=4, num_stages=3))
    fold = next(op for op in graph.body.walk() if op.opcode == "fold" and any(o.opcode == "mma" for o in op.walk()))
    region = fold.regions[0]
    # the software pipeline's stage counter: the carry it yields by a select (0 after the last stage)
    ((k, stage),) = [(k, arg) for k, (arg, grown) in enumerate(zip(region.args[1:], region.terminator.operands))
                     if grown.op is not None and grown.op.opcode == "select"]
    assert stage.type == index
    static = index_ranges(graph)
    scalars = matmul_scalars(graph, 100, 90, 70)
    known = known_values(graph, scalars, {"c": 9000, "a": 7000, "b": 6300}, (2, 2))
    ranges = index_ranges(graph, known)
    lo, hi = ranges[stage]
    assert lo is not None and hi is not None and 0 <= lo <= hi <= 3
    assert ranges[fold.results[k]] == ranges[stage]
    assert all(None not in ranges.get(v, (None, None)) for v in index_values(graph))
    # without the launch's values the strides and shapes are unknown: so are the offsets
    assert any(None in static.get(v, (None, None)) for v in index_values(graph))


def _carrying(grow):
    @kernel(dst=tensor(f32, 1), src=tensor(f32, 1))
    def carrying(k, p):
        (n,) = p.src.shape

        @k.for_each_tile(grid=(axis("i", 1),), warps=1)
        def body(t, pid):
            total = t.fold_range(0, 40, 1, pid["i"] * 0, lambda t, j, carry: grow(carry))
            cols = t.arange(16)
            p.dst.store((cols,), p.src.load((cols + total - 120,), mask=cols < n), mask=cols < n)

    return carrying


def _carry_ranges(program):
    graph = graph_of(program)
    fold = next(op for op in graph.body.walk() if op.opcode == "fold" and any(r.type == index for r in op.results))
    known = known_values(graph, {}, {"dst": 16, "src": 16}, (1,))
    ranges = index_ranges(graph, known)
    return graph, ranges.get(fold.regions[0].args[1], (None, None)), ranges.get(fold.results[0], (None, None))


def test_a_carry_that_grows_by_a_step_is_bounded_by_the_trips():
    """``carry + 3`` over 40 trips (a carried offset, a strength-reduced product): 0 to 117
    inside the loop, at most 120 after it."""
    _, inside, after = _carry_ranges(_carrying(lambda carry: carry + 3))
    assert inside == (0, 117) and after == (0, 120)


def test_a_carry_that_grows_otherwise_stays_unbounded():
    """``2 * carry + 1``: no step, no fixpoint within the passes: unbounded, and the launch 64-bit."""
    graph, inside, after = _carry_ranges(_carrying(lambda carry: carry * 2 + 1))
    assert inside == (None, None) and after == (None, None)
    assert not fits_in_32_bits(graph, {}, {"dst": 16, "src": 16}, (1,))


BRANCHY = """kernel @branchy(%x: buffer<f32, ?>, %n: scalar<index>) {
  %0 = const 0 : index
  %1 = const 5 : index
  %2 = const 9 : index
  for_each_block (%3 = b<%n>) threads (%4 = thread<32>) {
    %5 = lt %4, %1 : bool
    %6 = if %5 -> (index) {
      yield %1
    } else {
      yield %2
    }
    %7 = fold %0 to %0 step 1 init(%0) -> (index) {
    ^(%8: index, %9: index):
      %10 = add %9, %8 : index
      yield %10
    }
    %11 = add %6, %7 : index
    %12 = load %x[%11] : f32
    store %x[%11] = %12 : f32
  }
}
"""


def test_a_branchs_index_result_is_the_union_of_its_yields_and_a_loop_without_trips_bounds_nothing():
    graph = parse(BRANCHY)
    ranges = index_ranges(graph)
    branch, fold, total = (op for op in graph.body.walk() if op.opcode in ("if", "fold") or
                           (op.opcode == "add" and op.block is graph.launch_op.regions[0]))
    assert ranges[branch.result] == (5, 9)
    assert ranges[fold.regions[0].args[0]] == (0, 0)  # never runs: any interval holds
    assert ranges[fold.result] == (0, 0)
    assert ranges[total.result] == (5, 9)
    assert fits_in_32_bits(graph, {"n": 4}, {"x": 10}, (4,))


# -- the narrowed graph -------------------------------------------------------------------------


def test_the_narrowed_matmul_verifies_and_keeps_only_casts_and_required_indices():
    graph = graph_of(make_matmul(bf16, 128, 128, 64, warps=8, num_stages=3))
    narrow = verify(narrow_indices(graph))
    users: dict = {}
    for op in narrow.body.walk():
        for v in op.operands:
            users.setdefault(v, []).append(op)
    wide_arithmetic = [op for op in narrow.body.walk() if op.opcode in narrowing.ARITHMETIC and op.result.type == index]
    # what stays 64-bit forms an address (or a loop bound): some user is no comparison
    assert all(any(u.opcode not in narrowing.COMPARISONS for u in users[op.result]) for op in wide_arithmetic)
    i32_ops = sum(1 for op in narrow.body.walk() if len(op.results) == 1 and op.result.type.name == "i32")
    assert i32_ops > 100 and len(wide_arithmetic) < sum(
        1 for op in graph.body.walk() if op.opcode in narrowing.ARITHMETIC and op.result.type == index)
    # every comparison of indices compares 32-bit values
    compares = [op for op in narrow.body.walk() if op.opcode in narrowing.COMPARISONS]
    assert compares and all(v.type.name != "index" for op in compares for v in op.operands)


def run_both(program, args, monkeypatch, backend="ptx"):
    """The program's outputs on ``backend`` with the launch's choice, then with the 64-bit graph."""
    narrowed = [a.copy() for a in args]
    program.run(narrowed, backend=backend)
    wide = [a.copy() for a in args]
    with monkeypatch.context() as m:
        m.setattr(narrowing, "launch_graph", lambda graph, binding, launch: graph)
        program.run(wide, backend=backend)
    return narrowed, wide


@pytest.mark.parametrize("case", ["f32", "bf16", "transposed", "negative-stride"])
def test_the_narrowed_matmul_runs_bit_identical_to_the_64_bit_one(case, monkeypatch):
    rng = np.random.default_rng(3)
    dtype = bf16 if case != "f32" else f32
    program = make_matmul(dtype, 64, 64, 32, warps=4, num_stages=2)
    m, n, k = 130, 200, 135
    a = rng.standard_normal((m, k)).astype(dtype.numpy)
    b = rng.standard_normal((k, n)).astype(dtype.numpy)
    if case == "transposed":
        b = np.ascontiguousarray(b.T).T
    elif case == "negative-stride":
        a = np.ascontiguousarray(a[::-1])[::-1]
    c = np.full((m, n), np.nan, np.float32)
    assert program.indices_32_bit([c, a, b], ARCH)
    (ours, _, _), (theirs, _, _) = run_both(program, [c, a, b], monkeypatch)
    np.testing.assert_array_equal(ours, theirs)
    reference = c.copy()
    program.run([reference, a, b], backend="numpy")
    np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=1e-3)


def test_the_narrowed_softmax_runs_bit_identical_to_the_64_bit_one(monkeypatch):
    program = make_softmax()
    x = np.random.default_rng(4).standard_normal((37, 300)).astype(np.float32)
    dst = np.full_like(x, np.nan)
    assert program.indices_32_bit([dst, x], ARCH)
    (ours, _), (theirs, _) = run_both(program, [dst, x], monkeypatch)
    np.testing.assert_array_equal(ours, theirs)
    reference = dst.copy()
    program.run([reference, x], backend="numpy")
    np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-6)


def test_the_narrowed_attention_runs_bit_identical_to_the_64_bit_one(monkeypatch):
    shape = (1, 8, 8, 4, 4)
    entry = scaled_dot_product_tile(ScaledDotProduct(*shape, causal=True), tiles=AttentionTiles(8, 8))
    rng = np.random.default_rng(5)
    q, key, v = (rng.standard_normal(s).astype(np.float32) for s in ((1, 8, 4), (1, 8, 4), (1, 8, 4)))
    dst = np.zeros((1, 8, 4), np.float32)
    assert entry.program.indices_32_bit([dst, q, key, v], ARCH)
    (ours, *_), (theirs, *_) = run_both(entry, [dst, q, key, v], monkeypatch)
    np.testing.assert_array_equal(ours, theirs)
    reference = dst.copy()
    entry.run([reference, q, key, v], backend="numpy")
    np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-5)


# -- the launch's choice ------------------------------------------------------------------------


@kernel(dst=tensor(f32, 2), src=tensor(f32, 2), shift=scalar(index))
def shifted_copy(k, p):
    """The mask compares ``cols + shift < C + shift``: a shift near 2**31 leaves the data small
    but the compared values past 32 bits."""
    R, C = p.src.shape

    @k.for_each_tile(grid=(axis("r", R),), warps=1)
    def body(t, pid):
        cols = t.arange(64)
        inside = cols + p.shift < C + p.shift
        x = p.src.load((pid["r"], cols), mask=inside)
        p.dst.store((pid["r"], cols), x, mask=inside)


def s64_ops(ptx: str, opcode: str) -> int:
    """PTX instructions ``opcode``.*.s64 (64-bit integer arithmetic or compares)."""
    return sum(w[0].startswith(opcode + ".") and w[0].endswith(".s64") for w in map(str.split, ptx.splitlines()) if w)


def test_a_small_launch_runs_32_bit_indices_and_a_failing_proof_the_64_bit_kernel():
    src = np.arange(3 * 40, dtype=np.float32).reshape(3, 40)
    small, large = (np.zeros_like(src), 5), (np.zeros_like(src), 2**31 - 10)
    assert shifted_copy.indices_32_bit([small[0], src, small[1]], ARCH)
    assert not shifted_copy.indices_32_bit([large[0], src, large[1]], ARCH)
    narrow_ptx = shifted_copy.ptx(ARCH, args=[small[0], src, small[1]])
    wide_ptx = shifted_copy.ptx(ARCH, args=[large[0], src, large[1]])
    assert wide_ptx == shifted_copy.ptx(ARCH)  # the 64-bit kernel, exactly as today
    assert s64_ops(narrow_ptx, "setp") < s64_ops(wide_ptx, "setp")  # the mask compares 32-bit values
    for dst, shift in (small, large):
        shifted_copy.run([dst, src, shift], backend="ptx")
        np.testing.assert_array_equal(dst, src)


def test_the_bench_matmul_at_4096_runs_32_bit_indices_with_fewer_64_bit_adds():
    program = make_matmul(bf16, 128, 128, 64, warps=8, num_stages=3)
    n = 4096
    args = [np.zeros((n, n), np.float32), np.ones((n, n), bf16.numpy), np.ones((n, n), bf16.numpy)]
    assert program.indices_32_bit(args, ARCH)
    narrow_ptx, wide_ptx = program.ptx(ARCH, args=args), program.ptx(ARCH)
    assert s64_ops(narrow_ptx, "setp") < s64_ops(wide_ptx, "setp") // 2
    assert s64_ops(narrow_ptx, "add") < s64_ops(wide_ptx, "add")


def test_large_buffers_fail_the_proof():
    graph = graph_of(make_matmul(bf16, 64, 64, 32, warps=4, num_stages=2))
    m = n = k = 2**16  # 2**32 elements: offsets past 32 bits
    sizes = {"c": m * n, "a": m * k, "b": k * n}
    assert not fits_in_32_bits(graph, matmul_scalars(graph, m, n, k), sizes, (m // 64, n // 64))
    m = n = k = 2**14
    sizes = {"c": m * n, "a": m * k, "b": k * n}
    assert fits_in_32_bits(graph, matmul_scalars(graph, m, n, k), sizes, (m // 64, n // 64))


def test_an_access_out_of_bounds_still_raises_naming_the_buffer_in_the_narrowed_kernel():
    src = np.arange(3 * 40, dtype=np.float32).reshape(3, 40)
    dst = np.full((3, 40), -1.0, np.float32)
    assert masked_copy.indices_32_bit([dst, src], ARCH)
    with pytest.raises(OutOfBoundsError, match="src"):
        masked_copy.run([dst, src], backend="ptx")
    assert (dst == -1.0).all()


@kernel(dst=tensor(f32, 1), src=tensor(f32, 1), skip=scalar(u8))
def skipping_copy(k, p):
    """Indices from a bool and a u8 cast to index: within [0, 1] and [0, 255] whatever they are."""
    (n,) = p.src.shape

    @k.for_each_tile(grid=(axis("i", 1),), warps=1)
    def body(t, pid):
        cols = t.arange(32)
        at = cols + (cols == 3).cast(index) * 0 + p.skip.cast(index) - p.skip.cast(index)
        p.dst.store((cols,), p.src.load((at,), mask=at < n), mask=cols < n)


def test_casts_from_bool_and_unsigned_types_are_bounded_by_their_types(monkeypatch):
    graph = graph_of(skipping_copy)
    ranges = index_ranges(graph)
    casts = [op for op in graph.body.walk() if op.opcode == "cast" and op.result.type == index]
    assert {ranges[op.result] for op in casts} >= {(0, 255)}
    src = np.arange(20, dtype=np.float32)
    dst = np.zeros_like(src)
    assert skipping_copy.indices_32_bit([dst, src, np.uint8(200)], ARCH)
    ours, theirs = run_both(skipping_copy, [dst, src, np.uint8(200)], monkeypatch)
    np.testing.assert_array_equal(ours[0], src)
    np.testing.assert_array_equal(theirs[0], src)


@kernel(dst=tensor(f32, 1), src=tensor(f32, 2))
def last_positive(k, p):
    """A row's last positive column: a max of index values across the lanes (shuffles)."""
    R, C = p.src.shape

    @k.for_each_tile(grid=(axis("r", R),), warps=1)
    def body(t, pid):
        cols = t.arange(64)
        x = p.src.load((pid["r"], cols), mask=cols < C, other=-1.0)
        best = t.max(t.where(x > 0, cols, cols * 0 - 1), axis=0)
        at = t.arange(1) + pid["r"]
        p.dst.store((at,), p.src.load((at, at * 0 + best), mask=best >= 0, other=0.0), mask=at < R)


def test_a_shuffled_index_keeps_the_interval_of_the_value_every_lane_holds():
    graph = graph_of(last_positive)
    ranges = index_ranges(graph)
    shuffles = [op for op in graph.body.walk() if op.opcode == "shuffle" and op.result.type == index]
    assert shuffles
    for op in shuffles:
        value = ranges.get(op.operands[0], (None, None))
        assert ranges.get(op.result, (None, None)) == value
    assert any(None not in ranges.get(op.result, (None, None)) for op in shuffles)


# an i32 carried by acc + 2**30 over 4 trips wraps at the third: no interval may hold it (the
# comparison acc >= 0 is false at trip 2, so fold-ranges must not decide it)
WRAPPING = """kernel @w(%dst: buffer<f32, ?>) {
  %0 = const 0 : index
  %1 = const 4 : index
  %2 = const 0 : i32
  %3 = const 1073741824 : i32
  %4 = const 1 : index
  %5 = const 1.0 : f32
  %6 = const 0.0 : f32
  for_each_block (%7 = b<%4>) threads (%8 = thread<1>) {
    %9, %10 = fold %0 to %1 step 1 init(%2, %6) -> (i32, f32) {
    ^(%11: index, %12: i32, %13: f32):
      %14 = add %12, %3 : i32
      %15 = cast %12 : i32 -> index
      %16 = ge %15, %0 : bool
      %17 = select %16, %5, %6 : f32
      %18 = add %13, %17 : f32
      yield %14, %18
    }
    store %dst[%8] = %10 : f32
  }
}
"""


def test_a_carry_that_would_wrap_in_its_type_stays_unbounded_and_its_comparisons_undecided():
    from accy.dsl.passes import fold_decided_comparisons

    graph = parse(WRAPPING)
    fold = next(op for op in graph.body.walk() if op.opcode == "fold")
    assert index_ranges(graph).get(fold.regions[0].args[1], (None, None)) == (None, None)
    assert fold_decided_comparisons(graph).text() == graph.text()


# a loop bound loaded from memory: the launch need not bound it to run its 32-bit variant
LOADED_BOUND = """kernel @k(%dst: buffer<f32, ?>, %m: buffer<index, ?>) {
  %0 = const 0 : index
  %1 = const 1 : index
  %2 = const 0.0 : f32
  %3 = const 1.0 : f32
  for_each_block (%4 = b<%1>) threads (%5 = t<4>) {
    %6 = load %m[%0] : index
    %7 = fold %0 to %6 step 1 init(%2) -> (f32) {
    ^(%8: index, %9: f32):
      %10 = add %9, %3 : f32
      yield %10
    }
    %11 = lt %5, %1 : bool
    %12 = select %11, %7, %2 : f32
    store %dst[%5] = %12 : f32
  }
}
"""


def test_a_loop_bound_loaded_from_memory_stays_64_bit_and_the_launch_32_bit():
    graph = parse(LOADED_BOUND)
    assert fits_in_32_bits(graph, {}, {"dst": 4, "m": 1}, (1,))
    narrowed = narrow_indices(graph)
    fold = next(op for op in narrowed.body.walk() if op.opcode == "fold")
    assert fold.operands[1].op.opcode == "load"  # the bound as loaded: no 32-bit form of it
