"""Kernel-call artifacts, their registry, and backend states.

A *backend state* compiles a graph into a payload and loads and launches it.
:class:`RecordingBackendState` does everything but touch a device: it compiles
real PTX and records what would be loaded and launched, for tests and for
building artifacts on machines without a GPU.  The PyCUDA backend implements
the same interface for real.

A :class:`KernelArtifact` is what a runtime needs to call a kernel: its entry
point, parameters, dtypes, launch geometry and compiled payload.  Its ``launch``
is fixed when every extent is known when the kernel is built; a kernel whose
extents come from run-time values has ``launch=None`` and its ``block``: the
grid is computed at each call.  ``abi`` says how the payload takes its
arguments (see :mod:`accy.codegen.abi`).
"""

from __future__ import annotations

import enum
from typing import Iterator, Protocol

import attrs

from ..dsl.ir import Graph
from ..dsl.schedule import Launch
from ..dsl.types import DType
from ..codegen.nvptx import toolchain
from ..codegen.abi import ABI, dynamic_shared_bytes
from ..codegen.machine import emit_ptx
from ..targets import Target


class BackendKind(enum.Enum):
    cuda = "cuda"


class ArtifactFormat(enum.Enum):
    cuda_ptx = "cuda_ptx"


@attrs.frozen
class DTypeSet:
    """A set of element types, e.g. the dtypes an artifact's buffers need."""

    dtypes: frozenset[DType]

    @classmethod
    def of(cls, dtypes) -> "DTypeSet":
        return cls(frozenset(dtypes))

    def __contains__(self, dtype) -> bool:
        return dtype in self.dtypes

    def __len__(self) -> int:
        return len(self.dtypes)


@attrs.frozen(eq=False)
class KernelArtifact:
    target: str
    version: int
    format: ArtifactFormat
    entry_name: str
    argument_count: int
    parameter_names: tuple[str, ...]
    required_dtypes: DTypeSet
    launch: Launch | None  # None: computed at each call from the run-time extents
    block: tuple[int, int, int]
    payload: str
    arch: str
    abi: str = ABI
    graph: Graph | None = attrs.field(default=None, repr=False)
    # registers, spills and shared bytes per block, from ptxas -v (None where ptxas is missing)
    resources: toolchain.Resources | None = None
    # the dynamic shared memory a launch must give each block (past 48 KiB the caller also sets
    # the kernel's CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to it); 0: none
    dynamic_shared: int = 0

    @property
    def fixed(self) -> bool:
        return self.launch is not None


class Registry:
    """Artifacts found by ``(target, version, format)``."""

    def __init__(self, artifacts=()):
        self._by_key: dict[tuple, KernelArtifact] = {}
        for a in artifacts:
            self.add(a)

    def add(self, artifact: KernelArtifact) -> None:
        self._by_key[(artifact.target, artifact.version, ArtifactFormat(artifact.format))] = artifact

    def find(self, target: str, version: int, format) -> KernelArtifact | None:
        return self._by_key.get((target, version, ArtifactFormat(format)))

    def __iter__(self) -> Iterator[KernelArtifact]:
        return iter(self._by_key.values())

    def __len__(self) -> int:
        return len(self._by_key)


class BackendState(Protocol):
    kind: BackendKind
    format: ArtifactFormat

    def compile(self, graph: Graph, block: tuple[int, int, int]) -> tuple[str, str]:
        """Compile ``graph`` for blocks of ``block`` threads; returns (payload, arch)."""

    def load(self, artifact: KernelArtifact):
        """Make ``artifact`` callable; returns a handle for :meth:`launch`."""

    def launch(self, handle, binding, launch: Launch) -> None:
        """Run a loaded artifact on bound arguments."""


@attrs.define
class RecordingBackendState:
    """Compiles real PTX and records loads and launches instead of performing them."""

    kind: BackendKind = BackendKind.cuda
    format: ArtifactFormat = ArtifactFormat.cuda_ptx
    arch: str = "sm_80"
    fast_math: bool = False
    compiled: list = attrs.field(factory=list)
    loaded: list = attrs.field(factory=list)
    launched: list = attrs.field(factory=list)

    def compile(self, graph: Graph, block: tuple[int, int, int]) -> tuple[str, str]:
        ptx = emit_ptx(graph, Target.nvptx(self.arch, fast_math=self.fast_math), block)
        self.compiled.append((graph.name, self.arch))
        return ptx, self.arch

    def load(self, artifact: KernelArtifact):
        self.loaded.append(artifact.entry_name)
        return artifact

    def launch(self, handle: KernelArtifact, binding, launch: Launch | None = None) -> None:
        """Record a launch (by default with the artifact's fixed geometry)."""
        sizes = tuple(binding.infos[name].size for name in handle.parameter_names if name in binding.infos)
        self.launched.append((handle.entry_name, launch or handle.launch, sizes))


@attrs.frozen(eq=False)
class KernelCallArtifact:
    """The artifacts built for one call site, and the backend state that built them."""

    artifacts: tuple[KernelArtifact, ...]
    backend_state: object

    def registry(self) -> Registry:
        return Registry(self.artifacts)


def build_artifact(graph: Graph, launch: Launch | None, block: tuple[int, int, int], state: BackendState, *,
                   target: str, version: int = 1) -> KernelArtifact:
    """Compile ``graph`` with ``state`` into an artifact (``launch`` None: sized per call)."""
    payload, arch = state.compile(graph, block)
    resources = toolchain.resources(payload, arch) if toolchain.find_ptxas() is not None else None
    return KernelArtifact(
        target=target,
        version=version,
        format=state.format,
        entry_name=graph.name,
        argument_count=len(graph.params),
        parameter_names=tuple(p.name for p in graph.params),
        required_dtypes=DTypeSet.of(p.dtype for p in graph.params),
        launch=launch,
        block=tuple(block),
        payload=payload,
        arch=arch,
        graph=graph,
        resources=resources,
        dynamic_shared=dynamic_shared_bytes(graph),
    )
