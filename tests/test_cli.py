"""The command line: `accy demo`, `accy ir`, and usage errors instead of tracebacks."""

import json
import pathlib
import re
import subprocess
import sys
import tomllib
import warnings

import numpy as np
import pytest

import accy
from accy.runtime import BACKENDS
from accy.cli import main

ROOT = pathlib.Path(__file__).resolve().parent.parent


def demo_rows(out: str) -> dict[str, str]:
    """The demo's line for each backend, by name."""
    return {m[1]: m[2] for m in re.finditer(r"^  (\w+) +(.*)$", out, re.M) if m[1] in BACKENDS}


def test_demo_runs_numpy_llvm_and_ptx_times_each_and_says_they_agree(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "B=2 Q=16 K=32 H=16 V=16" in out
    rows = demo_rows(out)
    assert list(rows) == ["numpy", "llvm", "ptx"]
    for backend, row in rows.items():  # the first run (tracing, compiling) and the launch again, both timed
        assert re.fullmatch(r"\d+\.\d ms +\d+\.\d\d ms +\S+ \(ok\)", row), (backend, row)
    assert re.search(r"^  backends numpy, llvm, ptx agree: they differ by at most \S+ \(tolerance 1e-04\)$", out, re.M)


def test_demo_without_libdevice_says_why_ptx_cannot_run_and_goes_on(monkeypatch, capsys):
    """A plain `pip install .` has no nvidia-cuda-nvcc: ptx cannot link exp, and the demo says so."""
    from accy.codegen import machine as codegen
    from accy.codegen.nvptx import toolchain

    monkeypatch.setattr(toolchain, "find_libdevice", lambda: None)
    monkeypatch.setattr(codegen, "find_libdevice", lambda: None)
    monkeypatch.setenv("ACCY_CACHE", "0")  # no PTX from the disk cache either
    assert main(["demo", "--batch", "1", "--queries", "3", "--keys", "5", "--qk", "4", "--value", "3"]) == 0
    rows = demo_rows(capsys.readouterr().out)
    assert rows["ptx"] == "skipped: its math functions need libdevice, which is not installed (pip install nvidia-cuda-nvcc)"
    assert rows["numpy"].endswith("(ok)") and rows["llvm"].endswith("(ok)")


def test_demo_fails_on_a_backend_that_disagrees(monkeypatch, capsys):
    from accy.library.entry import Entry

    real = Entry.run

    def off_by_one_on_llvm(self, args, backend="numpy", **options):
        result = real(self, args, backend=backend, **options)
        if backend == "llvm":
            args[0] += 1.0
        return result

    monkeypatch.setattr(Entry, "run", off_by_one_on_llvm)
    assert main(["demo", "--backends", "numpy,llvm"]) == 1
    out = capsys.readouterr().out
    assert demo_rows(out)["llvm"].endswith("(MISMATCH)") and "backends numpy, llvm DISAGREE" in out


def test_cli_backend_names_come_from_the_registry(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["compare", "attention", "--backends", "numpy,gpu"])
    assert exit_.value.code == 2
    assert f"expected backends from {', '.join(BACKENDS)} separated by commas, got 'numpy,gpu'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["demo", "--backends", "llvm,nope"])
    assert ", ".join(BACKENDS) in capsys.readouterr().err


def test_compare_by_default_runs_every_backend_as_accy_compare_does(capsys):
    from accy.library.attention import ScaledDotProduct, scaled_dot_product_f32

    assert main(["compare", "attention", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    rng = np.random.default_rng(0)  # the CLI's inputs for its default attention shape and seed
    args = [np.zeros((2, 4, 2), np.float32)] + [rng.standard_normal(s, dtype=np.float32)
                                                for s in ((2, 4, 3), (2, 5, 3), (2, 5, 2))]
    api = json.loads(accy.compare(scaled_dot_product_f32(ScaledDotProduct(2, 4, 5, 3, 2)), args).to_json())
    assert "ptx" in cli["ran"] and set(cli["ran"]) | set(cli["skipped"]) | set(cli["failed"]) == set(BACKENDS)
    assert (cli["ran"], cli["skipped"], cli["pairs"]) == (api["ran"], api["skipped"], api["pairs"])


def test_the_version_has_one_source():
    """pyproject.toml takes the version from accy/version.py (setuptools' dynamic attr), which accy exports."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "accy.version.__version__"}
    config = pytest.importorskip("setuptools.config.pyprojecttoml")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # setuptools may call [tool.setuptools] beta
        expanded = config.read_configuration(ROOT / "pyproject.toml", expand=True)
    assert expanded["project"]["version"] == accy.__version__ == "0.2.0"


def test_ir_prints_the_graph(capsys):
    assert main(["ir", "attention", "--batch", "2", "--queries", "2", "--keys", "3", "--qk", "2", "--value", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("kernel @accy_kernel_attention_sdpa2x2x3x2x2_")
    assert out.count("fold ") == 7 and "exp" in out and "store %dst" in out


def test_ir_raw_differs_from_optimised(capsys):
    main(["ir", "attention", "--raw"])
    raw = capsys.readouterr().out
    main(["ir", "attention"])
    assert len(raw) > len(capsys.readouterr().out)


@pytest.mark.parametrize("argv, message", [
    (["ir", "attention", "--batch", "0"], "expected a positive integer"),
    (["ir", "matmul"], "kernel must be 'attention' or FILE.py:NAME"),
    (["demo", "--threads", "2,2"], "expected X,Y,Z"),
    (["frobnicate"], "invalid choice"),
    ([], "required"),
])
def test_bad_flags_give_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_launch_error_is_reported_not_raised(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["demo", "--threads", "64,64,1"])
    assert exit_.value.code == 2
    assert "over the limit of 1024" in capsys.readouterr().err


def test_python_dash_m_entry_point():
    result = subprocess.run([sys.executable, "-m", "accy", "ir", "attention"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("kernel @")


def test_ptx_writes_a_file_ptxas_accepts(tmp_path, capsys):
    from accy.codegen.nvptx.toolchain import assemble, find_ptxas

    out = tmp_path / "out.ptx"
    assert main(["ptx", "attention", "--batch", "2", "--queries", "3", "--arch", "sm_90", "-o", str(out)]) == 0
    text = out.read_text()
    assert ".target sm_90" in text
    if find_ptxas() is None:
        pytest.skip("no ptxas: pip install nvidia-cuda-nvcc")
    assert assemble(text, "sm_90")


def test_llvm_ir_for_both_targets(capsys):
    main(["llvm-ir", "attention", "--target", "host"])
    host = capsys.readouterr().out
    main(["llvm-ir", "attention", "--arch", "sm_90"])
    nvptx = capsys.readouterr().out
    assert '_host"(' in host and "nvptx64-nvidia-cuda" in nvptx and "ptx_kernel" in nvptx


def test_bad_arch_is_a_usage_error(capsys):
    with pytest.raises(SystemExit):
        main(["ptx", "attention", "--arch", "sm80"])
    assert "arch must be an NVPTX processor LLVM knows" in capsys.readouterr().err


def test_demo_on_llvm(capsys):
    assert main(["demo", "--backend", "llvm"]) == 0
    assert list(demo_rows(capsys.readouterr().out)) == ["llvm"]


def test_a_users_module_with_sibling_imports_and_per_buffer_sizes(tmp_path, capsys):
    (tmp_path / "helpers.py").write_text("COLS = 4\n")
    (tmp_path / "mine.py").write_text(
        "from helpers import COLS\n"
        "from accy import axis, dynamic_buffer, f32, index, kernel, scalar\n"
        "@kernel('row_sums', dst=dynamic_buffer(f32), x=dynamic_buffer(f32))\n"
        "def anything(k, a):\n"
        "    @k.for_each_1d(axis('r', a.dst.size))\n"
        "    def each(inner, idx):\n"
        "        r = idx['r']\n"
        "        a.dst[r] = inner.fold_range(0, COLS, 1, 0.0, lambda inner, j, s: s + a.x[r * COLS + j])\n")
    target = f"{tmp_path / 'mine.py'}:anything"
    assert main(["ir", target]) == 0 and "kernel @row_sums(" in capsys.readouterr().out
    assert main(["compare", target, "--backends", "numpy,llvm", "--size", "dst=3", "--size", "x=12"]) == 0
    assert "agree" in capsys.readouterr().out
    # the default size gives x too few elements: every backend fails, and the report says what to do
    assert main(["compare", target, "--backends", "numpy,llvm", "--size", "dst=5", "--size", "x=3"]) == 1
    assert "every backend failed: the generated inputs may not fit" in capsys.readouterr().out
    (tmp_path / "broken.py").write_text("import not_a_module_anywhere\n")
    with pytest.raises(SystemExit):
        main(["ir", f"{tmp_path / 'broken.py'}:x"])
    err = capsys.readouterr().err
    assert "importing" in err and "ModuleNotFoundError" in err and "Traceback" not in err


def test_info_reports_registers_spills_shared_memory_and_occupancy(capsys):
    from accy.codegen.nvptx.toolchain import find_ptxas

    if find_ptxas() is None:
        pytest.skip("no ptxas: pip install nvidia-cuda-nvcc")
    assert main(["info", "attention", "--flash", "--qk", "64", "--value", "64"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "128 threads per block" in lines[0]
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert set(rows) == {"sm_80", "sm_90", "sm_90a"}
    # arch, registers, spills "st/ld B", stack, shared, blocks/SM, occupancy, mma, wgmma, warpgroups, stages,
    # limiter
    for row in rows.values():
        occupancy, mma, wgmma, groups, stages, *limiter = row[9:]
        assert int(row[1]) <= 128 and row[2] == "0/0" and occupancy.endswith("%") and mma == wgmma == groups == "0"
        assert stages == "1" and limiter[0] in ("registers", "shared", "warps", "blocks")


def test_compare_runs_the_ptx_of_the_arch_asked_for(capsys):
    """``--arch sm_90a``: the ptx backend runs the tile matmul's wgmma code on the emulator."""
    from accy.codegen.nvptx.toolchain import find_ptxas

    if find_ptxas() is None:
        pytest.skip("no ptxas: pip install nvidia-cuda-nvcc")
    example = pathlib.Path(__file__).resolve().parent.parent / "examples" / "tile_matmul.py"
    assert main(["compare", f"{example}:tile_matmul_bf16", "--backends", "numpy,ptx", "--arch", "sm_90a",
                 "--size", "130", "--rtol", "1e-3", "--atol", "1e-3"]) == 0
    assert "agree" in capsys.readouterr().out


def test_info_counts_the_mma_instructions_of_a_tile_matmul(capsys):
    from accy.codegen.nvptx.toolchain import find_ptxas

    if find_ptxas() is None:
        pytest.skip("no ptxas: pip install nvidia-cuda-nvcc")
    example = pathlib.Path(__file__).resolve().parent.parent / "examples" / "tile_matmul.py"
    assert main(["info", f"{example}:tile_matmul_bf16", "--arch", "sm_80"]) == 0
    row = capsys.readouterr().out.splitlines()[2].split()
    # 128 x 128 x 64 tiles on 8 warps, 2 x 4 of them: a warp's 64 x 32 of c, 4 row tiles x 4 column
    # tiles x 4 k-steps of m16n8k16
    assert row[0] == "sm_80" and row[10:14] == ["64", "0", "0", "3"] and row[2] == "0/0"
    # at sm_90a: two warpgroups, each 4 k-steps of m64n128k16, in each of the fold's two versions
    # (by TMA, by cp.async where the launch cannot describe a tensor), fed by a producer warpgroup
    assert main(["info", f"{example}:tile_matmul_bf16", "--arch", "sm_90a"]) == 0
    out = capsys.readouterr().out.splitlines()
    row = out[2].split()
    assert row[0] == "sm_90a" and row[10:14] == ["0", "8", "2", "3"] and row[2] == "0/0"
    assert "roles: 2 consumer warpgroups at 232 registers, 1 producer warpgroup at 40" in out[3]
    assert out[4].split() == ["a:", "TMA", "(boxes", "8x64", "swizzle", "128),", "cp.async", "where", "the",
                              "launch", "cannot", "describe", "it"]


def test_occupancy_follows_the_cuda_rules():
    from accy.codegen.nvptx.occupancy import occupancy
    from accy.codegen.nvptx.toolchain import Resources

    full = occupancy(Resources("sm_90", 32, 0, 0, 0, 0, 0), 256)
    assert (full.blocks_per_sm, full.fraction, full.limiter) == (8, 1.0, "warps")
    heavy = occupancy(Resources("sm_80", 255, 0, 0, 0, 0, 0), 256)  # 8192 registers a warp: 8 warps fit
    assert (heavy.blocks_per_sm, heavy.warps_per_sm, heavy.limiter) == (1, 8, "registers")
    shared = occupancy(Resources("sm_80", 32, 0, 0, 48 * 1024, 0, 1), 128)  # 49 KiB + 1 KiB reserved a block
    assert (shared.blocks_per_sm, shared.limiter) == (3, "shared memory")
