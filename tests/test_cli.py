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
    (["ir", "matmul"], "invalid choice"),
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
