"""Checks out of the hot loop (issue 32): a ``load_tile``/``store_tile`` box touches only
elements inside its tensor's shape, and every launch through accy's runtime checks that a
tensor's layout lies inside its buffer, so the box's accesses are marked ``bounds shape``
and the GPU code checks none of them in the loop; the NVPTX kernel checks each such
tensor's layout once at its entry instead (for callers that launch the PTX themselves).
An access whose mask the kernel wrote (Triton's form) keeps its own check."""

from __future__ import annotations

import re

import numpy as np
import pytest

from accy import axis, bf16, cdiv, f32, kernel, tensor
from accy.codegen.nvptx import toolchain
from accy.codegen.nvptx.sass import disassemble, find_nvdisasm, main_loop, parse
from accy.dsl.ops import Bounds
from accy.dsl.parse import parse as parse_graph
from accy.errors import OutOfBoundsError
from accy.runtime import emulated
from accy.runtime.arguments import bind_arguments
from accy.runtime.tensor_arguments import expand_tensor_arguments


def make_matmul(dtype=bf16, bm=32, bn=32, bk=16, warps=4, num_stages=2):
    @kernel("bounded_matmul", c=tensor(f32, 2), a=tensor(dtype, 2), b=tensor(dtype, 2))
    def matmul(k, p):
        M, K = p.a.shape
        N = p.b.shape[1]

        @k.for_each_tile(grid=(axis("m", cdiv(M, bm)), axis("n", cdiv(N, bn))), warps=warps, num_stages=num_stages)
        def body(t, pid):
            def step(t, k0, acc):
                a = p.a.load_tile((pid["m"] * bm, k0), (bm, bk))
                b = p.b.load_tile((k0, pid["n"] * bn), (bk, bn))
                return t.dot(a, b, acc)

            acc = t.fold_range(0, K, bk, t.zeros((bm, bn), f32), step)
            p.c.store_tile((pid["m"] * bm, pid["n"] * bn), acc)

    return matmul


@kernel(dst=tensor(f32, 2), src=tensor(f32, 2))
def masked_copy(k, p):
    """Triton's form: the mask is the kernel's own, and lets one column past the shape."""
    R, C = p.src.shape

    @k.for_each_tile(grid=(axis("r", R),), warps=1)
    def body(t, pid):
        cols = t.arange(64)
        x = p.src.load((pid["r"], cols), mask=cols < C + 1)
        p.dst.store((pid["r"], cols), x, mask=cols < C)


def memory_ops(graph, opcodes):
    return [op for op in graph.body.walk() if op.opcode in opcodes]


def test_box_accesses_are_marked_and_a_kernels_own_mask_is_not():
    graph = make_matmul().graph
    boxes = memory_ops(graph, ("tile_load", "tile_store"))
    assert len(boxes) == 3 and all(op.attrs.bounds is Bounds.SHAPE for op in boxes)
    assert "bounds shape" in graph.text()
    assert parse_graph(graph.text()).text() == graph.text()
    own = memory_ops(masked_copy.graph, ("tile_load", "tile_store"))
    assert own and all(op.attrs.bounds is Bounds.CHECKED for op in own)
    assert "bounds" not in masked_copy.graph.text()


@pytest.mark.parametrize("dtype, tiles", [(f32, (32, 32, 16, 2)), (bf16, (64, 64, 32, 3))],
                         ids=["loads", "async-copies"])
def test_the_distributed_accesses_keep_the_mark(dtype, tiles):
    bm, bn, bk, stages = tiles
    graph = make_matmul(dtype, bm=bm, bn=bn, bk=bk, num_stages=stages).graph_for("cuda", "sm_80")
    tensors = [op for op in graph.body.walk() if op.opdef.memory and op.attrs.get("buffer") in ("a", "b", "c")]
    assert ("async_copy" in {op.opcode for op in tensors}) == (dtype == bf16)  # f32: FMA, operands loaded
    assert all(op.attrs.bounds is Bounds.SHAPE for op in tensors)
    # the staging arrays' accesses (ldmatrix, element stores) are proven inside them by the
    # index ranges; what the code checks is the entry's layouts (tagged by a tensor's first
    # access) and the grid's divisions
    ops = list(graph.body.walk())
    ir_text = make_matmul(dtype, bm=bm, bn=bn, bk=bk, num_stages=stages).llvm_ir("nvptx", arch="sm_80")
    checked = {ops[int(tag)] for tag in re.findall(r"check_fail_(\d+)", ir_text)}
    assert {op.attrs.get("buffer") for op in checked if op.opdef.memory} == {"a", "b", "c"}
    assert all(op.opcode == "div" or op.attrs.get("bounds") is Bounds.SHAPE for op in checked)


@pytest.mark.skipif(find_nvdisasm() is None or toolchain.find_ptxas() is None,
                    reason="needs ptxas and nvdisasm: pip install nvidia-cuda-nvcc nvidia-cuda-nvdisasm "
                           "(the test extra does)")
def test_the_main_loop_of_a_checked_matmul_reports_nothing():
    ptx = make_matmul(bm=64, bn=64, bk=32, num_stages=3).ptx("sm_80")
    fn = parse(disassemble(toolchain.assemble(ptx, "sm_80")))[0]
    head = fn.labels[next(i.target for n, i in enumerate(fn.instructions) if i.base == "BRA"
                          and i.target in fn.labels and fn.labels[i.target] <= n and any(
                              j.base == "HMMA" for j in fn.instructions[fn.labels[i.target]:n]))]
    trip = main_loop(fn)
    assert trip.tensor == 16  # 64x64x32 on 4 warps: 16 rows x 64 columns x 32 deep per warp
    latch = fn.instructions.index(trip.path[-1])
    assert not any(i.reports for i in fn.instructions[head:latch + 1])  # no check left in the loop
    assert any(i.reports for i in fn.instructions[:head])  # the entry's layout check


def forged_launch(shape_scalar: str, value: int):
    """The tile matmul launched on the emulator with one hidden layout scalar forged, as a
    caller launching the PTX without accy's runtime could: (error raised, c afterwards)."""
    program = make_matmul()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((40, 24)).astype(bf16.numpy)
    b = rng.standard_normal((24, 36)).astype(bf16.numpy)
    c = np.full((40, 36), np.nan, np.float32)
    graph = program.graph_for("cuda", "sm_80")
    binding = bind_arguments(graph, expand_tensor_arguments(graph, [c, a, b]))
    binding.scalars[shape_scalar] = value
    with pytest.raises(OutOfBoundsError) as caught:
        emulated.execute(graph, binding, program.launch(args=[c, a, b]))
    return str(caught.value), c


def test_a_layout_past_its_buffer_stops_the_launch_at_entry():
    message, c = forged_launch("a__shape0", 41)  # a is 40x24: row 40 is past its 960 elements
    assert "load from 'a': index 983 is out of bounds for 960 elements" in message
    assert np.isnan(c).all()
    message, c = forged_launch("c__stride0", 37)  # c's rows 37 apart: its last element at 39*37+35
    assert "store to 'c': index 1478 is out of bounds for 1440 elements" in message
    assert np.isnan(c).all()


def test_a_layout_before_its_buffer_stops_the_launch_at_entry():
    message, c = forged_launch("b__offset", -1)
    assert "load from 'b': index -1 is out of bounds" in message
    assert np.isnan(c).all()


@pytest.mark.parametrize("backend", ["numpy", "llvm", "ptx"])
def test_a_kernels_own_mask_past_the_shape_still_fails(backend):
    src = np.arange(3 * 40, dtype=np.float32).reshape(3, 40)
    dst = np.full((3, 40), -1.0, np.float32)
    with pytest.raises(OutOfBoundsError, match="src"):
        masked_copy.run([dst, src], backend=backend)
    assert (dst == -1.0).all()


@pytest.mark.parametrize("backend", ["numpy", "llvm", "ptx"])
def test_box_accesses_of_strided_and_reversed_views_agree(backend):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((50, 34)).astype(bf16.numpy)[::-1, ::2]  # negative and non-unit strides
    b = np.ascontiguousarray(rng.standard_normal((33, 17)).astype(bf16.numpy)).T  # (17, 33) transposed
    c = np.full((50, 33), np.nan, np.float32)
    make_matmul().run([c, a, b], backend=backend)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, exact, rtol=1e-5, atol=1e-4)


def test_a_shift_by_a_constant_narrows_an_index_range():
    """The lane arithmetic of the staging arrays' accesses shifts thread numbers right: the
    ranges follow (floor division by a power of two), so those accesses need no check."""
    from accy.dsl.analysis.intervals import index_ranges
    from accy.dsl.ir import constant_of

    graph = make_matmul(bm=64, bn=64, bk=32, num_stages=3).graph_for("cuda", "sm_80")
    ranges = index_ranges(graph)
    shifts = [op for op in graph.body.walk() if op.opcode == "shr" and op.result.type.is_index
              and None not in ranges.get(op.operands[0], (None, None)) and constant_of(op.operands[1]) is not None]
    assert shifts
    for op in shifts:
        (lo, hi), n = ranges[op.operands[0]], constant_of(op.operands[1])
        assert ranges[op.result] == (lo >> n, hi >> n)


# -- a kernel's own masks past the shape, drawn at random: every backend stops, nothing written --------


def _wrong_mask_program(kind: str, block: tuple[int, int], slack: tuple[int, int]):
    """A program per (row block, column block) of ``x`` touching its box where ``rows < R +
    slack[0]`` and ``cols < C + slack[1]``: past the shape wherever a box reaches that far."""
    br, bc = block
    sr, sc = slack

    @kernel(out=tensor(f32, 2), x=tensor(f32, 2))
    def wrong(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=(axis("r", cdiv(R, br)), axis("c", cdiv(C, bc))), warps=1)
        def body(t, pid):
            rows = pid["r"] * br + t.arange(br)
            cols = pid["c"] * bc + t.arange(bc)
            mask = (rows[:, None] < R + sr) & (cols[None, :] < C + sc)
            if kind == "load":
                p.out.store((rows[:, None], cols[None, :]), p.x.load((rows[:, None], cols[None, :]), mask=mask),
                            mask=(rows[:, None] < R) & (cols[None, :] < C))
            elif kind == "store":
                p.out.store((rows[:, None], cols[None, :]), t.full((br, bc), 1.0, f32), mask=mask)
            else:
                p.out.atomic_add((rows[:, None], cols[None, :]), t.full((br, bc), 1.0, f32), mask=mask)

    return wrong


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("kind", ["load", "store", "atomic"])
def test_a_kernels_own_mask_past_the_shape_stops_every_backend(kind, seed):
    rng = np.random.default_rng(seed)
    block = (int(rng.choice([1, 2, 4, 8])), int(rng.choice([4, 8, 16])))
    shape = (int(rng.integers(1, 12)), int(rng.integers(1, 20)))
    slack = [0, 0]
    slack[int(rng.integers(0, 2))] = int(rng.integers(1, 4))
    reach = [-(-n // b) * b for n, b in zip(shape, block)]  # the boxes' extent
    past = any(min(r, n + s) > n for r, n, s in zip(reach, shape, slack))
    program = _wrong_mask_program(kind, block, tuple(slack))
    base = rng.standard_normal((shape[1] + 3, shape[0] * 2)).astype(np.float32)
    x = base[:shape[1], ::2].T  # a transposed, strided view
    for backend in ("numpy", "llvm", "ptx"):
        out = np.full(shape, -7.0, np.float32)
        if past:
            name = "x" if kind == "load" else "out"
            with pytest.raises(OutOfBoundsError, match=f"'{name}'"):
                program.run([out, x], backend=backend)
            assert (out == -7.0).all(), f"{backend} wrote before it stopped"
        else:  # every box ends inside the shape: nothing is past it, the run is an ordinary one
            program.run([out, x], backend=backend)
