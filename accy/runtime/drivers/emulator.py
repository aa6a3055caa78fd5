"""accy's PTX emulator (:class:`accy.emulator.Device`) behind the driver interface: what
``backend="ptx"`` launches on, through the same :class:`~accy.runtime.gpu.DeviceLaunch` as the
GPU drivers.  It runs on the CPU and completes every call before returning, so it has no
streams (the default, None, is the only one) and its events read the wall clock."""

from __future__ import annotations

import time

import numpy as np

from ...emulator.tensor_map import encode
from . import KernelLaunch, stream_error


class EmulatorDriver:
    name = "emulator"

    def __init__(self, device, arch: str = "sm_80", schedule=None):
        self.device, self.arch, self.schedule = device, arch, schedule

    def push_context(self) -> None:
        pass

    def pop_context(self) -> None:
        pass

    def stream(self, obj):
        if obj is not None:
            raise stream_error(self.name, obj, "no streams (every call completes before it returns)")
        return None

    def load(self, ptx: str, entry: str):
        return self.device.load_module(ptx).function(entry)

    def launch(self, kernel, spec: KernelLaunch, stream) -> None:
        kernel.launch(spec.grid, spec.block, spec.params, spec.shared_bytes, schedule=self.schedule)

    def tensor_map(self, fields) -> bytes:
        return encode(fields)  # the emulated driver's own format

    def synchronize(self, stream) -> None:
        pass

    def record(self, stream) -> float:
        return time.perf_counter()

    def elapsed_ms(self, start: float, end: float) -> float:
        return (end - start) * 1e3

    def alloc(self, nbytes: int) -> int:
        return self.device.alloc(nbytes)

    def free(self, address: int) -> None:
        self.device.free(address)

    def copy_to_device(self, address: int, host: np.ndarray, stream) -> None:
        self.device.copy_to_device(address, host)

    def copy_from_device(self, host: np.ndarray, address: int, stream) -> None:
        self.device.copy_from_device(host, address)

    def copy_device(self, dst: int, src: int, nbytes: int, stream) -> None:
        self.device.copy_device(dst, src, nbytes)

    def memset(self, address: int, value: int, nbytes: int, stream) -> None:
        self.device.memset(address, value, nbytes)
