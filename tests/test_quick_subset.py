"""The quick subset (``pytest -m "not fuzz"``) is what tests/conftest.py says it is: the
sweeps it trims on the compiled backends exist under the names it gives them, so a renamed
sweep cannot slip back into the quick subset whole."""

import importlib

import pytest
from conftest import EVERY_DTYPE_SWEEPS, QUICK_DTYPES

from accy.dsl.types import DTYPES


def _parametrized(test) -> set[str]:
    names = set()
    for mark in getattr(test, "pytestmark", []):
        if mark.name == "parametrize":
            argnames = mark.args[0]
            names.update(n.strip() for n in (argnames.split(",") if isinstance(argnames, str) else argnames))
    return names


@pytest.mark.parametrize("path, function", sorted(EVERY_DTYPE_SWEEPS))
def test_each_trimmed_sweep_exists_with_its_dtype_parameters(path, function):
    module = importlib.import_module(path.removesuffix(".py"))
    test = getattr(module, function, None)
    assert test is not None, f"{path} has no {function}: update EVERY_DTYPE_SWEEPS in tests/conftest.py"
    assert set(EVERY_DTYPE_SWEEPS[path, function]) <= _parametrized(test)
    assert "backend" in test.__code__.co_varnames[:test.__code__.co_argcount]


def test_the_quick_dtypes_are_dtypes():
    assert QUICK_DTYPES <= set(DTYPES)
