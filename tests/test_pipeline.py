"""The pass pipeline (accy/lowering/pipeline.py) and the targets that own it (accy/targets.py):
each pass by name on a graph it must change, the front end as the optimiser runs it, each
target's tile passes, `accy ir --passes/--after` on every backend, ACCY_DUMP_PASSES."""

import numpy as np
import pytest

import accy
from accy import axis, cdiv, f32, i32, kernel, tensor
from accy.cli import main
from accy.dsl.passes import fold_decided_comparisons, optimize
from accy.lowering.distribute import distribute
from accy.lowering.pipeline import PASSES, find_stage, lower, run_passes, stages
from accy.runtime import BACKENDS, get_backend
from accy.targets import FRONT_END, WARP_SIZE, Target
from accy.errors import AccyError


def row_sum(cols: int = 64):
    @kernel(dst=tensor(f32, 1), x=tensor(f32, 2))
    def row_sum(k, p):
        R, C = p.x.shape

        @k.for_each_tile(grid=(axis("r", cdiv(R, 4)),), warps=1)
        def body(t, pid):
            r0 = pid["r"] * 4
            x = p.x.load_tile((r0, 0), (4, cols))
            p.dst.store_tile((r0,), t.sum(x * 1.0 + 0.0, axis=1))

    return row_sum


def matmul():
    @kernel(c=tensor(f32, 2), a=tensor(accy.f16, 2), b=tensor(accy.f16, 2))
    def matmul(k, p):
        M, K = p.a.shape
        N = p.b.shape[1]

        @k.for_each_tile(grid=(axis("m", cdiv(M, 32)), axis("n", cdiv(N, 32))), warps=2)
        def body(t, pid):
            def step(t, k0, acc):
                a = p.a.load_tile((pid["m"] * 32, k0), (32, 16))
                b = p.b.load_tile((k0, pid["n"] * 32), (16, 32))
                return t.dot(a, b, acc)

            acc = t.fold_range(0, K, 16, t.zeros((32, 32), f32), step)
            p.c.store_tile((pid["m"] * 32, pid["n"] * 32), acc)

    return matmul


def opcodes(graph) -> list[str]:
    return [op.opcode for op in graph.body.walk()]


# -- the targets' facts ----------------------------------------------------------------------


def test_targets_own_their_facts():
    assert Target.nvptx("sm_80").warp_size == Target.host().warp_size == WARP_SIZE == 32
    assert Target.nvptx("sm_80").limits.dynamic_shared == 163 * 1024
    assert Target.nvptx("sm_90").limits.dynamic_shared == 227 * 1024
    assert Target.nvptx("sm_80").limits.static_shared == 48 * 1024
    assert Target.nvptx("sm_75").capabilities.mma == ()
    assert Target.nvptx("sm_75").capabilities.ldmatrix and not Target.nvptx("sm_75").capabilities.cp_async
    assert Target.nvptx("sm_80").capabilities.cp_async and not Target.nvptx("sm_80").capabilities.tma
    assert not Target.nvptx("sm_90").capabilities.wgmma and Target.nvptx("sm_90a").capabilities.wgmma
    assert Target.reference().emitter is None and Target.host().emitter == "host"


def test_every_target_names_passes_that_exist():
    for target in (Target.reference(), Target.host(), Target.nvptx("sm_80")):
        assert target.pipeline == FRONT_END
        assert all(name in PASSES for name in target.passes)


def test_each_backend_says_its_target():
    assert isinstance(get_backend("numpy").target(None), type(Target.reference()))
    assert get_backend("llvm").target(None).emitter == "host"
    assert get_backend("ptx").target("sm_90").arch == "sm_90"
    assert get_backend("cuda").target(None).capabilities.mma  # the device's arch: taken to be sm_80 or later


# -- each pass by name -----------------------------------------------------------------------


def test_the_front_end_passes_are_the_optimiser():
    traced = row_sum().traced_graph
    assert run_passes(traced, Target.reference(), FRONT_END).text() == optimize(traced, verified=True).text()


def test_fold_constants_by_name_folds_a_multiply_by_one():
    @kernel(dst=tensor(i32, 1), x=tensor(i32, 1))
    def by_one(k, p):
        @k.for_each_tile(grid=(axis("i", 1),))
        def body(t, pid):
            p.dst.store_tile((0,), p.x.load_tile((pid["i"] * 1,), (32,)))

    traced = by_one.traced_graph
    after = PASSES["fold-constants"].run(traced, Target.reference())
    assert opcodes(after).count("mul") == opcodes(traced).count("mul") - 1


def test_cse_by_name_merges_equal_ops():
    @kernel(dst=tensor(f32, 1), x=tensor(f32, 1))
    def twice(k, p):
        @k.for_each_tile(grid=(axis("i", 1),))
        def body(t, pid):
            x = p.x.load_tile((0,), (32,))
            p.dst.store_tile((0,), t.exp(x) + t.exp(x))

    traced = twice.traced_graph
    after = PASSES["cse"].run(traced, Target.reference())
    assert opcodes(traced).count("exp") == 2 and opcodes(after).count("exp") == 1


def test_dce_by_name_drops_an_unused_op():
    @kernel(dst=tensor(f32, 1), x=tensor(f32, 1))
    def unused(k, p):
        @k.for_each_tile(grid=(axis("i", 1),))
        def body(t, pid):
            x = p.x.load_tile((0,), (32,))
            t.exp(x)  # never used
            p.dst.store_tile((0,), x)

    traced = unused.traced_graph
    assert "exp" in opcodes(traced) and "exp" not in opcodes(PASSES["dce"].run(traced, Target.reference()))


def test_hoist_by_name_moves_an_invariant_out_of_the_loop():
    @kernel(dst=tensor(f32, 1), x=tensor(f32, 1))
    def invariant(k, p):
        @k.for_each_tile(grid=(axis("i", 1),))
        def body(t, pid):
            x = p.x.load_tile((0,), (32,))
            acc = t.fold_range(0, 4, 1, t.zeros((32,), f32), lambda t, j, acc: acc + t.exp(x))
            p.dst.store_tile((0,), acc)

    traced = invariant.traced_graph
    after = PASSES["hoist-loop-invariants"].run(traced, Target.reference())
    fold = lambda g: next(op for op in g.body.walk() if op.opcode == "fold")  # noqa: E731
    assert "exp" in [op.opcode for op in fold(traced).regions[0].walk()]
    assert "exp" not in [op.opcode for op in fold(after).regions[0].walk()]


def test_verify_by_name_returns_the_graph():
    graph = row_sum().graph
    assert PASSES["verify"].run(graph, Target.reference()) is graph


def test_distribute_tiles_uses_tensor_cores_where_the_target_has_them():
    graph = matmul().graph
    on_80 = PASSES["distribute-tiles"].run(graph, Target.nvptx("sm_80"))
    on_75 = PASSES["distribute-tiles"].run(graph, Target.nvptx("sm_75"))
    assert "mma" in opcodes(on_80) and "mma" not in opcodes(on_75)
    assert not on_80.is_tile_launch and on_80.is_block_launch


def test_the_nvptx_tile_pipeline_is_distribution_then_the_optimiser():
    graph = row_sum().graph
    assert lower(graph, Target.nvptx("sm_80")).text() == optimize(fold_decided_comparisons(distribute(graph, True))).text()
    assert lower(graph, Target.host()) is graph and lower(graph, Target.reference()) is graph


def test_plan_tile_accesses_reports_each_access_and_leaves_the_graph():
    graph = row_sum().graph
    assert PASSES["plan-tile-accesses"].run(graph, Target.host()) is graph
    report = PASSES["plan-tile-accesses"].report(graph, Target.host())
    lines = report.splitlines()[1:]
    assert len(lines) == 2 and "tile_load" in lines[0] and "tile_store" in lines[1]
    assert all("row by row" in line and "mask as ranges" in line and "test_pipeline.py" in line for line in lines)


def test_a_gather_is_reported_element_by_element():
    @kernel(dst=tensor(f32, 1), x=tensor(f32, 1), idx=tensor(i32, 1))
    def gather(k, p):
        @k.for_each_tile(grid=(axis("i", 1),))
        def body(t, pid):
            i = p.idx.load_tile((0,), (32,))
            p.dst.store_tile((0,), p.x.load(t.cast(i, accy.index)))

    report = PASSES["plan-tile-accesses"].report(gather.graph, Target.host())
    assert any("element by element" in line for line in report.splitlines())


def test_stages_and_their_positions():
    target = Target.nvptx("sm_80")
    names = [s.name for s in stages(target, tile=True)]
    assert names[0] == "trace" and names[1:] == list(target.passes)
    assert [s.name for s in stages(target, tile=False)][1:] == list(FRONT_END)
    assert find_stage(target, True, "cse").position == 2  # a pass that runs twice: its first run
    assert find_stage(target, True, "12").name == "cse"
    with pytest.raises(AccyError, match="no pass 'nope'.*distribute-tiles"):
        find_stage(target, True, "nope")


# -- the command line and the dumps ----------------------------------------------------------


@pytest.fixture
def softmax_file():
    from pathlib import Path

    return str(Path(__file__).resolve().parent.parent / "examples" / "tile_softmax.py") + ":tile_softmax"


@pytest.mark.parametrize("backend", BACKENDS)
def test_accy_ir_passes_and_after_every_pass_on_every_backend(backend, softmax_file, capsys):
    assert main(["ir", softmax_file, "--passes", "--backend", backend]) == 0
    listing = capsys.readouterr().out.splitlines()[1:]
    assert [line.split()[1] for line in listing] == [s.name for s in stages(get_backend(backend).target(None), True)]
    texts = []
    for line in listing:
        position = line.split()[0]
        assert main(["ir", softmax_file, "--after", position, "--backend", backend]) == 0
        texts.append(capsys.readouterr().out)
    assert texts[0].startswith("kernel @tile_softmax") and "for_each_tile" in texts[0]
    if backend in ("ptx", "cuda"):
        assert "for_each_tile" not in texts[-1] and "block" in texts[-1]
    if backend == "llvm":
        assert "// plan-tile-accesses" in texts[-1]


def test_accy_ir_after_an_unknown_pass_is_a_usage_error(softmax_file, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["ir", softmax_file, "--after", "nope"])
    assert exit_.value.code == 2 and "no pass 'nope'" in capsys.readouterr().err


def test_dump_passes_writes_every_stage(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCY_DUMP_PASSES", str(tmp_path))
    monkeypatch.setenv("ACCY_CACHE", "0")
    program = row_sum(32)  # a new Program: traced and lowered here
    program.graph_for("ptx")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "row_sum.reference.00-trace.txt" in names and "row_sum.reference.07-verify.txt" in names
    assert "row_sum.nvptx.08-distribute-tiles.txt" in names and "row_sum.nvptx.17-verify.txt" in names
    assert (tmp_path / "row_sum.nvptx.17-verify.txt").read_text().rstrip("\n") == program.graph_for("ptx").text().rstrip("\n")

