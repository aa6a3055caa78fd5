"""The PyCUDA backend: the graph's PTX loaded and launched on an NVIDIA GPU.

:class:`CudaBackendState` implements the recording state's interface for real:
it compiles PTX for the device's compute capability, loads it with
``module_from_buffer`` (modules cached per context), and launches the entry
with the artifact's grid and block.

Arguments may be NumPy arrays (copied to the device and back), PyCUDA
``GPUArray``s, or any object with ``__cuda_array_interface__`` (CuPy arrays,
PyTorch CUDA tensors), used in place with no host copy.  The checks are the
CPU backends' (dtype, element count, contiguity, read-only and aliased outputs).
Outputs are computed into device scratch buffers and copied to the caller's
arrays only after the status word says the launch succeeded, so a failing
launch leaves every argument untouched, on the host and on the device.

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
from .abi import STATUS_WORDS, scalar_bits, scalar_words, status_error
from .arguments import ArrayInfo, Binding, host_info
from .artifacts import ArtifactFormat, BackendKind, KernelArtifact, build_artifact
from .codegen import emit_ptx
from .contract import Backend
from .llvm import Target

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
        return emit_ptx(graph, Target.nvptx(arch, fast_math=self.fast_math), block), arch

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
        with self._lock, self:
            return _Launch(self._drv, handle, binding, launch).run(timing)


_SCALAR_FORMATS = {8: "B", 16: "H", 32: "I", 64: "Q"}


class _Launch:
    """Device buffers for one launch: staged, run, checked, copied back, freed."""

    def __init__(self, drv, handle: LoadedKernel, binding: Binding, launch: Launch):
        self.drv, self.handle, self.binding, self.launch = drv, handle, binding, launch
        self.allocations = []

    def _alloc(self, nbytes: int):
        allocation = self.drv.mem_alloc(max(nbytes, 8))
        self.allocations.append(allocation)
        return allocation

    def _stage(self, name: str) -> int:
        info, array = self.binding.infos[name], self.binding.arrays[name]
        if info.nbytes == 0:  # still 8 readable bytes, as the ABI promises checked loads
            return int(self._alloc(8))
        if info.space == "host":
            buffer = self._alloc(info.nbytes)
            if info.nbytes:
                self.drv.memcpy_htod(buffer, np.ascontiguousarray(array))
            return int(buffer)
        if name not in self.binding.outputs:
            return info.address  # device inputs are read in place
        scratch = self._alloc(info.nbytes)
        if info.nbytes:
            self.drv.memcpy_dtod(scratch, info.address, info.nbytes)
        return int(scratch)

    def run(self, timing: bool) -> float | None:
        artifact = self.handle.artifact
        graph = artifact.graph
        _, function = self.handle.function
        buffers = [p.name for p in graph.buffers]
        try:
            pointers = {name: self._stage(name) for name in buffers}
            status = self._alloc(STATUS_WORDS * 8)
            self.drv.memset_d8(status, 0, STATUS_WORDS * 8)
            counts = [np.int64(self.binding.infos[n].size) for n in buffers]
            args = ([pointers[n] for n in buffers] + counts + scalar_words(graph, self.binding.scalars)
                    + [int(status)])
            start, end = (self.drv.Event(), self.drv.Event()) if timing else (None, None)
            if start is not None:
                start.record()
            function.prepared_call(self.launch.grid, self.launch.block, *args)
            if end is not None:
                end.record()
            self.drv.Context.synchronize()
            words = np.zeros(STATUS_WORDS, np.int64)
            self.drv.memcpy_dtoh(words, status)
            error = status_error(graph, tuple(graph.body.walk()), words, self.binding.sizes, self.launch.extents)
            if error is not None:
                raise error
            for name in sorted(self.binding.outputs):
                self._copy_back(name, pointers[name])
            return start.time_till(end) if timing else None
        finally:
            for allocation in self.allocations:
                allocation.free()

    def _copy_back(self, name: str, pointer: int) -> None:
        info, array = self.binding.infos[name], self.binding.arrays[name]
        if not info.nbytes:
            return
        if info.space == "host":
            self.drv.memcpy_dtoh(array, pointer)  # contiguous (checked), so written in place
        else:
            self.drv.memcpy_dtod(info.address, pointer, info.nbytes)


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
