"""The quick subset (``pytest -m "not fuzz"``) is what tests/conftest.py says it is: each sweep
that QUICK_CASES trims exists under the name it gives, takes the parameters it names, and keeps
some of its cases in the quick subset and leaves some to the full suite, so a renamed or
reshaped sweep cannot slip back into the quick subset whole, or out of it."""

import importlib

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
