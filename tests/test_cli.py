"""The command line: `accy demo`, `accy ir`, and usage errors instead of tracebacks."""

import subprocess
import sys

import pytest

from accy.cli import main


def test_demo_runs_and_checks_against_numpy(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "B=2 Q=16 K=32 H=16 V=16" in out and "ok" in out and "ms" in out


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
    from accy.backends.toolchain import assemble, find_ptxas

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
    assert "arch must look like sm_80" in capsys.readouterr().err


def test_demo_on_llvm(capsys):
    assert main(["demo", "--backend", "llvm"]) == 0
    assert "backend  llvm" in capsys.readouterr().out


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
    from accy.backends.toolchain import find_ptxas

    if find_ptxas() is None:
        pytest.skip("no ptxas: pip install nvidia-cuda-nvcc")
    assert main(["info", "attention", "--flash", "--qk", "64", "--value", "64"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "128 threads per block" in lines[0]
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert set(rows) == {"sm_80", "sm_90"}
    for row in rows.values():  # arch, registers, spills "st/ld B", stack, shared, blocks/SM, occupancy, limiter
        assert int(row[1]) <= 128 and row[2] == "0/0" and row[-2].endswith("%")
        assert row[-1] in ("registers", "shared memory", "warps", "blocks") or row[-2:] == ["shared", "memory"]


def test_occupancy_follows_the_cuda_rules():
    from accy.backends.occupancy import occupancy
    from accy.backends.toolchain import Resources

    full = occupancy(Resources("sm_90", 32, 0, 0, 0, 0, 0), 256)
    assert (full.blocks_per_sm, full.fraction, full.limiter) == (8, 1.0, "warps")
    heavy = occupancy(Resources("sm_80", 255, 0, 0, 0, 0, 0), 256)  # 8192 registers a warp: 8 warps fit
    assert (heavy.blocks_per_sm, heavy.warps_per_sm, heavy.limiter) == (1, 8, "registers")
    shared = occupancy(Resources("sm_80", 32, 0, 0, 48 * 1024, 0, 1), 128)  # 49 KiB + 1 KiB reserved a block
    assert (shared.blocks_per_sm, shared.limiter) == (3, "shared memory")
