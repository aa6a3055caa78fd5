"""The ``cuda`` backend: the graph's PTX loaded and launched on an NVIDIA GPU.

:class:`CudaBackendState` implements the recording state's interface for real: it
compiles PTX for the device's compute capability, loads it through its driver (modules
cached per state), and launches the entry with the artifact's grid and block.  The
driver is cuda.core or PyCUDA (:mod:`accy.runtime.drivers`; ``ACCY_CUDA_DRIVER`` picks,
default the one installed, cuda.core first).

Arguments may be NumPy arrays (copied to the device and back) or any CUDA array with
``__cuda_array_interface__`` (PyTorch CUDA tensors, CuPy arrays, PyCUDA ``GPUArray``s) or
``__dlpack__`` (JAX arrays; torch bf16 and fp8 tensors, whose interface refuses the type),
used in place with no host copy; a tensor of another library in host memory (a torch CPU
tensor) is refused, naming both devices.  The checks are the CPU backends' (dtype, element count,
contiguity, read-only and aliased outputs).  The launch itself is
:class:`accy.runtime.gpu.DeviceLaunch`, shared with the ``ptx`` backend: outputs are
computed into device scratch buffers and copied to the caller's arrays only after the
status word says the launch succeeded, so a failing launch leaves every argument
untouched, on the host and on the device.  ``stream=`` (a torch or CuPy stream, or the
driver's own) puts every copy and the launch on that stream; the call returns once
they are done.

Importing accy imports neither driver; ``backend="cuda"`` without one, or without a
device, raises :class:`~accy.errors.BackendUnavailableError` saying which, and how to
fix it.
"""

from __future__ import annotations

import hashlib
import threading
import weakref

import attrs
import numpy as np

from ..dsl.ir import Graph
from ..dsl.schedule import Launch
from ..errors import ArgumentError
from .arguments import ArrayInfo, Binding, device_array, host_info, refuse_host_tensor_on_cuda
from .artifacts import ArtifactFormat, BackendKind, KernelArtifact, build_artifact
from .contract import Backend
from .drivers import Driver, open_driver
from .gpu import DeviceLaunch, kernel_ptx, launch_graph
from ..targets import Target

_state_lock = threading.Lock()
_states: dict[int, "CudaBackendState"] = {}


def device_info(name: str, a) -> ArrayInfo:
    """Describe a NumPy array (copied to the device and back) or a CUDA array
    (``__cuda_array_interface__`` or a CUDA DLPack capsule, used in place); a tensor of another
    library in host memory is an error naming both devices."""
    array = device_array(name, a)
    if array is None:
        refuse_host_tensor_on_cuda(name, a)
        if isinstance(a, np.ndarray):
            return host_info(name, a)
        raise ArgumentError(
            f"argument '{name}': expected a numpy.ndarray or a CUDA array (__cuda_array_interface__ or "
            f"__dlpack__: a torch CUDA tensor, a CuPy or JAX array, a pycuda GPUArray), got {type(a).__name__}"
        )
    return ArrayInfo(array.dtype, array.shape, array.c_contiguous, not array.read_only, array.address, "cuda",
                     array.strides)


@attrs.define(eq=False)
class LoadedKernel:
    artifact: KernelArtifact
    function: object


@attrs.define(eq=False)
class CudaBackendState:
    """One device through one driver: its compiled and loaded modules."""

    device: int = 0
    # a Driver (accy.runtime.drivers); None: the one ACCY_CUDA_DRIVER picks, opened on ``device``
    driver: Driver | None = None
    kind: BackendKind = BackendKind.cuda
    format: ArtifactFormat = ArtifactFormat.cuda_ptx
    fast_math: bool = False
    _modules: dict = attrs.field(factory=dict)
    artifacts: weakref.WeakKeyDictionary = attrs.field(factory=weakref.WeakKeyDictionary)
    _lock: threading.RLock = attrs.field(factory=threading.RLock)

    def __attrs_post_init__(self):
        if self.driver is None:
            self.driver = open_driver(self.device)

    @property
    def arch(self) -> str:
        return self.driver.arch

    def __enter__(self):
        self.driver.push_context()
        return self

    def __exit__(self, *exc):
        self.driver.pop_context()

    def compile(self, graph: Graph, block: tuple[int, int, int]) -> tuple[str, str]:
        arch = self.arch
        return kernel_ptx(graph, Launch((1, 1, 1), block), arch, self.fast_math), arch

    def load(self, artifact: KernelArtifact) -> LoadedKernel:
        key = hashlib.sha256(artifact.payload.encode()).hexdigest()
        with self._lock, self:
            loaded = self._modules.get(key)
            if loaded is None:
                kernel = self.driver.load(artifact.payload, artifact.entry_name)
                loaded = self._modules[key] = LoadedKernel(artifact, kernel)
            return loaded

    def launch(self, handle: LoadedKernel, binding: Binding, launch: Launch, *, timing: bool = False,
               stream=None) -> float | None:
        """Run on checked arguments, on ``stream`` (see the module); returns the kernel's time in
        ms with ``timing``."""
        with self._lock, self:
            native = self.driver.stream(stream)
            return DeviceLaunch(self.driver, handle.artifact.graph, binding, launch, native).run(
                handle.function, timing=timing)


def default_state(device: int = 0) -> CudaBackendState:
    """The process's backend state for ``device`` (created on first use)."""
    with _state_lock:
        state = _states.get(device)
        if state is None:
            state = _states[device] = CudaBackendState(device)
        return state


def execute(graph: Graph, binding: Binding, launch: Launch, *, device: int = 0,
            timing: bool = False, stream=None) -> float | None:
    """Run ``graph`` on the GPU, on ``stream`` when given; returns the kernel time in ms when ``timing``."""
    state = default_state(device)
    if launch.lanes == 0:
        with state:
            state.driver.stream(stream)  # checked all the same
        return 0.0 if timing else None
    graph = launch_graph(graph, binding, launch)  # 32-bit index arithmetic where this launch's indices fit
    per_graph = state.artifacts.setdefault(graph, {})
    artifact = per_graph.get(launch.block)
    if artifact is None:  # compile once per graph and block shape, not per launch
        artifact = per_graph[launch.block] = build_artifact(graph, None, launch.block, state, target=graph.name)
    return state.launch(state.load(artifact), binding, launch, timing=timing, stream=stream)


BACKEND = Backend("cuda", frozenset({"device", "timing", "stream"}), execute, device_info,
                  lambda options: default_state(options.get("device", 0)),
                  target=lambda arch: Target.nvptx(arch or "sm_80"),  # the device's arch is taken to be sm_80 or later
                  on_gpu=True, device=lambda options: _device_text(options.get("device", 0)))


def _device_text(device: int) -> str:
    return f"cuda {default_state(device).arch} (device {device})"
