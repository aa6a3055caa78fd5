"""The GPU through NVIDIA's ``cuda.core`` (with ``cuda.bindings``): wheels only, and PTX is
loaded by the driver's own JIT, so no CUDA toolkit is needed at install or at run time.

``cuda.core`` loads the module, launches (``launch(stream, LaunchConfig, kernel, *params)``)
and owns streams and events; memory goes through the driver API in ``cuda.bindings``
(``cuMemAlloc``, ``cuMemcpy*Async`` on the launch's stream), which is the same in every
``cuda.core`` release.
"""

from __future__ import annotations

import attrs
import numpy as np

from ...errors import BackendUnavailableError, ExecutionError
from ...targets import STATIC_SHARED_BYTES, device_arch
from . import KernelLaunch, encode_tiled, foreign_stream_handle, stream_error


def _import_core():
    import cuda.core as core

    if not hasattr(core, "LaunchConfig"):  # releases before 0.5 keep the API in cuda.core.experimental
        from cuda.core import experimental as core
    return core


@attrs.define(eq=False)
class _Kernel:
    code: object  # the ObjectCode: keeps the module loaded
    kernel: object
    dynamic_shared: int = 0  # the dynamic shared memory the kernel was opted into (past 48 KiB)


class _StreamHandle:
    """A raw ``CUstream`` behind the CUDA stream protocol (for releases without ``Stream.from_handle``)."""

    def __init__(self, handle: int):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


class CudaCoreDriver:
    """One GPU through cuda.core.  ``core`` and ``cu`` (``cuda.bindings.driver``) are the modules
    to use, imported when not given."""

    name = "cuda-core"

    def __init__(self, device: int = 0, *, core=None, cu=None):
        try:
            self.core = _import_core() if core is None else core
            if cu is None:
                from cuda.bindings import driver as cu
            self.cu = cu
            self._check(cu.cuInit(0), "cuInit")
            count = self._check(cu.cuDeviceGetCount(), "cuDeviceGetCount")
        except ImportError as e:
            raise BackendUnavailableError(f"backend 'cuda' could not import cuda.core and cuda.bindings ({e}): "
                                          "pip install 'accy[cuda]'") from None
        except ExecutionError as e:
            raise BackendUnavailableError(f"backend 'cuda' found no usable NVIDIA driver (through cuda.core): {e}") \
                from None
        except Exception as e:  # cuda.pathfinder's DynamicLibNotFoundError when there is no libcuda
            raise BackendUnavailableError(f"backend 'cuda' found no usable NVIDIA driver (through cuda.core): "
                                          f"{type(e).__name__}: {e}") from None
        if count == 0:
            raise BackendUnavailableError("backend 'cuda' found no NVIDIA GPU (the driver reports 0 devices)")
        if not 0 <= device < count:
            raise BackendUnavailableError(f"backend 'cuda': no device {device} (the driver reports {count})")
        self.ordinal = device
        self.push_context()
        major, minor = tuple(self.core.Device(device).compute_capability)
        self.arch = device_arch(major, minor)

    def _check(self, result, what: str):
        """A ``cuda.bindings`` call's result ``(CUresult, *values)``: the values, or an error."""
        error, *values = result if isinstance(result, tuple) else (result,)
        if error != self.cu.CUresult.CUDA_SUCCESS:
            name = getattr(error, "name", None) or str(error)
            raise ExecutionError(f"cuda-core driver: {what} failed with {name}")
        return values[0] if len(values) == 1 else tuple(values) or None

    # -- context and streams -------------------------------------------------------------------
    def push_context(self) -> None:
        self.core.Device(self.ordinal).set_current()  # the primary context, current on this thread

    def pop_context(self) -> None:
        pass  # set_current replaces rather than pushes: nothing to undo

    def stream(self, obj):
        if obj is None:
            return self.core.Device(self.ordinal).default_stream
        if isinstance(obj, self.core.Stream):
            return obj
        handle = foreign_stream_handle(obj)
        if handle is None:
            raise stream_error(self.name, obj, "a cuda.core Stream or a stream with __cuda_stream__ or "
                                               ".cuda_stream (torch.cuda.Stream, cupy.cuda.Stream)")
        from_handle = getattr(self.core.Stream, "from_handle", None)
        if from_handle is not None:
            return from_handle(handle)
        return self.core.Device(self.ordinal).create_stream(_StreamHandle(handle))

    @staticmethod
    def _handle(stream):
        return stream.handle

    # -- modules and launches --------------------------------------------------------------------
    def load(self, ptx: str, entry: str) -> _Kernel:
        code = self.core.ObjectCode.from_ptx(ptx.encode() + b"\0", name=entry)  # the driver reads C text
        return _Kernel(code, code.get_kernel(entry))

    def launch(self, kernel: _Kernel, spec: KernelLaunch, stream) -> None:
        if spec.shared_bytes > max(kernel.dynamic_shared, STATIC_SHARED_BYTES):  # past 48 KiB: opt the kernel in
            attribute = self.cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            self._check(self.cu.cuKernelSetAttribute(attribute, spec.shared_bytes, kernel.kernel._handle,
                                                     self.cu.CUdevice(self.ordinal)), "cuKernelSetAttribute")
            kernel.dynamic_shared = spec.shared_bytes
        if spec.has_maps:  # a tensor map is a 128-byte struct: launched with the parameters laid out by hand
            self._launch_raw(kernel, spec, stream)
            return
        config = self.core.LaunchConfig(grid=spec.grid, block=spec.block, shmem_size=spec.shared_bytes)
        self.core.launch(stream, config, kernel.kernel, *spec.params)

    def _launch_raw(self, kernel: _Kernel, spec: KernelLaunch, stream) -> None:
        """``cuLaunchKernel`` with ``kernelParams``: a pointer to each parameter's bytes (the
        driver places each at its offset); a CUkernel stands for a CUfunction since CUDA 12."""
        import ctypes

        held = [(ctypes.c_uint8 * p.dtype.itemsize).from_buffer_copy(np.asarray(p).tobytes()) for p in spec.params]
        pointers = (ctypes.c_void_p * len(held))(*(ctypes.addressof(h) for h in held))
        handle = self.cu.CUfunction(int(kernel.kernel._handle))
        self._check(self.cu.cuLaunchKernel(handle, *spec.grid, *spec.block, spec.shared_bytes,
                                           self.cu.CUstream(int(self._handle(stream))), ctypes.addressof(pointers), 0),
                    "cuLaunchKernel")

    def tensor_map(self, fields) -> bytes:
        return encode_tiled(self.cu, fields)

    def synchronize(self, stream) -> None:
        stream.sync()

    def record(self, stream):
        return stream.record(options=self.core.EventOptions(enable_timing=True))

    def elapsed_ms(self, start, end) -> float:
        end.sync()
        return float(end - start)

    # -- memory ----------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        return int(self._check(self.cu.cuMemAlloc(nbytes), f"cuMemAlloc({nbytes})"))

    def free(self, address: int) -> None:
        self._check(self.cu.cuMemFree(address), "cuMemFree")

    def copy_to_device(self, address: int, host: np.ndarray, stream) -> None:
        # from pageable memory the call returns once the bytes are staged: ``host`` may go away then
        self._check(self.cu.cuMemcpyHtoDAsync(address, host.ctypes.data, host.nbytes, self._handle(stream)),
                    "cuMemcpyHtoDAsync")

    def copy_from_device(self, host: np.ndarray, address: int, stream) -> None:
        self._check(self.cu.cuMemcpyDtoHAsync(host.ctypes.data, address, host.nbytes, self._handle(stream)),
                    "cuMemcpyDtoHAsync")
        self._check(self.cu.cuStreamSynchronize(self._handle(stream)), "cuStreamSynchronize")

    def copy_device(self, dst: int, src: int, nbytes: int, stream) -> None:
        self._check(self.cu.cuMemcpyDtoDAsync(dst, src, nbytes, self._handle(stream)), "cuMemcpyDtoDAsync")

    def memset(self, address: int, value: int, nbytes: int, stream) -> None:
        self._check(self.cu.cuMemsetD8Async(address, value, nbytes, self._handle(stream)), "cuMemsetD8Async")
