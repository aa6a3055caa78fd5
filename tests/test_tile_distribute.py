"""The tile distribution (accy.backends.distribute): tile graphs rewritten into SIMT block
launches, run on the ptx emulator and on the llvm backend's block path, against NumPy.

The llvm backend runs tile graphs natively (accy.backends.tile_host); here it runs the
distributed graph instead (``run_distributed``), so both lowerings of block launches check
the rewrite.  Shapes are tiny: the emulator is slow.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import pathlib

import numpy as np
import pytest

import accy
from accy import axis, f32, i32, index
from accy.backends import bind_arguments, get_backend, resolve_launch, toolchain
from accy.backends.distribute import distribute
from accy.backends.layouts import Blocked, Expand, Permute, Slice
from accy.backends.tensor_arguments import expand_tensor_arguments
from accy.errors import OutOfBoundsError, TraceError
from accy.library.attention import ScaledDotProduct
from accy.library.attention_tile import scaled_dot_product_tile
from tile_kernels import CASES, assert_output

NEEDS_PTXAS = pytest.mark.skipif(toolchain.find_ptxas() is None, reason="no ptxas: pip install nvidia-cuda-nvcc")


def run_distributed(program, args, backend: str) -> None:
    """Run ``program``'s distributed graph (the one ptx and cuda compile) on ``backend``."""
    if backend == "ptx":
        program.run(args, backend="ptx")
        return
    graph = program.graph_for("ptx")
    impl = get_backend(backend)
    if program.tensors:
        args = expand_tensor_arguments(graph, args)
    binding = bind_arguments(graph, args)
    impl.execute(graph, binding, resolve_launch(graph, program.threads, binding, None), **impl.checked_options({}))


BACKENDS = ["ptx", "llvm"]


# -- layouts ----------------------------------------------------------------------------------


def _holders(layout):
    """element -> [(thread, register, owner)] over every thread and register of ``layout``."""
    held = {}
    for t, r in itertools.product(range(layout.threads), range(layout.registers)):
        coords, owner = layout.element_of(t, r)
        held.setdefault(coords, []).append(owner)
    return held


@pytest.mark.parametrize("shape", [(64, 64), (16, 32), (37,), (5, 10), (16, 1), (1, 8), (2, 3, 8), (256,)])
@pytest.mark.parametrize("threads", [32, 128])
def test_every_element_has_exactly_one_owner(shape, threads):
    layouts = [Blocked(shape, threads)]
    if len(shape) > 1:
        layouts += [Slice(layouts[0], 0), Slice(layouts[0], len(shape) - 1), Permute(layouts[0], tuple(
            reversed(range(len(shape))))), Expand(layouts[0], (1,) + shape)]
    for layout in layouts:
        held = _holders(layout)
        assert sorted(held) == sorted(itertools.product(*map(range, layout.shape))), layout
        assert all(owners.count(True) == 1 for owners in held.values()), layout


def test_the_canonical_layout_coalesces_along_the_last_axis():
    layout = Blocked((64, 64), 128)
    assert layout.registers == 32  # 4 consecutive columns in 8 rows per thread
    starts = [layout.element_of(t, 0)[0] for t in range(32)]  # a warp's first registers
    assert starts[:16] == [(0, 4 * t) for t in range(16)] and starts[16] == (1, 0)
    small = Blocked((16,), 128)  # fewer elements than threads: one each, the rest replicas
    assert small.registers == 1 and small.replica_bits == 0b1110000


# -- the shared test kernels ---------------------------------------------------------------------


def _case(case, backend, rng):
    args = case.make_args(rng)
    before = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    run_distributed(case.program, args, backend)
    bounds = case.tolerance(before) if case.tolerance is not None else {}
    for name, want in case.reference(before).items():
        assert_output(f"{case.name}: {name}", args[name], want, bounds.get(name))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_tile_kernels(case, backend):
    if case.name == "elementwise" and backend == "ptx":
        pytest.xfail("its reference wants exp correctly rounded; libdevice's __nv_expf is within 2 ulp "
                     "(the SIMT level's ptx backend is too)")
    _case(case, backend, np.random.default_rng(7))


# -- kernels of the issue ------------------------------------------------------------------------


def matmul(bm=64, bn=64, bk=32, warps=4):
    @accy.kernel(c=accy.tensor(f32, 2), a=accy.tensor(f32, 2), b=accy.tensor(f32, 2))
    def matmul(k, p):
        M, K = p.a.shape
        N = p.b.shape[1]

        @k.for_each_tile(grid=(axis("m", accy.cdiv(M, bm)), axis("n", accy.cdiv(N, bn))), warps=warps)
        def body(t, pid):
            def step(t, k0, acc):
                a = p.a.load_tile((pid["m"] * bm, k0), (bm, bk))
                b = p.b.load_tile((k0, pid["n"] * bn), (bk, bn))
                return t.dot(a, b, acc)

            acc = t.fold_range(0, K, bk, t.zeros((bm, bn), f32), step)
            p.c.store_tile((pid["m"] * bm, pid["n"] * bn), acc)

    return matmul


@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_at_odd_sizes_leaves_the_edges_untouched(backend):
    rng = np.random.default_rng(1)
    M, N, K = 70, 67, 45
    a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    c = np.full((M + 1, N + 3), np.nan, np.float32)
    run_distributed(matmul(), dict(c=c[:M, 1:N + 1], a=a, b=b), backend)
    exact = a.astype(np.float64) @ b
    bound = 45 * 2.0**-24 / (1 - 45 * 2.0**-24) * (np.abs(a).astype(np.float64) @ np.abs(b))
    assert np.all(np.abs(c[:M, 1:N + 1] - exact) <= bound)
    assert np.isnan(c[M]).all() and np.isnan(c[:, 0]).all() and np.isnan(c[:, N + 1:]).all()


@accy.kernel(out=accy.dynamic_buffer(f32), arg=accy.dynamic_buffer(index), cum=accy.dynamic_buffer(f32),
             x=accy.dynamic_buffer(f32), rows=accy.scalar(index), cols=accy.scalar(index))
def rows_kernel(k, p):
    """Per row of x: softmax, argmax and cumsum (one row of 40 per program, in a 64-wide tile)."""

    @k.for_each_tile(grid=axis("r", p.rows), warps=2)
    def body(t, pid):
        j = t.arange(64)
        live = j < p.cols
        at = pid["r"] * p.cols + j
        x = p.x.load(at, mask=live, other=float("-inf"))
        e = t.exp(x - t.max(x))
        p.out.store(at, e / t.sum(e), mask=live)
        p.arg[pid["r"]] = t.argmax(x)
        p.cum.store(at, t.cumsum(t.where(live, x, 0.0)), mask=live)


@pytest.mark.parametrize("backend", BACKENDS)
def test_softmax_argmax_and_cumsum_rows(backend):
    rng = np.random.default_rng(2)
    rows, cols = 3, 40
    x = rng.integers(-6, 6, (rows, cols)).astype(np.float32)  # ties for argmax; exact cumsums
    x[1, 7] = np.nan  # the first NaN is argmax's answer
    x[1, 30] = np.nan
    args = dict(out=np.zeros(rows * cols, np.float32), arg=np.full(rows, -5, np.int64),
                cum=np.zeros(rows * cols, np.float32), x=x.reshape(-1), rows=rows, cols=cols)
    run_distributed(rows_kernel, args, backend)
    assert args["arg"].tolist() == np.argmax(x, axis=1).tolist()
    assert_output("cum", args["cum"].reshape(rows, cols), np.cumsum(x, axis=1))
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    soft = args["out"].reshape(rows, cols)
    assert np.allclose(soft[[0, 2]], (e / e.sum(axis=1, keepdims=True))[[0, 2]], rtol=1e-5, atol=0)
    assert np.isnan(soft[1]).all()


def scan_kernel(shape, warps, op, axis_, dtype):
    """Two programs, each scanning one ``shape`` tile of x (row-major) along ``axis_`` into out."""
    n = math.prod(shape)

    @accy.kernel(out=accy.dynamic_buffer(dtype), x=accy.dynamic_buffer(dtype))
    def scan(k, p):
        @k.for_each_tile(grid=axis("i", 2), warps=warps)
        def body(t, pid):
            at = pid["i"] * n
            for d, size in enumerate(shape):
                ramp = t.arange(size).reshape(tuple(size if e == d else 1 for e in range(len(shape))))
                at = at + ramp * math.prod(shape[d + 1:])
            p.out.store(at, getattr(t, f"cum{op}")(p.x.load(at), axis=axis_))

    return scan


SCANS = [((256,), 2, 0), ((4, 256), 4, 1), ((64, 32), 4, 0), ((64, 32), 4, 1), ((2, 3, 8), 1, 1), ((16, 1), 1, 0),
         ((40,), 2, 0)]  # in a warp and across warps; along axis 0; a line in one thread; replicas


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape,warps,axis_", SCANS, ids=str)
def test_scans_agree_with_numpy(shape, warps, axis_, backend):
    rng = np.random.default_rng(4)
    line = (2,) + shape
    for op, dtype in (("sum", i32), ("min", i32), ("max", f32), ("sum", f32), ("sum", accy.bf16)):
        if dtype == i32:
            x = rng.integers(-2**31, 2**31, line, dtype=np.int64).astype(np.int32)  # sums wrap
        else:
            x = rng.standard_normal(line).astype(dtype.numpy)
            if op == "max":
                x.flat[::7] = np.nan  # NaN propagates from its position on
        out = np.zeros(x.size, dtype.numpy)
        run_distributed(scan_kernel(shape, warps, op, axis_, dtype), dict(out=out, x=x.reshape(-1)), backend)
        got, where = out.reshape(line), f"cum{op} {dtype} of {shape} along {axis_}"
        if op != "sum" or dtype == i32:  # integer scans and max/min are exact
            want = {"sum": np.cumsum, "min": np.minimum.accumulate, "max": np.maximum.accumulate}[op](x, axis=axis_ + 1)
            np.testing.assert_array_equal(got, want.astype(dtype.numpy), err_msg=where)
            continue
        wide = x.astype(np.float64)
        exact, size = np.cumsum(wide, axis=axis_ + 1), np.cumsum(np.abs(wide), axis=axis_ + 1)
        m = np.cumsum(np.ones_like(wide), axis=axis_ + 1) * 2.0**-24  # f32 accumulation of position + 1 terms
        bound = m / (1 - m) * size + (2.0**-8 * np.abs(exact) if dtype == accy.bf16 else 0)  # one rounding to bf16
        assert np.all(np.abs(got.astype(np.float64) - exact) <= bound), where


def test_a_scan_along_threads_runs_in_parallel():
    """Runs within each thread, shuffles within a warp, shared memory across warps: no serial loop."""
    graph = scan_kernel((4, 256), 4, "sum", 1, f32).graph_for("ptx")
    ops = [op.opcode for op in graph.body.walk()]
    assert "fold" not in ops and ops.count("shuffle") > 0 and ops.count("barrier") == 1


@accy.kernel(count=accy.dynamic_buffer(i32), total=accy.dynamic_buffer(f32), x=accy.dynamic_buffer(f32))
def replicas(k, p):
    """A row sum (a Slice: every thread along a row holds it), a 4-element tile (fewer elements
    than threads) and a whole-tile sum, each counted with atomics: replicas must not add."""

    @k.for_each_tile(grid=axis("i", 2), warps=2)
    def body(t, pid):
        x = p.x.load(pid["i"] * 256 + t.arange(8)[:, None] * 32 + t.arange(32)[None, :])
        rows = t.sum(x, axis=1)  # (8,) held by every thread of its row
        p.count.atomic_add(t.zeros((8,), index), (rows == rows).cast(i32))
        p.total.atomic_add(t.zeros((8,), index), rows)
        p.count.atomic_add(t.full((4,), 1, index), t.full((4,), 1, i32))
        t.atomic_add(p.count, 2, 1)
        p.total.atomic_add(t.full((1,), 1, index), t.full((1,), t.sum(x), f32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_replicated_elements_are_stored_once(backend):
    x = np.random.default_rng(3).integers(-4, 4, 512).astype(np.float32)
    args = dict(count=np.zeros(3, np.int32), total=np.zeros(2, np.float32), x=x)
    run_distributed(replicas, args, backend)
    assert args["count"].tolist() == [2 * 8, 2 * 4, 2]
    assert args["total"].tolist() == [x.sum(), x.sum()]


@accy.kernel(dst=accy.dynamic_buffer(f32), x=accy.dynamic_buffer(f32))
def out_of_bounds(k, p):
    @k.for_each_tile(grid=axis("i", 2), warps=1)
    def body(t, pid):
        i = pid["i"] * 16 + t.arange(16)
        p.dst.store(i, p.x.load(i, mask=i < 20) + 1.0)  # the second program stores past dst


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_unmasked_index_outside_the_buffer_raises_and_writes_nothing(backend):
    dst = np.zeros(20, np.float32)
    # the program is named as the numpy and llvm backends name it, then the GPU thread in it
    with pytest.raises(OutOfBoundsError, match=r"store to 'dst': index 2\d is out of bounds for 20 elements "
                                               r"\(program i=1, thread \d+\) at test_tile_distribute.py"):
        run_distributed(out_of_bounds, dict(dst=dst, x=np.ones(20, np.float32)), backend)
    assert not dst.any()


def test_a_program_needing_more_shared_memory_than_48_kib_is_a_trace_error():
    program = matmul(128, 128, 64)  # a 128x64 and a 64x128 f32 operand: 64 KiB
    with pytest.raises(TraceError, match=r"dot of a .*65536 bytes of shared memory.*48 KiB") as info:
        program.graph_for("ptx")
    assert "test_tile_distribute.py" in str(info.value)  # the user's dot line


def test_the_distributed_graph_is_an_ordinary_block_launch():
    graph = matmul().graph_for("ptx")
    assert graph.is_block_launch and graph.block_shape == (128,)
    assert [str(a) for a in graph.axes] == ["m=?", "n=?"]
    assert not any(op.opdef.tiles for op in graph.body.walk())
    with pytest.raises(ValueError, match="not a tile launch"):
        distribute(graph)


# -- ptxas: every kernel assembles at sm_80 and sm_90 without spills --------------------------------

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def _example_programs() -> list:
    """Every program of examples/tile_*.py (each lists them in PROGRAMS), at its defaults."""
    programs = []
    for path in sorted(EXAMPLES.glob("tile_*.py")):
        spec = importlib.util.spec_from_file_location(f"example_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        programs += module.PROGRAMS
    return programs


def _attention_programs() -> list:
    """The tile attention entry at its default tiles (64 x 64, head dim 64), f32 and bf16."""
    spec = ScaledDotProduct(1, 128, 128, 64, 64)
    return [scaled_dot_product_tile(spec, dtype).program for dtype in (accy.f32, accy.bf16)]


@NEEDS_PTXAS
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_kernel_assembles_without_spills(arch):
    programs = [case.program for case in CASES] + [matmul(), rows_kernel, replicas]
    programs += _example_programs() + _attention_programs()
    assert len(programs) > len(CASES) + 3 + 2
    for program in programs:
        used = toolchain.resources(program.ptx(arch), arch)
        assert used.spill_stores == used.spill_loads == 0, (program.name, used)
    used = toolchain.resources(matmul().ptx(arch), arch)
    assert used.registers <= 128 and used.shared_bytes == (64 * 32 + 32 * 64) * 4


def test_a_program_budgets_its_registers_for_256_resident_threads():
    """A program's threads hold whole tiles: ptxas may give each up to 255 registers (the SIMT
    level's 512 resident threads, 128 registers, spilled layer norm and flash attention)."""
    for warps, blocks in ((1, 8), (4, 2), (8, 1), (32, 1)):
        graph = matmul(32, 32, 16, warps=warps).graph_for("ptx")
        assert graph.launch_op.attrs.min_blocks == blocks
        assert f".minnctapersm {blocks}\n" in matmul(32, 32, 16, warps=warps).ptx("sm_80")
