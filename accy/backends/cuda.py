"""The PyCUDA backend: the graph's PTX loaded and launched on an NVIDIA GPU.

:class:`CudaBackendState` implements the recording state's interface for real:
it compiles PTX for the device's compute capability, loads it with
``module_from_buffer`` (modules cached per context), and launches the entry
with the artifact's grid and block.

Arguments may be NumPy arrays (copied to the device and back), PyCUDA
``GPUArray``s, or any object with ``__cuda_array_interface__`` (CuPy arrays,
PyTorch CUDA tensors), used in place with no host copy.  The checks are the
CPU backends' (dtype, element count, contiguity, read-only and aliased outputs).
The launch itself is :class:`accy.backends.gpu.DeviceLaunch`, shared with the
``ptx`` backend: outputs are computed into device scratch buffers and copied to
the caller's arrays only after the status word says the launch succeeded, so a
failing launch leaves every argument untouched, on the host and on the device.

Importing accy never imports pycuda; ``backend="cuda"`` without pycuda or
without a device raises :class:`~accy.errors.BackendUnavailableError` saying
which, and how to fix it.
"""

from __future__ import annotations

import hashlib
import threading
import weakref

import attrs
import numpy as np

from ..dsl.ir import Graph
from ..dsl.schedule import Launch
from ..errors import ArgumentError, BackendUnavailableError
from .abi import scalar_bits
from .arguments import ArrayInfo, Binding, host_info
from .artifacts import ArtifactFormat, BackendKind, KernelArtifact, build_artifact
from .contract import Backend
from .gpu import DeviceLaunch, PycudaDevice, kernel_ptx

_state_lock = threading.Lock()
_states: dict[int, "CudaBackendState"] = {}


def _driver():
    try:
        import pycuda.driver as drv
    except ImportError as e:
        raise BackendUnavailableError(
            f"backend 'cuda' needs pycuda, which could not be imported ({e}): pip install 'accy[cuda]' "
            "on a machine with an NVIDIA driver and the CUDA toolkit (pycuda builds against it)"
        ) from None
    try:
        drv.init()
        count = drv.Device.count()
    except Exception as e:  # pycuda raises its own LogicError/RuntimeError types
        raise BackendUnavailableError(f"backend 'cuda' found no usable NVIDIA driver: {e}") from None
    if count == 0:
        raise BackendUnavailableError("backend 'cuda' found no NVIDIA GPU (the driver reports 0 devices)")
    return drv


def _c_contiguous(shape, strides, itemsize) -> bool:
    if strides is None:
        return True
    expected = itemsize
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


def device_info(name: str, a) -> ArrayInfo:
    """Describe a NumPy array or a device array (``__cuda_array_interface__``)."""
    interface = getattr(a, "__cuda_array_interface__", None)
    if interface is None:
        if isinstance(a, np.ndarray):
            return host_info(name, a)
        raise ArgumentError(
            f"argument '{name}': expected a numpy.ndarray, a pycuda GPUArray or an object with "
            f"__cuda_array_interface__, got {type(a).__name__}"
        )
    shape = tuple(int(n) for n in interface["shape"])
    dtype = np.dtype(interface["typestr"])
    strides = interface.get("strides")
    address, read_only = interface["data"]
    return ArrayInfo(dtype, shape, _c_contiguous(shape, strides, dtype.itemsize), not read_only,
                     int(address or 0), "cuda", tuple(strides) if strides else None)


@attrs.define(eq=False)
class LoadedKernel:
    artifact: KernelArtifact
    function: object


@attrs.define(eq=False)
class CudaBackendState:
    """One device's context, its compiled and loaded modules."""

    device: int = 0
    kind: BackendKind = BackendKind.cuda
    format: ArtifactFormat = ArtifactFormat.cuda_ptx
    fast_math: bool = False
    _drv: object = None
    _context: object = None
    _modules: dict = attrs.field(factory=dict)
    artifacts: weakref.WeakKeyDictionary = attrs.field(factory=weakref.WeakKeyDictionary)
    _lock: threading.RLock = attrs.field(factory=threading.RLock)

    def __attrs_post_init__(self):
        self._drv = _driver()
        if not 0 <= self.device < self._drv.Device.count():
            raise BackendUnavailableError(f"backend 'cuda': no device {self.device} "
                                          f"(the driver reports {self._drv.Device.count()})")
        self._context = self._drv.Device(self.device).retain_primary_context()

    @property
    def arch(self) -> str:
        major, minor = self._drv.Device(self.device).compute_capability()
        return f"sm_{major}{minor}"

    def __enter__(self):
        self._context.push()
        return self

    def __exit__(self, *exc):
        self._drv.Context.pop()

    def compile(self, graph: Graph, block: tuple[int, int, int]) -> tuple[str, str]:
        arch = self.arch
        return kernel_ptx(graph, Launch((1, 1, 1), block), arch, self.fast_math), arch

    def load(self, artifact: KernelArtifact) -> LoadedKernel:
        key = hashlib.sha256(artifact.payload.encode()).hexdigest()
        with self._lock, self:
            loaded = self._modules.get(key)
            if loaded is None:
                module = self._drv.module_from_buffer(artifact.payload.encode() + b"\0")  # the driver wants C text
                function = module.get_function(artifact.entry_name)
                graph = artifact.graph
                n = len(graph.buffers)
                scalars = "".join(_SCALAR_FORMATS[scalar_bits(p.dtype)] for p in graph.scalars)
                function.prepare("P" * n + "q" * n + scalars + "P")
                loaded = self._modules[key] = LoadedKernel(artifact, (module, function))
            return loaded

    def launch(self, handle: LoadedKernel, binding: Binding, launch: Launch, *, timing: bool = False) -> float | None:
        """Run on checked arguments; returns the kernel's time in ms with ``timing``."""
        drv = self._drv
        _, function = handle.function

        def call(grid, block, args):
            start, end = (drv.Event(), drv.Event()) if timing else (None, None)
            if start is not None:
                start.record()
            function.prepared_call(grid, block, *args)
            if end is not None:
                end.record()
            drv.Context.synchronize()
            return start.time_till(end) if timing else None

        with self._lock, self:
            return DeviceLaunch(PycudaDevice(drv), handle.artifact.graph, binding, launch).run(call)


_SCALAR_FORMATS = {8: "B", 16: "H", 32: "I", 64: "Q"}


def default_state(device: int = 0) -> CudaBackendState:
    """The process's backend state for ``device`` (created on first use)."""
    with _state_lock:
        state = _states.get(device)
        if state is None:
            state = _states[device] = CudaBackendState(device)
        return state


def execute(graph: Graph, binding: Binding, launch: Launch, *, device: int = 0,
            timing: bool = False) -> float | None:
    """Run ``graph`` on the GPU; returns the kernel time in ms when ``timing``."""
    state = default_state(device)
    if launch.lanes == 0:
        return 0.0 if timing else None
    per_graph = state.artifacts.setdefault(graph, {})
    artifact = per_graph.get(launch.block)
    if artifact is None:  # compile once per graph and block shape, not per launch
        artifact = per_graph[launch.block] = build_artifact(graph, None, launch.block, state, target=graph.name)
    return state.launch(state.load(artifact), binding, launch, timing=timing)


BACKEND = Backend("cuda", frozenset({"device", "timing"}), execute, device_info,
                  lambda options: default_state(options.get("device", 0)))
