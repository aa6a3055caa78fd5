"""The tile distribution (accy.lowering.distribute): tile graphs rewritten into SIMT block
launches, run on the ptx emulator and on the llvm backend's block path, against NumPy.

The llvm backend runs tile graphs natively (accy.codegen.host.tiles); here it runs the
distributed graph instead (``run_distributed``), so both lowerings of block launches check
the rewrite.  Shapes are tiny: the emulator is slow.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import pathlib
import re

import numpy as np
import pytest

import accy
from accy import axis, f32, i32, index
from accy.runtime import bind_arguments
from accy.runtime import get_backend
from accy.runtime import resolve_launch
from accy.codegen.nvptx import toolchain
from accy.lowering.distribute import distribute
from accy.lowering.layouts import Blocked, Expand, Permute, Slice
from accy.runtime.tensor_arguments import expand_tensor_arguments
from accy.errors import OutOfBoundsError, TraceError
from accy.library.attention import ScaledDotProduct
from accy.library.attention_tile import scaled_dot_product_tile
from tile_kernels import CASES, assert_output, matmul_program

NEEDS_PTXAS = pytest.mark.skipif(toolchain.find_ptxas() is None, reason="no ptxas: pip install nvidia-cuda-nvcc")


def run_distributed(program, args, backend: str) -> None:
    """Run ``program``'s distributed graph (the one ptx and cuda compile) on ``backend``."""
    if backend == "ptx":
        program.run(args, backend="ptx")
        return
    graph = program.distributed(tensor_cores=False)  # the host has no tensor cores
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
    bounds = case.bounds(before, backend)
    for name, want in case.reference(before).items():
        assert_output(f"{case.name}: {name}", args[name], want, bounds.get(name))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_tile_kernels(case, backend):
    _case(case, backend, np.random.default_rng(7))


# -- kernels of the issue ------------------------------------------------------------------------


def matmul(bm=64, bn=64, bk=32, warps=4):
    return matmul_program(f32, f32, bm, bn, bk, warps)


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
    assert "tile_kernels.py" in str(info.value) and "t.dot(a, b, acc" in str(info.value)  # the user's dot line


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


# -- vector accesses: unit stride and 16-byte alignment checked at run time, else element by element ----


def row_copy(dtype, rows=8, cols=64, warps=1):
    """dst[r, c] = 2 * x[start + r * stride + c] for the r < n, c < m of each 8-row tile."""

    @accy.kernel(dst=accy.dynamic_buffer(dtype), x=accy.dynamic_buffer(dtype), start=accy.scalar(index),
                 stride=accy.scalar(index), n=accy.scalar(index), m=accy.scalar(index))
    def row_copy(k, p):
        @k.for_each_tile(grid=axis("i", accy.cdiv(p.n, rows)), warps=warps)
        def body(t, pid):
            r = pid["i"] * rows + t.arange(rows)[:, None]
            c = t.arange(cols)[None, :]
            live = (r < p.n) & (c < p.m)
            x = p.x.load(p.start + r * p.stride + c, mask=live, other=0)
            p.dst.store(r * p.m + c, x + x, mask=live)

    return row_copy


@accy.kernel(dst=accy.tensor(f32, 2), x=accy.tensor(f32, 2))
def tensor_copy(k, p):
    """A tensor's strides are scalars of the launch: the unit stride is checked at run time too."""
    M, N = p.x.shape

    @k.for_each_tile(grid=(axis("m", accy.cdiv(M, 8)), axis("n", accy.cdiv(N, 32))), warps=1)
    def body(t, pid):
        p.dst.store_tile((pid["m"] * 8, pid["n"] * 32), p.x.load_tile((pid["m"] * 8, pid["n"] * 32), (8, 32)) * 2.0)


def _vector_accesses(program, arch="sm_80") -> dict:
    """(ld or st, bytes) -> how many global vector accesses the PTX holds (ld.global.v4.f32: 16 bytes)."""
    found = {}
    for kind, n, bits in re.findall(r"\b(ld|st)\.global(?:\.nc)?\.v(\d)\.[a-z](\d+)\b", program.ptx(arch)):
        key = (kind, int(n) * int(bits) // 8)
        found[key] = found.get(key, 0) + 1
    return found


def _vector_counts(program, arch="sm_80") -> dict:
    found = _vector_accesses(program, arch)
    return {kind: sum(n for (k, _), n in found.items() if k == kind) for kind in ("ld", "st")}


@pytest.mark.parametrize("dtype", [f32, accy.f16, accy.f64])
def test_a_unit_stride_access_is_one_vector_access_per_group(dtype):
    # 8 x 64 over 32 threads: 4 rows of 4 consecutive elements each: 16 bytes of f32, 8 of f16, and
    # 2 groups of 2 (16 bytes) of f64
    bytes_ = 8 if dtype == accy.f16 else 16
    groups = 8 if dtype == accy.f64 else 4
    assert _vector_accesses(row_copy(dtype)) == {("ld", bytes_): groups, ("st", bytes_): groups}
    graph = row_copy(dtype).graph_for("ptx")
    checks = [op for op in graph.body.ops if op.opcode == "aligned"]  # hoisted out of the program
    assert [op.attrs.bytes for op in checks] == [8 if dtype == accy.f16 else 16] * 2
    assert not [op for op in graph.launch_op.regions[0].walk() if op.opcode == "aligned"]


def test_an_access_that_is_not_unit_stride_stays_element_by_element():
    @accy.kernel(dst=accy.dynamic_buffer(f32), x=accy.dynamic_buffer(f32))
    def strided(k, p):
        @k.for_each_tile(grid=axis("i", 1), warps=1)
        def body(t, pid):
            c = t.arange(128)
            p.dst.store(c, p.x.load(c * 2))  # a stride of 2 on load; the store is unit stride

    assert _vector_counts(strided) == {"ld": 0, "st": 1}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [f32, accy.f16])
def test_misaligned_starts_and_odd_strides_fall_back_and_agree_with_numpy(backend, dtype):
    """The vector path where start and stride keep every group aligned, element by element where
    not (the emulator faults on a misaligned vector access); edges masked either way."""
    program = row_copy(dtype)
    rng = np.random.default_rng(5)
    cases = [(0, 64, 13, 64), (1, 64, 13, 64), (0, 67, 13, 64), (3, 65, 9, 61), (4, 68, 9, 60), (0, 64, 8, 64)]
    for start, stride, n, m in cases:
        x = rng.standard_normal(start + stride * n + 1).astype(dtype.numpy)
        dst = np.full(n * m, np.nan, dtype.numpy)
        run_distributed(program, dict(dst=dst, x=x, start=start, stride=stride, n=n, m=m), backend)
        want = np.stack([x[start + r * stride:][:m] for r in range(n)]) * 2
        np.testing.assert_array_equal(dst.reshape(n, m), want, err_msg=f"start {start} stride {stride} {n}x{m}")


def test_the_vector_path_runs_exactly_where_the_checks_hold(monkeypatch):
    """Counted on the SIMT interpreter (it runs a branch only for the threads taking it): every
    group whole where start and stride keep groups aligned; none where either does not."""
    from accy.runtime.interpreter.simt_memory import SimtMemory

    wide = []
    original = SimtMemory.op_load

    def counting(self, op):
        if op.attrs.vec > 1:
            wide.append(op)
        original(self, op)

    monkeypatch.setattr(SimtMemory, "op_load", counting)
    program = row_copy(f32)
    for start, stride, expected in ((0, 64, 4), (4, 68, 4), (1, 64, 0), (0, 66, 0)):
        wide.clear()
        x = np.arange(start + stride * 8, dtype=np.float32)
        dst = np.zeros(8 * 64, np.float32)
        run_distributed(program, dict(dst=dst, x=x, start=start, stride=stride, n=8, m=64), "numpy")
        assert len(wide) == expected, (start, stride)
        np.testing.assert_array_equal(dst.reshape(8, 64), 2 * np.stack([x[start + r * stride:][:64] for r in range(8)]))
    wide.clear()
    x = np.zeros(8 * 64 + 1, np.float32)[1:]  # a buffer whose first element is not 16-byte aligned
    x[:] = np.arange(8 * 64)
    dst = np.zeros(8 * 64, np.float32)
    run_distributed(program, dict(dst=dst, x=x, start=0, stride=64, n=8, m=64), "numpy")
    assert not wide and np.array_equal(dst, 2 * np.arange(8 * 64, dtype=np.float32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_views_at_odd_offsets_and_strides_agree_with_numpy(backend):
    assert _vector_counts(tensor_copy) == {"ld": 2, "st": 2}  # 8 x 32 over 32 threads: 2 rows of 4
    rng = np.random.default_rng(6)
    big = rng.standard_normal((21, 75)).astype(np.float32)
    whole = rng.standard_normal((16, 64)).astype(np.float32)  # unit stride, rows of 64: the vector path
    for view in (whole, big[:16, :64], big[1:17, 1:65], big[:13, 3:70], big[::2, :64], big[:16, :128:2]):
        out = np.full((view.shape[0] + 1, view.shape[1] + 4), np.nan, np.float32)
        dst = out[1:, 1:-3]  # a view starting at element (1, 1) with an odd row stride
        run_distributed(tensor_copy, dict(dst=dst, x=view), backend)
        np.testing.assert_array_equal(dst, view * 2)
        assert np.isnan(out[0]).all() and np.isnan(out[:, 0]).all() and np.isnan(out[:, -3:]).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_vector_access_past_the_end_is_out_of_bounds_and_writes_nothing(backend):
    """An unmasked group whose last element is past the buffer: the error names an element outside."""
    program = row_copy(f32)
    dst = np.zeros(8 * 64, np.float32)
    with pytest.raises(OutOfBoundsError, match=r"load from 'x': index \d+ is out of bounds for 500 elements"):
        run_distributed(program, dict(dst=dst, x=np.ones(500, np.float32), start=0, stride=64, n=8, m=64), backend)
    assert not dst.any()


@NEEDS_PTXAS
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_vector_accesses_assemble_without_spills(arch):
    for program in (row_copy(f32), row_copy(accy.f16), row_copy(accy.f64), tensor_copy, matmul()):
        used = toolchain.resources(program.ptx(arch), arch)
        assert used.spill_stores == used.spill_loads == 0, (program.name, used)
    assert _vector_counts(matmul(), arch)["ld"] > 0  # its a and b tiles, a tensor's rows
