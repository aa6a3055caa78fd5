"""Host machine code that survives the process: a JIT-compiled launcher's object code, kept in
the disk cache (:mod:`.cache`) beside the PTX, and loaded back by a later process without
lowering, optimising or generating code again.

An entry is a JSON line (the launcher's function names and its :class:`HostPlan` or
:class:`TilePlan`) then the object file MCJIT produced.  Its key hashes what changes the
machine code: the graph's text, the target and its resolved vector width, the host CPU's name
and features, and (through :func:`.cache.cache_key`) the lowering's code and the llvmlite,
LLVM and accy versions.  The object is native code this process will run: the store's guards
(:mod:`.cache`) decide whether an entry may be read at all.
"""

from __future__ import annotations

import functools
import json

import attrs
import llvmlite.binding as llvm

from ...dsl.ir import Graph
from ...version import __version__
from ... import cache
from .chunking import Chunking, Chunks, host_vector_width
from .spmd import HostPlan
from ...targets import HostTarget
from .tiles import TilePlan

PLANS = {cls.__name__: cls for cls in (HostPlan, TilePlan)}  # the plans a launcher may have


@functools.cache
def host_cpu() -> str:
    """The host CPU's name and features, as LLVM sees them (once a process)."""
    return f"{llvm.get_host_cpu_name()} {llvm.get_host_cpu_features().flatten()}"


def host_code_key(graph: Graph, target: HostTarget, version: str = "launcher") -> str:
    """The key of ``graph``'s launcher ``version`` (its launcher, or the one with every check)."""
    width = target.vector_width or host_vector_width()
    return cache.cache_key("host", version, graph.text(), repr(target), f"width={width}", host_cpu(),
                           f"accy-{__version__}")


@attrs.frozen
class HostCode:
    """A compiled launcher: its object code and what the runtime needs beside it."""

    entry: str  # the units' function
    prepare: str  # the prepare function ("": none, in the version with every check)
    plan: HostPlan | TilePlan
    obj: bytes = attrs.field(repr=lambda obj: f"<{len(obj)} bytes>")
    check: str = ""  # a tile launcher's check-only pass over units ("": none)

    def to_bytes(self) -> bytes:
        fields = attrs.asdict(self.plan, recurse=False)
        fields["chunking"] = [self.plan.chunking.kind.name, self.plan.chunking.width]
        header = {"entry": self.entry, "prepare": self.prepare, "check": self.check, "plan": type(self.plan).__name__, "fields": fields}
        return json.dumps(header).encode() + b"\n" + self.obj

    @classmethod
    def from_bytes(cls, payload: bytes) -> "HostCode":
        """The code in ``payload``; raises ValueError (or KeyError, TypeError) for one this
        version cannot read."""
        header, _, obj = payload.partition(b"\n")
        meta = json.loads(header)
        fields = dict(meta["fields"])
        kind, width = fields["chunking"]
        fields["chunking"] = Chunking(Chunks[kind], int(width))
        return cls(str(meta["entry"]), str(meta["prepare"]), PLANS[meta["plan"]](**fields), obj, str(meta["check"]))


def load(key: str) -> HostCode | None:
    """The code stored under ``key``, or None (a miss, the cache off, or an entry refused)."""
    payload = cache.read(key)
    if payload is None:
        return None
    try:
        return HostCode.from_bytes(payload)
    except (ValueError, KeyError, TypeError) as e:  # checksummed, yet unreadable: a format change
        cache.warn(f"host code entry {key[:16]} is unreadable ({e}); recompiling")
        return None


def store(key: str, code: HostCode) -> None:
    cache.write(key, code.to_bytes())
