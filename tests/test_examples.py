"""Every script in examples/ runs as ``python examples/<name>.py`` and succeeds."""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def test_there_are_examples():
    assert {p.stem for p in EXAMPLES} >= {"softmax", "matmul", "layer_norm", "attention", "histogram", "sum"}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_90a"])
@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_example_programs_lower_to_ptx_that_ptxas_accepts(script, arch):
    """Each example's programs (PROGRAMS) emit PTX for the arch; conftest assembles it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"example_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for program in module.PROGRAMS:
        assert f".target {arch}" in program.ptx(arch)


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs(script, tmp_path):
    env = dict(os.environ, ACCY_CACHE_DIR=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    result = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{script.name} failed:\n{result.stdout}\n{result.stderr}"
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1 and "matches NumPy" in lines[0], result.stdout


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_example_exposes_main(script):
    source = script.read_text()
    assert "def main(" in source and 'if __name__ == "__main__":' in source
