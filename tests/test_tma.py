"""The tensor memory accelerator (issue 35): tensor maps at launch, the mbarrier and
``tma_load`` ops on numpy (their reference) and on the emulator at sm_90a, and pipelined
warpgroup matmuls whose stages TMA fills, falling back to ``cp.async`` where a tensor's layout
cannot be described."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import accy
from accy import axis, bf16, kernel, tensor, u64
from accy.codegen.abi import tensor_maps
from accy.dsl.ops import TensorMapAttrs
from accy.dsl.warpgroups import swizzled
from accy.emulator.tensor_map import ElementType, Swizzle, decode, encode
from accy.errors import BarrierError
from accy.runtime.tensor_maps import describe
from accy.targets import Target

sys.path.insert(0, str(Path(__file__).parent))
from test_warpgroups import MATMULS, _args, _check, _program, run_lowered  # noqa: E402

ARCH = "sm_90a"
BF16_MAP = TensorMapAttrs(tensor="x", dtype=bf16, box=(8, 64), swizzle=128)


# -- tensor maps at launch -----------------------------------------------------------------------
def test_a_row_major_tensor_is_described_innermost_first():
    f = describe(BF16_MAP, 4096, (100, 72), (72, 1), 8)
    assert not isinstance(f, str)
    assert f.element_type is ElementType.BFLOAT16 and f.address == 4096 + 16
    assert f.dims == (72, 100) and f.strides == (144,) and f.box == (64, 8) and f.swizzle is Swizzle.B128
    assert decode(encode(f)) == f


@pytest.mark.parametrize("address, shape, strides, offset, why", [
    (4096, (100, 72), (72, 1), 1, "first element"),  # 2 bytes past an aligned span
    (4096, (100, 71), (71, 1), 0, "strides"),  # rows of 142 bytes
    (4096, (100, 72), (1, 100), 0, "innermost stride"),  # a transposed view
    (4096, (0, 72), (72, 1), 0, "extent"),
])
def test_a_layout_the_hardware_cannot_take_says_why(address, shape, strides, offset, why):
    assert why in describe(BF16_MAP, address, shape, strides, offset)


def test_a_box_the_hardware_cannot_take_says_why():
    wide = TensorMapAttrs(tensor="x", dtype=bf16, box=(8, 128), swizzle=128)
    assert "wider than the 128-byte swizzle" in describe(wide, 0, (8, 128), (128, 1), 0)
    odd = TensorMapAttrs(tensor="x", dtype=bf16, box=(8, 12), swizzle=0)
    assert "not a multiple of 16" in describe(odd, 0, (8, 12), (16, 1), 0)


# -- the ops, on a block kernel: one thread copies a box, every thread reads it ------------------
def box_kernel(rows: int, cols: int, swizzle: int, parity_waited: int = 0, arrive: bool = True):
    """Thread 0 copies the rows x cols box of ``x`` at (r0, c0) into shared memory; every thread
    waits on the mbarrier, then copies the shared array out as it lies (swizzle and all)."""

    @kernel(out=accy.dynamic_buffer(bf16), x=tensor(bf16, 2), r0=accy.scalar(accy.index),
            c0=accy.scalar(accy.index))
    def copy_box(k, p):
        @k.for_each_block(grid=axis("b", 1), threads=axis("t", 128))
        def body(inner, block, thread):
            t = thread["t"]
            staged = inner.shared(bf16, rows * cols, "staged", align=1024)
            bars = inner.shared(u64, 1, "bars")
            inner.if_(t == 0, lambda i: i.mbarrier_init(bars, 0, 1))
            inner.barrier()

            def issue(i):
                i.mbarrier_arrive(bars, 0, rows * cols * 2)
                i.tma_load(staged, 0, p.x, (p.r0, p.c0), (rows, cols), bars, 0, swizzle)

            if arrive:
                inner.if_(t == 0, issue)
            inner.mbarrier_wait(bars, 0, parity_waited)

            def out(i, e):
                p.out[e] = staged[e]

            inner.for_range(t, rows * cols, 128, out)

    return copy_box


def _expected_box(x, r0, c0, rows, cols, swizzle):
    box = np.zeros((rows, cols), x.dtype)
    for r in range(rows):
        for c in range(cols):
            if 0 <= r0 + r < x.shape[0] and 0 <= c0 + c < x.shape[1]:
                box[r, c] = x[r0 + r, c0 + c]
    out = np.zeros(rows * cols, x.dtype)
    linear = np.arange(rows * cols)
    out[swizzled(linear, swizzle, 2) if swizzle else linear] = box.reshape(-1)
    return out


def _distinct(shape):
    return (np.arange(np.prod(shape)) % 251 - 125).reshape(shape).astype(bf16.numpy)


@pytest.mark.parametrize("backend", ["numpy", "ptx"])
@pytest.mark.parametrize("rows, cols, swizzle, r0, c0", [
    (8, 64, 128, 3, 16),  # inside
    (16, 32, 64, 30, -8),  # over the bottom and the left edges
    (8, 16, 32, -5, 40),  # over the top and the right edges
    (8, 64, 0, 0, 0),
])
def test_a_box_lands_swizzled_with_zeros_past_the_edges(backend, rows, cols, swizzle, r0, c0):
    x = _distinct((40, 48))
    out = np.zeros(rows * cols, bf16.numpy)
    box_kernel(rows, cols, swizzle).run(dict(out=out, x=x, r0=r0, c0=c0), backend=backend,
                                        **({"arch": ARCH} if backend == "ptx" else {}))
    np.testing.assert_array_equal(out.view(np.uint16), _expected_box(x, r0, c0, rows, cols, swizzle).view(np.uint16))


def test_a_wait_for_a_phase_that_never_completes_is_named():
    x = _distinct((16, 64))
    with pytest.raises(BarrierError, match=r"waits for the phase of parity 0 .* on a GPU this hangs"):
        box_kernel(8, 64, 128, arrive=False).run(dict(out=np.zeros(512, bf16.numpy), x=x, r0=0, c0=0),
                                                 backend="numpy")


def test_the_kernel_takes_each_map_as_an_aligned_grid_constant():
    program = box_kernel(8, 64, 128)
    graph = program.graph_for("ptx", ARCH) if hasattr(program, "graph_for") else program.graph
    assert [m.box for m in tensor_maps(graph)] == [(8, 64)]
    ptx = program.ptx(ARCH)
    assert ".param .align 64 .b8 copy_box_param_" in ptx and "cvta.param.u64" in ptx
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes" in ptx
    assert "mbarrier.try_wait.parity.shared::cta.b64" in ptx


# -- pipelined matmuls ---------------------------------------------------------------------------
def _ops(graph):
    ops = [op.opcode for op in graph.body.walk()]
    return {k: ops.count(k) for k in ("tma_load", "mbarrier_wait", "async_copy")}


def _strided(a, extra=1):
    """``a`` as a view into wider rows (each row's bytes no multiple of 16): no map describes it."""
    wide = np.zeros((a.shape[0], a.shape[1] + extra), a.dtype)
    wide[:, :a.shape[1]] = a
    return wide[:, :a.shape[1]]


@pytest.mark.parametrize("case", [MATMULS[0], MATMULS[3], MATMULS[4]], ids=lambda c: c[0])
def test_a_pipelined_warpgroup_matmul_copies_its_stages_by_tma(case):
    program = _program(case)
    counts = _ops(program.lowered(Target.nvptx(ARCH)))
    assert counts["tma_load"] > 0 and counts["mbarrier_wait"] == 2  # per trip: every thread its stage full, thread 0 the refill empty
    rng = np.random.default_rng(5)
    a, b, c = _args(case, rng)
    run_lowered(program, dict(c=c, a=a, b=b))
    _check(c, a, b.T if case[5] else b, case[1], a.shape[1])


@pytest.mark.parametrize("backend", ["sm_90a graph on numpy", "ptx"])
def test_a_tensor_no_map_describes_is_copied_by_cp_async(backend):
    case = MATMULS[0]
    program = _program(case)
    rng = np.random.default_rng(6)
    a, b, c = _args(case, rng)
    a = _strided(a)
    if backend == "ptx":
        program.run(dict(c=c, a=a, b=b), backend="ptx", arch=ARCH)
    else:
        run_lowered(program, dict(c=c, a=a, b=b))
    _check(c, a, b, case[1], a.shape[1])


def test_the_mma_sync_targets_keep_cp_async():
    counts = _ops(_program(MATMULS[0]).lowered(Target.nvptx("sm_90")))
    assert counts["tma_load"] == 0 and counts["async_copy"] > 0


# -- warp roles ----------------------------------------------------------------------------------
def test_a_pipelined_matmul_gets_a_producer_warpgroup_that_gives_its_registers_to_the_consumers():
    graph = _program(MATMULS[0]).lowered(Target.nvptx(ARCH))  # 8 warps: 2 consumer warpgroups
    launch = next(op for op in graph.body.walk() if op.opcode == "for_each_block")
    assert launch.attrs.threads == (("thread", 256 + 128),)
    roles = [op for op in graph.body.walk() if op.opcode == "if" and op.attrs.kind.value == "roles"]
    assert len(roles) == 1
    consumers, producer = roles[0].regions
    assert [op.attrs.count for op in consumers.walk() if op.opcode == "setmaxnreg"] == [232]
    assert [op.attrs.count for op in producer.walk() if op.opcode == "setmaxnreg"] == [40]
    # the consumers' barriers wait for them alone; the producer copies, the consumers wait and release
    assert {op.attrs.threads for op in consumers.walk() if op.opcode == "barrier"} == {256}
    assert any(op.opcode == "tma_load" for op in producer.walk())
    assert not any(op.opcode == "tma_load" for op in consumers.walk())
    ptx = _program(MATMULS[0]).ptx(ARCH)
    assert ".maxnreg 168" in ptx and "setmaxnreg.dec.sync.aligned.u32 40;" in ptx and "bar.sync \t1, 256;" in ptx


def test_a_persistent_program_keeps_its_warps():
    from test_persistent import matmul

    graph = matmul(True, 128, 128, 64, 8, 3).lowered(Target.nvptx(ARCH))
    assert not any(op.opcode == "setmaxnreg" for op in graph.body.walk())
    assert any(op.opcode == "tma_load" for op in graph.body.walk())  # thread 0 copies among the consumers


def test_without_draining_the_fold_before_the_producer_overwrites_stages_still_read(monkeypatch):
    """Attention has two folds over one staging array: the producer must wait for the consumers
    to release the first fold's stages before filling the second's; the emulator's race checker
    finds the overwrite otherwise."""
    import accy.lowering.warp_roles as warp_roles
    from accy.emulator import RaceError
    from accy.library.attention import ScaledDotProduct
    from accy.library.attention_tile import AttentionTiles, scaled_dot_product_tile

    rng = np.random.default_rng(9)
    q, k, v = (rng.standard_normal((3, n, 64)).astype(bf16.numpy) for n in (96, 160, 160))  # 160 keys: 2 folds
    monkeypatch.setattr(warp_roles.WarpRoles, "_drain", lambda self: None)
    # (a shape no other test uses: the entries and their lowered graphs are cached)
    program = scaled_dot_product_tile(ScaledDotProduct(3, 96, 160, 64, 64), bf16, AttentionTiles(64, 64, 4)).program
    with pytest.raises(RaceError, match="overwrites the destination of an earlier TMA load"):
        program.run(dict(dst=np.zeros_like(q), query=q, key=k, value=v), backend="ptx", arch=ARCH)


def roles_kernel(deadlock: bool):
    """Two roles over a 2-stage ring: warp 1 copies rows of ``x`` by TMA, warp 0 sums them; with
    ``deadlock`` the consumer never releases a stage, so the producer's third fill waits forever."""

    @kernel(out=accy.dynamic_buffer(accy.f32), x=tensor(accy.f32, 2))
    def ring(k, p):
        @k.for_each_block(grid=axis("b", 1), threads=axis("t", 64))
        def body(inner, block, thread):
            t = thread["t"]
            stage = inner.shared(accy.f32, 2 * 8 * 4, "stage", align=128)
            bars = inner.shared(u64, 4, "bars")

            def init(i):
                for s in range(2):
                    i.mbarrier_init(bars, s, 1)  # full
                    i.mbarrier_init(bars, 2 + s, 32)  # empty: the consumer warp

            inner.if_(t == 0, init)
            inner.barrier()

            def consumer(i):
                def trip(i, j, acc):
                    i.mbarrier_wait(bars, j % 2, j // 2 % 2)
                    got = stage[(j % 2) * 32 + t % 32]
                    if not deadlock:
                        i.mbarrier_arrive(bars, 2 + j % 2, 0)
                    return acc + got

                p.out[t] = i.fold_range(0, 5, 1, i.constant(0.0, accy.f32), trip)

            def producer(i):
                def fill(i):
                    def trip(i, j):
                        i.mbarrier_wait(bars, 2 + j % 2, (j // 2 + 1) % 2)
                        i.mbarrier_arrive(bars, j % 2, 8 * 4 * 4)
                        i.tma_load(stage, (j % 2) * 32, p.x, (j * 8, 0), (8, 4), bars, j % 2)

                    i.for_range(0, 5, 1, trip)

                i.if_(t == 32, fill)

            inner.if_(t < 32, consumer, producer, roles=True)

    return ring


def test_roles_run_as_coroutines_in_the_reference_and_on_the_emulator():
    x = np.arange(40 * 4, dtype=np.float32).reshape(40, 4)
    want = np.array([sum(x[j * 8 + r // 4, r % 4] for j in range(5)) for r in range(32)], np.float32)
    for backend in ("numpy", "ptx"):
        out = np.zeros(32, np.float32)
        roles_kernel(False).run(dict(out=out, x=x), backend=backend, **({"arch": ARCH} if backend == "ptx" else {}))
        np.testing.assert_array_equal(out, want)


def test_roles_that_wait_for_each_other_forever_are_named():
    x = np.zeros((40, 4), np.float32)
    with pytest.raises(BarrierError, match="no role can go on .* on a GPU this hangs"):
        roles_kernel(True).run(dict(out=np.zeros(32, np.float32), x=x), backend="numpy")


def test_a_fold_by_cp_async_is_drained_before_the_producer_fills_the_next_folds_stages():
    """Two specialised folds over one staging array, the first's tensor no map describes: the
    consumers copy it by cp.async while the producer, which filled nothing of it, must still wait
    for them to be done with its stages before filling the second fold's (a race otherwise)."""
    from accy import f32

    @kernel(c=tensor(f32, 2), a=tensor(bf16, 2), b=tensor(bf16, 2), a2=tensor(bf16, 2), b2=tensor(bf16, 2))
    def two_folds(k, p):
        M, K = p.a.shape

        @k.for_each_tile(grid=(axis("m", accy.cdiv(M, 64)), axis("n", accy.cdiv(p.b.shape[1], 64))), warps=4,
                         num_stages=2)
        def body(t, pid):
            def step(x, y):
                return lambda t, k0, acc: t.dot(x.load_tile((pid["m"] * 64, k0), (64, 32)),
                                                y.load_tile((k0, pid["n"] * 64), (32, 64)), acc)

            acc = t.fold_range(0, K, 32, t.zeros((64, 64), f32), step(p.a, p.b))
            acc = t.fold_range(0, p.a2.shape[1], 32, acc, step(p.a2, p.b2))
            p.c.store_tile((pid["m"] * 64, pid["n"] * 64), acc)

    rng = np.random.default_rng(11)
    a, b, a2, b2 = (rng.standard_normal(s).astype(bf16.numpy) for s in ((64, 96), (96, 64), (64, 96), (96, 64)))
    want = a.astype(np.float64) @ b.astype(np.float64) + a2.astype(np.float64) @ b2.astype(np.float64)
    for first, second in ((_strided(a), a2), (a, _strided(a2))):
        for backend in ("sm_90a graph on numpy", "ptx"):
            c = np.zeros((64, 64), np.float32)
            args = dict(c=c, a=first, b=b, a2=second, b2=b2)
            if backend == "ptx":
                two_folds.run(args, backend="ptx", arch=ARCH)
            else:
                run_lowered(two_folds, args)
            assert np.abs(c - want).max() <= 1e-4 * np.abs(want).max()


@pytest.mark.full
def test_the_hopper_bench_kernels_assemble_without_spills():
    """Issue 35's jobs (bench.gpu_kernels.HOPPER) at sm_90a: warp roles, registers moved, no spill."""
    from accy.codegen.nvptx import toolchain

    if toolchain.find_ptxas() is None:
        pytest.skip("no ptxas: pip install nvidia-cuda-nvcc")
    sys.path.insert(0, str(Path(__file__).parent.parent))
    from bench.gpu_kernels import HOPPER

    for key, case in HOPPER.items():
        ptx = case.program.ptx(ARCH)
        used = toolchain.resources(ptx, ARCH)
        assert used.spill_stores == used.spill_loads == 0 and "setmaxnreg.inc" in ptx, (key, used)


def test_a_warp_specialised_launch_narrows_its_indices_to_32_bits():
    """setmaxnreg passes the thread's index through: its range goes with it, so the consumers'
    index arithmetic is proved to fit 32 bits as a program's without roles is."""
    program = _program(MATMULS[0])
    a, b, c = (np.zeros(s, t) for s, t in (((512, 256), bf16.numpy), ((256, 512), bf16.numpy),
                                             ((512, 512), np.float32)))
    assert program.indices_32_bit(dict(c=c, a=a, b=b), ARCH)
