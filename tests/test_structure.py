"""scripts/check_structure.py holds for accy (stages import one way, no class over 400 lines with
its own mixins and helpers, no module over 800, the warp size written once), and it catches each
kind of breach."""

import importlib.util
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("check_structure", ROOT / "scripts" / "check_structure.py")
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)


def test_accy_passes_its_structure_check():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_structure.py")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "structure OK" in done.stdout


def test_a_mixin_used_by_one_class_counts_with_it(tmp_path):
    mixin = "class Mixin:\n" + "    x = 1\n" * 300
    user = "from .a import Mixin\n\nclass God(Mixin):\n" + "    y = 2\n" * 150
    helper = "def helper(god: 'God'):\n" + "    return 1\n" * 20
    (tmp_path / "a.py").write_text(mixin)
    (tmp_path / "b.py").write_text(user + "\n\n" + helper)
    sizes = check.class_sizes({"pkg.a": tmp_path / "a.py", "pkg.b": tmp_path / "b.py"})
    assert sizes == {"pkg.b.God": 151 + 301 + 21}


def test_stages_go_one_way():
    assert check.stage("accy.dsl.ir") < check.stage("accy.lowering.distribute") < check.stage("accy.codegen.llvm")
    assert check.stage("accy.codegen.llvm") < check.stage("accy.runtime.host") < check.stage("accy.program")
    assert check.stage("accy.targets") == check.stage("accy.dsl.ir")


def test_an_import_circle_is_found():
    assert check.cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_a_warp_size_written_again_is_found():
    for line in ("WARP = 32", "WARP_SIZE: int = 32", "threads = warps * 32", "n = 32 * warps"):
        assert check.WARP_LITERAL.search(line), line
    for line in ("x = 32", "WARP = WARP_SIZE", "bits = 32"):
        assert not check.WARP_LITERAL.search(line), line
