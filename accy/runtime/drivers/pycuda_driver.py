"""The GPU through PyCUDA (``pip install 'accy[pycuda]'``, built against the CUDA toolkit).

Kernels launch as prepared calls (``prepare`` with the parameters' struct codes, then
``prepared_async_call`` on the stream); the device's primary context is pushed around
every use.  PyCUDA cannot wrap a stream another library made, so ``stream=`` takes a
``pycuda.driver.Stream`` here (the cuda-core driver takes torch's and CuPy's).
"""

from __future__ import annotations

import numpy as np

from ...errors import BackendUnavailableError
from ...targets import STATIC_SHARED_BYTES, device_arch
from . import KernelLaunch, encode_tiled, stream_error


class _Kernel:
    def __init__(self, module, function):
        self.module, self.function = module, function  # the module must outlive the function
        self.format: str | None = None  # the struct codes it was prepared with
        self.dynamic_shared = 0  # the dynamic shared memory it was opted into (past 48 KiB)


class PycudaDriver:
    """One GPU through PyCUDA; ``drv`` is ``pycuda.driver``, imported when not given."""

    name = "pycuda"

    def __init__(self, device: int = 0, *, drv=None):
        if drv is None:
            try:
                import pycuda.driver as drv
            except ImportError as e:
                raise BackendUnavailableError(f"backend 'cuda' could not import pycuda ({e}): pip install "
                                              "'accy[pycuda]' (pycuda builds against the CUDA toolkit)") from None
        self.drv = drv
        try:
            drv.init()
            count = drv.Device.count()
        except Exception as e:  # pycuda raises its own LogicError/RuntimeError types
            raise BackendUnavailableError(f"backend 'cuda' found no usable NVIDIA driver (through pycuda): {e}") \
                from None
        if count == 0:
            raise BackendUnavailableError("backend 'cuda' found no NVIDIA GPU (the driver reports 0 devices)")
        if not 0 <= device < count:
            raise BackendUnavailableError(f"backend 'cuda': no device {device} (the driver reports {count})")
        self.ordinal = device
        self.context = drv.Device(device).retain_primary_context()
        major, minor = drv.Device(device).compute_capability()
        self.arch = device_arch(major, minor)
        self.live: dict[int, object] = {}  # address -> its DeviceAllocation

    # -- context and streams -------------------------------------------------------------------
    def push_context(self) -> None:
        self.context.push()

    def pop_context(self) -> None:
        self.drv.Context.pop()

    def stream(self, obj):
        if obj is None or isinstance(obj, self.drv.Stream):
            return obj  # None: the default stream
        raise stream_error(self.name, obj, "a pycuda.driver.Stream (for a torch or CuPy stream use "
                                           "ACCY_CUDA_DRIVER=cuda-core)")

    # -- modules and launches --------------------------------------------------------------------
    def load(self, ptx: str, entry: str) -> _Kernel:
        module = self.drv.module_from_buffer(ptx.encode() + b"\0")  # the driver reads C text
        return _Kernel(module, module.get_function(entry))

    def launch(self, kernel: _Kernel, spec: KernelLaunch, stream) -> None:
        if kernel.format != spec.struct_format:
            kernel.function.prepare(spec.struct_format)
            kernel.format = spec.struct_format
        if spec.shared_bytes > max(kernel.dynamic_shared, STATIC_SHARED_BYTES):  # past 48 KiB: opt the kernel in
            kernel.function.set_attribute(self.drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, spec.shared_bytes)
            kernel.dynamic_shared = spec.shared_bytes
        params = [p.tobytes() if p.dtype.kind == "V" else p for p in spec.params]  # a map packs as "128s"
        kernel.function.prepared_async_call(spec.grid, spec.block, stream, *params,
                                            shared_size=spec.shared_bytes)

    def tensor_map(self, fields) -> bytes:
        from cuda.bindings import driver as cu  # PyCUDA has no tensor maps; the driver API's bindings do

        return encode_tiled(cu, fields)

    def synchronize(self, stream) -> None:
        if stream is None:
            self.drv.Context.synchronize()
        else:
            stream.synchronize()

    def record(self, stream):
        event = self.drv.Event()
        event.record(stream)
        return event

    def elapsed_ms(self, start, end) -> float:
        end.synchronize()
        return float(start.time_till(end))

    # -- memory ----------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        allocation = self.drv.mem_alloc(nbytes)
        self.live[int(allocation)] = allocation
        return int(allocation)

    def free(self, address: int) -> None:
        self.live.pop(address).free()

    def copy_to_device(self, address: int, host: np.ndarray, stream) -> None:
        if stream is None:
            self.drv.memcpy_htod(address, host)
        else:
            self.drv.memcpy_htod_async(address, host, stream)

    def copy_from_device(self, host: np.ndarray, address: int, stream) -> None:
        if stream is None:
            self.drv.memcpy_dtoh(host, address)
        else:
            self.drv.memcpy_dtoh_async(host, address, stream)
            stream.synchronize()

    def copy_device(self, dst: int, src: int, nbytes: int, stream) -> None:
        if stream is None:
            self.drv.memcpy_dtod(dst, src, nbytes)
        else:
            self.drv.memcpy_dtod_async(dst, src, nbytes, stream)

    def memset(self, address: int, value: int, nbytes: int, stream) -> None:
        if stream is None:
            self.drv.memset_d8(address, value, nbytes)
        else:
            self.drv.memset_d8_async(address, value, nbytes, stream)
