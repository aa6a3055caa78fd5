"""The quick subset (pytest's default selection, ``-m "not fuzz and not full"`` in pyproject.toml)
is what tests/conftest.py says it is: each sweep that QUICK_CASES trims exists under the name it
gives, takes the parameters it names, and keeps some of its cases in the quick subset and leaves
some to the full suite, so a renamed or reshaped sweep cannot slip back into the quick subset
whole, or out of it.  And it is what the README's quick start runs, with what the test extra
installs, and .ci/run runs it as written, then the rest."""

import importlib
import itertools
import pathlib
import re
import shlex
import tomllib

import pytest
from conftest import QUICK_CASES, QUICK_DTYPES

from accy.dsl.types import DTYPES


def _values(test, name: str) -> list[str]:
    """The str of each value the ``parametrize`` marks of ``test`` give parameter ``name``."""
    for mark in getattr(test, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        argnames = mark.args[0]
        names = [n.strip() for n in (argnames.split(",") if isinstance(argnames, str) else argnames)]
        if name in names:
            rows = [row.values if hasattr(row, "values") else row if len(names) > 1 else (row,)
                    for row in mark.args[1]]  # a pytest.param's values, a tuple, or one value
            return [str(row[names.index(name)]) for row in rows]
    return []


@pytest.mark.parametrize("path, function", sorted(QUICK_CASES))
def test_each_trimmed_sweep_exists_and_keeps_some_of_its_cases(path, function):
    quick = QUICK_CASES[path, function]
    test = getattr(importlib.import_module(path.removesuffix(".py")), function, None)
    assert test is not None, f"{path} has no {function}: update QUICK_CASES in tests/conftest.py"
    if not quick.params:
        return  # the whole test is left to the full suite
    if quick.compiled_only:
        assert "backend" in test.__code__.co_varnames[:test.__code__.co_argcount]
    for name in quick.params:
        values = set(_values(test, name))
        assert values, f"{function} takes no parametrized {name}"
        assert values & quick.keep, f"the quick subset keeps no {name} of {function}: {sorted(values)}"
        assert values - quick.keep, f"the quick subset keeps every {name} of {function}"


def test_the_quick_dtypes_are_dtypes():
    assert QUICK_DTYPES <= set(DTYPES)


ROOT = pathlib.Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
MARKERS = [line.split(":")[0] for line in PYPROJECT["tool"]["pytest"]["ini_options"]["markers"]]


def _requirement_names(extra: str) -> set[str]:
    return {re.match(r"[A-Za-z0-9_.-]+", req).group() for req in PYPROJECT["project"]["optional-dependencies"][extra]}


def test_the_test_extra_brings_nothing_a_cpu_machine_does_not_need():
    # PyPI's torch is its CUDA build, gigabytes with its nvidia-* wheels: torch's tests skip without it
    assert "torch" not in _requirement_names("test")
    assert "torch" in _requirement_names("torch")
    assert "nvidia-cuda-nvcc" in _requirement_names("test")  # ptxas and libdevice: the ptx backend's tests


def _selects(expression: str, marks: tuple[str, ...]) -> bool:
    """Whether ``-m expression`` selects a test carrying ``marks`` (the expressions here are Python's too)."""
    return eval(expression, {"__builtins__": {}}, {name: name in marks for name in MARKERS})


def test_ci_runs_the_readme_quick_start_as_written_then_the_rest():
    section = (ROOT / "README.md").read_text().split("\n## Quick start\n")[1].split("\n## ")[0]
    commands = re.search(r"```sh\n(.*?)```", section, re.S).group(1).splitlines()
    assert len(commands) == 2 and "pytest" in commands[1] and "-m" not in shlex.split(commands[1])
    ci = (ROOT / ".ci" / "run").read_text()
    assert all(command in ci.splitlines() for command in commands)
    addopts = shlex.split(PYPROJECT["tool"]["pytest"]["ini_options"]["addopts"])
    quick = addopts[addopts.index("-m") + 1]
    rest = re.search(r'^pytest -n 2 -m "([^"]+)"', ci, re.M).group(1)
    for n in range(len(MARKERS) + 1):
        for marks in itertools.combinations(MARKERS, n):
            assert _selects(quick, marks) or _selects(rest, marks), f"neither the quick subset nor the rest runs {marks}"
    assert _selects(rest, ("torch",)), "torch's tests skip in the quick subset (the test extra has no torch)"
