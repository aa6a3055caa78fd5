"""Kernel-call artifacts, their registry, and backend states.

A *backend state* compiles a graph into a payload and loads and launches it.
:class:`RecordingBackendState` does everything but touch a device: it compiles
real PTX and records what would be loaded and launched, for tests and for
building artifacts on machines without a GPU.  The PyCUDA backend implements
the same interface for real.

A :class:`KernelArtifact` is what a runtime needs to call a kernel: its entry
point, arguments, dtypes, fixed launch geometry and compiled payload.  Its
``abi`` says how the payload's parameters are laid out: one pointer per buffer
(in parameter order), then one ``i64`` element count per buffer, then a pointer
to the 4 x i64 status word (zeroed before the launch; non-zero after it means
the launch failed, see :func:`accy.backends.llvm.status_error`).
"""

from __future__ import annotations

import enum
from typing import Iterator, Protocol

import attrs

from ..dsl.ir import Graph
from ..dsl.schedule import Launch, Limits
from ..dsl.types import DType
from .codegen import emit_ptx
from .llvm import Target

ABI = "accy-v1: ptr buffer[n] (8 readable bytes even if empty), i64 count[n], ptr status[4 x i64]"


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


@attrs.frozen
class FixedLaunch:
    """Launch geometry fixed when the artifact was built."""

    grid: tuple[int, int, int]
    threadgroup: tuple[int, int, int]

    @property
    def block(self) -> tuple[int, int, int]:
        return self.threadgroup


@attrs.frozen(eq=False)
class KernelArtifact:
    target: str
    version: int
    format: ArtifactFormat
    entry_name: str
    argument_count: int
    parameter_names: tuple[str, ...]
    required_dtypes: DTypeSet
    launch: FixedLaunch
    payload: str
    arch: str
    abi: str = ABI
    graph: Graph | None = attrs.field(default=None, repr=False)


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

    def compile(self, graph: Graph, launch: Launch) -> tuple[str, str]:
        """Compile ``graph`` for ``launch``; returns (payload, arch)."""

    def load(self, artifact: KernelArtifact):
        """Make ``artifact`` callable; returns a handle for :meth:`launch`."""

    def launch(self, handle, binding) -> None:
        """Run a loaded artifact on bound arguments."""


@attrs.define
class RecordingBackendState:
    """Compiles real PTX and records loads and launches instead of performing them."""

    kind: BackendKind = BackendKind.cuda
    format: ArtifactFormat = ArtifactFormat.cuda_ptx
    arch: str = "sm_80"
    fast_exp: bool = False
    compiled: list = attrs.field(factory=list)
    loaded: list = attrs.field(factory=list)
    launched: list = attrs.field(factory=list)

    def compile(self, graph: Graph, launch: Launch) -> tuple[str, str]:
        ptx = emit_ptx(graph, Target.nvptx(self.arch, fast_exp=self.fast_exp), launch.block)
        self.compiled.append((graph.name, self.arch))
        return ptx, self.arch

    def load(self, artifact: KernelArtifact):
        self.loaded.append(artifact.entry_name)
        return artifact

    def launch(self, handle: KernelArtifact, binding) -> None:
        sizes = tuple(binding.flat[name].size for name in handle.parameter_names)
        self.launched.append((handle.entry_name, handle.launch, sizes))


@attrs.frozen(eq=False)
class KernelCallArtifact:
    """The artifacts built for one call site, and the backend state that built them."""

    artifacts: tuple[KernelArtifact, ...]
    backend_state: object

    def registry(self) -> Registry:
        return Registry(self.artifacts)


def create_kernel_call_artifact(program, state: BackendState, *, target: str, version: int = 1,
                                limits: Limits | None = None) -> KernelCallArtifact:
    """Compile ``program`` with ``state`` into a registry-ready artifact."""
    launch = program.launch(limits)
    graph = program.graph
    payload, arch = state.compile(graph, launch)
    artifact = KernelArtifact(
        target=target,
        version=version,
        format=state.format,
        entry_name=graph.name,
        argument_count=len(graph.params),
        parameter_names=tuple(p.name for p in graph.params),
        required_dtypes=DTypeSet.of(p.dtype for p in graph.params),
        launch=FixedLaunch(launch.grid, launch.block),
        payload=payload,
        arch=arch,
        graph=graph,
    )
    return KernelCallArtifact((artifact,), state)
