"""``accy.backends``: where the compiler's modules lived before its stages had folders of their
own (:mod:`accy.lowering`, :mod:`accy.codegen`, :mod:`accy.runtime`).  Code that imports an old
name (``from accy.backends.artifacts import RecordingBackendState``, ``accy.backends.cache``)
gets the module it moved to, with a DeprecationWarning naming it."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings

# old module (under accy.backends) -> where it lives now
MOVED = {
    "distribute": "accy.lowering.distribute", "layouts": "accy.lowering.layouts",
    "tensor_cores": "accy.lowering.tensor_cores", "tile_access": "accy.lowering.tile_access",
    "targets": "accy.targets", "cache": "accy.cache", "diagnostics": "accy.diagnostics",
    "llvm": "accy.codegen.llvm", "llvm_types": "accy.codegen.llvm_types", "loops": "accy.codegen.loops",
    "memory_access": "accy.codegen.memory_access", "minifloat": "accy.codegen.minifloat", "abi": "accy.codegen.abi",
    "codegen": "accy.codegen.machine", "spmd": "accy.codegen.host.spmd", "masking": "accy.codegen.host.masking",
    "chunking": "accy.codegen.host.chunking", "host_blocks": "accy.codegen.host.blocks",
    "launch_proof": "accy.codegen.host.launch_proof", "tile_host": "accy.codegen.host.tiles",
    "vecmath": "accy.codegen.host.vecmath", "host_code": "accy.codegen.host.code_store",
    "nvptx": "accy.codegen.nvptx.lowering", "debug_lines": "accy.codegen.nvptx.debug_lines",
    "toolchain": "accy.codegen.nvptx.toolchain", "occupancy": "accy.codegen.nvptx.occupancy",
    "contract": "accy.runtime.contract", "arguments": "accy.runtime.arguments",
    "tensor_arguments": "accy.runtime.tensor_arguments", "extents": "accy.runtime.extents",
    "artifacts": "accy.runtime.artifacts", "host": "accy.runtime.host", "gpu": "accy.runtime.gpu",
    "cuda": "accy.runtime.cuda", "emulated": "accy.runtime.emulated", "drivers": "accy.runtime.drivers",
    "numpy_backend": "accy.runtime.interpreter", "interpreter": "accy.runtime.interpreter.simt",
    "numerics": "accy.runtime.interpreter.numerics", "sanitizer": "accy.runtime.interpreter.sanitizer",
    "debug": "accy.runtime.interpreter.debug", "warp_matrix": "accy.runtime.interpreter.warp_matrix",
    "tile_interpreter": "accy.runtime.interpreter.tiles", "tile_folds": "accy.runtime.interpreter.tile_folds",
    "tile_memory": "accy.runtime.interpreter.tile_memory", "tile_numerics": "accy.runtime.interpreter.tile_numerics",
}


def _moved(old: str, new: str):
    warnings.warn(f"accy.backends.{old} is {new} now; import it from there", DeprecationWarning, stacklevel=3)
    return importlib.import_module(new)


_OWN = ("__spec__", "__loader__", "__package__", "__name__", "__file__", "__cached__", "__path__")


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``accy.backends.OLD`` as the module it moved to (the same module object, its own
    spec kept: its relative imports still resolve where it lives)."""

    def __init__(self):
        self.saved: dict[str, dict] = {}

    def find_spec(self, fullname, path=None, target=None):
        prefix, _, old = fullname.partition(__name__ + ".")
        if prefix or old not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        module = _moved(spec.name.rpartition(".")[2], MOVED[spec.name.rpartition(".")[2]])
        self.saved[spec.name] = {k: module.__dict__[k] for k in _OWN if k in module.__dict__}
        return module

    def exec_module(self, module):
        # the import machinery stamped the old name's spec on the module: give it back its own
        module.__dict__.update(self.saved.pop(module.__spec__.name))


if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
    sys.meta_path.insert(0, _Alias())  # before the path finder: a stale folder left by an upgrade must not shadow it


def __getattr__(name: str):
    if name in MOVED:
        return _moved(name, MOVED[name])
    runtime = importlib.import_module("accy.runtime")  # run, get_backend, BACKENDS, ...
    if hasattr(runtime, name):
        warnings.warn(f"accy.backends.{name} is accy.runtime.{name} now", DeprecationWarning, stacklevel=2)
        return getattr(runtime, name)
    raise AttributeError(f"module 'accy.backends' has no attribute {name!r}")
