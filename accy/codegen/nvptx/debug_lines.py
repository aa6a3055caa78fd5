"""Source lines in the PTX: LLVM debug locations for the NVPTX lowering, so the PTX carries
``.file``/``.loc`` directives that name the kernel's Python lines (what the emulator's errors
quote, and what cuda-gdb and compute-sanitizer show on a GPU).

Only line directives are emitted (``DebugDirectivesOnly``, as clang's
``-gline-directives-only``): no DWARF sections, so ptxas assembles the same code and the
register use does not change.  Each op's instructions get its
:class:`~accy.dsl.ir.SourceLocation`; instructions the wrapper emits around the ops (thread
indices, the launch's bounds) have none.  The PTX then depends on where the kernel's source
is, so :func:`locations_key` is part of the PTX cache's key.
"""

from __future__ import annotations

import hashlib
import os

from llvmlite import ir

from ...dsl.ir import Graph, Op
from ..llvm_types import I32


def locations_key(graph: Graph) -> str:
    """A digest of every op's source location (file and line), for cache keys."""
    digest = hashlib.sha256()
    for op in graph.body.walk():
        loc = op.location
        if loc is not None:
            digest.update(f"{loc.filename}:{loc.lineno}\n".encode())
    return digest.hexdigest()


class DebugLines:
    """The debug metadata of one module: a compile unit, a subprogram for the kernel, and one
    location per (file, line) an op came from."""

    def __init__(self, module: ir.Module, graph: Graph):
        self.module = module
        first = next((op.location for op in graph.body.walk() if op.location is not None), None)
        self.main = first.filename if first is not None else "<accy>"
        self.line = first.lineno if first is not None else 0
        self.files: dict[str, object] = {}
        self.scopes: dict[str, object] = {}
        self.locations: dict[tuple[str, int], object] = {}
        self.unit = module.add_debug_info("DICompileUnit", {
            "language": ir.DIToken("DW_LANG_Python"),
            "file": self._file(self.main),
            "producer": "accy",
            "isOptimized": True,
            "runtimeVersion": 0,
            "emissionKind": ir.DIToken("DebugDirectivesOnly"),
        }, is_distinct=True)
        module.add_named_metadata("llvm.dbg.cu", self.unit)
        module.add_named_metadata("llvm.module.flags", [ir.Constant(I32, 2), "Debug Info Version",
                                                        ir.Constant(I32, 3)])
        self.subprogram = None

    def _file(self, filename: str):
        found = self.files.get(filename)
        if found is None:
            directory, name = os.path.split(filename)
            found = self.files[filename] = self.module.add_debug_info(
                "DIFile", {"filename": name or filename, "directory": directory})
        return found

    def begin(self, fn: ir.Function) -> None:
        """Attach the kernel's subprogram to ``fn`` (its entry)."""
        main = self._file(self.main)
        kind = self.module.add_debug_info("DISubroutineType", {"types": self.module.add_metadata([None])})
        self.subprogram = self.module.add_debug_info("DISubprogram", {
            "name": fn.name, "scope": main, "file": main, "line": self.line, "type": kind,
            "scopeLine": self.line, "unit": self.unit,
            "spFlags": ir.DIToken("DISPFlagDefinition | DISPFlagOptimized"),
        }, is_distinct=True)
        fn.set_metadata("dbg", self.subprogram)
        self.scopes[self.main] = self.subprogram

    def location(self, op: Op):
        """The DILocation of ``op``'s source line (None without one)."""
        loc = op.location
        if loc is None or self.subprogram is None:
            return None
        key = (loc.filename, loc.lineno)
        found = self.locations.get(key)
        if found is None:
            scope = self.scopes.get(loc.filename)
            if scope is None:  # another file (a helper's, the library's): a block of the kernel in it
                scope = self.scopes[loc.filename] = self.module.add_debug_info(
                    "DILexicalBlockFile", {"scope": self.subprogram, "file": self._file(loc.filename),
                                           "discriminator": 0})
            found = self.locations[key] = self.module.add_debug_info(
                "DILocation", {"line": loc.lineno, "column": 0, "scope": scope})
        return found
