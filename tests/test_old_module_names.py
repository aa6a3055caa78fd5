"""accy.backends' old module names still import (the modules moved to accy/lowering, accy/codegen,
accy/runtime), each the very module it moved to, with a DeprecationWarning naming where."""

import importlib
import warnings

import pytest

from accy.backends import MOVED


@pytest.mark.parametrize("old, new", sorted(MOVED.items()))
def test_an_old_module_name_is_the_module_it_moved_to(old, new):
    with pytest.warns(DeprecationWarning, match=f"accy.backends.{old} is {new} now"):
        module = importlib.import_module(f"accy.backends.{old}")
    assert module is importlib.import_module(new)


def test_the_documented_old_imports_work():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from accy.backends import get_backend, toolchain
        from accy.backends.artifacts import RecordingBackendState
        from accy.backends.codegen import emit_ptx
        from accy.backends.targets import Target
    from accy.runtime import get_backend as runtime_get_backend
    from accy.runtime.artifacts import RecordingBackendState as moved

    assert get_backend is runtime_get_backend and RecordingBackendState is moved
    assert callable(emit_ptx) and Target.nvptx("sm_80").arch == "sm_80" and toolchain.__name__.endswith("toolchain")
