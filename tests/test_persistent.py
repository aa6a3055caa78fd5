"""Persistent tile launches (issue 35): ``for_each_tile(..., persistent=True)`` runs one block
per resident slot of every SM, each walking the programs in grouped order; every backend gives
what the per-program launch gives."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import accy
from accy import axis, bf16, cdiv, f32, kernel, tensor
from accy.codegen.nvptx import toolchain
from accy.lowering.distribute import grouped_order
from accy.targets import Target

sys.path.insert(0, str(Path(__file__).parent))
from test_warpgroups import run_lowered  # noqa: E402

NEEDS_PTXAS = pytest.mark.skipif(toolchain.find_ptxas() is None, reason="no ptxas: pip install nvidia-cuda-nvcc")


def scaled_add(persistent: bool, bm: int = 16, bn: int = 16):
    """out = 2 a + b.T tile by tile: many small programs."""

    @kernel(out=tensor(f32, 2), a=tensor(f32, 2), b=tensor(f32, 2))
    def add(k, p):
        M, N = p.a.shape

        @k.for_each_tile(grid=(axis("m", cdiv(M, bm)), axis("n", cdiv(N, bn))), warps=1, persistent=persistent)
        def body(t, pid):
            at = (pid["m"] * bm, pid["n"] * bn)
            x = p.a.load_tile(at, (bm, bn))
            y = t.trans(p.b.load_tile((at[1], at[0]), (bn, bm)))
            p.out.store_tile(at, x * 2.0 + y)

    return add


def matmul(persistent: bool, bm=64, bn=64, bk=64, warps=4, stages=2):
    @kernel(c=tensor(f32, 2), a=tensor(bf16, 2), b=tensor(bf16, 2))
    def mm(k, p):
        M, K = p.a.shape
        N = p.b.shape[1]

        @k.for_each_tile(grid=(axis("m", cdiv(M, bm)), axis("n", cdiv(N, bn))), warps=warps, num_stages=stages,
                         persistent=persistent)
        def body(t, pid):
            def step(t, k0, acc):
                return t.dot(p.a.load_tile((pid["m"] * bm, k0), (bm, bk)),
                             p.b.load_tile((k0, pid["n"] * bn), (bk, bn)), acc)

            p.c.store_tile((pid["m"] * bm, pid["n"] * bn), t.fold_range(0, K, bk, t.zeros((bm, bn), f32), step))

    return mm


def test_grouped_order_visits_every_program_once_in_runs_along_m():
    class Ints:  # grouped_order's builder, on Python ints
        mul, sub, add = (lambda self, a, b: a * b), (lambda self, a, b: a - b), (lambda self, a, b: a + b)
        floor_div, mod, min = (lambda self, a, b: a // b), (lambda self, a, b: a % b), (lambda self, a, b: min(a, b))

    for m, n in [(20, 3), (8, 5), (3, 7), (1, 1), (17, 1)]:
        seen = [tuple(grouped_order(Ints(), t, [m, n])) for t in range(m * n)]
        assert sorted(seen) == [(i, j) for i in range(m) for j in range(n)]
        assert seen[:min(8, m)] == [(i, 0) for i in range(min(8, m))]  # a run of 8 along m first


def test_the_text_form_says_persistent():
    text = scaled_add(True).traced_graph.text()
    assert "warps 1 persistent {" in text
    assert "persistent" not in scaled_add(False).traced_graph.text()


def test_persistent_must_be_a_bool():
    with pytest.raises(accy.AccyError, match="persistent must be True or False"):
        @kernel(out=tensor(f32, 1))
        def bad(k, p):
            k.for_each_tile(grid=axis("i", 4), persistent="yes", body=lambda t, pid: None)

        bad.traced_graph


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_a_block_walks_many_programs_on_the_lowered_graph(arch, monkeypatch):
    monkeypatch.setitem(accy.targets.PERSISTENT_SMS, int(arch[3:5]), 1)  # 16 blocks of 1 warp for 30 programs
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((70, 90)).astype(np.float32), rng.standard_normal((90, 70)).astype(np.float32)
    out = np.zeros_like(a)
    graph = run_lowered(scaled_add(True), dict(out=out, a=a, b=b), arch=arch)
    np.testing.assert_array_equal(out, a * 2 + b.T)
    launch = next(op for op in graph.body.walk() if op.opcode == "for_each_block")
    assert launch.attrs.axes == ("sm_block",)


@NEEDS_PTXAS
def test_a_persistent_matmul_on_the_emulator_agrees(monkeypatch):
    monkeypatch.setitem(accy.targets.PERSISTENT_SMS, 90, 1)
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((130, 128)).astype(bf16.numpy), rng.standard_normal((128, 200)).astype(bf16.numpy)
    c = np.zeros((130, 200), np.float32)
    matmul(True).run(dict(c=c, a=a, b=b), backend="ptx", arch="sm_90a")
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(c - want).max() <= 1e-4 * np.abs(want).max()


def test_the_cpu_backends_run_a_persistent_launch_as_any_other():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((40, 24)).astype(np.float32), rng.standard_normal((24, 40)).astype(np.float32)
    for backend in ("numpy", "llvm"):
        out = np.zeros_like(a)
        scaled_add(True).run(dict(out=out, a=a, b=b), backend=backend)
        np.testing.assert_array_equal(out, a * 2 + b.T)


def test_the_sm_90a_target_knows_its_sms():
    assert Target.nvptx("sm_90a").capabilities.sms == 132 and Target.nvptx("sm_80").capabilities.sms == 108


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_stages_of_a_persistent_matmul_are_its_main_loops_not_the_loop_over_programs(arch):
    from accy.lowering.software_pipeline import stages_in_effect

    for stages in (2, 3):
        assert stages_in_effect(matmul(True, stages=stages).graph_for("cuda", arch)) == stages
