"""Grids of more than three axes (issue 33, item 8): a tile or block launch takes any number of
grid axes; a GPU launch folds the first ones onto its x dimension (accy.dsl.schedule.axes_on_x)
and each program still sees its own index along every named axis.

Every kernel runs on each CPU backend (numpy, llvm, ptx on the emulator) against a NumPy
reference: each program writes its coordinates at its own place and counts its runs with an
atomic, so a program run twice, skipped or given another's indices shows."""

import math

import numpy as np
import pytest

from accy import axis, cdiv, f32, i32, index, kernel, scalar, tensor
from accy.dsl.schedule import Limits, axes_on_x, gpu_grid
from accy.errors import LaunchError, OutOfBoundsError, TraceError
from accy.lowering import narrow_indices as narrowing

NAMES = "abcdef"


def extents_parameters(rank: int) -> dict:
    """The grid's extents, run-time scalars (tensors have at most 4 dimensions)."""
    return {name: scalar(index) for name in NAMES[:rank]}


def row_of(p, point):
    """The row of ``out`` a program owns: its point numbered with the last axis fastest (as
    NumPy's C order; not the fold's order, the first axis fastest)."""
    row = point[0]
    for name, coordinate in zip(NAMES[1:], point[1:]):
        row = row * getattr(p, name) + coordinate
    return row


def coordinates_tile_kernel(rank: int):
    """One program per point of a ``rank``-axis grid: program (i0, ..., i_{n-1}) writes
    out[r, k] = i_k and adds 1 to runs[r], r its point's number in C order."""
    names = NAMES[:rank]

    @kernel(f"coordinates_{rank}", out=tensor(i32, 2), runs=tensor(i32, 1), **extents_parameters(rank))
    def coordinates(k, p):
        @k.for_each_tile(grid=tuple(axis(name, getattr(p, name)) for name in names), warps=1)
        def program(t, pid):
            point = tuple(pid[name] for name in names)
            row = row_of(p, point)
            for position, name in enumerate(names):
                p.out.store((row, position), pid[name])
            p.runs.atomic_add(row, 1)

    return coordinates


def coordinates_block_kernel(rank: int):
    """As :func:`coordinates_tile_kernel`, one block of ``rank`` threads per point: thread k
    writes the block's index along axis k, thread 0 counts the block's runs."""
    names = NAMES[:rank]

    @kernel(f"block_coordinates_{rank}", out=tensor(i32, 2), runs=tensor(i32, 1), **extents_parameters(rank))
    def coordinates(k, p):
        @k.for_each_block(grid=tuple(axis(name, getattr(p, name)) for name in names), threads=axis("t", rank))
        def body(inner, block, thread):
            row = row_of(p, tuple(block[name] for name in names))
            mine = block[names[-1]]
            for position in reversed(range(rank - 1)):
                mine = inner.select(thread["t"] == position, block[names[position]], mine)
            p.out.store((row, thread["t"]), mine)
            inner.if_(thread["t"] == 0, lambda then: p.runs.atomic_add(row, 1))

    return coordinates


def expected_coordinates(extents):
    """Row r of out holds the point numbered r in C order; every program ran once."""
    points = np.indices(extents, dtype=np.int32).reshape(len(extents), -1).T
    return points, np.ones(math.prod(extents), np.int32)


def run_args(extents):
    return [np.full((math.prod(extents), len(extents)), -1, np.int32), np.zeros(math.prod(extents), np.int32),
            *extents]


def check_every_program_ran_once(program, extents, backend):
    out, runs, *_ = args = run_args(extents)
    program.run(args, backend=backend)
    expected_out, expected_runs = expected_coordinates(extents)
    np.testing.assert_array_equal(runs, expected_runs)
    np.testing.assert_array_equal(out, expected_out)


# 4, 5 and 6 axes; the grid's x dimension then carries 2, 3 and 4 of them
GRIDS = [(3, 2, 4, 5), (2, 3, 1, 4, 3), (2, 1, 3, 2, 2, 3)]


@pytest.mark.parametrize("extents", GRIDS, ids=lambda e: f"{len(e)}-axes")
def test_every_program_of_a_tile_grid_of_many_axes_runs_once_with_its_own_indices(backend, extents):
    check_every_program_ran_once(coordinates_tile_kernel(len(extents)), extents, backend)


@pytest.mark.parametrize("extents", GRIDS[:2], ids=lambda e: f"{len(e)}-axes")
def test_every_block_of_a_block_grid_of_many_axes_runs_once_with_its_own_indices(backend, extents):
    check_every_program_ran_once(coordinates_block_kernel(len(extents)), extents, backend)


@pytest.mark.parametrize("extents", [(1, 1, 1, 1), (2, 0, 3, 2), (0, 2, 2, 2), (2, 2, 3, 0), (1, 3, 1, 1, 2)])
def test_grids_with_extents_of_zero_and_one(backend, extents):
    """A zero extent anywhere launches nothing (and divides by nothing); ones fold to nothing."""
    check_every_program_ran_once(coordinates_tile_kernel(len(extents)), extents, backend)


@pytest.mark.parametrize("make", [coordinates_tile_kernel, coordinates_block_kernel], ids=["tile", "block"])
def test_the_64_bit_ptx_decodes_the_folded_axes_too(make, monkeypatch):
    """The ptx backend runs the 32-bit variant where a launch's indices fit (all of these do):
    here the 64-bit PTX, whose decode divides 64-bit values."""
    monkeypatch.setattr(narrowing, "launch_graph", lambda graph, binding, launch: graph)
    extents = (2, 3, 1, 4, 3)
    check_every_program_ran_once(make(len(extents)), extents, "ptx")


def test_the_same_kernel_runs_on_grids_of_other_extents(backend):
    """The extents are run-time values: one compiled kernel, every shape."""
    program = coordinates_tile_kernel(4)
    for extents in [(2, 3, 2, 2), (5, 1, 2, 3), (1, 4, 3, 1)]:
        check_every_program_ran_once(program, extents, backend)


# -- RoPE on (batch, sequence, head, head dimension) with a 4-axis grid ---------------------------

ROWS, HALF_COLUMNS = 4, 8  # per program: positions along S, and pairs along D


@kernel(out=tensor(f32, 4), x=tensor(f32, 4), cos=tensor(f32, 2), sin=tensor(f32, 2))
def rope(k, p):
    """Rotary embedding, rotating halves: out[..., :D/2] = x1 cos - x2 sin and out[..., D/2:] =
    x1 sin + x2 cos, with x1, x2 the halves of x[b, s, h, :] and cos, sin of shape (S, D/2)."""
    B, S, H, D = p.x.shape
    half = D // 2
    grid = (axis("b", B), axis("s", cdiv(S, ROWS)), axis("h", H), axis("d", cdiv(half, HALF_COLUMNS)))

    @k.for_each_tile(grid=grid, warps=1)
    def program(t, pid):
        s = pid["s"] * ROWS + t.arange(ROWS)[:, None]
        d = pid["d"] * HALF_COLUMNS + t.arange(HALF_COLUMNS)[None, :]
        inside = (s < S) & (d < half)
        b, h = pid["b"], pid["h"]
        x1 = p.x.load((b, s, h, d), mask=inside)
        x2 = p.x.load((b, s, h, d + half), mask=inside)
        cos = p.cos.load((s, d), mask=inside)
        sin = p.sin.load((s, d), mask=inside)
        p.out.store((b, s, h, d), x1 * cos - x2 * sin, mask=inside)
        p.out.store((b, s, h, d + half), x1 * sin + x2 * cos, mask=inside)


def rope_reference(x, cos, sin):
    x = x.astype(np.float64)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[None, :, None, :].astype(np.float64), sin[None, :, None, :].astype(np.float64)
    return np.concatenate([x1 * c - x2 * s, x1 * s + x2 * c], axis=-1)


def test_rope_on_a_four_axis_grid_matches_numpy(backend, rng):
    B, S, H, D = 2, 11, 5, 56  # ragged along S and D: 2 x 3 x 5 x 4 programs (no two axes alike)
    x = rng.standard_normal((B, S, H, D)).astype(np.float32)
    angles = rng.uniform(0, 2 * np.pi, (S, D // 2))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    out = np.full_like(x, np.nan)
    rope.run([out, x, cos, sin], backend=backend)
    # each element is two products and a sum (fused or not): within 3 f32 roundings of |x1| + |x2|
    magnitude = np.abs(x[..., :D // 2]) + np.abs(x[..., D // 2:])
    bound = 3 * 2.0 ** -24 * np.concatenate([magnitude, magnitude], axis=-1)
    assert np.all(np.abs(out - rope_reference(x, cos, sin)) <= bound)


# -- what the graph and the launch show -------------------------------------------------------------

def test_the_graph_keeps_every_named_axis():
    text = coordinates_tile_kernel(5).graph.text()
    assert "for_each_tile (%" in text
    for name in NAMES[:5]:
        assert f" = {name}<%{name}>" in text
    assert " div " not in text and "= div" not in text  # the fold is the GPU lowering's, not the graph's


def test_the_gpu_grid_folds_the_first_axes_onto_x():
    assert [axes_on_x(rank) for rank in range(1, 7)] == [1, 1, 1, 2, 3, 4]
    assert gpu_grid((7,)) == (7, 1, 1)
    assert gpu_grid((7, 5, 3)) == (7, 5, 3)
    assert gpu_grid((3, 2, 4, 5)) == (6, 4, 5)
    assert gpu_grid((2, 1, 3, 2, 2, 3)) == (12, 2, 3)
    launch = coordinates_tile_kernel(5).launch(args=run_args((2, 3, 1, 4, 3)))
    assert launch.grid == (6, 4, 3) and launch.extents == (2, 3, 1, 4, 3)


def test_the_ptx_of_a_folded_grid_reads_x_y_and_z_once_each():
    ptx = coordinates_tile_kernel(5).ptx("sm_80")
    for dim in "xyz":
        assert ptx.count(f"%ctaid.{dim}") == 1


# -- errors -------------------------------------------------------------------------------------------

@kernel(out=tensor(i32, 1), a=scalar(index), b=scalar(index), c=scalar(index), d=scalar(index))
def four_scalar_axes(k, p):
    @k.for_each_tile(grid=(axis("a", p.a), axis("b", p.b), axis("c", p.c), axis("d", p.d)), warps=1)
    def program(t, pid):
        p.out.store(0, pid["a"])


def test_an_out_of_bounds_store_names_the_program_by_its_coordinates(backend):
    @kernel(out=tensor(i32, 1), **extents_parameters(4))
    def one_bad_program(k, p):
        @k.for_each_tile(grid=tuple(axis(name, getattr(p, name)) for name in NAMES[:4]), warps=1)
        def program(t, pid):
            point = tuple(pid[name] for name in NAMES[:4])
            bad = (pid["a"] == 1) & (pid["b"] == 2) & (pid["c"] == 0) & (pid["d"] == 3)
            p.out.store(row_of(p, point) + t.where(bad, 1000, 0), pid["a"])

    out = np.full(2 * 3 * 2 * 4, -1, np.int32)
    with pytest.raises(OutOfBoundsError, match=r"store to tensor 'out': .* \(program a=1 b=2 c=0 d=3"):
        one_bad_program.run([out, 2, 3, 2, 4], backend=backend)
    assert (out == -1).all()


def test_folded_axes_past_the_gpus_x_limit_are_a_launch_error_naming_them(backend):
    out = np.zeros(1, np.int32)
    with pytest.raises(LaunchError, match=r"grid axes 'a', 'b' fold onto the GPU's x dimension: "
                                          r"65536 \* 32768 = 2147483648 blocks, over its limit of 2147483647"):
        four_scalar_axes.run([out, 2 ** 16, 2 ** 15, 1, 1], backend=backend)
    with pytest.raises(LaunchError, match=r"grid axes 'a', 'b' fold .* 6 \* 5 = 30 blocks, over its limit of 16"):
        four_scalar_axes.run([out, 6, 5, 1, 1], backend=backend, limits=Limits(256, (256, 256, 64), (16, 16, 16)))
    assert out[0] == 0


def test_the_last_two_axes_keep_the_y_and_z_limits(backend):
    out = np.zeros(1, np.int32)
    with pytest.raises(LaunchError, match="grid y dimension 65536 exceeds the limit of 65535 blocks"):
        four_scalar_axes.run([out, 1, 1, 2 ** 16, 1], backend=backend)


def test_negative_extents_are_refused_even_when_their_product_is_positive(backend):
    out = np.zeros(1, np.int32)
    with pytest.raises(LaunchError, match="axis 'a' has extent -1 at run time"):
        four_scalar_axes.run([out, -1, -1, 2, 2], backend=backend)


def test_static_extents_whose_product_overflows_the_index_range_are_a_trace_error():
    @kernel(out=tensor(i32, 1))
    def huge(k, p):
        @k.for_each_tile(grid=tuple(axis(name, 2 ** 16) for name in NAMES[:4]))
        def program(t, pid):
            p.out.store(0, pid["a"])

    with pytest.raises(TraceError, match=r"for_each_tile: .* = 18446744073709551616 programs overflows the index "
                                          r"range") as caught:
        huge.graph
    assert "test_grid_folding.py" in str(caught.value)


def test_a_grid_needs_an_axis_and_a_block_at_most_three_thread_axes():
    @kernel(out=tensor(i32, 1))
    def no_axes(k, p):
        @k.for_each_tile(grid=())
        def program(t, pid):
            p.out.store(0, 1)

    with pytest.raises(TraceError, match="for_each_tile: grid takes one axis or more, got none"):
        no_axes.graph

    @kernel(out=tensor(i32, 1))
    def four_thread_axes(k, p):
        @k.for_each_block(grid=axis("g", 1), threads=tuple(axis(name, 2) for name in NAMES[:4]))
        def body(inner, block, thread):
            p.out.store(0, 1)

    with pytest.raises(TraceError, match="for_each_block: threads takes 1 to 3 axes, got 4"):
        four_thread_axes.graph
